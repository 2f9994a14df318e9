"""The exact integer scores of spec/protocol.md §4 that §8.8 (retrieval replay) and §8.9 (generation) recompute
from the opened Q and the committed index: ``Scorer`` (picklable, for the worker pool) and ``ScoreCache`` (each
query scored once, kept compact within a memory budget, §8 item 13)."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from ..protocol.policy import Policy
from .run import Run


class Scorer:
    """The exact integer scores of §4 of blocks of queries of one tenant, in one float64 matrix product
    (exact: |Σ E·Q| <= d·2^30 < 2^53, so any summation order gives the integers), and their compact form:
    the smallest unsigned type that holds the clipped range, offset by its low end. Picklable (the retrieval
    replay's workers get one holding the index of the tenants they score)."""

    def __init__(self, policy: Policy, qf: dict[str, np.ndarray]):
        r = policy.retrieval
        self.qf = qf  # tenant -> its index as float64
        self.clip, self.shift = r.score_clip, r.score_shift
        self.base = self.clip[0] >> self.shift
        span = (self.clip[1] >> self.shift) - self.base
        self.dtype = np.uint16 if span < 1 << 16 else np.uint32 if span < 1 << 32 else None

    def score_rows(self, tenant: str, qembs: list[bytes]) -> np.ndarray:
        """int64 scores of the given query embeddings (bytes of Q, already checked by §8.7), computed now."""
        qs = np.frombuffer(b"".join(qembs), dtype="<i2")
        dots = qs.reshape(len(qembs), -1).astype(np.float64) @ self.qf[tenant].T
        out: np.ndarray = np.right_shift(np.clip(dots.astype(np.int64), *self.clip), self.shift)
        return out

    def compact(self, s: np.ndarray) -> np.ndarray:
        return s if self.dtype is None else (s - self.base).astype(self.dtype)


class ScoreCache(Scorer):
    """The scores of §4 (``Scorer``), each query scored once: kept compact within ``budget`` bytes; beyond it
    the oldest blocks are dropped and re-scored on demand (bounded memory at any window size)."""

    BLOCK = 256
    BUDGET = 384 << 20

    def __init__(self, run: Run, budget: int | None = None):
        # made by the checks after §8.7, which run only with a policy
        super().__init__(cast(Policy, run.policy), {t: v["qf"] for t, v in run.tenants.items()})
        self.run = run
        self.budget = self.BUDGET if budget is None else budget
        self.rows: dict[int, tuple[int, int]] = {}  # pos -> (block id, row)
        self.blocks: dict[int, np.ndarray] = {}  # block id -> compact matrix (insertion order = age)
        self.held = 0
        self.next_id = 0
        self.order = {p: k for k, p in enumerate(run.queries)}

    def _score(self, positions: list[int]) -> np.ndarray:
        """int64 scores of the given positions (one tenant), computed now."""
        run = self.run
        return self.score_rows(_records(run)[positions[0]]["tenant"], [run.qembs[p] for p in positions])

    def _keep(self, positions: list[int], s: np.ndarray) -> None:
        self.keep_compact(positions, self.compact(s))

    def keep_compact(self, positions: list[int], m: np.ndarray) -> None:
        bid = self.next_id
        self.next_id += 1
        self.blocks[bid] = m
        self.held += m.nbytes
        for k, p in enumerate(positions):
            self.rows[p] = (bid, k)
        while self.held > self.budget and len(self.blocks) > 1:
            old = next(iter(self.blocks))
            self.held -= self.blocks.pop(old).nbytes

    def _row(self, p: int) -> np.ndarray | None:
        got = self.rows.get(p)
        if got is None or got[0] not in self.blocks:
            return None
        m: np.ndarray = self.blocks[got[0]][got[1]]
        return m if self.dtype is None else m.astype(np.int64) + self.base

    def rows_for(self, n_docs: int) -> int:
        """Queries scored per block for a tenant of ``n_docs``: at most 2^22 scores (32 MiB of float64)."""
        return max(1, min(self.BLOCK, (1 << 22) // max(1, n_docs)))

    def many(self, positions: list[int]) -> np.ndarray:
        """int64 scores of ``positions`` (all of one tenant) as a matrix, scoring the missing ones at once."""
        n = self.run.tenants[_records(self.run)[positions[0]]["tenant"]]["n"]
        out = np.empty((len(positions), n), dtype=np.int64)
        missing = []
        for k, p in enumerate(positions):
            row = self._row(p)
            if row is None:
                missing.append(k)
            else:
                out[k] = row
        step = self.rows_for(n)
        for a in range(0, len(missing), step):
            ks = missing[a : a + step]
            part = [positions[k] for k in ks]
            s = self._score(part)
            out[ks] = s
            self._keep(part, s)
        return out

    def one(self, p: int) -> np.ndarray:
        row = self._row(p)
        if row is None:
            # score the block of queries of this tenant that follow p in ledger order (the order the checks
            # consume them in), so that a sequential pass scores each block once
            run, records = self.run, _records(self.run)
            t = records[p]["tenant"]
            k = self.order.get(p)
            step = self.rows_for(run.tenants[t]["n"])
            nxt = (
                [p]
                if k is None
                else [q for q in run.queries[k : k + step] if records[q]["tenant"] == t and self._row(q) is None]
            )
            if nxt[0] != p:
                nxt.insert(0, p)
            self._keep(nxt, self._score(nxt))
            row = self._row(p)
        return cast(np.ndarray, row)  # the block just kept holds p (the budget never drops the newest block)


def _records(run: Run) -> list[dict[str, Any]]:
    """``run.records`` as the scores read them: the records of query leaves §8.7 accepted, never None."""
    return cast("list[dict[str, Any]]", run.records)


def scores_of(run: Run, i: int) -> np.ndarray:
    """The exact integer scores of query leaf ``i`` (int64), from the shared cache."""
    if run.scores is None:
        run.scores = ScoreCache(run)
    return run.scores.one(i)
