"""Admission (spec/protocol.md §5.1): the checks of a request itself — signature, window, question and Q against
their commitments, the question's size in tokens for the committed generator — decided from the request and public
quantities only, before anything is embedded, charged or recorded. ``self`` is the log's state (``window.Window``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..protocol.encoding import JSON
from ..protocol.errors import RequestError
from ..protocol.registry import AccountEntry
from ..protocol.request import Request, qemb_commitment, question_commitment, verify_request

if TYPE_CHECKING:
    from .window import Window

MAX_QUESTION_CHARS = 4096


def check_request(self: Window, req: Request) -> str:
    """§5.1, the checks of the request itself (signature, window, question and Q against their commitments,
    the question's size in tokens for the committed generator): before anything is embedded or recorded."""
    if not isinstance(req, Request):
        raise RequestError("request", "must be an audit.client.account.Request")
    signed = req.signed
    acct = signed.get("account") if isinstance(signed, dict) else None
    if not isinstance(acct, str):
        raise RequestError("request.account", "must be the name of a registered account", acct)
    try:
        entry = _entry(self, acct, signed)
    except RequestError:
        raise
    except Exception as e:  # noqa: BLE001 - EncodingError: a malformed or forged request
        raise RequestError("request", str(e)) from None
    if signed["window"] != self.policy.window:
        raise RequestError("request.window", f"must be {self.policy.window!r}", signed["window"])
    q = req.question
    if not isinstance(q, str) or not q.strip():
        raise RequestError("question", "must be a non-empty string")
    if len(q) > MAX_QUESTION_CHARS:
        raise RequestError("question", f"must be at most {MAX_QUESTION_CHARS} characters", len(q))
    if any(0xD800 <= ord(c) <= 0xDFFF for c in q):
        raise RequestError("question", "must not contain a lone surrogate (it is not valid UTF-8)")
    nonce = bytes.fromhex(signed["nonce"])
    if question_commitment(nonce, q) != signed["h_q"]:
        raise RequestError("question", "does not match the request's h_q")
    tenant = entry.tenant
    dim = self.tenants[tenant].q.shape[1]
    if req.qemb is not None:
        if signed["h_qemb"] is None or qemb_commitment(nonce, req.qemb) != signed["h_qemb"]:
            raise RequestError("qemb", "does not match the request's h_qemb")
        if len(req.qemb) != 2 * dim:
            raise RequestError("qemb", f"must be {dim} int16 values", len(req.qemb))
    elif signed["h_qemb"] is not None:
        raise RequestError("qemb", "the request commits to a query embedding but none was sent")
    check_tokens(self, q)
    return tenant


def _entry(self: Window, acct: str, signed: dict[str, JSON]) -> AccountEntry:
    """The account's registry entry, its request's signature checked under its current key. What this process read
    of the registry may be behind another replica's (an account added, revoked or re-keyed since): on a miss it
    re-reads the registry's leaves once before refusing (spec/protocol.md §3.2)."""
    for fresh in (False, True):
        if fresh:
            self.refresh_state()
        entry = self.registry.get(acct)
        if entry is None:
            if fresh:
                raise RequestError("request.account", "is not registered in this log", acct)
            continue
        if entry.revoked is not None:
            exc = RequestError("request.account", f"{acct!r} was revoked at leaf {entry.revoked}")
            exc.code = "revoked"
            raise exc
        try:
            verify_request(signed, entry.key)
            return entry
        except Exception:
            if fresh:
                raise
    raise AssertionError("unreachable")


def check_tokens(self: Window, question: str) -> None:
    """§5.1: the question's size in tokens, from public quantities only (the question, the committed template,
    docs_per_voter, the documents' token cap, max_tokens), so that no voter prompt can overflow the committed
    generator's context window after the charge. Generators without a window (toy, hosted) are not checked."""
    bound_of: Callable[[str, int, int], int | None] | None = getattr(
        self.committed_generator, "prompt_token_bound", None
    )
    window: int | None = getattr(self.committed_generator, "max_positions", None)
    if bound_of is None or window is None:
        return
    g = self.policy.generation
    need = bound_of(question, g.docs_per_voter, g.max_tokens)
    if need is not None and need > int(window):
        raise RequestError(
            "question",
            f"is too long for the committed generator: a voter prompt with {g.docs_per_voter} document(s) of at "
            f"most {getattr(self.committed_generator, 'max_context_tokens', '?')} tokens and {g.max_tokens} answer "
            f"tokens needs up to {need} tokens, over the context window of {window}",
        )
