"""The disjoint-tuning rule (spec/experiments.md §3) for MuRAG-Ada's bins: the session-2 diagnostic (median |released
threshold − true K-th score| over dev questions, no LLM) repeated on the dev split of the disjoint tuning corpus (clinic
seed 1).

Run: ``python -m dprag.lab.experiments.bins_check [CORPUS_SEED]`` (about 2 CPU-minutes: MiniLM embeds the
corpus). Result on seed 1, 20 dev questions, K = 30 (docs/lab/privacy-utility.md §5.11): 20..90/1 has the smallest
error."""

import json
import sys

import numpy as np

from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.rag.multi_query import MuRAGAda
from dprag.accounting.rag.single_query import PureDpRagParams
from dprag.accounting.stores import MemoryBudgetStore
from dprag.lab.experiments.cli import load_dataset
from dprag.lab.experiments.runner import select_questions
from dprag.rag_adapters.embedder import MiniLMEmbedder
from dprag.rag_adapters.retriever import DenseRetriever
from dprag.rag_adapters.scoring import ScoreBins

CANDIDATES = [(30, 90, 0.2), (30, 80, 1.0), (40, 80, 1.0), (30, 80, 2.0), (20, 90, 1.0)]


def main(corpus_seed: int = 1, questions: int = 20, K: int = 30) -> dict:
    """Print and return {bins: {median_error, no_document}} for each candidate (no LLM; MiniLM retriever)."""
    ds = load_dataset("clinic", corpus_seed)
    qs = select_questions(ds, "dev", questions, b"0")
    ret = DenseRetriever(MiniLMEmbedder(), None, ds.documents)
    out = {}
    for low, high, width in CANDIDATES:
        edges = ScoreBins(low, high, width).edges()
        errs, empty = [], 0
        for i, q in enumerate(qs):
            rag = PureDpRagParams(K, 5.0, 2)
            flt = IndividualRenyiFilter(MemoryBudgetStore(len(ret)), FilterBudget.pure(1e6))
            ada = MuRAGAda(
                ret,
                None,
                flt,
                rag,
                edges=edges,
                epsilon_thr=1.0,
                source=RandomSource.from_seed(b"bins-check", f"{low}/{high}/{width}/{i}".encode()),
            )
            sel = ada.select(q.question)
            s = np.sort(np.asarray(ret.scores(q.question)))[::-1]
            thr = sel.info["threshold"]
            if sel.info["admitted"] == 0:
                empty += 1
            errs.append(abs(float(thr) - float(s[K - 1])) if thr is not None else float("inf"))
        out[f"{low}..{high}/{width}"] = {"median_error": float(np.median(errs)), "no_document": empty}
        print(f"{low}..{high}/{width}", out[f"{low}..{high}/{width}"], flush=True)
    return out


if __name__ == "__main__":  # python -m dprag.lab.experiments.bins_check [CORPUS_SEED]
    json.dump(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1), sys.stdout)
