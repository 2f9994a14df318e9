"""The wire's vocabulary: every error a provider answers an account with, one home (spec/protocol.md §5, spec/api.md).

Refusals (``RequestError``, ``RateLimitError``) are decided before anything is embedded, charged or recorded and carry
the provider's signed refusal; ``AnswerPendingError`` says a charged request's answer is pending; the store's
``StoreError`` / ``StoreUnavailableError`` (503, retry); ``ServiceStateError`` a service directory that needs an
operator. The HTTP API maps each to one status and error type; the account's client maps them back. The error
hierarchy itself (``DpragError``, ``InvalidParameterError``, ...) is ``dprag.errors``.
"""

from __future__ import annotations

from typing import Any

from dprag.errors import BudgetExhaustedError, DpragError, InvalidParameterError

__all__ = [
    "AnswerPendingError",
    "RateLimitError",
    "RequestError",
    "ServiceBusyError",
    "ServiceStateError",
    "StoreError",
    "StoreUnavailableError",
]


class RateLimitError(BudgetExhaustedError):
    """The account has used all n queries of the window (nothing was embedded, recorded or spent).

    ``refusal``: the provider's signed refusal (spec/protocol.md §5.1; the counter is not consumed)."""

    field = "request.counter"
    refusal: dict[str, Any] | None = None
    #: the refusal's rule (``receipts.REFUSAL_CODES``) and the log size its decision read
    code: str = "rate"
    snapshot: int | None = None

    @property
    def rule(self) -> str:
        return str(self)


class RequestError(InvalidParameterError):
    """A request was refused before anything was embedded, recorded or spent (signature, window, counter,
    question). ``refusal``: the provider's signed refusal, when the request can be named (its h_req); ``code``
    and ``snapshot``: the rule it names (``receipts.REFUSAL_CODES``; None: a rule of the request alone, from
    ``field``) and the log size its decision read (None: the log is read when the refusal is signed)."""

    refusal: dict[str, Any] | None = None
    code: str | None = None
    snapshot: int | None = None


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


class StoreError(DpragError):
    """The database refused an operation for a reason a retry does not cure (a constraint, a corrupt row). The
    operation was rolled back."""


class StoreUnavailableError(StoreError):
    """The database could not complete an operation (connection lost, server restarting, lock timeout). The
    operation was rolled back: retry it (the HTTP API answers 503 with Retry-After)."""


class ServiceBusyError(StoreUnavailableError):
    """The provider could not reserve the public worst-case memory of this request's generation within its wait bound
    (spec/provider.md §3.6): nothing was embedded, charged or recorded; retry the same signed request (the HTTP API
    answers 503 ``busy`` with ``Retry-After``). Its message is fixed: what it says depends on no corpus, only on
    what else the provider was running (a ``StoreUnavailableError``, so every caller that retries those retries
    this)."""

    MESSAGE = "the provider is busy: no room to generate this request's answer now; nothing was charged, retry it"

    def __init__(self) -> None:
        super().__init__(self.MESSAGE)
