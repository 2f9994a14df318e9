"""Single-query RAG: Non-RAG, Non-private RAG, VoteRAG, DPVoteRAG, DPSparseVoteRAG and the pure-DP DP-RAG.

Sources: 003 (Koga et al.) Algorithm 2 (DPVoteRAG) and Algorithm 3 (DPSparseVoteRAG); 000 Algorithm 5 /
001 Algorithm 7 (the pure-DP variant: exponential mechanism instead of LimitedDomain).

Sample-and-aggregate. The m·k retrieved documents (ranked list) are split uniformly at random into m voters
of k documents each; every voter proposes its greedy next token given the question, its documents and the
tokens released so far; the released token is chosen privately from the vote histogram. Neighbouring
relation (003 Thm 2 proof): one document added, removed or replaced changes at most one voter's documents,
hence one vote — one count −1 and another +1 (ℓ∞ sensitivity 1, ℓ0 sensitivity 2, not monotone).

All voters of one step (plus the no-retrieval "non-RAG" lane when the algorithm needs it) are one batch of
one ``DecodingSession``: one batched forward pass per released token, with the KV cache reused.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypedDict, Unpack, cast

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

from ..errors import check_delta, check_epsilon, check_positive_int
from ..events import (
    ApproxDpEvent,
    ComposedEvent,
    ExponentialMechanismEvent,
    NoOpEvent,
    PrivacyEvent,
    PureDpEvent,
    SelfComposedEvent,
)
from ..mechanisms.exponential import vote_exponential_mechanism
from ..mechanisms.limited_domain import BOTTOM, limited_domain
from ..mechanisms.noisy_max import gaussian_vote_max, gaussian_vote_max_event
from ..mechanisms.sparse_vector import SparseVector
from ..noise.source import RandomSource
from ..protocols import Generator, Prompt, Retriever, stop_tokens
from .budget import certified_epsilon, max_steps, require_steps
from .common import RagAnswer, documents_text, exact_top_k, random_partition, vote_histogram
from .containment import ContainedSession

#: Step rule: (non-RAG token or None, vote histogram) -> token to release, or None to halt.
StepRule = Callable[[int | None, npt.NDArray[np.intp]], int | None]
#: Step rule that also reads the non-RAG lane's logits row (``decode_by_vote(..., with_logits=True)``).
LogitsStepRule = Callable[[int | None, npt.NDArray[np.intp], npt.NDArray[np.floating[Any]]], int | None]


def _check_tokens(max_tokens: int) -> int:
    return check_positive_int("max_tokens", max_tokens)


def decode_by_vote(
    generator: Generator,
    question: str,
    voter_contexts: Sequence[tuple[str, ...]],
    rule: StepRule | LogitsStepRule,
    max_tokens: int,
    *,
    with_non_rag: bool,
    history: tuple[tuple[str, str], ...] = (),
    with_logits: bool = False,
) -> list[int]:
    """Lock-step decoding of m voters (and optionally the non-RAG lane, batch row 0) under ``rule``.

    Stops when the rule halts, releases <EOS>, or after ``max_tokens`` tokens. Returns the released tokens
    (an <EOS> released is included). ``with_logits`` (needs ``with_non_rag``): the rule also receives the
    non-RAG lane's logits row (public: the model given no document).

    Containment (spec/accounting/rag.md §6): the session is a ``ContainedSession``, so a voter whose ``start``,
    ``logits`` or ``advance`` fails is replaced by its empty-context prompt at the same batch shape, from the step it
    failed at (the released tokens replayed); the other voters' logits are unchanged bit for bit, and the histogram
    keeps m votes. The last released token is not fed back (its logits would never be read).
    """
    if with_logits and not with_non_rag:
        raise InvalidParameterError("with_logits", "needs the non-RAG lane (with_non_rag=True)")
    if not voter_contexts:
        raise InvalidParameterError("voter_contexts", "need at least one voter")
    prompts = [Prompt(question, tuple(ctx), history) for ctx in voter_contexts]
    if with_non_rag:
        prompts = [Prompt(question, (), history)] + prompts
    session = ContainedSession(generator, prompts, max_tokens)
    stops = stop_tokens(generator)
    released: list[int] = []
    try:
        for step in range(max_tokens):
            logits = session.logits()
            non_rag = int(np.argmax(logits[0])) if with_non_rag else None
            _, hist = vote_histogram(logits[1:] if with_non_rag else logits)
            tok = (
                cast(LogitsStepRule, rule)(non_rag, hist, logits[0])
                if with_logits
                else cast(StepRule, rule)(non_rag, hist)
            )
            if tok is None:
                break
            released.append(int(tok))
            if tok in stops or step == max_tokens - 1:
                break
            session.advance(int(tok))
    finally:
        session.close()
    return released


def _log_softmax(logits: npt.ArrayLike) -> npt.NDArray[np.float64]:
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max()
    out: npt.NDArray[np.float64] = z - np.log(np.exp(z).sum())
    return out


def _text(generator: Generator, tokens: list[int]) -> str:
    stops = stop_tokens(generator)
    return generator.decode([t for t in tokens if t not in stops]).strip()


def voter_contexts(retriever: Retriever, ids: npt.ArrayLike, m: int, source: RandomSource) -> list[tuple[str, ...]]:
    """Uniformly random partition of the ranked ids into m voters, as document texts (padding -1 = "")."""
    return [documents_text(retriever, part) for part in random_partition(ids, m, source)]


def given_list_voters(
    doc_ids: npt.ArrayLike, m: int, retriever: Retriever, source: RandomSource
) -> tuple[npt.NDArray[np.int64], list[tuple[str, ...]]]:
    """A given ranked list (length a positive multiple of m, -1 = empty document) and its voters' contexts."""
    ids = np.asarray(doc_ids, dtype=np.int64)
    if len(ids) == 0 or len(ids) % m:
        raise InvalidParameterError("doc_ids", f"length must be a positive multiple of m={m}", len(ids))
    return ids, voter_contexts(retriever, ids, m, source)


