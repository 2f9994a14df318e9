"""Metrics on hand-worked examples (expected values computed by hand in the comments)."""

import pytest

from dprag.errors import InvalidParameterError
from dprag.rag_adapters.metrics import (
    best_rouge_l,
    contains_answer,
    lcs_length,
    match_accuracy,
    normalize_answer,
    rouge_l,
    token_f1,
)


def test_normalize_answer():
    assert normalize_answer("The  Great Gatsby!") == "great gatsby"
    assert normalize_answer("680,000") == "680000"
    assert normalize_answer("Gwang-ju") == "gwangju"
    assert normalize_answer("An apple, a pear.") == "apple pear"
    assert normalize_answer("ＡＢＣ") == "abc"  # NFKC folds full-width letters


def test_contains_answer_whole_tokens():
    assert contains_answer("Start on Zorvex 40 mg twice daily.", ["40 mg"])
    assert contains_answer("The population is 680,000 people", "680000")
    assert not contains_answer("Take 40 mg daily", ["4"])  # "4" is not a whole token of "40"
    assert not contains_answer("Paris", ["Pari"])
    assert contains_answer("It is the Eiffel Tower", ["eiffel tower", "louvre"])
    assert not contains_answer("anything", ["the"])  # a gold answer that normalises to nothing never matches
    assert not contains_answer("", ["x"])


def test_match_accuracy():
    preds = ["Zorvex", "I do not know", "It is 40 mg."]
    golds = [["zorvex"], ["Quintrax panel", "Quintrax"], ("40 mg",)]
    assert match_accuracy(preds, golds) == pytest.approx(2 / 3)
    with pytest.raises(InvalidParameterError):
        match_accuracy(["a"], [])
    with pytest.raises(InvalidParameterError):
        match_accuracy([], [])


def test_token_f1_hand_worked():
    # pred tokens [cat, sat, on, mat], gold [cat, sat] -> overlap 2, P = 2/4, R = 2/2, F1 = 2*.5*1/1.5 = 2/3
    assert token_f1("The cat sat on the mat", "the cat sat") == pytest.approx(2 / 3)
    assert token_f1("Paris", ["London", "paris"]) == 1.0
    assert token_f1("", "") == 1.0
    assert token_f1("x", "") == 0.0
    # duplicates count with multiplicity: pred [a1 a1 b], gold [a1 b b] -> overlap 2, P=R=2/3
    assert token_f1("a1 a1 b", "a1 b b") == pytest.approx(2 / 3)


def test_lcs_and_rouge_l_hand_worked():
    assert lcs_length("a b c d".split(), "a c d e".split()) == 3
    assert lcs_length([], ["a"]) == 0
    # ref "the cat sat on the mat" (6 tokens), pred "the cat on the mat" (5): LCS = 5
    r = rouge_l("the cat on the mat", "the cat sat on the mat")
    assert r["precision"] == pytest.approx(1.0)
    assert r["recall"] == pytest.approx(5 / 6)
    assert r["f"] == pytest.approx(10 / 11)  # 2 * 1 * (5/6) / (1 + 5/6)
    # pred "police killed the gunman", ref "police kill the gunman" (Lin 2004 example): LCS = 3 of 4 -> F = 3/4
    assert rouge_l("police killed the gunman", "police kill the gunman")["f"] == pytest.approx(0.75)
    # "the gunman kill police" vs ref: LCS = 2 ("the gunman") -> F = 0.5
    assert rouge_l("the gunman kill police", "police kill the gunman")["f"] == pytest.approx(0.5)
    assert rouge_l("", "abc")["f"] == 0.0
    assert best_rouge_l("a b", ["c", "a b"]) == 1.0
