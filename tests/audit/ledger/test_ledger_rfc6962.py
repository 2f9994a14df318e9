"""RFC 6962 / RFC 9162 tree hashing (audit/protocol/ledger/rfc6962.py) against independent oracles.

Oracles: the literal recursive MTH definition of RFC 9162 §2.1.1 written out again here with hashlib (it
shares no code with the module), the published Certificate Transparency test vectors (transparency-dev/merkle
testonly/constants.go, Apache-2.0: leaf inputs, root hashes for sizes 0..8, node hashes), and brute-force
enumeration of the append order for stored-hash indices.
"""

from __future__ import annotations

import hashlib
import random

import pytest

from dprag.audit.protocol.ledger import rfc6962
from dprag.audit.protocol.ledger.errors import MalformedProofError
from dprag.audit.protocol.ledger.rfc6962 import (
    EMPTY_ROOT,
    CompactRange,
    fold,
    hash_children,
    hash_leaf,
    mth,
    peaks,
    range_nodes,
    root_from_leaves,
    stored_hash_count,
    stored_hash_index,
)
from dprag.audit.protocol.ledger.store import MemoryLog


def oracle_mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 §2.1.1, written independently of the module under test."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1
    while k * 2 < n:
        k *= 2
    return hashlib.sha256(b"\x01" + oracle_mth(leaves[:k]) + oracle_mth(leaves[k:])).digest()


# Certificate Transparency reference vectors (transparency-dev/merkle testonly/constants.go).
CT_LEAVES = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
CT_ROOTS = [
    bytes.fromhex(h)
    for h in (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    )
]
CT_NODES = {  # (level, index) -> hash
    (0, 0): "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    (0, 1): "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
    (0, 2): "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
    (0, 3): "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
    (0, 4): "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    (0, 5): "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
    (0, 6): "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
    (0, 7): "46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1",
    (1, 0): "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    (1, 1): "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
    (1, 2): "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
    (1, 3): "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
    (2, 0): "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    (2, 1): "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    (3, 0): "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
}


def test_hash_primitives_match_definitions():
    assert EMPTY_ROOT == hashlib.sha256(b"").digest()
    assert rfc6962.empty_root() == EMPTY_ROOT
    assert hash_leaf(b"abc") == hashlib.sha256(b"\x00abc").digest()
    a, b = bytes(range(32)), bytes(range(32, 64))
    assert hash_children(a, b) == hashlib.sha256(b"\x01" + a + b).digest()
    assert hash_children(a, b) != hash_children(b, a)


def test_ct_reference_vectors():
    for n, want in enumerate(CT_ROOTS):
        assert oracle_mth(CT_LEAVES[:n]) == want  # the oracle itself agrees with the published vectors
        assert mth(CT_LEAVES[:n]) == want
        assert root_from_leaves(CT_LEAVES[:n]) == want
        assert MemoryLog(CT_LEAVES[:n]).root() == want
    log = MemoryLog(CT_LEAVES)
    for node, h in CT_NODES.items():
        assert log._get_nodes([node]) == [bytes.fromhex(h)]


def test_roots_every_size_0_to_300_against_oracle():
    rng = random.Random(6962)
    leaves = [rng.randbytes(rng.randrange(0, 80)) for _ in range(301)]
    cr = CompactRange()
    log = MemoryLog()
    for n in range(301):
        want = oracle_mth(leaves[:n])
        assert cr.size == n and cr.root() == want, n
        assert mth(leaves[:n]) == want
        assert log.root() == want
        if n < 300:
            cr.append_leaf_hash(hash_leaf(leaves[n]))
            log.append(leaves[n])
    # roots at every past size from the full log (O(log n) reads each)
    for n in range(301):
        assert log.root(n) == oracle_mth(leaves[:n])


def test_range_nodes_tile_exactly_with_aligned_perfect_subtrees():
    for begin in range(0, 70):
        for end in range(begin, 140):
            nodes = range_nodes(begin, end)
            pos = begin
            for level, index in nodes:
                assert index << level == pos  # aligned and contiguous
                pos += 1 << level
            assert pos == end
            # minimal: no two consecutive equal-size siblings that could merge into their parent
            for (l1, i1), (l2, i2) in zip(nodes, nodes[1:], strict=False):
                assert not (l1 == l2 and i1 % 2 == 0 and i2 == i1 + 1)
    for n in range(0, 300):
        assert [lv for lv, _ in peaks(n)] == [b for b in range(n.bit_length() - 1, -1, -1) if n >> b & 1]


def test_fold_of_peaks_is_root_and_compact_range_reports_created_nodes():
    rng = random.Random(1)
    leaves = [rng.randbytes(8) for _ in range(100)]
    log = MemoryLog(leaves)
    for n in range(101):
        assert fold(log._get_nodes(peaks(n))) == oracle_mth(leaves[:n])
    # CompactRange.extend(out=...) emits hashes in stored order; compare with a brute-force enumeration.
    out: list[bytes] = []
    CompactRange().extend(leaves, out)
    order = []
    for m in range(100):
        order.append((0, m))
        lv = 1
        while (m + 1) % (1 << lv) == 0:
            order.append((lv, m >> lv))
            lv += 1
    assert len(out) == len(order) == stored_hash_count(100)
    assert out == log._get_nodes(order)


def test_stored_hash_index_matches_brute_force_append_order():
    pos = 0
    for m in range(2000):
        assert stored_hash_index(0, m) == pos
        pos += 1
        lv = 1
        while (m + 1) % (1 << lv) == 0:
            assert stored_hash_index(lv, m >> lv) == pos, (lv, m)
            pos += 1
            lv += 1
        assert stored_hash_count(m + 1) == pos


def test_compact_range_rejects_inconsistent_state_and_check_hash():
    with pytest.raises(ValueError):
        CompactRange(3, [bytes(32)])  # size 3 needs 2 peak hashes
    with pytest.raises(MalformedProofError) as e:
        rfc6962.check_hash("root", b"short")
    assert e.value.field == "root"
    with pytest.raises(MalformedProofError):
        rfc6962.check_hash("root", "0" * 32)
