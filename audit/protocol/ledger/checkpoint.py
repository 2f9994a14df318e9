"""Signed checkpoints: the transparency-dev checkpoint body inside a golang.org/x/mod/sumdb/note signed note.

Sources: transparency-dev/formats ``log/README.md`` (checkpoint body) and golang.org/x/mod ``sumdb/note``
(signed note, Ed25519 keys, key hashes). Byte-level grammar, restated in spec/ledger.md:

Checkpoint body (UTF-8, every line ends in ``\\n``)::

    <origin>\\n                 non-empty, no control characters
    <size>\\n                   ASCII decimal, no sign, no leading zeros, < 2**64
    <base64(root)>\\n           RFC 4648 §4 standard padded base64 of the 32-byte RFC 6962 root
    [<extension line>\\n ...]   optional, each non-empty

Signed note::

    <text>                     the body, ending in \\n
    \\n                         one blank line
    — <name> <base64(key_hash[4] || signature)>\\n   one or more lines; "—" is U+2014 EM DASH

The signature is Ed25519 over the text bytes (including its final newline, not the blank line).
``key_hash`` is the big-endian uint32 of the first 4 bytes of ``SHA-256(name || "\\n" || 0x01 || pubkey)``.
Keys are published as ``vkey = <name>+<8 hex key_hash>+<base64(0x01 || pubkey)>``; private keys are
``PRIVATE+KEY+<name>+<8 hex key_hash>+<base64(0x01 || seed)>`` (Go ``note.GenerateKey`` format).

Parsing is strict: everything Go's ``note.Open`` rejects is rejected, and in addition base64 must be
canonical (so no two encodings of one signature or root are accepted) and the checkpoint size may not have
leading zeros. Go's leniencies that matter for interoperability are kept: signatures by unknown keys are
carried along as unverified (witness cosignatures), repeated identical signature lines are ignored.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .errors import KeyFormatError, MalformedNoteError, SignatureError
from .rfc6962 import HASH_SIZE

ALG_ED25519 = 1
SIG_PREFIX = "\u2014 "  # em dash + space
MAX_SIGNATURES = 100  # as golang.org/x/mod/sumdb/note.Open
MAX_SIZE = (1 << 64) - 1

_SIZE_RE = re.compile(r"(?:0|[1-9][0-9]*)")
_HEX8_RE = re.compile(r"[0-9a-fA-F]{8}")


# ---------------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------------


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def strict_b64(s: str) -> bytes | None:
    """Decode standard padded base64, or None unless ``s`` is the canonical encoding of the result."""
    try:
        raw = base64.b64decode(s.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        return None
    return raw if _b64(raw) == s else None


def _has_control(s: str, allow_newline: bool = False) -> bool:
    return any((ord(c) < 0x20 and not (allow_newline and c == "\n")) for c in s)


def is_valid_name(name: object) -> bool:
    """A note key name: non-empty UTF-8 with no Unicode space, no '+' and no control character."""
    return (
        isinstance(name, str)
        and name != ""
        and "+" not in name
        and not _has_control(name)
        and not any(c.isspace() for c in name)
    )


def key_hash(name: str, encoded_public_key: bytes) -> int:
    """sumdb note key hash: big-endian uint32 of SHA-256(name || "\\n" || 0x01 || pubkey)[:4]."""
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + encoded_public_key).digest()
    return int.from_bytes(digest[:4], "big")


# ---------------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------------


class NoteVerifier:
    """An Ed25519 note verifier: a key name, its key hash and the 32-byte public key."""

    __slots__ = ("name", "key_hash", "public_key", "_key")

    def __init__(self, name: str, public_key: bytes):
        if not is_valid_name(name):
            raise KeyFormatError("name", "must be non-empty, without spaces, '+' or control characters", name)
        if not isinstance(public_key, (bytes, bytearray)) or len(public_key) != 32:
            raise KeyFormatError("public_key", "must be a 32-byte Ed25519 public key", public_key)
        self.name = name
        self.public_key = bytes(public_key)
        self.key_hash = key_hash(name, bytes([ALG_ED25519]) + self.public_key)
        try:
            self._key = Ed25519PublicKey.from_public_bytes(self.public_key)
        except ValueError:
            raise KeyFormatError("public_key", "must be a valid Ed25519 public key", public_key) from None

    @classmethod
    def from_vkey(cls, vkey: str) -> NoteVerifier:
        """Parse ``<name>+<hex8 key hash>+<base64(0x01 || pubkey)>`` (Go ``note.NewVerifier``)."""
        if not isinstance(vkey, str):
            raise KeyFormatError("vkey", "must be a string", type(vkey).__name__)
        # Like Go's strings.Cut chain: the base64 key may itself contain '+'.
        name, sep1, rest = vkey.partition("+")
        hash16, sep2, key64 = rest.partition("+")
        if not (sep1 and sep2):
            raise KeyFormatError("vkey", "must be <name>+<hash>+<key>", vkey)
        key = strict_b64(key64)
        if not is_valid_name(name) or not _HEX8_RE.fullmatch(hash16) or not key:
            raise KeyFormatError("vkey", "must be <name>+<8 hex digits>+<canonical base64 key>", vkey)
        if key_hash(name, key) != int(hash16, 16):
            raise KeyFormatError("vkey", "key hash does not match name and key", vkey)
        if key[0] != ALG_ED25519:
            raise KeyFormatError("vkey", "unknown key algorithm (only 1 = Ed25519)", key[0])
        if len(key) != 33:
            raise KeyFormatError("vkey", "Ed25519 key must be 32 bytes", len(key) - 1)
        return cls(name, key[1:])

    def vkey(self) -> str:
        """Publishable verifier key ``<name>+<hash>+<base64(0x01 || pubkey)>``."""
        return f"{self.name}+{self.key_hash:08x}+{_b64(bytes([ALG_ED25519]) + self.public_key)}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        """True iff ``signature`` is a valid Ed25519 signature of ``message`` under this key."""
        if len(signature) != 64:
            return False
        try:
            self._key.verify(bytes(signature), bytes(message))
        except InvalidSignature:
            return False
        return True

    def __repr__(self) -> str:
        return f"NoteVerifier({self.vkey()!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NoteVerifier) and (self.name, self.public_key) == (other.name, other.public_key)

    def __hash__(self) -> int:
        return hash((self.name, self.public_key))


@runtime_checkable
class Signer(Protocol):
    """What signs a note (and every other provider signature): deterministic RFC 8032 Ed25519 under a note key.
    ``NoteSigner`` holds the key in memory; ``audit.protocol.signer`` documents the interface and other backends."""

    @property
    def name(self) -> str: ...

    @property
    def key_hash(self) -> int: ...

    @property
    def public_key(self) -> bytes: ...

    def vkey(self) -> str: ...

    def verifier(self) -> NoteVerifier: ...

    def sign(self, message: bytes, /) -> bytes: ...


class KeyOfVerifier:
    """The public side of a signer, read from its ``NoteVerifier`` (``_verifier``): the key hash, the raw public
    key, the verifier and its vkey text. Shared by ``NoteSigner`` and the signers whose key lives elsewhere."""

    __slots__ = ()
    _verifier: NoteVerifier

    @property
    def key_hash(self) -> int:
        return self._verifier.key_hash

    @property
    def public_key(self) -> bytes:
        return self._verifier.public_key

    def verifier(self) -> NoteVerifier:
        return self._verifier

    def vkey(self) -> str:
        return self._verifier.vkey()


class NoteSigner(KeyOfVerifier):
    """An Ed25519 note signer (holds the 32-byte private seed; keep it secret)."""

    __slots__ = ("name", "_private", "_verifier")

    def __init__(self, name: str, seed: bytes):
        if not isinstance(seed, (bytes, bytearray)) or len(seed) != 32:
            raise KeyFormatError("seed", "must be a 32-byte Ed25519 private seed")
        self._private = Ed25519PrivateKey.from_private_bytes(bytes(seed))
        self.name = name
        self._verifier = NoteVerifier(name, self._private.public_key().public_bytes_raw())

    @classmethod
    def generate(cls, name: str) -> NoteSigner:
        """A fresh key from the OS CSPRNG."""
        return cls(name, Ed25519PrivateKey.generate().private_bytes_raw())

    @classmethod
    def from_skey(cls, skey: str) -> NoteSigner:
        """Parse ``PRIVATE+KEY+<name>+<hex8 hash>+<base64(0x01 || seed)>`` (Go ``note.NewSigner``)."""
        if not isinstance(skey, str):
            raise KeyFormatError("skey", "must be a string", type(skey).__name__)
        parts = skey.split("+", 4)  # the base64 key (last field) may itself contain '+'
        if len(parts) != 5 or parts[0] != "PRIVATE" or parts[1] != "KEY":
            raise KeyFormatError("skey", "must be PRIVATE+KEY+<name>+<hash>+<key>")
        _, _, name, hash16, key64 = parts
        key = strict_b64(key64)
        if not is_valid_name(name) or not _HEX8_RE.fullmatch(hash16) or not key:
            raise KeyFormatError("skey", "must be PRIVATE+KEY+<name>+<8 hex digits>+<canonical base64 key>")
        if key[0] != ALG_ED25519:
            raise KeyFormatError("skey", "unknown key algorithm (only 1 = Ed25519)", key[0])
        if len(key) != 33:
            raise KeyFormatError("skey", "Ed25519 seed must be 32 bytes", len(key) - 1)
        signer = cls(name, key[1:])
        if signer.key_hash != int(hash16, 16):
            raise KeyFormatError("skey", "key hash does not match name and derived public key")
        return signer

    def skey(self) -> str:
        """Secret signer key string (Go ``note`` format). Anyone holding it can sign as this log."""
        seed = self._private.private_bytes_raw()
        return f"PRIVATE+KEY+{self.name}+{self.key_hash:08x}+{_b64(bytes([ALG_ED25519]) + seed)}"

    def sign(self, message: bytes) -> bytes:
        """Ed25519 signature (64 bytes, deterministic) of ``message``."""
        return self._private.sign(bytes(message))

    def __repr__(self) -> str:
        return f"NoteSigner(vkey={self.vkey()!r})"


# ---------------------------------------------------------------------------------------------------
# Signed notes
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: key name, key hash and the raw signature bytes (without the 4-byte hash)."""

    name: str
    key_hash: int
    signature: bytes

    def line(self) -> str:
        return f"{SIG_PREFIX}{self.name} {_b64(self.key_hash.to_bytes(4, 'big') + self.signature)}\n"


