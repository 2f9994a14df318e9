"""Public normalisation of a free-text answer to a canonical key (spec/answer-keys.md).

Answer-level voting (``dprag.accounting.rag.answer_vote``) counts the voters' answers by key, so two voters
who say "The standard dose is 150mg." and "150 milligrams, three times daily" must land on the same key
("150 mg"). The rules read only the answer and the (public) question -- never a document -- and every key
lies in the mechanism's alphabet ``ALPHABET`` (a-z, 0-9, space), or is "" (the voter abstains):

1. **First sentence**: cut at the first newline or sentence end (". ", "!", "?", or a final "."; a "." between
   two digits is a decimal point, not an end).
2. **Span after a cue**: if the sentence contains ":" the text after the first ":"; else the text after the
   first " is " / " are " / " was " / " will be ".
3. **First clause**: cut at the first "," ";" "(" " - " or " which ".
4. **Characters and numbers**: lower-case; "150mg" → "150 mg" (a digit run and a letter run are split); unit
   spellings milligram(s)/mgs → "mg", gram(s) → "g", day → "days", week → "weeks"; number words zero..ninety
   → digits; every character outside a-z, 0-9 becomes a space; spaces collapse.
5. **Content words**: drop articles and the stop words in ``STOP_WORDS``, and every word that also occurs in
   the question (compared without a trailing "s"), *except* a word right after a number (its unit: "30 days"
   keeps "days" even when the question says "in days").
6. **Length**: the remaining words up to a number that follows a non-number word (a second quantity: "bripan
   screen in 30 days" → "bripan screen", "150 mg three times daily" → "150 mg"), at most ``max_words`` of them
   (the "answer length" of the key).

The mapping is a fixed public function of (answer, question): post-processing in every proof that uses it.
"""

from __future__ import annotations

import re

from dprag.accounting.errors import check_positive_int
from dprag.accounting.mechanisms.string_selection import ALPHABET
from dprag.errors import InvalidParameterError

__all__ = [
    "answer_key",
    "answer_key_v2",
    "NORMALIZERS",
    "answer_vote_mechanism",
    "STOP_WORDS",
    "STOP_WORDS_V2",
    "ALPHABET",
]

STOP_WORDS = frozenset(
    """
a an the this that these those it its is are was were be been will would should can could may might
and or but of to in on at by for with from as into onto than then there their they them he she his her
we our you your i me my mine
answer correct clinic clinics protocol patient patients use used uses using given give gives
start starts started starting prescribe prescribes prescribed called named known
""".split()
)

#: the words v2 adds to ``STOP_WORDS``: the verbs and nouns the clinic questions' answers restate ("The clinic
#: ordered a Kleikacept test" → "kleikacept"), chosen on the seed-1 tuning corpus (spec/answer-keys.md §2)
STOP_WORDS_V2_EXTRA = frozenset(
    """
order orders ordered schedule schedules scheduled require requires required recommend recommends recommended
medication medications drug drugs call calls
""".split()
)
STOP_WORDS_V2 = STOP_WORDS | STOP_WORDS_V2_EXTRA

_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen twenty".split()
    )
}
_NUMBER_WORDS.update(
    {w: str(10 * i) for i, w in enumerate("thirty forty fifty sixty seventy eighty ninety".split(), start=3)}
)
_UNITS = {"milligram": "mg", "milligrams": "mg", "mgs": "mg", "gram": "g", "grams": "g", "day": "days", "week": "weeks"}

_SENTENCE_END = re.compile(r"\n|[!?]|\.(?!\d)(?=\s|$)")
_CUES = (" is ", " are ", " was ", " will be ")
_CLAUSE = re.compile(r",|;|\(| - | which ")
_SPLIT_NUM = re.compile(r"(?<=\d)(?=[a-z])|(?<=[a-z])(?=\d)")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def _stem(w: str) -> str:
    return w[:-1] if len(w) > 3 and w.endswith("s") else w


