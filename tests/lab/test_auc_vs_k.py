"""``dprag experiment auc-vs-k`` end to end at tiny size (lab/experiments/auc_vs_k.py): output files,
the JSON row schema, the gates against an independent fit, and bad input (one stderr line, exit 2)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dprag.audit.cli import main
from dprag.lab.experiments.auc_vs_k import SCHEMA
from dprag.lab.experiments.auc_vs_k_report import gates

REQUIRED = {"schema", "k", "eps_acc", "auc", "stderr", "predicted", "upper_bound"}


def _run(capsys, tmp_path, *args):
    rc = main(["experiment", "auc-vs-k", *args, "--out", str(tmp_path), "--json", "--no-progress", "--workers", "1"])
    cap = capsys.readouterr()
    return rc, [json.loads(x) for x in cap.out.splitlines() if x.strip()], cap.err


@pytest.mark.integration
def test_scalar_json_rows_files_and_gates(tmp_path, capsys):
    rc, rows, err = _run(
        capsys,
        tmp_path,
        "--mechanism",
        "scalar",
        "--k",
        "1,2,4",
        "--eps-acc",
        "4",
        "--trials",
        "60",
        "--n",
        "20",
        "--rho",
        "0.5",
        "--seed",
        "7",
    )
    assert rc == 0, err
    assert len(rows) == 3 and all(REQUIRED <= set(r) and r["schema"] == SCHEMA for r in rows)
    for r in rows:
        assert 0 <= r["auc"] <= 1 and r["stderr"] > 0
        assert r["predicted"] <= r["upper_bound"] <= 1
        assert r["alternatives"]["bayes-lr"]["auc"] == r["auc"]  # monotone statistic: identical AUC
        assert r["within_2se"] == (abs(r["auc"] - r["predicted"]) <= 2 * r["stderr"])
    assert "P1 " in err and "P3 tightness" in err and "within 1 SE" in err
    for f in ("auc_vs_k.csv", "auc_vs_k.jsonl", "auc_vs_k.png", "gates.json", "run.json"):
        assert (tmp_path / f).stat().st_size > 0
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["seed"] == "7" and run["versions"]["numpy"] and run["config"]["trials"] == 60


def test_p1_slope_matches_an_independent_weighted_fit():
    rng = np.random.default_rng(0)
    rows = [
        {
            "mechanism": "topk",
            "regime": "x",
            "statistic": "hits",
            "eps_acc": 1.0,
            "k": k,
            "auc": 0.5 + 0.02 * math.sqrt(k) + rng.normal(0, 0.003),
            "stderr": 0.002 + 0.001 * i,
        }
        for i, k in enumerate((1, 2, 5, 10, 20))
    ]
    p1 = gates(rows)["P1"][0]
    x = np.sqrt([r["k"] for r in rows])
    y = [r["auc"] for r in rows]
    b, a = np.polyfit(x, y, 1, w=[1 / r["stderr"] for r in rows])  # polyfit weights are 1/σ
    assert p1["slope"] == pytest.approx(b, rel=1e-9)
    assert p1["pass"] is True
    flat = [dict(r, auc=0.5) for r in rows]
    assert gates(flat)["P1"][0]["pass"] is False


@pytest.mark.integration
def test_topk_json_rows(tmp_path, capsys):
    rc, rows, err = _run(
        capsys,
        tmp_path,
        "--mechanism",
        "topk",
        "--k",
        "1,2",
        "--eps-acc",
        "4",
        "--trials",
        "20",
        "--n",
        "5",
        "--regimes",
        "same-tenant",
    )
    assert rc == 0, err
    assert len(rows) == 2 and all(REQUIRED <= set(r) and r["schema"] == SCHEMA for r in rows)
    assert all(r["predicted"] is None and r["regime"] == "same-tenant" and 0.5 <= r["upper_bound"] <= 1 for r in rows)


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--mechanism", "scalar", "--k", "0"], "--k"),
        (["--mechanism", "scalar", "--k", "a,b"], "--k"),
        (["--mechanism", "scalar", "--eps-acc", "-1"], "--eps-acc"),
        (["--mechanism", "scalar", "--trials", "1"], "--trials"),
        (["--mechanism", "scalar", "--delta-acc", "2"], "--delta-acc"),
        (["--mechanism", "scalar", "--gap", "3"], "--gap"),
        (["--mechanism", "topk", "--regimes", "cross"], "--regimes"),
        (["--mechanism", "bogus"], "--mechanism"),
        (["--mechanism", "hnsw", "--wiki-size", "5"], "--wiki-size"),
    ],
)
def test_bad_input_one_line_exit_2(tmp_path, capsys, args, flag):
    rc = main(["experiment", "auc-vs-k", *args, "--out", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and flag in err, err


@pytest.mark.integration
def test_hnsw_synthetic_tiny(tmp_path, capsys):
    pytest.importorskip("faiss")
    rc, rows, err = _run(
        capsys,
        tmp_path,
        "--mechanism",
        "hnsw",
        "--datasets",
        "synthetic",
        "--synthetic-size",
        "1000",
        "--k",
        "1,4",
        "--eps-acc",
        "16",
        "--trials",
        "10",
        "--n",
        "10",
        "--candidates",
        "32",
    )
    assert rc == 0, err
    assert {r["statistic"] for r in rows} == {"hits", "pooled-noisy-score"}
    assert all(
        r["schema"] == SCHEMA
        and r["predicted"] is None
        and r["upper_bound"] is None
        and "approximate" in r["predicted_note"]
        for r in rows
    )
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["setup"]["synthetic"]["in_slot"] >= 0  # the planted target is among its own candidates
