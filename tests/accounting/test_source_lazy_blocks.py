"""RandomSource.from_seed squeezes each SHAKE-256 block only as far as it is read: the stream must stay
byte-identical to the specification (block k = SHAKE-256(prefix || u64be(k)) truncated to 65,536 bytes,
spec/accounting/noise.md), for every pattern of read sizes. The reference below is hashlib, read eagerly."""

import hashlib
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from dprag.accounting.noise.source import RandomSource

BLOCK = 65536


def _reference(seed: bytes, label: bytes, n: int) -> bytes:
    prefix = struct.pack(">I", len(seed)) + seed + struct.pack(">I", len(label)) + label
    out, k = b"", 0
    while len(out) < n:
        out += hashlib.shake_256(prefix + struct.pack(">Q", k)).digest(BLOCK)
        k += 1
    return out[:n]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.lists(st.sampled_from([1, 3, 8, 4095, 4096, 4097, 8192, 65535, 65536, 65537, 100_000]), min_size=1, max_size=8),
    st.binary(max_size=40),
)
def test_stream_is_the_specified_one_for_any_read_pattern(sizes, label):
    seed = bytes(range(32))
    src = RandomSource.from_seed(seed, label)
    got = b"".join(src.bytes(n) for n in sizes)
    assert got == _reference(seed, label, len(got))
