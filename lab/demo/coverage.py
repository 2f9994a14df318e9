"""The demo's generation mechanism chosen by the retrieval-coverage rule on the public calibration corpus
(spec/demo.md step 3 (Mechanism); the rule of spec/experiments.md §1 in the demo's committed units and budget).

At the demo's budget (composed ε <= 10: retrieval 1.8752, generation 2·M·ε_q replace-one, so ε_q = 4 at M = 1)
the seen selection releases a key only with at least ⌈T⌉ votes, T = 1 + 2·ln(1/δ_q)/ε_RAG (ε_RAG = ε_q for
MuRAG, ε_q − ε_thr for MuRAG-Ada). A voter reading a supporting record of the asked fact is the only voter that
can vote for the right key, so the statistic is, over the demo's traffic replayed on the calibration
corpus's dev questions (one question per condition, in order, an M = 1 filter per pass: ``demo_passes``), how
many get at least ⌈T⌉ of their own supporting
records among the Top-K that reach the voters, served by the real ``MuRAG.select`` / ``MuRAGAda.select`` on the
integer scores of spec/protocol.md §4. No LLM runs, and nothing of a tenant's data is read. The candidate with
the most such questions is chosen (ties: the smaller δ_q, then the fewer voters).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.rag.answer_vote import AnswerVoteParams
from dprag.accounting.rag.multi_query import MuRAG, MuRAGAda
from dprag.accounting.stores import MemoryBudgetStore
from dprag.audit.protocol import commitments as cm
from dprag.lab.demo.answer_cache import AnswerCache, StageLog
from dprag.lab.demo.config import ADA_EDGES, SCORE_CLIP, SCORE_SHIFT


@dataclass(frozen=True)
class Candidate:
    """One generation mechanism of the grid: ``algorithm`` "murag" (``tau`` in score units) or "murag-ada"
    (``epsilon_thr``; bins ``ADA_EDGES``), ``m`` voters of one record each, the seen selection's ``delta``."""

    algorithm: str
    m: int
    delta: float
    tau: int | None = None
    epsilon_thr: float | None = None

    def epsilon_rag(self, epsilon_q: float) -> float:
        return epsilon_q - (self.epsilon_thr or 0.0)

    def votes_needed(self, epsilon_q: float) -> int:
        return math.ceil(1 + 2 * math.log(1 / self.delta) / self.epsilon_rag(epsilon_q))

    def label(self) -> str:
        if self.algorithm == "murag":
            return f"murag tau={self.tau} m={self.m} delta={self.delta:g}"
        return f"murag-ada K={self.m} eps_thr={self.epsilon_thr:g} delta={self.delta:g}"


def default_grid(deltas: Sequence[float] = (1e-6, 1e-5)) -> list[Candidate]:
    """MuRAG: τ at cosines 0.45-0.60 × m in {10, 20, 30}; MuRAG-Ada: K in {6, ..., 30} × ε_thr in {0.25, 0.5, 1}."""
    out = []
    for d in deltas:
        for c in (0.45, 0.50, 0.525, 0.55, 0.60):
            for m in (10, 20, 30):
                out.append(Candidate("murag", m, d, tau=int(round(1024 * c))))
        for k in (6, 8, 10, 12, 16, 20, 30):
            for thr in (0.25, 0.5, 1.0):
                out.append(Candidate("murag-ada", k, d, epsilon_thr=thr))
    return out


def _question_scores(embedder, qd, items) -> dict:
    """id(item) -> the integer scores (spec/protocol.md §4) of every record for the item's question."""
    qv = cm.quantise_embeddings(np.asarray(embedder.embed([q.question for q in items])))
    return {
        id(q): cm.integer_scores(qd, v, SCORE_CLIP, SCORE_SHIFT).astype(np.float64)
        for q, v in zip(items, qv, strict=True)
    }


def release_candidates(
    deltas: Sequence[float] = (1e-6, 1e-5), thresholds: Sequence[float] = (0.25, 0.5, 1.0)
) -> list[Candidate]:
    """The grid ``release_grid`` runs for the demo (results/demo_calibration): MuRAG τ at cosines 0.45 / 0.50 /
    0.525 × m in {20, 30}; MuRAG-Ada K in {10, 16, 20, 30} × ε_thr in ``thresholds``; δ_q in ``deltas`` (the
    first grid, ``release_grid.json``, had ε_thr in {0.5, 1})."""
    out = []
    for d in deltas:
        for tau in (461, 512, 538):
            for m in (20, 30):
                out.append(Candidate("murag", m, d, tau=tau))
        for k in (10, 16, 20, 30):
            for thr in thresholds:
                out.append(Candidate("murag-ada", k, d, epsilon_thr=thr))
    return out


class _Scores:
    def __init__(self, n: int):
        self.n, self.current = n, None

    def __len__(self):
        return self.n

    def document(self, i):
        return ""

    def scores(self, question):
        return self.current


