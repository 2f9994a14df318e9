"""Canonical encoding (audit/protocol/encoding.py, spec/protocol.md §2): RFC 8785 on the protocol's subset, checked
against the ``rfc8785`` package (Trail of Bits) as an oracle, the vectors of spec/encoding-vectors.json, and
hostile bytes (decode raises only EncodingError, with a short message)."""

from __future__ import annotations

import hashlib
import json
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprag.audit.protocol.encoding import (
    MAX_DEPTH,
    MAX_SAFE_INT,
    EncodingError,
    decode,
    digest,
    encode,
    excerpt,
    hexbytes,
    parse_real,
    real,
)

rfc8785 = pytest.importorskip("rfc8785")

VECTORS = json.loads((pathlib.Path(__file__).parents[3] / "spec" / "encoding-vectors.json").read_text())

# ---------------------------------------------------------------------------------------------------------
# strategies: values of the subset, with keys/strings around the UTF-16 surrogate range and beyond the BMP
# ---------------------------------------------------------------------------------------------------------

EDGE_CHARS = [
    "\ud7ff",
    "\ue000",
    "\uefff",
    "\uffff",
    "\ufffd",
    "\ufb33",
    "\U00010000",
    "\U0001f600",
    "\U0010ffff",
    "\u0080",
    "\u00f6",
    "\u20ac",
    "\u007f",
    "\u2028",
    "\x00",
    "\x1f",
    '"',
    "\\",
    "a",
    "Z",
    "1",
    "_",
]
scalar_chars = st.characters(blacklist_categories=("Cs",))  # every scalar value (no surrogates)
text = st.text(st.one_of(st.sampled_from(EDGE_CHARS), scalar_chars), max_size=6)
safe_int = st.integers(-MAX_SAFE_INT, MAX_SAFE_INT)
leaf = st.one_of(st.none(), st.booleans(), safe_int, text, st.floats(allow_nan=False, allow_infinity=False).map(real))
values = st.recursive(
    leaf, lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(text, c, max_size=5)), max_leaves=20
)


@settings(max_examples=400)
@given(values)
def test_encode_equals_rfc8785_oracle(v):
    b = encode(v)
    assert b == rfc8785.dumps(v)
    assert decode(b) == v
    assert digest(v) == hashlib.sha256(b).hexdigest()


@settings(max_examples=200)
@given(st.dictionaries(st.text(st.sampled_from(EDGE_CHARS), min_size=1, max_size=3), safe_int, min_size=2, max_size=8))
def test_key_order_is_utf16_code_units(d):
    b = encode(d)
    assert b == rfc8785.dumps(d)
    keys = list(json.loads(b))  # json.loads keeps the byte order of keys
    assert keys == sorted(d, key=lambda k: k.encode("utf-16-be"))


def test_utf16_order_differs_from_code_point_order():
    d = {"\ue000": 1, "\U0001f600": 2}
    assert encode(d) == '{"\U0001f600":2,"\ue000":1}'.encode()  # U+1F600 = D83D DE00 < E000
    assert json.dumps(d, sort_keys=True, ensure_ascii=False).encode() != encode(d).replace(b":", b": ")
    with pytest.raises(EncodingError, match="canonical"):
        decode('{"\ue000":1,"\U0001f600":2}'.encode())


# ---------------------------------------------------------------------------------------------------------
# the spec's vectors
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("vec", VECTORS["valid"], ids=lambda v: v["name"][:40])
def test_valid_vectors(vec):
    b = encode(vec["input"])
    assert b.hex() == vec["canonical_hex"]
    assert hashlib.sha256(b).hexdigest() == vec["sha256"] == digest(vec["input"])
    assert rfc8785.dumps(vec["input"]) == b
    assert decode(b) == vec["input"]


@pytest.mark.parametrize("vec", VECTORS["rejected"], ids=lambda v: v["name"][:40])
def test_rejected_vectors(vec):
    with pytest.raises(EncodingError, match=vec["reason"].replace("(", r"\(")) as e:
        decode(bytes.fromhex(vec["bytes_hex"]))
    assert len(str(e.value)) < 160


