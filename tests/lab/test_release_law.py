"""The exact law of answer-level voting's release given the voters' answers (lab/release_law.py) and the demo's
expectation built on it (lab/demo/analysis.py ``expected_releases``).

Every expected value here is computed independently: the selection's law with mpmath at 50 digits from spec/accounting/
rag.md §5.2 and the mechanism's documented float margins (ε_run = ε·(1 − 2^-20), ⊥ at ε_run/2 + ln(1/δ) + 2^-30), the
count's law by enumerating every outcome of the questions' releases with exact fractions, and the interval by scanning
those exact tails. No test reads a value from the code under test."""

from __future__ import annotations

import itertools
from dataclasses import replace
from fractions import Fraction

import mpmath
import pytest

from dprag.accounting.protocols import Prompt
from dprag.lab.demo.analysis import Served, expected_releases
from dprag.lab.demo.config import DemoPrivacy, build_policy, quick_config
from dprag.lab.demo.latency import Batch
from dprag.lab.demo.traffic import Request
from dprag.lab.release_law import central_interval, correct_chance, count_law, voted_keys
from dprag.rag_adapters.answer_keys import answer_key, answer_key_v2
from dprag.rag_adapters.datasets.base import QAItem

mpmath.mp.dps = 50


def _law(hist: dict[str, int], eps: float, delta: float) -> dict[str | None, mpmath.mpf]:
    """P(s) ∝ e^{ε_run·h(s)/2} over the seen keys, P(⊥) ∝ e^{ε_run/2 + ln(1/δ) + 2^-30} (rag.md §5.2)."""
    run = mpmath.mpf(eps) * (1 - mpmath.mpf(2) ** -20)
    w = {k: mpmath.exp(run * h / 2) for k, h in hist.items()}
    w[None] = mpmath.exp(run / 2 + mpmath.log(1 / mpmath.mpf(delta)) + mpmath.mpf(2) ** -30)
    z = mpmath.fsum(w.values())
    return {k: v / z for k, v in w.items()}


@pytest.mark.parametrize(
    "hist, gold, fallback_ok",
    [
        ({"zorvex": 9, "25 mg": 3}, ["Zorvex"], False),  # the right key leads
        ({"zorvex": 6, "bripan": 7}, ["Zorvex"], False),  # below T = 7.9 votes at ε = 4, δ = 1e-6: ⊥ dominates
        ({"zorvex": 6, "bripan": 7}, ["Zorvex"], True),  # ... and ⊥'s fallback text is correct
        ({"bripan": 12}, ["Zorvex"], False),  # only a wrong key
        ({}, ["Zorvex"], True),  # no key at all: ⊥ surely, the fallback correct
    ],
)
def test_correct_chance_is_the_selection_law_by_mpmath(hist, gold, fallback_ok):
    eps, delta = 4.0, 1e-6
    law = _law(hist, eps, delta)
    want = mpmath.fsum(p for k, p in law.items() if k == "zorvex" and gold == ["Zorvex"])
    want += law[None] if fallback_ok else 0
    voted = [k for k, h in hist.items() for _ in range(h)]
    got = correct_chance(voted, gold, eps, delta, fallback_correct=fallback_ok)
    assert got == pytest.approx(float(want), rel=1e-12, abs=1e-300)


def test_voted_keys_drop_abstainers_failures_and_empty_keys():
    q = "What medication does the clinic prescribe for gout?"
    answers = ["The clinic prescribes Quoustrimab, a medication that is used to", None, "Zorvex.", "Zorvex.", "the"]
    gone = [False, False, True, False, False]
    # v2 keeps the first clause's drug; the failed voter (None), the abstainer and the all-stop-word key do not vote
    assert voted_keys(answers, gone, q, answer_key_v2, 2) == ["quoustrimab", "zorvex"]
    # v1 takes the span after " is " ("used to": stop words): that voter's key is empty, so it does not vote
    assert voted_keys(answers, gone, q, answer_key, 2) == ["zorvex"]
    with pytest.raises(ValueError):
        voted_keys(answers, gone[:-1], q, answer_key_v2, 2)  # one flag per voter


def _enumerated(chances: list[Fraction]) -> list[Fraction]:
    law = [Fraction(0)] * (len(chances) + 1)
    for outcome in itertools.product((0, 1), repeat=len(chances)):
        p = Fraction(1)
        for hit, c in zip(outcome, chances, strict=True):
            p *= c if hit else 1 - c
        law[sum(outcome)] += p
    return law


