"""``dprag experiment mia``: membership inference (S²MIA, Interrogation Attack) against the DP-RAG pipelines
on the clinic corpus, with canary exposure per channel (spec/experiments-mia.md).

Protocol:

1. Corpus: ``generate_clinic_corpus(corpus_seed, n_conditions, n_distractors)``. A seeded permutation
   (``RandomSource.from_seed(seed, b"mia/targets")``, exact Fisher–Yates) of all record ids gives the
   ``members`` targets (first) and the ``nonmembers`` targets (next). The system's corpus is every record
   except the non-member targets (held out); so members are in it, non-members are not.
2. Backend: MiniLM dense retriever (the full corpus's embeddings, rows of the held-out records dropped) and
   SmolLM2-135M-Instruct; ``--model toy`` uses the weight-free toy retriever/generator (tests).
3. Cells: attack × method × ε_total. Each cell is a fresh session of the method (``methods.METHODS``; the
   first grid setting at the run's settings, no tuning) that answers *every* query of the attack for every
   target, members and non-members interleaved in one seeded order; ``Settings.queries`` = the cell's
   number of queries (the T of the composed methods). The session's ``guarantee()`` after the last query is
   the (ε, δ) certified for the whole attack session; beside each AUC: ``auc_upper_bound(ε, δ)`` (tight
   bound for any test against an (ε, δ)-DP mechanism) and 002's Cor. 3.12 form.
4. Scores: S²MIA ``s2mia.s2mia_score``; IA ``interrogation.ia_score`` (questions generated once per target,
   before any cell, by the local LLM with template fill-up; written to ``questions.jsonl``).
5. Metrics: AUC with DeLong 95% CI, TPR at 1% FPR; canary exposure (``canary.ExposureCounter``) over all
   answers of the cell.

Outputs in ``--out``: ``mia.csv``, ``mia.jsonl`` (rows, schema ``dprag.mia-row/1``), ``scores.jsonl``
(schema ``dprag.mia-score/1``, one line per target per cell), ``questions.jsonl``, ``mia_roc.png``,
``run.json`` (parameters, seed, package versions, timings).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import click
import numpy as np

from dprag.accounting.collusion import auc_upper_bound, cor_3_12_auc_upper
from dprag.accounting.errors import check_positive_int
from dprag.accounting.noise.source import RandomSource
from dprag.errors import DpragError, InvalidParameterError
from dprag.lab.attacks import canary as canary_mod
from dprag.lab.attacks.interrogation import IAQuestion, build_questions, ia_query, ia_score, llm_questions_many
from dprag.lab.attacks.s2mia import s2mia_probe, s2mia_score
from dprag.lab.auc import auc_ci, tpr_at_fpr
from dprag.lab.experiments.options import Fail, choices, positive_floats
from dprag.lab.experiments.report import progress_bar
from dprag.lab.runinfo import write_run_json
from dprag.rag_adapters.datasets.base import QAItem

ROW_SCHEMA = "dprag.mia-row/1"
SCORE_SCHEMA = "dprag.mia-score/1"
ATTACKS = ("s2mia", "interrogation")
MIA_METHODS = ("non-rag", "non-private-rag", "murag", "murag-ada", "dp-sparse-vote-rag", "dp-ksa")
ROW_COLUMNS = (
    "schema",
    "attack",
    "method",
    "eps_total",
    "eps_certified",
    "delta_certified",
    "auc",
    "auc_se",
    "auc_ci_lo",
    "auc_ci_hi",
    "auc_halfwidth",
    "se_method",
    "tpr_at_1pct_fpr",
    "auc_bound",
    "auc_bound_cor312",
    "members",
    "nonmembers",
    "queries",
    "questions_per_record",
    "llm_question_share",
    "exposed_members",
    "exposed_nonmembers",
    "cited_members",
    "cited_nonmembers",
    "exposed_per_member",
    "cited_per_member",
    "seconds",
    "seconds_per_record",
    "seconds_per_query",
    "hp",
    "model",
    "corpus",
    "error",
)


# ----------------------------------------------------------------------------------------------------------
# targets and worlds
# ----------------------------------------------------------------------------------------------------------
def _permutation(n: int, src: RandomSource) -> list[int]:
    idx = list(range(n))
    for i in range(n - 1, 0, -1):
        j = int(src.uniform_below(i + 1, 1)[0])
        idx[i], idx[j] = idx[j], idx[i]
    return idx


def choose_targets(n_records: int, members: int, nonmembers: int, seed: bytes) -> tuple[list[int], list[int]]:
    """(member ids, non-member ids) of the full corpus: disjoint, from one seeded permutation."""
    members = check_positive_int("members", members)
    nonmembers = check_positive_int("nonmembers", nonmembers)
    if members + nonmembers > n_records:
        raise InvalidParameterError(
            "members", f"members + non-members = {members + nonmembers} exceeds the corpus size {n_records}", members
        )
    perm = _permutation(n_records, RandomSource.from_seed(seed, b"mia/targets"))
    return perm[:members], perm[members : members + nonmembers]


@dataclass(frozen=True)
class Target:
    key: str  # record code (ClinicCorpus.doc_keys) or "doc-<id>"
    full_id: int  # id in the generated corpus
    member: bool
    text: str
    secret: str
    name: str
    kind: str


@dataclass
class World:
    """The system's corpus (members kept, held-out targets removed) and the id maps."""

    documents: tuple[str, ...]
    keep: np.ndarray  # full ids in system order
    sys_id: dict[int, int]  # full id -> system id
    targets: list[Target]


