"""A request that can never be answered (spec/protocol.md §5.1, the ``void`` refusal): its counter is freed by a
signed statement, stored as the request's outcome.

A retry of a request the log already holds (its query leaf recorded: charged, the counter consumed) that admission
now refuses is settled here instead of by an ordinary refusal, which would say the counter was not consumed (false of
the log, and evidence against the provider, §8.6):

- its answer is stored: the stored bytes are returned, as for any retry (they release nothing new);
- its answer is not stored and its account re-keyed (an ``account-key`` leaf) or was revoked (``account-revoke``)
  after its leaf: it will never be answered, since a key rotated out answers nothing after its rotation (it may have
  been stolen) and a revoked account is served nothing. The provider signs a **void** (``"consumed": true``) and
  stores it in the request's served row, where an answer would go: the first outcome stored wins, on every replica,
  so a request is never both answered and voided (a finishing in flight elsewhere stores nothing after the void, and
  a void is never signed once an answer is stored);
- otherwise (no registry leaf explains it) no refusal is signed: the error is returned unsigned and the request stays
  pending at the account.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..protocol.encoding import JSON, decode, encode
from ..protocol.errors import RequestError
from ..protocol.receipts import VOID, refusal_body, sign_refusal
from ..protocol.registry import AccountEntry
from ..protocol.request import Request, request_hash

if TYPE_CHECKING:
    from .serving import ServedRow, Serving

__all__ = ["has_outcome", "settle_retry", "void_error", "void_reason"]


def has_outcome(row: bytes) -> bool:
    """Whether a served row's bytes hold the request's outcome: a stored answer or a void (the first one wins)."""
    body = decode(row, what="served")
    return bool(body.get("served")) or bool(body.get("void"))


def void_error(void: JSON) -> RequestError:
    """The refusal error of a stored void (``exc.refusal``: its signed bytes, the same on every replica)."""
    field = void.get("field") if isinstance(void, dict) else None
    rule = void.get("rule") if isinstance(void, dict) else None
    exc = RequestError(field if isinstance(field, str) else "request", rule if isinstance(rule, str) else "void")
    exc.code = VOID
    exc.refusal = void if isinstance(void, dict) else None
    return exc


def void_reason(entry: AccountEntry, pos: int, counter: int, account: str) -> tuple[str, str, int] | None:
    """(field, rule, the registry leaf's position) that makes the request recorded at ``pos`` unanswerable for good:
    its account's revocation or a key rotation after ``pos``; None if there is none."""
    if entry.revoked is not None and entry.revoked > pos:
        why = f"{account!r} was revoked at leaf {entry.revoked}"
        return "request.account", _rule(pos, why, counter), entry.revoked
    later = [at for at, _ in entry.keys[1:] if at > pos]
    if later:
        why = f"{account!r} re-keyed at leaf {later[0]} (a key rotated out answers nothing after its rotation)"
        return "request.sig", _rule(pos, why, counter), later[0]
    return None


def _rule(pos: int, why: str, counter: int) -> str:
    return (
        f"recorded at leaf {pos} and never answered: {why}; its counter {counter} is consumed (void), the next "
        f"request is counter {counter + 1}"
    )


def settle_retry(self: Serving, req: Request) -> ServedRow | RequestError | None:
    """A refused request that the log already holds: its stored row if its answer is stored, the void (stored first,
    or stored now) as an error if it will never be answered, the refusal unsigned (``RequestError`` without
    ``refusal``) if neither; None if the log does not hold this request (the ordinary signed refusal stands)."""
    signed = getattr(req, "signed", None)
    if not isinstance(signed, dict):
        return None
    account, counter = signed.get("account"), signed.get("counter")
    if not isinstance(account, str) or isinstance(counter, bool) or not isinstance(counter, int):
        return None
    try:
        h = request_hash(signed).hex()
        raw = self.aud.served(account, counter)
    except Exception:  # noqa: BLE001 - unencodable, or the store did not answer: the ordinary refusal stands
        return None
    if raw is None:
        return None
    row: ServedRow = decode(raw, what="served")
    if row.get("h_req") != h:
        return None  # another request holds the counter: the refusal (counter-used) is true of the log
    if row.get("served"):
        return row
    if row.get("void"):
        return void_error(row.get("void"))
    pos = row["pos"]
    self.refresh_state()  # the registry leaves another replica appended
    entry = self.registry.get(account)
    reason = None if entry is None else void_reason(entry, pos, counter, account)
    size, root = self.ledger.head()
    if reason is None or size <= reason[2]:
        return RequestError("request", "this request is recorded and its answer is not stored: resend it later")
    field, rule, _at = reason
    body = refusal_body(origin=self.origin, h_req=h, field=field, rule=rule, code=VOID, size=size, root=root.hex())
    void = sign_refusal(body, self.signer_at(size))  # outside any transaction (spec/provider.md §8)
    kept = self.aud.store_answer(account, counter, encode({**row, "void": void}), unless_stored=has_outcome, expect=raw)
    out: ServedRow = decode(kept, what="served")
    if out.get("served"):
        return out  # an answer was stored first: it stands, and no void was given
    return void_error(out.get("void"))
