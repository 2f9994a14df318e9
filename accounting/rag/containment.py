"""Per-voter containment of generator failures after the charge (spec/accounting/rag.md §6).

Every mechanism that runs a generator after the charge runs it on B rows of a public shape: the m voters, plus
public rows (000 Alg. 5's and DPSparseVoteRAG's non-RAG lane, answer-level voting's fallback). A row's output is a
function of its own prompt, its index and that shape only (spec/adapters.md §1) -- at that shape: re-run alone, a
row's bits change. So when a call fails, the rule is:

- the failing voters are found by a halving search in which every probe runs at the **same shape**, the rows
  under test keeping their prompts and every other row holding its **empty-context prompt**
  (``Prompt.empty_context``: its documents set to the empty document, the question and history unchanged);
- the failing voters are **replaced** by their empty-context prompts and the call is run again at that shape, so
  the other rows' outputs are bit for bit what they are without the failure; the mechanism then uses the
  replacement's output (000 Alg. 5, DPVoteRAG, DPSparseVoteRAG, GNMax) or drops it (the voter **abstains**:
  answer-level voting, DP-KSA), as its proof allows (spec/accounting/rag.md §6);
- a failure of the public rows alone (every voter replaced) is a function of public inputs only: it raises, the
  same on neighbouring corpora -- an ``InvalidParameterError`` of those public rows as it is (bad public input),
  anything else as ``GenerationFailedError``, whose type and message are fixed; so is a failure that no single
  voter explains. No exception type or message of a failing private row ever leaves this module.

Nothing random is drawn while the probes run (the mechanisms draw before or after a generator call), so the probes
change no released value; their number (about 2·f·log2 B sessions for f failing voters) is not hidden from an
observer of the provider's timing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from dprag.errors import GenerationFailedError, InvalidParameterError

from ..errors import check_positive_int
from ..protocols import DecodingSession, Generator, Prompt

__all__ = ["contain", "close_session", "ContainedSession", "contained_responses"]

_R = TypeVar("_R")


def contain(
    attempt: Callable[[list[Prompt]], _R],
    prompts: Sequence[Prompt],
    *,
    release: Callable[[_R], None] | None = None,
    replaced: Iterable[int] = (),
    known_to_fail: bool = False,
) -> tuple[_R, frozenset[int]]:
    """``attempt(rows)`` at the shape of ``prompts``, containing the rows whose call fails (module doc).

    Returns the result of the run in which the rows of the returned set (``replaced`` and every row found failing)
    hold their empty-context prompts and every other row its own prompt. ``release`` frees a probe's result (a
    session); ``known_to_fail``: the run with ``replaced`` is known to fail (it just did), so it is not repeated.
    Rows whose prompt is its own empty-context prompt (public rows, voters holding only padding) are never replaced.
    """
    rows = list(prompts)
    public = [p.empty_context() for p in rows]
    private = [i for i, (p, e) in enumerate(zip(rows, public, strict=True)) if p != e]
    gone = set(replaced) & set(private)

    def run(keep: set[int]) -> list[_R] | Exception:
        """[the result], or the exception (kept inside this module)."""
        try:
            return [attempt([p if i in keep else e for i, (p, e) in enumerate(zip(rows, public, strict=True))])]
        except Exception as e:  # noqa: BLE001 - any failure of a generator call is contained or made public
            return e

    def works(keep: set[int]) -> bool:
        out = run(keep)
        if isinstance(out, list) and release is not None:
            release(out[0])
        return isinstance(out, list)

    def search(part: list[int]) -> set[int]:
        """The rows of ``part`` that fail alone (every other row public), given that ``part`` fails; halving."""
        if len(part) == 1:
            return set(part)
        found: set[int] = set()
        for half in (part[: len(part) // 2], part[len(part) // 2 :]):
            if not works(set(half)):
                found |= search(half)
        return found

    public_error: Exception | None = None
    retry = not known_to_fail
    while True:
        keep = {i for i in private if i not in gone}
        if retry or not keep:
            out = run(keep)
            if isinstance(out, list):
                return out[0], frozenset(gone)
            if not keep:  # the public rows alone fail
                public_error = out
                break
        retry = True
        base = run(set())
        if isinstance(base, Exception):
            public_error = base
            break
        if release is not None:
            release(base[0])
        found = search(sorted(keep))
        if not found:  # the batch fails but no voter fails alone: not attributable to one voter
            break
        gone |= found
    # raised here, outside every handler: no exception of a private row is attached as a cause or context
    if isinstance(public_error, InvalidParameterError):
        raise public_error  # the public rows' own validation error (bad public input): public
    raise GenerationFailedError()


def close_session(session: object) -> None:
    """``session.close()`` if it has one; a failure to close is ignored (the session is dropped either way)."""
    close = getattr(session, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):  # closing frees memory; nothing depends on it
            close()


class ContainedSession:
    """A ``DecodingSession`` over ``prompts`` in which a voter whose ``start``, ``logits`` or ``advance`` fails is
    replaced by its empty-context prompt (``contain``) and the session is re-run at the same shape up to the
    current step: the released tokens so far are replayed (``advance``), so the other rows' logits are bit for bit
    those of the failure-free run, and the replaced voter's logits from then on are those of its empty-context
    prompt given the released prefix. ``replaced`` holds the replaced rows (never a public row). At most
    ``max_new_tokens`` tokens are appended (the forward-pass budget, a public count)."""

    def __init__(self, generator: Generator, prompts: Sequence[Prompt], max_new_tokens: int) -> None:
        self._generator = generator
        self._prompts = list(prompts)
        self._budget = check_positive_int("max_new_tokens", max_new_tokens)
        self._released: list[int] = []
        self._session, self._logits, self.replaced = self._open(frozenset(), known_to_fail=False)

    def _attempt(self, rows: list[Prompt]) -> tuple[DecodingSession, npt.NDArray[np.floating[Any]]]:
        session = self._generator.start(rows, max_new_tokens=self._budget)
        try:
            for t in self._released:
                session.advance(t)
            return session, self._read(session, len(rows))
        except BaseException:
            close_session(session)
            raise

    @staticmethod
    def _read(session: DecodingSession, batch: int) -> npt.NDArray[np.floating[Any]]:
        logits = np.asarray(session.logits())
        if logits.ndim != 2 or logits.shape[0] != batch:
            raise ValueError("logits of the wrong shape")  # contained like any failure of the session
        return logits

    def _open(
        self, replaced: frozenset[int], *, known_to_fail: bool
    ) -> tuple[DecodingSession, npt.NDArray[np.floating[Any]], frozenset[int]]:
        """A session at the current step (the released tokens replayed), with ``contain``."""
        (session, logits), now = contain(
            self._attempt,
            self._prompts,
            release=lambda r: close_session(r[0]),
            replaced=replaced,
            known_to_fail=known_to_fail,
        )
        return session, logits, now

    def logits(self) -> npt.NDArray[np.floating[Any]]:
        """Next-token logits of every row (the replaced voters' from their empty-context prompts)."""
        return self._logits

    def advance(self, token_id: int) -> None:
        """Append ``token_id`` to every row; a failure is contained as in ``start``."""
        tok = int(token_id)
        if not 0 <= tok < int(self._generator.vocab_size):
            raise InvalidParameterError("token_id", f"must be a token id in [0, {self._generator.vocab_size})", tok)
        if len(self._released) >= self._budget:
            raise InvalidParameterError("session", f"has appended its max_new_tokens = {self._budget} tokens")
        self._released.append(tok)
        failed = False
        try:
            self._session.advance(tok)
            self._logits = self._read(self._session, len(self._prompts))
        except Exception:  # noqa: BLE001 - contained: re-run at the same shape with the failing voters replaced
            failed = True
        if failed:
            close_session(self._session)
            self._session, self._logits, self.replaced = self._open(self.replaced, known_to_fail=True)

    def close(self) -> None:
        """Close the underlying session (if it has ``close``)."""
        close_session(self._session)


def contained_responses(
    generator: Any, prompts: Sequence[Prompt], max_new_tokens: int, *, max_concurrency: int | None = None
) -> tuple[list[str], frozenset[int]]:
    """Every row's response, with the failing voters contained: returns the texts ("" for a failing voter) and the
    set of failing voters (they abstain: answer-level voting and DP-KSA, spec/accounting/rag.md §6).

    - A generator with ``generate_each(prompts, n, *, max_concurrency) -> list[str | None]`` makes one call per
      prompt (None where the call failed; ``ksa.TextOnlyGenerator``, a hosted model): each call sees one prompt, so
      there is no batch shape to keep; a failed call is asked once more alone, and a row whose call fails again is
      a failing row. ``max_concurrency`` (None: the generator's own bound) is passed on.
    - Any other generator: one ``generate_many`` batch of the public shape with ``contain``; a batch of the wrong
      length or a row that is not a string counts as a failure of the call; a failure of the public rows raises.
    """
    rows = list(prompts)
    each = getattr(generator, "generate_each", None)
    if callable(each):
        kw = {} if max_concurrency is None else {"max_concurrency": max_concurrency}
        out = _checked_each(each(rows, max_new_tokens, **kw), len(rows))
        first = [i for i, r in enumerate(out) if r is None]
        if first:
            again = _checked_each(each([rows[i] for i in first], max_new_tokens, **kw), len(first))
            for i, r in zip(first, again, strict=True):
                out[i] = r
        return [r or "" for r in out], frozenset(i for i, r in enumerate(out) if r is None)

    def attempt(batch: list[Prompt]) -> list[str]:
        texts = list(generator.generate_many(batch, max_new_tokens))
        if len(texts) != len(batch) or not all(isinstance(r, str) for r in texts):
            raise InvalidParameterError("generator", f"generate_many must return {len(batch)} strings")
        return texts

    texts, failed = contain(attempt, rows)
    return [("" if i in failed else t) for i, t in enumerate(texts)], failed


def _checked_each(out: Iterable[object], n: int) -> list[str | None]:
    got = list(out)
    if len(got) != n or not all(r is None or isinstance(r, str) for r in got):
        raise InvalidParameterError("generator", f"generate_each must return {n} strings or None")
    return [r if isinstance(r, str) else None for r in got]