def world_of_run(run: dict) -> World:
    """The world of a run from its ``run.json`` (corpus parameters, targets' seed and sizes), as the command built
    it."""
    from dprag.rag_adapters.datasets.clinic import generate_clinic_corpus

    corpus = generate_clinic_corpus(
        run["corpus_seed"], n_conditions=run["n_conditions"], n_distractors=run["n_distractors"]
    )
    mem, non = choose_targets(len(corpus.documents), run["members"], run["nonmembers"], str(run["seed"]).encode())
    world = build_world(corpus, mem, non)
    for name, member in (("member_keys", True), ("nonmember_keys", False)):
        if name in run and list(run[name]) != [t.key for t in world.targets if t.member == member]:
            raise InvalidParameterError(f"run.json: {name}", "differ from the targets its corpus and seed select")
    return world


def build_world(corpus, member_ids: Sequence[int], nonmember_ids: Sequence[int]) -> World:
    out = set(int(i) for i in nonmember_ids)
    keep = np.array([i for i in range(len(corpus.documents)) if i not in out], dtype=np.int64)
    sys_id = {int(f): s for s, f in enumerate(keep.tolist())}
    keys = corpus.doc_keys or tuple(f"doc-{i}" for i in range(len(corpus.documents)))
    can = {c.doc_id: c for c in corpus.canaries}
    targets = []
    for ids, member in ((member_ids, True), (nonmember_ids, False)):
        for i in ids:
            c = can[int(i)]
            targets.append(Target(keys[int(i)], int(i), member, corpus.documents[int(i)], c.secret, c.name, c.kind))
    return World(tuple(corpus.documents[i] for i in keep.tolist()), keep, sys_id, targets)


# ----------------------------------------------------------------------------------------------------------
# backend
# ----------------------------------------------------------------------------------------------------------
def build_backend(model: str, corpus, world: World):
    """(retriever over the world's corpus, generator): dense MiniLM + SmolLM2 / tiny Llama, or the toy pair."""
    if model == "toy":
        from dprag.audit.testing.toy import ToyGenerator, ToyRetriever

        return ToyRetriever(world.documents), ToyGenerator(vocab_size=1 << 16)
    from dprag.rag_adapters.embedder import EmbeddingCache, MiniLMEmbedder
    from dprag.rag_adapters.generator import load_smollm2, tiny_llama
    from dprag.rag_adapters.index import ExactIndex
    from dprag.rag_adapters.retriever import DenseRetriever

    emb = MiniLMEmbedder()
    full = EmbeddingCache().embed_corpus(emb, corpus.documents)  # cached per corpus hash
    index = ExactIndex(emb.dim)
    index.add(np.asarray(full)[world.keep])
    retriever = DenseRetriever(emb, index, world.documents)
    gen = load_smollm2() if model == "smollm2" else tiny_llama(0, max_position_embeddings=4096)
    return retriever, gen