def test_vector_file_covers_the_issue_cases():
    names = " ".join(v["name"] for v in VECTORS["rejected"])
    for case in ("surrogate", "4301 digits", "nesting", "NaN", "Infinity", "duplicate", "UTF-8", "UTF-16"):
        assert case in names or case in " ".join(v["name"] for v in VECTORS["valid"])


# ---------------------------------------------------------------------------------------------------------
# lone surrogates
# ---------------------------------------------------------------------------------------------------------

SURR = st.integers(0xD800, 0xDFFF).map(chr)


@settings(max_examples=100)
@given(st.text(max_size=3), SURR, st.text(max_size=3), st.booleans())
def test_lone_surrogates_refused_in_values_and_keys(pre, s, post, as_key):
    bad = pre + s + post
    v = {bad: 1} if as_key else {"k": [bad]}
    with pytest.raises(EncodingError, match="lone surrogate") as e:
        encode(v)
    assert f"U+{ord(s):04X}" in str(e.value)
    # the same through JSON text (\uXXXX escapes), as a hostile provider would write it
    raw = json.dumps(v, ensure_ascii=True, separators=(",", ":")).encode()
    with pytest.raises(EncodingError, match="lone surrogate"):
        decode(raw)


def test_surrogate_pair_as_two_code_points_refused():
    # a Python str holding two surrogate code points is not the scalar U+1F600
    with pytest.raises(EncodingError, match="lone surrogate U\\+D83D"):
        encode("\ud83d\ude00")
    # but the JSON escape pair is the scalar, and must be written literally to be canonical
    with pytest.raises(EncodingError, match="canonical"):
        decode(b'"\\ud83d\\ude00"')
    assert decode('"\U0001f600"'.encode()) == "\U0001f600"


# ---------------------------------------------------------------------------------------------------------
# hostile bytes: only EncodingError, short messages, no echo
# ---------------------------------------------------------------------------------------------------------


def _decode_or_error(data: bytes):
    try:
        v = decode(data)
    except EncodingError as e:
        assert len(str(e)) < 200, str(e)
        return e
    assert encode(v) == data
    return v


def test_long_integer_literal():
    for n in (18, 4300, 4301, 100_000):
        e = _decode_or_error(b"[" + b"7" * n + b"]")
        assert isinstance(e, EncodingError) and f"{n} digits" in str(e)
        e = _decode_or_error(b'{"a":-' + b"7" * n + b"}")
        assert isinstance(e, EncodingError) and f"{n} digits" in str(e)
    assert decode(b"-9007199254740991") == -MAX_SAFE_INT
    with pytest.raises(EncodingError, match="exceeds"):
        decode(b"-9007199254740992")
    with pytest.raises(EncodingError, match="bits exceeds"):
        encode(10**5000)  # never formats the huge int (str() would raise ValueError)


@pytest.mark.parametrize("opener,closer", [(b"[", b"]"), (b'{"a":', b"}")])
def test_deep_nesting(opener, closer):
    ok = opener * MAX_DEPTH + b"1" + closer * MAX_DEPTH
    assert encode(decode(ok)) == ok
    for depth in (MAX_DEPTH + 1, 10_000, 1_000_000):
        with pytest.raises(EncodingError, match="nesting deeper"):
            decode(opener * depth + b"1" + closer * depth)
    with pytest.raises(EncodingError, match="nesting deeper"):
        decode(opener * 200_000)  # unbalanced
    # brackets inside strings do not count
    assert decode(b'"' + b"[" * 1000 + b'"') == "[" * 1000
    v: list = []
    for _ in range(MAX_DEPTH + 1):
        v = [v]
    with pytest.raises(EncodingError, match="nesting deeper"):
        encode(v)


@pytest.mark.parametrize(
    "data,rule",
    [
        (b"NaN", "NaN"),
        (b"[Infinity]", "Infinity"),
        (b'{"a":-Infinity}', "Infinity"),
        (b"1e5", "float"),
        (b"[0.5]", "float"),
        (b'{"a":1,"b":2,"a":3}', "duplicate key 'a'"),
        (b"\xff\xfe", "invalid UTF-8"),
        (b'"\xc0\xaf"', "invalid UTF-8"),
        (b'"\x01"', "not valid JSON"),
        (b"", "not valid JSON"),
        (b"01", "after the JSON value"),
        (b"-0", "canonical"),
        (b"true ", "after the JSON value"),
    ],
)
def test_hostile_literals(data, rule):
    with pytest.raises(EncodingError, match=rule):
        decode(data, what="public/leaves.bin[3]")


