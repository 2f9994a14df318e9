"""The checked Q as one matrix in a memory file (audit/verify/qrows.py, spec/protocol.md §8 item 13): it reads back
exactly what was put, whatever the order or length, and hands its rows to a fresh process by descriptor, not by
copy."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from dprag.audit.verify import pool
from dprag.audit.verify.qrows import QRows, SharedRows


def _q(rng, d=8) -> bytes:
    return rng.integers(-(1 << 15), 1 << 15, size=d, dtype=np.int64).astype("<i2").tobytes()


def test_reads_back_what_was_put_like_a_dict():
    """Against a dict (the reference): in-order puts, a Q of another length, an out-of-order position and a
    position put twice (the last stands)."""
    rng = np.random.default_rng(1)
    store, ref = QRows(10), {}
    for pos in (3, 5, 6, 9):
        ref[pos] = _q(rng)
        store[pos] = ref[pos]
    ref[12] = _q(rng, 4)  # another length: kept aside
    store[12] = ref[12]
    ref[4] = _q(rng)  # out of order
    store[4] = ref[4]
    ref[5] = _q(rng)  # again
    store[5] = ref[5]
    assert len(store) == len(ref) == 6
    assert all(store[p] == q for p, q in ref.items())
    assert 7 not in store and 3 in store
    with pytest.raises(KeyError):
        store[7]
    m = store.matrix([3, 6, 9])  # not every row in order: a copy
    assert isinstance(m, np.ndarray)
    assert m.tobytes() == ref[3] + ref[6] + ref[9]
    store.clear()
    assert len(store) == 0


def test_the_whole_matrix_is_shared_not_copied():
    rng = np.random.default_rng(2)
    store = QRows(1000)
    qs = [_q(rng, 384) for _ in range(1000)]
    for p, q in enumerate(qs):
        store[10 + p] = q
    m = store.matrix(list(range(10, 1010)))
    assert isinstance(m, SharedRows)
    assert m.array.tobytes() == b"".join(qs)
    wire = pickle.dumps(m)
    assert len(wire) < 200  # its descriptor and shape travel, not its 768,000 bytes


def _memory_files() -> int:
    """This process's open QRows memory files (other descriptors come and go with other tests' objects)."""
    import os

    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += "memfd:dprag-q" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
    return n


def test_no_descriptor_outlives_its_store():
    """A verifier that never reaches the coalition check (which clears the store) must not leak its memory file:
    a long-lived process verifies many bundles."""
    import gc

    gc.collect()
    before = _memory_files()
    for _ in range(50):
        store = QRows(10)
        store[1] = np.zeros(4, dtype="<i2").tobytes()
        assert _memory_files() >= 1
        del store
    gc.collect()
    assert _memory_files() <= before  # 50 leaked stores would leave 50 more


@pytest.mark.integration  # a fresh process
@pytest.mark.skipif(pool.workers() < 2, reason="background runs in line on one core")
def test_a_background_process_maps_the_same_rows():
    """``pool.background`` hands the rows to a fresh process by descriptor; what it computes from them is what
    this process computes."""
    rng = np.random.default_rng(3)
    store = QRows(500)
    qs = [_q(rng, 64) for _ in range(500)]
    for p, q in enumerate(qs):
        store[p] = q
    shared = store.matrix(list(range(500)))
    got = pool.background(np.sum, shared)()  # the child maps the descriptor (SharedRows.__array__)
    assert got is not None, "the background process failed"
    assert int(got[0]) == int(np.frombuffer(b"".join(qs), dtype="<i2").astype(np.int64).sum())
