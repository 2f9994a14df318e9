"""S²MIA as 003 §IV-C uses it: ask the system the first part of the target record, score the answer by its
similarity to the record's own continuation.

003 (following Li et al., ICASSP 2025): for a ChatDoctor record x, the patient's question x^q is sent to the
RAG system; the membership score is BLEU's *average precision* between the response x^r and the doctor's
ground-truth answer x^g in x. Our clinic records are single notes, not dialogues, so the split is the one
S²MIA itself uses for unstructured text: the first half of the record's words is the query part, the second
half the continuation (``split_record``; ``prefix_fraction`` makes it configurable). The query sent is the
prefix with a short instruction to continue it (``s2mia_query``).

Score (``bleu_average_precision``): the arithmetic mean over n = 1..4 of BLEU's modified (clipped) n-gram
precision p_n = Σ_g min(count_answer(g), count_reference(g)) / Σ_g count_answer(g), with no brevity
penalty (a precision score). An empty answer (or n-grams of order n absent from it) contributes p_n = 0.
Tokens: lower-cased words and single punctuation marks (``_tokens``). BLEU's geometric mean would be 0
for most short answers (any p_n = 0), which is why we read 003's "average precision" as the arithmetic mean.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from dprag.errors import InvalidParameterError

_TOKEN = re.compile(r"\w+|[^\w\s]")

#: the instruction appended to the record's prefix (Li et al.'s S²MIA prompt asks for a continuation)
S2MIA_INSTRUCTION = "Complete the rest of this clinic record."


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def split_record(text: str, prefix_fraction: float = 0.5) -> tuple[str, str]:
    """(prefix, continuation): the first ``round(prefix_fraction · #words)`` whitespace-separated words and the
    rest (each at least one word)."""
    if not (0.0 < prefix_fraction < 1.0):
        raise InvalidParameterError("prefix_fraction", "must lie in (0, 1)", prefix_fraction)
    words = text.split()
    if len(words) < 2:
        raise InvalidParameterError("record", "needs at least two words to split", len(words))
    cut = min(max(1, round(prefix_fraction * len(words))), len(words) - 1)
    return " ".join(words[:cut]), " ".join(words[cut:])


def s2mia_query(prefix: str) -> str:
    return f"{prefix} ... {S2MIA_INSTRUCTION}"


def modified_precision(answer: Sequence[str], reference: Sequence[str], n: int) -> float:
    """BLEU's clipped n-gram precision of ``answer`` against one reference (0 if the answer has no n-gram)."""
    if n < 1:
        raise InvalidParameterError("n", "must be >= 1", n)
    a = Counter(tuple(answer[i : i + n]) for i in range(len(answer) - n + 1))
    if not a:
        return 0.0
    r = Counter(tuple(reference[i : i + n]) for i in range(len(reference) - n + 1))
    return sum(min(c, r[g]) for g, c in a.items()) / sum(a.values())


def bleu_average_precision(answer: str, reference: str, max_n: int = 4) -> float:
    """Mean of the clipped n-gram precisions p_1..p_max_n (module docstring)."""
    a, r = _tokens(answer), _tokens(reference)
    return sum(modified_precision(a, r, n) for n in range(1, max_n + 1)) / max_n


@dataclass(frozen=True)
class S2MIAProbe:
    """What the attack sends for one target record and what it compares the answer with."""

    doc_key: str
    query: str
    continuation: str


def s2mia_probe(doc_key: str, record: str, prefix_fraction: float = 0.5) -> S2MIAProbe:
    prefix, cont = split_record(record, prefix_fraction)
    return S2MIAProbe(doc_key, s2mia_query(prefix), cont)


def s2mia_score(probe: S2MIAProbe, answer: str) -> float:
    return bleu_average_precision(answer, probe.continuation)
