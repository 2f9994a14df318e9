"""Issue 13: MuRAG's relevance threshold τ for answer-level voting, chosen on the disjoint tuning corpus by
retrieval alone (no LLM), because the dev accuracy of 15 questions cannot see what τ costs at M = 1.

At M = 1 a question charges every admitted document above τ, so a low τ lets the first question about a
condition spend records that later questions about the same condition need, and a high τ leaves each
question few voters. The seen selection releases nothing with fewer than ⌈T⌉ votes (T = 1 + 2·ln(1/δ_q)/ε_q),
so the statistic is: over the run's sequence of dev questions on the tuning corpus, served by the real
``MuRAG.select`` with an M = 1 pure filter, how many questions get at least ⌈T⌉ of their own supporting
records among the Top-K that reach the voters (``relevant_ids`` of the tuning corpus: dev labels, never the
test corpus). The τ with the largest count is chosen.

Run: ``python -m dprag.rag_adapters.experiments.tau_check [CORPUS_SEED [QUESTIONS]]`` (about 2 CPU-minutes:
MiniLM embeds the corpus). Result on seed 1, 100 dev questions, K = 30, ε_q = 10, δ_q = 1e-5 (T = 3.30, so
≥ 4 records): spec/experiments.md §5.13.
"""
import json
import math
import sys

import numpy as np

from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.mechanisms.seen_key_selection import vote_threshold
from dprag.accounting.rag.answer_vote import AnswerVoteParams
from dprag.accounting.rag.mechanism import filter_charge
from dprag.accounting.rag.multi_query import MuRAG
from dprag.accounting.stores import MemoryBudgetStore
from dprag.rag_adapters.embedder import MiniLMEmbedder
from dprag.rag_adapters.experiments.cli import load_dataset
from dprag.rag_adapters.experiments.runner import select_questions
from dprag.rag_adapters.retriever import DenseRetriever

CANDIDATES = (40.0, 42.5, 45.0, 47.5, 50.0, 52.5, 55.0, 57.5, 60.0, 65.0)


def coverage(retriever, questions, tau: float, *, m: int = 30, epsilon: float = 10.0, delta: float = 1e-5) -> dict:
    """Serve ``questions`` in order with MuRAG (M = 1, answer-vote seen cost) and count per question the
    supporting records among the Top-K; returns the counts of questions with >= 1 and >= ⌈T⌉ of them."""
    rag = AnswerVoteParams(m, epsilon, threshold=0.0, selection="seen", delta=delta)
    flt = IndividualRenyiFilter(MemoryBudgetStore(len(retriever)), FilterBudget.pure(epsilon))
    algo = MuRAG(retriever, None, flt, rag, tau=tau)
    need = math.ceil(vote_threshold(epsilon, delta))
    own, charged = [], []
    for q in questions:
        sel = algo.select(q.question)
        own.append(len(set(sel.top[sel.top >= 0].tolist()) & set(q.relevant_ids)))
        charged.append(sel.charged.size)
    own = np.asarray(own)
    return {"votes_needed": need, "with_records": int(np.sum(own >= 1)), "enough_records": int(np.sum(own >= need)),
            "mean_charged": float(np.mean(charged)), "mean_own": float(np.mean(own))}


def main(corpus_seed: int = 1, questions: int = 100) -> dict:
    ds = load_dataset("clinic", corpus_seed)
    qs = select_questions(ds, "dev", questions, b"0")
    ret = DenseRetriever(MiniLMEmbedder(), None, ds.documents)
    out = {}
    for tau in CANDIDATES:
        out[f"{tau:g}"] = coverage(ret, qs, tau)
        print(f"tau={tau:g}", out[f"{tau:g}"], flush=True)
    best = max(out, key=lambda t: (out[t]["enough_records"], -float(t)))
    print("chosen tau:", best, flush=True)
    return {"chosen": best, "candidates": out}


if __name__ == "__main__":  # python -m dprag.rag_adapters.experiments.tau_check [CORPUS_SEED [QUESTIONS]]
    a = sys.argv[1:]
    json.dump(main(int(a[0]) if a else 1, int(a[1]) if len(a) > 1 else 100), sys.stdout)
