"""``dprag demo``: the orchestration end to end with the weight-free models (toy: no torch; tiny: a random
Llama through the real generator adapter), its traffic script, its output files, and the C_emb descriptor
helpers of ``rag_adapters.audit_embedder``. The real-model smoke test is tests/lab/test_demo_realmodel.py."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dprag.audit.cli import main as dprag_main
from dprag.audit.protocol import commitments as cm
from dprag.audit.protocol.certify import certified_epsilons
from dprag.audit.protocol.encoding import decode
from dprag.audit.protocol.request import question_commitment, request_hash
from dprag.errors import InvalidParameterError
from dprag.lab.demo.calibration import tau_statistics, token_budget_accuracy
from dprag.lab.demo.cli import main as demo_main
from dprag.lab.demo.config import MECHANISMS, build_policy, default_config, mechanism_label, quick_config
from dprag.lab.demo.report import epsilon_acc_for_sigma
from dprag.lab.demo.run import run_demo
from dprag.lab.demo.traffic import build_script, honest_questions, probe_questions, probe_target
from dprag.rag_adapters.audit_embedder import (
    CHATML_LAYOUT,
    directory_sha256,
    embedder_descriptor,
    model_files,
    prompt_template_text,
)
from dprag.rag_adapters.datasets.clinic import FACT_KINDS, generate_clinic_corpus
from dprag.rag_adapters.embedder import CorpusCachingEmbedder


# ----------------------------------------------------------------------------------------------------------
# the traffic script
# ----------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def quick_corpora():
    cfg = quick_config("toy")
    return cfg, {
        t.name: generate_clinic_corpus(
            t.seed,
            n_conditions=t.n_conditions,
            support_min=t.support[0],
            support_max=t.support[1],
            n_distractors=t.n_distractors,
        )
        for t in cfg.tenants
    }


def test_honest_questions_one_per_condition_with_rotating_kinds():
    corpus = generate_clinic_corpus("test-demo", n_conditions=6, support_min=20, support_max=22, n_distractors=10)
    items = honest_questions(corpus, 6)
    assert len(items) == 6
    by_id = {f.fact_id: f for f in corpus.facts}
    for ci, q in enumerate(items):
        kind = FACT_KINDS[ci % 4]
        fact = by_id[f"c{ci:02d}-{kind}"]
        assert q.split == "test" and q.group == fact.fact_id
        assert fact.condition in q.question
        assert fact.answer in q.answers  # gold = the fact the corpus states
        assert set(q.relevant_ids) == set(fact.support_ids)


def test_probe_target_is_a_record_no_fact_relies_on(quick_corpora):
    cfg, corpora = quick_corpora
    corpus = corpora[cfg.coalition_tenant]
    target = probe_target(corpus)
    support = {i for f in corpus.facts for i in f.support_ids}
    assert target.doc_id not in support
    assert target.secret in corpus.documents[target.doc_id] and target.name in corpus.documents[target.doc_id]
    qs = probe_questions(target, 6)
    assert len(set(qs)) == 6 and all(target.name in q and target.kind in q for q in qs)


def test_script_interleaves_every_request_once(quick_corpora):
    cfg, corpora = quick_corpora
    cfg = replace(default_config("real"), tenants=cfg.tenants)  # several paraphrases, 2 probes each
    script, target = build_script(cfg, corpora)
    honest = [r for r in script if r.kind == "honest"]
    probes = [r for r in script if r.kind == "probe"]
    assert len(honest) == sum(t.n_conditions for t in cfg.tenants)
    assert len(probes) == len(cfg.colluders) * cfg.probes_per_colluder
    for t in cfg.tenants:
        mine = [r for r in honest if r.tenant == t.name]
        assert {r.account for r in mine} <= set(t.accounts)
        assert len({r.item.group for r in mine}) == t.n_conditions  # one question per condition
    for a in cfg.colluders:
        assert sum(r.account == a for r in probes) == cfg.probes_per_colluder
    assert all(r.tenant == cfg.coalition_tenant for r in probes)
    # probes are spread through the window, not all at its end
    idx = [i for i, r in enumerate(script) if r.kind == "probe"]
    assert idx[0] < len(script) // 2
    assert len({r.question for r in probes}) == len(probes)  # paraphrases, not one repeated text


def test_policy_follows_the_protocol_units():
    cfg = default_config("real")
    pol = build_policy(cfg)
    r = pol.retrieval
    assert r.sensitivity == 1025 == ((r.score_clip[1] - r.score_clip[0]) >> r.score_shift) + 1
    assert r.enabled_tenants == ("clinic-a", "clinic-z") and r.zk_tenants == ("clinic-z",)
    # σ calibrated so that one account's n releases are (ε_acc, δ_acc)-DP: checked with the Gaussian
    # composition of accounting.gdp (an independent route from exact_sigma's search)
    from dprag.accounting.gdp import certified_gaussian_epsilon

    eps = certified_gaussian_epsilon(r.sigma, r.delta_acc, sensitivity=r.sensitivity, count=r.n)
    assert eps == pytest.approx(r.epsilon_acc, rel=1e-3)
    assert pol.generation.tau == 512 and pol.generation.algorithm == "murag"
    assert pol.coalition.delta_policy > pol.coalition.k_max * r.delta_acc


def _gaussian_reference_epsilon(sigma: float, sensitivity: int, releases: int, delta: float) -> float:
    """ε of ``releases`` continuous Gaussian releases (σ, sensitivity) at δ, exactly (Balle & Wang 2018: the
    composition is μ-GDP with μ = √releases·Δ/σ, δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2)), in 40-digit mpmath:
    an independent route from the verifier's discrete-Gaussian PLD."""
    import mpmath as mp

    with mp.workdps(40):
        mu = mp.sqrt(releases) * sensitivity / mp.mpf(sigma)
        d = lambda e: mp.ncdf(-e / mu + mu / 2) - mp.e**e * mp.ncdf(-e / mu - mu / 2) - mp.mpf(delta)  # noqa: E731
        return float(mp.findroot(d, 1.0))


