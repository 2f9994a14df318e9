"""The demo on the library's current defaults (spec/demo.md step 3): answer-keys-v2 and the per-method answer length
of the experiments, the mechanism the public calibration chose, a window committed with answer-keys-v1 that still
replays under v1's rules (and a provider serving v2 under a v1 commitment caught by the replay), and ``--seed``.
Weight-free: the toy models."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from dprag.audit.protocol import policy as policy_module
from dprag.audit.protocol.encoding import decode, encode
from dprag.audit.testing.toy import ToyGenerator
from dprag.audit.verify import verify
from dprag.errors import InvalidParameterError
from dprag.lab.demo.cli import main as demo_main
from dprag.lab.demo.config import (
    ANSWER_TOKENS,
    LEGACY_V1,
    DemoPrivacy,
    build_policy,
    derived_bytes,
    quick_config,
    seeded,
)
from dprag.lab.demo.models import load_models
from dprag.lab.demo.progress import Progress
from dprag.lab.demo.run import run_demo
from dprag.lab.experiments.defaults import ADA_ANSWER_VOTE_TOKENS, RUN_WIDE
from dprag.rag_adapters.answer_keys import answer_key, answer_key_v2
from dprag.rag_adapters.datasets.clinic import generate_clinic_corpus

ROOT = Path(__file__).resolve().parents[2]


def test_demo_defaults_are_the_experiments_defaults():
    p = DemoPrivacy()
    assert p.normalizer == RUN_WIDE["--normalizer"] == "answer-keys-v2"
    assert p.key_words == int(str(RUN_WIDE["--key-words"]))
    assert ANSWER_TOKENS == {"murag": int(str(RUN_WIDE["--answer-tokens"])), "murag-ada": ADA_ANSWER_VOTE_TOKENS}
    assert p.max_tokens == ANSWER_TOKENS[p.algorithm]
    # the committed policy carries them
    g = build_policy(quick_config("toy")).generation
    assert (g.normalizer, g.max_tokens, g.algorithm) == (p.normalizer, p.max_tokens, p.algorithm)
    # the earlier defaults stay nameable: v1, MuRAG, 16 tokens
    assert (LEGACY_V1.normalizer, LEGACY_V1.algorithm, LEGACY_V1.max_tokens, LEGACY_V1.m) == (
        "answer-keys-v1",
        "murag",
        16,
        30,
    )


def _candidate_of(p: DemoPrivacy) -> str:
    if p.algorithm == "murag":
        return f"murag tau={p.tau} m={p.m} delta={p.vote_delta:g}"
    return f"murag-ada K={p.m * p.docs_per_voter} eps_thr={p.epsilon_thr:g} delta={p.vote_delta:g}"


def test_default_mechanism_is_the_calibrations_choice():
    """The committed calibration (results/demo_calibration/release_grid_v2.json, public corpus only) ranks its
    candidates by the exact expected share of correct releases; among those whose composed δ stays <= 1e-4 (δ_q =
    1e-6 at M = 1) and at the defaults' 2 key words, the best is the demo's default."""
    data = json.loads((ROOT / "results" / "demo_calibration" / "release_grid_v2.json").read_text())
    assert data["corpus"]["seed"] == "dprag-demo/public-calibration"  # the public corpus, no tenant's data
    assert data["release_grid_settings"]["normalizer"] == "answer-keys-v2"
    rows = [r for r in data["release_grid"] if r["key_words"] == 2 and r["candidate"].endswith("delta=1e-06")]
    best = max(rows, key=lambda r: r["expected_correct"])
    p = DemoPrivacy()
    assert best["candidate"] == _candidate_of(p)
    assert best["answer_tokens"] == p.max_tokens
    # ε_q is the same 4 for every candidate: the composed ε stays 9.8752
    assert p.vote_epsilon + (p.epsilon_thr if p.algorithm == "murag-ada" else 0.0) == 4.0


# ----------------------------------------------------------------------------------------------------------
# a window committed with answer-keys-v1 replays under v1
# ----------------------------------------------------------------------------------------------------------
#: an answer whose key differs between the versions (spec/answer-keys.md §2): v1 takes the span after " is " (all
#: stop words: the voter abstains), v2 the first clause's drug
SENTENCE = "The clinic prescribes Quoustrimab, a medication that is used to"


class Scripted(ToyGenerator):
    """Every voter that read a document answers ``SENTENCE``; a prompt without one (the fallback) "unknown"."""

    def generate(self, prompt, max_new_tokens):
        return SENTENCE if any(prompt.contexts) else "unknown"

    def generate_many(self, prompts, max_new_tokens):
        return [self.generate(p, max_new_tokens) for p in prompts]


def _v1_run(out: Path, monkeypatch=None):
    """A toy window under the demo's earlier policy (answer-keys-v1), τ = 0 so that the first questions' 30 voters all
    read a record; ``monkeypatch``: the provider serves v2's rules under the v1 name."""
    cfg = quick_config("toy")
    cfg = replace(
        cfg,
        privacy=replace(LEGACY_V1, theta=cfg.privacy.theta, tau=0),
        tenants=tuple(replace(t, zk=False) for t in cfg.tenants),
    )
    models = replace(load_models("toy", Progress(False).counter), generator=Scripted(vocab_size=4096))
    if monkeypatch is not None:
        real = policy_module.normalizer
        monkeypatch.setattr(policy_module, "normalizer", lambda n: answer_key_v2 if n == "answer-keys-v1" else real(n))
    res = run_demo(out, cfg, progress=False, echo=lambda s: None, models=models)
    if monkeypatch is not None:
        monkeypatch.undo()
    corpus = {
        t.name: generate_clinic_corpus(
            t.seed,
            n_conditions=t.n_conditions,
            support_min=t.support[0],
            support_max=t.support[1],
            n_distractors=t.n_distractors,
        ).documents
        for t in cfg.tenants
    }
    # the accounts hand over their questions with their receipts, so the auditor can replay every answer (§8.9)
    answers = [json.loads(x) for x in (out / "answers.jsonl").read_text().splitlines()]
    lines = [decode(x.encode()) for x in (out / "receipts.jsonl").read_text().splitlines()]
    assert [r["receipt"]["pos"] for r in lines] == [a["pos"] for a in answers]
    (out / "receipts-q.jsonl").write_text(
        "".join(encode({**r, "question": a["question"]}).decode() + "\n" for r, a in zip(lines, answers, strict=True))
    )
    v = verify(
        out / "bundle",
        receipts=out / "receipts-q.jsonl",
        mode="full",
        corpus=corpus,
        replay_generator=Scripted(vocab_size=4096),
        theta=cfg.privacy.theta,
    ).to_json()
    return res, v