# ----------------------------------------------------------------------------------------------------------
# questions of the interrogation attack
# ----------------------------------------------------------------------------------------------------------
_AGE = re.compile(r"(?:Patient: [^,]+, (\d+),|age (\d+)\)|, (\d+)-year-old)")
_DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")


def template_pairs(t: Target) -> list[tuple[str, str]]:
    """Questions from the record's own fields (the fill-up of ``interrogation.build_questions``)."""
    out = [(f"What is {t.name}'s {t.kind}?", t.secret)]
    m = _AGE.search(t.text)
    if m:
        out.append((f"How old is {t.name}?", next(g for g in m.groups() if g)))
    m = _DATE.search(t.text)
    if m:
        out.append((f"On what date was {t.name} seen at the clinic?", m.group(1)))
    if t.key.startswith("C-"):
        out.append((f"What is the record code of {t.name}'s clinic visit?", t.key))
    return out


def ia_context(t: Target) -> str:
    return f"About the clinic record of patient {t.name}:"


def _chunks(items: Sequence, size: int) -> list[list]:
    """``items`` in consecutive groups of ``size`` (the last may be shorter), order kept."""
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def interrogation_questions(
    targets: Sequence[Target],
    generator,
    n: int,
    *,
    use_llm: bool = True,
    progress: Callable | None = None,
    batch: int = 1,
) -> tuple[dict[str, list[IAQuestion]], dict, float]:
    """Per target key: its ``n`` questions; plus the raw LLM generations and the seconds spent. ``batch``
    targets share one generation batch (the same questions as one at a time)."""
    batch = check_positive_int("batch", batch)
    t0 = time.perf_counter()
    out, raw = {}, {}
    chunks = _chunks(targets, batch)
    it = progress(chunks, desc="IA questions") if progress else chunks
    for chunk in it:
        got = llm_questions_many(generator, [t.text for t in chunk]) if use_llm else [([], [])] * len(chunk)
        for t, (gen_q, texts) in zip(chunk, got, strict=False):
            raw[t.key] = texts
            out[t.key] = build_questions(n, gen_q, template_pairs(t))
    return out, raw, time.perf_counter() - t0


# ----------------------------------------------------------------------------------------------------------
# one cell
# ----------------------------------------------------------------------------------------------------------
@dataclass
class CellOut:
    row: dict
    scores: list[dict] = field(default_factory=list)
    members: list[float] = field(default_factory=list)
    nonmembers: list[float] = field(default_factory=list)


def _order(targets: Sequence[Target], seed: bytes) -> list[Target]:
    perm = _permutation(len(targets), RandomSource.from_seed(seed, b"mia/order"))
    return [targets[i] for i in perm]


def _fmt_eps(e: float | None) -> float | None:
    return None if e is None or (isinstance(e, float) and not math.isfinite(e)) else float(e)


def exposure_counter(world: World):
    """The canary counter of a world: every target's secret, and the system id of every member's record (a
    held-out record has none, so it is never cited)."""
    return canary_mod.ExposureCounter(
        {t.key: t.secret for t in world.targets},
        {t.key: world.sys_id.get(t.full_id) if t.member else None for t in world.targets},
    )


