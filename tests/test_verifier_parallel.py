"""The verifier's fast paths change no verdict (issue 9, verifier scale): forked workers for the canonical,
receipt and request checks, the block-vectorised retrieval replay, and the bounded score cache give the
same verdict JSON (everything but the timings) as the in-process, leaf-by-leaf replay, on an honest bulk
window and on windows a cheating provider (or a framing account) altered."""

from __future__ import annotations

import json
import shutil

import pytest

import dprag.audit.verifier as V
from dprag.audit.testing.bulk import bulk_window


@pytest.fixture(scope="module")
def window(tmp_path_factory):
    d = tmp_path_factory.mktemp("bulk")
    bundle, receipts = bulk_window(d / "w", n_queries=400, n_docs=60, dim=16, accounts=20)
    return bundle, receipts


def _verdict(bundle, receipts, mode: str, monkeypatch, **kw) -> dict:
    with monkeypatch.context() as m:
        if mode == "serial":
            m.setenv("DPRAG_VERIFY_WORKERS", "1")
            m.setattr(V, "noisy_top_k_rows", _refuse)  # the vectorised replay falls back to leaf by leaf
        else:
            m.setenv("DPRAG_VERIFY_WORKERS", "2")
            m.setattr(V, "FORK_MIN_ITEMS", 1)
            m.setattr(V, "FORK_MIN_JOBS", 1)
            m.setattr(V, "_FORK_CHUNK", 37)
            if mode == "tiny-cache":
                m.setattr(V._ScoreCache, "BUDGET", 1)   # every block evicts the one before: re-scored
                m.setattr(V._ScoreCache, "BLOCK", 7)
                m.setattr(V, "LARGE_TENANT", 1)           # the per-row selection of large tenants
        out = V.verify(bundle, receipts=receipts, **kw).to_json()
    out.pop("seconds")
    return out


def _refuse(*a, **k):
    raise RuntimeError("vectorised path disabled for the reference run")


def _all_modes_agree(bundle, receipts, monkeypatch, **kw) -> dict:
    ref = _verdict(bundle, receipts, "serial", monkeypatch, **kw)
    for mode in ("forked", "tiny-cache"):
        assert _verdict(bundle, receipts, mode, monkeypatch, **kw) == ref, mode
    return ref


def test_honest_window_same_verdict(window, monkeypatch):
    bundle, receipts = window
    ref = _all_modes_agree(bundle, receipts, monkeypatch)
    assert ref["verdict"] == "PASS" and ref["checked"]["retrieval"] == 400 and ref["checked"]["receipts"] == 400


def _edit_lines(path, edits):
    lines = path.read_bytes().split(b"\n")
    for k, fn in edits.items():
        lines[k] = fn(lines[k])
    path.write_bytes(b"\n".join(lines))


def _retop(line: bytes) -> bytes:
    """The provider cites another document (re-encoded canonically, as a provider would)."""
    from dprag.audit.encoding import decode, encode

    op = decode(line)
    op["top"] = [(op["top"][0] + 1) % 60] + op["top"][1:]
    return encode(op)


def test_tampered_windows_same_verdict(window, tmp_path, monkeypatch):
    bundle, receipts = window
    b2 = tmp_path / "bundle"
    shutil.copytree(bundle, b2)
    r2 = tmp_path / "receipts.jsonl"
    shutil.copy(receipts, r2)
    ops = b2 / "auditor" / "openings.jsonl"
    _edit_lines(ops, {5: _retop, 77: _retop, 301: _retop,
                      120: lambda x: x.replace(b'{"charge"', b'{ "charge"'),    # not canonical
                      250: lambda x: x[:-3] + b"}}"})                          # not JSON
    flip = {ord("0"): b"1", ord("1"): b"0"}

    def bad_sig(x: bytes) -> bytes:
        i = x.index(b'"sig":"') + 9
        return x[:i] + flip.get(x[i], b"0") + x[i + 1:]

    _edit_lines(r2, {3: bad_sig, 200: bad_sig, 399: lambda x: b"{" + x})
    r2.write_bytes(r2.read_bytes() + (r2.read_bytes().split(b"\n")[10] + b"\n"))  # an exact duplicate
    ref = _all_modes_agree(b2, r2, monkeypatch)
    assert ref["verdict"] == "FAIL"
    text = json.dumps(ref["reasons"])
    # each tampered opening is named (positions are line + 1: genesis is leaf 0, lines follow the leaves)
    for pos in (6, 78, 302):
        assert f"retrieval: leaf {pos}: citations are not the top-K" in text
    assert "opening line 120" in text and "opening line 250" in text
    rejected = json.dumps(ref["rejected_evidence"])
    assert "receipt 3:" in rejected and "receipt 200:" in rejected and "receipt 399:" in rejected
    assert "duplicates receipt 10" in rejected


def test_coalition_fail_same_verdict(window, monkeypatch):
    """An auditor's low θ links the random queries of many accounts: the coalition check FAILs alike when
    it runs in a forked child beside the other checks and when it runs in line."""
    bundle, receipts = window
    ref = _all_modes_agree(bundle, receipts, monkeypatch, theta=0.05, coalition_window=50)
    assert ref["verdict"] == "FAIL" and ref["checked"]["coalition_estimate"] > 5
    assert any(r.startswith("coalition: estimated coalition size") for r in ref["reasons"])
