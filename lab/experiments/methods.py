"""The methods of the privacy–utility experiment (spec/experiments.md): how a total ε becomes per-query parameters.

Each method is a ``MethodSpec``: a hyperparameter grid (selected on the dev split, ``runner``) and a
``build(ctx, eps_total, hp)`` that returns a fresh ``Session`` — its own filter, counters and random
stream — whose ``answer(item)`` answers one question and returns a ``RagAnswer``.

Total-ε semantics (000 §5.2 / 001 §4.2; T = number of questions of the run, M = max retrievals per
document, default 1 as in the papers' main results):

===========================  ====================================================================
non-rag                      spends nothing: ε = 0.
non-private-rag              no guarantee (ε = ∞); top-k (k from the grid) pasted into one prompt.
murag / murag-history        per-document pure-ε filter E(z) = M·ε_q, ε_q = ε_total / M; answers with
                             000 Alg. 5 (pure DP); guarantee (ε_total, 0) (000 Lemma 1, pure mode).
                             murag-history adds answer-history reuse (000 §6) within one account.
murag-gnmax                  MuRAG with GNMax voting as its single-query mechanism (RDP; every token
                             private, T tokens from the grid c, 0 = max_tokens): an RDP filter with
                             budget M × cost; σ the smallest whose filter guarantee at δ is ≤ ε_total.
murag-ada                    ε_q = ε_thr + ε_RAG = ε_total / M, ε_thr = min(1, ε_q / 2) (000: ε_thr = 1);
                             bins fixed configuration (``rag_adapters.scoring``).
naive-multi-rag              000 Alg. 4: 000 Alg. 5 on every query with ε_q = ε_total / T (basic
                             composition, pure DP). ε_token is derived from ε_q and the number c of
                             private tokens (grid): the largest ε_token whose cost fits ε_q.
subsampling-multi-rag        001 Alg. 9: Poisson rate p (grid), per-query cost amplified and composed over
                             T queries in RDP, converted at δ; ε_token the largest that fits for c.
dp-sparse-vote-rag           003 Alg. 3 per question with (ε_total/T, δ/T), composed basically over T.
dp-ksa                       004 Alg. 1 per question, calibrated so that T answers RDP-compose to (ε_total, δ).
murag-answer-vote            MuRAG with answer-level voting (``accounting.rag.answer_vote``, spec/accounting/rag.md §5):
                             the whole ε_q = ε_total / M is the selection's ε (pure, EM over normalised answer
                             keys with a public base measure); grid: m, k, threshold t, key words, answer
                             tokens (and τ when several are given). Records the voters' non-private
                             plurality per question (``info['plurality']``) for the experiment only.
murag-ada-answer-vote        MuRAG-Ada with the same mechanism: ε_RAG = ε_q − ε_thr.
murag-answer-vote-history    murag-answer-vote with answer-history reuse (000 §6) within one account: the
                             answers it released earlier by the DP selection (not its Non-RAG fallbacks)
                             go into the fallback's prompt of every later question that shares words with
                             theirs (not into the voters': they answer from their documents).
murag-ada-answer-vote-history  the same reuse with murag-ada-answer-vote.
===========================  ====================================================================

``Settings.public_completion`` (CLI ``--public-completion``, run-wide, off by default = 000 Alg. 5 as printed):
the pure-DP methods continue an answer with the no-context lane after their c discoveries (free
post-processing, ``PureDpRagParams.public_completion``). ``Settings.em_prior`` (``--em-prior``): the
exponential mechanism's base measure, "uniform" (000 Alg. 5) or "non-rag" (the no-context model's next-token
distribution, public; ``PureDpRagParams.em_prior``).

Hyperparameters selected on dev (``grid``): m (voters) and k (documents per voter, hp key ``dpv``; K = m·k)
join every voting method's grid when the run gives more than one value of each (``Settings.voter_grid``;
DP-KSA has one response per document, so only m). Every pure-DP
method is parametrised by c, the number of private tokens per answer, instead of ε_token: given the
per-query budget, ε_token is the largest value whose cost with c tokens fits it (000 Alg. 5 sets
c = ⌊ε/ε_RAG⌋ from ε_token; we invert the same relation, so the grid {c} is the grid {ε_token} seen from
the other side, and it stays meaningful when ε_q is 0.1 or 100). Grids: (c, τ) for MuRAG, c for MuRAG-Ada,
Naive and DPSparseVoteRAG, (p, c) for subsampling, k for Non-Private-RAG. SVT threshold θ = m/2 (000/003).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dprag.accounting.events import SelfComposedEvent
from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.mechanisms.ksa import calibrate_dp_ksa
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.protocols import Generator, Retriever
from dprag.accounting.rag.budget import certified_epsilon
from dprag.accounting.rag.common import RagAnswer
from dprag.accounting.rag.history import AnswerHistory
from dprag.accounting.rag.ksa import dp_ksa
from dprag.accounting.rag.mechanism import filter_charge
from dprag.accounting.rag.multi_query import MuRAG, MuRAGAda, NaiveMultiRAG, RetrievalParams, SubsamplingMultiRAG
from dprag.accounting.rag.single_query import (
    GaussianVoteRagParams,
    PureDpRagParams,
    calibrate_sparse_vote,
    dp_sparse_vote_rag,
    non_private_rag,
    non_private_rag_many,
    non_rag,
)
from dprag.accounting.rdp import epsilon_of
from dprag.accounting.stores import MemoryBudgetStore
from dprag.errors import InvalidParameterError
from dprag.rag_adapters.datasets.base import QAItem


# ----------------------------------------------------------------------------------------------------------
# context
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """Run-wide settings (not tuned).

    ``m`` voters (one document each: K = m); ``queries`` T of the *test* run (dev tuning uses the same
    per-query parameters); ``taus``: the retrieval-threshold grid of MuRAG on this retriever's score scale;
    ``edges``: MuRAG-Ada's fixed bins (descending).
    """

    m: int = 10
    queries: int = 100
    max_tokens: int = 16
    M: int = 1
    delta: float = 1e-5
    epsilon_thr: float = 1.0
    taus: tuple[float, ...] = (50.0, 60.0)
    edges: tuple[float, ...] = tuple(np.round(100.0 - 0.2 * np.arange(351), 10).tolist())
    private_tokens: tuple[int, ...] = (2, 4)  # 0 = "auto": from the EM margin rule (``auto_private_tokens``)
    em_margin: float = 15.0
    probabilities: tuple[float, ...] = (0.1, 0.3)
    npr_k: tuple[int, ...] = (1, 3, 5)
    ksa_response_tokens: int = 12
    public_completion: bool = False
    em_prior: str = "uniform"
    m_grid: tuple[int, ...] = ()
    docs_per_voter: tuple[int, ...] = (1,)
    vote_thresholds: tuple[float, ...] = (2.0,)  # answer-vote: t in nats (base measure of ⊥: 1 − e^−t)
    key_words: tuple[int, ...] = (3,)  # answer-vote: words per key (the public normalisation's max_words)
    answer_tokens: tuple[int, ...] = ()  # answer-vote: the voters' answer length grid (empty = max_tokens)
    abstain_empty: bool = False  # answer-vote: voters with only empty (padding) documents abstain
    answer_selection: str = "universal"  # answer-vote: "universal" (pure EM over Σ*) or "seen" ((ε, δ/M) per query)
    normalizer: str = "answer-keys-v1"  # answer-vote: the public answer-to-key normalisation (spec/answer-keys.md)

    def voter_grid(self) -> list[dict]:
        """The (m, documents per voter) part of a voting method's grid: a key appears in the hyperparameters
        only when its grid has more than one value (``m_grid`` empty = ``m`` alone)."""
        ms = self.m_grid if len(self.m_grid) > 1 else (None,)
        ks = self.docs_per_voter if len(self.docs_per_voter) > 1 else (None,)
        return [{**({} if m is None else {"m": m}), **({} if k is None else {"dpv": k})} for m in ms for k in ks]

    def voters(self, hp: dict) -> int:
        """m of one grid setting."""
        return int(hp.get("m", self.m_grid[0] if len(self.m_grid) == 1 else self.m))

    def retrieval(self, hp: dict) -> RetrievalParams:
        """Documents per voter of one grid setting (000 Alg. 5's k; Top-K uses K = m·k)."""
        return RetrievalParams(int(hp.get("dpv", self.docs_per_voter[0])))


@dataclass
class Context:
    """What every method runs on: the retriever, the generator, the settings and a seed."""

    retriever: Retriever
    generator: Generator
    settings: Settings
    seed: bytes = b"dprag-experiments"

    def source(self, *label: object) -> RandomSource:
        return RandomSource.from_seed(self.seed, "/".join(str(x) for x in label).encode())


class Session:
    """Answers questions in order for one (method, ε_total, hyperparameters) cell.

    ``derived``: the per-query parameters computed from (ε_total, hyperparameters), for the report."""

    derived: dict = {}

    def answer(self, item: QAItem) -> RagAnswer:  # pragma: no cover - interface
        raise NotImplementedError

    def answer_many(self, items: Sequence[QAItem]) -> list[RagAnswer]:
        """Answers in the order given; a stateless method may batch them (the result is the same answers)."""
        return [self.answer(item) for item in items]

    def guarantee(self) -> tuple[float, float]:
        """The certified total (ε, δ) of the answers given so far (ex ante for filters)."""
        return 0.0, 0.0


@dataclass(frozen=True)
class MethodSpec:
    name: str
    private: bool
    grid: Callable[[Context, float], list[dict]]
    build: Callable[[Context, float, dict], Session]
    uses_eps: bool = True
    doc: str = ""


# ----------------------------------------------------------------------------------------------------------
# per-token budgets from per-query budgets
# ----------------------------------------------------------------------------------------------------------
def _largest_fitting(fits: Callable[[float], bool], hi: float, iters: int = 60) -> float:
    """Largest x in (0, hi] with fits(x) (fits monotone decreasing in x); 0.0 if none above hi·2^-40."""
    if fits(hi):
        return hi
    lo = hi * 2.0**-40
    if not fits(lo):
        return 0.0
    for _ in range(iters):
        mid = math.sqrt(lo * hi)
        if fits(mid):
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-9:
            break
    return lo


def auto_private_tokens(m: int, epsilon_query: float, margin: float, max_tokens: int) -> int:
    """Data-independent choice of c: the most private tokens whose ε_token keeps the exponential mechanism's
    log-odds for a unanimous vote, m·ε_Expo/2 = m·ε_token/4, at least ``margin`` (000 Alg. 5: a token with h
    votes has weight exp(ε_Expo·h/2); against a vocabulary of V ≈ 5·10^4 ≈ e^10.8 tokens a margin of 15 makes
    a unanimous discovery right with probability ≈ 1 − e^-4.2). With ε_token = 4ε_q/(1+3c) (θ drawn once):
    c = ⌊(ε_q·m/margin − 1)/3⌋, clipped to [1, max_tokens]."""
    c = math.floor((epsilon_query * m / margin - 1) / 3)
    return int(min(max(c, 1), max_tokens))


def pure_rag_params(
    m: int, c: int, epsilon_query: float, *, margin: float = 15.0, max_tokens: int = 32
) -> PureDpRagParams:
    """000 Alg. 5 with exactly c private tokens and the largest ε_token whose pure cost is ≤ ε_query.

    c = 0 means "auto" (``auto_private_tokens``)."""
    if c == 0:
        c = auto_private_tokens(m, epsilon_query, margin, max_tokens)

    def fits(e: float) -> bool:  # basic composition of the pure costs (a fresh accountant per evaluation)
        return certified_epsilon(PureDpRagParams(m, e, c).cost, 0.0) <= epsilon_query

    e = _largest_fitting(fits, 4.0 * epsilon_query)
    if e <= 0:
        raise InvalidParameterError("epsilon_total", f"per-query budget {epsilon_query:g} too small for c={c}")
    return PureDpRagParams(m, e, c)


def subsampling_rag_params(
    m: int, c: int, probability: float, epsilon_total: float, delta: float, queries: int
) -> PureDpRagParams:
    """Largest ε_token such that T amplified copies of 000 Alg. 5 (c tokens) fit (ε_total, δ) (001 Alg. 9)."""

    def fits(e: float) -> bool:
        return (
            SubsamplingMultiRAG.total_epsilon(PureDpRagParams(m, e, c).cost, probability, queries, delta)
            <= epsilon_total
        )

    e = _largest_fitting(fits, 8.0 * epsilon_total, iters=30)
    if e <= 0:
        raise InvalidParameterError("epsilon_total", f"budget {epsilon_total:g} too small for c={c}, p={probability}")
    return PureDpRagParams(m, e, c)


def gnmax_params(m: int, tokens: int, max_retrievals: int, epsilon_total: float, delta: float) -> GaussianVoteRagParams:
    """GNMax voting with ``tokens`` private tokens and the smallest σ whose RDP filter (M answers per document)
    certifies ≤ ε_total at δ."""

    def fits(inv_sigma: float) -> bool:
        cost = GaussianVoteRagParams(m, 1.0 / inv_sigma, tokens).cost
        try:
            budget = FilterBudget.for_queries(max_retrievals, cost, mode="rdp")
        except InvalidParameterError:  # beyond the filter's representable budget: certainly too small a σ
            return False
        return budget.guarantee(delta)[0] <= epsilon_total

    x = _largest_fitting(fits, 1e3)
    if x <= 0:
        raise InvalidParameterError("epsilon_total", f"budget {epsilon_total:g} too small for {tokens} GNMax tokens")
    return GaussianVoteRagParams(m, 1.0 / x, tokens)


def _with_tokens(p: PureDpRagParams, s: Settings) -> PureDpRagParams:
    """The run-wide generation settings on top of per-query parameters."""
    return PureDpRagParams(
        p.m,
        p.epsilon_token,
        p.max_private_tokens,
        theta=p.theta,
        max_tokens=s.max_tokens,
        redraw_threshold=p.redraw_threshold,
        public_completion=s.public_completion,
        em_prior=s.em_prior,
    )


# ----------------------------------------------------------------------------------------------------------
# sessions
# ----------------------------------------------------------------------------------------------------------
class _Fn(Session):
    """A stateless method: ``fn(item)``; ``many(items)`` (optional) answers a batch at once."""

    def __init__(self, fn, guarantee=(0.0, 0.0), many=None):
        self.fn, self._g, self.many = fn, guarantee, many

    def answer(self, item):
        return self.fn(item)

    def answer_many(self, items):
        return self.many(list(items)) if self.many is not None else super().answer_many(items)

    def guarantee(self):
        return self._g


class _Composed(Session):
    """A per-question mechanism with a fixed per-question (ε_q, δ_q), composed basically over questions —
    or, with ``composed``, whose guarantee after n questions is ``composed(n)`` (an RDP-composed session)."""

    def __init__(self, fn, eps_q: float, delta_q: float, composed: Callable[[int], tuple[float, float]] | None = None):
        self.fn, self.eps_q, self.delta_q, self.n = fn, eps_q, delta_q, 0
        self.composed = composed

    def answer(self, item):
        self.n += 1
        return self.fn(item)

    def guarantee(self):
        if self.composed is not None:
            return self.composed(self.n) if self.n else (0.0, 0.0)
        return self.n * self.eps_q, self.n * self.delta_q


class _Multi(Session):
    """MuRAG / MuRAG-Ada / Naive / Subsampling objects; optional answer-history reuse (one account)."""

    def __init__(self, algo, guarantee: Callable[[], tuple[float, float]], history: AnswerHistory | None = None):
        self.algo, self._guarantee, self.history = algo, guarantee, history
        self.scope = AnswerHistory.scope("experiment-user") if history is not None else None

    def answer(self, item):
        hist = self.history.relevant(self.scope, item.question) if self.history is not None else ()
        ans = self.algo.answer(item.question, history=hist)
        ans.info["history_pairs"] = len(hist)
        # a Non-RAG fallback says nothing about the corpus: only what a DP release chose is worth reusing
        if self.history is not None and not ans.info.get("fallback", False):
            self.history.record(self.scope, item.question, ans.text)
        return ans

    def guarantee(self):
        return self._guarantee()


# ----------------------------------------------------------------------------------------------------------
# the methods
# ----------------------------------------------------------------------------------------------------------
def _derive(session: Session, rag: PureDpRagParams, **extra) -> Session:
    session.derived = {
        "m": rag.m,
        "epsilon_token": rag.epsilon_token,
        "c": rag.max_private_tokens,
        "theta": rag.m / 2 if rag.theta is None else rag.theta,
        **extra,
    }
    return session


def _filter(ctx: Context, per_query) -> IndividualRenyiFilter:
    s = ctx.settings
    return IndividualRenyiFilter(
        MemoryBudgetStore(len(ctx.retriever)), FilterBudget.for_queries(s.M, per_query, mode="pure")
    )


def _murag_grid(ctx, eps):
    s = ctx.settings
    return [{**v, "c": c, "tau": t} for v in s.voter_grid() for c in s.private_tokens for t in s.taus]


def _c_grid(ctx, eps):
    s = ctx.settings
    return [{**v, "c": c} for v in s.voter_grid() for c in s.private_tokens]


def _murag_build(history: bool):
    def build(ctx: Context, eps: float, hp: dict) -> Session:
        s = ctx.settings
        eps_q = eps / s.M
        rag = _with_tokens(
            pure_rag_params(s.voters(hp), hp["c"], eps_q, margin=s.em_margin, max_tokens=s.max_tokens), s
        )
        flt = _filter(ctx, rag.cost)
        algo = MuRAG(
            ctx.retriever,
            ctx.generator,
            flt,
            rag,
            tau=hp["tau"],
            retrieval=s.retrieval(hp),
            source=ctx.source("murag", eps, hp, history),
        )
        return _derive(_Multi(algo, lambda: flt.guarantee(), AnswerHistory() if history else None), rag, eps_q=eps_q)

    return build


def _gnmax_build(ctx: Context, eps: float, hp: dict) -> Session:
    s = ctx.settings
    rag = gnmax_params(s.voters(hp), hp["c"] or s.max_tokens, s.M, eps, s.delta)
    flt = IndividualRenyiFilter(
        MemoryBudgetStore(len(ctx.retriever)), FilterBudget.for_queries(s.M, rag.cost, mode="rdp")
    )
    algo = MuRAG(
        ctx.retriever,
        ctx.generator,
        flt,
        rag,
        tau=hp["tau"],
        retrieval=s.retrieval(hp),
        source=ctx.source("murag-gnmax", eps, hp),
    )
    out = _Multi(algo, lambda: flt.guarantee(s.delta))
    out.derived = {"m": rag.m, "sigma": rag.sigma, "tokens": rag.max_tokens}
    return out


def _ada_build(ctx: Context, eps: float, hp: dict) -> Session:
    s = ctx.settings
    eps_q = eps / s.M
    eps_thr = min(s.epsilon_thr, eps_q / 2)
    rag = _with_tokens(
        pure_rag_params(s.voters(hp), hp["c"], eps_q - eps_thr, margin=s.em_margin, max_tokens=s.max_tokens), s
    )
    # the two charges a touched document pays, each rounded to units as the filter charges them
    flt = IndividualRenyiFilter(MemoryBudgetStore(len(ctx.retriever)), MuRAGAda.filter_budget(s.M, rag.cost, eps_thr))
    algo = MuRAGAda(
        ctx.retriever,
        ctx.generator,
        flt,
        rag,
        edges=s.edges,
        epsilon_thr=eps_thr,
        retrieval=s.retrieval(hp),
        source=ctx.source("murag-ada", eps, hp),
    )
    return _derive(_Multi(algo, lambda: flt.guarantee()), rag, eps_q=eps_q, eps_thr=eps_thr)


def _naive_build(ctx: Context, eps: float, hp: dict) -> Session:
    s = ctx.settings
    rag = _with_tokens(
        pure_rag_params(s.voters(hp), hp["c"], eps / s.queries, margin=s.em_margin, max_tokens=s.max_tokens), s
    )
    algo = NaiveMultiRAG(
        ctx.retriever, ctx.generator, rag, retrieval=s.retrieval(hp), source=ctx.source("naive", eps, hp)
    )
    return _derive(_Multi(algo, lambda: algo.guarantee()), rag, eps_q=eps / s.queries)


def _subsampling_build(ctx: Context, eps: float, hp: dict) -> Session:
    s = ctx.settings
    rag = _with_tokens(subsampling_rag_params(s.voters(hp), hp["c"] or 1, hp["p"], eps, s.delta, s.queries), s)
    algo = SubsamplingMultiRAG(
        ctx.retriever,
        ctx.generator,
        rag,
        probability=hp["p"],
        retrieval=s.retrieval(hp),
        source=ctx.source("subsampling", eps, hp),
    )
    return _derive(_Multi(algo, lambda: algo.guarantee(s.delta) if algo.queries else (0.0, 0.0)), rag)


def _sparse_vote_build(ctx: Context, eps: float, hp: dict) -> Session:
    """003 Alg. 3 per question, calibrated so that the T = ``settings.queries`` answers of the session compose
    (the accountant's best rule: the exact optimal composition at the MIA's sizes) to (ε_total, δ)
    (``calibrate_sparse_vote(…, queries=T)``); the guarantee after n answers is the n-fold composition of the per-answer
    cost at δ."""
    s = ctx.settings
    b = calibrate_sparse_vote(eps, s.delta, discoveries=hp["c"] or 1, queries=s.queries)
    src = ctx.source("dp-sparse-vote-rag", eps, hp)

    def fn(item):
        return dp_sparse_vote_rag(
            item.question,
            ctx.retriever,
            ctx.generator,
            m=s.voters(hp),
            k=s.retrieval(hp).docs_per_voter,
            epsilon_token=b.epsilon_token,
            delta_token=b.delta_token,
            epsilon_total=b.epsilon_query,
            delta_total=b.delta_query,
            max_tokens=s.max_tokens,
            source=src,
        )

    def composed(n: int) -> tuple[float, float]:
        return certified_epsilon(b.session(n), s.delta), s.delta

    out = _Composed(fn, b.epsilon_query, b.delta_query, composed)
    out.derived = {
        "queries": s.queries,
        "epsilon_token": b.epsilon_token,
        "delta_token": b.delta_token,
        "c": b.discoveries,
        "eps_q": b.epsilon_query,
        "delta_q": b.delta_query,
    }
    return out


def _ksa_build(ctx: Context, eps: float, hp: dict) -> Session:
    """004 Alg. 1 per question, calibrated so that the T = ``settings.queries`` answers of the session
    RDP-compose to (ε_total, δ) (``calibrate_dp_ksa(…, queries=T)``); the guarantee after n answers is the
    n-fold composition of the per-answer event converted at δ/2, plus n·δ_PTR."""
    s = ctx.settings
    params = calibrate_dp_ksa(eps, s.delta, queries=s.queries)
    src = ctx.source("dp-ksa", eps, hp)

    def fn(item):
        return dp_ksa(
            item.question,
            ctx.retriever,
            ctx.generator,
            n_docs=s.voters(hp),
            epsilon=eps,
            delta=s.delta,
            response_tokens=s.ksa_response_tokens,
            max_tokens=s.max_tokens,
            k_max=hp.get("k_max", 10),
            source=src,
            queries=s.queries,
        )

    def composed(n: int) -> tuple[float, float]:
        e, d = epsilon_of(SelfComposedEvent(params.event(), n), params.conversion_delta)
        return float(e), float(d)

    out = _Composed(fn, eps / s.queries, s.delta / s.queries, composed)
    out.derived = {
        "queries": s.queries,
        "epsilon_em": params.epsilon_em,
        "sigma": params.sigma,
        "ptr_delta": params.ptr_delta,
    }
    return out


def _answer_vote_grid(ada: bool):
    def grid(ctx, eps):
        s = ctx.settings
        taus = (None,) if ada or len(s.taus) == 1 else s.taus
        ts = (None,) if s.answer_selection == "seen" else s.vote_thresholds  # the seen selection has no t
        return [
            {**v, **({} if t is None else {"t": t}), "kw": kw, "tok": tok, **({} if tau is None else {"tau": tau})}
            for v in s.voter_grid()
            for t in ts
            for kw in s.key_words
            for tok in (s.answer_tokens or (s.max_tokens,))
            for tau in taus
        ]

    return grid


def answer_vote_params(
    m: int,
    epsilon_query: float,
    hp: dict,
    *,
    diagnostics: bool = True,
    abstain_empty: bool = False,
    selection: str = "universal",
    delta_query: float = 0.0,
    history_in_voters: bool = True,
    normalizer: str = "answer-keys-v1",
):
    """Answer-level voting with the whole per-query budget as the selection's ε: cost EM(ε_q) (universal) or
    (ε_q, δ_q) (seen). ``normalizer``: a name of ``rag_adapters.answer_keys.NORMALIZERS``."""
    from dprag.accounting.rag.answer_vote import AnswerVoteParams
    from dprag.rag_adapters.answer_keys import NORMALIZERS

    seen = selection == "seen"
    return AnswerVoteParams(
        m,
        epsilon_query,
        threshold=0.0 if seen else float(hp["t"]),
        max_tokens=int(hp["tok"]),
        max_key_words=int(hp["kw"]),
        normalizer=NORMALIZERS[normalizer],
        diagnostics=diagnostics,
        abstain_empty=abstain_empty,
        selection=selection,
        delta=float(delta_query) if seen else 0.0,
        history_in_voters=history_in_voters,
    )


def _answer_vote_build(ada: bool, history: bool = False):
    """``history``: answer-history reuse in the fallback's prompt only; the random stream is the plain method's,
    so the two cells differ only where the selection fell back (a paired comparison)."""

    def build(ctx: Context, eps: float, hp: dict) -> Session:
        s = ctx.settings
        eps_q = eps / s.M
        tau = float(hp.get("tau", s.taus[0]))
        if ada:
            eps_thr = min(s.epsilon_thr, eps_q / 2)
            rag = answer_vote_params(
                s.voters(hp),
                eps_q - eps_thr,
                hp,
                abstain_empty=s.abstain_empty,
                selection=s.answer_selection,
                delta_query=s.delta / s.M,
                history_in_voters=not history,
                normalizer=s.normalizer,
            )
            flt = IndividualRenyiFilter(
                MemoryBudgetStore(len(ctx.retriever)), MuRAGAda.filter_budget(s.M, rag.cost, eps_thr)
            )
            algo = MuRAGAda(
                ctx.retriever,
                ctx.generator,
                flt,
                rag,
                edges=s.edges,
                epsilon_thr=eps_thr,
                retrieval=s.retrieval(hp),
                source=ctx.source("murag-ada-answer-vote", eps, hp),
            )
            derived = {"eps_thr": eps_thr}
        else:
            rag = answer_vote_params(
                s.voters(hp),
                eps_q,
                hp,
                abstain_empty=s.abstain_empty,
                selection=s.answer_selection,
                delta_query=s.delta / s.M,
                history_in_voters=not history,
                normalizer=s.normalizer,
            )
            flt = _filter(ctx, filter_charge(rag.cost)[0])
            algo = MuRAG(
                ctx.retriever,
                ctx.generator,
                flt,
                rag,
                tau=tau,
                retrieval=s.retrieval(hp),
                source=ctx.source("murag-answer-vote", eps, hp),
            )
            derived = {"tau": tau}
        out = _Multi(algo, lambda: algo.guarantee(), AnswerHistory() if history else None)
        out.derived = {
            "m": rag.m,
            "epsilon_selection": rag.epsilon,
            "threshold": rag.threshold,
            "selection": rag.selection,
            "delta_q": rag.delta,
            "vote_threshold": rag.vote_threshold,
            "answer_tokens": rag.max_tokens,
            "key_words": rag.max_key_words,
            "normalizer": s.normalizer,
            "eps_q": eps_q,
            "abstain_empty": rag.abstain_empty,
            "history_in_voters": rag.history_in_voters,
            **derived,
        }
        return out

    return build


def _non_rag_build(ctx, eps, hp):
    return _Fn(lambda item: non_rag(item.question, ctx.generator, max_tokens=ctx.settings.max_tokens))


def _npr_build(ctx, eps, hp):
    return _Fn(
        lambda item: non_private_rag(
            item.question, ctx.retriever, ctx.generator, k=hp["k"], max_tokens=ctx.settings.max_tokens
        ),
        (math.inf, 0.0),
        many=lambda items: non_private_rag_many(
            [i.question for i in items], ctx.retriever, ctx.generator, k=hp["k"], max_tokens=ctx.settings.max_tokens
        ),
    )


METHODS: dict[str, MethodSpec] = {
    "non-rag": MethodSpec(
        "non-rag", True, lambda c, e: [{}], _non_rag_build, uses_eps=False, doc="the LLM alone (ε = 0)"
    ),
    "non-private-rag": MethodSpec(
        "non-private-rag",
        False,
        lambda c, e: [{"k": k} for k in c.settings.npr_k],
        _npr_build,
        uses_eps=False,
        doc="top-k in one prompt, no privacy",
    ),
    "murag": MethodSpec("murag", True, _murag_grid, _murag_build(False), doc="000 Alg. 1"),
    "murag-gnmax": MethodSpec(
        "murag-gnmax", True, _murag_grid, _gnmax_build, doc="000 Alg. 1 with GNMax voting (RDP filter)"
    ),
    "murag-ada": MethodSpec("murag-ada", True, _c_grid, _ada_build, doc="000 Alg. 2"),
    "naive-multi-rag": MethodSpec("naive-multi-rag", True, _c_grid, _naive_build, doc="000 Alg. 4"),
    "subsampling-multi-rag": MethodSpec(
        "subsampling-multi-rag",
        True,
        lambda c, e: [
            {**v, "p": p, "c": k}
            for v in c.settings.voter_grid()
            for p in c.settings.probabilities
            for k in c.settings.private_tokens
        ],
        _subsampling_build,
        doc="001 Alg. 9",
    ),
    "dp-sparse-vote-rag": MethodSpec(
        "dp-sparse-vote-rag", True, _c_grid, _sparse_vote_build, doc="003 Alg. 3 composed over T"
    ),
    "dp-ksa": MethodSpec(
        "dp-ksa",
        True,
        lambda c, e: [
            {**({"m": m} if len(c.settings.m_grid) > 1 else {}), "k_max": 10} for m in (c.settings.m_grid or (None,))
        ],
        _ksa_build,
        doc="004 Alg. 1 composed over T (one response per document: no dpv)",
    ),
    "murag-answer-vote": MethodSpec(
        "murag-answer-vote",
        True,
        _answer_vote_grid(False),
        _answer_vote_build(False),
        doc="000 Alg. 1 with answer-level voting (spec/accounting/rag.md §5; pure EM over keys)",
    ),
    "murag-ada-answer-vote": MethodSpec(
        "murag-ada-answer-vote",
        True,
        _answer_vote_grid(True),
        _answer_vote_build(True),
        doc="000 Alg. 2 with answer-level voting",
    ),
    "murag-history": MethodSpec(
        "murag-history", True, _murag_grid, _murag_build(True), doc="000 Alg. 1 + answer-history reuse (000 §6)"
    ),
    "murag-answer-vote-history": MethodSpec(
        "murag-answer-vote-history",
        True,
        _answer_vote_grid(False),
        _answer_vote_build(False, history=True),
        doc="murag-answer-vote + answer-history reuse (000 §6)",
    ),
    "murag-ada-answer-vote-history": MethodSpec(
        "murag-ada-answer-vote-history",
        True,
        _answer_vote_grid(True),
        _answer_vote_build(True, history=True),
        doc="murag-ada-answer-vote + answer-history reuse (000 §6)",
    ),
}


def get_method(name: str) -> MethodSpec:
    if name not in METHODS:
        raise InvalidParameterError("method", f"must be one of {sorted(METHODS)}", name)
    return METHODS[name]


def check_methods(names: Sequence[str]) -> list[str]:
    out = []
    for n in names:
        get_method(n)
        if n not in out:
            out.append(n)
    if not out:
        raise InvalidParameterError("methods", "must name at least one method")
    return out