@dataclass(frozen=True)
class Note:
    """An opened note: its text, signatures verified by known keys, and signatures by unknown keys."""

    text: str
    signatures: tuple[NoteSignature, ...]
    unverified: tuple[NoteSignature, ...] = field(default=())


def _check_text(text: str | bytes) -> str:
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedNoteError("text", "must be valid UTF-8") from None
    if not isinstance(text, str):
        raise MalformedNoteError("text", "must be str or bytes", type(text).__name__)
    if not text.endswith("\n"):
        raise MalformedNoteError("text", "must end with a newline", text[-20:])
    if _has_control(text, allow_newline=True):
        raise MalformedNoteError("text", "must not contain control characters other than newline")
    return text


def sign_note(text: str | bytes, *signers: Signer, keep: Sequence[NoteSignature] = ()) -> bytes:
    """Encode ``text`` as a signed note with one signature line per signer (Go ``note.Sign``).

    ``keep`` are existing signatures (e.g. from :func:`open_note`) to carry over first; one by the same
    key as a new signer is replaced.
    """
    text = _check_text(text)
    if not signers and not keep:
        raise MalformedNoteError("signers", "a note needs at least one signature")
    msg = text.encode("utf-8")
    new = []
    seen = set()
    for s in signers:
        if not isinstance(s, Signer):
            raise MalformedNoteError(
                "signers", "must be Signers (NoteSigner or audit.protocol.signer)", type(s).__name__
            )
        seen.add((s.name, s.key_hash))
        new.append(NoteSignature(s.name, s.key_hash, s.sign(msg)).line())
    old = [sig.line() for sig in keep if (sig.name, sig.key_hash) not in seen]
    return msg + b"\n" + "".join(old + new).encode("utf-8")


