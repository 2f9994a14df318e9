"""Typed errors raised by dprag.

Every error that reports bad input names the offending field and the rule it broke, so a
caller (or the CLI, which maps these to exit code 2) can say exactly what was wrong.
Raising one of these never changes state: validation happens before any budget is spent.
"""

from __future__ import annotations


class DpragError(Exception):
    """Base class of every error dprag raises on purpose."""


class InvalidParameterError(DpragError, ValueError):
    """A parameter broke a documented rule (e.g. ``epsilon must be finite and > 0``)."""

    def __init__(self, field: str, rule: str, value: object = None):
        self.field = field
        self.rule = rule
        self.value = value
        shown = "" if value is None else f" (got {value!r})"
        super().__init__(f"{field}: {rule}{shown}")


class UnknownDocumentError(DpragError, KeyError):
    """A document id is not in the corpus the filter or store was built for."""

    def __init__(self, ids, corpus_size: int | None = None):
        self.ids = list(ids)
        where = "" if corpus_size is None else f" (corpus has ids 0..{corpus_size - 1})"
        super().__init__(f"doc_ids: unknown document ids {self.ids[:10]}{'...' if len(self.ids) > 10 else ''}{where}")

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return self.args[0]


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

    def __init__(self, message: str = "budget exhausted", *, budget: str | None = None, limit=None, used=None):
        self.budget = budget
        self.limit = limit
        self.used = used
        super().__init__(message)


def check_epsilon(field: str, value: float, *, allow_zero: bool = False, allow_inf: bool = False) -> float:
    """Return ``value`` as float if it is a valid epsilon, else raise InvalidParameterError."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(field, "must be a real number", value) from None
    if v != v:
        raise InvalidParameterError(field, "must not be NaN", value)
    if v == float("inf") and not allow_inf:
        raise InvalidParameterError(field, "must be finite", value)
    if v < 0 or (v == 0 and not allow_zero):
        raise InvalidParameterError(field, "must be >= 0" if allow_zero else "must be > 0", value)
    return v


def check_delta(field: str, value: float, *, allow_zero: bool = False) -> float:
    """Return ``value`` as float if it lies in (0, 1) (or [0, 1) with allow_zero)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(field, "must be a real number", value) from None
    if v != v:
        raise InvalidParameterError(field, "must not be NaN", value)
    lo_ok = v >= 0 if allow_zero else v > 0
    if not lo_ok or v >= 1:
        raise InvalidParameterError(field, "must lie in [0, 1)" if allow_zero else "must lie in (0, 1)", value)
    return v


def check_positive_int(field: str, value: int, *, minimum: int = 1) -> int:
    """Return ``value`` if it is an integer >= minimum (bools are refused)."""
    if isinstance(value, bool):
        raise InvalidParameterError(field, f"must be an integer >= {minimum}", value)
    try:
        iv = int(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(field, f"must be an integer >= {minimum}", value) from None
    if iv != value or iv < minimum:
        raise InvalidParameterError(field, f"must be an integer >= {minimum}", value)
    return iv


def check_positive_real(field: str, value: float) -> float:
    """Return ``value`` as float if it is finite and > 0."""
    return check_epsilon(field, value)