# ------------------------------------------------------------------------------------------------------
# Non-private baselines
# ------------------------------------------------------------------------------------------------------
def non_rag(
    question: str, generator: Generator, *, max_tokens: int, history: tuple[tuple[str, str], ...] = ()
) -> RagAnswer:
    """The LLM alone, no retrieval: touches no document, spends nothing."""
    text = generator.generate(Prompt(question, (), history), _check_tokens(max_tokens))
    return RagAnswer(text=text.strip(), cost=NoOpEvent(), info={"method": "non-rag", "private": True})


def non_private_rag(
    question: str,
    retriever: Retriever,
    generator: Generator,
    *,
    k: int,
    max_tokens: int,
    history: tuple[tuple[str, str], ...] = (),
) -> RagAnswer:
    """Top-k retrieval pasted into one prompt: no privacy guarantee (``info['private'] = False``)."""
    return non_private_rag_many([question], retriever, generator, k=k, max_tokens=max_tokens, history=history)[0]


def non_private_rag_many(
    questions: Sequence[str],
    retriever: Retriever,
    generator: Generator,
    *,
    k: int,
    max_tokens: int,
    history: tuple[tuple[str, str], ...] = (),
) -> list[RagAnswer]:
    """``non_private_rag`` for several independent questions in one generation batch (an experiment's
    throughput path: each row is a function of its own prompt only, so the answers are those of one-by-one
    calls up to the batch's floating-point shape)."""
    n = _check_tokens(max_tokens)
    if not questions:
        return []
    ids = [exact_top_k(retriever, q, k)[0] for q in questions]
    texts = generator.generate_many(
        [Prompt(q, documents_text(retriever, i), history) for q, i in zip(questions, ids, strict=False)], n
    )
    return [
        RagAnswer(text=t.strip(), retrieved=i, info={"method": "non-private-rag", "private": False})
        for t, i in zip(texts, ids, strict=False)
    ]


def vote_rag(
    question: str,
    retriever: Retriever,
    generator: Generator,
    *,
    m: int,
    k: int,
    max_tokens: int,
    source: RandomSource | None = None,
    history: tuple[tuple[str, str], ...] = (),
) -> RagAnswer:
    """003's VoteRAG baseline: the same voting, the majority token released without noise (not private)."""
    m, k = check_positive_int("m", m), check_positive_int("k", k)
    src = RandomSource.resolve(source)
    ids, _ = exact_top_k(retriever, question, m * k)
    ctx = voter_contexts(retriever, ids, m, src)
    tokens = decode_by_vote(
        generator,
        question,
        ctx,
        lambda _nr, h: int(np.argmax(h)),
        _check_tokens(max_tokens),
        with_non_rag=False,
        history=history,
    )
    return RagAnswer(
        text=_text(generator, tokens),
        token_ids=tokens,
        retrieved=ids,
        info={"method": "vote-rag", "private": False, "m": m, "k": k},
    )


