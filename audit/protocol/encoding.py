"""Canonical encoding of every protocol record (spec/protocol.md §2).

Canonical JSON is RFC 8785 (JCS) restricted to a subset: UTF-8, object keys sorted by their **UTF-16 code
units** (JCS §3.2.3), separators ``,`` and ``:``, strings escaped as JCS does (``"``, ``\\`` and the control
characters U+0000-U+001F only; ``\\b \\f \\n \\r \\t`` short forms, the others ``\\u00xx`` lower case), no
floats (a real is the string ``float.hex(x)``), integers with |x| < 2^53, byte strings as lower-case hex.
On this subset the bytes are exactly RFC 8785's (tested against the ``rfc8785`` package as an oracle, and
``spec/encoding-vectors.json``).

Refused, by ``encode`` and by ``decode`` alike, each with an :class:`EncodingError` naming the place
(``$.a.b[3]``) and the rule: lone surrogates (any code point U+D800-U+DFFF in a string or key -- JSON text
can smuggle one in as ``"\\ud800"``), floats, NaN / Infinity, integers outside ±(2^53 - 1), nesting deeper
than ``MAX_DEPTH``, non-string keys. ``decode`` additionally refuses invalid UTF-8, duplicate keys, integer
literals too long to be in range (checked on the digit string, before Python's int-from-str limit), and any
bytes that are not exactly the canonical serialisation of what they parse to, so every byte of a record is
determined by its content. ``decode`` never raises anything but ``EncodingError`` on hostile bytes (no
RecursionError / ValueError / MemoryError from nesting or long literals), and its messages quote at most a
short, escaped excerpt of the input.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from typing import Any, NoReturn, TypeAlias, TypeGuard

from dprag.errors import DpragError, InvalidParameterError

MAX_SAFE_INT = (1 << 53) - 1
#: deepest nesting of arrays / objects accepted (protocol records nest a handful of levels)
MAX_DEPTH = 64
#: longest digit string (with sign) that can hold an integer in range: 2^53 - 1 has 16 digits
_MAX_INT_LITERAL = 17
_EXCERPT = 32

_SURROGATE = re.compile("[\ud800-\udfff]")
_HEX = re.compile(r"[0-9a-f]*")
_escape = json.encoder.encode_basestring  # C accelerated; escapes exactly '"', '\\' and U+0000-U+001F

#: A value of the encoding as a type: what ``decode`` gives (no floats). The provider and the client, where no
#: explicit ``Any`` is allowed, read a record's fields as ``JSON`` and narrow each one (``isinstance``).
JSON: TypeAlias = "None | bool | int | str | list[JSON] | dict[str, JSON]"


class EncodingError(DpragError, ValueError):
    """Bytes or a value that break the canonical encoding rules."""


def excerpt(s: Any, limit: int = _EXCERPT) -> str:
    """A short, ASCII-escaped excerpt of ``s`` for error messages (never more than ~``limit`` characters
    of the input, whatever its size; bytes and str alike)."""
    if isinstance(s, (bytes, bytearray, memoryview)):
        b = bytes(s[: limit + 1])
        text = repr(b[:limit])
        return text + ("..." if len(b) > limit else "")
    if not isinstance(s, str):
        return f"<{type(s).__name__}>"
    text = ascii(s[:limit])
    return text + ("..." if len(s) > limit else "")


#: what a tenant, account or window name may be (spec/protocol.md §3): the provider refuses others, the verifier FAILs
IDENTIFIER_RULE = "1-64 characters of [A-Za-z0-9_.-]"
_IDENTIFIER = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def is_identifier(x: Any) -> TypeGuard[str]:
    """Whether ``x`` is a name by ``IDENTIFIER_RULE``."""
    return isinstance(x, str) and _IDENTIFIER.fullmatch(x) is not None


#: Unicode categories that can move a terminal's cursor, hide or reorder text, or end a line: control (C0, C1,
#: DEL), format (bidi overrides, zero-width), surrogate, private-use, unassigned, line and paragraph separators
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def printable(s: str) -> str:
    """``s`` with every character that is not safe to show (``_UNPRINTABLE``) written as a Python escape
    (``\\x1b``, ``\\u202e``); other text, ε and δ included, unchanged. Every string a verdict shows passes
    through this (spec/protocol.md §8.11): a bundle's names cannot move the cursor or forge a line."""
    if s.isascii() and s.isprintable():
        return s
    out = []
    for ch in s:
        if unicodedata.category(ch) in _UNPRINTABLE:
            o = ord(ch)
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")
        else:
            out.append(ch)
    return "".join(out)


