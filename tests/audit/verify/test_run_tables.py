"""The verifier's per-leaf tables in ``run.py`` (spec/protocol.md §8 item 13, "What the verifier keeps"): the
opening index is an int64 array, the leaf hashes 32 bytes each end to end, the accepted queries an int64 array;
each answers exactly as the dict / list it replaced (a plain dict or list is the reference)."""

from __future__ import annotations

from array import array
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprag.audit.protocol.bundle import Bundle
from dprag.audit.protocol.ledger.rfc6962 import hash_leaf
from dprag.audit.verify.run import Openings, Run


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.integers(0, 5000), st.integers(0, 50), max_size=60),
    st.lists(st.one_of(st.integers(-10, 6000), st.booleans(), st.none(), st.text(max_size=2)), max_size=40),
)
def test_the_opening_index_answers_as_a_dict(mapping, probes):
    lines = [f'{{"line":{k}}}'.encode() for k in range(51)]
    op = Openings(lines)
    for pos, k in mapping.items():  # any order: the array grows as needed
        op.set(pos, k)
    for pos in [*mapping, *probes, *(np.int64(p) for p in mapping)]:
        want = mapping.get(pos) if isinstance(pos, (int, np.integer)) else None
        assert (pos in op) == (want is not None), pos
        assert op.line(pos) == (None if want is None else lines[want])
        assert op.get(pos, "none") == ("none" if want is None else {"line": want})
        if want is None:
            with pytest.raises(KeyError):
                op[pos]
        else:
            assert op[pos] == {"line": want}
    op.drop()
    assert all(pos not in op for pos in mapping) and op.lines == []


@pytest.mark.parametrize("base", [0, 3])
def test_leaf_hashes_are_32_bytes_each_and_refuse_a_position_they_do_not_hold(base):
    leaves = [f"leaf {k}".encode() * (k + 1) for k in range(9)]
    run = Run(Bundle(Path("."), leaves=leaves), None)
    run.base = base
    run.leaf_hashes = b"".join(map(hash_leaf, leaves[base:]))
    for k in range(base, len(leaves)):
        assert run.leaf_hash(k) == hash_leaf(leaves[k])
    for k in (len(leaves), len(leaves) + 5, base - 1):  # (no prior state: below base is not held either)
        with pytest.raises(IndexError):
            run.leaf_hash(k)


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 300), max_size=80), st.lists(st.integers(-5, 320), max_size=40))
def test_is_query_answers_as_membership_in_the_sorted_positions(accepted, probes):
    run = Run(Bundle(Path(".")), None)
    run.queries = array("q", sorted(accepted))
    for pos in [*accepted, *probes]:
        assert run.is_query(pos) == (pos in accepted)


def test_after_the_request_check_only_the_query_leaves_are_let_go(tmp_path):
    """§8.7 lets the query leaves' bytes go (memory at scale): the other leaves (genesis, registry, policy,
    documents, recoveries, malformed ones) stay readable by the checks after it and by the auditor's state; a query
    leaf read later is a LookupError naming it, which the guarded checks would report, never a silent wrong read."""
    import json

    from dprag.audit.verify.records import LeafRecords
    from dprag.audit.verify.run import KeptLeaves

    recs = [
        {"type": "genesis"},
        {"type": "query", "h_charge": "0" * 64, "h_req": "1" * 64, "h_top": "2" * 64},
        None,
        {"type": "query", "h_req": "x"},  # a query of another shape: a dict, still a query
        {"type": "registry"},
        {"type": "query", "h_charge": "3" * 64, "h_req": "4" * 64, "h_top": "5" * 64},
    ]
    leaves = [json.dumps(r).encode() if r is not None else b"\x00bad" for r in recs]
    run = Run(Bundle(tmp_path, leaves=list(leaves)), None)
    run.records = LeafRecords(len(recs))
    for r in recs:
        run.records.append(r)
    run.leaf_hashes = b"".join(map(hash_leaf, leaves))
    run.let_go_query_leaves()
    kept = run.b.leaves
    assert isinstance(kept, KeptLeaves) and len(kept) == len(leaves)
    for i in (0, 2, 4):
        assert kept[i] == leaves[i] and kept[i - len(leaves)] == leaves[i]
    for i in (1, 3, 5):
        with pytest.raises(LookupError, match=f"leaf {i}: a query leaf"):
            kept[i]
    with pytest.raises(IndexError):
        kept[6]
    assert kept[::2][:1] == [leaves[0]]


def test_the_query_leaves_stay_when_the_ledger_check_did_not_hash_them(tmp_path):
    leaves = [b'{"type":"genesis"}', b'{"type":"query"}']
    run = Run(Bundle(tmp_path, leaves=list(leaves)), None)
    run.leaf_hashes = hash_leaf(leaves[0])  # one of two: the state would hash the leaves itself
    run.let_go_query_leaves()
    assert run.b.leaves == leaves