# ------------------------------------------------------------------------------------------------------
# DPVoteRAG (003 Algorithm 2)
# ------------------------------------------------------------------------------------------------------
def dp_vote_rag(
    question: str,
    retriever: Retriever,
    generator: Generator,
    *,
    m: int,
    k: int,
    epsilon_token: float,
    delta_token: float,
    epsilon_total: float,
    delta_total: float,
    max_tokens: int,
    source: RandomSource | None = None,
    history: tuple[tuple[str, str], ...] = (),
) -> RagAnswer:
    """003 Algorithm 2: every token by LimitedDomain(h_t, ε_token, δ_token) with k̄ = m; ⊥ halts.

    T_max is the largest token count whose composition the accountant certifies within
    (ε_total, δ_total) (``budget.max_steps``), capped by ``max_tokens``. The answer is charged T_max tokens
    ex ante (``cost``); ``events`` lists the tokens actually released.
    """
    m, k = check_positive_int("m", m), check_positive_int("k", k)
    eps_t, del_t = check_epsilon("epsilon_token", epsilon_token), check_delta("delta_token", delta_token)
    check_epsilon("epsilon_total", epsilon_total)
    check_delta("delta_total", delta_total)
    per_token = ApproxDpEvent(eps_t, del_t)
    t_max = min(
        require_steps(
            max_steps(lambda c: SelfComposedEvent(per_token, c), epsilon_total, delta_total), "epsilon_total"
        ),
        _check_tokens(max_tokens),
    )
    src = RandomSource.resolve(source)
    ids, _ = exact_top_k(retriever, question, m * k)
    ctx = voter_contexts(retriever, ids, m, src)
    events: list[PrivacyEvent] = []

    def rule(_nr: int | None, hist: npt.NDArray[np.intp]) -> int | None:
        tok, ev = limited_domain(hist, eps_t, del_t, m, src)
        events.append(ev)
        return None if tok is BOTTOM else tok

    tokens = decode_by_vote(generator, question, ctx, rule, t_max, with_non_rag=False, history=history)
    cost = SelfComposedEvent(per_token, t_max)
    return RagAnswer(
        text=_text(generator, tokens),
        token_ids=tokens,
        events=events,
        cost=cost,
        retrieved=ids,
        charged=ids,
        private_tokens=len(events),
        info={
            "method": "dp-vote-rag",
            "private": True,
            "m": m,
            "k": k,
            "t_max": t_max,
            "epsilon": certified_epsilon(cost, delta_total),
            "delta": delta_total,
        },
    )


# ------------------------------------------------------------------------------------------------------
# DPSparseVoteRAG (003 Algorithm 3)
# ------------------------------------------------------------------------------------------------------
def sparse_vote_cost(epsilon_token: float, delta_token: float, c: int) -> PrivacyEvent:
    """Ex-ante cost of c discoveries: each is an AboveThreshold run (ε_token/2, threshold re-drawn) plus
    LimitedDomain(ε_token/2, δ_token) (003 Thm 3 proof).

    The SVT part is charged at its certified cost for the float noise scales it samples with (spec/accounting/filters.md
    §5), which can exceed ε_token/2 by an ulp; LimitedDomain is charged at the same ε (an ε-DP release is ε'-DP for
    every ε' ≥ ε). Every step then has one ε, so the accountant's exact optimal composition (KOV 2015 Thm 3.3,
    homogeneous) applies at every count; with two ε's an ulp apart it would need Π(k_r + 1) loss states and
    fall back to the closed form, and the certified ε would jump with the rounding of ε_token.
    """
    svt = SparseVector.certified_max_epsilon(epsilon_token / 2, 1, 1, redraw_threshold=True)
    step = ComposedEvent((PureDpEvent(svt), ApproxDpEvent(max(svt, epsilon_token / 2), delta_token)))
    return SelfComposedEvent(step, c)


