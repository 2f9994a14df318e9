r"""LimitedDomain (Durfee & Rogers 2019) as 003 (DPVoteRAG / DPSparseVoteRAG) uses it: one token per call.

Source: Durfee & Rogers, "Practical Differentially Private Top-k Selection with Pay-what-you-get
Composition", NeurIPS 2019 (arXiv 1905.04273), Algorithm "LimitedDomain" with k = 1; 003 Algorithm 2 line 11
and Algorithm 3 line 18: y_t ← LimitedDomain(h_t, ε, δ) with k̄ = m (the number of voters, 003 §IV-A d),
the null output ⊥ read as <EOS> (003 §III-A, footnote 2).

The mechanism. Let T be the k̄ tokens with the largest counts (ties broken by the smaller token id — any fixed
order works), h_(k̄+1) the (k̄+1)-th largest count, and

        h_⊥ = h_(k̄+1) + c + s · ln(min(Δ₀, k̄, d − k̄) / δ),

where s is the Gumbel scale, Δ₀ the ℓ₀-sensitivity (how many counts one individual can change) and d the
domain size. Output argmax over T ∪ {⊥} of (h_i + Gumbel(s)) — equivalently (Gumbel-max), token i ∈ T with
probability e^{h_i/s}/Z and ⊥ with probability e^{h_⊥/s}/Z, Z = Σ_T e^{h_j/s} + e^{h_⊥/s}. We sample this law
exactly (``accounting.mechanisms.exponential.sample_exponential``), never with float Gumbels.

Privacy (proof checked here; it is Durfee–Rogers' argument for k = 1, redone for each neighbouring relation):
for neighbours h ~ h' with ‖h − h'‖∞ ≤ 1,
 (a) on the common support (T ∩ T') ∪ {⊥} the log-ratio of output probabilities is (h_i − h'_i)/s + ln(Z'/Z),
     and ln(Z'/Z) ∈ [−1/s, 1/s] (match T ∩ T' to itself, T' \ T to T \ T' — a token that entered ranks above
     the one it displaced, and order statistics are 1-Lipschitz, so every matched weight and the ⊥ weight
     move by a factor ≤ e^{1/s}); hence the loss is ≤ 2/s in general and ≤ 1/s when the change is monotone
     (all counts move in one direction: then (h_i − h'_i) and ln(Z'/Z) have opposite signs);
 (b) the outputs in T \ T' have probability 0 under h'. Each such token x satisfies h_x ≤ h'_x + 1 ≤
     h'_(k̄+1) + 1 ≤ h_(k̄+1) + 2 (≤ h_(k̄+1) + 1 when monotone — the +2 is attained with a tie: k̄ = 1,
     h = (2, 0) → h' = (1, 1) with the tie broken towards the second token), and |T \ T'| ≤ min(Δ₀, k̄, d − k̄)
     (if some x ∈ T \ T' kept its count, every y ∈ T' \ T changed its count). So their total probability
     is ≤ min(Δ₀, k̄, d − k̄) · e^{(h_(k̄+1) + c)/s} / e^{h_⊥/s} = δ.
Therefore LimitedDomain is (ε, δ)-DP with
 - ``monotone=True``  (Durfee–Rogers' relation: a user is added or removed and can only raise, resp. lower,
   each count by ≤ 1): s = 1/ε, c = 1 — exactly their algorithm and their (ε, δ) for k = 1;
 - ``monotone=False`` (default; the relation of 003/001: one document more, less or replaced changes ONE
   voter's vote, i.e. one count −1 and another +1, ℓ∞ = 1, Δ₀ = 2, not monotone): s = 2/ε, c = 2.

Discrepancy with 003 (see spec/accounting/mechanisms.md, "LimitedDomain"): 003 calls LimitedDomain(h_t,
ε_token, δ_token) following Hong et al. (DP-OPT), i.e. Durfee–Rogers' calibration s = 1/ε, c = 1. Under 003's
own neighbouring relation (replace one document ⇒ one vote moves) that calibration is only (2ε, δ')-DP — the
EM with weights e^{ε h} and a +1/−1 change has loss up to 2ε (h = (M, 0) → (M−1, 1): the second token's
probability grows by ≈ e^{2ε}) — and the +1 in h_⊥ no longer bounds the tokens that can leave T. We follow the
proof: the default calibration charges what it claims.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

from ..errors import check_delta, check_epsilon, check_positive_int
from ..events import ApproxDpEvent, ExponentialMechanismEvent
from ..noise.source import RandomSource
from .exponential import as_histogram, sample_exponential

__all__ = ["BOTTOM", "limited_domain", "limited_domain_probabilities", "limited_domain_threshold"]

#: The null output ⊥ of LimitedDomain (003: halt, i.e. treat as <EOS>).
BOTTOM = None


def _scale_and_shift(epsilon: float, monotone: bool) -> tuple[float, int]:
    return (1.0 / epsilon, 1) if monotone else (2.0 / epsilon, 2)


def limited_domain_threshold(
    kth_plus_one: int,
    epsilon: float,
    delta: float,
    k_bar: int,
    domain_size: int,
    *,
    l0_sensitivity: int = 2,
    monotone: bool = False,
) -> float:
    """h_⊥ = h_(k̄+1) + c + s·ln(min(Δ₀, k̄, d − k̄)/δ), rounded up (a larger h_⊥ only lowers δ)."""
    epsilon = check_epsilon("epsilon", epsilon)
    delta = check_delta("delta", delta)
    k_bar = check_positive_int("k_bar", k_bar)
    domain_size = check_positive_int("domain_size", domain_size)
    l0_sensitivity = check_positive_int("l0_sensitivity", l0_sensitivity)
    if domain_size <= k_bar:
        raise InvalidParameterError("k_bar", "must be < the domain size for a threshold to exist", k_bar)
    s, c = _scale_and_shift(epsilon, bool(monotone))
    n_swap = min(l0_sensitivity, k_bar, domain_size - k_bar)
    const = c + s * math.log(n_swap / delta)
    const = const * (1.0 + 2.0**-40) + 2.0**-40  # absorb the rounding of log, product and sum (upwards)
    out = float(kth_plus_one) + const
    return math.nextafter(out, math.inf)


def _candidates(h: npt.NDArray[np.int64], k_bar: int) -> tuple[npt.NDArray[np.int64], int]:
    """T (top-k̄ token ids, by count desc then id asc) and h_(k̄+1) (requires d > k̄)."""
    nz = np.flatnonzero(h)
    if nz.size > k_bar:
        order = np.lexsort((nz, -h[nz]))
        top = nz[order[: k_bar + 1]]
        return top[:k_bar], int(h[top[k_bar]])
    ranked = nz[np.lexsort((nz, -h[nz]))]
    need = k_bar - ranked.size
    if need:
        zeros = np.flatnonzero(h == 0)[:need]
        ranked = np.concatenate((ranked, zeros))
    return ranked.astype(np.int64), 0  # at most k̄ non-zero counts, d > k̄: the (k̄+1)-th count is 0


def _validate(
    histogram: npt.ArrayLike, epsilon: float, delta: float, k_bar: int, l0_sensitivity: int
) -> tuple[npt.NDArray[np.int64], float, float, int, int]:
    h = as_histogram(histogram)
    epsilon = check_epsilon("epsilon", epsilon)
    delta = check_delta("delta", delta)
    k_bar = check_positive_int("k_bar", k_bar)
    l0_sensitivity = check_positive_int("l0_sensitivity", l0_sensitivity)
    return h, epsilon, delta, k_bar, l0_sensitivity


def limited_domain_probabilities(
    histogram: npt.ArrayLike,
    epsilon: float,
    delta: float,
    k_bar: int,
    *,
    l0_sensitivity: int = 2,
    monotone: bool = False,
) -> tuple[npt.NDArray[np.float64], float]:
    """Exact output law of :func:`limited_domain`: (probability of each token, probability of ⊥)."""
    h, epsilon, delta, k_bar, l0_sensitivity = _validate(histogram, epsilon, delta, k_bar, l0_sensitivity)
    s, _ = _scale_and_shift(epsilon, bool(monotone))
    probs = np.zeros(h.size)
    if h.size <= k_bar:
        z = (h - h.max()) / s
        w = np.exp(z)
        return w / w.sum(), 0.0
    T, kth = _candidates(h, k_bar)
    hb = limited_domain_threshold(kth, epsilon, delta, k_bar, h.size, l0_sensitivity=l0_sensitivity, monotone=monotone)
    util = np.concatenate((h[T].astype(np.float64), [hb]))
    w = np.exp((util - util.max()) / s)
    w /= w.sum()
    probs[T] = w[:-1]
    return probs, float(w[-1])


def limited_domain(
    histogram: npt.ArrayLike,
    epsilon: float,
    delta: float,
    k_bar: int,
    source: RandomSource | None = None,
    *,
    l0_sensitivity: int = 2,
    monotone: bool = False,
) -> tuple[int | None, ApproxDpEvent | ExponentialMechanismEvent]:
    """LimitedDomain with k = 1 on a count histogram: returns (token id or ``BOTTOM`` (None), event).

    ``histogram[v]``: count of token v (vote histogram over the whole vocabulary, zeros included; only the
    top k̄+1 counts influence the output). Neighbouring relation: one individual changes each count by at
    most 1 and at most ``l0_sensitivity`` counts (003 voting: one voter's vote moves, Δ₀ = 2); ``monotone``
    only if all changed counts move in the same direction (module docstring). Privacy: (ε, δ)-DP →
    ``ApproxDpEvent(ε, δ)``; when k̄ ≥ d there is no ⊥ and it is the exponential mechanism over the whole
    domain → ``ExponentialMechanismEvent(ε)`` (pure ε-DP, ε-bounded-range).
    """
    h, epsilon, delta, k_bar, l0_sensitivity = _validate(histogram, epsilon, delta, k_bar, l0_sensitivity)
    source = RandomSource.resolve(source)
    s, _ = _scale_and_shift(epsilon, bool(monotone))
    if h.size <= k_bar:
        g = sample_exponential(1.0 / s, h.astype(np.float64), None, source)
        return int(g), ExponentialMechanismEvent(epsilon, bounded_range=True)
    T, kth = _candidates(h, k_bar)
    hb = limited_domain_threshold(kth, epsilon, delta, k_bar, h.size, l0_sensitivity=l0_sensitivity, monotone=monotone)
    util = np.concatenate((h[T].astype(np.float64), [hb]))
    g = sample_exponential(1.0 / s, util, None, source)
    event = ApproxDpEvent(epsilon, delta)
    if g == T.size:
        return BOTTOM, event
    return int(T[g]), event