def test_a_v1_window_replays_under_v1_and_a_provider_serving_v2_under_it_fails(tmp_path, monkeypatch):
    assert answer_key(SENTENCE, "Which drug?", max_words=2) == ""  # the versions disagree on this answer
    assert answer_key_v2(SENTENCE, "Which drug?", max_words=2) == "quoustrimab"
    res, v = _v1_run(tmp_path / "honest")
    committed = json.loads((tmp_path / "honest" / "bundle" / "auditor" / "policy.json").read_text())["policy"]
    assert committed["generation"]["answer_vote"]["normalizer"] == "answer-keys-v1"
    assert res.passed and v["verdict"] == "PASS", v["reasons"]
    assert v["checked"]["answers_replayed"] == quick_config("toy").n_queries()
    # under v1 every voter abstains: ⊥, the fallback text, on every question
    assert {s.answer for s in res.served} == {"unknown"}
    # the provider that commits v1 but keys with v2 releases the drug; the replay under v1 catches it
    res2, v2 = _v1_run(tmp_path / "cheat", monkeypatch)
    assert "quoustrimab" in {s.answer for s in res2.served}
    assert v2["verdict"] == "FAIL" and any(r.startswith("generation") for r in v2["reasons"]), v2["reasons"]


# ----------------------------------------------------------------------------------------------------------
# --seed
# ----------------------------------------------------------------------------------------------------------
def test_seed_derives_corpora_and_noise_and_the_default_stays_fixed():
    cfg = quick_config("toy")
    assert seeded(cfg, None) is cfg and derived_bytes(cfg, "s_W/epoch-1") is None  # default: fixed corpora, CSPRNG
    a, b, c = seeded(cfg, "1"), seeded(cfg, "1"), seeded(cfg, "2")
    assert a == b and a != c and [t.seed for t in a.tenants] == [f"{t.seed}/seed=1" for t in cfg.tenants]
    assert derived_bytes(a, "s_W/epoch-1") == derived_bytes(b, "s_W/epoch-1") != derived_bytes(c, "s_W/epoch-1")
    assert derived_bytes(a, "s_W/epoch-1") != derived_bytes(a, "s_W/epoch-2") and len(derived_bytes(a, "x")) == 32
    docs = lambda k: generate_clinic_corpus(k.tenants[0].seed, n_conditions=2, n_distractors=5).documents  # noqa: E731
    assert docs(a) == docs(b) != docs(c) and docs(a) != docs(cfg)
    for bad in ("", "x" * 201, "a\nb"):
        with pytest.raises(InvalidParameterError, match="seed"):
            seeded(cfg, bad)


def test_seed_option_commits_the_derived_seed(tmp_path, capsys):
    out = tmp_path / "run"
    assert demo_main(["--model", "toy", "--quick", "--no-zk", "--no-progress", "--seed", "7", "--out", str(out)]) == 0
    cfg = seeded(quick_config("toy"), "7")
    epochs = json.loads((out / "provider" / "secret" / "epochs.json").read_text())
    assert (out / "provider" / "secret" / "seed.hex").read_text() == derived_bytes(cfg, "s_W/epoch-1").hex()
    assert epochs[-1]["seed"] == derived_bytes(cfg, "s_W/epoch-2").hex()
    config = json.loads((out / "demo-run.json").read_text())["config"]
    assert config["seed"] == "7" and config["tenants"][0]["seed"].endswith("/seed=7")
    assert demo_main(["--model", "toy", "--quick", "--seed", "", "--out", str(tmp_path / "bad")]) == 2
    assert "seed" in capsys.readouterr().err and not (tmp_path / "bad" / "bundle").exists()