def printable_tree(value: Any) -> Any:
    """``printable`` applied to every string in a JSON-like value (dict keys included)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable_tree(k): printable_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(printable_tree(v) for v in value)
    return value


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
    if len(s) > 64:  # the canonical form of a double has at most 24 characters
        raise EncodingError(f"{field}: {excerpt(s)} is too long ({len(s)} characters) for a float.hex() string")
    try:
        v = float.fromhex(s)
    except (ValueError, OverflowError):
        raise EncodingError(f"{field}: {excerpt(s)} is not a float.hex() string") from None
    if not math.isfinite(v) or v.hex() != s:
        raise EncodingError(f"{field}: {excerpt(s)} is not the canonical float.hex() of a finite double")
    return v


# ---------------------------------------------------------------------------------------------------------
# encoding
# ---------------------------------------------------------------------------------------------------------


def _where(trail: list[str | int]) -> str:
    """``$.a.b[3]`` for the trail of keys / indices (keys that are not short identifiers are quoted)."""
    parts = ["$"]
    for t in trail:
        if isinstance(t, int):
            parts.append(f"[{t}]")
        elif len(t) <= _EXCERPT and t.isidentifier():
            parts.append(f".{t}")
        else:
            parts.append(f"[{excerpt(t)}]")
    return "".join(parts)


def _check_str(s: str, trail: list[str | int], what: str | None) -> None:
    m = _SURROGATE.search(s)
    if m is not None:
        what = f"key {excerpt(s)}" if what is None else what
        raise EncodingError(
            f"{_where(trail)}: {what} holds a lone surrogate U+{ord(m.group()):04X} at index "
            f"{m.start()} (not a Unicode scalar value; refused)"
        )


def _utf16_order(k: str) -> bytes:
    """Sort key of JCS §3.2.3: the UTF-16 code units (big-endian bytes compare like the units)."""
    return k.encode("utf-16-be")


def _emit(value: Any, trail: list[str | int], out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        _check_str(value, trail, "string")
        out.append(_escape(value))
    elif isinstance(value, int):
        if not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
            raise EncodingError(f"{_where(trail)}: integer of {value.bit_length()} bits exceeds ±(2^53 - 1)")
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        raise EncodingError(f"{_where(trail)}: floats are not allowed (encode reals with encoding.real)")
    elif isinstance(value, (list, tuple)):
        if len(trail) >= MAX_DEPTH:
            raise EncodingError(f"{_where(trail)}: nesting deeper than {MAX_DEPTH} levels")
        out.append("[")
        trail.append(0)
        for i, v in enumerate(value):
            if i:
                out.append(",")
            trail[-1] = i
            _emit(v, trail, out)
        trail.pop()
        out.append("]")
    elif isinstance(value, dict):
        if len(trail) >= MAX_DEPTH:
            raise EncodingError(f"{_where(trail)}: nesting deeper than {MAX_DEPTH} levels")
        for k in value:
            if not isinstance(k, str):
                raise EncodingError(f"{_where(trail)}: object keys must be strings, got {type(k).__name__}")
            _check_str(k, trail, None)
        out.append("{")
        trail.append("")
        for i, k in enumerate(sorted(value, key=_utf16_order)):
            if i:
                out.append(",")
            out.append(_escape(k))
            out.append(":")
            trail[-1] = k
            _emit(value[k], trail, out)
        trail.pop()
        out.append("}")
    else:
        raise EncodingError(f"{_where(trail)}: {type(value).__name__} cannot be encoded")


# Keys made only of code points below U+E000 sort the same by code point and by UTF-16 code units, so for
# them the C encoder's sort_keys is JCS's order; anything else takes the checked path below.
_ORDER_SAFE = re.compile("[\ud800-\U0010ffff]")
_dumps = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=False
).encode


def _plain(value: Any, depth: int) -> bool:
    """True if ``value`` is inside the subset and its keys sort alike by code point and by UTF-16 units (then
    the C encoder's output is the canonical one); False sends it to ``_emit``, which names any defect."""
    t = type(value)
    if t is str:
        return value.isascii() or _SURROGATE.search(value) is None
    if t is int:
        in_range: bool = -MAX_SAFE_INT <= value <= MAX_SAFE_INT
        return in_range
    if value is None or t is bool:
        return True
    if depth >= MAX_DEPTH:
        return False
    if t is dict:
        for k, v in value.items():
            if type(k) is not str or not (k.isascii() or _ORDER_SAFE.search(k) is None) or not _plain(v, depth + 1):
                return False
        return True
    if t is list or t is tuple:
        if not value:
            return True
        kinds = set(map(type, value))
        if kinds == {int}:  # id lists: checked at C speed
            ids_in_range: bool = -MAX_SAFE_INT <= min(value) and max(value) <= MAX_SAFE_INT
            return ids_in_range
        if kinds == {str}:
            return all(v.isascii() or _SURROGATE.search(v) is None for v in value)
        return all(_plain(v, depth + 1) for v in value)
    return False


def encode(value: Any) -> bytes:
    """The canonical bytes of ``value`` (RFC 8785 on the subset of the module docstring)."""
    if _plain(value, 0):
        return _dumps(value).encode("utf-8")
    out: list[str] = []
    _emit(value, [], out)
    return "".join(out).encode("utf-8")


# ---------------------------------------------------------------------------------------------------------
# decoding
# ---------------------------------------------------------------------------------------------------------

# A string literal, or an unterminated one up to the end of the text. Possessive, and never failing once it has
# started at a quote, so the scan is linear: a backtracking ``"(?:[^"\\]|\\.)*"`` retried from every quote of an
# unterminated ``"\"\"\"...`` took quadratic time (minutes for 256 KB).
_STRING_TOKEN = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"?', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")


