"""Local generators side by side (issue 25 item 4): SmolLM2-135M-Instruct vs Gemma 3 270M on the clinic corpus.

One run, one retriever (MiniLM, cached scores shared by every model), the same test questions, and for every
method the models one after the other (so a load change on the shared machine hits both alike). The settings
are ``dprag experiment privacy-utility``'s defaults (``lab/experiments/defaults.py``, built the way
``lab/experiments/cli.py`` builds them): Non-RAG and Non-Private-RAG (k = 3) with answers of up to 24 tokens, and
MuRAG-Ada's answer-level cell (m = 10, bins 20,90,1, seen selection, abstaining padded voters, 2 key words, 16
answer tokens, ε = 10, M = 1). No dev tuning: every cell here has a single setting.

Models: ``smollm2`` (``generator.load_smollm2``), ``gemma3-270m`` (``gemma.load_gemma3_270m``, plain-text
"completion" layout, the default) and ``gemma3-270m-chat`` (Gemma 3's chat template). Methods that spend ε run
only for the models in ``--private-models``.

    DPRAG_TORCH_THREADS=1 OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 nice -n 15 python benchmarks/bench_local_models.py \\
        --queries 30 --seed 0 --out results/local_models

Writes ``<out>/cells.jsonl`` (one line per finished cell, as it finishes), ``<out>/questions.jsonl`` (every
answer), ``<out>/local_models.json`` (the summary and the run's settings) and ``<out>/command.sh``. Stops
starting new cells once ``--budget-minutes`` have passed (a cell already running finishes).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

MODELS = ("smollm2", "gemma3-270m", "gemma3-270m-chat")


def load_model(name: str):
    if name == "smollm2":
        from dprag.rag_adapters.generator import load_smollm2

        return load_smollm2()
    from dprag.rag_adapters.gemma import load_gemma3_270m

    return load_gemma3_270m(template="chat" if name.endswith("-chat") else "completion")


def settings_like_cli(n_test: int):
    """The ``Settings`` and per-method overrides ``dprag experiment privacy-utility`` builds with no flag given."""
    from dprag.lab.experiments.cli import method_overrides
    from dprag.lab.experiments.defaults import OTHER_M, RUN_WIDE
    from dprag.lab.experiments.methods import Settings
    from dprag.lab.experiments.options import auto_ints, default_scale

    scale = default_scale("dense", None)
    return Settings(
        m=OTHER_M,
        m_grid=(OTHER_M,),
        docs_per_voter=auto_ints("--docs-per-voter", RUN_WIDE["--docs-per-voter"]),
        queries=n_test,
        max_tokens=int(RUN_WIDE["--max-tokens"]),
        M=1,
        delta=1e-5,
        taus=scale["taus"],
        edges=scale["edges"],
        private_tokens=auto_ints("--private-tokens", RUN_WIDE["--private-tokens"]),
        em_margin=15.0,
        public_completion=bool(RUN_WIDE["--public-completion"]),
        em_prior=str(RUN_WIDE["--em-prior"]),
        npr_k=auto_ints("--npr-k", RUN_WIDE["--npr-k"]),
        probabilities=(0.1, 0.3),
        vote_thresholds=(2.0,),
        key_words=auto_ints("--key-words", RUN_WIDE["--key-words"]),
        answer_tokens=auto_ints("--answer-tokens", RUN_WIDE["--answer-tokens"]),
        abstain_empty=bool(RUN_WIDE["--abstain-empty"]),
        answer_selection=str(RUN_WIDE["--answer-selection"]),
    ), lambda method: method_overrides(method, "dense", m_given=False, taus_given=False, bins_given=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2,gemma3-270m,gemma3-270m-chat")
    ap.add_argument("--private-models", default="smollm2,gemma3-270m")
    ap.add_argument("--methods", default="non-rag,non-private-rag,murag-ada-answer-vote")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--seed", default="0", help="question (and noise) seed, as the CLI's --seed")
    ap.add_argument("--corpus-seed", type=int, default=0)
    ap.add_argument("--eps", type=float, default=10.0)
    ap.add_argument("--budget-minutes", type=float, default=40.0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    from dprag.lab.experiments.methods import METHODS, Context
    from dprag.lab.experiments.runner import CachedRetriever, method_context, run_cell, select_questions
    from dprag.rag_adapters.datasets import generate_clinic_corpus
    from dprag.rag_adapters.embedder import MiniLMEmbedder
    from dprag.rag_adapters.retriever import DenseRetriever

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    private_models = {m.strip() for m in args.private_models.split(",") if m.strip()}
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in models if m not in MODELS] + [m for m in methods if m not in METHODS]
    if bad:
        ap.error(f"unknown model(s)/method(s): {bad}")

    t_start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("cells.jsonl", "questions.jsonl"):
        (out / name).unlink(missing_ok=True)
    cmd = "DPRAG_TORCH_THREADS={} OMP_NUM_THREADS={} HF_HUB_OFFLINE=1 nice -n 15 python {}".format(
        os.environ.get("DPRAG_TORCH_THREADS", ""),
        os.environ.get("OMP_NUM_THREADS", ""),
        " ".join(shlex.quote(a) for a in [sys.argv[0], *(sys.argv[1:] if argv is None else argv)]),
    )
    (out / "command.sh").write_text("#!/bin/sh\n# issue 25 item 4: local generators side by side\n" + cmd + "\n")

    ds = generate_clinic_corpus(args.corpus_seed)
    seed_b = str(args.seed).encode()
    test = select_questions(ds, "test", args.queries, seed_b)
    retriever = CachedRetriever(DenseRetriever(MiniLMEmbedder(), None, ds.documents))
    settings, overrides = settings_like_cli(len(test))

    gens, load_s = {}, {}
    for m in models:
        t = time.perf_counter()
        gens[m] = load_model(m)
        load_s[m] = time.perf_counter() - t
        print(f"loaded {m} ({gens[m].name}) in {load_s[m]:.0f}s", file=sys.stderr, flush=True)

    cells, skipped = [], []
    for method in methods:
        spec = METHODS[method]
        for m in models:
            if spec.uses_eps and m not in private_models:
                continue
            if time.perf_counter() - t_start > 60 * args.budget_minutes:
                skipped.append({"model": m, "method": method, "reason": f"budget of {args.budget_minutes} min spent"})
                continue
            ctx = Context(retriever, gens[m], settings, seed=b"dprag-experiments/" + seed_b)
            ctx = method_context(ctx, overrides(method))
            eps = args.eps if spec.uses_eps else None
            load0 = os.getloadavg()[0]

            def on_question(method_, eps_, split, hp, q, _m=m):
                rec = {"model": _m, "method": method_, "eps_total": eps_, "hp": hp, **q.__dict__}
                with (out / "questions.jsonl").open("a", encoding="utf-8") as f:
                    f.write(json.dumps(rec, sort_keys=True) + "\n")

            cell = run_cell(ctx, method, eps, _hp0(ctx, method, eps), test, "test", on_question=on_question)
            secs = [q.seconds for q in cell.questions]
            row = {
                "model": m,
                "generator": gens[m].name,
                "method": method,
                "eps_total": eps,
                "queries": cell.queries,
                "correct": int(sum(q.correct for q in cell.questions)),
                "accuracy": cell.accuracy,
                "f1": cell.f1,
                "rouge_l": cell.rouge_l,
                "seconds_per_question_mean": statistics.fmean(secs),
                "seconds_per_question_median": statistics.median(secs),
                "seconds": cell.seconds,
                "hp": cell.hp,
                "m": cell.m,
                "eps_certified": cell.eps_certified,
                "delta": cell.delta,
                "plurality_accuracy": cell.plurality_accuracy,
                "fallbacks": sum(1 for q in cell.questions if q.fallback),
                "loadavg_1min_start": load0,
                "loadavg_1min_end": os.getloadavg()[0],
            }
            cells.append(row)
            with (out / "cells.jsonl").open("a", encoding="utf-8") as f:
                f.write(json.dumps(row, sort_keys=True) + "\n")
            print(
                f"{m:>18} {method:>22} acc={cell.accuracy:.3f} ({row['correct']}/{cell.queries}) "
                f"{row['seconds_per_question_mean']:.2f} s/q",
                file=sys.stderr,
                flush=True,
            )

    import torch
    import transformers

    summary = {
        "command": cmd,
        "dataset": ds.name,
        "corpus_seed": args.corpus_seed,
        "question_seed": str(args.seed),
        "test_questions": len(test),
        "qids": [q.qid for q in test],
        "models": {m: {"generator": gens[m].name, "load_seconds": load_s[m]} for m in models},
        "settings": "dprag experiment privacy-utility defaults (lab/experiments/defaults.py); no dev tuning",
        "eps_total": args.eps,
        "threads": os.environ.get("DPRAG_TORCH_THREADS"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cells": cells,
        "skipped": skipped,
        "total_seconds": time.perf_counter() - t_start,
        "note": "seconds are wall clock on a shared 2-core machine (another experiment running, nice 15, 1 thread); "
        "compare models within this run only",
    }
    (out / "local_models.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return 0


def _hp0(ctx, method: str, eps):
    """The method's single grid setting (the run has no dev tuning)."""
    from dprag.lab.experiments.methods import METHODS

    grid = METHODS[method].grid(ctx, eps)
    if len(grid) != 1:
        raise SystemExit(f"{method}: {len(grid)} settings in the grid; this benchmark runs single settings only")
    return grid[0]


if __name__ == "__main__":
    raise SystemExit(main())
