"""The parsed leaves as compact rows (audit/verify/records.py): every record reads back exactly as it was set —
the same keys in the same order, the same values and types — against a plain list (the reference), whatever its
shape; only query records of the usual shape are compacted."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dprag.audit.verify.records import LeafRecords

HEX = st.binary(min_size=32, max_size=32).map(bytes.hex)
ODD_HEX = st.one_of(HEX.map(str.upper), st.just("ab"), st.just("zz" * 32), st.integers())


@st.composite
def record(draw):
    kind = draw(st.sampled_from(["none", "query", "bound", "odd", "other", "extra"]))
    if kind == "none":
        return None
    rec = {"h_charge": draw(HEX), "h_req": draw(HEX), "h_top": draw(HEX), "type": "query"}
    if kind == "bound":
        rec.update(
            account=draw(st.sampled_from(["alice", "bob", "é"])), tenant="clinic", counter=draw(st.integers(1, 1 << 40))
        )
    elif kind == "odd":
        rec[draw(st.sampled_from(["h_charge", "h_req", "h_top"]))] = draw(ODD_HEX)
    elif kind == "other":
        rec = {"type": draw(st.sampled_from(["genesis", "policy", "recovery"])), "x": draw(st.integers())}
    elif kind == "extra":
        rec.update(account="alice", tenant="clinic", counter=draw(st.sampled_from([True, -1, 1.0, "3"])))
    return rec


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.lists(record(), max_size=40), st.lists(st.tuples(st.integers(0, 39), record()), max_size=10))
def test_reads_back_like_a_list(recs, updates):
    ref: list = []
    store = LeafRecords(len(recs))
    for r in recs:
        ref.append(r)
        store.append(r)
    for i, r in updates:
        if i < len(ref):
            ref[i] = r
            store[i] = r
    assert len(store) == len(ref) and bool(store) == bool(ref)
    for got, want in zip(store, ref, strict=True):
        assert (got is None) == (want is None)
        if want is not None:
            assert list(got.items()) == list(want.items())
            assert [type(v) for v in got.values()] == [type(v) for v in want.values()]
    if ref:
        assert store[-1] == ref[-1]


def test_a_usual_query_is_a_row_not_a_dict():
    store = LeafRecords(2)
    store.append({"h_charge": "00" * 32, "h_req": "11" * 32, "h_top": "22" * 32, "type": "query"})
    store.append({"type": "genesis"})
    assert list(store.other) == [1]  # only the genesis is kept as a dict
    assert store[0]["h_req"] == "11" * 32