def _depth(data: bytes, limit: int = MAX_DEPTH) -> int:
    """Maximum nesting depth of the brackets outside string literals (stops counting once it exceeds ``limit``).
    On malformed text, at least the depth the parser reaches before it refuses the text: brackets after an
    unterminated string are inside that string for the parser too."""
    depth = best = 0
    for m in _BRACKETS.finditer(_STRING_TOKEN.sub(b"", data)):
        if m.group() in (b"[", b"{"):
            depth += 1
            if depth > best:
                best = depth
                if best > limit:
                    return best
        else:
            depth -= 1
    return best


def _too_deep(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text ``data`` nests deeper than ``limit`` (a cheap bracket count first)."""
    return data.count(b"[") + data.count(b"{") > limit and _depth(data, limit) > limit


def loads_bounded(data: bytes | bytearray | str, *, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` for bytes from outside the process (HTTP bodies and responses, files an account, an auditor or
    an operator hands over): nesting deeper than ``max_depth`` is refused before the parser sees it, and every defect
    (invalid UTF-8, not JSON, too deep) is an :class:`EncodingError` naming ``what`` -- never a RecursionError.
    Otherwise as lenient as ``json.loads``: floats, duplicate keys and any formatting are accepted (a leading UTF-8
    BOM of bytes is skipped, as ``json.loads`` does)."""
    if isinstance(data, str):
        text, raw = data, data.encode("utf-8", "surrogatepass")
    elif isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise EncodingError(f"{what}: invalid UTF-8 at byte {e.start} ({e.reason})") from None
    else:
        raise EncodingError(f"{what}: expected bytes or str, got {type(data).__name__}")
    if _too_deep(raw, max_depth):
        raise EncodingError(f"{what}: nesting deeper than {max_depth} levels")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise EncodingError(f"{what}: not valid JSON ({e.msg}, character {e.pos})") from None
    except (RecursionError, ValueError) as e:  # defence in depth; the check above comes first
        raise EncodingError(f"{what}: not valid JSON ({type(e).__name__})") from None


class _Refused(Exception):
    """Raised inside the parser's hooks; converted to EncodingError outside it."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Refused(f"duplicate key {excerpt(k)}")
        out[k] = v
    return out


def _parse_int(s: str) -> int:
    if len(s) > _MAX_INT_LITERAL:
        raise _Refused(f"integer literal of {len(s.lstrip('-'))} digits exceeds ±(2^53 - 1)")
    v = int(s)
    if not -MAX_SAFE_INT <= v <= MAX_SAFE_INT:
        raise _Refused(f"integer literal {s} exceeds ±(2^53 - 1)")
    return v


def _refuse_float(s: str) -> NoReturn:
    raise _Refused(f"JSON float {excerpt(s)} is not allowed (reals are float.hex() strings)")


def _refuse_const(s: str) -> NoReturn:
    raise _Refused(f"JSON constant {s} is not allowed")


_decoder = json.JSONDecoder(
    object_pairs_hook=_pairs, parse_int=_parse_int, parse_float=_refuse_float, parse_constant=_refuse_const, strict=True
)


_fast_decoder = json.JSONDecoder(parse_float=_refuse_float, parse_constant=_refuse_const, strict=True)
# a number literal too long to be in range (after a structural character; digits inside strings, as in hex,
# never follow one of these directly except in text, which then just takes the checked path)
_LONG_DIGITS = re.compile(rb"(?:^|[:,\[])\s*-?[0-9]{%d,}" % (_MAX_INT_LITERAL + 1))


def decode_content(data: bytes, *, what: str = "record") -> Any:
    """Parse JSON that need not be in canonical form (whitespace, key order, escapes as any JSON tool writes them),
    under every other rule of the encoding: duplicate keys, floats, NaN / Infinity, out-of-range integers, deep
    nesting, invalid UTF-8 and lone surrogates are refused (EncodingError naming ``what`` and the rule). For
    evidence an account hands over (receipts): its value, not its bytes, carries the signature."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise EncodingError(f"{what}: expected bytes, got {type(data).__name__}")
    data = bytes(data).strip(b" \t\r\n")
    if _LONG_DIGITS.search(data) is not None:
        raise EncodingError(f"{what}: an integer literal out of range")
    value, _text = _parse(data, what)
    try:
        encode(value)  # refuses what the parser lets through: lone surrogates, integers out of range
    except EncodingError as e:
        raise EncodingError(f"{what}: {e}") from None
    return value


def _parse(data: bytes, what: str) -> tuple[Any, str]:
    """The checked parse both decoders share: UTF-8, nesting depth, the refusing JSON decoder, nothing after the
    value. Returns (value, text)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise EncodingError(f"{what}: invalid UTF-8 at byte {e.start} ({e.reason})") from None
    if _too_deep(data):
        raise EncodingError(f"{what}: nesting deeper than {MAX_DEPTH} levels")
    try:
        value, end = _decoder.raw_decode(text)
    except _Refused as e:
        raise EncodingError(f"{what}: {e}") from None
    except json.JSONDecodeError as e:
        raise EncodingError(f"{what}: not valid JSON ({e.msg}, character {e.pos})") from None
    except (RecursionError, ValueError, MemoryError) as e:  # defence in depth; the checks above come first
        raise EncodingError(f"{what}: not valid canonical JSON ({type(e).__name__})") from None
    if end != len(text):
        raise EncodingError(f"{what}: bytes after the JSON value at character {end}")
    return value, text


def decode(data: bytes, *, what: str = "record") -> Any:
    """Parse canonical bytes; raises EncodingError (naming ``what`` and the rule) unless
    ``encode(decode(data)) == data``.

    Fast path: the C parser without per-object hooks, then the canonical round trip (which also refuses
    duplicate keys: the re-encoding holds each key once). Anything unusual takes the checked path, which
    names the defect."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise EncodingError(f"{what}: expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) < (1 << 20) and data.count(b"[") + data.count(b"{") <= MAX_DEPTH and _LONG_DIGITS.search(data) is None:
        try:
            text = data.decode("utf-8")
            value, end = _fast_decoder.raw_decode(text)
            if end == len(text) and _plain(value, 0) and _dumps(value).encode("utf-8") == data:
                return value
        except (_Refused, ValueError, RecursionError):
            pass
    return _decode_checked(data, what)


