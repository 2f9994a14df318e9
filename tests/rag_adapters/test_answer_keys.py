"""The public answer normalisation (rag_adapters.answer_keys; rules in spec/answer-keys.md): hand-written
expected keys for each rule, the alphabet invariant, and input errors."""

import pytest

from dprag.accounting.mechanisms.string_selection import ALPHABET
from dprag.errors import InvalidParameterError
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


# ---------------------------------------------------------------------------------------------------------------
# answer-keys-v2 (spec/answer-keys.md §2): the first clause before the cue, and the extra stop words
# ---------------------------------------------------------------------------------------------------------------
Q_FIBRO = "Which drug does the clinic prescribe for fibromyalgia?"
Q_BPH_TEST = "Which follow-up test does the clinic order for patients treated for benign prostatic hyperplasia?"


@pytest.mark.parametrize(
    "answer,question,v1,v2",
    [
        # a cue (" is ") in a later clause: v1 takes the span after it and loses the answer; v2 cuts the clause first
        ("The clinic prescribes Quoustrimab, a medication that is used to", Q_FIBRO, "", "quoustrimab"),
        ("The clinic ordered a Kleikacept test, which is a blood test that", Q_BPH_TEST, "blood", "kleikacept"),
        # the extra stop words: the restated verb / noun goes, the name stays
        ("The clinic ordered a Grasgix assay.", Q_BPH_TEST, "ordered grasgix", "grasgix assay"),
        ("They recommended the medication Zorvex.", "Which treatment?", "recommended medication", "zorvex"),
        # a ":" before the first clause mark: the span after ":" first, as in v1 (then its first clause)
        ("The answer is: 250 mg, three times daily", "What dose?", "250 mg", "250 mg"),
        ("Dose: 40 mg (once daily)", "What dose?", "40 mg", "40 mg"),
        # no clause mark, or the cue inside the first clause: v1 and v2 agree
        ("The standard dose is 150mg.", "What is the standard dose?", "150 mg", "150 mg"),
        (
            "The clinic's standard medication for Lyme disease is Fomnivir, which is",
            "What is the standard medication?",
            "fomnivir",
            "fomnivir",
        ),
        ("The follow-up test is scheduled for 30 days after starting treatment.", Q_INTERVAL, "30 days", "30 days"),
        ("", "Which drug?", "", ""),
    ],
)
def test_v2_rules_beside_v1(answer, question, v1, v2):
    from dprag.rag_adapters.answer_keys import answer_key_v2

    assert answer_key(answer, question, max_words=2) == v1
    assert answer_key_v2(answer, question, max_words=2) == v2


def test_v2_is_what_a_policy_names_and_v1_is_unchanged():
    """Both are installed normalisers a policy can commit (audit.protocol.policy.normalizer resolves the entry points);
    v1 keeps its own rules (bundles made with it replay unchanged)."""
    from dprag.audit.protocol.policy import normalizer
    from dprag.rag_adapters.answer_keys import NORMALIZERS, STOP_WORDS, STOP_WORDS_V2, answer_key_v2

    assert normalizer("answer-keys-v1") is answer_key and normalizer("answer-keys-v2") is answer_key_v2
    assert NORMALIZERS == {"answer-keys-v1": answer_key, "answer-keys-v2": answer_key_v2}
    assert STOP_WORDS < STOP_WORDS_V2 and "ordered" not in STOP_WORDS and "ordered" in STOP_WORDS_V2
    with pytest.raises(InvalidParameterError, match="max_words"):
        answer_key_v2("a", "q", max_words=0)
    k = answer_key_v2("Réponse: Ünïcode — ☃ zorvex™ 40mg!!", "q?", max_words=5)
    assert k and all(c in ALPHABET for c in k)
