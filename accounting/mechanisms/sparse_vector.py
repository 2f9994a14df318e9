"""The sparse vector technique (AboveThreshold / Sparse) as DPSparseVoteRAG and the pure-DP DP-RAG use it.

Sources:
- Dwork & Roth 2014, Algorithm 1 (AboveThreshold) and Thm 3.23; Algorithm 2 (Sparse: c AboveThreshold runs,
  the threshold noise re-drawn after each discovery). 003 Algorithm 1 / Theorem 1 restate AboveThreshold:
  τ̂ = τ + Lap(2/ε), answer query i with ⊤ and halt iff f_i(D) + Lap(4/ε) ≥ τ̂ — (ε, 0)-DP for sensitivity 1.
- Lyu, Su & Li, "Understanding the Sparse Vector Technique for Differential Privacy", PVLDB 2017,
  Algorithm 1 and Thm 2: with threshold noise ρ ~ Lap(Δ/ε₁), query noise ν_i ~ Lap(2cΔ/ε₂) and the threshold
  NOT re-drawn, up to c positive answers cost ε₁ + ε₂; with monotone queries Lap(cΔ/ε₂) suffices (their §4.3).
- 003 Algorithm 3 (DPSparseVoteRAG) lines 2, 4, 16–19: per token, a_t = h_t[y_t^non-RAG] (how many voters
  agree with the no-retrieval token); if a_t + Lap(4/ε_Lap) ≤ τ̂ the token is generated privately
  (LimitedDomain) and c ← c − 1, τ̂ ← τ + Lap(2/ε_Lap) (re-drawn); ε_Lap = ε_token/2, τ = m/2.
- 000 Algorithm 5 (001 Alg. 7) lines 2, 10–13: the same test (θ̂ = θ + Lap(2/ε_Lap), Count_t + Lap(4/ε_Lap) ≤ θ̂
  ⇒ exponential mechanism, c ← c − 1) but the threshold is NOT re-drawn after a discovery.

What is compared with what. The query is the vote count of the token the LLM produces *without* retrieved
documents; a discovery ("⊤") is a count at or BELOW the noisy threshold (few voters agree with the non-RAG
token, so the private vote is needed): ``direction="below"`` tests q + ν ≤ τ + ρ. It is AboveThreshold on −q
with threshold −τ (the noises are symmetric), so the analysis is unchanged. ``direction="above"`` is the
textbook q + ν ≥ τ + ρ.

Privacy accounting — one proof for both variants (the Lyu et al. proof of Thm 2 is per transcript): let the
threshold noise have scale b₁, the query noise scale b₂, queries sensitivity Δ (|q_i(D) − q_i(D')| ≤ Δ).
For every released transcript a, P[a | D] ≤ e^{L(a)} · P[a | D'] with

        L(a) = (number of thresholds that answered ≥ 1 query) · Δ/b₁  +  (number of ⊤ in a) · κΔ/b₂,

κ = 2 (κ = 1 for monotone queries): shift every used threshold noise by Δ (⊥ answers keep their probability)
and each ⊤ answer's query noise by κΔ. With this module's calibration b₁ = 2Δ/ε and b₂ = 2κΔ/ε — exactly 003's
Lap(2/ε_Lap), Lap(4/ε_Lap) for Δ = 1 — every used threshold and every discovery cost ε/2:
- ``redraw_threshold=True`` (003 Alg. 3 = Dwork–Roth Sparse): each completed AboveThreshold run costs ε
  (Dwork–Roth Thm 3.23 / 003 Thm 1), a run still open that has answered ⊥ costs ε/2; worst case c·ε.
- ``redraw_threshold=False`` (000 Alg. 5 = Lyu Alg. 1 with ε₁ = ε/2, ε₂ = cε/2): ε/2 + (#⊤)·ε/2, worst case
  (c + 1)·ε/2 ≤ c·ε. 000's Lemma 1 charges c·ε_Lap for this part, which is valid but loose for c ≥ 2.
003's Theorem 3 proof splits each discovery as ε_token/2 (SVT) + ε_token/2 (LimitedDomain): consistent with
the redraw variant above (the SVT part of a completed run costs ε_Lap = ε_token/2).

``event`` is the per-transcript (ex-post) bound L of what has been released so far; ``max_event`` the
worst case over the whole session (c discoveries), which is what a filter must have available *before* the
session starts. Charging ``event`` afterwards (refunding max − event) is sound for pure-DP (individual)
budgets, because every transcript's privacy loss is then ≤ the budget (Ligett et al. 2017, ex-post privacy);
it is not a valid charge for a Rényi filter (Feldman & Zrnic need the per-step RDP fixed before the step).

Noise: the queries are integer counts, so the noise is helper A's exact discrete Laplace (P(x) ∝ e^{−|x|/b}
on ℤ); the proof above holds verbatim on ℤ for integer Δ (all shifts are by integers). No floating-point
Laplace is used.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import SupportsFloat, TypedDict, Unpack

import numpy as np

from dprag.errors import BudgetExhaustedError, InvalidParameterError

from ..errors import check_epsilon, check_positive_int
from ..events import PureDpEvent
from ..noise.source import RandomSource

__all__ = ["SparseVector", "sparse_vector"]


def _check_real(field: str, value: SupportsFloat) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(field, "must be a real number", value) from None
    if not math.isfinite(v):
        raise InvalidParameterError(field, "must be finite", value)
    return v


def _check_integer_value(field: str, value: SupportsFloat) -> int:
    if isinstance(value, (bool, str, bytes)) or value is None:
        raise InvalidParameterError(field, "must be an integer count", value)
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(field, "must be an integer count", value) from None
    if not math.isfinite(v) or v != math.floor(v) or abs(v) >= 2**62:
        raise InvalidParameterError(field, "must be an integer count (the noise is discrete Laplace on ℤ)", value)
    return int(v)


def _discrete_laplace(scale: float, source: RandomSource) -> int:
    from ..noise import discrete_laplace  # helper A's exact sampler, P(x) ∝ exp(-|x|/scale)

    return int(np.asarray(discrete_laplace(scale, 1, source)).reshape(-1)[0])


class SparseVector:
    """Sparse vector technique over an adaptively chosen stream of integer queries (module docstring).

    ``SparseVector(threshold, epsilon, max_discoveries, sensitivity=1, source)``: ``epsilon`` is the ε of
    one AboveThreshold run (003's ε_Lap): threshold noise discrete Laplace with scale 2Δ/ε, query noise
    4Δ/ε (2Δ/ε if ``monotone``). ``test(q)`` answers one query (True = discovery); after ``max_discoveries``
    discoveries the session is halted and ``test`` raises BudgetExhaustedError. ``event`` / ``max_event``:
    see the module docstring. Neighbouring relation: whatever relation the caller's queries have
    sensitivity Δ under (003: one document changes one vote, so a vote count moves by ≤ 1).
    """

    def __init__(
        self,
        threshold: float,
        epsilon: float,
        max_discoveries: int,
        sensitivity: int = 1,
        source: RandomSource | None = None,
        *,
        direction: str = "above",
        redraw_threshold: bool = True,
        monotone: bool = False,
    ):
        self.threshold = _check_real("threshold", threshold)
        self.epsilon = check_epsilon("epsilon", epsilon)
        self.max_discoveries = check_positive_int("max_discoveries", max_discoveries)
        self.sensitivity = check_positive_int("sensitivity", sensitivity)
        if direction not in ("above", "below"):
            raise InvalidParameterError("direction", "must be 'above' or 'below'", direction)
        self.direction = direction
        self.redraw_threshold = bool(redraw_threshold)
        self.monotone = bool(monotone)
        self._source = RandomSource.resolve(source)
        self.threshold_scale, self.query_scale = self.scales(self.epsilon, self.sensitivity, self.monotone)
        if not (math.isfinite(self.threshold_scale) and math.isfinite(self.query_scale)):
            raise InvalidParameterError("epsilon", "noise scale 2Δ/ε must be finite", epsilon)
        self._threshold_cost, self._discovery_cost = self.certified_costs(self.epsilon, self.sensitivity, self.monotone)
        self.discoveries = 0
        self.queries_answered = 0
        self._thresholds_used = 0  # threshold draws that have answered at least one query
        self._current_used = False
        self._rho = _discrete_laplace(self.threshold_scale, self._source)

    @staticmethod
    def scales(epsilon: float, sensitivity: int = 1, monotone: bool = False) -> tuple[float, float]:
        """The float noise scales used: b₁ = fl(2Δ/ε) (threshold), b₂ = fl(2κΔ/ε) (queries), κ = 1 if monotone."""
        kappa = 1 if monotone else 2
        return 2.0 * sensitivity / epsilon, 2.0 * kappa * sensitivity / epsilon

    @staticmethod
    def certified_costs(epsilon: float, sensitivity: int = 1, monotone: bool = False) -> tuple[float, float]:
        """(threshold cost Δ/b₁, discovery cost κΔ/b₂) for the float scales actually sampled with, each rounded
        up: nominally ε/2 each, but fl(2Δ/ε) can be below 2Δ/ε, making the true cost an ulp above ε/2
        (spec/accounting/filters.md §5 item 7). Ex-ante costs (``PureDpRagParams.cost``, ``sparse_vote_cost``) charge
        these, not ε/2."""
        kappa = 1 if monotone else 2
        b1, b2 = SparseVector.scales(epsilon, sensitivity, monotone)
        return (math.nextafter(sensitivity / b1, math.inf), math.nextafter(kappa * sensitivity / b2, math.inf))

    @staticmethod
    def certified_max_epsilon(
        epsilon: float,
        max_discoveries: int,
        sensitivity: int = 1,
        *,
        redraw_threshold: bool = True,
        monotone: bool = False,
    ) -> float:
        """Worst case of a whole session from the certified costs, summed exactly and rounded up."""
        from ..filters import sum_up

        t, d = SparseVector.certified_costs(epsilon, sensitivity, monotone)
        c = int(max_discoveries)
        return sum_up(*([t, d] * c)) if redraw_threshold else sum_up(t, *([d] * c))

    # -- state ----------------------------------------------------------------------------------
    @property
    def halted(self) -> bool:
        return self.discoveries >= self.max_discoveries

    @property
    def remaining_discoveries(self) -> int:
        return self.max_discoveries - self.discoveries

    @property
    def epsilon_spent(self) -> float:
        """Per-transcript (ex-post) pure-DP loss of everything answered so far."""
        from ..filters import sum_up

        return sum_up(*([self._threshold_cost] * self._thresholds_used), *([self._discovery_cost] * self.discoveries))

    @property
    def max_epsilon(self) -> float:
        """Worst case of the whole session: c·ε (redraw) or (c + 1)·ε/2 (one threshold)."""
        return self.certified_max_epsilon(
            self.epsilon,
            self.max_discoveries,
            self.sensitivity,
            redraw_threshold=self.redraw_threshold,
            monotone=self.monotone,
        )

    @property
    def event(self) -> PureDpEvent:
        return PureDpEvent(self.epsilon_spent)

    @property
    def max_event(self) -> PureDpEvent:
        return PureDpEvent(self.max_epsilon)

    # -- the test -------------------------------------------------------------------------------
    def test(self, query_value: SupportsFloat) -> bool:
        """Answer one query: True iff it is a discovery (q + ν ≥ τ̂, or ≤ τ̂ with direction='below')."""
        q = _check_integer_value("query_value", query_value)
        if self.halted:
            raise BudgetExhaustedError(
                f"sparse vector: all {self.max_discoveries} discoveries spent; the session has halted",
                budget="max_discoveries",
                limit=self.max_discoveries,
                used=self.discoveries,
            )
        nu = _discrete_laplace(self.query_scale, self._source)
        noisy_threshold = self.threshold + self._rho
        hit = (q + nu >= noisy_threshold) if self.direction == "above" else (q + nu <= noisy_threshold)
        self.queries_answered += 1
        if not self._current_used:
            self._current_used = True
            self._thresholds_used += 1
        if hit:
            self.discoveries += 1
            if self.redraw_threshold and not self.halted:
                self._rho = _discrete_laplace(self.threshold_scale, self._source)
                self._current_used = False
        return bool(hit)

    def __repr__(self) -> str:
        return (
            f"SparseVector(threshold={self.threshold}, epsilon={self.epsilon}, "
            f"discoveries={self.discoveries}/{self.max_discoveries}, answered={self.queries_answered}, "
            f"direction={self.direction!r}, redraw_threshold={self.redraw_threshold}, "
            f"epsilon_spent={self.epsilon_spent})"
        )


class _SparseVectorOptions(TypedDict, total=False):
    direction: str
    redraw_threshold: bool
    monotone: bool


def sparse_vector(
    queries: Iterable[SupportsFloat],
    threshold: float,
    epsilon: float,
    max_discoveries: int,
    sensitivity: int = 1,
    source: RandomSource | None = None,
    **options: Unpack[_SparseVectorOptions],
) -> tuple[tuple[bool, ...], PureDpEvent]:
    """Run :class:`SparseVector` over a fixed sequence until it is exhausted or halts.

    Returns (answers, ex-post event). The answers stop at the c-th discovery (later queries are not
    answered). A functional form for tests and for the empirical DP checker.
    """
    values = [_check_integer_value("queries", q) for q in queries]
    if not values:
        raise InvalidParameterError("queries", "must contain at least one query")
    sv = SparseVector(threshold, epsilon, max_discoveries, sensitivity, source, **options)
    answers = []
    for q in values:
        if sv.halted:
            break
        answers.append(sv.test(q))
    return tuple(answers), sv.event
