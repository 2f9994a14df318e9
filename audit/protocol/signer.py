"""The provider's signing key as the protocol uses it (spec/provider.md §8): a ``Signer``.

Everything the provider signs — checkpoints (signed notes), receipts, refusals, key rotation leaves — goes through
one interface: ``sign(message) -> 64 bytes``, plus the note key's ``name``, ``vkey()``, ``key_hash`` and
``public_key``. A signer MUST be pure RFC 8032 Ed25519 (no prehash, no context): its signatures are deterministic,
so two replicas signing the same checkpoint write byte-identical notes, and the store keeps the first one written.
``ledger.checkpoint.NoteSigner`` (a key held in memory) is one; ``provider.signers`` holds a file signer and a
PKCS#11 one. ``ExternalSigner`` builds the note-key half from the public key and a signing function, and checks
each signature against the public key before it is used (a token that signs anything else — Ed25519ph, a wrong key
— fails loudly instead of writing notes no replica or auditor can verify).

Signers are called outside store transactions (``provider.window.Window.signer_at`` refuses otherwise): a call to
a hardware token may take milliseconds to seconds, and no row lock is held while it runs.
"""

from __future__ import annotations

from collections.abc import Callable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from dprag.errors import DpragError

from .ledger.checkpoint import KeyOfVerifier, NoteVerifier, Signer

__all__ = ["Signer", "ExternalSigner", "SignerError"]


class SignerError(DpragError):
    """A signer failed or returned a signature that does not verify under its public key (``signer``, ``rule``)."""

    def __init__(self, signer: str, rule: str):
        super().__init__(f"signer {signer}: {rule}")
        self.signer, self.rule = signer, rule


class ExternalSigner(KeyOfVerifier):
    """A ``Signer`` whose private key lives elsewhere: ``sign_raw(message) -> signature`` (e.g. a PKCS#11 token's
    ``C_Sign`` with ``CKM_EDDSA``). Every signature is verified under ``public_key`` before it is returned."""

    def __init__(self, name: str, public_key: bytes, sign_raw: Callable[[bytes], bytes], *, what: str = "external"):
        self._verifier = NoteVerifier(name, bytes(public_key))
        self._public = Ed25519PublicKey.from_public_bytes(bytes(public_key))
        self._sign_raw = sign_raw
        self._what = what

    @property
    def name(self) -> str:
        return self._verifier.name

    def sign(self, message: bytes) -> bytes:
        message = bytes(message)
        try:
            sig = bytes(self._sign_raw(message))
        except DpragError:
            raise
        except Exception as e:  # noqa: BLE001 - the backend's own error (a token removed, a session closed)
            raise SignerError(self._what, f"could not sign ({type(e).__name__}: {e})") from e
        try:
            if len(sig) != 64:
                raise InvalidSignature
            self._public.verify(sig, message)
        except InvalidSignature:
            raise SignerError(
                self._what, "returned a signature that is not RFC 8032 Ed25519 under its public key"
            ) from None
        return sig

    def __repr__(self) -> str:
        return f"ExternalSigner({self._what}, vkey={self.vkey()!r})"