def demo_passes(corpus, passes: int = 8) -> list[list]:
    """The demo's traffic on the calibration corpus, ``passes`` times over: one dev question per condition, in
    condition order (the fact kind rotating with the pass, the phrasing alternating), as the demo asks one
    question per condition (``traffic.honest_questions``, on the test split)."""
    from dprag.lab.demo.traffic import FACT_KINDS

    by_group: dict[str, list] = {}
    for q in corpus.questions:
        if q.split == "dev":
            by_group.setdefault(q.group, []).append(q)
    n_cond = len({g.split("-")[0] for g in by_group})
    out = []
    for p in range(passes):
        qs = []
        for ci in range(n_cond):
            group = by_group.get(f"c{ci:02d}-{FACT_KINDS[(ci + p) % len(FACT_KINDS)]}", [])
            if group:
                group = sorted(group, key=lambda q: q.qid)
                qs.append(group[(p // len(FACT_KINDS)) % len(group)])
        out.append(qs)
    return out


def coverage_grid(
    embedder, corpus, candidates: Sequence[Candidate], *, epsilon_q: float = 4.0, passes: int = 8
) -> list[dict]:
    """Per candidate: over ``passes`` runs of the demo's traffic (``demo_passes``), each served in order with its
    own M = 1 filter (a record answers one question, so what a question charges beyond its own condition is
    lost to the later ones), the questions with at least ⌈T⌉ own supporting records among the voters' Top-K,
    the votes needed and the mean records charged per question. Sorted best first."""
    qd = cm.quantise_embeddings(np.asarray(embedder.embed(list(corpus.documents))))
    runs_q = demo_passes(corpus, passes)
    flat = [q for qs in runs_q for q in qs]
    score = _question_scores(embedder, qd, flat)
    retr = _Scores(len(corpus.documents))
    rows = []
    for c in candidates:
        if c.epsilon_rag(epsilon_q) <= 0:
            continue
        need = c.votes_needed(epsilon_q)
        rag = AnswerVoteParams(c.m, c.epsilon_rag(epsilon_q), threshold=0.0, selection="seen", delta=c.delta)
        enough, charged = [], []
        for p, qs in enumerate(runs_q):
            store = MemoryBudgetStore(len(corpus.documents))
            if c.algorithm == "murag":
                flt = IndividualRenyiFilter(store, FilterBudget.pure(epsilon_q))
                algo = MuRAG(retr, None, flt, rag, tau=float(c.tau))
            else:
                flt = IndividualRenyiFilter(store, MuRAGAda.filter_budget(1, rag.cost, c.epsilon_thr))
                src = RandomSource.from_seed(b"demo-coverage", f"{c.label()}/{p}".encode())
                algo = MuRAGAda(retr, None, flt, rag, edges=ADA_EDGES, epsilon_thr=c.epsilon_thr, source=src)
            n = 0
            for item in qs:
                retr.current = score[id(item)]
                sel = algo.select(item.question)
                own = len(set(sel.top[sel.top >= 0].tolist()) & set(item.relevant_ids))
                n += own >= need
                charged.append(sel.charged.size)
            enough.append(n)
        rows.append(
            {
                "candidate": c.label(),
                "algorithm": c.algorithm,
                "m": c.m,
                "tau": c.tau,
                "epsilon_thr": c.epsilon_thr,
                "delta": c.delta,
                "votes_needed": need,
                "questions": len(flat),
                "enough_records": int(sum(enough)),
                "per_pass": enough,
                "mean_charged": float(np.mean(charged)),
            }
        )
    rows.sort(key=lambda r: (-r["enough_records"], r["delta"], r["m"]))
    return rows


def release_grid(
    embedder,
    generator,
    corpus,
    candidates: Sequence[Candidate],
    *,
    epsilon_q: float = 4.0,
    passes: int = 2,
    key_words: Sequence[int] = (2, 3),
    max_tokens: int = 16,
    seeds: int = 5,
    normalizer: str = "answer-keys-v1",
    tokens: Mapping[str, int] | None = None,
    cache: AnswerCache | None = None,
    log: StageLog | None = None,
) -> list[dict]:
    """The LLM's half of the choice, on the same replayed traffic as ``coverage_grid``: every voter of every
    candidate's Top-K answers its (question, one record) prompt (each pair once per answer length, cached: a voter's
    answer is a function of its own prompt), its key is the public ``normalizer``'s key of that answer, and the seen
    selection at (ε_RAG, δ_q) releases one. Per candidate and key length: the **expected** share of questions whose
    release contains a gold answer (``lab.release_law.correct_chance``: the selection's exact law given the voters'
    answers, no draw) and, with ``seeds`` > 0, the share in ``seeds`` draws per question (a fallback counts as wrong
    in both: the Non-RAG answer of a 135M model rarely is). ``tokens``: the voters' answer length per algorithm
    ("murag", "murag-ada"; default ``max_tokens`` for both). ``cache``: the voters' answers already generated (a
    killed run's, ``AnswerCache``; only the prompts it lacks are generated, and they are added to it); ``log``: the
    progress lines (``StageLog``). Sorted best first (expected share, then the draws')."""
    from dprag.accounting.mechanisms.seen_key_selection import select_seen_key
    from dprag.accounting.protocols import Prompt
    from dprag.lab.release_law import correct_chance
    from dprag.rag_adapters.answer_keys import NORMALIZERS
    from dprag.rag_adapters.metrics import contains_answer

    norm = NORMALIZERS[normalizer]
    log = log if log is not None else StageLog(enabled=False)
    log.stage("release_grid selection", f"the voters' Top-K of {len(candidates)} candidates over {passes} passes")
    length = {"murag": max_tokens, "murag-ada": max_tokens, **dict(tokens or {})}

    qd = cm.quantise_embeddings(np.asarray(embedder.embed(list(corpus.documents))))
    runs_q = demo_passes(corpus, passes)
    flat = [q for qs in runs_q for q in qs]
    score = _question_scores(embedder, qd, flat)
    retr = _Scores(len(corpus.documents))
    tops: dict = {}  # (candidate label, pass, question index) -> voter record ids
    for c in candidates:
        if c.epsilon_rag(epsilon_q) <= 0:
            continue
        rag = AnswerVoteParams(c.m, c.epsilon_rag(epsilon_q), threshold=0.0, selection="seen", delta=c.delta)
        for p, qs in enumerate(runs_q):
            store = MemoryBudgetStore(len(corpus.documents))
            if c.algorithm == "murag":
                algo = MuRAG(
                    retr, None, IndividualRenyiFilter(store, FilterBudget.pure(epsilon_q)), rag, tau=float(c.tau)
                )
            else:
                flt = IndividualRenyiFilter(store, MuRAGAda.filter_budget(1, rag.cost, c.epsilon_thr))
                src = RandomSource.from_seed(b"demo-coverage", f"{c.label()}/{p}".encode())
                algo = MuRAGAda(retr, None, flt, rag, edges=ADA_EDGES, epsilon_thr=c.epsilon_thr, source=src)
            for i, item in enumerate(qs):
                retr.current = score[id(item)]
                sel = algo.select(item.question)
                tops[(c.label(), p, i)] = [int(d) for d in sel.top if d >= 0]
    algo_of = {c.label(): c.algorithm for c in candidates}
    need: dict = {}
    for (label, p, i), docs in tops.items():
        need.setdefault((length[algo_of[label]], p, i), set()).update(docs)
    cache = cache if cache is not None else AnswerCache()
    keys_of = {
        (n_tok, p, i, d): cache.key(Prompt(runs_q[p][i].question, (corpus.documents[d],)), n_tok)
        for (n_tok, p, i), docs in need.items()
        for d in docs
    }
    distinct = set(keys_of.values())
    done = sum(k in cache for k in distinct)
    log.stage("release_grid generation", f"{len(distinct)} distinct voter prompts, {done} in the cache")
    log.start_count(done)
    answers: dict = {}
    for (n_tok, p, i), docs in sorted(need.items()):
        item, ids = runs_q[p][i], sorted(docs)
        todo = [d for d in ids if keys_of[(n_tok, p, i, d)] not in cache]
        if todo:
            outs = generator.generate_many([Prompt(item.question, (corpus.documents[d],)) for d in todo], n_tok)
            cache.put_many([(keys_of[(n_tok, p, i, d)], a) for d, a in zip(todo, outs, strict=True)])
            done += len(todo)
        answers.update({(n_tok, p, i, d): cache.get(keys_of[(n_tok, p, i, d)]) for d in ids})
        log.count(done, len(distinct))
    log.stage("release_grid scoring", f"{len(candidates)} candidates x {len(key_words)} key lengths")
    rows = []
    for c in candidates:
        if c.epsilon_rag(epsilon_q) <= 0:
            continue
        n_tok = length[c.algorithm]
        for kw in key_words:
            hits, expected = 0, 0.0
            for p, qs in enumerate(runs_q):
                for i, item in enumerate(qs):
                    keys = [
                        norm(answers[(n_tok, p, i, d)], item.question, max_words=kw) for d in tops[(c.label(), p, i)]
                    ]
                    keys = [k for k in keys if k]
                    expected += correct_chance(keys, item.answers, c.epsilon_rag(epsilon_q), c.delta)
                    for r in range(seeds):
                        src = RandomSource.from_seed(b"demo-release", f"{c.label()}/{kw}/{p}/{i}/{r}".encode())
                        chosen, _ = select_seen_key(keys, c.epsilon_rag(epsilon_q), c.delta, src)
                        hits += bool(chosen) and contains_answer(chosen, item.answers)
            n = len(flat) * seeds
            rows.append(
                {
                    "candidate": c.label(),
                    "key_words": kw,
                    "normalizer": normalizer,
                    "answer_tokens": n_tok,
                    "votes_needed": c.votes_needed(epsilon_q),
                    "questions": len(flat),
                    "expected_correct": expected / len(flat),
                    "released_correct": hits / n if n else None,
                    "draws": n,
                }
            )
    rows.sort(key=lambda r: (-r["expected_correct"], -(r["released_correct"] or 0.0), r["candidate"]))
    return rows