def run_cell(
    attack: str,
    method: str,
    eps: float | None,
    *,
    retriever,
    generator,
    settings,
    world: World,
    questions: dict[str, list[IAQuestion]] | None,
    seed: bytes,
    prefix_fraction: float = 0.5,
    progress: Callable | None = None,
    meta: dict | None = None,
    batch: int = 1,
    on_score: Callable[[dict], None] | None = None,
) -> CellOut:
    """Every query of ``attack`` for every target, in one fresh session of ``method`` at total ``eps``.

    Targets go to the session ``batch`` at a time (``Session.answer_many``: the same answers in the same order;
    only a stateless pipeline — Non-Private-RAG — decodes them in one batch); ``on_score`` sees every target's
    score record as soon as it exists (the command appends it to ``scores.jsonl``, so a stopped run keeps them)."""
    batch = check_positive_int("batch", batch)
    from dprag.lab.experiments.methods import Context, get_method

    spec = get_method(method)
    targets = _order(world.targets, seed)
    if attack == "s2mia":
        plan = {t.key: [s2mia_probe(t.key, t.text, prefix_fraction).query] for t in targets}
    elif attack == "interrogation":
        plan = {t.key: [ia_query(ia_context(t), q.question) for q in questions[t.key]] for t in targets}
    else:
        raise InvalidParameterError("attack", f"must be one of {ATTACKS}", attack)
    n_queries = sum(len(v) for v in plan.values())
    ctx = Context(retriever, generator, replace(settings, queries=n_queries), seed=b"dprag-mia/" + seed)
    hp = spec.grid(ctx, eps)[0]
    base = {
        "schema": ROW_SCHEMA,
        "attack": attack,
        "method": method,
        "eps_total": eps,
        "hp": hp,
        "members": sum(t.member for t in targets),
        "nonmembers": sum(not t.member for t in targets),
        "queries": n_queries,
        **(meta or {}),
    }
    try:
        session = spec.build(ctx, eps if spec.uses_eps else None, hp)
    except DpragError as e:
        return CellOut({**base, "error": f"infeasible: {e}"})
    counter = exposure_counter(world)
    out = CellOut(base)
    t_cell = time.perf_counter()
    chunks = _chunks(targets, batch)
    it = progress(chunks, desc=f"{attack} {method} eps={eps}") if progress else chunks
    try:
        for chunk in it:
            t0 = time.perf_counter()
            items = [
                QAItem(qid=f"{attack}-{t.key}-{j}", question=q, answers=())
                for t in chunk
                for j, q in enumerate(plan[t.key])
            ]
            answered = iter(session.answer_many(items))  # in order; a stateless pipeline batches them
            per_target = (time.perf_counter() - t0) / len(chunk)
            for t in chunk:
                answers, retrieved = [], []
                for _ in plan[t.key]:
                    ans = next(answered)
                    answers.append(ans.text)
                    retrieved.append([int(i) for i in np.asarray(ans.retrieved).ravel()])
                    counter.add(ans.text, retrieved[-1])
                if attack == "s2mia":
                    score = s2mia_score(s2mia_probe(t.key, t.text, prefix_fraction), answers[0])
                else:
                    score = ia_score(questions[t.key], answers)
                (out.members if t.member else out.nonmembers).append(score)
                rec = {
                    "schema": SCORE_SCHEMA,
                    "attack": attack,
                    "method": method,
                    "eps_total": eps,
                    "key": t.key,
                    "member": t.member,
                    "score": score,
                    "answers": answers,
                    "retrieved": retrieved,
                    "queries": plan[t.key],
                    "seconds": per_target,
                }
                out.scores.append(rec)
                if on_score is not None:
                    on_score(rec)
    except DpragError as e:  # e.g. a budget that cannot cover a query: report, do not invent numbers
        out.row = {**base, "error": f"stopped after {len(out.scores)} targets: {e}"}
        return out
    seconds = time.perf_counter() - t_cell
    eps_c, delta_c = session.guarantee()
    ci = auc_ci(out.members, out.nonmembers)
    mem = [t.key for t in targets if t.member]
    non = [t.key for t in targets if not t.member]
    sm, sn = counter.summary(mem), counter.summary(non)
    qn = [len(questions[t.key]) for t in targets] if attack == "interrogation" else [1] * len(targets)
    llm_share = (
        sum(q.source == "llm" for t in targets for q in questions[t.key]) / sum(qn)
        if attack == "interrogation"
        else None
    )
    out.row = {
        **base,
        "eps_certified": _fmt_eps(eps_c),
        "delta_certified": min(1.0, float(delta_c)),  # a δ above 1 says nothing more than δ = 1 (the schema's range)
        "auc": ci.auc,
        "auc_se": ci.se,
        "auc_ci_lo": ci.lo,
        "auc_ci_hi": ci.hi,
        "auc_halfwidth": ci.halfwidth,
        "se_method": ci.se_method,
        "tpr_at_1pct_fpr": tpr_at_fpr(out.members, out.nonmembers, 0.01),
        "auc_bound": 1.0 if delta_c >= 1.0 else auc_upper_bound(eps_c, delta_c),  # δ >= 1: no bound
        "auc_bound_cor312": 1.0 if delta_c >= 1.0 else cor_3_12_auc_upper(eps_c, delta_c),
        "questions_per_record": float(np.mean(qn)),
        "llm_question_share": llm_share,
        "exposed_members": sm["exposed_records"],
        "exposed_nonmembers": sn["exposed_records"],
        "cited_members": sm["cited_records"],
        "cited_nonmembers": sn["cited_records"],
        "exposed_per_member": sm["exposed_per_record"],
        "cited_per_member": sm["cited_per_record"],
        "seconds": seconds,
        "seconds_per_record": seconds / len(targets),
        "seconds_per_query": seconds / n_queries,
        "error": None,
    }
    return out


