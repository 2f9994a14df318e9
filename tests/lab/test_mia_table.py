"""``dprag experiment mia-table``: finished runs give their rows as written, stopped runs partial rows recomputed
from ``scores.jsonl`` (checked against a brute-force Mann–Whitney count), bad directories exit 2."""

from __future__ import annotations

import json
import shutil

import pytest

from dprag.audit.cli import main
from dprag.lab.experiments import mia_table


def _score(member, score, method="murag", attack="s2mia", eps=10.0):
    return {"attack": attack, "method": method, "eps_total": eps, "member": member, "score": score, "seconds": 2.0}


def _brute_auc(pos, neg):
    return sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg) / (len(pos) * len(neg))


def test_partial_rows_by_hand():
    recs = [_score(True, s) for s in (0.9, 0.8, 0.1)] + [_score(False, s) for s in (0.2, 0.1, 0.0)]
    (row,) = mia_table.partial_rows(recs)
    # 9 pairs: 0.9 and 0.8 beat all three (6), 0.1 ties 0.1 (0.5) and beats 0.0 (1): 7.5 / 9
    assert row["auc"] == pytest.approx(7.5 / 9)
    assert row["tpr_at_1pct_fpr"] == pytest.approx(2 / 3)  # no false positive above 0.2: 0.9, 0.8
    assert (row["members"], row["nonmembers"], row["partial"]) == (3, 3, True)
    assert row["seconds_per_record"] == pytest.approx(2.0)
    assert row["auc_ci_lo"] <= row["auc"] <= row["auc_ci_hi"]


@pytest.mark.integration
def test_finished_and_stopped_runs(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "experiment",
                "mia",
                "--model",
                "toy",
                "--members",
                "8",
                "--n-conditions",
                "2",
                "--n-distractors",
                "30",
                "--methods",
                "non-private-rag,murag",
                "--out",
                str(out),
                "--no-progress",
                "--json",
            ]
        )
        == 0
    )
    written = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert main(["experiment", "mia-table", str(out), "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [{k: v for k, v in r.items() if k != "run"} for r in rows] == written
    assert main(["experiment", "mia-table", str(out)]) == 0
    table = capsys.readouterr().out
    assert table.count("\n") == 2 + len(written) and f"{written[0]['auc']:.3f}" in table and "8 + 8 |" in table

    stopped = tmp_path / "stopped"
    shutil.copytree(out, stopped)
    (stopped / "mia.jsonl").unlink()
    scores = [json.loads(x) for x in (stopped / "scores.jsonl").read_text().splitlines()]
    assert main(["experiment", "mia-table", str(stopped), "--json"]) == 0
    part = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(part) == len(written) and all(r["partial"] for r in part)
    for r in part:
        mine = [s for s in scores if s["method"] == r["method"]]
        pos = [s["score"] for s in mine if s["member"]]
        neg = [s["score"] for s in mine if not s["member"]]
        assert r["auc"] == pytest.approx(_brute_auc(pos, neg))
        assert r["auc"] == pytest.approx(next(w["auc"] for w in written if w["method"] == r["method"]))


@pytest.mark.parametrize("setup", ["missing", "empty", "file"])
def test_bad_run_dir_one_line_exit_2(tmp_path, capsys, setup):
    d = tmp_path / "d"
    if setup == "empty":
        d.mkdir()
    elif setup == "file":
        d.write_text("not a run")
    rc = main(["experiment", "mia-table", str(d)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and ("run_dir" in err[0] or "RUN_DIRS" in err[0])


@pytest.mark.integration
def test_stopped_run_exposures_replay_the_runs_own_counter(tmp_path, capsys, monkeypatch):
    """With run.json (written at the start) a stopped run's partial rows get the exposure figures by replaying the
    canary counter over the stored answers and retrieved ids. Over a whole run's scores they must equal the
    figures the run's own counter wrote; a generator that copies 6-digit numbers from its documents makes the
    exposure non-zero, so the equality is not 0 = 0."""
    from test_coalition_probe import SecretCopy

    from dprag.lab.experiments import mia as mia_mod

    real_backend = mia_mod.build_backend
    monkeypatch.setattr(
        mia_mod,
        "build_backend",
        lambda model, corpus, world: (real_backend(model, corpus, world)[0], SecretCopy(vocab_size=1 << 16)),
    )
    out = tmp_path / "run"
    assert (
        main(
            [
                "experiment",
                "mia",
                "--model",
                "toy",
                "--members",
                "8",
                "--n-conditions",
                "2",
                "--n-distractors",
                "30",
                "--methods",
                "non-private-rag,murag",
                "--eps",
                "30",
                "--out",
                str(out),
                "--no-progress",
                "--json",
            ]
        )
        == 0
    )
    written = {r["method"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert written["non-private-rag"]["exposed_members"] > 0
    (out / "mia.jsonl").unlink()
    part = {r["method"]: r for r in mia_table.load_run(out)}
    for method, w in written.items():
        for f in ("exposed_members", "exposed_nonmembers", "cited_members", "cited_nonmembers"):
            assert part[method][f] == pytest.approx(w[f]), (method, f)


@pytest.mark.integration
def test_run_json_whose_targets_disagree_with_its_seed_is_refused(tmp_path, capsys):
    """A run.json edited to name other targets (or copied beside another run's scores) would make the replayed
    exposures count the wrong records: mia-table refuses it, one line on stderr, exit 2."""
    out = tmp_path / "run"
    assert (
        main(
            [
                "experiment",
                "mia",
                "--model",
                "toy",
                "--members",
                "4",
                "--n-conditions",
                "2",
                "--n-distractors",
                "30",
                "--methods",
                "non-private-rag",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    (out / "mia.jsonl").unlink()
    run = json.loads((out / "run.json").read_text())
    run["member_keys"] = run["member_keys"][1:] + run["member_keys"][:1]
    (out / "run.json").write_text(json.dumps(run))
    capsys.readouterr()
    rc = main(["experiment", "mia-table", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "member_keys" in err[0]
