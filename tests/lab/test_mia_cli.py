"""``dprag experiment mia``: a tiny toy-model run (files, schemas, run.json) and the bad-input path (one stderr
line, exit 2)."""

from __future__ import annotations

import csv
import json

import pytest

from dprag.audit.cli import main


@pytest.mark.integration
def test_mia_toy_run_writes_rows_with_schema(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(
        [
            "experiment",
            "mia",
            "--model",
            "toy",
            "--members",
            "6",
            "--n-conditions",
            "2",
            "--n-distractors",
            "30",
            "--attacks",
            "s2mia,interrogation",
            "--questions",
            "2",
            "--methods",
            "non-rag,non-private-rag,murag",
            "--eps",
            "1,10",
            "--out",
            str(out),
            "--no-progress",
            "--json",
        ]
    )
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
    assert run["seed"] == "0" and run["versions"]["numpy"] and run["members"] == 6 and run["status"] == "finished"
    assert not set(run["member_keys"]) & set(run["nonmember_keys"])
    assert (out / "mia_roc.png").stat().st_size > 1000 and (out / "questions.jsonl").exists()


@pytest.mark.integration
def test_mia_batch_gives_the_same_scores_and_streams_them(tmp_path, capsys):
    """--batch only groups targets: Non-Private-RAG decodes a group in one generation batch, the private
    pipelines still answer one query at a time in the same order, so every target's answers and score are
    those of --batch 1; scores.jsonl gets every target's line as soon as it is scored."""
    runs = {}
    for b in ("1", "5"):
        out = tmp_path / f"b{b}"
        rc = main(
            [
                "experiment",
                "mia",
                "--model",
                "toy",
                "--members",
                "6",
                "--n-conditions",
                "2",
                "--n-distractors",
                "30",
                "--attacks",
                "s2mia,interrogation",
                "--questions",
                "2",
                "--methods",
                "non-private-rag,murag",
                "--eps",
                "10",
                "--batch",
                b,
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        assert rc == 0
        runs[b] = [json.loads(x) for x in (out / "scores.jsonl").read_text().splitlines()]
        assert json.loads((out / "run.json").read_text())["batch"] == int(b)
    capsys.readouterr()
    strip = [[{k: v for k, v in r.items() if k != "seconds"} for r in runs[b]] for b in ("1", "5")]
    assert len(strip[0]) == 2 * 2 * 12 and strip[0] == strip[1]
    assert any(r["answers"] != [""] for r in strip[0] if r["method"] == "non-private-rag")


def test_mia_scores_are_written_before_the_cell_ends(tmp_path):
    """A run stopped mid-cell keeps the targets already scored (``on_score`` is called per target)."""
    from dprag.lab.experiments import mia as mia_mod

    seen = []
    calls = {"n": 0}

    class Stop(Exception):
        """Raised by the callback to stop the cell mid-way, as an interrupted run would."""

    def on_score(rec):
        seen.append(rec["key"])
        calls["n"] += 1
        if calls["n"] == 3:
            raise Stop

    from dprag.audit.testing.toy import ToyGenerator, ToyRetriever
    from dprag.lab.experiments.methods import Settings
    from dprag.rag_adapters.datasets.clinic import generate_clinic_corpus

    corpus = generate_clinic_corpus(0, n_conditions=2, n_distractors=30)
    mem, non = mia_mod.choose_targets(len(corpus.documents), 4, 4, b"0")
    world = mia_mod.build_world(corpus, mem, non)
    with pytest.raises(Stop):
        mia_mod.run_cell(
            "s2mia",
            "non-private-rag",
            None,
            retriever=ToyRetriever(world.documents),
            generator=ToyGenerator(vocab_size=1 << 16),
            settings=Settings(m=4, max_tokens=8),
            world=world,
            questions=None,
            seed=b"0",
            batch=8,
            on_score=on_score,
        )
    assert len(seen) == 3 == len(set(seen))


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--members", "0"], "--members"),
        (["--methods", "murag,bogus"], "--methods"),
        (["--attacks", "s3mia"], "--attacks"),
        (["--eps", "0"], "--eps"),
        (["--questions", "6"], "--questions"),
        (["--prefix-fraction", "1"], "--prefix-fraction"),
        (["--batch", "0"], "--batch"),
        (["--members", "5000"], "members"),  # more targets than records: InvalidParameterError from the library
    ],
)
def test_mia_bad_input_one_line_exit_2(tmp_path, capsys, args, needle):
    rc = main(
        [
            "experiment",
            "mia",
            "--model",
            "toy",
            "--n-conditions",
            "2",
            "--n-distractors",
            "30",
            "--out",
            str(tmp_path / "x"),
            "--no-progress",
            *args,
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle in err[0] and err[0].startswith("error:")


@pytest.mark.integration
def test_a_stopped_run_keeps_its_record_of_parameters(tmp_path, monkeypatch):
    """run.json is written before the first query (status "running"): a run stopped mid-way still has its
    parameters, seed, targets and versions beside the scores it kept; a stale record of an earlier run in the
    same directory is replaced, not left to describe these scores."""
    from dprag.lab.experiments import mia as mia_mod

    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text('{"status": "finished", "seed": "stale"}')

    class Stopped(Exception):
        """What an interrupted run raises."""

    def stop(*args, **kwargs):
        raise Stopped

    monkeypatch.setattr(mia_mod, "run_cell", stop)
    with pytest.raises(Stopped):
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
                "--seed",
                "kept",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "running" and run["seed"] == "kept" and run["members"] == 4
    assert len(run["member_keys"]) == 4 and run["versions"]["numpy"] and "cell_seconds" not in run
