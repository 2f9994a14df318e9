"""KSA and DP-KSA (004, Algorithm 1): keyword-space aggregation over an ensemble of per-document responses.

For a question x, the N most relevant documents are retrieved (exact search); the LLM answers x once per
document (one response per document, 004 Alg. 1 lines 1–4); the keyword histogram H counts, for every token
of the public vocabulary, how many responses contain it (a response counts a token at most once);
KSA releases the top-k tokens by count (non-private baseline); DP-KSA releases k̂ = FindBestK(H) and then
TopKWithPTR(k̂, H) (``accounting.mechanisms.ksa.dp_ksa_select``, within a total (ε, δ)); the final answer is
generated zero-shot from x and the released keywords only — post-processing, no further privacy cost.
Neighbouring relation: replace-one (or add/remove-one) document (004 Thm A.12).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from ..errors import check_positive_int
from ..mechanisms.ksa import dp_ksa_select, keyword_histogram
from ..noise.source import RandomSource
from ..protocols import Generator, Prompt, Retriever, stop_tokens
from .common import RagAnswer, documents_text, exact_top_k


def _responses(question, retriever, generator, n_docs, response_tokens):
    ids, _ = exact_top_k(retriever, question, n_docs)
    prompts = [Prompt(question, (doc,)) for doc in documents_text(retriever, ids)]
    texts = generator.generate_many(prompts, response_tokens)
    return ids, texts


def _histogram(generator: Generator, texts: list[str], exclude: Iterable[int]) -> np.ndarray:
    tokens = [set(generator.encode(t)) - set(exclude) for t in texts]
    return keyword_histogram([sorted(t) for t in tokens], generator.vocab_size)


def _answer(question: str, generator: Generator, keywords: tuple[int, ...] | None, max_tokens: int) -> str:
    if not keywords:
        return generator.generate(Prompt(question), max_tokens).strip()
    hint = "Keywords: " + ", ".join(generator.decode([t]).strip() for t in keywords)
    return generator.generate(Prompt(question, (hint,)), max_tokens).strip()


def ksa(question: str, retriever: Retriever, generator: Generator, *, n_docs: int, k: int, response_tokens: int = 16,
        max_tokens: int = 32, exclude_tokens: Iterable[int] = ()) -> RagAnswer:
    """Non-private KSA: the k most frequent keywords (ties by the smaller token id) feed a zero-shot answer."""
    k = check_positive_int("k", k)
    ids, texts = _responses(question, retriever, generator, check_positive_int("n_docs", n_docs), response_tokens)
    excl = set(exclude_tokens) | stop_tokens(generator)
    h = _histogram(generator, texts, excl)
    top = tuple(sorted(int(t) for t in np.lexsort((np.arange(h.size), -h))[:k] if h[t] > 0))
    return RagAnswer(text=_answer(question, generator, top, max_tokens), retrieved=ids,
                     info={"method": "ksa", "private": False, "keywords": top})


def dp_ksa(question: str, retriever: Retriever, generator: Generator, *, n_docs: int, epsilon: float, delta: float,
           response_tokens: int = 16, max_tokens: int = 32, k_max: int | None = 30,
           exclude_tokens: Iterable[int] = (), source: RandomSource | None = None, queries: int = 1) -> RagAnswer:
    """DP-KSA (004 Alg. 1): FindBestK + TopKWithPTR on the keyword histogram, then a zero-shot answer.

    If PTR refuses (the gap at k̂ is too small), no keyword is released and the answer is the model's own.
    ``k_max`` bounds FindBestK's range (004 suggests 15–30; over the whole vocabulary the gaps of rare tokens
    swamp it). Cost: the composed event of ``dp_ksa_select``, which is (ε, δ)-DP when converted at δ/2
    (``epsilon_of(cost, δ/2)``: the other δ/2 is PTR's failure probability). With ``queries`` = T, (ε, δ)
    is the budget of a session of T such answers, RDP-composed (``calibrate_dp_ksa``).
    """
    ids, texts = _responses(question, retriever, generator, check_positive_int("n_docs", n_docs), response_tokens)
    excl = set(exclude_tokens) | stop_tokens(generator)
    h = _histogram(generator, texts, excl)
    sel, event = dp_ksa_select(h, epsilon, delta, RandomSource.system() if source is None else source,
                               k_max=k_max, queries=queries)
    return RagAnswer(text=_answer(question, generator, sel.tokens, max_tokens), events=[event], cost=event,
                     retrieved=ids, charged=ids,
                     info={"method": "dp-ksa", "private": True, "k_hat": sel.k, "released": sel.tokens is not None,
                           "keywords": sel.tokens, "epsilon": epsilon, "delta": delta,
                           "queries": queries})