# ----------------------------------------------------------------------------------------------------------
# outputs
# ----------------------------------------------------------------------------------------------------------
def _csv_value(v):
    if v is None:
        return ""
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True)
    return v


def write_run(run: dict, out: Path) -> None:
    """``run.json``: written when the run starts (``status`` "running") and again when it ends ("finished")."""
    write_run_json(out, run, seed=run["seed"])


def write_rows(rows: Sequence[dict], out: Path) -> None:
    with (out / "mia.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(ROW_COLUMNS), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: _csv_value(r.get(k)) for k in ROW_COLUMNS})
    with (out / "mia.jsonl").open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")


def roc_points(members: Sequence[float], nonmembers: Sequence[float]) -> tuple[list[float], list[float]]:
    pos, neg = np.asarray(members, float), np.asarray(nonmembers, float)
    ts = np.unique(np.concatenate([pos, neg, [np.inf]]))[::-1]
    return [float(np.mean(neg >= t)) for t in ts], [float(np.mean(pos >= t)) for t in ts]


def plot_roc(cells: Sequence[CellOut], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    attacks = sorted({c.row["attack"] for c in cells})
    fig, axes = plt.subplots(1, max(1, len(attacks)), figsize=(5.2 * max(1, len(attacks)), 4.6), squeeze=False)
    for ax, a in zip(axes[0], attacks, strict=False):
        for c in cells:
            if c.row["attack"] != a or c.row.get("error") or not c.members:
                continue
            fpr, tpr = roc_points(c.members, c.nonmembers)
            r = c.row
            lab = (
                f"{r['method']}"
                + ("" if r["eps_total"] is None else f" ε={r['eps_total']:g}")
                + f": AUC {r['auc']:.2f}±{r['auc_halfwidth']:.2f} (bound {r['auc_bound']:.2f})"
            )
            ax.step(fpr, tpr, where="post", label=lab)
        ax.plot([0, 1], [0, 1], "k:", lw=0.8)
        ax.set_xlabel("FPR")
        ax.set_ylabel("TPR")
        ax.set_title(f"{a}: ROC")
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------------------
@click.command("mia")
@click.option("--attacks", default="s2mia", show_default=True, help="comma-separated: s2mia, interrogation")
@click.option(
    "--methods", default="non-private-rag,murag", show_default=True, help=f"comma-separated: {', '.join(MIA_METHODS)}"
)
@click.option(
    "--eps", "eps_text", default="10", show_default=True, help="comma-separated total ε of the private methods"
)
@click.option("--members", type=int, default=20, show_default=True, help="member targets (in the corpus)")
@click.option("--nonmembers", type=int, default=None, help="held-out targets (default: = --members)")
@click.option("--questions", type=int, default=5, show_default=True, help="interrogation questions per record (1..5)")
@click.option(
    "--llm-questions/--template-questions",
    default=True,
    show_default=True,
    help="generate IA questions with the local LLM (template fill-up) or use templates only",
)
@click.option("--model", type=click.Choice(("smollm2", "tiny", "toy")), default="smollm2", show_default=True)
@click.option("--m", "m", type=int, default=10, show_default=True, help="voters of the voting methods")
@click.option("--npr-k", type=int, default=3, show_default=True, help="documents in Non-Private-RAG's prompt")
@click.option("--max-tokens", type=int, default=32, show_default=True)
@click.option("--private-tokens", type=int, default=4, show_default=True, help="c, private tokens per answer")
@click.option("--tau", type=float, default=None, help="MuRAG threshold (default: 45 dense, 4 toy)")
@click.option("--delta", type=float, default=1e-5, show_default=True)
@click.option("--prefix-fraction", type=float, default=0.5, show_default=True, help="S²MIA: share of words asked")
@click.option("--corpus-seed", type=int, default=0, show_default=True)
@click.option("--n-conditions", type=int, default=40, show_default=True)
@click.option("--n-distractors", type=int, default=1500, show_default=True)
@click.option("--seed", default="0", show_default=True, help="seed of target choice, query order and noise")
@click.option(
    "--batch",
    type=int,
    default=8,
    show_default=True,
    help="targets handled together: Non-Private-RAG answers and the IA question generation decode them "
    "in one batch (the same results); the private pipelines answer one query at a time whatever this is",
)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True)
@click.option("--json", "as_json", is_flag=True, help="print one JSON row per cell on stdout")
@click.option("--progress/--no-progress", default=True, show_default=True)
def mia(
    attacks,
    methods,
    eps_text,
    members,
    nonmembers,
    questions,
    llm_questions,
    model,
    m,
    npr_k,
    max_tokens,
    private_tokens,
    tau,
    delta,
    prefix_fraction,
    corpus_seed,
    n_conditions,
    n_distractors,
    seed,
    batch,
    out_dir,
    as_json,
    progress,
):
    """Membership inference (S²MIA, Interrogation Attack) and canary exposure against DP-RAG pipelines."""
    from dprag.lab.experiments.methods import Settings
    from dprag.lab.experiments.options import EXPERIMENT_BINS, default_scale
    from dprag.rag_adapters.datasets.clinic import generate_clinic_corpus

    attack_list = choices("--attacks", attacks, ATTACKS)
    method_list = choices("--methods", methods, MIA_METHODS)
    eps_list = list(positive_floats("--eps", eps_text))
    nonmembers = members if nonmembers is None else nonmembers
    for name, v, lo in (
        ("--members", members, 1),
        ("--nonmembers", nonmembers, 1),
        ("--questions", questions, 1),
        ("--m", m, 1),
        ("--npr-k", npr_k, 1),
        ("--max-tokens", max_tokens, 1),
        ("--batch", batch, 1),
        ("--private-tokens", private_tokens, 1),
    ):
        if v < lo:
            raise click.BadParameter(f"must be >= {lo}, got {v}", param_hint=name)
    if questions > 5:
        raise click.BadParameter(f"must be <= 5 (001 §4.2 budget here), got {questions}", param_hint="--questions")
    if not (0 < delta < 1):
        raise click.BadParameter(f"must lie in (0, 1), got {delta}", param_hint="--delta")
    if not (0 < prefix_fraction < 1):
        raise click.BadParameter(f"must lie in (0, 1), got {prefix_fraction}", param_hint="--prefix-fraction")
    t_start = time.perf_counter()
    seed_b = str(seed).encode()
    try:
        corpus = generate_clinic_corpus(corpus_seed, n_conditions=n_conditions, n_distractors=n_distractors)
        mem_ids, non_ids = choose_targets(len(corpus.documents), members, nonmembers, seed_b)
        world = build_world(corpus, mem_ids, non_ids)
        if max(m, npr_k) > len(world.documents):
            raise click.BadParameter(f"exceeds the corpus size {len(world.documents)}", param_hint="--m")
        bar = progress_bar(progress)

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for stale in ("scores.jsonl", "mia.jsonl", "mia.csv", "questions.jsonl", "run.json"):
            (out / stale).unlink(missing_ok=True)
        t = time.perf_counter()
        retriever, gen = build_backend(model, corpus, world)
        from dprag.lab.experiments.runner import CachedRetriever

        retriever = CachedRetriever(retriever)
        load_s = time.perf_counter() - t
        scale = default_scale("words" if model == "toy" else "dense", EXPERIMENT_BINS)
        settings = Settings(
            m=m,
            max_tokens=max_tokens,
            delta=delta,
            taus=(tau,) if tau is not None else scale["taus"][:1],
            edges=scale["edges"],
            private_tokens=(private_tokens,),
            npr_k=(npr_k,),
        )
        # the record of parameters, seed and versions exists from the start: a stopped run keeps it too
        run = {
            "schema": "dprag.mia-run/1",
            "status": "running",
            "argv": sys.argv[1:],
            "attacks": attack_list,
            "methods": method_list,
            "eps": eps_list,
            "members": members,
            "nonmembers": nonmembers,
            "questions": questions,
            "llm_questions": llm_questions,
            "model": model,
            "generator": getattr(gen, "name", type(gen).__name__),
            "m": m,
            "npr_k": npr_k,
            "max_tokens": max_tokens,
            "private_tokens": private_tokens,
            "tau": settings.taus[0],
            "delta": delta,
            "prefix_fraction": prefix_fraction,
            "batch": batch,
            "corpus": corpus.name,
            "corpus_seed": corpus_seed,
            "n_conditions": n_conditions,
            "n_distractors": n_distractors,
            "n_records_full": len(corpus.documents),
            "n_records_system": len(world.documents),
            "seed": str(seed),
            "member_keys": [t.key for t in world.targets if t.member],
            "nonmember_keys": [t.key for t in world.targets if not t.member],
            "threads": {
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                "DPRAG_TORCH_THREADS": os.environ.get("DPRAG_TORCH_THREADS"),
            },
            "seconds_load_backend": load_s,
        }
        write_run(run, out)
        qs, raw, q_seconds = (None, {}, 0.0)
        if "interrogation" in attack_list:
            qs, raw, q_seconds = interrogation_questions(
                world.targets, gen, questions, use_llm=llm_questions, progress=bar, batch=batch
            )
            with (out / "questions.jsonl").open("w", encoding="utf-8") as f:
                for tg in world.targets:
                    f.write(
                        json.dumps(
                            {
                                "schema": "dprag.mia-questions/1",
                                "key": tg.key,
                                "member": tg.member,
                                "questions": [q.__dict__ for q in qs[tg.key]],
                                "llm_raw": raw[tg.key],
                            },
                            sort_keys=True,
                        )
                        + "\n"
                    )
        meta = {"model": model, "corpus": corpus.name}
        cells: list[CellOut] = []

        def append_score(rec: dict) -> None:  # one line per target as it is scored: a stopped run keeps them
            with (out / "scores.jsonl").open("a", encoding="utf-8") as f:
                f.write(json.dumps(rec, sort_keys=True) + "\n")

        for attack in attack_list:
            for method in method_list:
                spec_uses_eps = method not in ("non-rag", "non-private-rag")
                for eps in eps_list if spec_uses_eps else [None]:
                    cell = run_cell(
                        attack,
                        method,
                        eps,
                        retriever=retriever,
                        generator=gen,
                        settings=settings,
                        world=world,
                        questions=qs,
                        seed=seed_b,
                        prefix_fraction=prefix_fraction,
                        progress=bar,
                        meta=meta,
                        batch=batch,
                        on_score=append_score,
                    )
                    cells.append(cell)
                    r = cell.row
                    if as_json:
                        click.echo(json.dumps(r, sort_keys=True))
                    if r.get("error"):
                        click.echo(f"{attack:>13} {method:>20} eps={eps}: {r['error']}", err=True)
                    else:
                        click.echo(
                            f"{attack:>13} {method:>20} eps={eps}: AUC {r['auc']:.3f} ± {r['auc_halfwidth']:.3f}"
                            f" (bound {r['auc_bound']:.3f}), TPR@1%FPR {r['tpr_at_1pct_fpr']:.2f}, "
                            f"exposed {r['exposed_members']:.2f}, {r['seconds_per_record']:.1f} s/record",
                            err=True,
                        )
                    write_rows([c.row for c in cells], out)
    except DpragError as e:
        raise Fail(str(e)) from None
    plot_roc(cells, out / "mia_roc.png")
    run.update(
        status="finished",
        seconds_questions=q_seconds,
        total_seconds=time.perf_counter() - t_start,
        cell_seconds={f"{c.row['attack']}/{c.row['method']}/{c.row['eps_total']}": c.row.get("seconds") for c in cells},
    )
    write_run(run, out)