def test_messages_do_not_echo_input():
    secret = "S3CRET" * 10_000
    for data in (
        ('{"' + secret + '":1,"' + secret + '":1}').encode(),
        ('{"a":' + secret + "}").encode(),
        ('"' + secret + '\\ud800"').encode(),
        ('{"' + secret + '":1.5}').encode(),
    ):
        with pytest.raises(EncodingError) as e:
            decode(data)
        assert secret[:64] not in str(e.value) and len(str(e.value)) < 200
    with pytest.raises(EncodingError) as e:
        parse_real(secret, "policy.eps")
    assert len(str(e.value)) < 200
    with pytest.raises(EncodingError) as e:
        hexbytes("zz" + secret, "qemb")
    assert "S3CRET" not in str(e.value)
    assert excerpt("\x00\u2028" + "x" * 100).startswith("'\\x00\\u2028") and len(excerpt("x" * 100)) < 40


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_random_bytes_never_crash(data):
    _decode_or_error(data)


@settings(max_examples=300)
@given(values, st.data())
def test_mutated_encodings_never_crash(v, data):
    b = bytearray(encode(v))
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        i = data.draw(st.integers(0, len(b)))
        if op == "insert":
            b[i:i] = data.draw(st.sampled_from([b"[", b"{", b'"', b"\\", b"\xed", b"9" * 30, b"\\ud800", b","]))
        elif op == "delete" and i < len(b):
            del b[i]
        elif i < len(b):
            b[i] ^= 1 << data.draw(st.integers(0, 7))
    _decode_or_error(bytes(b))


# ---------------------------------------------------------------------------------------------------------
# hexbytes
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "s,rule",
    [
        ("abc", "odd number of hex digits"),
        ("0A", "lower-case"),
        ("zz", "lower-case"),
        (" ab", "lower-case"),
        (b"ab", "got bytes"),
        (None, "got NoneType"),
        ("ab\u0660", "lower-case"),
    ],
)
def test_hexbytes_refusals(s, rule):
    with pytest.raises(EncodingError, match=rule) as e:
        hexbytes(s, "openings[3].qemb")
    assert str(e.value).startswith("openings[3].qemb: ")


def test_hexbytes_length_and_values():
    assert hexbytes("00ff", "f") == b"\x00\xff"
    assert hexbytes("", "f") == b""
    assert hexbytes("ab" * 32, "h", 32) == b"\xab" * 32
    with pytest.raises(EncodingError, match="must be 32 bytes"):
        hexbytes("ab" * 31 + "a", "h", 32)
    with pytest.raises(EncodingError, match="must be 32 bytes"):
        hexbytes("ab" * 33, "h", 32)


def test_backwards_compatible_api():
    rec = {"version": 1, "eps": real(0.25), "h": "ab" * 32, "list": [1, None, True, "x"]}
    b = encode(rec)
    assert b == json.dumps(rec, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert decode(b, what="leaf") == rec and parse_real(rec["eps"]) == 0.25
    assert issubclass(EncodingError, ValueError)
    with pytest.raises(EncodingError, match="floats are not allowed"):
        encode({"x": 0.5})
    with pytest.raises(EncodingError, match="keys must be strings"):
        encode({1: 2})
    with pytest.raises(EncodingError, match="cannot be encoded"):
        encode({"x": b"raw"})


@settings(max_examples=200)
@given(
    st.dictionaries(st.text("abcXYZ_019é\u00ff\u07ff\ud7ff", min_size=1, max_size=3), safe_int, min_size=2, max_size=6),
    st.randoms(use_true_random=False),
)
def test_fast_path_refuses_any_other_key_order(d, rnd):
    """decode's json.dumps fast path (no \\u escape, no byte >= 0xEE) accepts only the canonical order."""
    keys = list(d)
    rnd.shuffle(keys)
    text = "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + str(d[k]) for k in keys) + "}"
    data = text.encode()
    assert max(data) < 0xEE
    if data == encode(d):
        assert decode(data) == d
    else:
        with pytest.raises(EncodingError, match="canonical"):
            decode(data)
