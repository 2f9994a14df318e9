"""The privacy-utility defaults are the best-known settings, chosen on the seed-1 tuning corpus (issue 25 item 1)."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dprag.lab.experiments.cli import experiment, method_overrides, tuning_seed
from dprag.lab.experiments.defaults import (
    ADA_ANSWER_VOTE_M,
    MURAG_TAU,
    TUNING_CORPUS_SEED,
    coverage_choices,
)

ROOT = Path(__file__).resolve().parents[2]


def test_the_defaults_are_the_coverage_rules_choices_on_the_tuning_corpus():
    """τ and MuRAG-Ada's m are what coverage_check printed on the seed-1 corpus (results/coverage_check), not
    numbers typed in by hand; the file is the command's own output (its JSON is the last line)."""
    path = ROOT / "results" / "coverage_check" / f"seed{TUNING_CORPUS_SEED}.json"
    got = coverage_choices(path)
    assert got == {"tau": MURAG_TAU, "ada_m": ADA_ANSWER_VOTE_M}
    data = json.loads(path.read_text().splitlines()[-1])
    # the rule itself: the most questions with enough own records (ties: the higher τ / the smaller m)
    best_tau = max(data["murag"], key=lambda t: (data["murag"][t]["enough_records"], -float(t)))
    best_m = max(data["murag_ada"], key=lambda k: (data["murag_ada"][k]["mean_enough"], -int(k)))
    assert (float(best_tau), int(best_m)) == (MURAG_TAU, ADA_ANSWER_VOTE_M)


def test_each_method_takes_its_own_best_known_settings_unless_a_flag_sets_them():
    mv = method_overrides("murag-answer-vote", "dense", m_given=False, taus_given=False, bins_given=False)
    assert mv["m"] == 30 and mv["m_grid"] == (30,) and mv["taus"] == (52.5,) and "edges" not in mv
    ada = method_overrides("murag-ada-answer-vote", "dense", m_given=False, taus_given=False, bins_given=False)
    assert ada["m"] == 10 and ada["edges"][0] == 90.0 and ada["edges"][-1] == 20.0 and len(ada["edges"]) == 71
    assert ada["answer_tokens"] == (24,) and "answer_tokens" not in mv  # MuRAG keeps the run-wide 16
    assert method_overrides("naive-multi-rag", "dense", m_given=False, taus_given=False, bins_given=False)["m"] == 10
    flagged = method_overrides(
        "murag-ada-answer-vote", "dense", m_given=True, taus_given=True, bins_given=True, tokens_given=True
    )
    assert flagged == {}  # the run-wide flags then apply to every method
    assert "taus" not in method_overrides("murag", "words", m_given=False, taus_given=False, bins_given=False)


def test_the_tuning_corpus_defaults_to_a_disjoint_one():
    assert tuning_seed("clinic", 0, None) == TUNING_CORPUS_SEED
    assert tuning_seed("clinic", TUNING_CORPUS_SEED, None) != TUNING_CORPUS_SEED  # never the test corpus
    assert tuning_seed("wiki-fanout", 0, None) is None  # one corpus: its dev split, labelled uncharged
    assert tuning_seed("clinic", 0, "test") is None and tuning_seed("clinic", 0, "7") == 7


@pytest.mark.integration
def test_a_run_with_no_flags_uses_the_defaults_and_records_them(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(
        experiment,
        [
            "privacy-utility",
            "--dataset",
            "clinic",
            "--model",
            "toy",
            "--methods",
            "murag-answer-vote,murag-ada-answer-vote,non-private-rag,non-rag",
            "--eps",
            "10",
            "--queries",
            "2",
            "--seed",
            "11",
            "--out",
            str(out),
            "--json",
            "--no-progress",
        ],
    )
    assert r.exit_code == 0, r.output
    rows = {x["method"]: x for x in map(json.loads, (x for x in r.output.splitlines() if x.startswith("{")))}
    assert rows["murag-answer-vote"]["m"] == 30 and rows["murag-ada-answer-vote"]["m"] == 10
    assert rows["murag-answer-vote"]["derived"]["abstain_empty"] is True
    assert rows["non-private-rag"]["hp"] == {"k": 3}
    run = json.loads((out / "run.json").read_text())
    assert run["answer_selection"] == "seen" and run["public_completion"] is True and run["em_prior"] == "non-rag"
    assert run["per_method"]["murag-ada-answer-vote"]["m"] == 10 and run["tuning_corpus_seed"] == TUNING_CORPUS_SEED
    assert run["normalizer"] == "answer-keys-v2" and run["per_method"]["murag-ada-answer-vote"]["answer_tokens"] == [24]
    assert rows["murag-ada-answer-vote"]["derived"]["answer_tokens"] == 24
    assert rows["murag-answer-vote"]["derived"]["answer_tokens"] == 16
    assert rows["murag-answer-vote"]["derived"]["normalizer"] == "answer-keys-v2"
    again = CliRunner().invoke(
        experiment,
        [
            "privacy-utility",
            "--dataset",
            "clinic",
            "--model",
            "toy",
            "--methods",
            "murag-answer-vote,murag-ada-answer-vote",
            "--queries",
            "1",
            "--m",
            "6",
            "--answer-tokens",
            "12",
            "--normalizer",
            "answer-keys-v1",
            "--out",
            str(tmp_path / "m6"),
            "--json",
            "--no-progress",
        ],
    )
    assert again.exit_code == 0, again.output
    flagged_rows = [json.loads(x) for x in again.output.splitlines() if x.startswith("{")]
    assert {x["m"] for x in flagged_rows} == {6}
    assert {(x["derived"]["answer_tokens"], x["derived"]["normalizer"]) for x in flagged_rows} == {
        (12, "answer-keys-v1")
    }


def test_the_default_normaliser_is_the_choice_of_normalizer_check_on_the_tuning_corpus():
    """The default ``--normalizer`` is what ``dprag experiment normalizer-check`` chooses on the stored seed-1 run
    (results/normalizer_check/run: the voters' answers of 100 questions of the tuning corpus), recomputed here from
    those answers (no model), and results/normalizer_check/seed1.json is that command's output."""
    from dprag.lab.experiments.defaults import RUN_WIDE
    from dprag.lab.experiments.normalizer_check import check_run

    run_dir = ROOT / "results" / "normalizer_check" / "run"
    assert json.loads((run_dir / "run.json").read_text())["corpus_seed"] == TUNING_CORPUS_SEED
    got = check_run(run_dir)
    assert got["chosen"] == RUN_WIDE["--normalizer"]
    stored = json.loads((ROOT / "results" / "normalizer_check" / "seed1.json").read_text())
    assert {k: v for k, v in stored.items() if k != "run"} == {k: v for k, v in got.items() if k != "run"}
