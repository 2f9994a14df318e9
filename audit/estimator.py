"""Coalition-size estimator (R5, 002 §5.5; spec/protocol.md §6).

Queries are linked when the cosine similarity of their embeddings is >= θ and their ledger positions are at
most ``window`` apart; clusters are connected components (union–find); a cluster's size is its number of
distinct accounts; ĉ is the largest size (1 when nothing links two accounts). Pass condition: ĉ <= k_max.
ε is computed from k_max, never from ĉ.

``coalition_size`` is exact (every pair within the window is compared), in blocks with numpy.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from accounting.errors import InvalidParameterError, check_positive_int


class _UnionFind:
    def __init__(self, n: int):
        self.parent = np.arange(n)

    def find(self, x: int) -> int:
        p = self.parent
        root = x
        while p[root] != root:
            root = p[root]
        while p[x] != root:
            p[x], x = root, p[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    n[n == 0] = 1.0
    return x / n


def link_pairs(embeddings: np.ndarray, theta: float, window: int, block: int = 2048) -> np.ndarray:
    """All pairs (i, j), i < j <= i + window, with cos(e_i, e_j) >= θ, as an (m, 2) int64 array."""
    e = _unit(embeddings)
    n = e.shape[0]
    window = check_positive_int("window", window)
    out = []
    for s in range(0, n, block):
        t = min(n, s + block)
        hi = min(n, t + window)
        sims = e[s:t] @ e[s:hi].T  # rows i in [s, t), cols j in [s, hi)
        ii, jj = np.nonzero(sims >= theta)
        jj = jj + s
        ii = ii + s
        keep = (jj > ii) & (jj - ii <= window)
        out.append(np.stack([ii[keep], jj[keep]], axis=1))
    return np.concatenate(out) if out else np.zeros((0, 2), dtype=np.int64)


def coalition_clusters(embeddings: np.ndarray, accounts: Sequence[str], theta: float, window: int) -> list[set[str]]:
    """The distinct-account sets of every cluster that spans >= 2 accounts."""
    e = np.asarray(embeddings)
    if e.ndim != 2 or e.shape[0] != len(accounts):
        raise InvalidParameterError("embeddings", "must be an (n, d) array with one row per account entry")
    if not (0 < float(theta) <= 1):
        raise InvalidParameterError("theta", "must lie in (0, 1]", theta)
    n = e.shape[0]
    uf = _UnionFind(n)
    for i, j in link_pairs(e, float(theta), window):
        uf.union(int(i), int(j))
    groups: dict[int, set[str]] = {}
    for i in range(n):
        groups.setdefault(uf.find(i), set()).add(accounts[i])
    return [g for g in groups.values() if len(g) >= 2]


def coalition_size(embeddings: np.ndarray, accounts: Sequence[str], theta: float, window: int) -> int:
    """ĉ: the largest number of distinct accounts in one cluster (1 if no cluster spans two accounts)."""
    if len(accounts) == 0:
        return 0
    clusters = coalition_clusters(embeddings, accounts, theta, window)
    return max((len(c) for c in clusters), default=1)
