"""Decode-step cost of the batched, KV-cached voter session vs per-voter loops (SmolLM2-135M-Instruct).

DPVoteRAG / DPSparseVoteRAG (003 Alg. 2-3) need, at every step, the next-token distribution of m voters
that each read their own retrieved record. Three ways to get them, timed side by side in one run:

  batched   one BatchedSession for all m voters (rows independent): public prefix computed once, per-row
            prefill, one (m, 1) forward per step with per-row attention
  padded    the earlier coupled PaddedBatchedSession (one masked (m, 1) forward): the decode limit
  loop-kv   m single-prompt sessions (each with its own KV cache), one (1, 1) forward per voter per step
  loop-full m full forward passes per step without any cache (what a naive implementation does)

Also prefill throughput: prompt tokens per second of the batched prefill (shared prefix on / off) vs
per-voter prefills. Prompts: clinic-corpus questions with one record per voter (k = 1 as in 003 §IV).

Run:  python benchmarks/bench_generator.py [--voters 10 30] [--steps 6] [--threads N]
Prints a table and the ratios (baseline = batched). Numbers depend on machine load: compare ratios.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from dprag.accounting.protocols import Prompt  # noqa: E402
from dprag.rag_adapters.datasets import generate_clinic_corpus  # noqa: E402
from dprag.rag_adapters.generator import load_smollm2  # noqa: E402


def voter_prompts(m: int, seed: int = 0) -> list[Prompt]:
    corpus = generate_clinic_corpus(seed)
    q = corpus.split("test")[0]
    docs = list(q.relevant_ids[:m])
    return [Prompt(q.question, (corpus.documents[i],)) for i in docs]


def _median_time(fn, reps: int) -> float:
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def bench(gen, m: int, steps: int, full_steps: int, reps: int) -> dict:
    """Medians over repetitions, methods interleaved step by step (machine load drifts)."""
    prompts = voter_prompts(m)
    seqs = [gen.render(p, reserve=steps + 1) for p in prompts]
    n_tok = sum(len(s) for s in seqs)
    tokens = [int(t) for t in gen.encode(" The clinic prescribes the drug")][:steps]
    tokens += [tokens[-1]] * (steps - len(tokens))
    res = {"m": m, "prompt_tokens": n_tok, "mean_len": n_tok / m}

    # prefill: batched with shared prefix, batched without, one prompt at a time
    pp = gen.public_prefix(prompts[0])
    res["prefill_batched"] = _median_time(lambda: gen.start_ids(seqs, public_prefix=pp).close(), reps)
    res["prefill_batched_noshare"] = _median_time(lambda: gen.start_ids(seqs).close(), reps)
    res["prefill_padded"] = _median_time(lambda: gen.start_padded_ids(seqs).close(), reps)
    res["prefill_loop"] = _median_time(lambda: [gen.start_ids([s]).close() for s in seqs], reps)

    # decode: batched session vs one KV-cached session per voter, interleaved per step
    sess = gen.start_ids(seqs, public_prefix=pp)
    padded = gen.start_padded_ids(seqs)
    res["prefix"] = sess.prefix_length
    first = sess.logits().copy()
    singles = [gen.start_ids([s]) for s in seqs]
    tb, tk, tp = [], [], []
    for tok in tokens:
        t = time.perf_counter()
        sess.advance(tok)
        sess.logits()
        tb.append(time.perf_counter() - t)
        t = time.perf_counter()
        padded.advance(tok)
        padded.logits()
        tp.append(time.perf_counter() - t)
        t = time.perf_counter()
        for s in singles:
            s.advance(tok)
            s.logits()
        tk.append(time.perf_counter() - t)
    res["step_batched"], res["step_loop_kv"] = float(np.median(tb)), float(np.median(tk))
    res["step_padded"] = float(np.median(tp))
    last = sess.logits()
    res["maxdiff_kv"] = float(max(np.abs(s.logits()[0] - last[i]).max() for i, s in enumerate(singles)))

    # full forward passes without cache, all voters, ``full_steps`` steps (each costs ~ m prefills)
    tf = []
    for j in range(full_steps):
        t = time.perf_counter()
        out = [gen.reference_logits(s + tokens[:j]) for s in seqs]
        tf.append(time.perf_counter() - t)
        if j == 0:
            res["maxdiff_full"] = float(max(np.abs(out[i] - first[i]).max() for i in range(m)))
    res["step_loop_full"] = float(np.median(tf))
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--voters", type=int, nargs="+", default=[10, 30])
    ap.add_argument("--steps", type=int, default=8, help="decoding steps timed (median reported)")
    ap.add_argument("--full-steps", type=int, default=1, help="steps of the no-cache loop (slow)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each prefill measurement")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: rag_adapters' choice, the cores not already busy)",
    )
    args = ap.parse_args(argv)
    if args.threads:
        os.environ["DPRAG_TORCH_THREADS"] = str(args.threads)
    t = time.perf_counter()
    gen = load_smollm2()
    print(
        f"SmolLM2-135M-Instruct (float32, CPU) loaded in {time.perf_counter() - t:.1f} s; torch threads = "
        f"{gen._torch.get_num_threads()}; load average = {os.getloadavg()[0]:.2f}"
    )
    gen.start([Prompt("warm up?", ("x",))]).close()
    rows = [bench(gen, m, args.steps, args.full_steps, args.reps) for m in args.voters]
    print()
    print(
        f"{'m':>3} {'len':>5} {'prefix':>6} | {'step batched':>12} {'loop kv':>9} {'loop full':>9} | "
        f"{'kv/batched':>10} {'full/batched':>12} | {'prefill tok/s: batched':>22} {'no-share':>9} {'loop':>7}"
    )
    for r in rows:
        tps = lambda sec, r=r: r["prompt_tokens"] / sec  # noqa: E731
        print(
            f"{r['m']:>3} {r['mean_len']:>5.0f} {r['prefix']:>6} | {1e3 * r['step_batched']:>10.1f}ms "
            f"{1e3 * r['step_loop_kv']:>7.1f}ms {1e3 * r['step_loop_full']:>7.0f}ms | "
            f"{r['step_loop_kv'] / r['step_batched']:>9.1f}x {r['step_loop_full'] / r['step_batched']:>11.1f}x | "
            f"{tps(r['prefill_batched']):>22.0f} {tps(r['prefill_batched_noshare']):>9.0f} "
            f"{tps(r['prefill_loop']):>7.0f}"
        )
    for r in rows:
        print(
            f"m={r['m']}: row-independent batched step {1e3 * r['step_batched']:.1f} ms vs padded (coupled) "
            f"batched step {1e3 * r['step_padded']:.1f} ms = {r['step_batched'] / r['step_padded']:.2f}x the "
            f"KV-cached decode limit (goal <= 1.5x); prefill {r['prefill_batched']:.2f} s vs padded "
            f"{r['prefill_padded']:.2f} s"
        )
    print(f"load average at end = {os.getloadavg()[0]:.2f}")
    print("baseline = batched (one BatchedSession); ratios > 1 mean the baseline is faster")
    print(
        "max |logit difference| vs batched -- per-voter KV sessions after all steps: "
        + ", ".join(f"m={r['m']}: {r['maxdiff_kv']:.1e}" for r in rows)
        + "; full forward at step 0: "
        + ", ".join(f"m={r['m']}: {r['maxdiff_full']:.1e}" for r in rows)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
