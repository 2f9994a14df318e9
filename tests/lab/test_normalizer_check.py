"""dprag experiment normalizer-check: exact expected releases per public normaliser on a run's stored voter answers
(lab/experiments/normalizer_check.py; spec/answer-keys.md §2). The expected values here are computed by hand with
mpmath from the selection's law P(s) ∝ e^{εh(s)/2}, P(⊥) ∝ e^{εT/2}, T = 1 + 2 ln(1/δ)/ε (spec/accounting/rag.md
§5.2), not by the module's own code."""

import json

import mpmath
import pytest
from click.testing import CliRunner

from dprag.lab.experiments.cli import experiment
from dprag.lab.experiments.normalizer_check import check_run
from dprag.rag_adapters.datasets import generate_clinic_corpus

EPS, DELTA = 9.0, 1e-5


def _release_prob(h: int, others: list[int]) -> float:
    t = 1 + 2 * mpmath.log(1 / mpmath.mpf(DELTA)) / EPS
    w = lambda x: mpmath.e ** (mpmath.mpf(EPS) * x / 2)  # noqa: E731
    return float(w(h) / (w(t) + w(h) + sum(w(o) for o in others)))


def _run(tmp_path, rows, normalizer=None):
    d = tmp_path / "run"
    d.mkdir()
    run = {"dataset": "clinic(seed=0)", "corpus_seed": 0}
    if normalizer:
        run["normalizer"] = normalizer
    (d / "run.json").write_text(json.dumps(run))
    (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cell = {
        "method": "murag-ada-answer-vote",
        "derived": {"selection": "seen", "key_words": 2, "epsilon_selection": EPS, "delta_q": DELTA},
    }
    (d / "privacy_utility.jsonl").write_text(json.dumps(cell) + "\n")
    return d


def _row(q, answers, *, abstained=None, key_votes=None, used=None):
    """One stored answer-vote question of a run (predictions.jsonl); without ``abstained`` a run made before
    ``voter_abstained`` was kept."""
    row = {
        "method": "murag-ada-answer-vote",
        "qid": q.qid,
        "question": q.question,
        "voter_answers": answers,
        "key_votes": key_votes or {},
        "used": len(answers) - sum(abstained or []) if used is None else used,
    }
    if abstained is not None:
        row["voter_abstained"] = abstained
    return row


@pytest.fixture(scope="module")
def drug_question():
    qs = [q for q in generate_clinic_corpus(0).questions if q.qid.split("-")[1] == "drug"]
    return qs[0]


def test_expected_releases_per_normaliser_match_the_law(tmp_path, drug_question):
    q, gold = drug_question, drug_question.answers[0]
    lost_by_v1 = f"The clinic prescribes {gold}, a medication that is used to"  # v1: "" (the cue of clause 2)
    plain = f"{gold}."  # both: the name
    answers = [lost_by_v1] * 3 + [plain] * 2 + ["The answer is: 123456."] * 2 + ["Unknown."] * 3
    row = _row(q, answers, abstained=[False] * 7 + [True] * 3)
    got = check_run(_run(tmp_path, [row]))
    cell = got["cells"]["murag-ada-answer-vote"]
    # v1: the name has 2 votes, "123456" 2; v2: the name 5, "123456" 2 (the abstainers' "unknown" never counts)
    assert cell["answer-keys-v1"]["expected_correct"] == pytest.approx(_release_prob(2, [2]), rel=1e-4)
    assert cell["answer-keys-v2"]["expected_correct"] == pytest.approx(_release_prob(5, [2]), rel=1e-4)
    assert cell["answer-keys-v2"]["plurality_correct"] == 1 and got["chosen"] == "answer-keys-v2"


def test_abstainers_reconstructed_from_an_older_run_and_refused_when_they_disagree(tmp_path, drug_question):
    q, gold = drug_question, drug_question.answers[0]
    answers = [f"{gold}."] * 4 + ["I do not know."] * 6
    # one "I do not know." voter read a document: it voted
    row = _row(q, answers, key_votes={gold.lower(): 4, "do not": 1}, used=5)
    cell = check_run(_run(tmp_path, [row]))["cells"]["murag-ada-answer-vote"]
    assert cell["answer-keys-v1"]["expected_correct"] == pytest.approx(_release_prob(4, [1]), rel=1e-4)
    bad = dict(row, key_votes={gold.lower(): 3})  # the stored counts cannot come from these answers
    (tmp_path / "b").mkdir()
    r = CliRunner().invoke(experiment, ["normalizer-check", str(_run(tmp_path / "b", [bad]))])
    assert r.exit_code == 2 and "abstaining voters cannot be told" in r.output


class _Words:
    """A stand-in tokenizer: one token per space-separated word (the truncation rule, not SmolLM2's vocabulary)."""

    def encode(self, text, add_special_tokens=False):
        return text.split(" ")

    def decode(self, ids):
        return " ".join(ids)


def test_prefix_tokens_score_the_shorter_answers_on_the_same_retrieval(tmp_path, drug_question):
    q, gold = drug_question, drug_question.answers[0]
    # the name comes 4th: a 3-token prefix loses it, a 4-token prefix keeps it
    answers = [f"The drug is {gold} daily."] * 6 + ["Unknown."] * 4
    row = _row(q, answers, abstained=[False] * 6 + [True] * 4)
    d = _run(tmp_path, [row])
    three = check_run(d, prefix_tokens=3, tokenizer=_Words())["cells"]["murag-ada-answer-vote"]
    four = check_run(d, prefix_tokens=4, tokenizer=_Words())["cells"]["murag-ada-answer-vote"]
    assert three["answer-keys-v2"]["expected_correct"] == pytest.approx(_release_prob(6, []), rel=1e-4)
    assert three["answer-keys-v2 @ 3 tokens"]["expected_correct"] == 0.0
    assert four["answer-keys-v2 @ 4 tokens"]["expected_correct"] == pytest.approx(_release_prob(6, []), rel=1e-4)
