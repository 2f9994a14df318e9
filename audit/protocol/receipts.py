"""Signed query-time receipts ρ_q (R2; spec/protocol.md §5.4) and signed refusals (§5.1), protocol version 4.

ρ_q names the log (``origin``, ``dprag/<chain id>``) and the signing key (``key``: hex SHA-256 of its note
verifier key, ``key_id``), and binds one signed request (``h_req``, the account's counter) to exactly one ledger
leaf (``pos`` and the leaf's RFC 6962 hash), to the log at the size that leaf made (``size = pos + 1`` and the
root of that prefix: fixed once the leaf commits, so no signed byte depends on when the answer finished), to the
citations shown (``h_top``) and to the answer (``h_answer``). Signature: Ed25519 by the provider's note key
over ``b"dprag/receipt/v4\\n" || canonical(ρ_q without "sig")``. ``h_top`` and ``nonce_top`` are always present
(where the tenant's citation channel is off, ``h_top`` commits to the empty list: no citation may be shown).

A refusal is the provider's signed statement that it refused a request before anything was embedded, charged or
recorded, and that the request's counter was not consumed (``"consumed": false``): the account may sign another
request for that counter. It names the rule (``code``, one of ``REFUSAL_CODES``) and the log it read (``size``,
``root``, one snapshot): the verifier FAILs it only if the same request sits below that size, or the rule is false
of the log at that size (§8.6), so an account that resends a refused request later cannot frame the provider.
The one refusal that consumes its counter is a **void** (``code`` ``void``, ``"consumed": true``): the request is
recorded (charged, its leaf below ``size``) and will never be answered, because its account re-keyed or was
revoked after its leaf; the account signs its next counter. The verifier FAILs a void unless the log holds the
request below ``size`` with such a registry leaf between the two, and FAILs a void beside a receipt of the same
request.

A receipt is evidence against the provider that signed it: two valid receipts for one position that
differ, or one that contradicts the bundle, prove misbehaviour (spec/protocol.md §8.6).
"""

from __future__ import annotations

import hashlib
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .encoding import EncodingError, encode, hexbytes
from .ledger.checkpoint import NoteVerifier, Signer

DOMAIN = b"dprag/receipt/v4\n"
REFUSAL_DOMAIN = b"dprag/refusal/v4\n"
FIELDS = (
    "origin",
    "key",
    "account",
    "tenant",
    "counter",
    "h_req",
    "h_top",
    "nonce_top",
    "h_answer",
    "pos",
    "leaf_hash",
    "size",
    "root",
)


def receipt_body(
    *,
    origin: str,
    account: str,
    tenant: str,
    counter: int,
    h_req: str,
    h_top: str,
    nonce_top: str,
    h_answer: str,
    pos: int,
    leaf_hash: str,
    size: int,
    root: str,
) -> dict[str, Any]:
    return {
        "type": "receipt",
        "origin": origin,
        "account": account,
        "tenant": tenant,
        "counter": int(counter),
        "h_req": h_req,
        "h_top": h_top,
        "nonce_top": nonce_top,
        "h_answer": h_answer,
        "pos": int(pos),
        "leaf_hash": leaf_hash,
        "size": int(size),
        "root": root,
    }


def key_id(vkey: str) -> str:
    """The id a receipt or refusal gives its signing key: hex SHA-256 of the note verifier key (its first 16 hex are
    the verdict's key fingerprint)."""
    return hashlib.sha256(vkey.encode()).hexdigest()


def sign_receipt(body: dict[str, Any], signer: Signer) -> dict[str, Any]:
    """``body`` (``receipt_body``, with or without a ``key``) signed by ``signer``, naming it (``key``)."""
    signed = {**body, "key": key_id(signer.vkey())}
    signed["sig"] = signer.sign(DOMAIN + encode(signed)).hex()
    return signed


def verify_receipt(receipt: Any, verifier: NoteVerifier) -> dict[str, Any]:
    """Check shape and signature; return the body (without "sig"). Raises EncodingError on any defect."""
    if not isinstance(receipt, dict):
        raise EncodingError("receipt: must be a JSON object")
    if set(receipt) != {"type", "sig", *FIELDS} or receipt.get("type") != "receipt":
        raise EncodingError("receipt: wrong set of fields or type (an older protocol version's receipt?)")
    body = {k: v for k, v in receipt.items() if k != "sig"}
    for f in ("origin", "account", "tenant"):
        if not isinstance(body[f], str):
            raise EncodingError(f"receipt.{f}: must be a string")
    _check_key(body, verifier, "receipt")
    for f in ("h_req", "h_answer", "leaf_hash", "root", "h_top"):
        hexbytes(body[f], f"receipt.{f}", 32)
    hexbytes(body["nonce_top"], "receipt.nonce_top", 16)
    for f in ("pos", "size", "counter"):
        if isinstance(body[f], bool) or not isinstance(body[f], int) or body[f] < 0:
            raise EncodingError(f"receipt.{f}: must be a non-negative integer")
    if body["size"] != body["pos"] + 1:
        raise EncodingError("receipt: size must be pos + 1 (a receipt is signed at the log its leaf made)")
    _check_signature(receipt["sig"], DOMAIN, body, verifier, "receipt")
    return body