def _words(text: str) -> list[str]:
    t = _NON_ALNUM.sub(" ", _SPLIT_NUM.sub(" ", text.lower()))
    out = []
    for w in t.split():
        w = _NUMBER_WORDS.get(w, w)
        out.append(_UNITS.get(w, w))
    return out


def answer_key(answer: str, question: str = "", *, max_words: int = 3) -> str:
    """The canonical key of ``answer`` to ``question`` (rules in the module doc); "" = no content (abstain).
    This is ``answer-keys-v1``: policies that name it, and bundles made with it, replay with exactly these rules."""
    return _key(answer, question, max_words, clause_first=False, stop=STOP_WORDS)


def answer_key_v2(answer: str, question: str = "", *, max_words: int = 3) -> str:
    """``answer-keys-v2`` (spec/answer-keys.md §2): v1's rules with two changes, chosen on the seed-1 tuning
    corpus -- the first clause is cut *before* the cue is looked for (unless a ":" comes before the clause mark),
    so a cue in a later clause no longer replaces the answer ("The clinic prescribes Quoustrimab, a medication
    that is used to" → "quoustrimab", where v1 gives ""); and the stop words add ``STOP_WORDS_V2_EXTRA``."""
    return _key(answer, question, max_words, clause_first=True, stop=STOP_WORDS_V2)


def _key(answer: str, question: str, max_words: int, *, clause_first: bool, stop: frozenset[str]) -> str:
    if not isinstance(answer, str):
        raise InvalidParameterError("answer", "must be a string", type(answer).__name__)
    if not isinstance(question, str):
        raise InvalidParameterError("question", "must be a string", type(question).__name__)
    n = check_positive_int("max_words", max_words)
    text = answer.strip()
    m = _SENTENCE_END.search(text)
    if m:
        text = text[: m.start()]
    if clause_first:  # v2: the first clause, unless a ":" precedes its end (the span after ":" comes first then)
        c = _CLAUSE.search(text)
        colon = text.find(":")
        if c and not (0 <= colon < c.start()):
            text = text[: c.start()]
    if ":" in text:
        text = text.split(":", 1)[1]
    else:
        low = text.lower()
        hits = [(low.find(c), c) for c in _CUES if c in low]
        if hits:
            i, c = min(hits)
            text = text[i + len(c) :]
    text = _CLAUSE.split(text, maxsplit=1)[0]
    q = {_stem(w) for w in _words(question)}
    keep: list[str] = []
    prev_number = False
    for w in _words(text):
        is_number = w.isdigit()
        if is_number and keep and not prev_number and not keep[-1].isdigit():
            break  # a second quantity after the answer ("bripan screen in 30 days", "150 mg three times")
        if prev_number or is_number or (w not in stop and _stem(w) not in q):
            keep.append(w)
        prev_number = is_number
        if len(keep) == n:
            break
    key = " ".join(keep)
    assert all(c in ALPHABET for c in key)
    return key


#: the public normalisers by the name a policy or an experiment commits to (also the dprag.normalizers entry points)
NORMALIZERS = {"answer-keys-v1": answer_key, "answer-keys-v2": answer_key_v2}


def answer_vote_mechanism(m: int, epsilon: float, *, threshold: float = 6.0, max_tokens: int = 16, key_words: int = 3):
    """Answer-level voting with this module's normalisation, from plain numbers (what a policy holds):
    ``AnswerVoteParams(m, epsilon, threshold, max_tokens, key_words, normalizer=answer_key)``, no diagnostics.
    Its cost is ``ExponentialMechanismEvent(epsilon)``, a pure charge a verifier can replay."""
    from dprag.accounting.rag.answer_vote import AnswerVoteParams

    return AnswerVoteParams(
        m, epsilon, threshold=threshold, max_tokens=max_tokens, max_key_words=key_words, normalizer=answer_key
    )