@dataclass(frozen=True)
class SparseVoteBudget:
    """Per-answer parameters of 003 Alg. 3 calibrated for a session of ``queries`` answers.

    ``epsilon_query`` / ``delta_query`` are the per-answer (ε_total, δ_total) to hand to
    ``dp_sparse_vote_rag``: its c_max at them is exactly ``discoveries``.
    """

    epsilon_token: float
    delta_token: float
    discoveries: int
    queries: int
    epsilon_query: float
    delta_query: float

    @property
    def cost(self) -> PrivacyEvent:
        """Ex-ante cost of one answer."""
        return sparse_vote_cost(self.epsilon_token, self.delta_token, self.discoveries)

    def session(self, answers: int) -> PrivacyEvent:
        """Cost of ``answers`` answers (adaptive composition)."""
        return SelfComposedEvent(self.cost, check_positive_int("answers", answers))


def calibrate_sparse_vote(epsilon: float, delta: float, *, discoveries: int, queries: int = 1) -> SparseVoteBudget:
    """The largest ε_token (to relative 1e-9, rounded down) such that ``queries`` = T answers of c =
    ``discoveries`` discoveries each compose, by the accountant's best rule (``certified_epsilon``), to ≤ (ε, δ).

    δ_token = δ/(2cT): the T·c LimitedDomain releases spend half of δ additively, the conversion the other half.
    Per answer, δ_query = δ/T and ε_query = certified_epsilon(cost of one answer, δ_query). At T = 1 this is the
    per-query calibration of 003 Thm 3. Splitting (ε, δ) into T basic-composition shares (ε/T, δ/T) instead
    wastes most of a long session: at ε = 10, δ = 1e-5, c = 4, T = 520 it allows ε_token ≈ 0.0048; composing
    the whole session by the accountant's best rule (here the exact optimal composition) allows ≈ 0.061.
    """
    eps = check_epsilon("epsilon", epsilon)
    dlt = check_delta("delta", delta)
    c = check_positive_int("discoveries", discoveries)
    t = check_positive_int("queries", queries)
    d_tok = dlt / (2.0 * c * t)

    def fits(e: float) -> bool:
        return certified_epsilon(SelfComposedEvent(sparse_vote_cost(e, d_tok, c), t), dlt) <= eps

    hi = 4.0 * eps  # one discovery alone costs ≥ ε_token/2 + ε_token/2: never fits
    lo = hi * 2.0**-40
    try:
        ok = fits(lo)
    except ArithmeticError:  # ε_token so small that the noise scales 2/ε_token overflow
        ok = False
    if not ok:
        raise InvalidParameterError("epsilon", f"is too small for {t} answers of {c} discoveries at this δ", epsilon)
    while hi / lo > 1.0 + 1e-9:
        mid = lo * math.sqrt(hi / lo)  # the geometric mean, without the underflow of lo·hi
        if fits(mid):
            lo = mid
        else:
            hi = mid
    d_q = dlt / t
    eps_q = certified_epsilon(sparse_vote_cost(lo, d_tok, c), d_q)
    if not eps_q > 0.0:  # underflow: no per-answer budget is left to hand to dp_sparse_vote_rag
        raise InvalidParameterError("epsilon", f"is too small for {t} answers of {c} discoveries at this δ", epsilon)
    got = max_steps(lambda n: sparse_vote_cost(lo, d_tok, n), eps_q, d_q)
    if got != c:  # certified ε is strictly increasing in the number of discoveries
        raise AssertionError(f"calibrate_sparse_vote: c_max {got} != {c}")
    return SparseVoteBudget(lo, d_tok, c, t, eps_q, d_q)


