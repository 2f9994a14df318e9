"""The verifier's fast paths change no verdict (issue 9, verifier scale): forked workers for the canonical,
receipt and request checks, the block-vectorised retrieval replay, and the bounded score cache give the
same verdict JSON (everything but the timings) as the in-process, leaf-by-leaf replay, on an honest bulk
window and on windows a cheating provider (or a framing account) altered."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import dprag.audit.verify.canonical as canonical
import dprag.audit.verify.pool as pool
import dprag.audit.verify.retrieval as retrieval
import dprag.audit.verify.scores as scores
from dprag.audit.verify import verify
from tests.support.bulk import bulk_window

pytestmark = pytest.mark.integration  # starts servers or processes (CONTRIBUTING.md)


@pytest.fixture(scope="module")
def window(tmp_path_factory):
    d = tmp_path_factory.mktemp("bulk")
    bundle, receipts = bulk_window(d / "w", n_queries=400, n_docs=60, dim=16, accounts=20)
    return bundle, receipts


def _verdict(bundle, receipts, mode: str, monkeypatch, **kw) -> dict:
    with monkeypatch.context() as m:
        if mode == "serial":
            m.setenv("DPRAG_VERIFY_WORKERS", "1")
            m.setattr(retrieval, "noisy_top_k_rows", _refuse)  # the vectorised replay falls back to leaf by leaf
        else:
            m.setenv("DPRAG_VERIFY_WORKERS", "2")
            m.setattr(pool, "FORK_MIN_ITEMS", 1)
            m.setattr(retrieval, "FORK_MIN_JOBS", 1)
            m.setattr(pool, "_FORK_CHUNK", 37)
            if mode == "tiny-cache":
                m.setattr(scores.ScoreCache, "BUDGET", 1)  # every block evicts the one before: re-scored
                m.setattr(scores.ScoreCache, "BLOCK", 7)
                m.setattr(retrieval, "LARGE_TENANT", 1)  # the per-row selection of large tenants
        out = verify(bundle, receipts=receipts, **kw).to_json()
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
    from dprag.audit.protocol.encoding import decode, encode

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
    _edit_lines(
        ops,
        {
            5: _retop,
            77: _retop,
            301: _retop,
            120: lambda x: x.replace(b'{"charge"', b'{ "charge"'),  # not canonical
            250: lambda x: x[:-3] + b"}}",
        },
    )  # not JSON
    flip = {ord("0"): b"1", ord("1"): b"0"}

    def bad_sig(x: bytes) -> bytes:
        i = x.index(b'"sig":"') + 9
        return x[:i] + flip.get(x[i], b"0") + x[i + 1 :]

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
    assert any(r.startswith("coalition: coalition or a common question:") for r in ref["reasons"])


def _pool_maps(monkeypatch) -> list:
    """Record (task, status) of every map the worker pool runs."""
    seen = []
    orig = pool.WorkerPool.map

    def recording(self, fn, items, size):
        status, out = orig(self, fn, items, size)
        seen.append((getattr(fn, "func", fn).__name__, status))
        return status, out

    monkeypatch.setattr(pool.WorkerPool, "map", recording)
    return seen


def test_the_pool_runs_every_map(window, monkeypatch):
    """The forked mode above really runs in the pool forked before the bundle is read (not in a fallback):
    every map of the canonical, receipt, request and retrieval checks comes back "ok" from it."""
    bundle, receipts = window
    seen = _pool_maps(monkeypatch)
    _verdict(bundle, receipts, "forked", monkeypatch)
    assert seen == [
        ("_decode_error", "ok"),
        ("_opening_pos", "ok"),
        ("parse_chunk", "ok"),
        ("_request_in_worker", "ok"),
        ("_retrieval_job", "ok"),
    ]


_OPENING_POS = canonical._opening_pos


def _raise_in_worker(parent: int):
    def fn(item):
        if os.getpid() != parent:
            raise RuntimeError("a worker fails")
        return _OPENING_POS(item)

    return fn


def _die_in_worker(parent: int):
    def fn(item):
        if os.getpid() != parent:
            os._exit(3)
        return _OPENING_POS(item)

    return fn


@pytest.mark.parametrize("how", ["raises", "dies", "too-large"])
def test_pool_failures_change_no_verdict(window, tmp_path, monkeypatch, how):
    """A map whose worker raises reruns in the verifier; a worker that dies closes the pool (that map reruns
    in the verifier, later maps fork workers on the spot, as does a task over POOL_TASK_MAX). The verdict of
    a tampered window is the same as the in-process replay's either way."""
    bundle, receipts = window
    b2 = tmp_path / "bundle"
    shutil.copytree(bundle, b2)
    _edit_lines(b2 / "auditor" / "openings.jsonl", {7: _retop, 90: lambda x: x[:-1]})  # a wrong top, not JSON
    ref = _verdict(b2, receipts, "serial", monkeypatch)
    assert ref["verdict"] == "FAIL"
    seen = _pool_maps(monkeypatch)
    with monkeypatch.context() as m:
        if how == "too-large":
            m.setattr(pool, "POOL_TASK_MAX", 0)
        else:  # a function defined here pickles by reference to this module, which the workers also hold
            global _FAULTY
            _FAULTY = (_raise_in_worker if how == "raises" else _die_in_worker)(os.getpid())
            m.setattr(canonical, "_opening_pos", _faulty)
        assert _verdict(b2, receipts, "forked", monkeypatch) == ref
    statuses = dict(seen)
    if how == "too-large":
        assert set(statuses.values()) == {"unfit"}
    else:
        assert statuses["_faulty"] == "failed"
        assert statuses["_request_in_worker"] == ("ok" if how == "raises" else "unfit")  # a dead pool: no pool


_FAULTY = None


def _faulty(item):
    return _FAULTY(item)


def test_missing_citations_found_in_the_workers(window, tmp_path, monkeypatch):
    """An opening without citations (top: null) for a tenant with the retrieval channel on: the workers'
    replay words the reason as the leaf-by-leaf replay does."""
    from dprag.audit.protocol.encoding import decode, encode

    bundle, receipts = window
    b2 = tmp_path / "bundle"
    shutil.copytree(bundle, b2)

    def no_top(line: bytes) -> bytes:
        op = decode(line)
        op["top"] = None
        return encode(op)

    _edit_lines(b2 / "auditor" / "openings.jsonl", {12: no_top})
    ref = _all_modes_agree(b2, receipts, monkeypatch)
    assert "retrieval: leaf 13: citations missing for a tenant with the retrieval channel on" in ref["reasons"]
