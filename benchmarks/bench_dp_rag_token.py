"""Time per generated token of DPSparseVoteRAG (003 Alg. 3) against the batched decode-step limit and a
per-voter loop — measured side by side in one run, same model, dtype, threads and sequences.

Performance (spec/experiments.md): "time per generated token of DPSparseVoteRAG with m voters against the limit (one
KV-cached decode step of the same m+1 sequences with the same model, dtype and threads) — goal at most
1.5x the limit — and against a loop that calls the model once per voter."

  dp-sparse   ``accounting.rag.single_query.dp_sparse_vote_rag`` end to end after the prefill: per released
              token it reads the (m+1, V) logits, builds the vote histogram, runs the SVT test (and
              LimitedDomain on a discovery), then advances the batched session. Time from the end of the
              prefill to the end of the run, divided by the number of decode steps (advance calls).
  limit       the same m+1 prompts in one ``PaddedBatchedSession`` (one plain masked batched forward per step,
              rows coupled through padding: the earlier design); only ``advance(token)`` is timed,
              replaying exactly the tokens dp-sparse released. The floor a batched decode pays on this model;
              dp-sparse runs the row-independent ``BatchedSession`` (spec/adapters.md §1: goal <= 1.5x the limit).
  loop        m+1 single-sequence sessions (each with its own KV cache), replaying the same tokens; per
              token one (1, 1) forward pass per voter — "a loop that calls the model once per voter".

Prompts: a clinic-corpus test question; voter i reads the i-th supporting record (k = 1 document per voter,
as in 003 §IV), plus the no-retrieval lane. The DP run uses a large budget (ε_token = 8, ε_total = 400) so
it keeps generating instead of halting; the noise does not change the cost per step.

Run:  python benchmarks/bench_dp_rag_token.py                 # SmolLM2-135M-Instruct, m = 20
      python benchmarks/bench_dp_rag_token.py --model tiny    # random tiny Llama, seconds
Options: --m 10 20 (several), --tokens 16, --repeats 3, --threads N. Prints a table and the ratios; a JSON
line per m with --json. Numbers depend on machine load: compare the ratios of one run, not absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from dprag.accounting.noise.source import RandomSource  # noqa: E402
from dprag.accounting.rag.single_query import dp_sparse_vote_rag  # noqa: E402


class FixedRetriever:
    """Scores that put the chosen documents first, in order (the benchmark needs no embedder)."""

    def __init__(self, documents, chosen):
        self.docs = list(documents)
        self._scores = np.zeros(len(self.docs))
        self._scores[list(chosen)] = np.linspace(2.0, 1.0, len(chosen))

    def __len__(self):
        return len(self.docs)

    def scores(self, query):
        return self._scores.copy()

    def document(self, i):
        return self.docs[i]


class _TimedSession:
    def __init__(self, inner, log):
        self.inner, self.log = inner, log

    def logits(self):
        return self.inner.logits()

    def advance(self, token_id):
        self.log["tokens"].append(int(token_id))
        self.inner.advance(token_id)


class TimedGenerator:
    """Wraps a generator: records when the prefill (``start``) ends and every advanced token."""

    def __init__(self, inner):
        self.inner = inner
        self.log = {"tokens": [], "prefill_end": None, "prefill": None, "prompts": None}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def start(self, prompts, **kw):
        t = time.perf_counter()
        s = self.inner.start(prompts, **kw)
        self.log["prefill_end"] = time.perf_counter()
        self.log["prefill"] = self.log["prefill_end"] - t
        self.log["prompts"] = list(prompts)
        return _TimedSession(s, self.log)


def load(model: str):
    from dprag.rag_adapters.generator import load_smollm2, tiny_llama

    if model == "smollm2":
        return load_smollm2()
    return tiny_llama(
        0,
        num_hidden_layers=4,
        hidden_size=256,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=4096,
    )


def run_once(gen, corpus, question, chosen, m: int, tokens: int, seed: int) -> dict:
    retr = FixedRetriever(corpus.documents, chosen)
    tg = TimedGenerator(gen)
    t0 = time.perf_counter()
    ans = dp_sparse_vote_rag(
        question,
        retr,
        tg,
        m=m,
        k=1,
        epsilon_token=8.0,
        delta_token=1e-6,
        epsilon_total=400.0,
        delta_total=1e-4,
        max_tokens=tokens,
        source=RandomSource.from_seed(b"bench-dp-rag-token", str(seed).encode()),
    )
    t_end = time.perf_counter()
    toks = list(tg.log["tokens"])
    steps = len(toks)
    if steps == 0:
        raise SystemExit("the DP run released no token to advance with; raise --tokens or change the question")
    dp_total = t_end - tg.log["prefill_end"]
    prompts = tg.log["prompts"]

    # limit: the same m+1 prompts in the plain (padded, rows coupled) batched session, one batched KV-cached
    # step per token, only advance() timed -- the floor of a batched decode on this model
    sess = gen.start_padded_ids([gen.render(p, reserve=tokens) for p in prompts], headroom=tokens)
    t_lim = 0.0
    for tok in toks:
        t = time.perf_counter()
        sess.advance(tok)
        t_lim += time.perf_counter() - t
    sess.close()

    # loop: one single-sequence session per lane, the model called once per voter per token
    singles = [gen.start([p], max_new_tokens=tokens) for p in prompts]
    t = time.perf_counter()
    for tok in toks:
        for s in singles:
            s.advance(tok)
    t_loop = time.perf_counter() - t
    for s in singles:
        s.close()
    return {
        "steps": steps,
        "released": len(ans.token_ids),
        "prefill_s": tg.log["prefill"],
        "dp_total_s": t_end - t0,
        "dp_per_token_s": dp_total / steps,
        "limit_per_token_s": t_lim / steps,
        "loop_per_token_s": t_loop / steps,
        "private_tokens": ans.private_tokens,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("smollm2", "tiny"), default="smollm2")
    ap.add_argument("--m", type=int, nargs="+", default=[20])
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.threads:
        os.environ["DPRAG_TORCH_THREADS"] = str(args.threads)
    from dprag.rag_adapters.datasets import generate_clinic_corpus

    gen = load(args.model)
    import torch

    from dprag.rag_adapters.common import torch_threads

    torch.set_num_threads(args.threads or torch_threads())
    corpus = generate_clinic_corpus(0)
    item = next(q for q in corpus.split("test") if q.qid.endswith("-drug-p0") or "drug" in q.qid)
    print(
        f"model={getattr(gen, 'name', args.model)} dtype={gen.model.dtype} threads={torch.get_num_threads()} "
        f"question={item.question!r} tokens<={args.tokens} repeats={args.repeats}"
    )
    print(
        f"{'m':>4} {'steps':>5} {'prefill s':>9} {'dp-sparse ms':>12} {'limit ms':>9} {'loop ms':>9} "
        f"{'dp/limit':>8} {'loop/limit':>10} {'loop/dp':>8}"
    )
    for m in args.m:
        if len(item.relevant_ids) < m:
            raise SystemExit(f"question has only {len(item.relevant_ids)} supporting records (< m = {m})")
        chosen = list(item.relevant_ids[:m])
        run_once(gen, corpus, item.question, chosen, m, min(args.tokens, 3), 0)  # warm-up
        runs = [run_once(gen, corpus, item.question, chosen, m, args.tokens, r + 1) for r in range(args.repeats)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        ratio = {
            "dp_over_limit": med["dp_per_token_s"] / med["limit_per_token_s"],
            "loop_over_limit": med["loop_per_token_s"] / med["limit_per_token_s"],
            "loop_over_dp": med["loop_per_token_s"] / med["dp_per_token_s"],
        }
        print(
            f"{m:>4} {med['steps']:>5.0f} {med['prefill_s']:>9.2f} {1e3 * med['dp_per_token_s']:>12.1f} "
            f"{1e3 * med['limit_per_token_s']:>9.1f} {1e3 * med['loop_per_token_s']:>9.1f} "
            f"{ratio['dp_over_limit']:>8.2f} {ratio['loop_over_limit']:>10.2f} {ratio['loop_over_dp']:>8.2f}"
        )
        if args.json:
            print(
                json.dumps(
                    {
                        "m": m,
                        "model": args.model,
                        "median": med,
                        "ratios": ratio,
                        "runs": runs,
                        "threads": torch.get_num_threads(),
                    }
                )
            )
        verdict = "meets" if ratio["dp_over_limit"] <= 1.5 else "MISSES"
        print(
            f"     DPSparseVoteRAG per token = {ratio['dp_over_limit']:.2f}x the batched decode limit "
            f"({verdict} the 1.5x goal); the per-voter loop is {ratio['loop_over_dp']:.2f}x slower than it"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
