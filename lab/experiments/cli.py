"""``dprag experiment privacy-utility``: the privacy–utility experiment from the command line.

Registered through the ``dprag.commands`` entry point ``experiment = "dprag.lab.experiments.cli:experiment"``.
Writes ``privacy_utility.csv``, ``privacy_utility.png``, ``predictions.jsonl`` and ``run.json`` to ``--out``;
with ``--json`` also ``privacy_utility.jsonl`` and one JSON object per (method, eps_total) row on stdout.
Bad input (unknown method, ε <= 0, queries < 1, a missing dataset or model package) exits with status 2.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import click

from dprag.errors import DpragError
from dprag.lab.experiments.defaults import OTHER_M, RUN_WIDE, TUNING_CORPUS_SEED, method_defaults
from dprag.lab.experiments.options import Fail, auto_ints, default_scale, finite_floats, positive_floats
from dprag.lab.experiments.report import progress_bar
from dprag.lab.runinfo import write_run_json
from dprag.rag_adapters.answer_keys import NORMALIZERS

MODELS = ("smollm2", "tiny", "toy")
DATASETS = ("clinic", "wiki-fanout")
DEFAULT_METHODS = "non-rag,non-private-rag,murag,murag-ada,naive-multi-rag"


def load_dataset(name: str, corpus_seed: int):
    from dprag.rag_adapters.datasets import generate_clinic_corpus, load_wiki_fanout

    if name == "clinic":
        return generate_clinic_corpus(corpus_seed)
    return load_wiki_fanout()


def tuning_backend(model: str, dataset, generator, kind: str, retriever=None):
    """A retriever over the tuning corpus that shares the test backend's embedder and the generator."""
    if kind == "words":
        from dprag.audit.testing.toy import ToyRetriever

        return ToyRetriever(dataset.documents)
    from dprag.rag_adapters.retriever import DenseRetriever

    emb = getattr(retriever, "embedder", None)
    if emb is None:
        from dprag.rag_adapters.embedder import MiniLMEmbedder

        emb = MiniLMEmbedder()
    return DenseRetriever(emb, None, dataset.documents)


def check_disjoint(test_ds, tuning_ds) -> None:
    """A tuning corpus must share no record with the test corpus (spec/experiments.md §3)."""
    shared = set(test_ds.documents) & set(tuning_ds.documents)
    if shared:
        raise click.BadParameter(
            f"the tuning corpus shares {len(shared)} record(s) with the test corpus", param_hint="--tuning-corpus-seed"
        )


def build_backend(model: str, dataset, threads: int | None = None):
    """(retriever, generator, score kind): 'dense' = MiniLM 100·cosine, 'words' = toy word overlap."""
    if threads:
        os.environ["DPRAG_TORCH_THREADS"] = str(threads)
    if model == "toy":
        from dprag.audit.testing.toy import ToyGenerator, ToyRetriever

        return ToyRetriever(dataset.documents), ToyGenerator(vocab_size=1 << 16), "words"
    from dprag.rag_adapters.embedder import MiniLMEmbedder
    from dprag.rag_adapters.generator import load_smollm2, tiny_llama
    from dprag.rag_adapters.retriever import DenseRetriever

    retriever = DenseRetriever(MiniLMEmbedder(), None, dataset.documents)
    gen = load_smollm2() if model == "smollm2" else tiny_llama(0, max_position_embeddings=4096)
    return retriever, gen, "dense"


def tuning_seed(dataset: str, corpus_seed: int, text: str | None) -> int | None:
    """``--tuning-corpus-seed``: an int, 'test' (None: the test corpus's dev split) or the default (the corpus
    the defaults were chosen on for clinic; the test corpus for wiki-fanout, which has one)."""
    if text is None:
        if dataset != "clinic":
            return None
        return TUNING_CORPUS_SEED if corpus_seed != TUNING_CORPUS_SEED else TUNING_CORPUS_SEED + 1
    if text.strip() == "test":
        return None
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(
            f"must be an integer or 'test', got {text!r}", param_hint="--tuning-corpus-seed"
        ) from None


def method_overrides(
    method: str, kind: str, *, m_given: bool, taus_given: bool, bins_given: bool, tokens_given: bool = False
) -> dict:
    """The per-method ``Settings`` fields of ``method``: its best-known m, τ grid, bins and answer tokens unless a
    flag set them."""
    from dprag.rag_adapters.scoring import ScoreBins

    d = method_defaults(method, kind)
    out: dict = {}
    if not m_given:
        out["m"], out["m_grid"] = d["m"], (d["m"],)
    if not taus_given and "taus" in d:
        out["taus"] = tuple(d["taus"])
    if not bins_given and "bins" in d:
        out["bins"] = tuple(d["bins"])
        out["edges"] = tuple(ScoreBins(*d["bins"]).edges().tolist())
    if not tokens_given and "answer_tokens" in d:
        out["answer_tokens"] = (d["answer_tokens"],)
    return out


