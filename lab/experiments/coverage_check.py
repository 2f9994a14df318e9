"""MuRAG's relevance threshold τ and MuRAG-Ada's K = m for answer-level voting, chosen on the
disjoint tuning corpus by retrieval alone (no LLM), because the dev accuracy of 15 questions cannot see what
they cost at M = 1.

At M = 1 a question charges every admitted document above τ (MuRAG) or in the released bins (MuRAG-Ada, about
K of them), so a low τ or a large K lets the first question about a condition spend records that later
questions about the same condition need, and a high τ or a small K leaves each question few voters. The seen
selection releases nothing with fewer than ⌈T⌉ votes (T = 1 + 2·ln(1/δ_q)/ε_q), so the statistic is: over the run's
sequence of dev questions on the tuning corpus, served by the real ``MuRAG.select`` / ``MuRAGAda.select`` with an M = 1
pure filter, how many questions get at least ⌈T⌉ of their own supporting records among the Top-K that reach the voters
(``relevant_ids`` of the tuning corpus: dev labels, never the test corpus). The τ (K = 30) and the m (MuRAG-Ada, mean
over 3 noise seeds of its prefix sums) with the largest count are chosen.

Run: ``python -m dprag.lab.experiments.coverage_check [CORPUS_SEED [QUESTIONS]]`` (about 3
CPU-minutes: MiniLM embeds the corpus). Result on seed 1, 100 dev questions, ε_q = 10 (MuRAG-Ada: ε_thr = 1,
ε_RAG = 9), δ_q = 1e-5 (⌈T⌉ = 4 records): docs/lab/privacy-utility.md §5.13.
"""

import json
import math
import sys

import numpy as np

from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.mechanisms.seen_key_selection import vote_threshold
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.rag.answer_vote import AnswerVoteParams
from dprag.accounting.rag.multi_query import MuRAG, MuRAGAda
from dprag.accounting.stores import MemoryBudgetStore
from dprag.lab.experiments.cli import load_dataset
from dprag.lab.experiments.runner import select_questions
from dprag.rag_adapters.embedder import MiniLMEmbedder
from dprag.rag_adapters.retriever import DenseRetriever
from dprag.rag_adapters.scoring import ScoreBins

CANDIDATES = (40.0, 42.5, 45.0, 47.5, 50.0, 52.5, 55.0, 57.5, 60.0, 65.0)
ADA_VOTERS = (6, 8, 10, 12, 16, 20, 30)
ADA_BINS = (
    20,
    90,
    1,
)  # the experiments' MuRAG-Ada bins, chosen on seed 1 (bins_check, docs/lab/privacy-utility.md §5.11)


def _count(algo, questions, need: int) -> dict:
    own, charged = [], []
    for q in questions:
        sel = algo.select(q.question)
        own.append(len(set(sel.top[sel.top >= 0].tolist()) & set(q.relevant_ids)))
        charged.append(sel.charged.size)
    own = np.asarray(own)
    return {
        "votes_needed": need,
        "with_records": int(np.sum(own >= 1)),
        "enough_records": int(np.sum(own >= need)),
        "mean_charged": float(np.mean(charged)),
        "mean_own": float(np.mean(own)),
    }


def coverage(retriever, questions, tau: float, *, m: int = 30, epsilon: float = 10.0, delta: float = 1e-5) -> dict:
    """Serve ``questions`` in order with MuRAG (M = 1, answer-vote seen cost) and count per question the
    supporting records among the Top-K; returns the counts of questions with >= 1 and >= ⌈T⌉ of them."""
    rag = AnswerVoteParams(m, epsilon, threshold=0.0, selection="seen", delta=delta)
    flt = IndividualRenyiFilter(MemoryBudgetStore(len(retriever)), FilterBudget.pure(epsilon))
    return _count(MuRAG(retriever, None, flt, rag, tau=tau), questions, math.ceil(vote_threshold(epsilon, delta)))


def ada_coverage(
    retriever,
    questions,
    m: int,
    edges,
    *,
    epsilon: float = 10.0,
    epsilon_thr: float = 1.0,
    delta: float = 1e-5,
    seed: bytes = b"coverage-check",
) -> dict:
    """The same count for MuRAG-Ada with K = m voters × 1 record, ε_RAG = ε − ε_thr, M = 1 (the experiments'
    filter: ``MuRAGAda.filter_budget(1, …)``)."""
    rag = AnswerVoteParams(m, epsilon - epsilon_thr, threshold=0.0, selection="seen", delta=delta)
    flt = IndividualRenyiFilter(MemoryBudgetStore(len(retriever)), MuRAGAda.filter_budget(1, rag.cost, epsilon_thr))
    algo = MuRAGAda(
        retriever,
        None,
        flt,
        rag,
        edges=edges,
        epsilon_thr=epsilon_thr,
        source=RandomSource.from_seed(seed, str(m).encode()),
    )
    return _count(algo, questions, math.ceil(rag.vote_threshold))


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
    edges = ScoreBins(*ADA_BINS).edges()
    ada = {}
    for m in ADA_VOTERS:
        runs = [ada_coverage(ret, qs, m, edges, seed=f"coverage-check/{r}".encode()) for r in range(3)]
        ada[str(m)] = {
            "enough_records": [r["enough_records"] for r in runs],
            "with_records": [r["with_records"] for r in runs],
            "mean_enough": float(np.mean([r["enough_records"] for r in runs])),
            "mean_charged": float(np.mean([r["mean_charged"] for r in runs])),
        }
        print(f"ada m={m}", ada[str(m)], flush=True)
    best_m = max(ada, key=lambda k: (ada[k]["mean_enough"], -int(k)))
    print("chosen MuRAG-Ada m:", best_m, flush=True)
    return {"chosen_tau": best, "murag": out, "chosen_ada_m": best_m, "murag_ada": ada}


if __name__ == "__main__":  # python -m dprag.lab.experiments.coverage_check [CORPUS_SEED [QUESTIONS]]
    a = sys.argv[1:]
    json.dump(main(int(a[0]) if a else 1, int(a[1]) if len(a) > 1 else 100), sys.stdout)