def _check_key(body: dict[str, Any], verifier: NoteVerifier, what: str) -> None:
    if body["key"] != key_id(verifier.vkey()):
        raise EncodingError(f"{what}.key: does not name the key it is checked under")


def _check_signature(sig_hex: Any, domain: bytes, body: dict[str, Any], verifier: NoteVerifier, what: str) -> None:
    """The provider's Ed25519 signature over ``domain || canonical(body)``; EncodingError naming ``what`` if not."""
    sig = hexbytes(sig_hex, f"{what}.sig", 64)
    try:
        Ed25519PublicKey.from_public_bytes(verifier.public_key).verify(sig, domain + encode(body))
    except InvalidSignature:
        raise EncodingError(f"{what}: signature does not verify under the provider key") from None


REFUSAL_FIELDS = ("origin", "key", "h_req", "field", "rule", "code", "consumed", "size", "root")
#: what a refusal's ``code`` may name. Rules of the request alone (``request``: its shape, signature, account or
#: window; ``question``: the question, its Q or its size in tokens) hold at every size; the others are facts
#: about the log at the refusal's size that the verifier checks when the account hands in the request:
#: ``counter`` (the request's counter is not the account's next one), ``counter-used`` (another request holds
#: that counter), ``rate`` (the counter is above the policy's n), ``revoked`` (a revocation leaf below the size
#: names the account). ``void`` is the one that consumes the counter: the request is recorded below the size and
#: an ``account-key`` or ``account-revoke`` leaf of its account lies between its leaf and the size (§5.1).
REFUSAL_CODES = ("request", "question", "counter", "counter-used", "rate", "revoked", "void")
#: the code of the refusal that consumes its counter (``"consumed": true``)
VOID = "void"


def refusal_body(*, origin: str, h_req: str, field: str, rule: str, code: str, size: int, root: str) -> dict[str, Any]:
    """A refusal decided before anything was embedded, charged or recorded (the counter is not consumed), on the
    log of ``size`` leaves with ``root`` (the snapshot the decision read); with ``code`` ``void``, the statement
    that a recorded request will never be answered (its counter consumed: ``"consumed": true``)."""
    if code not in REFUSAL_CODES:
        raise ValueError(f"refusal code {code!r} is not one of {REFUSAL_CODES}")
    return {
        "type": "refusal",
        "origin": origin,
        "h_req": h_req,
        "field": field,
        "rule": rule,
        "code": code,
        "consumed": code == VOID,
        "size": int(size),
        "root": root,
    }


def sign_refusal(body: dict[str, Any], signer: Signer) -> dict[str, Any]:
    """``body`` (``refusal_body``) signed by ``signer``, naming it (``key``)."""
    signed = {**body, "key": key_id(signer.vkey())}
    return {**signed, "sig": signer.sign(REFUSAL_DOMAIN + encode(signed)).hex()}


def verify_refusal(refusal: Any, verifier: NoteVerifier) -> dict[str, Any]:
    """Shape and signature of a signed refusal; returns the body. Raises EncodingError on any defect."""
    if (
        not isinstance(refusal, dict)
        or set(refusal) != {"type", "sig", *REFUSAL_FIELDS}
        or refusal.get("type") != "refusal"
    ):
        raise EncodingError("refusal: wrong set of fields or type")
    body = {k: v for k, v in refusal.items() if k != "sig"}
    for f in ("origin", "field", "rule"):
        if not isinstance(body[f], str):
            raise EncodingError(f"refusal.{f}: must be a string")
    _check_key(body, verifier, "refusal")
    if body["code"] not in REFUSAL_CODES:
        raise EncodingError(f"refusal.code: must be one of {', '.join(REFUSAL_CODES)}")
    hexbytes(body["h_req"], "refusal.h_req", 32)
    hexbytes(body["root"], "refusal.root", 32)
    if isinstance(body["size"], bool) or not isinstance(body["size"], int) or body["size"] < 1:
        raise EncodingError("refusal.size: must be a positive integer")
    if body["consumed"] is not (body["code"] == VOID):
        raise EncodingError(
            "refusal.consumed: must be true for a void and false otherwise (only a void consumes the counter)"
        )
    _check_signature(refusal["sig"], REFUSAL_DOMAIN, body, verifier, "refusal")
    return body