def dp_sparse_vote_rag(
    question: str,
    retriever: Retriever,
    generator: Generator,
    *,
    m: int,
    k: int,
    epsilon_token: float,
    delta_token: float,
    epsilon_total: float,
    delta_total: float,
    max_tokens: int,
    tau: float | None = None,
    source: RandomSource | None = None,
    history: tuple[tuple[str, str], ...] = (),
    public_completion: bool = False,
) -> RagAnswer:
    """003 Algorithm 3: spend budget only when few voters agree with the no-retrieval token.

    Per token: a_t = h_t[y_t^non-RAG]; if a_t + Lap(4/ε_Lap) ≤ τ̂ (a discovery) the token comes from
    LimitedDomain(h_t, ε_token/2, δ_token) and τ̂ is re-drawn, else the non-RAG token is released for free.
    ε_Lap = ε_token/2, τ = m/2 by default (003 §IV). c_max discoveries from the total budget (as T_max in
    ``dp_vote_rag``); the run stops after the token of the c_max-th discovery (003 Alg. 3: "if y_t = <EOS> or
    c = 0 then break"), at ⊥, at <EOS>, or after ``max_tokens``. ``public_completion`` (beyond 003, as in
    ``PureDpRagParams``): after the c_max-th discovery decoding goes on with the non-RAG lane's token only
    (post-processing; the cost is unchanged). ``info['stop']`` says why decoding stopped: "bottom" (LimitedDomain
    released ⊥), "c_max", "eos" or "max_tokens".
    """
    m, k = check_positive_int("m", m), check_positive_int("k", k)
    eps_t, del_t = check_epsilon("epsilon_token", epsilon_token), check_delta("delta_token", delta_token)
    check_epsilon("epsilon_total", epsilon_total)
    check_delta("delta_total", delta_total)
    c_max = require_steps(
        max_steps(lambda c: sparse_vote_cost(eps_t, del_t, c), epsilon_total, delta_total), "epsilon_total"
    )
    src = RandomSource.resolve(source)
    ids, _ = exact_top_k(retriever, question, m * k)
    ctx = voter_contexts(retriever, ids, m, src)
    svt = SparseVector(
        m / 2 if tau is None else tau, eps_t / 2, c_max, 1, src, direction="below", redraw_threshold=True
    )
    ld_events: list[PrivacyEvent] = []
    stop: list[str] = []

    def rule(non_rag_token: int | None, hist: npt.NDArray[np.intp]) -> int | None:
        if svt.halted:  # the c-th discovery was the last private token; only public completion may follow
            if public_completion:
                return non_rag_token
            stop.append("c_max")
            return None
        if svt.test(int(hist[cast(int, non_rag_token)])):  # with_non_rag=True: a token, never None
            tok, ev = limited_domain(hist, eps_t / 2, del_t, m, src)
            ld_events.append(ev)
            if tok is BOTTOM:
                stop.append("bottom")
                return None
            return tok
        return non_rag_token

    max_tokens = _check_tokens(max_tokens)
    tokens = decode_by_vote(generator, question, ctx, rule, max_tokens, with_non_rag=True, history=history)
    if not stop:
        stop.append("eos" if tokens and tokens[-1] in stop_tokens(generator) else "max_tokens")
    cost = sparse_vote_cost(eps_t, del_t, c_max)
    return RagAnswer(
        text=_text(generator, tokens),
        token_ids=tokens,
        events=[svt.event, *ld_events],
        cost=cost,
        retrieved=ids,
        charged=ids,
        private_tokens=svt.discoveries,
        info={
            "method": "dp-sparse-vote-rag",
            "private": True,
            "m": m,
            "k": k,
            "c_max": c_max,
            "epsilon": certified_epsilon(cost, delta_total),
            "delta": delta_total,
            "stop": stop[0],
        },
    )


# ------------------------------------------------------------------------------------------------------
# Pure-DP DP-RAG (000 Algorithm 5 / 001 Algorithm 7)
# ------------------------------------------------------------------------------------------------------
class PureDpRagOptions(TypedDict, total=False):
    theta: float | None
    max_tokens: int
    redraw_threshold: bool
    public_completion: bool
    em_prior: str


