"""``dprag experiment mia``: a tiny toy-model run (files, schemas, run.json) and the bad-input path (one stderr
line, exit 2)."""

from __future__ import annotations

import csv
import json

import pytest

from dprag.audit.cli import main


def test_mia_toy_run_writes_rows_with_schema(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["experiment", "mia", "--model", "toy", "--members", "6", "--n-conditions", "2", "--n-distractors",
               "30", "--attacks", "s2mia,interrogation", "--questions", "2", "--methods",
               "non-rag,non-private-rag,murag", "--eps", "1,10", "--out", str(out), "--no-progress", "--json"])
    assert rc == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2 * (1 + 1 + 2)
    assert all(r["schema"] == "dprag.mia-row/1" for r in rows)
    for r in rows:
        assert r["error"] is None and 0.0 <= r["auc"] <= 1.0 and r["auc_ci_lo"] <= r["auc"] <= r["auc_ci_hi"]
        assert r["members"] == r["nonmembers"] == 6
        if r["method"] == "murag":
            assert r["eps_certified"] <= r["eps_total"] + 1e-9 and r["auc_bound"] < 1.0
    scores = [json.loads(x) for x in (out / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == len(rows) * 12 and {s["schema"] for s in scores} == {"dprag.mia-score/1"}
    with (out / "mia.csv").open() as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    run = json.loads((out / "run.json").read_text())
    assert run["seed"] == "0" and run["versions"]["numpy"] and run["members"] == 6
    assert not set(run["member_keys"]) & set(run["nonmember_keys"])
    assert (out / "mia_roc.png").stat().st_size > 1000 and (out / "questions.jsonl").exists()


@pytest.mark.parametrize("args,needle", [
    (["--members", "0"], "--members"),
    (["--methods", "murag,bogus"], "--methods"),
    (["--attacks", "s3mia"], "--attacks"),
    (["--eps", "0"], "--eps"),
    (["--questions", "6"], "--questions"),
    (["--prefix-fraction", "1"], "--prefix-fraction"),
    (["--members", "5000"], "members"),  # more targets than records: InvalidParameterError from the library
])
def test_mia_bad_input_one_line_exit_2(tmp_path, capsys, args, needle):
    rc = main(["experiment", "mia", "--model", "toy", "--n-conditions", "2", "--n-distractors", "30",
               "--out", str(tmp_path / "x"), "--no-progress", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle in err[0] and err[0].startswith("error:")
