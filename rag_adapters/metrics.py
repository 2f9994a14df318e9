"""QA metrics: match accuracy, token F1, ROUGE-L. Pure python, no model, no numpy.

- **Match accuracy** (Koga et al. 2024, paper 003 §IV-A "match accuracy"; paper 001 §4.1 "a prediction is
  scored as 1 if it contains any correct answer"): the normalised prediction contains one of the
  normalised gold answers as a contiguous run of whole tokens (the DPR ``has_answer`` convention:
  gold "4" does not match a prediction "40 mg", gold "40 mg" matches "Take 40 mg daily.").
- **Token F1**: SQuAD's bag-of-tokens F1 on normalised tokens, maximised over gold answers.
- **ROUGE-L** (Lin 2004): longest common subsequence of tokens; P = LCS/|pred|, R = LCS/|ref|,
  F = 2PR/(P+R). Tokens are lower-cased alphanumeric runs (the ``rouge-score`` default tokenizer without
  stemming); articles are kept, as in ROUGE.

Normalisation (``normalize_answer``), as in SQuAD: Unicode NFKC, lower-case, delete punctuation (so
"680,000" reads "680000" and "Gwang-ju" reads "gwangju"), drop the articles a/an/the, collapse white space.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ROUGE_TOKEN = re.compile(r"[a-z0-9]+")


def _strip_punct(s: str) -> str:
    return "".join(ch for ch in s if not unicodedata.category(ch).startswith("P") and ch not in "$+<=>^`|~")


def normalize_answer(s: str) -> str:
    """SQuAD normalisation: NFKC, lower, delete punctuation, remove articles, collapse white space."""
    s = unicodedata.normalize("NFKC", str(s)).lower()
    s = _strip_punct(s)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def answer_tokens(s: str) -> list[str]:
    return normalize_answer(s).split()


def _as_golds(golds: str | Iterable[str]) -> list[str]:
    if isinstance(golds, str):
        return [golds]
    return [str(g) for g in golds]


def _contains_run(hay: Sequence[str], needle: Sequence[str]) -> bool:
    n, m = len(hay), len(needle)
    if m == 0 or m > n:
        return False
    first = needle[0]
    for i in range(n - m + 1):
        if hay[i] == first and list(hay[i : i + m]) == list(needle):
            return True
    return False


def contains_answer(text: str, golds: str | Iterable[str]) -> bool:
    """True iff normalised ``text`` contains some normalised gold answer as a run of whole tokens.

    Gold answers that normalise to nothing (e.g. "the", "?") never match.
    """
    hay = answer_tokens(text)
    return any(_contains_run(hay, answer_tokens(g)) for g in _as_golds(golds))


def match_accuracy(predictions: Sequence[str], gold_answers: Sequence[str | Iterable[str]]) -> float:
    """Mean of ``contains_answer`` over paired predictions and gold-answer lists."""
    if len(predictions) != len(gold_answers):
        from dprag.errors import InvalidParameterError

        raise InvalidParameterError(
            "predictions", "must have one entry per gold-answer list", (len(predictions), len(gold_answers))
        )
    if not predictions:
        from dprag.errors import InvalidParameterError

        raise InvalidParameterError("predictions", "must not be empty")
    return sum(contains_answer(p, g) for p, g in zip(predictions, gold_answers, strict=False)) / len(predictions)


def _f1(pred: list[str], gold: list[str]) -> float:
    if not pred or not gold:
        return float(pred == gold)
    common = Counter(pred) & Counter(gold)
    same = sum(common.values())
    if same == 0:
        return 0.0
    p = same / len(pred)
    r = same / len(gold)
    return 2 * p * r / (p + r)


def token_f1(prediction: str, golds: str | Iterable[str]) -> float:
    """SQuAD token F1 of ``prediction`` against the best gold answer (1.0 if both normalise to empty)."""
    pred = answer_tokens(prediction)
    return max(_f1(pred, answer_tokens(g)) for g in _as_golds(golds))


def rouge_tokens(s: str) -> list[str]:
    return _ROUGE_TOKEN.findall(unicodedata.normalize("NFKC", str(s)).lower())


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence (O(|a||b|) time, O(|b|) memory)."""
    if not a or not b:
        return 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, 1):
            cur[j] = prev[j - 1] + 1 if x == y else (prev[j] if prev[j] >= cur[j - 1] else cur[j - 1])
        prev = cur
    return prev[-1]


def rouge_l(prediction: str, reference: str) -> dict[str, float]:
    """ROUGE-L precision, recall and F1 of ``prediction`` against one ``reference``."""
    p_tok, r_tok = rouge_tokens(prediction), rouge_tokens(reference)
    lcs = lcs_length(p_tok, r_tok)
    if lcs == 0:
        return {"precision": 0.0, "recall": 0.0, "f": 0.0}
    p = lcs / len(p_tok)
    r = lcs / len(r_tok)
    return {"precision": p, "recall": r, "f": 2 * p * r / (p + r)}


def best_rouge_l(prediction: str, references: str | Iterable[str]) -> float:
    """Best ROUGE-L F over several references."""
    return max(rouge_l(prediction, r)["f"] for r in _as_golds(references))