@pytest.mark.parametrize("mechanism", ["answer-vote", "answer-vote-seen", "pure-dp-rag"])
def test_composed_epsilon_is_at_most_10_by_an_independent_computation(mechanism):
    """The main job's composed ε (issue 8 §4): recomputed from the policy's parameters by closed forms, not by
    the code that certifies it, and compared with the certified values."""
    cfg = default_config("real")
    p = replace(cfg.privacy, mechanism=mechanism)
    pol = build_policy(replace(cfg, privacy=p))
    r, g = pol.retrieval, pol.generation
    assert g.mechanism == ("answer-vote" if mechanism == "answer-vote-seen" else mechanism)
    assert (g.vote_selection, g.abstain_empty) == (
        ("seen", True) if mechanism == "answer-vote-seen" else ("universal", False)
    )
    # retrieval: k_max accounts x n queries of the discrete Gaussian at σ; the continuous Gaussian's exact curve
    # (the discrete one's privacy is the same to within the lattice rounding and the sampler's TV)
    ref = _gaussian_reference_epsilon(r.sigma, r.sensitivity, pol.coalition.k_max * r.n, pol.coalition.delta_policy)
    # generation, replace-one: 2·M·ε_q; answer-vote's ε_q is the selection's ε; 000 Alg. 5's is
    # ε_token/4 (SVT threshold) + c·ε_token/4 (SVT queries) + c·ε_token/2 (exponential mechanisms)
    eps_q = (
        p.vote_epsilon
        if mechanism in ("answer-vote", "answer-vote-seen")
        else p.epsilon_token / 4
        + p.max_private_tokens * p.epsilon_token / 4
        + p.max_private_tokens * p.epsilon_token / 2
    )
    assert eps_q == pytest.approx(4.0, abs=1e-12)  # both mechanisms at the same per-query cost
    assert ref + 2 * p.M * eps_q <= 10.0 - 0.1
    cert = certified_epsilons(pol)
    assert cert["retrieval"]["epsilon"] == pytest.approx(ref, rel=1e-3)
    assert cert["retrieval"]["epsilon"] >= ref - 1e-9  # certified: never below the exact continuous value
    assert cert["generation"]["epsilon"] == pytest.approx(2 * p.M * eps_q, rel=1e-8)
    assert cert["epsilon"] <= 10.0
    # δ: retrieval δ_policy; the seen selection adds n·δ_q·(1 + e^(M·ε_q)) with n = M RAG charges per document
    extra = p.M * p.vote_delta * (1 + math.exp(p.M * 4.0)) if mechanism == "answer-vote-seen" else 0.0
    assert cert["delta"] == pytest.approx(p.delta_policy + extra, rel=1e-12)
    assert cert["delta"] >= p.delta_policy + extra
    if mechanism == "answer-vote-seen":
        assert cert["delta"] <= 1e-4  # 6.56e-5 with δ_q = 1e-6


