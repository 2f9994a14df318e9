"""What crosses the wire of ``dprag serve`` (spec/api.md): the request authentication, the error bodies, the
bundle archive. No web framework here: the server (``app.py``) and the client (``client.py``) both use it.

Authentication of fetches. Everything an account or the auditor fetches is authenticated by its Ed25519 key (the
account's key as genesis registers it; the auditor's key as the provider configured it), with one header:

    Authorization: Dprag-Ed25519 key=<account id | ":auditor">, ts=<unix seconds>, sig=<hex Ed25519 signature>

over the bytes ``"dprag/http-auth/v1\\n" METHOD "\\n" PATH?QUERY "\\n" ts "\\n" hex(SHA-256(body))``. The server
accepts ``|now - ts| <= AUTH_SKEW`` seconds. A replayed header can only repeat a read of what its owner may read; a
submitted request needs none: it carries the account's signature over its own content and counter.
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

API_VERSION = "dprag-http/1"
#: the auditor's key id (no account id can take it: account ids never contain ':')
AUDITOR = ":auditor"
AUTH_SCHEME = "Dprag-Ed25519"
AUTH_SKEW = 300
AUTH_DOMAIN = b"dprag/http-auth/v1\n"
_AUTH_RE = re.compile(r"^Dprag-Ed25519 key=(:auditor|[A-Za-z0-9_.-]{1,64}), ts=(\d{1,12}), sig=([0-9a-f]{128})$")

#: the largest request body the server reads (a signed request with a 4,096-character question is ~20 KiB)
MAX_BODY = 256 * 1024


class AuthError(Exception):
    """The Authorization header is missing, malformed, stale, or does not verify (HTTP 401)."""

    def __init__(self, rule: str):
        self.rule = rule
        super().__init__(rule)


def auth_message(method: str, target: str, ts: int, body: bytes) -> bytes:
    return AUTH_DOMAIN + f"{method.upper()}\n{target}\n{int(ts)}\n{hashlib.sha256(body).hexdigest()}".encode()


def auth_header(
    key_id: str,
    sign: Callable[[bytes], bytes],
    method: str,
    target: str,
    body: bytes = b"",
    now: float | None = None,
) -> str:
    """The Authorization header for ``key_id`` (``sign(message) -> signature bytes``)."""
    ts = int(time.time() if now is None else now)
    sig = sign(auth_message(method, target, ts, body))
    return f"{AUTH_SCHEME} key={key_id}, ts={ts}, sig={sig.hex()}"


def check_auth(
    header: str | None,
    method: str,
    target: str,
    body: bytes,
    keys: Callable[[str], str | None],
    now: float | None = None,
) -> str:
    """The key id that signed ``header`` for this exact request, or AuthError. ``keys(key_id)`` gives the Ed25519
    public key (hex) registered under an id, or None."""
    if not header:
        raise AuthError(f"needs an Authorization header ({AUTH_SCHEME} key=..., ts=..., sig=...)")
    m = _AUTH_RE.match(header.strip())
    if m is None:
        raise AuthError(f"Authorization must be '{AUTH_SCHEME} key=<id>, ts=<unix seconds>, sig=<128 hex>'")
    key_id, ts, sig = m.group(1), int(m.group(2)), bytes.fromhex(m.group(3))
    if abs((time.time() if now is None else now) - ts) > AUTH_SKEW:
        raise AuthError(f"Authorization ts is more than {AUTH_SKEW} s from the server's clock")
    vkey = keys(key_id)
    if vkey is None:
        raise AuthError("Authorization key is not registered")
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(vkey)).verify(sig, auth_message(method, target, ts, body))
    except (InvalidSignature, ValueError):
        raise AuthError("Authorization signature does not verify for this method, path, time and body") from None
    return key_id


def error_body(kind: str, rule: str, field: str | None = None, **extra: Any) -> dict[str, Any]:
    """Every error the API returns: ``{"error": {"type", "field", "rule", ...}}`` (spec/api.md)."""
    return {"error": {"type": kind, "field": field, "rule": rule, **extra}}


# -- the bundle as an archive ---------------------------------------------------------------------------------
def tar_directory(root: Path, only: str | None = None) -> bytes:
    """An uncompressed tar of the regular files under ``root`` (``only``: one top-level folder), sorted, with fixed
    metadata (no owners, no times): the same bundle gives the same bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        base = root / only if only else root
        for p in sorted(base.rglob("*")):
            if p.is_symlink() or not p.is_file():
                continue
            info = tarfile.TarInfo(str(p.relative_to(root)))
            info.size = p.stat().st_size
            info.mode = 0o600
            with open(p, "rb") as f:
                tar.addfile(info, f)
    return buf.getvalue()


def untar_bundle(data: bytes, out: Path, max_bytes: int) -> Path:
    """Unpack a bundle archive into the new directory ``out``: regular files only, relative paths inside ``out``, at
    most ``max_bytes`` in all (tarfile's ``data`` filter refuses links, devices, absolute and escaping names)."""
    out.mkdir(parents=True, exist_ok=False)
    total = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        members = tar.getmembers()
        for m in members:
            if not m.isfile():
                raise ValueError(f"bundle archive member {m.name[:100]!r} is not a regular file")
            parts = m.name.split("/")
            if m.name.startswith("/") or "\\" in m.name or any(p in ("", ".", "..") for p in parts):
                raise ValueError(f"bundle archive member {m.name[:100]!r} is not a plain relative path")
            total += m.size
            if total > max_bytes:
                raise ValueError(f"bundle archive holds more than {max_bytes} bytes")
        tar.extractall(out, members=members, filter="data")
    return out