@dataclass(frozen=True)
class PureDpRagParams:
    """Parameters of 000 Algorithm 5.

    ``epsilon_token`` ε_0 is split ε_Expo = ε_Lap = ε_0/2; ``max_private_tokens`` c; ``theta`` the SVT
    threshold on the count of the non-RAG token (000/001 use m/2); ``redraw_threshold``: 000 Alg. 5 draws θ̂
    once (cost ε_Lap/2 + c·ε_Lap/2 for the SVT part, Lyu et al. 2017 Alg. 1), 003 re-draws it after every
    discovery (c·ε_Lap). Both are valid; the default follows 000.

    ``public_completion`` (beyond 000): once the c discoveries are spent, 000 Alg. 5 returns at once, often
    mid-phrase ("… done 7" for "7 days"). With it set, decoding goes on with the non-RAG lane's greedy token
    — the model given the question and the released prefix only, no document — until <EOS> or
    ``max_tokens``: a function of public inputs and DP outputs, i.e. post-processing; the cost is unchanged.

    ``em_prior`` (beyond 000): the exponential mechanism's base measure. "uniform" (000 Alg. 5: every vocabulary
    token has weight exp(ε_Expo·Hist/2)) or "non-rag": weight μ(v)·exp(ε_Expo·Hist/2) with μ the no-context
    model's next-token distribution given the question and the released prefix — public, so the ε is the same
    (``vote_exponential_mechanism(log_base=…)``). A split vote then releases a plausible token instead of one
    drawn nearly uniformly from ~5·10^4; a private token needs enough votes to beat its low prior.
    """

    m: int
    epsilon_token: float
    max_private_tokens: int
    theta: float | None = None
    max_tokens: int = 32
    redraw_threshold: bool = False
    public_completion: bool = False
    em_prior: str = "uniform"

    def __post_init__(self) -> None:
        check_positive_int("m", self.m)
        check_epsilon("epsilon_token", self.epsilon_token)
        check_positive_int("max_private_tokens", self.max_private_tokens)
        check_positive_int("max_tokens", self.max_tokens)
        if self.em_prior not in ("uniform", "non-rag"):
            raise InvalidParameterError("em_prior", "must be 'uniform' or 'non-rag'", self.em_prior)

    @classmethod
    def for_budget(
        cls, m: int, epsilon_token: float, epsilon_rag: float, **kw: Unpack[PureDpRagOptions]
    ) -> PureDpRagParams:
        """c = the largest count whose cost (``cost``) is ≤ ε_RAG in pure DP (000: c = ⌊ε/ε_RAG⌋ in spirit)."""
        check_epsilon("epsilon_rag", epsilon_rag)
        c = max_steps(lambda c: cls(m, epsilon_token, c, **kw).cost, epsilon_rag, 0.0)
        return cls(m, epsilon_token, require_steps(c, "epsilon_rag"), **kw)

    def respond(
        self,
        question: str,
        doc_ids: npt.ArrayLike,
        retriever: Retriever,
        generator: Generator,
        *,
        source: RandomSource | None = None,
        history: tuple[tuple[str, str], ...] = (),
    ) -> RagAnswer:
        """``pure_dp_rag`` with these parameters (the ``SingleQueryMechanism`` interface)."""
        return pure_dp_rag(question, doc_ids, retriever, generator, self, source=source, history=history)

    @cached_property  # frozen parameters: computed once (the service charges it on every request)
    def cost(self) -> PrivacyEvent:
        """Ex-ante pure-DP cost of one answer: the SVT session's worst case plus c exponential mechanisms."""
        eps_lap = self.epsilon_token / 2
        c = self.max_private_tokens
        # c·ε_Lap (re-drawn) or (c + 1)·ε_Lap/2, from the certified costs of the float noise scales the sparse
        # vector samples with (each rounded up), summed exactly and rounded up (spec/accounting/filters.md §5)
        svt_eps = SparseVector.certified_max_epsilon(eps_lap, c, 1, redraw_threshold=self.redraw_threshold)
        return ComposedEvent(
            (PureDpEvent(svt_eps), SelfComposedEvent(ExponentialMechanismEvent(self.epsilon_token / 2), c))
        )


