"""The auditor's state between audits (spec/protocol.md §8.14): what a verdict leaves so that the next run replays
only the leaves after it, as a Certificate Transparency monitor keeps the tree head it checked.

``AuditorState`` holds what the checks carry from one leaf to the next and nothing else: the log it is of (its
origin, the pinned key, the verifier's version and options), the verified size, root and compact range, the
log's state leaves (genesis, registry, key, policy and documents leaves: the accounts, keys, epochs and tenants
are rebuilt from them), the leaf hashes (for receipts of old sizes), each query's request (position, account,
counter, h_req, h_top), each document's spend, the receipts seen, the coalition check's rows and labels, and the
verdict so far (its reasons are sticky). Its growth is named in spec/protocol.md §8.14.

On disk: ``MAGIC || HMAC-SHA256(key, body) || body``, ``body`` an ``.npz`` archive read with
``allow_pickle=False`` (arrays and one canonical-JSON header); the MAC is checked before anything is parsed. The
key is the auditor's (``--state-key``: a file of 64 hex characters, mode 0600, made with the first state); the
file is written atomically with mode 0600 and read without following links. ``--state-hash`` pins the file's
SHA-256 instead of, or beside, the key. Every defect is the auditor's input (exit 2), naming the file."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..protocol.bundle import AuditorInputError

MAGIC = b"dprag-auditor-state/1\n"
MAC_BYTES = 32
#: the most bytes a state file may take (a 3·10^7-leaf log with its coalition rows fits)
MAX_STATE_BYTES = 1 << 36


class StateError(AuditorInputError):
    """The state file or its key is unusable, altered, or of another log or verifier (exit 2, naming it)."""

    auditor_input = True


@dataclass
class AuditorState:
    """What the verifier carries past ``size`` (module docstring). Arrays are row-aligned per structure."""

    origin: str
    #: the provider key the auditor pinned (its vkey text), or None
    pinned: str | None
    verifier: str
    #: the verifier's options the state was made with; the next run must use the same (``options_of``)
    options: dict[str, Any]
    size: int
    root: bytes
    #: the compact range at ``size`` (RFC 6962 peaks, largest first)
    frontier: list[bytes]
    #: (position, bytes) of every leaf that is not a query leaf: genesis and the state leaves (§3.2-§3.5)
    control: list[tuple[int, bytes]]
    #: (size, 32) uint8: the leaf hashes, for receipts and refusals of sizes already verified
    leaf_hashes: np.ndarray
    #: the accepted query leaves: position, account code, counter, h_req and h_top (each row of (32,) uint8)
    req_pos: np.ndarray
    req_account: np.ndarray
    req_counter: np.ndarray
    req_hreq: np.ndarray
    req_htop: np.ndarray
    #: account names (the codes index it)
    accounts: list[str]
    last_counter: dict[str, int]
    #: tenant -> each document's spend (filter units)
    spend: dict[str, np.ndarray]
    #: the receipts accepted so far: position, the digest of the signed body, account code, counter
    rc_pos: np.ndarray
    rc_digest: np.ndarray
    rc_account: np.ndarray
    rc_counter: np.ndarray
    #: the coalition check: the distinct (tenant, Q) rows in log order, their account codes, positions and
    #: component labels (the smallest row index of the component)
    co_rows: np.ndarray
    co_account: np.ndarray
    co_pos: np.ndarray
    co_labels: np.ndarray
    #: the rows' 16-byte keys (``coalition.row_digest``): exact repeats of an earlier (tenant, Q) are skipped
    co_digest: np.ndarray
    #: the certified ε and δ of the log's policies ({"policies": their digest, "cert": certify's result}), or None
    certified: dict[str, Any] | None = None
    #: the verdict so far: its reasons (sticky), the evidence rejected, the counts
    reasons: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)
    _codes: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def verdict(self) -> str:
        return "FAIL" if self.reasons else "PASS"

    def account_code(self, name: str) -> int:
        """The code of account ``name``, appending it to ``accounts`` when new (a dict kept beside the list: one
        lookup per row, not a scan of the accounts)."""
        codes = self._codes
        if len(codes) != len(self.accounts):  # built once, and again if ``accounts`` was replaced
            codes.clear()
            codes.update((a, i) for i, a in enumerate(self.accounts))
        code = codes.get(name)
        if code is None:
            code = codes[name] = len(self.accounts)
            self.accounts.append(name)
        return code


_ARRAYS = (
    "leaf_hashes",
    "req_pos",
    "req_account",
    "req_counter",
    "req_hreq",
    "req_htop",
    "rc_pos",
    "rc_digest",
    "rc_account",
    "rc_counter",
    "co_rows",
    "co_account",
    "co_pos",
    "co_labels",
    "co_digest",
)
_HEADER = (
    "origin",
    "pinned",
    "verifier",
    "options",
    "size",
    "accounts",
    "last_counter",
    "reasons",
    "rejected",
    "checked",
    "certified",
)


def empty_state(origin: str, pinned: str | None, verifier: str, options: dict[str, Any], dim: int) -> AuditorState:
    """The state before any leaf (what a first ``--state`` run starts from)."""
    u8 = np.zeros((0, 32), dtype=np.uint8)
    i64 = np.zeros(0, dtype=np.int64)
    return AuditorState(
        origin=origin,
        pinned=pinned,
        verifier=verifier,
        options=options,
        size=0,
        root=hashlib.sha256(b"").digest(),
        frontier=[],
        control=[],
        leaf_hashes=u8,
        req_pos=i64,
        req_account=i64,
        req_counter=i64,
        req_hreq=u8,
        req_htop=u8,
        accounts=[],
        last_counter={},
        spend={},
        rc_pos=i64,
        rc_digest=u8,
        rc_account=i64,
        rc_counter=i64,
        co_rows=np.zeros((0, dim), dtype="<i2"),
        co_account=i64,
        co_pos=i64,
        co_labels=i64,
        co_digest=np.zeros((0, 16), dtype=np.uint8),
    )


def _body(st: AuditorState) -> bytes:
    header: dict[str, Any] = {k: getattr(st, k) for k in _HEADER}
    header["root"] = st.root.hex()
    header["frontier"] = [h.hex() for h in st.frontier]
    header["control"] = [[p, raw.hex()] for p, raw in st.control]
    header["spend_tenants"] = sorted(st.spend)
    arrays = {k: np.ascontiguousarray(getattr(st, k)) for k in _ARRAYS}
    for k, t in enumerate(header["spend_tenants"]):
        arrays[f"spend_{k}"] = np.ascontiguousarray(st.spend[t], dtype=np.int64)
    text = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    arrays["header"] = np.frombuffer(text, dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **arrays)
    return buf.getvalue()


def _parse(body: bytes, where: str) -> AuditorState:
    try:
        with np.load(io.BytesIO(body), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        header = json.loads(arrays.pop("header").tobytes())
        spend = {t: arrays.pop(f"spend_{k}") for k, t in enumerate(header["spend_tenants"])}
        return AuditorState(
            **{k: header[k] for k in _HEADER},
            root=bytes.fromhex(header["root"]),
            frontier=[bytes.fromhex(h) for h in header["frontier"]],
            control=[(int(p), bytes.fromhex(raw)) for p, raw in header["control"]],
            spend=spend,
            **{k: arrays[k] for k in _ARRAYS},
        )
    except (OSError, ValueError, KeyError, TypeError) as e:  # authenticated, yet not a state of this version
        raise StateError(f"{where}: not a state file of this verifier ({type(e).__name__})") from None


def read_key(path: str | os.PathLike[str], *, create: bool) -> bytes:
    """The auditor's state key (``--state-key``): 32 bytes as 64 hex characters, in a regular file of mode 0600
    that is not a link. ``create``: make it (mode 0600) if it does not exist (the first ``--state`` run)."""
    p = Path(path)
    if create and not p.exists() and not p.is_symlink():
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
    data = _read_private(p, "--state-key", 4096)
    try:
        key = bytes.fromhex(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != 32:
        raise StateError(f"--state-key {p}: must hold 64 hex characters (a 32-byte MAC key)")
    return key


def _read_private(p: Path, flag: str, cap: int) -> bytes:
    """A file of the auditor's that others must not read or swap: regular, not a link, mode without group or
    other bits, at most ``cap`` bytes (``inputs.read_auditor_file``)."""
    from .inputs import read_auditor_file

    return read_auditor_file(p, flag, cap, private=True, error=StateError)


def load_state(path: str | os.PathLike[str], key: bytes | None, pinned_hash: str | None) -> AuditorState:
    """The state at ``path``, authenticated by ``key`` (HMAC) and/or ``pinned_hash`` (SHA-256 of the file, hex)."""
    p = Path(path)
    data = _read_private(p, "--state", MAX_STATE_BYTES)
    if pinned_hash is not None and not hmac.compare_digest(hashlib.sha256(data).hexdigest(), pinned_hash.lower()):
        raise StateError(f"--state {p}: its SHA-256 is not the pinned --state-hash (the file was altered or replaced)")
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + MAC_BYTES:
        raise StateError(f"--state {p}: not a dprag auditor state file")
    mac, body = data[len(MAGIC) : len(MAGIC) + MAC_BYTES], data[len(MAGIC) + MAC_BYTES :]
    if key is not None and not hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).digest()):
        raise StateError(
            f"--state {p}: its MAC does not verify under --state-key (the file was altered, or the key "
            "is another auditor's)"
        )
    return _parse(body, f"--state {p}")


def save_state(path: str | os.PathLike[str], st: AuditorState, key: bytes) -> str:
    """Write ``st`` atomically (mode 0600, never through a link); returns the file's SHA-256 (``--state-hash``)."""
    p = Path(path)
    body = _body(st)
    data = MAGIC + hmac.new(key, body, hashlib.sha256).digest() + body
    tmp = p.with_name(f".{p.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if p.is_symlink():
            raise StateError(f"--state {p}: a symbolic link (refused)")
        os.replace(tmp, p)
    finally:
        if tmp.exists():
            tmp.unlink()
    return hashlib.sha256(data).hexdigest()
