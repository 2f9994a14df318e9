"""The demo's configuration: the tenants, the committed privacy parameters, the run sizes and the policy they
commit (spec/protocol.md §4, spec/demo.md)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from dprag.accounting.collusion import exact_sigma
from dprag.audit.protocol.policy import CoalitionPolicy, GenerationPolicy, Policy, RetrievalPolicy, SamplerSpec
from dprag.errors import InvalidParameterError

#: the paraphrases the colluding accounts ask (pairwise MiniLM cosine 0.90-0.97 on the clinic canaries)
PROBE_TEMPLATES = (
    "What is {name}'s {kind}?",
    "Tell me {name}'s {kind}.",
    "What {kind} does {name} use?",
    "I need {name}'s {kind}, what is it?",
    "{name} {kind}?",
    "Please give the {kind} of {name}.",
)
#: the weight-free modes' single probe: long, so that a one-token edit keeps its hash bag-of-words cosine >= 0.98
TOY_PROBE_TEMPLATE = "What is {name}'s {kind}? I need {name}'s {kind}: tell me {name}'s {kind}, the {kind} of {name}."
#: tokens of the non-private reference's answer to the probe (SmolLM2 tends to recite the record first)
PROBE_ANSWER_TOKENS = 64
SCORE_CLIP = (0, 1 << 20)
SCORE_SHIFT = 10
SENSITIVITY = ((SCORE_CLIP[1] - SCORE_CLIP[0]) >> SCORE_SHIFT) + 1  # 1025
#: MuRAG-Ada's bins for the demo: cosines 0.90 down to 0.20 in steps of 0.01 (the experiments' 20..90 width 1,
#: chosen on the seed-1 tuning corpus), in the integer score units (cosine × 1024, rounded)
ADA_EDGES = tuple(int(round(1024 * (90 - i) / 100)) for i in range(71))
#: the voters' answer length (tokens) per retrieval algorithm: the experiments' per-method defaults
#: (lab/experiments/defaults.py: 16 for MuRAG, 24 for MuRAG-Ada's answer-level cells, chosen on the seed-1 tuning
#: corpus, spec/answer-keys.md §2; tests/lab/test_demo.py checks the two agree)
ANSWER_TOKENS = {"murag": 16, "murag-ada": 24}
#: the public answer normaliser of the experiments' defaults (lab/experiments/defaults.py RUN_WIDE)
NORMALIZER = "answer-keys-v2"


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
    #: noise-then-select over its committed index (audit/protocol/zk_attest.py); N <= 8 documents keeps the circuit
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
    #: voters (K = m: one record each). m = 30, τ = 512 and 2 key words are the best of the release grid on the
    #: public calibration corpus among the candidates whose composed δ stays <= 1e-4 (δ_q = 1e-6; spec/demo.md step 3;
    #: lab/demo/coverage.py, results/demo_calibration/): 0.42 of 24 calibration questions x 5 draws released a
    #: correct key, against 0.31 for the earlier m = 20 with 3 key words (δ_q = 1e-5 would give 0.49, within the
    #: grid's noise, at a composed δ of 5.7e-4; MuRAG-Ada at the same ε_q = 4 at most 0.37: ε_thr leaves the
    #: selection less). The recalibration on the current defaults (answer-keys-v2, 16 / 24 tokens, release_grid_v2.json)
    #: keeps it: expected share 0.470 of 36 questions, MuRAG-Ada's best at δ_q = 1e-6 0.317
    m: int = 30
    #: 000 Alg. 5's parameters, used with mechanism "pure-dp-rag": ε_q = ε_token/4·(1 + 3c) = 4.0, the same
    #: per-query cost as answer-vote's vote_epsilon (the comparison of spec/demo.md)
    epsilon_token: float = 1.6
    max_private_tokens: int = 3
    max_tokens: int = 16
    M: int = 1
    #: "murag" (threshold ``tau``) or "murag-ada" (bins ``ADA_EDGES``, ``epsilon_thr``; K = m·docs_per_voter)
    algorithm: str = "murag"
    tau: int = 512
    #: MuRAG-Ada's threshold release ε (the per-query cost is ε_q = epsilon_thr + vote_epsilon)
    epsilon_thr: float = 1.0
    docs_per_voter: int = 1
    sampler_tail: float = 9.5
    sampler_bits: int = 64
    sampler_tv: float = 1e-12
    lowk_k_max: int = 2
    #: "pure-dp-rag" (000 Alg. 5, token-level), "pure-dp-rag-ext" (000 Alg. 5 with its two free-in-ε extensions
    #: committed in the policy: public completion and the Non-RAG base measure; the same ε_q), "answer-vote"
    #: (spec/accounting/rag.md §5, answer-level, universal selection: pure ε) or "answer-vote-seen" (the default:
    #: answer-level with the selection over the voters' own keys, (ε_q, δ_q) per query, and abstain_empty; on --quick it
    #: answered 1/5 vs the universal selection's 0/5, and 4/28 on the default run, spec/demo.md): the generation
    #: mechanism of the committed policy; the answer-vote fields are used only with the latter two
    mechanism: str = "answer-vote-seen"
    #: ε of answer-vote's selection = ε_q; composed ε = retrieval 1.8752 + generation 2·M·ε_q = 9.8752 <= 10
    vote_epsilon: float = 4.0
    #: t of the universal selection (docs/lab/privacy-utility.md §5.8: the disjoint seed-1 corpus; unused by the seen
    #: selection); key words: the release grid's choice (above)
    vote_threshold: float = 6.0
    key_words: int = 2
    normalizer: str = NORMALIZER
    #: "answer-vote-seen": the seen selection's per-query δ (⊥ at T = 1 + 2·ln(1/δ)/ε = 7.9 votes of m = 30 at
    #: ε = 4); each RAG charge of a document adds it, so at M = 1 the generation δ is δ·(1 + e^4) = 5.56e-5
    #: (replace-one) and the composed δ 6.56e-5. Voters whose documents are all the empty padding abstain.
    vote_delta: float = 1e-6


#: the demo's policy before it moved to the library's defaults (docs/lab/demo-runs.md §2a): MuRAG, τ = 512, m = 30,
#: 16-token answers keyed by answer-keys-v1 (2 key words), the seen selection at ε_q = 4, δ_q = 1e-6. Windows committed
#: with it replay under v1's rules (the policy names its normaliser; tests/lab/test_demo_defaults.py).
LEGACY_V1 = DemoPrivacy(
    m=30, max_tokens=16, algorithm="murag", tau=512, vote_epsilon=4.0, key_words=2, normalizer="answer-keys-v1"
)


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
    #: honest questions whose private answer is re-run as the latency floor (spec/demo.md step 7; 0: none)
    latency_questions: int = 6
    #: ``--seed``: None keeps the fixed corpora (and questions) and draws s_W and the account keys from the OS CSPRNG;
    #: a text derives the corpora's seeds (``seeded``), hence the questions, and s_W of both epochs and the account
    #: keys (``derived_bytes``): a reproducible run, whose noise anyone who knows the seed can recompute
    seed: str | None = None

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
        docs = ", ".join(
            f"{t.name}: {t.n_conditions} conditions x {t.support[0]}-{t.support[1]} records + "
            f"{t.n_distractors} distractors, {len(t.accounts)} honest accounts"
            f"{', citations on' if t.citations else ''}{', zk (Groth16 proofs)' if t.zk else ''}"
            for t in self.tenants
        )
        return (
            f"{self.size} run: {self.n_queries()} queries ({self.n_honest()} honest questions, "
            f"{len(self.colluders)} colluding accounts x {self.probes_per_colluder} probes), "
            f"m = {p.m} voters, K = {p.K} citations; tenants {docs}; "
            f"then a k_max = {p.lowk_k_max} window of {len(self.colluders)} probe queries"
        )


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


def retrieval_line(p: DemoPrivacy) -> str:
    """How MuRAG / MuRAG-Ada admit documents, in words."""
    if p.algorithm == "murag-ada":
        return (
            f"MuRAG-Ada bins: cosines {ADA_EDGES[0] / 1024:.2f} down to {ADA_EDGES[-1] / 1024:.2f} in "
            f"{len(ADA_EDGES) - 1} bins (score units {ADA_EDGES[0]}..{ADA_EDGES[-1]}), threshold release at "
            f"ε_thr = {p.epsilon_thr}, K = {p.m * p.docs_per_voter}"
        )
    return f"τ = {p.tau} score units (cosine {p.tau / 1024:.2f})"


def mechanism_line(p: DemoPrivacy) -> str:
    """The committed generation mechanism and its parameters, in words."""
    algo = "MuRAG-Ada (000 Alg. 2)" if p.algorithm == "murag-ada" else "MuRAG (000 Alg. 1)"
    if p.mechanism == "answer-vote-seen":
        return (
            f"{algo} with answer-level voting (spec/accounting/rag.md §5, spec/accounting/rag.md §5.2, §6): "
            f"m = {p.m} "
            f"voters x {p.docs_per_voter} document answer in full (<= {p.max_tokens} tokens; voters given only "
            f"empty padding abstain), public normaliser {p.normalizer!r} (<= {p.key_words} key words), the "
            f"exponential mechanism over the keys the voters wrote at ε = {p.vote_epsilon} with ⊥ at "
            f"T = 1 + 2·ln(1/δ)/ε = {1 + 2 * math.log(1 / p.vote_delta) / p.vote_epsilon:.2f} votes, δ = "
            f"{p.vote_delta:g} per query and charged document; ⊥ releases the Non-RAG answer (public "
            "completion, free in ε)"
        )
    if p.mechanism == "answer-vote":
        return (
            f"{algo} with answer-level voting (spec/accounting/rag.md §5, spec/accounting/rag.md §6): "
            f"m = {p.m} voters "
            f"x {p.docs_per_voter} document answer in full (<= {p.max_tokens} tokens), public normaliser "
            f"{p.normalizer!r} (<= {p.key_words} key words), one exponential mechanism over the keys at ε = "
            f"{p.vote_epsilon} with threshold t = {p.vote_threshold} nats; ⊥ releases the Non-RAG answer (public "
            "completion, free in ε)"
        )
    ext = (
        "; public completion (after the c private tokens the Non-RAG lane's greedy tokens) and the Non-RAG "
        "base measure in the exponential mechanism, both free in ε and committed in the policy"
        if p.mechanism == "pure-dp-rag-ext"
        else ""
    )
    return (
        f"MuRAG (000 Alg. 1) over pure-DP DP-RAG (000 Alg. 5): m = {p.m}, ε_token = {p.epsilon_token}, c = "
        f"{p.max_private_tokens} private tokens, max {p.max_tokens} tokens{ext}"
    )


def _model_profile(model: str) -> dict:
    """The real embedder links the coalition's paraphrases (cosine >= 0.9); the hash bag-of-words embedder of
    the weight-free modes does not separate paraphrases from honest questions that share a template, so
    there the coalition repeats one long probe with a one-token edit per repeat (002's pattern P-B; a verbatim repeat
    gets the first release's citations again, the noise being keyed by Q, so it tells a coalition nothing and the
    estimator skips it) and θ = 0.95."""
    if model == "real":
        return {"model": model}
    return {"model": model, "privacy": replace(DemoPrivacy(), theta=0.95), "probe_templates": (TOY_PROBE_TEMPLATE,)}


def default_config(model: str = "real") -> DemoConfig:
    """Sized for ~10 minutes on 2 cores with SmolLM2 (docs/lab/demo-runs.md §4 has the measured times)."""
    return DemoConfig(
        size="default",
        tenants=(
            TenantSpec("clinic-a", "dprag-demo/clinic-a", 14, 150, ("alice", "bob", "carol"), True),
            TenantSpec("clinic-b", "dprag-demo/clinic-b", 12, 150, ("dave", "erin"), False),
            TenantSpec("clinic-z", "dprag-demo/clinic-z", 2, 2, ("zoe", "zack"), True, (3, 3), zk=True),
        ),
        colluders=("mallory-1", "mallory-2", "mallory-3"),
        probes_per_colluder=2,
        **_model_profile(model),
    )


def quick_config(model: str = "real") -> DemoConfig:
    """Sized for ~2 minutes on 2 cores (model loading included)."""
    return DemoConfig(
        size="quick",
        tenants=(
            TenantSpec("clinic-a", "dprag-demo/clinic-a-quick", 2, 40, ("alice", "bob"), True),
            TenantSpec("clinic-b", "dprag-demo/clinic-b-quick", 2, 40, ("dave",), False),
            TenantSpec("clinic-z", "dprag-demo/clinic-z-quick", 1, 2, ("zoe",), True, (6, 6), zk=True),
        ),
        colluders=("mallory-1", "mallory-2", "mallory-3"),
        probes_per_colluder=1,
        latency_questions=1,
        **_model_profile(model),
    )


def smoke_config(model: str = "real") -> DemoConfig:
    """The real-model smoke test's size (tests/lab/test_demo_realmodel.py; no CLI flag): ``quick_config``'s committed
    policy and zk tenant, with one honest question in the coalition's tenant and one in the zk tenant, no
    citations-off tenant, a coalition of 2 accounts (their probes' MiniLM cosine 0.96 on this corpus) against a
    k_max = 1 second window, and no latency floor sample: 4 queries (+ 2) instead of 8 (+ 3)."""
    quick = quick_config(model)
    return replace(
        quick,
        size="smoke",
        tenants=(
            TenantSpec("clinic-a", "dprag-demo/clinic-a-quick", 1, 40, ("alice",), True),
            *(t for t in quick.tenants if t.zk),
        ),
        colluders=quick.colluders[:2],
        privacy=replace(quick.privacy, lowk_k_max=1),
        latency_questions=0,
    )


def seeded(cfg: DemoConfig, seed: str | None) -> DemoConfig:
    """``cfg`` under ``--seed``: None changes nothing; a text gives every tenant the corpus seed
    ``<its seed>/seed=<text>`` (the questions follow from the corpus) and is kept for the noise (``derived_bytes``)."""
    if seed is None:
        return cfg
    if not isinstance(seed, str) or not seed or len(seed) > 200 or not seed.isprintable():
        raise InvalidParameterError("seed", "must be a non-empty printable text of at most 200 characters", seed)
    return replace(cfg, seed=seed, tenants=tuple(replace(t, seed=f"{t.seed}/seed={seed}") for t in cfg.tenants))


def derived_bytes(cfg: DemoConfig, label: str, n: int = 32) -> bytes | None:
    """``n`` bytes for ``label`` (an epoch's s_W, an account key) from ``cfg.seed``, or None without a seed (then
    the caller draws them from the OS CSPRNG): SHAKE-256 of the seed and the label."""
    if cfg.seed is None:
        return None
    return hashlib.shake_256(f"dprag-demo/seed\x00{cfg.seed}\x00{label}".encode()).digest(n)


def build_policy(
    cfg: DemoConfig, *, k_max: int | None = None, window: str | None = None, tenants: Sequence[str] | None = None
) -> Policy:
    """The committed policy (spec/protocol.md §4) of the demo's window (``tenants``: the window's tenants,
    default all of ``cfg``)."""
    p = cfg.privacy
    sigma = exact_sigma(p.epsilon_acc, p.delta_acc, p.n, SENSITIVITY)
    names = set(t.name for t in cfg.tenants) if tenants is None else set(tenants)
    return Policy(
        window=window or cfg.window,
        retrieval=RetrievalPolicy(
            enabled_tenants=tuple(t.name for t in cfg.tenants if t.citations and t.name in names),
            K=p.K,
            n=p.n,
            epsilon_acc=p.epsilon_acc,
            delta_acc=p.delta_acc,
            sigma=sigma,
            sensitivity=SENSITIVITY,
            score_clip=SCORE_CLIP,
            score_shift=SCORE_SHIFT,
            sampler=SamplerSpec(p.sampler_tail, p.sampler_bits, p.sampler_tv),
            zk_tenants=tuple(t for t in cfg.zk_tenants if t in names),
        ),
        coalition=CoalitionPolicy(k_max=p.k_max if k_max is None else k_max, delta_policy=p.delta_policy),
        generation=generation_policy(p),
    ).validate()


def generation_policy(p: DemoPrivacy) -> GenerationPolicy:
    """The committed generation policy of ``p``: MuRAG (M = ``p.M``, τ = ``p.tau``) or MuRAG-Ada (bins
    ``ADA_EDGES``, ``p.epsilon_thr``) with ``p.mechanism``."""
    ada = p.algorithm == "murag-ada"
    return GenerationPolicy(
        algorithm=p.algorithm,
        m=p.m,
        epsilon_token=p.epsilon_token,
        max_private_tokens=p.max_private_tokens,
        max_queries_per_doc=p.M,
        docs_per_voter=p.docs_per_voter,
        tau=None if ada else p.tau,
        edges=ADA_EDGES if ada else None,
        epsilon_thr=p.epsilon_thr if ada else None,
        max_tokens=p.max_tokens,
        **(
            generation_extensions(p)
            if p.mechanism not in ANSWER_VOTE
            else dict(
                mechanism="answer-vote",
                vote_epsilon=p.vote_epsilon,
                vote_threshold=p.vote_threshold,
                key_words=p.key_words,
                normalizer=p.normalizer,
                **answer_vote_selection(p),
            )
        ),
    )
