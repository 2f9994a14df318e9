"""Coalition-size estimator at scale, and its honest-traffic calibration (spec/estimator.md §3, §5).

    python benchmarks/bench_estimator.py scale  [--sizes 10000 100000] [--windows 1000 10000] [--dim 384]
                                                [--faiss-only-above 200000] [--repeat 1] [--no-faiss]
    python benchmarks/bench_estimator.py honest [--trials 100] [--attack-trials 20] [--windows 0 300 30]

``scale`` times ``coalition_size`` (neighbour search + exact decision + components + distinct accounts) on
synthetic 384-d unit embeddings, embedding time excluded, side by side:

- ``numpy (exact, default)``  blocked float64 BLAS band search — the baseline, what the verifier runs;
- ``faiss (exact)``           ``rag_adapters.ann_links.FaissWindowSearch``: IndexFlatIP range search, float32
                              with a proven margin, then the same exact decision;

and prints seconds, pairs compared per second and the speed-up faiss/numpy, and checks both give the
same ĉ. Synthetic traffic: n/20 "intents" (random unit vectors), each query = normalize(intent + σ·η) with
σ²·d = 0.19 (sibling cosine ≈ 0.84), 1 account per 100 queries, θ = 0.8; so there are real links to find.
Both paths run with ``--threads`` threads (BLAS through threadpoolctl, FAISS through OpenMP).
Above ``--faiss-only-above`` queries only faiss runs (10^6 x W = 10^4 would take the numpy path ~10 min).

``honest`` runs the honest-traffic calibration (lab/estimator_calibration.py) on the clinic questions
embedded with the real MiniLM embedder (cached on disk by ``EmbeddingCache``; HF_HUB_OFFLINE=1) and prints
the FPR curve and the operating table per k_max, for each window (0 = every pair).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from dprag.audit.verify.estimator import coalition_size  # noqa: E402


def synthetic(n: int, dim: int, seed: int = 0):
    """n/20 intents; query = normalize(intent + σ·η) with σ²·dim = 0.19, so siblings have cosine ≈ 0.84."""
    rng = np.random.default_rng(seed)
    noise = float(np.sqrt(0.19 / dim))
    intents = rng.standard_normal((max(1, n // 20), dim)).astype(np.float32)
    intents /= np.linalg.norm(intents, axis=1, keepdims=True)
    x = np.empty((n, dim), dtype=np.float32)
    step = 100_000
    for s in range(0, n, step):
        t = min(n, s + step)
        v = intents[rng.integers(0, intents.shape[0], t - s)]
        v = v + noise * rng.standard_normal((t - s, dim)).astype(np.float32)
        x[s:t] = v / np.linalg.norm(v, axis=1, keepdims=True)
    accounts = rng.integers(0, max(2, n // 100), n).tolist()
    return x, accounts


def _timed(fn, repeat: int):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def run_scale(args) -> None:
    from threadpoolctl import threadpool_limits

    threadpool_limits(args.threads)
    if args.no_faiss:
        return run_scale_numpy(args)
    from dprag.rag_adapters.ann_links import FaissWindowSearch

    faiss_search = FaissWindowSearch(threads=args.threads)
    print(
        f"dim {args.dim}, θ = {args.theta}, {args.threads} threads (BLAS and FAISS); times are best of "
        f"{args.repeat}; load average at start {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(
        f"{'n':>9} {'W':>7} {'pairs':>10} {'numpy s':>9} {'faiss s':>9} {'faiss/numpy':>11} "
        f"{'faiss pairs/s':>13} {'ĉ':>4}"
    )
    for n in args.sizes:
        x, acc = synthetic(n, args.dim)
        for W in args.windows:
            W = min(W, n - 1)
            pairs = W * n - W * (W + 1) // 2
            tf, cf = _timed(
                lambda x=x, acc=acc, W=W: coalition_size(x, acc, args.theta, W, search=faiss_search), args.repeat
            )
            if n <= args.faiss_only_above:
                tn, cn = _timed(lambda x=x, acc=acc, W=W: coalition_size(x, acc, args.theta, W), args.repeat)
                if cn != cf:
                    raise SystemExit(f"MISMATCH at n={n}, W={W}: numpy {cn} vs faiss {cf}")
                num, ratio = f"{tn:9.2f}", f"{tn / tf:10.2f}x"
            else:
                num, ratio = f"{'-':>9}", f"{'-':>11}"
            print(
                f"{n:>9} {W:>7} {pairs:>10.2e} {num} {tf:9.2f} {ratio} {pairs / tf:13.2e} {cf:>4}"
                f"   (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
        del x, acc


def run_scale_numpy(args) -> None:
    """The verifier's path alone (``--no-faiss``): wall and CPU seconds, with the load average."""
    print(
        f"dim {args.dim}, θ = {args.theta}, {args.threads} BLAS threads; numpy streaming path only; best of "
        f"{args.repeat}; {os.cpu_count()} cores"
    )
    print(f"{'n':>9} {'W':>7} {'pairs':>10} {'wall s':>8} {'CPU s':>8} {'pairs/s':>10} {'ĉ':>4}  load before/after")
    for n in args.sizes:
        x, acc = synthetic(n, args.dim)
        for W in args.windows:
            W = min(W, n - 1)
            pairs = W * n - W * (W + 1) // 2
            load0 = os.getloadavg()[0]
            c0 = time.process_time()
            tn, cn = _timed(lambda x=x, acc=acc, W=W: coalition_size(x, acc, args.theta, W), args.repeat)
            cpu = (time.process_time() - c0) / args.repeat
            print(
                f"{n:>9} {W:>7} {pairs:>10.2e} {tn:8.1f} {cpu:8.1f} {pairs / tn:10.2e} {cn:>4}  "
                f"{load0:.1f}/{os.getloadavg()[0]:.1f}",
                flush=True,
            )
        del x, acc


