"""A private answer's latency beside its hardware floor and beside non-private RAG (issue 25 item 3).

Per question, in one run and interleaved (machine load drifts), on the clinic corpus with MiniLM + SmolLM2:

  private   the whole private answer of the experiments' method (default ``murag-ada-answer-vote`` with the
            defaults of lab/experiments/defaults.py): retrieval, MuRAG-Ada's release, the voters and the
            fallback in one batch of m + 1 rows (rows independent), the DP selection
  floor     the same m + 1 prompts (recorded from the private answer) prefilled and decoded for the same number
            of tokens in ONE coupled padded batch (``start_padded_ids``: one masked forward for the prefill,
            (B, 1) steps with standard attention) - what the hardware needs for those tokens, with none of the
            row independence the private path must keep
  v2        the earlier path: the m voters' batch, then the fallback as a second pass alone
  npr       Non-Private-RAG (k = 3 documents in one prompt, 24 tokens), the same question

Prints a table and writes --json-out: per arm the median and p90 seconds, the median per-question ratios
private / floor, v2 / floor and private / npr. Threads: $DPRAG_TORCH_THREADS (default: the idle cores).

Run:  python benchmarks/bench_private_latency.py [--method murag-ada-answer-vote] [--questions 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402


class Recording:
    """The generator, recording the prompts and token budget of every ``generate_many`` batch."""

    def __init__(self, inner):
        self.inner = inner
        self.batches: list[tuple[list, int]] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate_many(self, prompts, n):
        self.batches.append((list(prompts), int(n)))
        return self.inner.generate_many(prompts, n)

    def generate(self, prompt, n):
        return self.inner.generate(prompt, n)


def floor_seconds(gen, prompts, n: int) -> float:
    """Prefill and decode ``n`` tokens for ``prompts`` in one coupled padded batch (the hardware's floor)."""
    seqs = [gen.render(p, reserve=n + 1) for p in prompts]
    t = time.perf_counter()
    s = gen.start_padded_ids(seqs, headroom=n + 1)
    for _ in range(n - 1):
        s.advance_each([int(x) for x in np.argmax(s.logits(), axis=1)])
    s.close()
    return time.perf_counter() - t


def v2_seconds(gen, prompts, n: int) -> float:
    """The earlier path: the voters' batch, then the fallback alone."""
    t = time.perf_counter()
    gen.generate_many(prompts[:-1], n)
    gen.generate(prompts[-1], n)
    return time.perf_counter() - t


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="murag-ada-answer-vote")
    ap.add_argument("--questions", type=int, default=20)
    ap.add_argument("--eps", type=float, default=10.0)
    ap.add_argument("--seed", default="latency")
    ap.add_argument("--json-out", default="results/latency/private_latency.json")
    a = ap.parse_args(argv)

    from dprag.lab.experiments.cli import method_overrides
    from dprag.lab.experiments.defaults import RUN_WIDE
    from dprag.lab.experiments.methods import Context, Settings, get_method
    from dprag.lab.experiments.runner import CachedRetriever, method_context, select_questions
    from dprag.rag_adapters.datasets import generate_clinic_corpus
    from dprag.rag_adapters.embedder import MiniLMEmbedder
    from dprag.rag_adapters.generator import load_smollm2
    from dprag.rag_adapters.retriever import DenseRetriever

    ds = generate_clinic_corpus(0)
    questions = select_questions(ds, "test", a.questions, a.seed.encode())
    gen = load_smollm2()
    rec = Recording(gen)
    retriever = CachedRetriever(DenseRetriever(MiniLMEmbedder(), None, ds.documents))
    settings = Settings(
        queries=len(questions),
        max_tokens=int(RUN_WIDE["--max-tokens"]),
        private_tokens=(0,),
        public_completion=True,
        em_prior="non-rag",
        npr_k=(3,),
        key_words=(2,),
        answer_tokens=(int(RUN_WIDE["--answer-tokens"]),),  # a method's own length (MuRAG-Ada: 24) overrides it
        abstain_empty=True,
        answer_selection="seen",
        normalizer=str(RUN_WIDE["--normalizer"]),
    )
    base = Context(retriever, rec, settings, seed=b"bench-private-latency")
    ctx = method_context(base, method_overrides(a.method, "dense", m_given=False, taus_given=False, bins_given=False))
    spec = get_method(a.method)
    private = spec.build(ctx, a.eps, spec.grid(ctx, a.eps)[0])
    npr_spec = get_method("non-private-rag")
    npr = npr_spec.build(base, None, npr_spec.grid(base, None)[0])

    rows = []
    for i, item in enumerate(questions):
        rec.batches.clear()
        t = time.perf_counter()
        ans = private.answer(item)
        t_private = time.perf_counter() - t
        (prompts, n) = rec.batches[-1]
        t_floor = floor_seconds(gen, prompts, n)
        t_v2 = v2_seconds(gen, prompts, n)
        t = time.perf_counter()
        npr.answer(item)
        t_npr = time.perf_counter() - t
        rows.append(
            {
                "question": i,
                "rows": len(prompts),
                "prompt_tokens": sum(len(gen.render(p, reserve=n + 1)) for p in prompts),
                "fallback": bool(ans.info.get("fallback")),
                "private": t_private,
                "floor": t_floor,
                "v2": t_v2,
                "npr": t_npr,
            }
        )
        r = rows[-1]
        print(
            f"q{i:02d} rows={r['rows']} tokens={r['prompt_tokens']} private {t_private:.2f}s floor {t_floor:.2f}s "
            f"v2 {t_v2:.2f}s npr {t_npr:.2f}s",
            flush=True,
        )

    def stat(key):
        v = np.array([r[key] for r in rows])
        return {"median": float(np.median(v)), "p90": float(np.percentile(v, 90)), "mean": float(v.mean())}

    def ratio(num, den):
        return float(np.median([r[num] / r[den] for r in rows]))

    out = {
        "benchmark": "benchmarks/bench_private_latency.py",
        "command": "python benchmarks/bench_private_latency.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "method": a.method,
        "eps": a.eps,
        "questions": len(rows),
        "torch_threads": os.environ.get("DPRAG_TORCH_THREADS", "auto"),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cpus",
        "load_average_at_end": os.getloadavg(),
        "seconds": {k: stat(k) for k in ("private", "floor", "v2", "npr")},
        "ratio_private_to_floor": ratio("private", "floor"),
        "ratio_v2_to_floor": ratio("v2", "floor"),
        "ratio_private_to_npr": ratio("private", "npr"),
        "rows": rows,
    }
    print(json.dumps({k: v for k, v in out.items() if k != "rows"}, indent=1))
    if a.json_out:
        Path(a.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json_out).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return out


if __name__ == "__main__":
    main()
