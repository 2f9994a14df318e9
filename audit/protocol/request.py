"""The account's signed request (spec/protocol.md §5.1): what every party computes alike about it.

An account signs every request it sends: the window id, its own name, a gapless per-account counter, a
hiding commitment to the question, a nonce it chose, and (optionally) a hiding commitment to the query
embedding Q that it computed itself with the committed embedder. The retrieval noise and the generation
randomness are derived only from this signed request and the committed seed (§5.2), so the provider has
nothing to grind: re-sending the same request yields the same noise, and a fresh request needs the
account's signature.

Here: the account's key (``AccountKey``), the commitments, building (``make_request``) and checking
(``verify_request``) a signed request, its hash, and the wire form ``Request``. The account's side of the
protocol, its client, is ``audit.client.account.AccountClient``.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any, cast

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from dprag.errors import InvalidParameterError

from .encoding import EncodingError, decode, encode, hexbytes

REQUEST_DOMAIN = b"dprag/request/v2\n"
QUESTION_DOMAIN = b"dprag/v2/question\x00"
QEMB_DOMAIN = b"dprag/v2/qemb\x00"
REQUEST_FIELDS = ("type", "window", "account", "counter", "h_q", "h_qemb", "nonce")
MAX_COUNTER = (1 << 53) - 1


def question_commitment(nonce: bytes, question: str) -> str:
    """h_q = H("dprag/v2/question\\0" || nonce || UTF-8(question)): hiding (the nonce is the account's)."""
    return hashlib.sha256(QUESTION_DOMAIN + bytes(nonce) + question.encode("utf-8")).hexdigest()


def qemb_commitment(nonce: bytes, qemb: bytes) -> str:
    """h_qemb = H("dprag/v2/qemb\\0" || nonce || Q as int16 LE bytes): hiding."""
    return hashlib.sha256(QEMB_DOMAIN + bytes(nonce) + bytes(qemb)).hexdigest()


def request_hash(signed_request: dict[str, Any]) -> bytes:
    """h_req = H(canonical(signed request, signature included)): the request's name everywhere (§5.2)."""
    return hashlib.sha256(encode(signed_request)).digest()


@dataclass(frozen=True)
class AccountKey:
    """An account's Ed25519 key. ``vkey`` is the hex of the 32-byte public key (what genesis registers)."""

    seed: bytes

    @classmethod
    def generate(cls) -> AccountKey:
        return cls(secrets.token_bytes(32))

    @classmethod
    def from_hex(cls, s: str) -> AccountKey:
        return cls(hexbytes(s.strip(), "account key", 32))

    def _private(self) -> Ed25519PrivateKey:
        return Ed25519PrivateKey.from_private_bytes(self.seed)

    @property
    def vkey(self) -> str:
        return self._private().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()

    def sign(self, message: bytes) -> bytes:
        return self._private().sign(message)

    def to_hex(self) -> str:
        return self._private().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()).hex()


def make_request(
    key: AccountKey,
    *,
    window: str,
    account: str,
    counter: int,
    question: str,
    qemb: bytes | None,
    nonce: bytes | None = None,
) -> dict[str, Any]:
    """A signed request (§5.1). ``qemb``: Q bytes the account computed itself, or None (then Q is on trust)."""
    if not isinstance(counter, int) or isinstance(counter, bool) or not 1 <= counter <= MAX_COUNTER:
        raise InvalidParameterError("counter", "must be an integer in [1, 2^53)", counter)
    if not isinstance(question, str) or not question.strip():
        raise InvalidParameterError("question", "must be a non-empty string")
    nonce = secrets.token_bytes(16) if nonce is None else bytes(nonce)
    if len(nonce) != 16:
        raise InvalidParameterError("nonce", "must be 16 bytes")
    body = {
        "type": "request",
        "window": window,
        "account": account,
        "counter": counter,
        "h_q": question_commitment(nonce, question),
        "h_qemb": None if qemb is None else qemb_commitment(nonce, qemb),
        "nonce": nonce.hex(),
    }
    return {**body, "sig": key.sign(REQUEST_DOMAIN + encode(body)).hex()}


def verify_request(req: Any, account_vkey: str) -> dict[str, Any]:
    """Shape and signature of a signed request; returns it. Raises EncodingError on any defect."""
    if not isinstance(req, dict) or set(req) != {*REQUEST_FIELDS, "sig"} or req.get("type") != "request":
        raise EncodingError("request: wrong set of fields or type")
    for f in ("window", "account"):
        if not isinstance(req[f], str) or not req[f]:
            raise EncodingError(f"request.{f}: must be a non-empty string")
    c = req["counter"]
    if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= MAX_COUNTER:
        raise EncodingError("request.counter: must be an integer in [1, 2^53)")
    hexbytes(req["h_q"], "request.h_q", 32)
    if req["h_qemb"] is not None:
        hexbytes(req["h_qemb"], "request.h_qemb", 32)
    hexbytes(req["nonce"], "request.nonce", 16)
    sig = hexbytes(req["sig"], "request.sig", 64)
    body = {k: v for k, v in req.items() if k != "sig"}
    try:
        Ed25519PublicKey.from_public_bytes(hexbytes(account_vkey, "account key", 32)).verify(
            sig, REQUEST_DOMAIN + encode(body)
        )
    except InvalidSignature:
        raise EncodingError("request: signature does not verify under the account's registered key") from None
    return req


@dataclass
class Request:
    """What an account sends: the signed request, the question, and Q (when the account computed it)."""

    signed: dict[str, Any]
    question: str
    qemb: bytes | None

    @classmethod
    def from_json(cls, obj: Any) -> Request:
        """The wire form ``{"request", "question", "qemb": hex | null}`` (what ``dprag account request`` prints)."""
        if not isinstance(obj, dict) or set(obj) != {"request", "question", "qemb"}:
            raise EncodingError('request message: must be {"request", "question", "qemb"}')
        q = obj["qemb"]
        return cls(obj["request"], obj["question"], None if q is None else hexbytes(q, "qemb"))

    def to_json(self) -> dict[str, Any]:
        """The wire form ``from_json`` reads: ``{"request", "question", "qemb": hex | null}``."""
        return {
            "request": self.signed,
            "question": self.question,
            "qemb": None if self.qemb is None else self.qemb.hex(),
        }

    @property
    def account(self) -> str:
        return cast(str, self.signed["account"])  # a non-empty string (verify_request)

    @property
    def h_req(self) -> bytes:
        return request_hash(self.signed)


def load_request(data: bytes) -> dict[str, Any]:
    """Decode a canonical signed request (the shape only; the signature is checked against a registry)."""
    req = decode(data, what="request")
    if not isinstance(req, dict):
        raise EncodingError("request: not an object")
    return req
