"""The provider service's errors (spec/protocol.md §5): refusals (decided before anything is embedded, charged or
recorded; each carries the provider's signed refusal), a pending answer, an inconsistent service directory."""

from __future__ import annotations

from dprag.accounting.errors import BudgetExhaustedError, DpragError, InvalidParameterError

__all__ = ["AnswerPendingError", "RateLimitError", "RequestError", "ServiceStateError"]


class RateLimitError(BudgetExhaustedError):
    """The account has used all n queries of the window (nothing was embedded, recorded or spent).

    ``refusal``: the provider's signed refusal (spec/protocol.md §5.1; the counter is not consumed)."""

    field = "request.counter"
    refusal: dict | None = None

    @property
    def rule(self) -> str:
        return str(self)


class RequestError(InvalidParameterError):
    """A request was refused before anything was embedded, recorded or spent (signature, window, counter,
    question). ``refusal``: the provider's signed refusal, when the request can be named (its h_req)."""

    refusal: dict | None = None


class AnswerPendingError(DpragError):
    """The request was charged and recorded (ledger position ``pos``) but its answer could not be generated now
    (the generator failed after the charge). Nothing was released: retry the same signed request
    (``AccountClient.retry``), which finishes it from the recorded selection. The message is the same for every
    cause: it names no document and no exception, since whether and how the generator failed after the charge may
    depend on the documents. ``cause`` (the exception's type name) is for the provider's own log only: it is never
    in the message, an HTTP body or anything an account reads."""

    def __init__(self, pos: int, *, cause: str | None = None):
        self.pos = int(pos)
        self.cause = cause
        super().__init__(f"the answer of ledger position {self.pos} is pending; retry the same request")


class ServiceStateError(DpragError):
    """The service directory is inconsistent (e.g. a budget store holds less spend than the ledger)."""
