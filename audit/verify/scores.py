"""The exact integer scores of spec/protocol.md §4 that §8.8 (retrieval replay) and §8.9 (generation) recompute
from the opened Q and the committed index: ``Scorer`` (picklable, for the worker pool) and ``ScoreCache`` (each
query scored once, kept compact within a memory budget, §8 item 13)."""

from __future__ import annotations

from bisect import bisect_left
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
    """The scores of §4 (``Scorer``), each query scored once: kept compact within ``budget`` bytes, and read once.
    The checks consume scores in ledger order (the retrieval replay keeps them, the generation check reads them), so
    when the budget is full the oldest blocks stay and newer ones are not kept (they are scored again when read;
    an empty cache keeps one block whatever its size, so a sequential reader scores each block once); a block goes
    as soon as each of its rows has been read. What it holds per query besides the blocks: two int32
    (its block and row), indexed by the query's place in ``run.queries`` (spec/protocol.md §8 item 13)."""

    BLOCK = 256
    BUDGET = 384 << 20

    def __init__(self, run: Run, budget: int | None = None):
        # made by the checks after §8.7, which run only with a policy
        super().__init__(cast(Policy, run.policy), {t: v["qf"] for t, v in run.tenants.items()})
        self.run = run
        self.budget = self.BUDGET if budget is None else budget
        self.queries = run.queries  # positions, increasing
        self._block = np.full(len(self.queries), -1, dtype=np.int32)  # query index -> its block id, -1: none
        self._at = np.zeros(len(self.queries), dtype=np.int32)  # query index -> its row in that block
        self._odd: dict[int, tuple[int, int]] = {}  # pos -> (block id, row), for a position not in ``queries``
        self.blocks: dict[int, np.ndarray] = {}  # block id -> compact matrix
        self._unread: dict[int, int] = {}  # block id -> its rows not yet read
        self.held = 0
        self.next_id = 0

    def _index(self, p: int) -> int:
        """The place of ``p`` in ``queries``, or -1."""
        k = bisect_left(self.queries, p)
        return k if k < len(self.queries) and self.queries[k] == p else -1

    def _score(self, positions: list[int]) -> np.ndarray:
        """int64 scores of the given positions (one tenant), computed now."""
        run = self.run
        return self.score_rows(_records(run)[positions[0]]["tenant"], [run.qembs[p] for p in positions])

    def keep_compact(self, positions: list[int], m: np.ndarray) -> None:
        """Keep the compact scores ``m`` of ``positions`` (row k: positions[k]) if the budget has room for them."""
        if not positions or (self.blocks and self.held + m.nbytes > self.budget):
            return  # full: the older blocks are read first (an empty cache keeps one block, whatever its size)
        bid = self.next_id
        self.next_id += 1
        self.blocks[bid] = m
        self._unread[bid] = 0
        self.held += m.nbytes
        for k, p in enumerate(positions):
            i = self._index(p)
            old = self._place(p, i)
            if old is not None:  # scored again while still held: the older row will not be read
                self._read(old[0])
            if i >= 0:
                self._block[i], self._at[i] = bid, k
            else:
                self._odd[p] = (bid, k)
            self._unread[bid] += 1

    def _place(self, p: int, i: int) -> tuple[int, int] | None:
        if i >= 0:
            bid = int(self._block[i])
            return None if bid < 0 else (bid, int(self._at[i]))
        return self._odd.get(p)

    def _read(self, bid: int) -> None:
        """One row of block ``bid`` has been read (or superseded): the block goes with its last row."""
        self._unread[bid] -= 1
        if not self._unread[bid]:
            del self._unread[bid]
            self.held -= self.blocks.pop(bid).nbytes

    def held_for(self, p: int) -> bool:
        return self._place(p, self._index(p)) is not None

    def _take(self, p: int) -> np.ndarray | None:
        """The int64 scores of ``p`` if held (they are then let go: each query is read once), else None."""
        i = self._index(p)
        got = self._place(p, i)
        if got is None:
            return None
        if i >= 0:
            self._block[i] = -1
        else:
            del self._odd[p]
        bid, k = got
        row = self.blocks[bid][k]
        out: np.ndarray = row.astype(np.int64) if self.dtype is None else row.astype(np.int64) + self.base
        self._read(bid)
        return out

    def rows_for(self, n_docs: int) -> int:
        """Queries scored per block for a tenant of ``n_docs``: at most 2^22 scores (32 MiB of float64)."""
        return max(1, min(self.BLOCK, (1 << 22) // max(1, n_docs)))

    def one(self, p: int) -> np.ndarray:
        row = self._take(p)
        if row is not None:
            return row
        # score the block of queries of this tenant that follow p in ledger order (the order the checks consume
        # them in), so that a sequential pass scores each block once
        run, records = self.run, _records(self.run)
        t = records[p]["tenant"]
        k = self._index(p)
        step = self.rows_for(run.tenants[t]["n"])
        nxt = [p] + (
            []
            if k < 0
            else [q for q in self.queries[k + 1 : k + step] if records[q]["tenant"] == t and not self.held_for(q)]
        )
        s = self._score(nxt)
        self.keep_compact(nxt[1:], self.compact(s[1:]))  # p's own row is read now
        first: np.ndarray = s[0]
        return first


def _records(run: Run) -> list[dict[str, Any]]:
    """``run.records`` as the scores read them: the records of query leaves §8.7 accepted, never None."""
    return cast("list[dict[str, Any]]", run.records)


def scores_of(run: Run, i: int) -> np.ndarray:
    """The exact integer scores of query leaf ``i`` (int64), from the shared cache."""
    if run.scores is None:
        run.scores = ScoreCache(run)
    return run.scores.one(i)
