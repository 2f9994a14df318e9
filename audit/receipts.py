"""Signed query-time receipts ρ_q (R2; spec/protocol.md §5.4), protocol version 2.

ρ_q names the window and binds one signed request (``h_req``, the account's counter) to exactly one ledger
leaf (``pos`` and the leaf's RFC 6962 hash), to a checkpoint (size, root) that includes it, to the
citations shown (``h_top``) and to the answer (``h_answer``). Signature: Ed25519 by the provider's note key
over ``b"dprag/receipt/v2\\n" || canonical(ρ_q without "sig")``.

A receipt is evidence against the provider that signed it: two valid receipts for one position that
differ, or one that contradicts the bundle, prove misbehaviour (spec/protocol.md §8.6).
"""

from __future__ import annotations

from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .encoding import EncodingError, encode, hexbytes
from .ledger.checkpoint import NoteSigner, NoteVerifier

DOMAIN = b"dprag/receipt/v2\n"
FIELDS = (
    "window",
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
    window: str,
    account: str,
    tenant: str,
    counter: int,
    h_req: str,
    h_top: str | None,
    nonce_top: str | None,
    h_answer: str,
    pos: int,
    leaf_hash: str,
    size: int,
    root: str,
) -> dict[str, Any]:
    return {
        "type": "receipt",
        "window": window,
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


def sign_receipt(body: dict, signer: NoteSigner) -> dict:
    signed = dict(body)
    signed["sig"] = signer.sign(DOMAIN + encode(body)).hex()
    return signed


def verify_receipt(receipt: Any, verifier: NoteVerifier) -> dict:
    """Check shape and signature; return the body (without "sig"). Raises EncodingError on any defect."""
    if not isinstance(receipt, dict):
        raise EncodingError("receipt: must be a JSON object")
    if set(receipt) != {"type", "sig", *FIELDS} or receipt.get("type") != "receipt":
        raise EncodingError("receipt: wrong set of fields or type (a version-1 receipt?)")
    body = {k: v for k, v in receipt.items() if k != "sig"}
    for f in ("window", "account", "tenant"):
        if not isinstance(body[f], str):
            raise EncodingError(f"receipt.{f}: must be a string")
    for f in ("h_req", "h_answer", "leaf_hash", "root"):
        hexbytes(body[f], f"receipt.{f}", 32)
    if body["h_top"] is not None:
        hexbytes(body["h_top"], "receipt.h_top", 32)
    if body["nonce_top"] is not None:
        hexbytes(body["nonce_top"], "receipt.nonce_top", 16)
    for f in ("pos", "size", "counter"):
        if isinstance(body[f], bool) or not isinstance(body[f], int) or body[f] < 0:
            raise EncodingError(f"receipt.{f}: must be a non-negative integer")
    if not body["pos"] < body["size"]:
        raise EncodingError("receipt: pos must be < size")
    sig = hexbytes(receipt["sig"], "receipt.sig", 64)
    try:
        Ed25519PublicKey.from_public_bytes(verifier.public_key).verify(sig, DOMAIN + encode(body))
    except InvalidSignature:
        raise EncodingError("receipt: signature does not verify under the provider key") from None
    return body