@pytest.mark.parametrize(
    "chances",
    [
        [Fraction(1, 2)] * 6,
        [Fraction(1, 10), Fraction(9, 10), Fraction(1, 3), Fraction(0), Fraction(1), Fraction(2, 7), Fraction(5, 8)],
        [Fraction(1, 1000), Fraction(999, 1000), Fraction(1, 40), Fraction(1, 40), Fraction(39, 40)],
    ],
)
def test_count_law_and_interval_against_exact_enumeration(chances):
    exact = _enumerated(chances)
    got = count_law([float(c) for c in chances])
    assert [float(x) for x in exact] == pytest.approx(list(got), abs=1e-14)
    assert sum(exact) == 1
    # the interval by scanning the exact tails: lo the largest with P(X < lo) <= 2.5 %, hi the smallest with P(X > hi)
    # <= 2.5 %
    a = Fraction(1, 40)
    lo = max(k for k in range(len(exact)) if sum(exact[:k]) <= a)
    hi = min(k for k in range(len(exact)) if sum(exact[k + 1 :]) <= a)
    assert central_interval([float(c) for c in chances], 0.05) == (lo, hi)


def test_interval_of_certain_outcomes_and_bad_chances():
    assert central_interval([1.0] * 5 + [0.0] * 3) == (5, 5)
    assert central_interval([]) == (0, 0)
    with pytest.raises(ValueError):
        count_law([0.5, 1.5])


def _served(question: str, gold: str, answer: str) -> Served:
    item = QAItem(qid="q", question=question, answers=(gold,), relevant_ids=(), split="test", group="g")
    return Served(Request("alice", "clinic-a", question, "honest", item), "w", 1, answer, None, 1.0)


def test_demo_expectation_from_the_recorded_batch_by_mpmath():
    """The demo's expectation: the voters are the batch's rows but the last (the fallback), the padded voters abstain,
    keys are the committed normaliser's; two questions, checked against the law by hand."""
    policy = build_policy(quick_config("toy"))
    p = DemoPrivacy()
    assert policy.generation.normalizer == p.normalizer == "answer-keys-v2"
    q1, q2 = "What medication does the clinic prescribe for gout?", "What dose of Zorvex is given for gout?"
    doc, pad = ("a record",), ("",)
    # question 1: 9 voters write "Zorvex", 3 "Bripan", 4 padded voters answer "Zorvex" too but abstain
    v1 = [Prompt(q1, doc)] * 12 + [Prompt(q1, pad)] * 4
    a1 = ["Zorvex."] * 9 + ["Bripan."] * 3 + ["Zorvex."] * 4
    # question 2: 5 voters "25 mg", 2 "50 mg": below T, so ⊥ is likely, and the fallback text is correct
    v2 = [Prompt(q2, doc)] * 7
    a2 = ["25 mg."] * 5 + ["50 mg."] * 2
    items = [
        (_served(q1, "Zorvex", "zorvex"), Batch([*v1, Prompt(q1)], 16, [*a1, "I do not know."], 1.0, 1.0, 1)),
        (
            _served(q2, "25 mg", "The dose is 25 mg."),
            Batch([*v2, Prompt(q2)], 16, [*a2, "The dose is 25 mg."], 1, 1, 1),
        ),
    ]
    ex = expected_releases(policy, items)
    eps, delta = policy.generation.vote_epsilon, policy.generation.vote_delta
    want1 = _law({"zorvex": 9, "bripan": 3}, eps, delta)["zorvex"]
    l2 = _law({"25 mg": 5, "50 mg": 2}, eps, delta)
    want2 = l2["25 mg"] + l2[None]
    assert ex["expected"] == pytest.approx(float(want1 + want2), rel=1e-12)
    assert ex["chances"] == pytest.approx([float(want1), float(want2)], rel=1e-12)
    assert ex["in_support"] == 2 and ex["questions"] == 2
    # a served answer outside the law's support (neither a voter's key nor the fallback) is counted as such
    items[0] = (_served(q1, "Zorvex", "merrex"), items[0][1])
    assert expected_releases(policy, items)["in_support"] == 1
    # no expectation for the universal selection (another law), nor for a question without its recorded batch
    cfg = quick_config("toy")
    universal = build_policy(replace(cfg, privacy=replace(cfg.privacy, mechanism="answer-vote")))
    assert expected_releases(universal, items) is None
    assert expected_releases(policy, [items[1], (items[0][0], None)]) is None