def test_zk_tenant_is_small_and_in_the_policy():
    for cfg in (default_config("real"), quick_config("real")):
        (zt,) = [t for t in cfg.tenants if t.zk]
        n_docs = len(
            generate_clinic_corpus(
                zt.seed,
                n_conditions=zt.n_conditions,
                support_min=zt.support[0],
                support_max=zt.support[1],
                n_distractors=zt.n_distractors,
            ).documents
        )
        assert cfg.privacy.K <= n_docs <= 16
        pol = build_policy(cfg)
        assert pol.retrieval.zk_tenants == (zt.name,) and zt.name in pol.retrieval.enabled_tenants
    # the k_max = 2 window has only the coalition's tenant: no zk tenant, no citations elsewhere
    low = build_policy(cfg, k_max=2, tenants=(cfg.coalition_tenant,))
    assert low.retrieval.zk_tenants == () and low.retrieval.enabled_tenants == (cfg.coalition_tenant,)


def test_epsilon_acc_for_sigma_brackets_the_target():
    from dprag.accounting.collusion import exact_sigma

    e = epsilon_acc_for_sigma(100.0, 8, 1025, 1e-6)
    assert exact_sigma(e, 1e-6, 8, 1025) <= 100.0 < exact_sigma(e / 1.002, 1e-6, 8, 1025)


def test_bad_configuration_is_refused_before_anything_is_written(tmp_path):
    cfg = quick_config("toy")
    bad = replace(cfg, privacy=replace(cfg.privacy, n=1))  # honest accounts ask 2 questions
    out = tmp_path / "d"
    with pytest.raises(InvalidParameterError, match="privacy.n"):
        run_demo(out, bad, progress=False, echo=lambda s: None)
    assert not out.exists()
    with pytest.raises(InvalidParameterError, match="model"):
        run_demo(out, replace(cfg, model="gpt5"), progress=False, echo=lambda s: None)
    assert not out.exists()


def test_package_exposes_the_command_and_its_public_names():
    """``dprag.lab.demo:demo`` (the entry point) and the names of the former single module stay importable from
    the package."""
    from importlib.metadata import entry_points

    import dprag.lab.demo as package
    from dprag.lab.demo import cli

    (ep,) = [ep for ep in entry_points(group="dprag.commands") if ep.name == "demo"]
    assert ep.value == "dprag.lab.demo:demo" and ep.load() is package.demo is cli.demo
    assert all(getattr(package, name) is not None for name in package.__all__)
    assert package.build_policy is build_policy and package.run_demo is run_demo


