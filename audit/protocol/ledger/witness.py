"""Witness cosignatures on checkpoints (c2sp.org/tlog-cosignature, Ed25519 ``cosignature/v1``).

A witness that has checked a checkpoint is consistent with every checkpoint of the same log it saw before
adds a note signature line to it::

    — <witness name> base64(key ID[4] || u64be(timestamp) || Ed25519 signature[64])

over the message ``"cosignature/v1\\n" || "time " || decimal(timestamp) || "\\n" || <checkpoint body>``. The key
ID is ``SHA-256(name || "\\n" || 0x04 || public key)[:4]``; a witness key is published as the vkey
``<name>+<8 hex key ID>+<base64(0x04 || public key)>``. Auditors who require cosignatures from witnesses
they trust (``dprag audit verify --witness FILE --min-witnesses K``) detect a fork the provider shows to
different auditors, as long as one honest witness saw both (spec/threat-model.md §2).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from .checkpoint import SIG_PREFIX, NoteVerifier, is_valid_name, parse_note, strict_b64
from .errors import KeyFormatError, MalformedNoteError, SignatureError

ALG_COSIGNATURE_V1 = 0x04
HEADER = b"cosignature/v1\n"
MAX_TIMESTAMP = (1 << 63) - 1


def key_id(name: str, public_key: bytes) -> int:
    return int.from_bytes(
        hashlib.sha256(name.encode() + b"\n" + bytes([ALG_COSIGNATURE_V1]) + public_key).digest()[:4], "big"
    )


def signed_message(body: str, timestamp: int) -> bytes:
    return HEADER + b"time %d\n" % timestamp + body.encode("utf-8")


@dataclass(frozen=True)
class WitnessVerifier:
    name: str
    public_key: bytes

    @classmethod
    def from_vkey(cls, vkey: str) -> WitnessVerifier:
        parts = vkey.strip().split("+", 2)  # the base64 key may itself hold "+"
        if len(parts) != 3 or not is_valid_name(parts[0]):
            raise KeyFormatError("vkey", "must be <name>+<8 hex key id>+<base64(0x04 || key)>", vkey[:60])
        raw = strict_b64(parts[2])
        if raw is None or len(raw) != 33 or raw[0] != ALG_COSIGNATURE_V1:
            raise KeyFormatError("vkey", "key must be base64(0x04 || 32-byte Ed25519 key)", vkey[:60])
        v = cls(parts[0], raw[1:])
        if f"{v.key_id:08x}" != parts[1]:
            raise KeyFormatError("vkey", "key id does not match the name and key", vkey[:60])
        return v

    @property
    def key_id(self) -> int:
        return key_id(self.name, self.public_key)

    @property
    def vkey(self) -> str:
        return (
            f"{self.name}+{self.key_id:08x}+{base64.b64encode(bytes([ALG_COSIGNATURE_V1]) + self.public_key).decode()}"
        )


@dataclass(frozen=True)
class WitnessSigner:
    name: str
    seed: bytes

    @classmethod
    def generate(cls, name: str) -> WitnessSigner:
        if not is_valid_name(name):
            raise KeyFormatError("name", "not a valid note key name", name)
        return cls(name, secrets.token_bytes(32))

    @property
    def verifier(self) -> WitnessVerifier:
        pub = Ed25519PrivateKey.from_private_bytes(self.seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return WitnessVerifier(self.name, pub)

    def cosign(self, note: bytes, timestamp: int) -> bytes:
        """``note`` with this witness's cosignature line appended (the witness has checked consistency)."""
        if not 0 <= timestamp <= MAX_TIMESTAMP:
            raise MalformedNoteError("timestamp", "must lie in [0, 2^63)", timestamp)
        body, _ = parse_note(note)
        sig = Ed25519PrivateKey.from_private_bytes(self.seed).sign(signed_message(body, timestamp))
        raw = self.verifier.key_id.to_bytes(4, "big") + timestamp.to_bytes(8, "big") + sig
        return bytes(note) + f"{SIG_PREFIX}{self.name} {base64.b64encode(raw).decode()}\n".encode()


def cosignatures(note: bytes, witnesses: list[WitnessVerifier]) -> dict[str, int]:
    """The witnesses (by name) whose valid cosignature ``note`` carries, with its timestamp. A line that names
    a known witness's key but does not verify raises SignatureError; lines of other keys are ignored."""
    body, lines = parse_note(note)
    known = {(w.name, w.key_id): w for w in witnesses}
    out: dict[str, int] = {}
    for _, sig in lines:
        w = known.get((sig.name, sig.key_hash))
        if w is None:
            continue
        if len(sig.signature) != 72:
            raise SignatureError(f"cosignature of {w.name}: must be 8 + 64 bytes")
        ts = int.from_bytes(sig.signature[:8], "big")
        if ts > MAX_TIMESTAMP:
            raise SignatureError(f"cosignature of {w.name}: timestamp out of range")
        try:
            Ed25519PublicKey.from_public_bytes(w.public_key).verify(sig.signature[8:], signed_message(body, ts))
        except InvalidSignature:
            raise SignatureError(f"cosignature of {w.name} does not verify") from None
        out[w.name] = ts
    return out


