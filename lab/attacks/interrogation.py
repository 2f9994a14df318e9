"""The Interrogation Attack (IA) as 001 §4.2 / App. E uses it (Naseh et al., 2025), on the local LLM.

For a target record d the attacker generates questions together with the answers d implies, prefixes every
question with the context needed for d to be retrieved, sends them to the RAG system and scores d by the
system's accuracy on them (higher = more likely a member).

As implemented (spec/experiments-mia.md §2.2):

1. Question generation with the local LLM (SmolLM2-135M-Instruct, greedy, ``Generator.generate_many``):
   one prompt per *aspect* of ``ASPECTS`` with d as the context, asking for ``Q: <question> A: <answer>``.
   001 uses GPT-4 with Naseh et al.'s template; a 135M model follows such a template poorly, so every
   generated pair is *validated* (``parse_qa`` + ``valid_pair``): its answer must occur in d (after
   ``answer_matches``), must not occur in the question, and must be at most 8 words. Pairs that
   fail are dropped.
2. If fewer than ``n`` valid pairs remain, the attack fills up with *template* questions built from the
   record's own fields (``fallback`` pairs: the canary question, age, visit date, record code). Each
   question records its ``source`` ("llm" / "template"), so the share of LLM questions is reported.
3. Query = ``context + " " + question``; the context names the record's patient (what makes d retrievable
   without quoting it). Score = mean over the questions of ``answer_matches(answer, gold)``
   (001's match accuracy), with ``answer_matches``: ``metrics.contains_answer`` or the gold's alphanumeric
   words as a run of the answer's (SQuAD normalisation deletes hyphens, so "40-year-old" would not contain
   "40").
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from dprag.accounting.protocols import Generator, Prompt
from dprag.errors import InvalidParameterError
from dprag.rag_adapters.metrics import contains_answer, normalize_answer

ASPECTS = (
    "the patient's age",
    "the date of the visit",
    "the reason for the visit or the diagnosis",
    "the treatment or medication",
    "the private note",
)
QA_INSTRUCTION = (
    "Write one question about {aspect} in the clinic record above, and its short answer copied "
    "from the record. Use exactly this format: Q: <question> A: <answer>"
)
_WORD = re.compile(r"[a-z0-9]+")
_QA = re.compile(r"Q\s*:\s*(.+?)\s*A\s*:\s*(.+?)(?=\s*Q\s*:|\n|$)", re.S)
MAX_ANSWER_WORDS = 8


@dataclass(frozen=True)
class IAQuestion:
    question: str
    answer: str
    source: str  # "llm" | "template"


def parse_qa(text: str) -> list[tuple[str, str]]:
    """Every ``Q: ... A: ...`` pair in ``text`` (answers cut at the first newline, trailing period dropped)."""
    out = []
    for q, a in _QA.findall(text):
        q, a = q.strip(), a.strip().rstrip(".").strip()
        if q and a:
            out.append((q, a))
    return out


def _words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", str(text)).lower())


def answer_matches(text: str, gold: str) -> bool:
    """``metrics.contains_answer`` (SQuAD normalisation, whole-token run), or the gold's alphanumeric words as a
    run of ``text``'s alphanumeric words (so "40" matches "a 40-year-old", which SQuAD's punctuation deletion
    turns into the single token "40yearold")."""
    if contains_answer(text, [gold]):
        return True
    hay, needle = _words(text), _words(gold)
    if not needle or len(needle) > len(hay):
        return False
    return any(hay[i : i + len(needle)] == needle for i in range(len(hay) - len(needle) + 1))


def valid_pair(record: str, question: str, answer: str) -> bool:
    """An answer implied by the record: present in it, absent from the question, at most 8 words."""
    na = normalize_answer(answer)
    if not na or len(_words(answer)) > MAX_ANSWER_WORDS:
        return False
    return answer_matches(record, answer) and not answer_matches(question, answer)


def llm_questions(
    generator: Generator, record: str, *, aspects: Sequence[str] = ASPECTS, max_new_tokens: int = 48
) -> tuple[list[IAQuestion], list[str]]:
    """(valid pairs, raw generations): one greedy generation per aspect, validated (module docstring)."""
    return llm_questions_many(generator, [record], aspects=aspects, max_new_tokens=max_new_tokens)[0]


def llm_questions_many(
    generator: Generator, records: Sequence[str], *, aspects: Sequence[str] = ASPECTS, max_new_tokens: int = 48
) -> list[tuple[list[IAQuestion], list[str]]]:
    """``llm_questions`` for several records in one generation batch (rows are functions of their own prompts,
    so each record gets what a call of its own gives)."""
    prompts = [Prompt(QA_INSTRUCTION.format(aspect=a), (record,)) for record in records for a in aspects]
    raw_all = generator.generate_many(prompts, max_new_tokens) if prompts else []
    results = []
    for i, record in enumerate(records):
        raw = raw_all[i * len(aspects) : (i + 1) * len(aspects)]
        out, seen = [], set()
        for text in raw:
            for q, a in parse_qa(text):
                key = normalize_answer(a)
                if key not in seen and valid_pair(record, q, a):
                    seen.add(key)
                    out.append(IAQuestion(q, a, "llm"))
                    break
        results.append((out, list(raw)))
    return results


def build_questions(n: int, generated: Sequence[IAQuestion], fallback: Sequence[tuple[str, str]]) -> list[IAQuestion]:
    """The first ``n`` of the LLM's valid pairs, then template pairs (distinct answers) up to ``n``."""
    if n < 1:
        raise InvalidParameterError("questions", "must be >= 1", n)
    out = list(generated[:n])
    have = {normalize_answer(q.answer) for q in out}
    for q, a in fallback:
        if len(out) >= n:
            break
        if normalize_answer(a) not in have:
            have.add(normalize_answer(a))
            out.append(IAQuestion(q, a, "template"))
    return out


def ia_query(context: str, question: str) -> str:
    return f"{context} {question}".strip()


def ia_score(questions: Sequence[IAQuestion], answers: Sequence[str]) -> float:
    """Accuracy of the system's answers: fraction of questions whose answer contains the gold answer."""
    if len(questions) != len(answers) or not questions:
        raise InvalidParameterError(
            "answers", "need one answer per question (and >= 1 question)", (len(questions), len(answers))
        )
    return sum(answer_matches(a, q.answer) for q, a in zip(questions, answers, strict=False)) / len(questions)
