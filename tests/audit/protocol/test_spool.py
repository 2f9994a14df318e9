"""``SpooledLines`` (spec/protocol.md §8 item 13): the verifier's out-of-memory view of auditor/openings.jsonl gives
exactly the non-empty lines ``bytes.split`` gives, however the file arrives in chunks, and keeps nothing in a place
another process can reach."""

from __future__ import annotations

import os
import pickle
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprag.audit.protocol import spool
from dprag.audit.protocol.bundle import load_bundle
from dprag.audit.protocol.bundlefs import BundleDir, BundleFileError
from dprag.audit.protocol.spool import SpooledLines


def expected(data: bytes) -> list[bytes]:
    return [ln for ln in data.split(b"\n") if ln]


@settings(max_examples=200, derandomize=True, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"\n", b"\n\n", b'{"pos":1}', b"x", b"\xff\x00", b"ab" * 40]), max_size=60).map(
        b"".join
    ),
    cuts=st.lists(st.integers(0, 3000), max_size=8),
    block=st.sampled_from([1, 2, 3, 7, 64, 1 << 24]),
)
def test_lines_equal_split_however_the_bytes_arrive(data, cuts, block):
    old = spool._BLOCK
    spool._BLOCK = block  # the writer's block: line ends on every side of a boundary
    try:
        s = SpooledLines()
        pts = sorted({0, len(data), *[c % (len(data) + 1) for c in cuts]})
        for a, b in zip(pts, pts[1:], strict=False):
            s.feed(data[a:b])
        s.done()
    finally:
        spool._BLOCK = old
    want = expected(data)
    assert len(s) == len(want)
    assert list(s) == want
    # each line's number in the file, blank lines counted (what a message about a receipt line names)
    assert s.numbers.tolist() == [i for i, ln in enumerate(data.split(b"\n")) if ln]
    assert [s[k] for k in range(len(want))] == want
    assert s[1:-1] == want[1:-1] and s[::2] == want[::2] and s[5:2] == []
    if want:
        assert s[-1] == want[-1]
    with pytest.raises(IndexError):
        s[len(want)]
    s.close()


def test_the_spool_is_private_and_does_not_pickle(tmp_path):
    s = SpooledLines.of(b"a\nb\n")
    st_ = os.fstat(s._fd)
    assert st_.st_nlink == 0  # unlinked: no path another process could open or change
    assert stat.S_IMODE(st_.st_mode) & 0o077 == 0
    with pytest.raises(TypeError, match="does not pickle"):
        pickle.dumps(s)
    s.close()


def test_read_lines_keeps_the_bundle_rules(tmp_path):
    (tmp_path / "auditor").mkdir()
    (tmp_path / "auditor" / "openings.jsonl").write_bytes(b'{"pos":1}\n\n{"pos":2}')
    (tmp_path / "other.jsonl").write_bytes(b"secret\n")
    os.symlink(tmp_path / "other.jsonl", tmp_path / "auditor" / "link.jsonl")
    with BundleDir.open(tmp_path) as d:
        assert list(d.read_lines("auditor/openings.jsonl", 100)) == [b'{"pos":1}', b'{"pos":2}']
        with pytest.raises(BundleFileError, match="link.jsonl"):
            d.read_lines("auditor/link.jsonl", 100)
        with pytest.raises(BundleFileError, match="cap"):
            d.read_lines("auditor/openings.jsonl", 5)


def test_a_loaded_bundle_spools_its_openings(tmp_path):
    (tmp_path / "auditor").mkdir()
    (tmp_path / "auditor" / "openings.jsonl").write_bytes(b'{"pos":1}\n{"pos":2}\n')
    b = load_bundle(tmp_path)
    assert isinstance(b.openings_lines, SpooledLines) and list(b.openings_lines) == [b'{"pos":1}', b'{"pos":2}']
    (tmp_path / "auditor" / "openings.jsonl").write_bytes(b'{"pos":9}\n{"pos":9}\n')  # changed after the read
    assert list(b.openings_lines) == [b'{"pos":1}', b'{"pos":2}']  # the checks see the bytes that were read