class Witness:
    """A witness for one log: it cosigns a checkpoint only if it is consistent with the last one it cosigned
    (an RFC 9162 consistency proof), so two auditors holding its cosignatures hold one history.

    ``state``: a file holding the last cosigned (size, root) and the log key the witness follows, read at start and
    replaced durably (written, fsynced, renamed) *before* a cosignature is returned — a witness restarted from it
    never cosigns a fork of what it cosigned before, nor forgets a rotation it followed. A witness refuses to start
    without it unless ``ephemeral=True`` (tests only: a witness that forgets on restart can be made to cosign a
    fork)."""

    def __init__(
        self,
        signer: WitnessSigner,
        log_origin: str,
        log_verifier: NoteVerifier,
        *,
        state: str | os.PathLike[str] | None = None,
        ephemeral: bool = False,
    ):
        if state is None and not ephemeral:
            raise KeyFormatError(
                "state", "a witness needs its state file (the last checkpoint it cosigned); ephemeral=True in tests"
            )
        self.signer, self.origin, self.log = signer, log_origin, log_verifier
        self.size = 0
        self.root: bytes | None = None
        self.state = None if state is None else Path(state)
        if self.state is not None and self.state.exists():
            data = json.loads(self.state.read_text())
            if data.get("origin") != log_origin:
                raise KeyFormatError("witness state", f"belongs to log {data.get('origin')!r}, not {log_origin!r}")
            self.size, self.root = int(data["size"]), bytes.fromhex(data["root"])
            if data.get("key"):  # a rotation it followed (rotate) outlives a restart
                self.log = NoteVerifier.from_vkey(data["key"])

    def _persist(self, size: int, root: bytes) -> None:
        if self.state is None:
            return
        tmp = self.state.with_name(self.state.name + ".tmp")
        with open(tmp, "w") as f:
            f.write(json.dumps({"origin": self.origin, "size": size, "root": root.hex(), "key": self.log.vkey()}))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state)

    def rotate(self, note: bytes, new: NoteVerifier, consistency: list[bytes] | tuple[bytes, ...] = ()) -> None:
        """Follow the log's key to ``new`` at the checkpoint ``note`` that first covers its rotation, which the caller
        has shown names the rotation (the log's own rule, e.g. ``audit.protocol.provider_keys.witness_follow``): the
        note must open under the key this witness follows and under ``new``, and extend (``consistency``: the proof
        from the last cosigned size) what it cosigned before. The key is kept in its state. SignatureError
        otherwise."""
        from .checkpoint import open_checkpoint
        from .proof import verify_consistency

        cp, _ = open_checkpoint(note, self.origin, self.log)
        open_checkpoint(note, self.origin, new)
        if cp.size < self.size:
            raise SignatureError(
                f"the rotation's checkpoint (size {cp.size}) is below the one cosigned at size {self.size}: the old "
                "key signed past its rotation"
            )
        if self.root is not None and self.size > 0:
            try:
                verify_consistency(self.size, cp.size, list(consistency), self.root, cp.root)
            except Exception as e:  # noqa: BLE001 - the proof module's typed errors: not an extension
                raise SignatureError(
                    f"the rotation's checkpoint is not consistent with size {self.size}: {e}"
                ) from None
        self.log = new
        self._persist(cp.size, cp.root)
        self.size, self.root = cp.size, cp.root

    def cosign(
        self, note: bytes, consistency: list[bytes] | tuple[bytes, ...] = (), *, timestamp: int | None = None
    ) -> bytes:
        """Check ``note`` (signed by the log) against the last cosigned checkpoint and cosign it.
        Raises SignatureError for a checkpoint that is not an append-only extension (a fork or a rollback)."""
        import time

        from .checkpoint import open_checkpoint
        from .proof import verify_consistency

        cp, _ = open_checkpoint(note, self.origin, self.log)
        if cp.size < self.size:
            raise SignatureError(f"checkpoint of size {cp.size} rolls back the one cosigned at size {self.size}")
        if self.root is not None and self.size > 0:
            try:
                verify_consistency(self.size, cp.size, list(consistency), self.root, cp.root)
            except Exception as e:  # the proof module's typed errors: not an extension
                raise SignatureError(
                    f"checkpoint of size {cp.size} is not consistent with the one cosigned at size {self.size}: {e}"
                ) from None
        self._persist(cp.size, cp.root)  # durable before the cosignature leaves
        self.size, self.root = cp.size, cp.root
        return self.signer.cosign(note, int(time.time()) if timestamp is None else timestamp)
