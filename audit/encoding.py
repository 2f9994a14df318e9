"""Canonical encoding of every protocol record (spec/protocol.md §2).

Canonical JSON: UTF-8, keys sorted, separators ``,`` and ``:``, no floats (a real is the string
``float.hex(x)``), integers with |x| < 2^53, byte strings as lower-case hex. ``decode`` refuses any
bytes that are not exactly the canonical serialisation of what they parse to, so every byte of a record is
determined by its content.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from dprag.accounting.errors import DpragError, InvalidParameterError

MAX_SAFE_INT = (1 << 53) - 1


class EncodingError(DpragError, ValueError):
    """Bytes or a value that break the canonical encoding rules."""


def real(x: float) -> str:
    """A finite real as the exact ``float.hex`` string."""
    v = float(x)
    if not math.isfinite(v):
        raise InvalidParameterError("real", "must be finite", x)
    return v.hex()


def parse_real(s: Any, field: str = "real") -> float:
    """Inverse of :func:`real`; refuses anything that is not the canonical hex form of a finite double."""
    if not isinstance(s, str):
        raise EncodingError(f"{field}: must be a float.hex() string, got {type(s).__name__}")
    try:
        v = float.fromhex(s)
    except (ValueError, OverflowError):
        raise EncodingError(f"{field}: {s!r} is not a float.hex() string") from None
    if not math.isfinite(v) or v.hex() != s:
        raise EncodingError(f"{field}: {s!r} is not the canonical float.hex() of a finite double")
    return v


def _check(value: Any, path: str = "$") -> None:
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INT:
            raise EncodingError(f"{path}: integer {value} exceeds 2^53 - 1")
        return
    if isinstance(value, float):
        raise EncodingError(f"{path}: floats are not allowed (encode reals with encoding.real)")
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check(v, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise EncodingError(f"{path}: object keys must be strings")
            _check(v, f"{path}.{k}")
        return
    raise EncodingError(f"{path}: {type(value).__name__} cannot be encoded")


def encode(value: Any) -> bytes:
    """The canonical bytes of ``value``."""
    _check(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def decode(data: bytes, *, what: str = "record") -> Any:
    """Parse canonical bytes; raises EncodingError unless ``encode(decode(data)) == data``."""
    if not isinstance(data, (bytes, bytearray)):
        raise EncodingError(f"{what}: expected bytes")
    try:
        text = bytes(data).decode("utf-8")
        value = json.loads(text, parse_float=_refuse_float, parse_constant=_refuse_const)
    except EncodingError:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise EncodingError(f"{what}: not valid UTF-8 JSON ({e.__class__.__name__})") from None
    try:
        again = encode(value)
    except EncodingError as e:
        raise EncodingError(f"{what}: {e}") from None
    if again != bytes(data):
        raise EncodingError(f"{what}: bytes are not in canonical form")
    return value


def _refuse_float(s: str):
    raise EncodingError(f"JSON float {s!r} is not allowed")


def _refuse_const(s: str):
    raise EncodingError(f"JSON constant {s!r} is not allowed")


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def digest(value: Any) -> str:
    """hex SHA-256 of the canonical encoding of ``value``."""
    return hashlib.sha256(encode(value)).hexdigest()


def hexbytes(s: Any, field: str, length: int | None = None) -> bytes:
    """Parse a lower-case hex string (of ``length`` bytes if given)."""
    if not isinstance(s, str) or s != s.lower():
        raise EncodingError(f"{field}: must be a lower-case hex string")
    try:
        b = bytes.fromhex(s)
    except ValueError:
        raise EncodingError(f"{field}: not a hex string") from None
    if b.hex() != s:
        raise EncodingError(f"{field}: not canonical hex")
    if length is not None and len(b) != length:
        raise EncodingError(f"{field}: must be {length} bytes, got {len(b)}")
    return b