def run_honest(args) -> None:
    from dprag.lab.estimator_calibration import (
        HonestConfig,
        clinic_attack_questions,
        clinic_honest_questions,
        operating_table,
        run_honest_calibration,
    )
    from dprag.rag_adapters.datasets import generate_clinic_corpus
    from dprag.rag_adapters.embedder import EmbeddingCache, MiniLMEmbedder

    corpus = generate_clinic_corpus(args.corpus_seed)
    pool_texts = clinic_honest_questions(corpus)
    attack = clinic_attack_questions(corpus, targets=args.targets, seed=args.seed)
    t0 = time.perf_counter()
    emb, cache = MiniLMEmbedder(), EmbeddingCache()
    pool = cache.embed_corpus(emb, pool_texts).astype(np.float64)
    flat = cache.embed_corpus(emb, [s for g in attack for s in g]).astype(np.float64)
    para = flat.reshape(len(attack), len(attack[0]), -1)
    print(
        f"clinic corpus seed {args.corpus_seed}: honest pool {len(pool_texts)} questions "
        f"({len(set(pool_texts))} distinct texts), {len(attack)} attack targets x {para.shape[1]} paraphrases, "
        f"{emb.fingerprint}; embedding {time.perf_counter() - t0:.0f} s (excluded below)"
    )
    iu = np.triu_indices(pool.shape[0], 1)
    gram = pool @ pool.T
    texts = np.asarray(pool_texts, dtype=object)
    distinct = texts[iu[0]] != texts[iu[1]]
    print(
        "pool pairwise cosine quantiles (50/90/99/99.9/max over pairs of distinct texts):",
        np.round(np.quantile(gram[iu][distinct], [0.5, 0.9, 0.99, 0.999, 1.0]), 3).tolist(),
        f"; pairs of identical texts: {int((~distinct).sum())}",
    )
    pc = np.einsum("mid,mjd->mij", para, para)[:, *np.triu_indices(para.shape[1], 1)]
    print(
        "attack paraphrase cosine min/median/max:",
        np.round([pc.min(), np.median(pc), pc.max()], 3).tolist(),
        "; attack probe vs pool max:",
        round(float((para[:, 0] @ pool.T).max()), 3),
    )
    for W in args.windows:
        cfg = HonestConfig(window=W or None)
        t1 = time.perf_counter()
        cal = run_honest_calibration(
            pool, para[:, 0], para, cfg, trials=args.trials, seed=args.seed, attack_trials=args.attack_trials
        )
        print()
        print(cal.to_markdown())
        print(f"ζ_eff (P-B) = {cal.info['zeta_effective']:.4f}")
        print()
        print(operating_table(cal))
        print(f"(run {time.perf_counter() - t1:.0f} s)", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("scale")
    s.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    s.add_argument("--windows", type=int, nargs="+", default=[1_000, 10_000])
    s.add_argument("--dim", type=int, default=384)
    s.add_argument("--theta", type=float, default=0.8)
    s.add_argument("--repeat", type=int, default=1)
    s.add_argument("--faiss-only-above", type=int, default=200_000)
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--no-faiss", action="store_true", help="time only the verifier's numpy path")
    h = sub.add_parser("honest")
    h.add_argument("--trials", type=int, default=100)
    h.add_argument("--attack-trials", type=int, default=20)
    h.add_argument("--windows", type=int, nargs="+", default=[0, 300, 30])
    h.add_argument("--targets", type=int, default=20)
    h.add_argument("--seed", type=int, default=0)
    h.add_argument("--corpus-seed", type=int, default=0)
    args = ap.parse_args(argv)
    run_scale(args) if args.mode == "scale" else run_honest(args)


if __name__ == "__main__":
    main()
