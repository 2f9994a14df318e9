"""Exclusion on failure, per record, audited (spec/accounting/rag.md §6.2, spec/protocol.md §5.3 and §8.9).

A record whose scoring or selection fails is excluded from its query and the exclusion goes into the query's charge
opening. The verifier replays the selection and the citations without the excluded records and re-runs the
protocol's scoring and selection on each of them: an exclusion the auditor cannot reproduce (it depended on
something other than that record) FAILs at that leaf; an exclusion hidden from the opening FAILs the replay; an
honest exclusion of a record the shared scoring function rejects PASSes. The adversaries are providers that serve
honestly except for the exclusion (every byte signed with their own key).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from dprag.audit.protocol import retrieval as rt
from dprag.audit.provider import serving, window
from dprag.audit.provider.service import ProviderService
from dprag.audit.provider.window import TenantRetriever
from dprag.audit.testing import window as fx
from dprag.audit.testing.toy import CLINIC, LEGAL, HashEmbedder, ToyGenerator, toy_policy
from dprag.audit.verify import verify

MARK = "qmark"
Z = "patient 0 asthma protocol inhaler drug qmark ANSWER: zorvatin"
#: alice's questions name record 0 (Z), so Z is above the threshold and charged when it is not excluded
QUESTIONS = ("asthma protocol inhaler patient 0", "inhaler drug protocol patient 0", "garden weather rain note")


def _create(path, clinic, algorithm: str = "murag") -> ProviderService:
    """A toy window over ``clinic`` (and the legal tenant), the fixed seed of every run here."""
    emb = HashEmbedder(32)
    return ProviderService.create(
        path,
        policy=toy_policy(algorithm=algorithm),
        embedder=emb,
        seed=b"\x05" * 32,
        embedder_descriptor=emb.descriptor({"clinic": len(clinic), "legal": len(LEGAL)}),
        generator=ToyGenerator(),
        tenants={"clinic": clinic, "legal": LEGAL},
        accounts=fx.registry(fx.ACCOUNTS),
        allow_weak=True,
    )


def _serve(d, algorithm: str = "murag"):
    clinic = list(CLINIC)
    clinic[0] = Z
    svc = _create(d / "w", clinic, algorithm)
    try:
        alice = fx.client(svc, "alice")
        for q in QUESTIONS:
            alice.ask(svc, q)
        openings = [json.loads(svc.aud.opening(p) or b"null") for p in range(svc.ledger.size)]
        bundle = svc.export_bundle(d / "bundle")
    finally:
        svc.close()
    excluded = [op["charge"].get("excluded") for op in openings if op and op.get("kind") == "query"]
    return bundle, excluded, clinic


def _provider_only_failure(mp: pytest.MonkeyPatch) -> None:
    """The provider's scoring fails on Z's row; the protocol's own scoring (the auditor's) does not."""
    orig = TenantRetriever.score_chunk

    def score_chunk(self, first, keep, q_query):
        rows = range(first, min(first + window.SCORE_CHUNK, len(self.docs)))
        if any(MARK in self.docs[i] for k, i in enumerate(rows) if keep is None or keep[k]):
            raise MemoryError("injected: the provider's scoring of one record")
        return orig(self, first, keep, q_query)

    mp.setattr(TenantRetriever, "score_chunk", score_chunk)


@pytest.mark.parametrize("algorithm", ["murag", "murag-ada"])
def test_an_honest_exclusion_of_a_record_the_shared_scoring_rejects_passes(tmp_path, monkeypatch, algorithm):
    orig = rt.float_exact_scores
    rejected: list[np.ndarray] = []

    def shared(rows, q_query, clip, shift):  # the protocol's scoring rejects one row, on both sides
        rows = np.asarray(rows, dtype=np.float64)
        if rejected and (rows == rejected[0]).all(axis=1).any():
            raise ValueError("the shared scoring rejects this row")
        return orig(rows, q_query, clip, shift)

    monkeypatch.setattr(rt, "float_exact_scores", shared)
    monkeypatch.setattr(window, "float_exact_scores", shared)
    clinic = list(CLINIC)
    clinic[0] = Z
    rejected.append(_index_row(tmp_path, clinic))
    bundle, excluded, _ = _serve(tmp_path, algorithm)
    assert excluded[:2] == [[0], [0]], excluded  # Z excluded from alice's two questions, recorded in the opening
    v = verify(bundle)
    assert v.verdict.startswith("PASS"), v.reasons


def _index_row(tmp_path, clinic) -> np.ndarray:
    """Z's row of the committed index (float64), as the provider commits it."""
    svc = _create(tmp_path / "probe", clinic)
    try:
        return svc.tenants["clinic"].q[0].astype(np.float64)
    finally:
        svc.close()