def pure_dp_rag(
    question: str,
    doc_ids: npt.ArrayLike,
    retriever: Retriever,
    generator: Generator,
    params: PureDpRagParams,
    *,
    source: RandomSource | None = None,
    history: tuple[tuple[str, str], ...] = (),
) -> RagAnswer:
    """000 Algorithm 5 on a given ranked document list (MuRAG passes Top-K of its admitted set, padded).

    ``doc_ids`` (length a multiple of m, -1 = empty document) are split uniformly at random among m voters.
    Per token: if Count_t + Lap(4/ε_Lap) ≤ θ̂ (few voters agree with the non-RAG token) the token is drawn by
    the exponential mechanism on the vote histogram (ε_Expo, sensitivity 1) and c decreases; otherwise the
    non-RAG token is released. Halts at <EOS>, when c reaches 0 (or, with ``public_completion``, continues
    with the non-RAG token only), or after ``max_tokens``.
    Pure ε-DP with respect to the document list (add/remove/replace one document): ``params.cost``.
    """
    src = RandomSource.resolve(source)
    ids, ctx = given_list_voters(doc_ids, params.m, retriever, src)
    m = params.m
    eps_lap = params.epsilon_token / 2
    theta = m / 2 if params.theta is None else params.theta
    svt = SparseVector(
        theta, eps_lap, params.max_private_tokens, 1, src, direction="below", redraw_threshold=params.redraw_threshold
    )
    em_events: list[PrivacyEvent] = []

    prior = params.em_prior == "non-rag"

    def rule(
        non_rag_token: int | None,
        hist: npt.NDArray[np.intp],
        non_rag_logits: npt.NDArray[np.floating[Any]] | None = None,
    ) -> int | None:
        if svt.halted:  # the c-th discovery was the last private token; only public completion may follow
            return non_rag_token if params.public_completion else None
        if svt.test(int(hist[cast(int, non_rag_token)])):  # with_non_rag=True: a token, never None
            # with_logits=prior: the logits row is given whenever prior is set
            base = _log_softmax(cast(npt.NDArray[np.floating[Any]], non_rag_logits))[: hist.size] if prior else None
            tok, ev = vote_exponential_mechanism(hist, params.epsilon_token / 2, src, log_base=base)
            em_events.append(ev)
            return tok
        return non_rag_token

    tokens = decode_by_vote(
        generator, question, ctx, rule, params.max_tokens, with_non_rag=True, history=history, with_logits=prior
    )
    real = ids[ids >= 0]
    return RagAnswer(
        text=_text(generator, tokens),
        token_ids=tokens,
        events=[svt.event, *em_events],
        cost=params.cost,
        retrieved=real,
        charged=real,
        private_tokens=svt.discoveries,
        info={"method": "pure-dp-rag", "private": True, "m": m, "c": params.max_private_tokens},
    )


# ------------------------------------------------------------------------------------------------------
# GNMax voting: the RDP single-query mechanism (plugs into MuRAG / MuRAG-Ada with an RDP filter)
# ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GaussianVoteRagParams:
    """Sample-and-aggregate voting where every released token is the report-noisy-max of the vote histogram
    with discrete Gaussian noise σ over the whole vocabulary (``mechanisms.noisy_max``; PATE's GNMax).

    No SVT and no non-RAG lane: every token is private, so the ex-ante cost of one answer is ``max_tokens``
    releases, each RDP α/σ² (two sensitivity-1 discrete Gaussians). RDP, no δ: runs in an RDP filter.
    """

    m: int
    sigma: float
    max_tokens: int = 32

    def __post_init__(self) -> None:
        check_positive_int("m", self.m)
        check_epsilon("sigma", self.sigma)
        check_positive_int("max_tokens", self.max_tokens)

    @property
    def cost(self) -> PrivacyEvent:
        return SelfComposedEvent(gaussian_vote_max_event(self.sigma), self.max_tokens)

    def respond(
        self,
        question: str,
        doc_ids: npt.ArrayLike,
        retriever: Retriever,
        generator: Generator,
        *,
        source: RandomSource | None = None,
        history: tuple[tuple[str, str], ...] = (),
    ) -> RagAnswer:
        return gaussian_vote_rag(question, doc_ids, retriever, generator, self, source=source, history=history)


def gaussian_vote_rag(
    question: str,
    doc_ids: npt.ArrayLike,
    retriever: Retriever,
    generator: Generator,
    params: GaussianVoteRagParams,
    *,
    source: RandomSource | None = None,
    history: tuple[tuple[str, str], ...] = (),
) -> RagAnswer:
    """GNMax voting on a ranked document list (length a multiple of m, -1 = empty document): per token the
    voters' greedy tokens form a histogram and ``gaussian_vote_max`` releases one; halts at <EOS> or after
    ``max_tokens``. RDP with respect to the document list: ``params.cost`` (ex ante, all ``max_tokens``)."""
    src = RandomSource.resolve(source)
    ids, ctx = given_list_voters(doc_ids, params.m, retriever, src)
    m = params.m
    events: list[PrivacyEvent] = []

    def rule(_non_rag: int | None, hist: npt.NDArray[np.intp]) -> int | None:
        tok, ev = gaussian_vote_max(hist, params.sigma, src)
        events.append(ev)
        return tok

    tokens = decode_by_vote(generator, question, ctx, rule, params.max_tokens, with_non_rag=False, history=history)
    real = ids[ids >= 0]
    return RagAnswer(
        text=_text(generator, tokens),
        token_ids=tokens,
        events=events,
        cost=params.cost,
        retrieved=real,
        charged=real,
        private_tokens=len(events),
        info={"method": "gaussian-vote-rag", "private": True, "m": m, "sigma": params.sigma},
    )
