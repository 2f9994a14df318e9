"""In-memory budget store: spend rows of the documents charged so far, lazily allocated.

Not durable: use it for experiments, tests and single-process serving where losing the spend on a crash
is acceptable (it never is for a deployment that must keep its privacy guarantee across restarts — use
``SqliteBudgetStore``).

Layout: an index ``slot[z]`` (int32/int64, one per document) into a compact ``rows`` array (capacity ×
width int64) holding, in order of first charge, the spend of the documents charged so far; row 0 stays
zero and is the slot of every document never charged, so a gather is a single fancy index. A document never charged
costs 4–8 bytes; a charged one ``8·width`` bytes. Compared with a dense N × width array this keeps the working set small
(a 10^6-document corpus over 156 orders would be a 1.25 GB array whose first touch per document is a page fault), which
is what makes a charge O(m · width) in practice as well as in theory.

A charge touching m documents gathers their m rows, decides with ``apply_batch``, then (after any growth
of ``rows``, the only step that can fail) records new slots and scatters the new rows, all under one lock:
concurrent threads see each batch entirely or not at all, and an error leaves the store unchanged.
"""

from __future__ import annotations

import threading
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from .base import BudgetStore, PreparedBatch, apply_batch


class MemoryBudgetStore(BudgetStore):
    """Budget store in process memory (see module docstring)."""

    _INITIAL_CAPACITY = 1024

    def __init__(self, n_docs: int):
        super().__init__(n_docs)
        self._slot: npt.NDArray[np.signedinteger[Any]] | None = None
        self._rows: npt.NDArray[np.int64] | None = None
        self._count = 1
        self._lock = threading.Lock()

    def _bind(self, limits: npt.NDArray[np.int64], descriptor: str) -> None:
        index_dtype = np.int32 if self.n_docs < 2**31 - 1 else np.int64
        self._slot = np.zeros(self.n_docs, dtype=index_dtype)
        # row 0 is a permanent zero row: slot 0 ("never charged") gathers zeros without masking
        self._rows = np.zeros((min(self._INITIAL_CAPACITY, self.n_docs) + 1, int(limits.size)), dtype=np.int64)
        self._count = 1

    def _bound(self) -> tuple[npt.NDArray[np.signedinteger[Any]], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(slot, rows, limits): set by ``_bind``; the base class calls ``_load``/``_charge`` only once bound."""
        return (
            cast(npt.NDArray[np.signedinteger[Any]], self._slot),
            cast(npt.NDArray[np.int64], self._rows),
            cast(npt.NDArray[np.int64], self._limits),
        )

    def _load(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        with self._lock:
            slot, rows, _ = self._bound()
            out: npt.NDArray[np.int64] = rows[slot[ids]]  # fancy indexing copies
            return out

    def _charge(self, batch: PreparedBatch) -> list[npt.NDArray[np.bool_]]:
        with self._lock:
            slot, store_rows, limits = self._bound()
            slots = slot[batch.union].astype(np.int64)
            current = store_rows[slots]
            if len(batch.costs) == 1:  # fast path (union == the request's ids, in order)
                cost = batch.costs[0]
                rows = current + cost
                ok = cast(npt.NDArray[np.bool_], (rows <= limits).all(axis=1))  # an array: axis=1 of a 2-d array
                masks = [ok]
                changed = np.flatnonzero(ok) if cost.any() else np.zeros(0, dtype=np.int64)
            else:
                rows, masks = apply_batch(current, batch, limits)
                changed = np.flatnonzero((rows != current).any(axis=1))
            if changed.size:
                new = changed[slots[changed] == 0]
                if new.size:
                    need = self._count + new.size
                    if need > store_rows.shape[0]:  # may raise MemoryError: nothing written yet
                        cap = min(self.n_docs + 1, max(need, 2 * store_rows.shape[0]))
                        grown = np.zeros((cap, store_rows.shape[1]), dtype=np.int64)
                        grown[: self._count] = store_rows[: self._count]
                        self._rows = store_rows = grown
                    fresh = np.arange(self._count, need, dtype=np.int64)
                    slots[new] = fresh
                    slot[batch.union[new]] = fresh
                    self._count = need
                store_rows[slots[changed]] = rows[changed]
        return masks

    def total_units(self) -> npt.NDArray[np.int64]:
        """Sum of recorded spend over all documents, per counter (for tests and reports)."""
        self._require_bound()
        with self._lock:
            _, rows, _ = self._bound()
            total: npt.NDArray[np.int64] = rows[1 : self._count].sum(axis=0)
            return total

    @property
    def n_recorded(self) -> int:
        """Number of documents with a spend row."""
        return self._count - 1