def test_refuses_a_foreign_non_empty_directory(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    assert demo_main(["--model", "toy", "--quick", "--no-progress", "--out", str(tmp_path)]) == 2
    assert (tmp_path / "mine.txt").read_text() == "keep me"
    assert not (tmp_path / "bundle").exists()


# ----------------------------------------------------------------------------------------------------------
# end to end with the toy models
# ----------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "run"
    lines: list[str] = []
    res = run_demo(out, quick_config("toy"), progress=False, echo=lines.append)
    return out, res, lines


def test_toy_run_passes_and_writes_every_output(toy_run):
    out, res, lines = toy_run
    cfg = quick_config("toy")
    assert res.passed
    assert any("quick run" in line and f"{cfg.n_queries()} queries" in line for line in lines)  # sizes printed
    for rel in (
        "bundle/public/genesis.json",
        "bundle/public/leaves.bin",
        "bundle/public/checkpoints.txt",
        "bundle/auditor/seed.hex",
        "bundle/auditor/openings.jsonl",
        "receipts.jsonl",
        "verdict.json",
        "report.md",
        "answers.jsonl",
        "lowk/verdict.json",
    ):
        assert (out / rel).is_file(), rel
    for png in ("accuracy.png", "spend.png"):
        assert (out / "plots" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    v = json.loads((out / "verdict.json").read_text())
    assert v["verdict"] == "PASS" and v["reasons"] == []
    # one log of two epochs: the key rotated halfway, every receipt of both checked (spec/protocol.md §3.3, §3.4)
    assert v["history"]["window"] == cfg.window and v["history"]["origin_pinned"]
    assert v["history"]["origin"] == (out / "origin.txt").read_text().strip()
    assert len(v["history"]["key_rotations"]) == 1 and v["checked"]["epochs"] == 1 and v["checked"]["key_rotations"]
    assert v["checked"]["receipts_accepted"] == v["checked"]["queries"] == cfg.n_queries()
    assert (out / "provider.vkey").read_text() != (out / "bundle" / "public" / "provider.vkey").read_text()
    assert sorted({s.window for s in res.served}) == [cfg.window]
    report = (out / "report.md").read_text()
    assert "**Verdict: PASS**" in report and all(text in report for text in v["attestation"].values())
    assert "Trust model" in report and v["checked"]["queries_with_account_confirmed_q"] == v["checked"]["queries"]
    assert "Non-RAG baseline" in report and "ĉ = **3**" in report


def test_toy_run_receipts_match_the_answers_and_the_ledger(toy_run):
    out, res, _ = toy_run
    receipts = [decode(x.encode()) for x in (out / "receipts.jsonl").read_text().splitlines()]
    answers = [json.loads(x) for x in (out / "answers.jsonl").read_text().splitlines()]
    assert len(receipts) == len(answers) == len(res.served) == quick_config("toy").n_queries()
    for rc, ans in zip(receipts, answers, strict=False):
        r = rc["receipt"]
        assert r["pos"] == ans["pos"] and r["account"] == ans["account"] and r["tenant"] == ans["tenant"]
        assert r["h_answer"] == hashlib.sha256(ans["answer"].encode()).hexdigest()
        req = rc["request"]
        assert r["h_req"] == request_hash(req).hex()
        assert req["h_q"] == question_commitment(bytes.fromhex(req["nonce"]), ans["question"])
        assert (rc["top"] is None) == (ans["tenant"] == "clinic-b")  # citations only where enabled
        if rc["top"] is not None:
            assert len(rc["top"]) == quick_config("toy").privacy.K


def test_toy_run_epsilons_are_the_certified_values(toy_run):
    out, res, _ = toy_run
    p = quick_config("toy").privacy
    v = res.verdict
    gen = v["channels"]["generation"]
    # answer-level voting (the default: the seen selection): one exponential mechanism at ε = vote_epsilon per
    # query; replace-one doubles the add/remove filter guarantee M·ε_q
    assert p.mechanism == "answer-vote-seen" and gen["selection"] == "seen"
    assert gen["per_query_delta"] == p.vote_delta and gen["max_charges_per_doc"] == p.M
    eps_q = p.vote_epsilon
    assert gen["per_query_epsilon"] == pytest.approx(eps_q, rel=1e-9)
    assert gen["epsilon"] == pytest.approx(2 * p.M * eps_q, rel=1e-9)
    retr = v["channels"]["retrieval"]
    # a coalition of k_max accounts, each (ε_acc, δ_acc)-DP over its n queries: basic composition bounds the
    # certified joint ε from above; a single account's ε_acc bounds it from below
    assert p.epsilon_acc < retr["epsilon"] <= p.k_max * p.epsilon_acc
    assert retr["releases"] == p.k_max * p.n and retr["delta"] == p.delta_policy
    assert v["epsilon"] == pytest.approx(retr["epsilon"] + gen["epsilon"], rel=1e-12)
    assert v["epsilon"] <= 10.0


def test_toy_run_zk_tenant_is_attested_by_the_auditors_key(toy_run):
    out, res, _ = toy_run
    cfg = quick_config("toy")
    v = res.verdict
    n_zk = sum(s.request.tenant in cfg.zk_tenants for s in res.served)
    assert n_zk >= 1 and v["checked"]["zk_proofs"] == n_zk
    assert v["attestation"]["retrieval"].startswith("groth16 + replay: for zk tenant(s) clinic-z")
    proofs = [json.loads(x) for x in (out / "bundle" / "auditor" / "proofs.jsonl").read_text().splitlines()]
    assert len(proofs) == n_zk
    vk = out / "auditor-zk" / "verification_key.json"
    assert vk.is_file() and not list((out / "bundle").rglob("verification_key.json"))  # the auditor's, not the bundle's
    report = (out / "report.md").read_text()
    assert "the demo acting as the AUDITOR ran dprag's development setup" in report and "DEVELOPMENT ONLY" in report
    assert f"--zk-vkey {vk}" in report
    # the CLI auditor with its key: PASS with the proofs checked; without it the verdict stays at replay
    assert (
        dprag_main(
            ["audit", "verify", str(out / "bundle"), "--receipts", str(out / "receipts.jsonl"), "--zk-vkey", str(vk)]
        )
        == 0
    )
    from dprag.audit.verify import verify

    plain = verify(out / "bundle", receipts=out / "receipts.jsonl", theta=0.95).to_json()
    assert plain["verdict"] == "PASS" and plain["attestation"]["retrieval"].startswith("replay only")
    # a well-formed key of another setup (δ' = 2δ, as if the provider had made its own) rejects the proofs
    import dataclasses

    from dprag.zk.curve import g2_mul
    from dprag.zk.formats import read_vk, vk_to_json

    auditor = read_vk(vk)
    other = dataclasses.replace(auditor, delta2=g2_mul(auditor.delta2, 2))
    (out / "other_vk.json").write_text(json.dumps(vk_to_json(other)))
    bad = verify(out / "bundle", receipts=out / "receipts.jsonl", theta=0.95, zk_vkey=out / "other_vk.json")
    assert bad.verdict == "FAIL" and any(x.startswith("retrieval:") for x in bad.reasons)


def test_toy_run_accuracy_table_beside_the_baselines(toy_run):
    out, res, _ = toy_run
    names = [r["method"] for r in res.rows]
    assert names == [
        "MuRAG + answer-level voting (seen keys) (served, private)",
        "Non-RAG baseline",
        "non-private RAG (top-3)",
    ]
    n = quick_config("toy").n_honest()
    assert all(r["questions"] == n for r in res.rows)
    # recomputed from answers.jsonl: the served row's accuracy is the share of honest answers containing a gold
    from dprag.rag_adapters.metrics import contains_answer

    answers = [json.loads(x) for x in (out / "answers.jsonl").read_text().splitlines()]
    honest = [a for a in answers if a["kind"] == "honest"]
    assert res.rows[0]["match_accuracy"] == pytest.approx(
        np.mean([contains_answer(a["answer"], a["gold"]) for a in honest])
    )
    report = (out / "report.md").read_text()
    assert f"At composed ε = {res.verdict['epsilon']:.4f}" in report
    assert "| Non-RAG baseline | yes | " in report and "| non-private RAG (top-3) | no | " in report
    assert "Why near chance" in report and "Citations become useful once" in report


def test_toy_run_coalition_found_and_low_k_window_fails(toy_run):
    out, res, _ = toy_run
    assert res.verdict["checked"]["coalition_estimate"] == 3
    assert res.extra["clusters"] == [set(quick_config("toy").colluders)]
    lk = res.lowk_verdict
    assert lk["verdict"] == "FAIL"
    assert lk["reasons"] and all(r.startswith("coalition: coalition or a common question") for r in lk["reasons"])
    # the k_max = 2 window serves a corpus of its own: the main corpus's spend is not restarted in a second history
    low = json.loads((out / "lowk" / "bundle" / "public" / "genesis.json").read_text())
    main = json.loads((out / "bundle" / "public" / "genesis.json").read_text())
    assert [t["tenant"] for t in low["tenants"]] == [f"{quick_config('toy').coalition_tenant}-lowk"]
    assert not {t["C_docs"] for t in low["tenants"]} & {t["C_docs"] for t in main["tenants"]}
    # the CLI auditor agrees on both bundles (exit codes 0 and 1)
    assert dprag_main(["audit", "verify", str(out / "bundle"), "--receipts", str(out / "receipts.jsonl")]) == 0
    assert (
        dprag_main(
            ["audit", "verify", str(out / "lowk" / "bundle"), "--receipts", str(out / "lowk" / "receipts.jsonl")]
        )
        == 1
    )


def test_toy_run_spend_stays_within_the_filter_budget(toy_run):
    out, res, _ = toy_run
    a = res.extra
    for _ten, sp in a["spend"].items():
        assert sp.max() <= a["budget_units"]
    # the probed record is charged by at most M queries, whichever accounts ask
    M = quick_config("toy").privacy.M
    assert sum(p["target_charged"] for p in a["probes"]) <= M


def test_rerun_into_the_same_directory_replaces_the_previous_run(toy_run, tmp_path):
    out = tmp_path / "again"
    args = ["--model", "toy", "--quick", "--no-progress", "--no-zk", "--out", str(out)]
    assert demo_main(args) == 0
    first = (out / "bundle" / "public" / "genesis.json").read_bytes()
    assert not (out / "auditor-zk").exists()
    assert demo_main(args) == 0
    assert (out / "bundle" / "public" / "genesis.json").read_bytes() != first  # fresh window: new seed, key


def test_tiny_llama_run_through_the_generator_adapter(tmp_path):
    """The same orchestration through rag_adapters.generator.CausalLMGenerator (random weights)."""
    cfg = quick_config("tiny")
    cfg = replace(
        cfg,
        privacy=replace(cfg.privacy, m=4, max_tokens=6),  # fewer voters: a fast test
        tenants=tuple(replace(t, zk=False) for t in cfg.tenants),
    )  # the toy run proves; no second proof
    res = run_demo(tmp_path / "tiny", cfg, progress=False, echo=lambda s: None)
    assert res.passed
    assert res.lowk_verdict["verdict"] == "FAIL"
    # the latency floor (one padded batch) through SmolLM2's adapter, CausalLMGenerator (the real-model smoke test
    # has none)
    lat = res.extra["latency"]
    assert lat["questions"] == cfg.latency_questions == 1 and lat["floor"]["median"] > 0
    assert lat["rows"][0]["rows"] == cfg.privacy.m + 1  # the voters' rows and the fallback's
    desc = decode((tmp_path / "tiny" / "bundle" / "auditor" / "embedder.json").read_bytes())["descriptor"]
    tmpl = decode(desc["prompt_template"].encode())
    assert tmpl["chat_template"] == CHATML_LAYOUT and tmpl["generator"] == "tiny-llama"


# ----------------------------------------------------------------------------------------------------------
# audit_embedder
# ----------------------------------------------------------------------------------------------------------
def _model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    (d / "1_Pooling").mkdir(parents=True)
    (d / "model.safetensors").write_bytes(bytes(range(256)) * 40)
    (d / "config.json").write_text('{"hidden_size": 4}')
    (d / "tokenizer.json").write_text('{"vocab": {}}')
    (d / "vocab.txt").write_text("[PAD]\nhello\n")
    (d / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (d / "README.md").write_text("docs")
    (d / ".gitattributes").write_text("*.bin filter=lfs")
    return d


def test_directory_sha256_is_the_protocol_digest(tmp_path):
    d = _model_dir(tmp_path)
    hashed = ["1_Pooling/config.json", "config.json", "model.safetensors", "tokenizer.json", "vocab.txt"]
    assert [rel for rel, _ in model_files(d)] == hashed
    expect = cm.files_sha256([(rel, (d / rel).read_bytes()) for rel in hashed])  # spec/protocol.md §3
    assert directory_sha256(d, chunk=7) == expect
    # by hand, for one file: u32be(len(path)) || path || u64be(len(file)) || file
    h = hashlib.sha256()
    for rel in ["tokenizer.json", "vocab.txt"]:
        data = (d / rel).read_bytes()
        h.update(len(rel).to_bytes(4, "big") + rel.encode() + len(data).to_bytes(8, "big") + data)
    assert directory_sha256(d, only=["vocab.txt", "tokenizer.json"]) == h.hexdigest()


def test_directory_sha256_sees_every_byte_and_ignores_docs(tmp_path):
    d = _model_dir(tmp_path)
    base = directory_sha256(d)
    (d / "README.md").write_text("other docs")
    (d / ".gitattributes").write_text("changed")
    assert directory_sha256(d) == base
    w = bytearray((d / "model.safetensors").read_bytes())
    w[5000] ^= 1
    (d / "model.safetensors").write_bytes(bytes(w))
    assert directory_sha256(d) != base
    with pytest.raises(InvalidParameterError, match="model_dir"):
        directory_sha256(tmp_path / "missing")


def test_descriptor_binds_weights_tokenizer_and_prompt(tmp_path):
    from dprag.audit.testing.toy import ToyGenerator

    d = _model_dir(tmp_path)
    tmpl = prompt_template_text(ToyGenerator())
    desc = embedder_descriptor(model="m", model_dir=d, dimension=4, prompt_template=tmpl, schema={"t": 3})
    assert desc.weights_sha256 == directory_sha256(d)
    assert desc.tokenizer_sha256 == directory_sha256(d, only=["tokenizer.json", "vocab.txt"])
    assert desc.embedding_scale == cm.DEFAULT_EMBEDDING_SCALE
    other = embedder_descriptor(model="m", model_dir=d, dimension=4, prompt_template=tmpl + " ", schema={"t": 3})
    assert other.commitment != desc.commitment
    parsed = decode(tmpl.encode())  # canonical JSON text
    assert parsed["system"].startswith("You are a helpful assistant") and parsed["generator_sha256"] is None
    (d / "tokenizer.json").unlink()
    (d / "vocab.txt").unlink()
    with pytest.raises(InvalidParameterError, match="tokenizer"):
        embedder_descriptor(model="m", model_dir=d, dimension=4, prompt_template=tmpl, schema={})


def test_prompt_template_names_the_generator_weights(tmp_path):
    class _Tok:
        _tok = type("T", (), {"chat_template": "{{ jinja }}"})()

    class _Gen:
        tokenizer = _Tok()
        name = "g"
        max_context_tokens = 512

    d = _model_dir(tmp_path)
    t = decode(prompt_template_text(_Gen(), generator_dir=d).encode())
    assert t["chat_template"] == "{{ jinja }}" and t["max_context_tokens"] == 512
    assert t["generator_sha256"] == directory_sha256(d)


def test_corpus_caching_embedder_uses_the_disk_cache(tmp_path):
    from dprag.rag_adapters.embedder import EmbeddingCache

    class _Emb:
        fingerprint, dim = "fake-v1", 3
        calls = 0

        def embed(self, texts):
            _Emb.calls += len(texts)
            return np.array([[len(t), 1.0, 0.5] for t in texts], dtype=np.float32)

    ticks = []
    e = CorpusCachingEmbedder(
        _Emb(), cache=EmbeddingCache(tmp_path / "c"), progress=lambda total, desc: ticks.append, chunk=2
    )
    docs = ["a", "bb", "ccc", "dddd", "eeeee"]
    first = e.embed(docs)
    assert _Emb.calls == 5 and sum(ticks) == 5 and first[:, 0].tolist() == [1, 2, 3, 4, 5]
    again = CorpusCachingEmbedder(_Emb(), cache=EmbeddingCache(tmp_path / "c")).embed(docs)
    assert _Emb.calls == 5 and np.array_equal(again, first)  # served from disk
    assert e.embed(["q"]).shape == (1, 3) and _Emb.calls == 6  # questions are never cached


def test_tau_statistics_against_a_brute_force_count():
    from dprag.audit.testing.toy import HashEmbedder

    corpus = generate_clinic_corpus("test-tau", n_conditions=2, support_min=20, support_max=21, n_distractors=5)
    emb = HashEmbedder(16)
    tau = 200
    st = tau_statistics(emb, corpus, tau=tau)
    docs = cm.quantise_embeddings(emb.embed(list(corpus.documents))).tolist()
    dev = [q for q in corpus.questions if q.split == "dev"]
    sup_above = sup_total = unrel_above = 0
    for item in dev:
        q = cm.quantise_embeddings(emb.embed([item.question]))[0].tolist()
        for i, d in enumerate(docs):
            dot = sum(a * b for a, b in zip(d, q, strict=False))  # Python integers: exact
            score = min(max(dot, 0), 1 << 20) >> 10
            if i in item.relevant_ids:
                sup_total += 1
                sup_above += score > tau
            else:
                unrel_above += score > tau
    assert st["questions"] == len(dev) and st["records"] == len(corpus.documents)
    assert st["supporting_above_tau"] == pytest.approx(sup_above / sup_total, abs=0)
    assert st["unrelated_above_tau_per_question"] == pytest.approx(unrel_above / len(dev), abs=1e-12)


def test_token_budget_accuracy_runs_the_single_query_mechanism():
    from dprag.audit.testing.toy import HashEmbedder, ToyGenerator

    corpus = generate_clinic_corpus("test-tok", n_conditions=2, support_min=20, support_max=21, n_distractors=5)
    gen = ToyGenerator(vocab_size=4096)
    acc = token_budget_accuracy(HashEmbedder(16), gen, corpus, m=4, epsilon_token=6.0, c=2, questions=2)
    assert acc == 0.0  # the toy model answers "unknown" without an "ANSWER:" line
    assert gen.calls == 2  # one decoding session per question


def test_demo_calibration_command_prints_the_calibration_as_json(capsys):
    """``dprag experiment demo-calibration``: tau_statistics and answer_vote_grid of the calibration module on
    a tiny calibration corpus with the toy models, printed as one JSON object (what the functions return)."""
    from dprag.lab.demo.calibration import CALIBRATION_SEED, answer_vote_grid, calibration_corpus, grid_json
    from dprag.lab.demo.models import load_models

    sizes = ["--conditions", "2", "--support-min", "20", "--support-max", "21", "--distractors", "5"]
    args = [
        "experiment",
        "demo-calibration",
        "--model",
        "toy",
        *sizes,
        "--tau",
        "200",
        "--m",
        "4",
        "--questions",
        "2",
        "--threshold",
        "1",
        "--threshold",
        "6",
        "--key-words",
        "2",
        "--key-words",
        "3",
    ]
    assert dprag_main(args) == 0
    out = json.loads(capsys.readouterr().out)
    corpus = calibration_corpus(n_conditions=2, support_min=20, support_max=21, n_distractors=5)
    assert out["corpus"] == {"seed": CALIBRATION_SEED, "conditions": 2, "records": len(corpus.documents)}
    models = load_models("toy", lambda total, desc: lambda n: None)
    assert out["tau_statistics"] == tau_statistics(models.embedder, corpus, tau=200)
    grid = answer_vote_grid(
        models.embedder,
        models.generator,
        corpus,
        m=4,
        epsilon=4.0,
        max_tokens=16,
        thresholds=(1.0, 6.0),
        key_words=(2, 3),
        tau=200,
        questions=2,
    )
    av = out["answer_vote_grid"]
    assert [(r["threshold"], r["key_words"]) for r in av["grid"]] == [(1.0, 2), (6.0, 2), (1.0, 3), (6.0, 3)]
    assert {"plurality": av["plurality"], "grid": av["grid"]} == grid_json(grid)
    assert (av["m"], av["epsilon"], av["tau"], av["questions"]) == (4, 4.0, 200, 2)
    # --only tau needs no grid; a bad size is refused with exit 2
    assert dprag_main([*args, "--only", "tau"]) == 0
    assert "answer_vote_grid" not in json.loads(capsys.readouterr().out)
    assert (
        dprag_main(["experiment", "demo-calibration", "--model", "toy", "--support-min", "30", "--support-max", "20"])
        == 2
    )
    assert "--support-max" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------
# --mechanism pure-dp-rag-ext: 000 Alg. 5 with its free-in-ε extensions committed in the policy
# ----------------------------------------------------------------------------------------------------------
def test_ext_mechanism_commits_the_extensions_at_the_same_epsilon():
    cfg = default_config("real")
    pols = {m: build_policy(replace(cfg, privacy=replace(cfg.privacy, mechanism=m))) for m in MECHANISMS}
    g = pols["pure-dp-rag-ext"].generation
    assert g.mechanism == "pure-dp-rag" and g.public_completion is True and g.em_prior == "non-rag"
    plain = pols["pure-dp-rag"].generation
    assert plain.public_completion is False and plain.em_prior == "uniform"
    # the extensions are free in ε: the same certified channels as plain 000 Alg. 5, and as answer-vote (ε_q = 4)
    ext, base = certified_epsilons(pols["pure-dp-rag-ext"]), certified_epsilons(pols["pure-dp-rag"])
    assert ext["epsilon"] == base["epsilon"]
    # (000 Alg. 5's ε_q is certified from its rounded-up SVT noise scales: equal to answer-vote's to 1e-9)
    assert ext["epsilon"] == pytest.approx(certified_epsilons(pols["answer-vote"])["epsilon"], rel=1e-9)
    assert ext["generation"] == base["generation"]
    # and the committed policy differs from plain 000 Alg. 5's only by the two extension keys
    d = pols["pure-dp-rag-ext"].to_dict()
    assert d["generation"].pop("public_completion") is True and d["generation"].pop("em_prior") == "non-rag"
    assert d == pols["pure-dp-rag"].to_dict()
    assert "Non-RAG base measure" in mechanism_label(replace(cfg.privacy, mechanism="pure-dp-rag-ext"))
    assert "Non-RAG base measure" not in mechanism_label(replace(cfg.privacy, mechanism="pure-dp-rag"))


def test_cli_accepts_the_ext_mechanism_and_refuses_others(tmp_path, capsys):
    assert demo_main(["--out", str(tmp_path / "x"), "--mechanism", "pure-dp-rag-extended", "--model", "toy"]) == 2
    assert "pure-dp-rag-ext" in capsys.readouterr().err


def test_toy_run_with_the_ext_mechanism_passes_and_commits_the_flags(tmp_path):
    cfg = quick_config("toy")
    cfg = replace(
        cfg,
        privacy=replace(cfg.privacy, mechanism="pure-dp-rag-ext"),
        tenants=tuple(replace(t, zk=False) for t in cfg.tenants),
    )
    res = run_demo(tmp_path / "run", cfg, progress=False, echo=lambda s: None)
    assert res.passed
    committed = json.loads((tmp_path / "run" / "bundle" / "auditor" / "policy.json").read_text())["policy"]
    assert committed["generation"]["public_completion"] is True and committed["generation"]["em_prior"] == "non-rag"
    assert "Non-RAG base measure" in (tmp_path / "run" / "report.md").read_text()


def test_toy_run_rerun_command_reproduces_its_verdict(toy_run, capsys):
    """v2's report printed a re-run command without --theta and --key: run as printed, it did not reproduce the
    verdict (another θ, and the key taken from the bundle)."""
    import re
    import shlex

    out, res, _ = toy_run
    report = (out / "report.md").read_text()
    (cmd,) = re.findall(r"Re-run the auditor \(the same verdict\): `([^`]+)`", report)
    argv = shlex.split(cmd)
    assert argv[:3] == ["dprag", "audit", "verify"] and "--key" in argv and "--theta" in argv and "--origin" in argv
    assert "key pinned" in res.verdict["headline"] and "(origin pinned)" in res.verdict["headline"]
    assert dprag_main([*argv[1:], "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    keep = lambda v: {k: x for k, x in v.items() if k != "seconds"}  # noqa: E731
    assert keep(again) == keep(res.verdict) and again["key_pinned"] is True
