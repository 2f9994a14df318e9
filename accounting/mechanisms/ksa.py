"""DP-KSA keyword selection: FindBestK and TopKWithPTR.

Source: Tang, Flemings, Wang & Annavaram, "Differentially Private Retrieval-Augmented Generation" (DP-KSA,
arXiv 2602.14374; spec/papers.md): Algorithm 1 (DP-KSA), Algorithm 2 (TopKWithPTR),
Algorithm 3 (FindBestK), Appendix A (Theorems A.9–A.12). Their top-k machinery is Zhu & Wang, "Adaptive
Private-K-Selection with Adaptive K and Application to Multi-label PATE" (AISTATS 2022).

Data and neighbouring relation (004 Thm A.12). The retriever returns the N documents most relevant to the
query; each is paired with the query and the LLM writes one response y_i per document (Alg. 1 lines 1–4).
The keyword histogram H counts, for every token of the *public* vocabulary, the number of responses that
contain it (line 5; ``keyword_histogram``). Neighbouring corpora D ~ D' differ in one document (replace-one;
add/remove-one gives the same conclusion): because each document's relevance depends on that document and
the query only, the retrieved ensembles differ in at most one document, so one response changes, and
**every count H[t] changes by at most 1** (L∞ sensitivity 1; the L1 change can be as large as the number of
distinct tokens in the two responses). The sorted counts H(1) ≥ H(2) ≥ … are 1-Lipschitz in L∞, so each gap
d_k = H(k) − H(k+1) has **sensitivity Δ = 2** (004 §5 and Thm A.11). Requirements this places on the caller:
the histogram is over a fixed public vocabulary (zeros included), a response counts a token at most once,
and the retrieval scores are exact per-document scores (an approximate index whose answer for one document
depends on the others, as the FAISS index of 004 §6.1 may, breaks the one-response argument).

FindBestK (Alg. 3, Thm A.11). k̂ = argmax_k {d_k + r(k) + Gumbel(β)} is the exponential mechanism with
utility d_k + r(k) (Gumbel-max trick, Durfee & Rogers 2019), P[k] ∝ exp((d_k + r(k))/β); by default we
sample that law exactly (``accounting.mechanisms.exponential``) rather than with float Gumbels. With sensitivity
Δ = 2, Definition A.7 requires β = 2Δ/ε = **4/ε**. Algorithm 3 as printed uses Gumbel(2/ε), which is only
2ε-DP (ε-bounded-range at 2ε) — we follow the proof, not the pseudo-code (spec/accounting/mechanisms.md,
"DP-KSA"; tests/accounting/test_empirical_dp.py shows the printed version violating ε-DP). The event is
``ExponentialMechanismEvent(ε, bounded_range=True)``: with β = 2Δ/ε the log-probability ratio of any two
outputs moves by at most ε between neighbours, so the mechanism is ε-bounded-range, whose RDP αε²/8
(Cesar & Rogers 2021) is tighter than the ε-DP bound 004 uses (Thm A.9, min(αε²/2, sinh bound)).
The regularizer r(k) must not depend on the data; ``k_min``/``k_max`` set r(k) = −∞ outside [k_min, k_max].

TopKWithPTR (Alg. 2, Thm A.10). Propose-test-release (Dwork & Lei 2009) on the gap: if d_k > 2 the top-k set
is the same on every neighbour (tokens inside have counts ≥ H(k) − 1 > H(k+1) + 1 ≥ counts outside), so it
can be released exactly. The test adds noise to max(2, d_k) (sensitivity 2) with standard deviation 2σ
(noise multiplier σ) and passes iff max(2, d_k) + noise − c > 2, where c is the (1−δ)-quantile of the noise.
Privacy (following the proof of Thm A.10, made explicit): for neighbours D, D',
 (i) if d_k(D) > 2 or d_k(D') > 2, the two top-k sets coincide, so the output is post-processing of the
     Gaussian test: RDP α/(2σ²);
 (ii) otherwise max(2, d_k) = 2 on both, the test has the same law on both and passes with probability ≤ δ;
     conditioned on failing (probability ≥ 1 − δ) both output ⊥.
So TopKWithPTR is δ-approximately (α, α/(2σ²))-RDP: ``ApproxRdpEvent(DiscreteGaussianEvent(2σ, 2), δ)``.
Implementation choices (spec, "DP-KSA"): the noise is the exact discrete Gaussian N_Z(0, (2σ)²) (d_k is an
integer; same RDP as the continuous Gaussian, Canonne–Kamath–Steinke 2020) and c = ⌈2σ·Φ⁻¹(1−δ)⌉ is an
integer; by Poisson summation Σ_Z e^{-x²/2s²} ≥ s√(2π), so P[N_Z(0, s²) > c] ≤ P[N(0, s²) > c] ≤ δ.
The released keywords are a **set** (token ids in increasing order): their order by count is not stable
under neighbours and would leak.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
import numpy.typing as npt
from scipy import special

from dprag.errors import InvalidParameterError

from ..errors import check_delta, check_epsilon, check_positive_int
from ..events import (
    ApproxRdpEvent,
    ComposedEvent,
    DiscreteGaussianEvent,
    ExponentialMechanismEvent,
    PrivacyEvent,
    SelfComposedEvent,
)
from ..noise.source import RandomSource
from ..rdp import as_orders, bounded_range_rdp, gaussian_rdp, rdp_to_epsilon

__all__ = [
    "GAP_SENSITIVITY",
    "keyword_histogram",
    "sorted_gaps",
    "find_best_k",
    "ptr_threshold",
    "ptr_release_top_k",
    "ptr_sigma_for",
    "top_k_with_ptr",
    "DpKsaRdpParameters",
    "calibrate_dp_ksa",
    "KeywordSelection",
    "dp_ksa_select",
]

#: Sensitivity of every gap d_k = H(k) − H(k+1) under one changed response (004 Thm A.11).
GAP_SENSITIVITY = 2


# ---------------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------------
def keyword_histogram(responses: Iterable[Sequence[int]], vocab_size: int) -> npt.NDArray[np.int64]:
    """004 Alg. 1 line 5: H[t] = number of responses that contain token t (each response counts t once).

    ``responses``: one sequence of token ids per ensemble member; ``vocab_size``: size of the public
    vocabulary (the histogram's fixed domain). Returns int64 counts of shape (vocab_size,).
    """
    v = check_positive_int("vocab_size", vocab_size, minimum=2)
    h = np.zeros(v, dtype=np.int64)
    for i, r in enumerate(responses):
        ids = np.unique(np.asarray(r, dtype=np.int64).ravel())
        if ids.size and (ids[0] < 0 or ids[-1] >= v):
            raise InvalidParameterError(f"responses[{i}]", f"token ids must lie in [0, {v})", ids[[0, -1]].tolist())
        h[ids] += 1
    return h


def _histogram(histogram: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Validate a count histogram over a public domain: 1-d, ≥ 2 bins, non-negative integers."""
    try:
        h = np.asarray(histogram)
    except Exception:  # noqa: BLE001
        raise InvalidParameterError("histogram", "must be a 1-d array of counts") from None
    if h.ndim != 1 or h.size < 2:
        raise InvalidParameterError("histogram", "must be a 1-d array with at least 2 bins", getattr(h, "shape", None))
    if h.dtype.kind == "b" or h.dtype.kind not in "iuf":
        raise InvalidParameterError("histogram", "counts must be non-negative integers", h.dtype)
    if h.dtype.kind == "f":
        if not np.all(np.isfinite(h)) or np.any(h != np.floor(h)):
            raise InvalidParameterError("histogram", "counts must be non-negative integers")
    if np.any(h < 0):
        raise InvalidParameterError("histogram", "counts must be non-negative integers")
    return h.astype(np.int64)


def sorted_gaps(histogram: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """d_k = H(k) − H(k+1) for k = 1 … V−1, with H(1) ≥ H(2) ≥ … the sorted counts (004 Alg. 2/3 line 1).

    Entry i of the result is d_{i+1}.
    """
    h = _histogram(histogram)
    s = np.sort(h)[::-1]
    return s[:-1] - s[1:]


def _top_k_set(h: npt.NDArray[np.int64], k: int) -> tuple[int, ...]:
    """The k tokens with the largest counts (ties broken by lower token id), as a set in increasing id order."""
    order = np.argsort(-h, kind="stable")
    return tuple(sorted(int(t) for t in order[:k]))


def _size(size: int | None) -> int | None:
    return None if size is None else check_positive_int("size", size)


# ---------------------------------------------------------------------------------------------------
# FindBestK (004 Algorithm 3)
# ---------------------------------------------------------------------------------------------------
def _regularizer(
    n_gaps: int, k_min: int, k_max: int | None, regularizer: npt.ArrayLike | None
) -> npt.NDArray[np.float64]:
    r = np.zeros(n_gaps, dtype=np.float64)
    if regularizer is not None:
        try:
            rr = np.asarray(regularizer, dtype=np.float64)
        except (TypeError, ValueError):
            raise InvalidParameterError("regularizer", "must be an array of floats (r(k) for k = 1..V-1)") from None
        if rr.shape != (n_gaps,):
            raise InvalidParameterError("regularizer", f"must have shape ({n_gaps},): r(k) for k = 1..V-1", rr.shape)
        if np.any(np.isnan(rr)) or np.any(rr == np.inf):
            raise InvalidParameterError("regularizer", "values must be finite or -inf")
        r = rr.copy()
    lo = check_positive_int("k_min", k_min)
    hi = n_gaps if k_max is None else check_positive_int("k_max", k_max)
    if hi > n_gaps:
        raise InvalidParameterError("k_max", f"must be <= V-1 = {n_gaps} (d_k needs H(k+1))", k_max)
    if lo > hi:
        raise InvalidParameterError("k_min", f"must be <= k_max = {hi}", k_min)
    r[: lo - 1] = -np.inf
    r[hi:] = -np.inf
    if not np.any(np.isfinite(r)):
        raise InvalidParameterError("regularizer", "must leave at least one k with r(k) > -inf")
    return r


@overload
def find_best_k(
    histogram: npt.ArrayLike,
    epsilon: float,
    source: RandomSource | None = None,
    *,
    k_min: int = 1,
    k_max: int | None = None,
    regularizer: npt.ArrayLike | None = None,
    method: str = "direct",
    size: None = None,
) -> tuple[int, ExponentialMechanismEvent]: ...
@overload
def find_best_k(
    histogram: npt.ArrayLike,
    epsilon: float,
    source: RandomSource | None = None,
    *,
    k_min: int = 1,
    k_max: int | None = None,
    regularizer: npt.ArrayLike | None = None,
    method: str = "direct",
    size: int,
) -> tuple[npt.NDArray[np.int64], SelfComposedEvent]: ...
def find_best_k(
    histogram: npt.ArrayLike,
    epsilon: float,
    source: RandomSource | None = None,
    *,
    k_min: int = 1,
    k_max: int | None = None,
    regularizer: npt.ArrayLike | None = None,
    method: str = "direct",
    size: int | None = None,
) -> tuple[int, ExponentialMechanismEvent] | tuple[npt.NDArray[np.int64], SelfComposedEvent]:
    """FindBestK (004 Algorithm 3, Theorem A.11): choose the number of keywords k̂ by the exponential mechanism.

    Returns ``(k̂, ExponentialMechanismEvent(epsilon, bounded_range=True))`` with k̂ ∈ [k_min, k_max] ⊂ [1, V−1]
    drawn with P[k] ∝ exp((d_k + r(k))/β), β = 2Δ/ε = 4/ε (Δ = 2, the gaps' sensitivity; Alg. 3 prints
    Gumbel(2/ε), which Definition A.7 does not support — see the module docstring).
    Neighbouring relation: one response of the ensemble changed (every count moves by ≤ 1).

    ``method="direct"`` (the only one) samples this law exactly with the exponential-mechanism sampler of
    ``accounting.mechanisms.exponential`` (utility d_k + r(k), sensitivity 2). Algorithm 3's float Gumbel-max
    form (``"gumbel"``) was removed (spec/accounting/noise.md §8): float Gumbels are bounded (≈ [−3.6, 36.7]), so a k
    whose utility is more than ≈ 40β below the best got probability 0 — not ε-DP.
    ``regularizer``: data-independent r(k) for k = 1..V−1 (finite or −inf); ``k_min``/``k_max`` restrict k.
    ``size``: draw that many independent k̂ (an int64 array; the event is then the ``size``-fold
    self-composition) — for simulations and tests.
    """
    eps = check_epsilon("epsilon", epsilon)
    gaps = sorted_gaps(histogram)
    r = _regularizer(gaps.size, k_min, k_max, regularizer)
    if method == "gumbel":
        raise InvalidParameterError(
            "method",
            "'gumbel' was removed: float Gumbel-max gives probability 0 to "
            "k's ~40β below the best (not ε-DP); use 'direct', the exact sampler",
            method,
        )
    if method != "direct":
        raise InvalidParameterError("method", "must be 'direct' (the exact sampler)", method)
    n = _size(size)
    src = RandomSource.resolve(source)
    allowed = np.flatnonzero(np.isfinite(r))
    utility = gaps[allowed].astype(np.float64) + r[allowed]
    draws = 1 if n is None else n
    if allowed.size == 1:
        picks = np.zeros(draws, dtype=np.int64)
    else:
        from .exponential import exponential_mechanism  # the exact sampler

        picks = np.fromiter(
            (exponential_mechanism(utility, GAP_SENSITIVITY, eps, src)[0] for _ in range(draws)),
            dtype=np.int64,
            count=draws,
        )
    k_hat = allowed[picks] + 1
    event = ExponentialMechanismEvent(eps, bounded_range=True)
    if n is None:
        return int(k_hat[0]), event
    return k_hat.astype(np.int64), SelfComposedEvent(event, n)


# ---------------------------------------------------------------------------------------------------
# TopKWithPTR (004 Algorithm 2)
# ---------------------------------------------------------------------------------------------------
def ptr_threshold(sigma: float, failure_probability: float) -> int:
    """Integer test offset c with P[N_Z(0, (2σ)²) > c] ≤ δ: c = ⌈2σ·Φ⁻¹(1−δ)⌉ (see module docstring).

    Φ⁻¹ is evaluated in floating point; a relative margin of 1e-9 (far above its error) keeps c on the safe side.
    """
    s = 2.0 * check_epsilon("sigma", sigma)
    d = check_delta("failure_probability", failure_probability)
    c = s * -float(special.ndtri(d))  # Φ⁻¹(1 − δ) = −Φ⁻¹(δ), accurate for tiny δ
    return max(0, int(math.ceil(c * (1.0 + 1e-9) + 1e-9)))


@overload
def ptr_release_top_k(
    histogram: npt.ArrayLike,
    k: int,
    *,
    sigma: float,
    failure_probability: float,
    source: RandomSource | None = None,
    size: None = None,
) -> tuple[tuple[int, ...] | None, ApproxRdpEvent]: ...
@overload
def ptr_release_top_k(
    histogram: npt.ArrayLike,
    k: int,
    *,
    sigma: float,
    failure_probability: float,
    source: RandomSource | None = None,
    size: int,
) -> tuple[list[tuple[int, ...] | None], SelfComposedEvent]: ...
def ptr_release_top_k(
    histogram: npt.ArrayLike,
    k: int,
    *,
    sigma: float,
    failure_probability: float,
    source: RandomSource | None = None,
    size: int | None = None,
) -> tuple[tuple[int, ...] | None, ApproxRdpEvent] | tuple[list[tuple[int, ...] | None], SelfComposedEvent]:
    """TopKWithPTR as printed (004 Algorithm 2, Theorem A.10), parametrised by σ and the failure probability δ.

    d_k = H(k) − H(k+1); the test draws X ~ N_Z(0, (2σ)²) and passes iff max(2, d_k) + X − c > 2 with
    c = ``ptr_threshold(σ, δ)``. On a pass the exact top-k set is released (token ids in increasing order),
    otherwise ``None`` ("terminate with no keywords"). Returns ``(tokens | None, event)`` with event
    ``ApproxRdpEvent(DiscreteGaussianEvent(sigma=2σ, sensitivity=2), delta=δ)``: δ-approximate α/(2σ²)-RDP.
    ``size``: run that many independent tests at once; returns a list of outputs and the self-composed event.
    """
    h = _histogram(histogram)
    k = check_positive_int("k", k)
    if k > h.size - 1:
        raise InvalidParameterError("k", f"must be <= V-1 = {h.size - 1} (d_k needs H(k+1))", k)
    sig = check_epsilon("sigma", sigma)
    dlt = check_delta("failure_probability", failure_probability)
    n = _size(size)
    src = RandomSource.resolve(source)
    from ..noise import discrete_gaussian  # helper A's exact sampler

    c = ptr_threshold(sig, dlt)
    s = np.sort(h)[::-1]
    d_k = int(s[k - 1] - s[k])
    draws = 1 if n is None else n
    x = np.asarray(discrete_gaussian(2.0 * sig, draws, src), dtype=np.int64)
    passed = max(2, d_k) + x - c > 2
    event = ApproxRdpEvent(DiscreteGaussianEvent(sigma=2.0 * sig, sensitivity=GAP_SENSITIVITY), dlt)
    tokens = _top_k_set(h, k) if bool(passed.any()) else None
    if n is None:
        return (tokens if bool(passed[0]) else None), event
    return [tokens if p else None for p in passed.tolist()], SelfComposedEvent(event, n)


def _gaussian_eps(
    noise_multiplier: float,
    conversion_delta: float,
    orders: npt.NDArray[np.float64],
    extra_rdp: npt.NDArray[np.float64] | None = None,
) -> float:
    rdp = gaussian_rdp(noise_multiplier, orders)
    if extra_rdp is not None:
        rdp = rdp + extra_rdp
    return rdp_to_epsilon(rdp, orders, conversion_delta)[0]


def _smallest_sigma(
    epsilon: float,
    conversion_delta: float,
    orders: npt.NDArray[np.float64],
    extra_rdp: npt.NDArray[np.float64] | None = None,
) -> float:
    """Smallest noise multiplier σ (to relative 1e-10, rounded up) whose RDP (+ extra) converts to ≤ ε."""
    lo, hi = 1e-3, 1.0
    while _gaussian_eps(hi, conversion_delta, orders, extra_rdp) > epsilon:
        lo, hi = hi, hi * 2.0
        if hi > 1e12:
            raise InvalidParameterError("epsilon", "is too small to calibrate (noise multiplier > 1e12)", epsilon)
    while hi / lo > 1.0 + 1e-10:
        mid = math.sqrt(lo * hi)
        if _gaussian_eps(mid, conversion_delta, orders, extra_rdp) > epsilon:
            lo = mid
        else:
            hi = mid
    return hi


def ptr_sigma_for(epsilon: float, delta: float, orders: Sequence[float] | None = None) -> float:
    """σ used by ``top_k_with_ptr(…, epsilon, delta)``: smallest σ with ε(α/(2σ²) RDP at δ/2) ≤ ε.

    The RDP → (ε, δ) conversion is ``accounting.rdp.rdp_to_epsilon`` (improved, Canonne–Kamath–Steinke /
    Balle et al.) on ``orders`` (default: dp_accounting's grid).
    """
    eps = check_epsilon("epsilon", epsilon)
    dlt = check_delta("delta", delta)
    return _smallest_sigma(eps, dlt / 2.0, as_orders(orders))


@overload
def top_k_with_ptr(
    histogram: npt.ArrayLike,
    k: int,
    epsilon: float,
    delta: float,
    source: RandomSource | None = None,
    *,
    orders: Sequence[float] | None = None,
    size: None = None,
) -> tuple[tuple[int, ...] | None, ApproxRdpEvent]: ...
@overload
def top_k_with_ptr(
    histogram: npt.ArrayLike,
    k: int,
    epsilon: float,
    delta: float,
    source: RandomSource | None = None,
    *,
    orders: Sequence[float] | None = None,
    size: int,
) -> tuple[list[tuple[int, ...] | None], SelfComposedEvent]: ...
def top_k_with_ptr(
    histogram: npt.ArrayLike,
    k: int,
    epsilon: float,
    delta: float,
    source: RandomSource | None = None,
    *,
    orders: Sequence[float] | None = None,
    size: int | None = None,
) -> tuple[tuple[int, ...] | None, ApproxRdpEvent] | tuple[list[tuple[int, ...] | None], SelfComposedEvent]:
    """TopKWithPTR (004 Algorithm 2) calibrated to an (ε, δ) target for this step.

    Half of δ is the PTR failure probability, half the RDP → DP conversion δ; σ = ``ptr_sigma_for(ε, δ)``.
    So the returned event ``ApproxRdpEvent(DiscreteGaussianEvent(2σ, 2), δ/2)`` converts (``epsilon_of(event,
    δ/2)``) to (≤ ε, δ). Returns ``(tokens | None, event)``; see ``ptr_release_top_k``.
    """
    eps = check_epsilon("epsilon", epsilon)
    dlt = check_delta("delta", delta)
    _histogram(histogram)
    check_positive_int("k", k)
    sigma = _smallest_sigma(eps, dlt / 2.0, as_orders(orders))
    return ptr_release_top_k(histogram, k, sigma=sigma, failure_probability=dlt / 2.0, source=source, size=size)


# ---------------------------------------------------------------------------------------------------
# The DP part of DP-KSA (004 Algorithm 1 lines 6–7, Theorem A.12)
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DpKsaRdpParameters:
    """Calibrated parameters of FindBestK + TopKWithPTR for a total (ε, δ) target."""

    epsilon_em: float  # FindBestK's ε
    sigma: float  # TopKWithPTR's noise multiplier
    ptr_delta: float  # TopKWithPTR's failure probability
    conversion_delta: float  # δ of the final RDP → DP conversion (ptr_delta + conversion_delta = δ)

    def event(self) -> PrivacyEvent:
        return ComposedEvent(
            (
                ExponentialMechanismEvent(self.epsilon_em, bounded_range=True),
                ApproxRdpEvent(DiscreteGaussianEvent(2.0 * self.sigma, GAP_SENSITIVITY), self.ptr_delta),
            )
        )


def calibrate_dp_ksa(
    epsilon: float,
    delta: float,
    *,
    em_fraction: float = 0.5,
    orders: Sequence[float] | None = None,
    queries: int = 1,
) -> DpKsaRdpParameters:
    """Split an (ε, δ) target between FindBestK and TopKWithPTR (004 Thm A.12: RDP composition, then Thm A.6).

    ``queries`` = 1: FindBestK gets ε_EM = ``em_fraction``·ε; σ is then the smallest noise multiplier such
    that the composed RDP, ε_EM-bounded-range (α ε_EM²/8, Cesar–Rogers) + α/(2σ²), converts at δ/2 to ≤ ε;
    the PTR failure probability is the other δ/2. (004 does not say how it splits the budget; this is one
    explicit choice.)

    ``queries`` = T > 1: parameters of *one* release such that T of them (a session of T questions) compose
    to (ε, δ): the T-fold RDP sum converts at δ/2 to ≤ ε and each release's PTR fails with probability
    δ/(2T) (T·δ/(2T) = δ/2 by the union bound; ``epsilon_of(SelfComposedEvent(event, T), δ/2)`` adds it).
    ε_EM is the largest per-release value whose T-fold bounded-range RDP alone converts at δ/2 to
    ≤ ``em_fraction``·ε, and σ the smallest whose T-fold sum with it converts to ≤ ε. Basic composition of
    (ε/T, δ/T) per release is the other way to spend a session; it cannot be calibrated at all at T = 520,
    ε = 10 (the conversion of one EM release alone at δ/(2T) exceeds ε/T).
    """
    eps = check_epsilon("epsilon", epsilon)
    dlt = check_delta("delta", delta)
    t = check_positive_int("queries", queries)
    f = float(em_fraction)
    if not (0.0 < f < 1.0):
        raise InvalidParameterError("em_fraction", "must lie in (0, 1)", em_fraction)
    a = as_orders(orders)
    if t == 1:
        eps_em = f * eps
    else:
        eps_em = _largest_em_epsilon(f * eps, dlt / 2.0, a, t)
    em_rdp = t * bounded_range_rdp(eps_em, a)
    if rdp_to_epsilon(em_rdp, a, dlt / 2.0)[0] >= eps:
        raise InvalidParameterError("em_fraction", "leaves no budget for TopKWithPTR", em_fraction)
    # T releases of multiplier σ have the RDP α·T/(2σ²) of one release of σ/√T
    sigma = _smallest_sigma(eps, dlt / 2.0, a, extra_rdp=em_rdp) * math.sqrt(t)
    while _gaussian_eps(sigma / math.sqrt(t), dlt / 2.0, a, em_rdp) > eps:  # the √T product's rounding
        sigma = math.nextafter(sigma, math.inf)
    return DpKsaRdpParameters(epsilon_em=eps_em, sigma=sigma, ptr_delta=dlt / (2.0 * t), conversion_delta=dlt / 2.0)


def _largest_em_epsilon(target: float, conversion_delta: float, orders: npt.NDArray[np.float64], queries: int) -> float:
    """Largest ε_EM (to relative 1e-10, rounded down) whose ``queries``-fold bounded-range RDP converts to ≤ target."""

    def conv(e: float) -> float:
        return rdp_to_epsilon(queries * bounded_range_rdp(e, orders), orders, conversion_delta)[0]

    lo, hi = target * 1e-12, target  # conv is increasing in ε_EM
    if conv(hi) <= target:
        return hi
    if conv(lo) > target:
        raise InvalidParameterError("epsilon", f"is too small to calibrate {queries} releases at this δ", target)
    while hi / lo > 1.0 + 1e-10:
        mid = math.sqrt(lo * hi)
        if conv(mid) > target:
            hi = mid
        else:
            lo = mid
    return lo


@dataclass(frozen=True)
class KeywordSelection:
    """Output of ``dp_ksa_select``: the chosen k̂ and the released keyword set (None if PTR refused)."""

    k: int
    tokens: tuple[int, ...] | None


def dp_ksa_select(
    histogram: npt.ArrayLike,
    epsilon: float,
    delta: float,
    source: RandomSource | None = None,
    *,
    em_fraction: float = 0.5,
    k_min: int = 1,
    k_max: int | None = None,
    regularizer: npt.ArrayLike | None = None,
    orders: Sequence[float] | None = None,
    queries: int = 1,
) -> tuple[KeywordSelection, ComposedEvent]:
    """004 Algorithm 1 lines 6–7: k̂ = FindBestK(H), then TopKWithPTR(k̂, H), within a total (ε, δ).

    Returns ``(KeywordSelection(k̂, tokens | None), ComposedEvent([EM event, PTR event]))``; the composed
    event converts at δ/2 (``epsilon_of(event, δ/2)``) to (≤ ε, δ) — with ``queries`` = T, T such events
    do (``calibrate_dp_ksa``). Bad input raises before any noise is drawn.
    """
    params = calibrate_dp_ksa(epsilon, delta, em_fraction=em_fraction, orders=orders, queries=queries)
    h = _histogram(histogram)
    _regularizer(h.size - 1, k_min, k_max, regularizer)  # validate before drawing anything
    src = RandomSource.resolve(source)
    k_hat, em_event = find_best_k(h, params.epsilon_em, src, k_min=k_min, k_max=k_max, regularizer=regularizer)
    tokens, ptr_event = ptr_release_top_k(
        h, k_hat, sigma=params.sigma, failure_probability=params.ptr_delta, source=src
    )
    return KeywordSelection(k_hat, tokens), ComposedEvent((em_event, ptr_event))
