"""The error hierarchy of every dprag floor (``DpragError`` and its kinds), importable from any floor.

Every error that reports bad input names the offending field and the rule it broke, so a
caller (or the CLI, which maps these to exit code 2) can say exactly what was wrong.
Raising one of these never changes state: validation happens before any budget is spent.
Every floor imports them from here; the validation helpers that raise them (``check_epsilon``, ...) are in
``dprag.accounting.errors``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

__all__ = [
    "DpragError",
    "InvalidParameterError",
    "UnknownDocumentError",
    "UnsupportedEventError",
    "BudgetExhaustedError",
    "GenerationFailedError",
]


class DpragError(Exception):
    """Base class of every error dprag raises on purpose."""


class InvalidParameterError(DpragError, ValueError):
    """A parameter broke a documented rule (e.g. ``epsilon must be finite and > 0``)."""

    def __init__(self, field: str, rule: str, value: object = None) -> None:
        self.field = field
        self.rule = rule
        self.value = value
        shown = "" if value is None else f" (got {value!r})"
        super().__init__(f"{field}: {rule}{shown}")


class UnknownDocumentError(DpragError, KeyError):
    """A document id is not in the corpus the filter or store was built for."""

    def __init__(self, ids: Iterable[object], corpus_size: int | None = None) -> None:
        self.ids = list(ids)
        where = "" if corpus_size is None else f" (corpus has ids 0..{corpus_size - 1})"
        super().__init__(f"doc_ids: unknown document ids {self.ids[:10]}{'...' if len(self.ids) > 10 else ''}{where}")

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return cast(str, self.args[0])


class UnsupportedEventError(DpragError, TypeError):
    """An accountant or filter cannot count this kind of privacy event soundly."""


class BudgetExhaustedError(DpragError):
    """A request was refused because a *budget* it needs is spent — a documented outcome, not a bug.

    Covers every budget dprag enforces by refusing: a sparse-vector session whose discoveries are spent
    (``SparseVector.test``), an account's query allowance in an audit window (the service's rate limit
    subclasses this), and any caller-level per-document or per-account privacy budget that refuses a request.
    (A per-document filter that merely *excludes* over-budget documents from retrieval reports them in its
    ``ChargeResult`` instead of raising.) Raising it never changes state: nothing was recorded or spent.

    Fields (all optional, for programs): ``budget`` names the budget (e.g. "max_discoveries", "queries per
    window"), ``limit`` its size and ``used`` how much of it was already spent, in that budget's unit. Catch
    ``BudgetExhaustedError`` to handle every kind of exhaustion; subclasses narrow it.
    """

    def __init__(
        self,
        message: str = "budget exhausted",
        *,
        budget: str | None = None,
        limit: float | None = None,
        used: float | None = None,
    ) -> None:
        self.budget = budget
        self.limit = limit
        self.used = used
        super().__init__(message)


class GenerationFailedError(DpragError, RuntimeError):
    """A generator failure after the charge that no voter's containment absorbs (spec/accounting/rag.md §6): the
    public rows alone (every voter replaced by its empty-context prompt) failed too, or the failure could not be
    attributed to one voter. Its type and message are fixed and it carries nothing of the failure it replaces (no
    exception type, message, cause or context), since those could depend on the documents."""

    MESSAGE = "generation failed after the charge, and no single voter's failure explains it"

    def __init__(self) -> None:
        super().__init__(self.MESSAGE)