def parse_note(msg: bytes) -> tuple[str, list[tuple[str, NoteSignature]]]:
    """Split a signed note into text and signature lines (grammar only, no cryptography)."""
    if not isinstance(msg, (bytes, bytearray, memoryview)):
        raise MalformedNoteError("note", "must be bytes", type(msg).__name__)
    try:
        s = bytes(msg).decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedNoteError("note", "must be valid UTF-8") from None
    if _has_control(s, allow_newline=True):
        raise MalformedNoteError("note", "must not contain control characters other than newline")
    split = s.rfind("\n\n")
    if split < 0:
        raise MalformedNoteError("note", "must have a blank line before the signatures")
    text, sigs = s[: split + 1], s[split + 2 :]
    if not sigs or not sigs.endswith("\n"):
        raise MalformedNoteError("note", "signature block must be non-empty and end with a newline")
    lines = sigs[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise MalformedNoteError("note", f"must have at most {MAX_SIGNATURES} signatures", len(lines))
    parsed = []
    for line in lines:
        if not line.startswith(SIG_PREFIX):
            raise MalformedNoteError("signature", "line must start with '\u2014 '", line[:40])
        name, sep, b64 = line[len(SIG_PREFIX) :].partition(" ")
        raw = strict_b64(b64) if sep else None
        if not is_valid_name(name) or not b64 or raw is None or len(raw) < 5:
            raise MalformedNoteError("signature", "must be '\u2014 <name> <canonical base64(hash || sig)>'", line[:80])
        parsed.append((line, NoteSignature(name, int.from_bytes(raw[:4], "big"), raw[4:])))
    return text, parsed


def open_note(msg: bytes, verifiers: Iterable[NoteVerifier]) -> Note:
    """Parse a signed note and check its signatures against ``verifiers`` (Go ``note.Open``).

    Signatures by a known (name, key hash) must verify, else :class:`SignatureError`; signatures by unknown
    keys are returned as ``unverified``; repeated lines are dropped. At least one signature must verify.
    """
    known: dict[tuple[str, int], NoteVerifier] = {}
    for v in verifiers:
        if not isinstance(v, NoteVerifier):
            raise MalformedNoteError("verifiers", "must be NoteVerifier instances", type(v).__name__)
        k = (v.name, v.key_hash)
        if k in known and known[k] != v:
            raise SignatureError(f"ambiguous key {v.name}+{v.key_hash:08x}")
        known[k] = v
    text, parsed = parse_note(msg)
    text_bytes = text.encode("utf-8")
    verified: list[NoteSignature] = []
    unverified: list[NoteSignature] = []
    seen_verified: set[tuple[str, int]] = set()
    seen_lines: set[str] = set()
    for line, sig in parsed:
        kv = known.get((sig.name, sig.key_hash))
        if kv is None:
            if line not in seen_lines:
                seen_lines.add(line)
                unverified.append(sig)
            continue
        if (sig.name, sig.key_hash) in seen_verified:
            continue
        seen_verified.add((sig.name, sig.key_hash))
        if not kv.verify(text_bytes, sig.signature):
            raise SignatureError(f"invalid signature for key {sig.name}+{sig.key_hash:08x}")
        verified.append(sig)
    if not verified:
        raise SignatureError("note has no verifiable signatures")
    return Note(text, tuple(verified), tuple(unverified))


# ---------------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """A log checkpoint: origin, tree size and RFC 6962 root hash, plus optional extension lines."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.origin, str) or not self.origin or "\n" in self.origin or _has_control(self.origin):
            raise MalformedNoteError(
                "origin", "must be a non-empty single line without control characters", self.origin
            )
        if isinstance(self.size, bool) or not isinstance(self.size, int) or not 0 <= self.size <= MAX_SIZE:
            raise MalformedNoteError("size", "must be an integer in [0, 2**64)", self.size)
        if not isinstance(self.root, (bytes, bytearray)) or len(self.root) != HASH_SIZE:
            raise MalformedNoteError("root", f"must be a {HASH_SIZE}-byte hash", self.root)
        object.__setattr__(self, "root", bytes(self.root))
        ext = tuple(self.extensions)
        for e in ext:
            if not isinstance(e, str) or not e or "\n" in e or _has_control(e):
                raise MalformedNoteError("extensions", "each must be a non-empty line without control characters", e)
        object.__setattr__(self, "extensions", ext)

    def body(self) -> bytes:
        """The checkpoint body bytes (the note text that gets signed)."""
        lines = [self.origin, str(self.size), _b64(self.root), *self.extensions]
        return ("\n".join(lines) + "\n").encode("utf-8")

    @classmethod
    def parse(cls, body: bytes | str) -> Checkpoint:
        """Strictly parse a checkpoint body (the inverse of :meth:`body`)."""
        if isinstance(body, (bytes, bytearray)):
            try:
                body = bytes(body).decode("utf-8")
            except UnicodeDecodeError:
                raise MalformedNoteError("checkpoint", "must be valid UTF-8") from None
        if not isinstance(body, str) or not body.endswith("\n"):
            raise MalformedNoteError("checkpoint", "must end with a newline")
        lines = body[:-1].split("\n")
        if len(lines) < 3:
            raise MalformedNoteError("checkpoint", "must have at least 3 lines (origin, size, root)", len(lines))
        origin, size_s, root_s, *ext = lines
        if not _SIZE_RE.fullmatch(size_s):
            raise MalformedNoteError("size", "must be ASCII decimal without sign or leading zeros", size_s)
        size = int(size_s)
        root = strict_b64(root_s)
        if root is None or len(root) != HASH_SIZE:
            raise MalformedNoteError("root", f"must be canonical base64 of a {HASH_SIZE}-byte hash", root_s)
        return cls(origin, size, root, tuple(ext))


def sign_checkpoint(checkpoint: Checkpoint, signer: Signer, *cosigners: Signer) -> bytes:
    """The signed note of ``checkpoint``: the log's signature first, then any cosignatures."""
    if not isinstance(checkpoint, Checkpoint):
        raise MalformedNoteError("checkpoint", "must be a Checkpoint", type(checkpoint).__name__)
    return sign_note(checkpoint.body(), signer, *cosigners)


def open_checkpoint(
    msg: bytes, origin: str, log_verifier: NoteVerifier, *other_verifiers: NoteVerifier
) -> tuple[Checkpoint, Note]:
    """Verify and parse a signed checkpoint (transparency-dev ``log.ParseCheckpoint``).

    Requires a valid signature by ``log_verifier``; the body must parse strictly and carry ``origin``.
    Returns the checkpoint and the opened note (whose ``signatures`` include any valid cosignatures by
    ``other_verifiers``).
    """
    if not isinstance(log_verifier, NoteVerifier):
        raise MalformedNoteError("log_verifier", "must be a NoteVerifier", type(log_verifier).__name__)
    note = open_note(msg, [log_verifier, *other_verifiers])
    if not any(s.name == log_verifier.name and s.key_hash == log_verifier.key_hash for s in note.signatures):
        raise SignatureError(f"no signature by the log key {log_verifier.name}+{log_verifier.key_hash:08x}")
    cp = Checkpoint.parse(note.text)
    if cp.origin != origin:
        raise SignatureError(f"checkpoint origin {cp.origin!r} is not the expected {origin!r}")
    return cp, note


__all__ = [
    "Checkpoint",
    "Note",
    "NoteSignature",
    "NoteSigner",
    "Signer",
    "NoteVerifier",
    "key_hash",
    "open_checkpoint",
    "open_note",
    "sign_checkpoint",
    "sign_note",
]
