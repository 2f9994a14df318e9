"""Group commit (spec/provider.md §6): the write transactions of requests that reach the store at about the same
time run as ONE transaction — a batch of records (one after another, in arrival order), or a batch of answers
(under one checkpoint).

Every request writes twice: its record transaction (admission re-check, the filter's charges, the opening, the
ledger leaf, the served row; serialised on the ledger's tail) and, after generation, its answer transaction (a
checkpoint of the committed head, the receipt at it, the stored answer). Under load such transactions queue on the
store's lock, and each pays for itself a BEGIN, the lock, a COMMIT — on PostgreSQL each a round trip — and the
answer's a checkpoint signature and a sync. Here the first caller to arrive leads: it takes every item queued so
far (its own first, at most ``MAX_BATCH``) and runs ``write_batch`` on them, which commits once; the others wait
for their outcome. When done it hands the lead to the oldest item that arrived meanwhile, so no caller waits for
more than one batch after its own.

A batch changes only how many requests share a transaction. Within it the records are made in order, each seeing
every earlier one (ledger order is still the order in which the filters saw the charges); each answer's receipt is
at a checkpoint signed over committed state that includes its own leaf. If the batch fails for any reason, nothing
of it was committed — or, if the connection was lost during COMMIT itself, all of it was — and every caller runs its
own item again alone (``BatchFailed``), which the service's retries make idempotent: a recorded request is found
recorded, a stored answer is found stored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["MAX_BATCH", "BatchFailed", "GroupCommitter"]

#: at most this many items in one transaction
MAX_BATCH = 64

#: an item of a batch, and its result
I = TypeVar("I")  # noqa: E741
R = TypeVar("R")


class BatchFailed(Exception):
    """The batch an item was in did not commit (for certain); the caller runs its item alone."""


@dataclass
class _Job(Generic[I, R]):
    item: I
    done: bool = False
    result: tuple[R] | None = None  # (the item's result,) once its batch committed
    failed: bool = False
    event: threading.Event = field(default_factory=threading.Event)


class GroupCommitter(Generic[I, R]):
    """``commit(item)``: run ``write_batch([item, ...])`` for the queued items, one transaction per batch; returns
    this item's result. ``write_batch`` returns one result per item, in order, and must commit before it returns
    (it raises, committing nothing, to fail the whole batch: every caller then gets ``BatchFailed``)."""

    def __init__(self, write_batch: Callable[[list[I]], list[R]], max_batch: int = MAX_BATCH):
        self._write_batch = write_batch
        self._max = int(max_batch)
        self._lock = threading.Lock()
        self._queue: list[_Job[I, R]] = []
        self._leading = False
        #: batches committed and the items in them (for the benchmark and the tests)
        self.batches = 0
        self.items = 0

    def commit(self, item: I) -> R:
        job: _Job[I, R] = _Job(item)
        with self._lock:
            self._queue.append(job)
            lead = not self._leading
            if lead:
                self._leading = True
        if not lead:
            job.event.wait()
            if job.done:
                return self._outcome(job)
            # handed the lead: our item is still queued
        return self._lead(job)

    def _lead(self, job: _Job[I, R]) -> R:
        fatal: BaseException | None = None  # an interrupt: the batch fails and the lead passes on, then it is raised
        while True:
            with self._lock:
                batch, self._queue = self._queue[: self._max], self._queue[self._max :]
            try:
                results = self._write_batch([j.item for j in batch])
                if len(results) != len(batch):
                    raise RuntimeError("write_batch must return one result per item")
            except BaseException as e:
                for j in batch:
                    j.failed, j.done = True, True
                if not isinstance(e, Exception):
                    fatal = e
            else:
                for j, r in zip(batch, results, strict=True):
                    j.result, j.done = (r,), True
                with self._lock:
                    self.batches += 1
                    self.items += len(batch)
            for j in batch:
                if j is not job:
                    j.event.set()
            if job.done or fatal is not None:
                break
            # our item did not fit in this batch (more than MAX_BATCH were queued before it): lead again
        with self._lock:
            if not job.done:  # interrupted before its batch: it leaves the queue with the interrupt
                self._queue.remove(job)
            if self._queue:  # hand the lead to the oldest waiting item (woken while not done, it leads)
                self._queue[0].event.set()
            else:
                self._leading = False
        if fatal is not None:
            raise fatal
        return self._outcome(job)

    @staticmethod
    def _outcome(job: _Job[I, R]) -> R:
        if job.failed or job.result is None:
            raise BatchFailed()
        return job.result[0]
