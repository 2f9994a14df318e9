"""The public answer normalisation (rag_adapters.answer_keys; rules in spec/answer-keys.md): hand-written
expected keys for each rule, the alphabet invariant, and input errors."""

import pytest

from dprag.accounting.errors import InvalidParameterError
from dprag.accounting.mechanisms.string_selection import ALPHABET
from dprag.rag_adapters.answer_keys import answer_key

Q_DRUG = "What medication does the clinic's protocol start patients with Lyme disease on?"
Q_INTERVAL = "When is the follow-up test scheduled for patients with Lyme disease, in days after starting treatment?"


@pytest.mark.parametrize(
    "answer,question,key",
    [
        # rule 2: the span after ":" / " is "; rule 3: first clause; rule 5: question words and stop words go
        (
            "The clinic's standard medication for Lyme disease is Fomnivir, which is",
            "What is the standard medication?",
            "fomnivir",
        ),
        ("The correct answer is: Bripan screen.", "Which test?", "bripan screen"),
        ("The clinic's protocol starts patients with Lyme disease on a medication Fomnivir", Q_DRUG, "fomnivir"),
        # rule 5's exception: a unit after a number stays even when the question has it ("in days")
        ("The follow-up test is scheduled for 30 days after starting treatment.", Q_INTERVAL, "30 days"),
        # rule 4: number formats and units
        ("The correct answer is: 200mg.", "What dose?", "200 mg"),
        ("150 milligrams", "What dose?", "150 mg"),
        ("Thirty days.", "How many days?", "30 days"),
        ("Seven day", "When?", "7 days"),
        # rule 6: a second quantity ends the key; max_words caps it
        ("The standard dose is 150 milligrams three times daily.", "What is the standard dose?", "150 mg"),
        ("The answer is: Bripan screen in 30 days.", "What test?", "bripan screen"),
        # rule 1: first sentence only (a decimal point is not a sentence end)
        ("Zorvex. Then something else entirely.", "Which drug?", "zorvex"),
        ("2.5 mg twice daily", "What dose?", "2 5 mg"),
        # nothing left: the voter abstains
        ("The follow-up test is scheduled for patients with Lyme disease, in days after", Q_INTERVAL, ""),
        ("", "Which drug?", ""),
    ],
)
def test_rules(answer, question, key):
    assert answer_key(answer, question) == key


def test_max_words_and_alphabet():
    assert answer_key("Answer: alpha beta gamma delta", "q?", max_words=2) == "alpha beta"
    assert answer_key("Answer: alpha beta gamma delta", "q?", max_words=4) == "alpha beta gamma delta"
    weird = "Réponse: Ünïcode — ☃ zorvex™ 40mg!!"
    k = answer_key(weird, "q?", max_words=5)
    assert k and all(c in ALPHABET for c in k)


def test_errors_name_the_field():
    with pytest.raises(InvalidParameterError, match="answer"):
        answer_key(None, "q")
    with pytest.raises(InvalidParameterError, match="question"):
        answer_key("a", None)
    with pytest.raises(InvalidParameterError, match="max_words"):
        answer_key("a", "q", max_words=0)


def test_answer_vote_mechanism_from_plain_numbers():
    from dprag.accounting.events import ExponentialMechanismEvent
    from dprag.rag_adapters.answer_keys import answer_vote_mechanism

    mech = answer_vote_mechanism(20, 10.0, threshold=6.0, max_tokens=12, key_words=2)
    assert (mech.m, mech.epsilon, mech.threshold, mech.max_tokens, mech.max_key_words) == (20, 10.0, 6.0, 12, 2)
    assert mech.cost == ExponentialMechanismEvent(10.0) and not mech.diagnostics
    assert mech.key("The answer is: Bripan screen in 30 days.", "Which test?") == "bripan screen"
    with pytest.raises(InvalidParameterError, match="epsilon"):
        answer_vote_mechanism(20, 0.0)
