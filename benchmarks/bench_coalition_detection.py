"""What the coalition estimator catches at the auditor's defaults (spec/estimator.md §8).

    HF_HUB_OFFLINE=1 python benchmarks/bench_coalition_detection.py [--trials 20] [--honest-accounts 100]
        [--queries-per-account 100] [--seed 0] [--float]

8 colluding accounts (one probe each) vs k_max = 5, mixed into honest traffic, at DEFAULT_THETA and the
default window (the whole audit window), plus the θ grid of ``ProbeConfig``. Real MiniLM embeddings
(all-MiniLM-L6-v2, 384-d, offline), int16-quantised as the protocol commits them (``--float``: skip that):

- honest pool: the 2,465 distinct FanOutQA dev questions and sub-questions (wiki-fanout) plus the 760
  distinct clinic-corpus questions (seed 0); each honest account asks ``queries-per-account`` distinct pool
  questions drawn uniformly;
- a target: one clinic patient's private detail (20 targets, one drawn per trial); patterns:
  ``verbatim`` (every colluder sends "What is ⟨name⟩'s ⟨kind⟩?"), ``token`` (each colluder inserts a
  different single word: "What is ⟨name⟩'s current ⟨kind⟩?"...), ``noise`` (the probe's embedding plus
  Gaussian noise, σ²·d = 0.108, expected cosine to the probe 0.95, between two colluders ≈ 0.90; a
  colluder who controls its own embedding), ``paraphrase`` (8 different paraphrases);
- placements: ``adjacent`` (8 consecutive ledger entries) and ``spaced`` (100 entries apart).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from dprag.audit.verify.estimator import DEFAULT_THETA  # noqa: E402
from dprag.lab.estimator_probe import ProbeConfig, probe_detection, probe_table  # noqa: E402

PARAPHRASES = (
    "What is {name}'s {kind}?",
    "Tell me the {kind} of {name}.",
    "Which {kind} did {name} give the clinic?",
    "I need {name}'s {kind}, what is it?",
    "Can you look up the {kind} that {name} uses?",
    "What {kind} is on file for {name}?",
    "Please find the {kind} recorded for {name}.",
    "Do you have {name}'s {kind} in the records?",
)
TOKENS = ("current", "exact", "registered", "latest", "actual", "official", "full", "correct")


def texts(targets: int = 20):
    from dprag.lab.estimator_calibration import clinic_honest_questions
    from dprag.rag_adapters.datasets.clinic import generate_clinic_corpus
    from dprag.rag_adapters.datasets.wiki_fanout import wiki_paths

    fq, _ = wiki_paths()
    seen: dict[str, None] = {}

    def walk(node):
        seen.setdefault(node["question"], None)
        for c in node.get("decomposition") or []:
            walk(c)

    for item in json.loads(open(fq).read()):
        walk(item)
    corpus = generate_clinic_corpus(0)
    for q in clinic_honest_questions(corpus):
        seen.setdefault(q, None)
    pool = list(seen)
    canaries = list(corpus.canaries)
    pick = np.random.default_rng(12345).choice(len(canaries), targets, replace=False)
    attack = []
    for i in pick.tolist():
        name, kind = canaries[i].name, canaries[i].kind
        attack.append(
            {
                "paraphrase": [t.format(name=name, kind=kind) for t in PARAPHRASES],
                "token": [f"What is {name}'s {w} {kind}?" for w in TOKENS],
            }
        )
    return pool, attack


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--honest-accounts", type=int, default=100)
    ap.add_argument("--queries-per-account", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--float", action="store_true", help="float32 embeddings instead of int16-quantised")
    ap.add_argument("--save", default=None)
    a = ap.parse_args(argv)

    from dprag.audit.protocol.commitments import quantise_embeddings
    from dprag.rag_adapters.embedder import EmbeddingCache, MiniLMEmbedder

    pool_texts, attack = texts()
    emb = MiniLMEmbedder()
    cache = EmbeddingCache()
    flat = [t for tg in attack for t in tg["paraphrase"] + tg["token"]]
    t0 = time.perf_counter()
    pool = cache.embed_corpus(emb, pool_texts).astype(np.float64)
    att = cache.embed_corpus(emb, flat).astype(np.float64).reshape(len(attack), 16, -1)
    print(f"embedded {len(pool_texts)} pool + {len(flat)} attack texts in {time.perf_counter() - t0:.0f} s", flush=True)
    para, tok = att[:, :8], att[:, 8:]
    d = pool.shape[1]
    sigma = float(np.sqrt(0.108 / d))

    def pick(rng):
        return int(rng.integers(0, len(attack)))

    def noisy(rng):
        p = para[pick(rng), 0]
        v = p[None, :] + sigma * rng.standard_normal((8, d))
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    cells = {
        "verbatim": lambda rng: np.repeat(para[pick(rng), :1], 8, axis=0),
        "token": lambda rng: tok[pick(rng)],
        "noise": noisy,
        "paraphrase": lambda rng: para[pick(rng)],
    }

    # cosines within each pattern's probe set (what the links need)
    def pairwise(rows):
        u = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        g = u @ u.T
        return g[np.triu_indices(len(rows), 1)]

    rng = np.random.default_rng(0)
    for name, f in cells.items():
        c = np.concatenate([pairwise(f(rng)) for _ in range(20)])
        print(f"{name}: pairwise cosine min {c.min():.3f} median {np.median(c):.3f} max {c.max():.3f}")
    up = pool / np.linalg.norm(pool, axis=1, keepdims=True)
    gp = up @ up.T
    off = gp[np.triu_indices(len(pool), 1)]
    print(
        "honest pool pairwise cosine: "
        + ", ".join(f"P(>= {t}) = {(off >= t).mean():.2e}" for t in (0.8, 0.85, 0.9, 0.95, 0.99))
    )
    if not a.float:  # the protocol's int16 material (commitments.quantise_embeddings)
        scale = lambda x: quantise_embeddings(x / np.linalg.norm(x, axis=-1, keepdims=True))  # noqa: E731
        pool = scale(pool)
        cells = {k: (lambda fn: lambda rng: scale(fn(rng)))(f) for k, f in cells.items()}
    cfg = ProbeConfig(honest_accounts=a.honest_accounts, queries_per_account=a.queries_per_account)
    t0 = time.perf_counter()
    res = probe_detection(
        pool,
        cells,
        cfg,
        a.trials,
        a.seed,
        progress=lambda c: print(f"  {c} done ({time.perf_counter() - t0:.0f} s)", flush=True),
    )
    print(f"honest traffic {cfg.n_honest} queries from {cfg.honest_accounts} accounts; pool {len(pool_texts)}")
    for th in cfg.thetas:
        print()
        print(probe_table(res, th))
    print(
        f"\nDEFAULT_THETA = {DEFAULT_THETA}; run time {time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.1f}"
    )
    if a.save:
        np.savez_compressed(
            a.save,
            thetas=res["thetas"],
            **{
                f"{k.replace('/', '_')}_{m}": v[m]
                for k, v in res["cells"].items()
                for m in ("c_hat", "colluders_linked")
            },
        )


if __name__ == "__main__":
    main()
