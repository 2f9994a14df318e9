"""What a retry or a replica sends a generator again (spec/provider.md §3.7): nothing once the answer is stored.

A charged request whose answer is not stored yet (pending: the generator failed, the process died, or another
replica is generating it) is finished from its recorded selection, so a retry resends every voter prompt -- the
question with the voter's documents -- and the final prompt. Once any replica has stored the answer, no retry and no
replica sends a prompt again:

- ``Flights``: within one process, the finishing of one ledger position runs once at a time; a retry arriving while
  it runs waits, then finds the stored answer (one read) and returns its bytes without generating;
- ``StoredGuard``: a generator that sends prompts out of the process (a text-only, hosted model) is wrapped so that
  before every call it reads whether the answer is stored (one read of the served row); once it is, the call is not
  made (``AnswerStoredError``), and the request returns the stored bytes. A read that fails counts as "not stored"
  (the call proceeds), so a store fault never moves a voter.

A call already in flight when another replica stores the answer completes (its prompt was sent before the answer
existed); the bound is one call per voter in flight, ``max_concurrency``.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable, Iterator

from dprag.accounting.rag.ksa import TextOnlyGenerator

__all__ = ["AnswerStoredError", "Flights", "StoredGuard", "guard_generator"]

#: the methods through which a text generator sends prompts
_SENDING = ("generate", "generate_many", "generate_each")


class AnswerStoredError(Exception):
    """Raised in place of a generator call: the request's answer is stored (by this or another replica)."""


class StoredGuard:
    """``check()`` before every outgoing call: raises ``AnswerStoredError`` once ``stored()`` is true (and from then
    on); ``fired`` says whether it did; ``calls`` counts the calls it let through."""

    def __init__(self, stored: Callable[[], bool]) -> None:
        self._stored = stored
        self._lock = threading.Lock()
        self.fired = False
        self.calls = 0

    def check(self) -> None:
        if not self.fired:
            try:
                now = self._stored()
            except Exception:  # noqa: BLE001 - a failed read is "not stored": a store fault never moves a voter
                now = False
            if now:
                self.fired = True
        if self.fired:
            raise AnswerStoredError()
        with self._lock:
            self.calls += 1


class _GuardedText:
    """A text generator whose sending methods check ``guard`` first; every other attribute is the generator's
    (a method it lacks, e.g. ``generate_each``, stays absent)."""

    def __init__(self, inner: object, guard: StoredGuard) -> None:
        self._inner, self._guard = inner, guard

    def __getattr__(self, name: str) -> object:
        attr: object = getattr(self._inner, name)
        if name not in _SENDING or not callable(attr):
            return attr
        fn = attr
        guard = self._guard

        def sending(*args: object, **kwargs: object) -> object:
            guard.check()
            return fn(*args, **kwargs)

        return sending


def guard_generator(generator: object, guard: StoredGuard) -> object:
    """``generator`` with ``guard`` checked before each prompt it sends: a ``TextOnlyGenerator`` (one call per
    prompt, the hosted path) gets its ``complete`` wrapped, so every voter's call is checked; any other text
    generator its ``generate``, ``generate_many`` and ``generate_each``."""
    if isinstance(generator, TextOnlyGenerator):
        g = copy.copy(generator)
        inner = generator.complete

        def complete(text: str) -> object:
            guard.check()
            return inner(text)

        g.complete = complete
        return g
    return _GuardedText(generator, guard)


class Flights:
    """One finishing per ledger position at a time in this process (``hold(pos)``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, tuple[threading.Lock, int]] = {}

    @contextlib.contextmanager
    def hold(self, pos: int) -> Iterator[None]:
        with self._lock:
            lock, users = self._held.get(pos, (threading.Lock(), 0))
            self._held[pos] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._lock:
                lock, users = self._held[pos]
                if users == 1:
                    del self._held[pos]
                else:
                    self._held[pos] = (lock, users - 1)