def test_an_exclusion_the_auditor_cannot_reproduce_fails_at_its_leaf(tmp_path, monkeypatch):
    _provider_only_failure(monkeypatch)
    bundle, excluded, _ = _serve(tmp_path)
    monkeypatch.undo()
    assert excluded[:2] == [[0], [0]], excluded
    v = verify(bundle)
    assert v.verdict == "FAIL", v.verdict
    bad = [r for r in v.reasons if "record 0 was excluded" in r]
    assert bad and all(r.startswith("generation: leaf ") for r in bad), v.reasons


def test_a_provider_that_excludes_a_record_to_steer_the_selection_fails(tmp_path, monkeypatch):
    """No failure at all: the provider drops Z from alice's selection (never charged, never cited) and says so in the
    opening, as if Z had failed. The replay agrees with the opening; the reproduction does not."""
    orig = TenantRetriever.for_query

    def for_query(self, question, q_query, excluded=()):
        return orig(self, question, q_query, (*excluded, 0) if "asthma" in question else excluded)

    monkeypatch.setattr(TenantRetriever, "for_query", for_query)
    bundle, excluded, _ = _serve(tmp_path)
    monkeypatch.undo()
    assert excluded[0] == [0], excluded
    v = verify(bundle)
    assert v.verdict == "FAIL" and any("record 0 was excluded" in r for r in v.reasons), v.reasons


def test_a_provider_that_hides_an_exclusion_fails_the_replay(tmp_path, monkeypatch):
    """Z excluded from the selection and the citations, but the opening says nothing: the replay charges Z."""
    _provider_only_failure(monkeypatch)
    orig = serving.Serving._append_query

    def append_query(self, pos, signed, qb, top, charge, h_req):
        charge.pop("excluded", None)
        return orig(self, pos, signed, qb, top, charge, h_req)

    monkeypatch.setattr(serving.Serving, "_append_query", append_query)
    bundle, excluded, _ = _serve(tmp_path)
    monkeypatch.undo()
    assert excluded[:2] == [None, None], excluded
    v = verify(bundle)
    assert v.verdict == "FAIL", v.verdict
    assert any(r.startswith("generation: leaf ") and "charges differ" in r for r in v.reasons), v.reasons


def test_without_a_failure_nothing_is_excluded_and_the_window_passes(tmp_path):
    bundle, excluded, _ = _serve(tmp_path)
    assert excluded == [None, None, None], excluded
    v = verify(bundle)
    assert v.verdict.startswith("PASS"), v.reasons


def test_a_request_with_an_exclusion_finished_on_a_retry_gives_the_same_answer_and_passes(tmp_path, monkeypatch):
    """The answer's first generation fails (pending); the retry finishes it from the recorded selection, scoring
    again through the contained path with the recorded exclusion (serving.py ``_finish``): the same answer as a
    window where nothing failed after the charge, and the audit PASSes (the exclusion is the shared scoring's)."""
    from dprag.audit.protocol.errors import AnswerPendingError

    orig = rt.float_exact_scores
    clinic = list(CLINIC)
    clinic[0] = Z
    row = _index_row(tmp_path, clinic)

    def shared(rows, q_query, clip, shift):
        rows = np.asarray(rows, dtype=np.float64)
        if (rows == row).all(axis=1).any():
            raise ValueError("the shared scoring rejects this row")
        return orig(rows, q_query, clip, shift)

    monkeypatch.setattr(rt, "float_exact_scores", shared)
    monkeypatch.setattr(window, "float_exact_scores", shared)
    answers = {}
    for name, fail_once in (("plain", False), ("retried", True)):
        svc = _create(tmp_path / name, clinic)
        try:
            req = fx.client(svc, "alice").request(QUESTIONS[0])
            if fail_once:
                real = serving.Serving._generate
                state = {"n": 0}

                def generate(self, *a, state=state, real=real, **k):
                    state["n"] += 1
                    if state["n"] == 1:
                        raise RuntimeError("injected: the generator went away")
                    return real(self, *a, **k)

                with monkeypatch.context() as mp:
                    mp.setattr(serving.Serving, "_generate", generate)
                    with pytest.raises(AnswerPendingError):
                        svc.serve(req)
                    got = svc.serve(req)  # the retry: scores from the opening's Q and excluded
                assert state["n"] == 2
            else:
                got = svc.serve(req)
            answers[name] = (got.answer, got.citations)
            op = json.loads(svc.aud.opening(got.pos) or b"null")
            assert op["charge"]["excluded"] == [0]
            bundle = svc.export_bundle(tmp_path / f"bundle-{name}")
        finally:
            svc.close()
        v = verify(bundle)
        assert v.verdict.startswith("PASS"), v.reasons
    assert answers["plain"] == answers["retried"]
