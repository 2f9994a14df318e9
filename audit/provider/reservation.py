"""Isolation between requests (spec/provider.md §3.6): before a request is charged, the public worst-case memory of
its generation is reserved from the provider's generator memory; a request that cannot get it within a bounded
wait is refused before the charge (``ServiceBusyError``, a fixed text), and one whose worst case exceeds the whole
capacity is refused as a request (its question is too long for this provider). So a generation that runs never
shares memory it was not promised: whether it fails no longer depends on what other requests are running, which
is what makes a failure after the charge a function of the request's own prompts (spec/accounting/rag.md §6,
assumption (A)).

The worst case is a function of public quantities only: the policy's batch shape (m voters and a public row), its
token bounds (documents per voter, the documents' token cap, the answer's tokens) and the question, through the
generator's own ``worst_case_bytes(question, n_contexts, batch, max_new_tokens)`` (the model's dimensions: every
KV buffer is preallocated at that worst case, spec/adapters.md §1). A generator without it (a hosted, text-only
model) holds no memory of this process for a request: it reserves no bytes, but its generation takes the
provider's one **hosted slot** (``hosted_need``: a pool of capacity 1), so this provider never has two requests'
calls in flight at a hosted API at once, and a hosted call's wall-clock timeout cannot depend on what another
request of this provider sends beside it.

Waiters are served in arrival order (a small request never overtakes a larger one waiting before it), so a wait is
bounded by the work admitted before it and ``wait_seconds``.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator

from dprag.errors import InvalidParameterError

from ..protocol.errors import RequestError, ServiceBusyError
from ..protocol.policy import Policy
from .models import declares_failure_free_sessions

__all__ = [
    "DEFAULT_FRACTION",
    "DEFAULT_WAIT_SECONDS",
    "Reservations",
    "device_memory",
    "hosted_need",
    "machine_memory",
    "worst_case_bytes",
]

#: how long a request waits for its reservation before it is refused (seconds)
DEFAULT_WAIT_SECONDS = 30.0
#: the share of the machine's available memory (when the service starts) that generation may reserve by default
DEFAULT_FRACTION = 0.5


def machine_memory() -> int:
    """The memory available to this process now (``MemAvailable`` of /proc/meminfo, else the physical memory)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))


def device_memory(generator: object) -> int:
    """The memory generation may reserve: the generator's ``device_memory_bytes`` (an int: the memory of the device
    it runs on, e.g. an accelerator's) if it declares one, else ``DEFAULT_FRACTION`` of the memory available to
    this process when the service opens (a CPU model's device is the machine)."""
    declared = getattr(generator, "device_memory_bytes", None)
    if isinstance(declared, int) and not isinstance(declared, bool) and declared > 0:
        return declared
    return max(1, int(DEFAULT_FRACTION * machine_memory()))


def worst_case_bytes(generator: object, policy: Policy, question: str) -> int:
    """The public worst-case memory of one request's generation under ``policy``: the generator's
    ``worst_case_bytes(question, docs_per_voter, m + 1, max_new_tokens)`` (0 for a generator without it). The batch
    m + 1 is the largest a mechanism runs (the m voters and one public row); ``max_new_tokens`` the largest of the
    policy's token bounds."""
    fn: Callable[[str, int, int, int], int] | None = getattr(generator, "worst_case_bytes", None)
    if not callable(fn):
        return 0
    g = policy.generation
    tokens = max(g.max_tokens, g.max_private_tokens, g.ksa_response_tokens or 0)
    need = fn(question, g.docs_per_voter, g.m + 1, tokens)
    if isinstance(need, bool) or not isinstance(need, int) or need < 0:
        raise InvalidParameterError("generator", "worst_case_bytes must return a non-negative int", need)
    return need


def hosted_need(generator: object) -> int:
    """1 (the hosted slot) for a generator without ``worst_case_bytes`` — a text-only model whose calls leave the
    process, with wall-clock deadlines that another request's calls beside it could move — else 0 (it reserves
    its bytes instead, or declares ``failure_free_sessions``: nothing of it can fail, whatever runs beside it)."""
    isolated = callable(getattr(generator, "worst_case_bytes", None)) or declares_failure_free_sessions(generator)
    return 0 if isolated else 1


class Reservations:
    """A pool of ``capacity`` bytes of generator memory (None: off, nothing is reserved or refused).

    ``hold(need)`` is the request's reservation: it waits, in arrival order, at most ``wait_seconds`` for ``need``
    bytes, then raises ``ServiceBusyError``; ``check(need)`` refuses (``RequestError``) a need the whole capacity
    cannot hold. ``waiting`` and ``refused`` count the waiters now and the refusals so far (for tests and metrics)."""

    def __init__(self, capacity: int | None = None, wait_seconds: float = DEFAULT_WAIT_SECONDS) -> None:
        self._cond = threading.Condition()
        self._queue: collections.deque[object] = collections.deque()
        self.capacity: int | None = None
        self.wait_seconds = DEFAULT_WAIT_SECONDS
        self.in_use = 0
        self.refused = 0
        self.set(capacity, wait_seconds)

    def set(self, capacity: int | None, wait_seconds: float = DEFAULT_WAIT_SECONDS) -> None:
        """The pool's capacity in bytes (None: reservation off) and the wait bound in seconds."""
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
            raise InvalidParameterError("capacity", "must be a positive number of bytes or None (off)", capacity)
        if isinstance(wait_seconds, bool) or not isinstance(wait_seconds, (int, float)) or not 0 <= wait_seconds:
            raise InvalidParameterError("wait_seconds", "must be a number of seconds >= 0", wait_seconds)
        with self._cond:
            self.capacity, self.wait_seconds = capacity, float(wait_seconds)
            self._cond.notify_all()

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._queue)

    def check(self, need: int) -> None:
        """Refuse, as a request, a need over the whole capacity (decided from public quantities only)."""
        cap = self.capacity
        if cap is not None and need > cap:
            raise RequestError(
                "question",
                f"is too long for this provider: its generation needs up to {need} bytes at the public worst case, "
                f"over the {cap} bytes the provider reserves for generation",
            )

    @contextlib.contextmanager
    def hold(self, need: int) -> Iterator[None]:
        """Reserve ``need`` bytes for the block (nothing when off or ``need`` is 0)."""
        if self.capacity is None or need <= 0:
            yield
            return
        self.check(need)
        ticket = object()
        deadline = time.monotonic() + self.wait_seconds
        with self._cond:
            self._queue.append(ticket)
            try:
                while True:
                    cap = self.capacity
                    if self._queue[0] is ticket and (cap is None or self.in_use + need <= cap):
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self.refused += 1
                        raise ServiceBusyError()
                    self._cond.wait(left)
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()  # the next in line may fit now, or be first
            self.in_use += need
        try:
            yield
        finally:
            with self._cond:
                self.in_use -= need
                self._cond.notify_all()
