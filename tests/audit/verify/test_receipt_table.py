"""§8.6's receipts at scale (spec/protocol.md §8 item 13): the receipts files are spooled, not held, and parsed
into fixed-width rows, never kept as bodies; what the verdict says of each line is unchanged by that — a message
names the line of the file (counting blank lines), a repeated line names its first, a reformatted copy of a
signed receipt is one receipt, and a conflicting pair still FAILs."""

from __future__ import annotations

import json

import pytest

from dprag.audit.protocol.encoding import encode
from dprag.audit.testing import window as fx
from dprag.audit.verify import verify
from dprag.audit.verify.receipt_lines import ROW


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return fx.build_window(tmp_path_factory.mktemp("rt") / "w", rounds=2)


def _lines(w) -> list[str]:
    return w.receipts.read_text().splitlines()


def test_messages_name_the_files_own_line_numbers(built, tmp_path):
    """Blank lines (counted by any text editor) before a bad line, a repeat of line 0, and a reformatted copy of
    line 1 (the same signed body): each message names the line an editor shows (0-based), and the PASS stands."""
    lines = _lines(built)
    body = json.loads(lines[1])
    reformatted = json.dumps(body, indent=1).replace("\n", " ")  # one line, other bytes, same content
    text = [lines[0], "", lines[1], "", "", "not json", lines[0], reformatted, *lines[2:]]
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(text) + "\n")
    want_bad = text.index("not json")
    want_dup = 6
    want_same = 7
    v = verify(built.bundle, receipts=f)
    rej = v.rejected_evidence
    assert v.verdict == "PASS", v.reasons
    assert any(r.startswith(f"receipt {want_bad}:") for r in rej), rej
    assert f"receipt {want_dup}: duplicates receipt 0" in rej, rej
    assert f"receipt {want_same}: the same signed receipt as receipt 2" in rej, rej
    assert v.checked["receipts_accepted"] == len(lines)


def test_two_files_number_on(built, tmp_path):
    """``--receipts`` repeated: the second file's lines are numbered after the first's (its last line ended)."""
    lines = _lines(built)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("\n".join(lines[:3]))  # no newline at the end
    b.write_text("garbage\n" + "\n".join(lines[3:]) + "\n")
    v = verify(built.bundle, receipts=[a, b])
    assert v.verdict == "PASS"
    assert any(r.startswith("receipt 3:") for r in v.rejected_evidence)
    assert v.checked["receipts_accepted"] == len(lines)


def test_two_releases_for_one_leaf_still_fail(tmp_path):
    """The provider's adversary test: a second validly signed release for a leaf (another answer, signed with the
    provider's own key) is a FAIL naming both lines, whatever the table keeps of each."""
    from dprag.audit.protocol.receipts import sign_receipt

    svc = fx.open_service(tmp_path / "svc")
    try:
        r = fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
        body = {k: v for k, v in r.receipt.items() if k not in ("sig", "key")}
        body["h_answer"] = "00" * 32
        forged = sign_receipt(body, svc.signer)
        bundle = svc.export_bundle(tmp_path / "bundle")
    finally:
        svc.close()
    f = tmp_path / "r.jsonl"
    f.write_text(encode({"receipt": r.receipt}).decode() + "\n" + encode({"receipt": forged}).decode() + "\n")
    v = verify(bundle, receipts=f)
    assert v.verdict == "FAIL"
    assert any("receipts 0 and 1: two different releases signed for one leaf" in x for x in v.reasons), v.reasons


def test_the_receipts_are_spooled_and_held_as_rows(built, monkeypatch):
    """The auditor's input is a spool (16 bytes a line in memory), and §8.6 keeps one ROW per valid receipt and no
    body unless the answers are replayed."""
    import dprag.audit.verify as v

    seen = {}
    orig_read, orig_check = v.read_receipts, v.check_8_6_receipts

    def read(run, given, keep=False):
        seen["input"] = (type(given.receipts).__name__, len(given.receipts))
        return orig_read(run, given, keep)

    def check(run, evidence):
        seen["table"] = (evidence.table.rows.dtype, evidence.table.rows.size, dict(evidence.table.kept))
        return orig_check(run, evidence)

    monkeypatch.setattr(v, "read_receipts", read)
    monkeypatch.setattr(v, "check_8_6_receipts", check)
    assert v.verify(built.bundle, receipts=built.receipts).verdict == "PASS"
    n = len(_lines(built))
    assert seen["input"] == ("SpooledLines", n)
    assert seen["table"] == (ROW, n, {})
    assert ROW.itemsize <= 232