def _jsonable(v):
    return list(v) if isinstance(v, tuple) else v


@click.group("experiment")
def experiment():
    """Experiments with real retrievers and generators (privacy–utility trade-off)."""


@experiment.command("report")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--baseline", default=None, help="method to test every cell against (one-sided Fisher exact p)")
def report(run_dir, baseline):
    """Markdown table of a privacy-utility run directory (finished or partial)."""
    from dprag.lab.experiments.report import load_rows, markdown

    try:
        click.echo(markdown(load_rows(run_dir), baseline))
    except DpragError as e:
        raise Fail(str(e)) from None


from dprag.lab.experiments.auc_vs_k import auc_vs_k_command as _auc_vs_k  # noqa: E402  (spec/experiments-collusion.md)

experiment.add_command(_auc_vs_k)


@experiment.command("privacy-utility")
@click.option("--dataset", type=click.Choice(DATASETS), required=True)
@click.option(
    "--methods",
    default=DEFAULT_METHODS,
    show_default=True,
    help="comma-separated: non-rag, non-private-rag, murag, murag-history, murag-gnmax, murag-ada, "
    "naive-multi-rag, subsampling-multi-rag, dp-sparse-vote-rag, dp-ksa, murag-answer-vote, "
    "murag-answer-vote-history, murag-ada-answer-vote, murag-ada-answer-vote-history "
    "(spec/experiments.md §1)",
)
@click.option("--eps", "eps_text", default="10", show_default=True, help="comma-separated total ε values")
@click.option("--queries", type=int, default=100, show_default=True, help="test questions (T)")
@click.option(
    "--dev-queries",
    type=int,
    default=20,
    show_default=True,
    help="dev questions for hyperparameter selection (0: first grid setting, no tuning)",
)
@click.option("--split", "test_split", default="test", show_default=True, help="split reported (test, dependent)")
@click.option("--dev-split", default="dev", show_default=True)
@click.option("--model", type=click.Choice(MODELS), default="smollm2", show_default=True)
@click.option(
    "--m",
    "m_text",
    default=None,
    help="voters; a comma-separated list is a grid chosen on dev (K = m × docs per voter). Default: each "
    "method's best-known m (30 for MuRAG, 10 for MuRAG-Ada's answer-level cells and every other method; "
    "lab/experiments/defaults.py)",
)
@click.option(
    "--docs-per-voter",
    "dpv_text",
    default=RUN_WIDE["--docs-per-voter"],
    show_default=True,
    help="documents each voter reads (000 Alg. 5's k); a list is a grid chosen on dev",
)
@click.option("--M", "max_retrievals", type=int, default=1, show_default=True, help="retrievals per document")
@click.option("--max-tokens", type=int, default=RUN_WIDE["--max-tokens"], show_default=True)
@click.option("--delta", type=float, default=1e-5, show_default=True, help="δ of the (ε, δ) methods")
@click.option(
    "--taus",
    default=None,
    help="MuRAG threshold grid (default: 52.5 on the MiniLM scale, chosen by the coverage rule on the tuning "
    "corpus; 4,6 on the toy word-overlap scale)",
)
@click.option(
    "--private-tokens",
    default=RUN_WIDE["--private-tokens"],
    show_default=True,
    help="grid of c, the private tokens per answer (ε_token is the largest the per-query budget allows; "
    "0 = auto: the most tokens keeping m·ε_token/4 >= --em-margin)",
)
@click.option(
    "--public-completion/--no-public-completion",
    default=RUN_WIDE["--public-completion"],
    show_default=True,
    help="after the c private tokens, continue with the no-context model (free post-processing; "
    "000 Alg. 5 stops there)",
)
@click.option(
    "--em-prior",
    type=click.Choice(["uniform", "non-rag"]),
    default=RUN_WIDE["--em-prior"],
    show_default=True,
    help="base measure of the exponential mechanism: uniform (000 Alg. 5) or the no-context model's "
    "next-token distribution (public)",
)
@click.option(
    "--em-margin",
    type=float,
    default=15.0,
    show_default=True,
    help="log-odds target of a unanimous vote for c = 0 (auto)",
)
@click.option("--probabilities", default="0.1,0.3", show_default=True, help="Poisson rates (subsampling)")
@click.option(
    "--bins",
    default=None,
    help="MuRAG-Ada bins LOW,HIGH,WIDTH on the dense score scale (default 20,90,1 for the answer-level cells, "
    "30,80,1 for the token-level ones)",
)
@click.option(
    "--npr-k",
    default=RUN_WIDE["--npr-k"],
    show_default=True,
    help="Non-Private-RAG's documents per prompt; a list is a grid chosen on dev",
)
@click.option("--seed", default="0", show_default=True, help="seed of noise and question sampling")
@click.option("--corpus-seed", type=int, default=0, show_default=True, help="clinic corpus seed")
@click.option(
    "--tuning-corpus-seed",
    default=None,
    help="clinic: tune the grids given on the command line on the dev split of the clinic corpus generated "
    "with this seed (it must share no record with the test corpus; spec/experiments.md §3); 'test': on the "
    f"test corpus's own dev split (not charged; every table says so). Default: {TUNING_CORPUS_SEED} (the "
    "corpus the defaults were chosen on), or 'test' for wiki-fanout (it has one corpus)",
)
@click.option(
    "--vote-thresholds",
    default="2",
    show_default=True,
    help="answer-vote: grid of the threshold t in nats (the fallback's base mass is 1 - e^-t)",
)
@click.option(
    "--key-words", default=RUN_WIDE["--key-words"], show_default=True, help="answer-vote: grid of words per answer key"
)
@click.option(
    "--answer-tokens",
    default=RUN_WIDE["--answer-tokens"],
    show_default=True,
    help="answer-vote: grid of the voters' answer length in tokens",
)
@click.option(
    "--abstain-empty/--no-abstain-empty",
    default=RUN_WIDE["--abstain-empty"],
    show_default=True,
    help="answer-vote: voters whose documents are all the empty padding "
    "abstain instead of voting their no-context answer (same ε: spec/accounting/rag.md §5.1)",
)
@click.option(
    "--answer-selection",
    type=click.Choice(["universal", "seen"]),
    default=RUN_WIDE["--answer-selection"],
    show_default=True,
    help="answer-vote: the DP selection over the voters' keys: universal (pure ε, exponential mechanism "
    "over every string with a length-priced base measure) or seen (the voters' own keys and a "
    "fallback at 1 + 2·ln(1/δ_q)/ε_q votes; (ε_q, δ_q) per query with δ_q = --delta / --M; "
    "spec/accounting/rag.md §5.2)",
)
@click.option(
    "--normalizer",
    type=click.Choice(sorted(NORMALIZERS)),
    default=RUN_WIDE["--normalizer"],
    show_default=True,
    help="answer-vote: the public normalisation of the voters' answers to keys (spec/answer-keys.md; v2 chosen "
    "on the seed-1 tuning corpus, §2 there)",
)
@click.option("--threads", type=int, default=None, help="torch threads")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object per (method, eps_total) row")
@click.option("--progress/--no-progress", default=True, show_default=True)
def privacy_utility(
    dataset,
    methods,
    eps_text,
    queries,
    dev_queries,
    test_split,
    dev_split,
    model,
    m_text,
    dpv_text,
    max_retrievals,
    max_tokens,
    delta,
    taus,
    private_tokens,
    public_completion,
    em_prior,
    em_margin,
    probabilities,
    bins,
    npr_k,
    seed,
    corpus_seed,
    tuning_corpus_seed,
    vote_thresholds,
    key_words,
    answer_tokens,
    abstain_empty,
    answer_selection,
    normalizer,
    threads,
    out_dir,
    as_json,
    progress,
):
    """Accuracy / F1 / ROUGE-L / retrieval precision of DP-RAG methods against total ε."""
    from dprag.lab.experiments.methods import METHODS, Context, Settings
    from dprag.lab.experiments.plots import (
        CSV_NAME,
        JSONL_NAME,
        PNG_NAME,
        PREDICTIONS_NAME,
        json_row,
        plot,
        write_csv,
        write_jsonl,
        write_predictions,
    )
    from dprag.lab.experiments.runner import CachedRetriever, Plan, method_context, run_plan, select_questions

    names = [x.strip() for x in methods.split(",") if x.strip()]
    unknown = [n for n in names if n not in METHODS]
    if unknown or not names:
        raise click.BadParameter(f"unknown method(s) {unknown}; choose from {sorted(METHODS)}", param_hint="--methods")
    eps = positive_floats("--eps", eps_text)
    m_given = auto_ints("--m", m_text) if m_text is not None else None
    dpv_grid = auto_ints("--docs-per-voter", dpv_text)
    npr_grid = auto_ints("--npr-k", npr_k)
    for name, vals in (("--m", m_given or (1,)), ("--docs-per-voter", dpv_grid), ("--npr-k", npr_grid)):
        if not vals or min(vals) < 1:
            raise click.BadParameter(f"every value must be >= 1, got {vals}", param_hint=name)
    m_grid = m_given or (OTHER_M,)
    m = m_grid[0]
    tuning_corpus_seed = tuning_seed(dataset, corpus_seed, tuning_corpus_seed)
    for name, v, lo in (
        ("--queries", queries, 1),
        ("--M", max_retrievals, 1),
        ("--max-tokens", max_tokens, 1),
        ("--dev-queries", dev_queries, 0),
    ):
        if v < lo:
            raise click.BadParameter(f"must be >= {lo}, got {v}", param_hint=name)
    if not (0 < delta < 1):
        raise click.BadParameter(f"must lie in (0, 1), got {delta}", param_hint="--delta")
    t_start = time.perf_counter()
    try:
        ds = load_dataset(dataset, corpus_seed)
        seed_b = str(seed).encode()
        test = select_questions(ds, test_split, queries, seed_b)
        tuning_ds = None
        if tuning_corpus_seed is not None:
            if dataset != "clinic":
                raise click.BadParameter(
                    "a tuning corpus seed needs --dataset clinic", param_hint="--tuning-corpus-seed"
                )
            tuning_ds = load_dataset(dataset, tuning_corpus_seed)
            check_disjoint(ds, tuning_ds)
        dev = select_questions(tuning_ds or ds, dev_split, dev_queries, seed_b) if dev_queries else []
        retriever, gen, kind = build_backend(model, ds, threads)
        bins_t = finite_floats("--bins", bins) if bins else None
        if bins_t is not None and len(bins_t) != 3:
            raise click.BadParameter("must be LOW,HIGH,WIDTH", param_hint="--bins")
        scale = default_scale(kind, bins_t)
        tokens_given = (
            click.get_current_context().get_parameter_source("answer_tokens") != click.core.ParameterSource.DEFAULT
        )
        per_method = {
            n: method_overrides(
                n,
                kind,
                m_given=m_given is not None,
                taus_given=bool(taus),
                bins_given=bool(bins),
                tokens_given=tokens_given,
            )
            for n in names
        }
        settings = Settings(
            m=m,
            m_grid=m_grid,
            docs_per_voter=dpv_grid,
            queries=len(test),
            max_tokens=max_tokens,
            M=max_retrievals,
            delta=delta,
            taus=finite_floats("--taus", taus) if taus else scale["taus"],
            edges=scale["edges"],
            private_tokens=auto_ints("--private-tokens", private_tokens),
            em_margin=em_margin,
            public_completion=public_completion,
            em_prior=em_prior,
            npr_k=npr_grid,
            probabilities=positive_floats("--probabilities", probabilities),
            vote_thresholds=finite_floats("--vote-thresholds", vote_thresholds),
            key_words=auto_ints("--key-words", key_words),
            answer_tokens=auto_ints("--answer-tokens", answer_tokens) if answer_tokens else (),
            abstain_empty=abstain_empty,
            answer_selection=answer_selection,
            normalizer=normalizer,
        )
        if (
            min(settings.vote_thresholds) < 0
            or min(settings.key_words) < 1
            or (settings.answer_tokens and min(settings.answer_tokens) < 1)
        ):
            raise click.BadParameter(
                "thresholds must be >= 0, key words and answer tokens >= 1", param_hint="--vote-thresholds"
            )
        if any(p > 1 for p in settings.probabilities):
            raise click.BadParameter("probabilities must lie in (0, 1]", param_hint="--probabilities")
        m_max = max([*m_grid, *(int(ov.get("m", m)) for ov in per_method.values())])
        if m_max * max(dpv_grid) > len(ds.documents):
            raise click.BadParameter(
                f"K = m × docs per voter = {m_max * max(dpv_grid)} exceeds the corpus size {len(ds.documents)}",
                param_hint="--m",
            )
        ctx = Context(CachedRetriever(retriever), gen, settings, seed=b"dprag-experiments/" + seed_b)
        dev_ctx = None
        needs_dev = any(
            len(METHODS[n].grid(method_context(ctx, per_method.get(n, {})), e if METHODS[n].uses_eps else None)) > 1
            for n in names
            for e in eps
        )
        if not dev_queries:
            tuning = "none (first grid setting)"
        elif not needs_dev:
            tuning = "none (a single setting: the defaults of lab/experiments/defaults.py or the flags given)"
        elif tuning_ds is not None:
            dev_ctx = Context(
                CachedRetriever(tuning_backend(model, tuning_ds, gen, kind, retriever)),
                gen,
                settings,
                seed=b"dprag-experiments/tuning/" + seed_b,
            )
            tuning = (
                f"dev split of a disjoint tuning corpus ({tuning_ds.name}, corpus seed {tuning_corpus_seed}; "
                f"no shared record), {len(dev)} questions"
            )
        else:
            tuning = f"dev split of the test corpus, {len(dev)} questions (NOT charged: spec/experiments.md §3)"
        bar = progress_bar(progress)

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        meta = {"dataset": ds.name, "model": model, "n_documents": len(ds.documents)}
        printed = []

        def on_cell(cell):
            row = json_row(cell, meta)
            printed.append(row)
            with (out / "cells_partial.jsonl").open("a", encoding="utf-8") as f:  # survives an interrupted run
                f.write(json.dumps(row, sort_keys=True) + "\n")
            if as_json:
                click.echo(json.dumps(row, sort_keys=True))
            else:
                acc = "n/a" if cell.queries == 0 else f"{cell.accuracy:.3f}"
                click.echo(
                    f"{cell.method:>22}  eps={cell.eps_total}  acc={acc}  f1={cell.f1:.3f}  "
                    f"n={cell.queries}  {cell.seconds:.0f}s  hp={cell.hp}",
                    err=True,
                )

        def on_question(method, eps_total, split, hp, q):  # one line per answered question, as it happens
            rec = {"method": method, "eps_total": eps_total, "split": split, "hp": hp, **q.__dict__}
            with (out / "questions_partial.jsonl").open("a", encoding="utf-8") as f:
                f.write(json.dumps(rec, sort_keys=True) + "\n")

        cells = run_plan(
            ctx,
            Plan(
                tuple(names),
                eps,
                tuple(test),
                tuple(dev),
                test_split,
                dev_context=dev_ctx,
                tuning=tuning,
                per_method=per_method,
            ),
            bar,
            on_cell,
            on_question,
        )
    except DpragError as e:
        raise Fail(str(e)) from None
    write_csv(cells, out / CSV_NAME, meta)
    write_predictions(cells, out / PREDICTIONS_NAME)
    if as_json:
        write_jsonl(cells, out / JSONL_NAME, meta)
    m_label = m if len(m_grid) == 1 else "/".join(map(str, m_grid))
    plot(cells, out / PNG_NAME, title=f"{ds.name}, {model}, m={m_label}, T={len(test)} ({test_split})")
    run = {
        "argv": sys.argv[1:],
        "dataset": ds.name,
        "dataset_info": {k: v for k, v in dict(ds.info).items() if k != "protocol"},
        "model": model,
        "generator": getattr(gen, "name", type(gen).__name__),
        "m": list(m_grid),
        "per_method": {n: {k: _jsonable(v) for k, v in ov.items() if k != "edges"} for n, ov in per_method.items()},
        "defaults": "lab/experiments/defaults.py (chosen on the clinic corpus of seed "
        f"{TUNING_CORPUS_SEED}; spec/experiments.md §1.1)",
        "docs_per_voter": list(dpv_grid),
        "M": max_retrievals,
        "public_completion": public_completion,
        "abstain_empty": abstain_empty,
        "answer_selection": answer_selection,
        "normalizer": normalizer,
        "em_prior": em_prior,
        "test_split": test_split,
        "test_questions": len(test),
        "dev_questions": len(dev),
        "methods": names,
        "eps": list(eps),
        "seed": str(seed),
        "corpus_seed": corpus_seed,
        "tuning_corpus_seed": tuning_corpus_seed,
        "tuning": tuning,
        "threads": os.environ.get("DPRAG_TORCH_THREADS"),
        "total_seconds": time.perf_counter() - t_start,
    }
    write_run_json(out, run, seed=seed)


from dprag.lab.experiments.mia import mia as _mia  # noqa: E402  (membership inference, spec/experiments-mia.md)

experiment.add_command(_mia)

from dprag.lab.experiments.mia_table import mia_table as _mia_table  # noqa: E402  (the MIA table from run directories)

experiment.add_command(_mia_table)

from dprag.lab.experiments.coalition_probe import coalition_probe as _coalition_probe  # noqa: E402  (spec/experiments-mia.md)

experiment.add_command(_coalition_probe)

from dprag.lab.demo.calibration import demo_calibration as _demo_calibration  # noqa: E402  (spec/demo.md)

experiment.add_command(_demo_calibration)

from dprag.lab.experiments.normalizer_check import normalizer_check as _normalizer_check  # noqa: E402  (spec/answer-keys.md)

experiment.add_command(_normalizer_check)