def _decode_checked(data: bytes, what: str) -> Any:
    value, _text = _parse(data, what)
    if b"\\u" not in data and max(data) < 0xEE:
        # Fast path, same bytes: no \u escape means no surrogate can have been smuggled in (UTF-8 cannot
        # carry one), parsing already refused floats, NaN, out-of-range integers and deep nesting, and
        # with no character >= U+E000 code-point key order is UTF-16 order, so json.dumps is the encoding.
        again = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    else:
        try:
            again = encode(value)
        except EncodingError as e:
            raise EncodingError(f"{what}: {e}") from None
    if again != data:
        at = next((i for i, (a, b) in enumerate(zip(again, data, strict=False)) if a != b), min(len(again), len(data)))
        raise EncodingError(f"{what}: bytes are not in canonical form (first difference at byte {at})")
    return value


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def digest(value: Any) -> str:
    """hex SHA-256 of the canonical encoding of ``value``."""
    return hashlib.sha256(encode(value)).hexdigest()


def hexbytes(s: Any, field: str, length: int | None = None) -> bytes:
    """Parse a lower-case hex string (of ``length`` bytes if given); EncodingError naming ``field`` and the
    rule otherwise (wrong type, upper case or non-hex characters, odd length, wrong length)."""
    if not isinstance(s, str):
        raise EncodingError(f"{field}: must be a lower-case hex string, got {type(s).__name__}")
    if length is not None and len(s) != 2 * length:
        raise EncodingError(f"{field}: must be {length} bytes ({2 * length} hex digits), got {len(s)} characters")
    if _HEX.fullmatch(s) is None:
        bad = next(i for i, c in enumerate(s) if c not in "0123456789abcdef")
        raise EncodingError(f"{field}: must be a lower-case hex string (character {bad} is {excerpt(s[bad], 1)})")
    if len(s) % 2:
        raise EncodingError(f"{field}: odd number of hex digits ({len(s)})")
    return bytes.fromhex(s)
