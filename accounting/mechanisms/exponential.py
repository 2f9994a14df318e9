"""The exponential mechanism (McSherry & Talwar 2007), sampled exactly, and its vote-histogram form.

Sources:
- McSherry & Talwar, "Mechanism Design via Differential Privacy", FOCS 2007 (Thm 6): with a utility u(x, y) of
  sensitivity Δ = max_{x~x'} max_y |u(x, y) − u(x', y)|, sampling y with probability ∝ exp(ε u(x, y) / (2Δ))
  is ε-DP. If u is *monotone* (for every neighbouring pair all utilities move in the same direction),
  exp(ε u / Δ) is ε-DP as well (Dwork & Roth 2014, §3.4, remark after Thm 3.10).
- Durfee & Rogers 2019 (NeurIPS), Def. 4.1 / Lemma 4.2 and Dong, Durfee & Rogers 2020: both calibrations are
  ε-bounded-range: the log-ratio of the output probabilities on neighbours lies in an interval of width ε
  (the width is (ε/2Δ)·2Δ, resp. (ε/Δ)·Δ for monotone u). Cesar & Rogers 2021: ε-bounded-range ⇒ (ε²/8)-zCDP,
  which is what ``ExponentialMechanismEvent(ε, bounded_range=True)`` records (``accounting.rdp``).
- Gumbel-max trick: argmax_y {ε u(y) / (2Δ) + G_y} with G_y i.i.d. standard Gumbel has exactly the
  exponential-mechanism law (Durfee & Rogers 2019, Lemma 4.2; the "report noisy max" view of 004 Alg. 3).
- 000 Algorithm 5 / 001 Algorithm 7 (pure-DP DP-RAG), line 12: y_t ← expoMech(Hist_t; ε_Expo) with
  ε_Expo = ε₀/2, the utility of token v being its vote count Hist_t[v] over the *whole* vocabulary. One
  document more or less changes at most one voter's retrieved set, hence one vote: one count −1 and one
  count +1, so the utility has sensitivity 1 and is **not** monotone. ``vote_exponential_mechanism`` is
  exactly this step.

Exact sampling (``method="direct"``, the default). The weights exp(γ u) are irrational, and a categorical
sampler that compares one 53-bit float uniform with float cumulative sums gives probability 0 to outcomes
whose weight is below 2^-53 of the total (and a float Gumbel is bounded above by ≈ 36.7, so Gumbel-max
gives probability 0 to any outcome more than ≈ 40/γ utility below the best) — an output that has
probability 0 on one input and > 0 on its neighbour is an infinite privacy loss. ``sample_exponential``
therefore draws a uniform real U in [0, 1) lazily, 64 bits at a time, and returns the outcome whose
interval [t_{g−1}, t_g) of the exact cumulative distribution contains U:

1. fast path: t_g computed in float64; if U lies farther than μ = (G + 1024)·2^-46 from every boundary,
   the float boundaries cannot be on the other side of U, so the answer is exact. Error bound: the exponents
   γ·(u_max − u_g) carry a relative error ≤ 2^-52, i.e. a relative weight error ≤ 2^-52·x_g, which averages
   to ≤ 2^-52·(ln N + 1) ≤ 2^-46.5 under the law itself (P[x ≥ t] ≤ N·e^-t); exp is assumed accurate to 4 ulp
   (glibc/numpy: ≤ 1–3 ulp); the cumulative sum adds ≤ G·2^-53 relative. So |t̃_g − t_g| ≤ 2^-45 + G·2^-52,
   and μ is ≥ 64 times that;
2. otherwise (probability ≤ 2Gμ, e.g. 7·10^-5 for G = 50 000): the boundaries are enclosed with ``decimal``
   arithmetic (exact rational exponents γ·(u_max − u_g) from the binary floats, correctly-rounded exp widened
   by one ulp, sums with directed rounding), U is extended by 64 more bits and the precision raised
   (≈ 0.3 digits per bit of U), until U's interval fits between two boundaries.
Both paths use the same (given) order of outcomes, so the output is, in every case, the outcome whose exact
interval contains U: the sampler is exact. Cost: O(G) float work per draw (G outcomes or groups).

``method="gumbel"`` is the Gumbel-max form with helper A's ``accounting.noise.gumbel`` sampler; it is the
same distribution up to floating point (not exact: see above) and is kept for parity with 004 Alg. 3.
Serving code should use ``direct`` (the default), which is also faster on vote histograms.
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction

import numpy as np

from ..errors import InvalidParameterError, check_epsilon
from ..events import ExponentialMechanismEvent
from ..noise.source import RandomSource

__all__ = [
    "exponential_mechanism",
    "exponential_mechanism_probabilities",
    "vote_exponential_mechanism",
    "vote_exponential_probabilities",
    "sample_exponential",
]

_METHODS = ("direct", "gumbel")


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------
def _as_utilities(utilities) -> np.ndarray:
    try:
        u = np.asarray(utilities, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameterError("utilities", "must be a 1-d array of real numbers") from None
    if u.ndim != 1 or u.size == 0:
        raise InvalidParameterError("utilities", "must be a non-empty 1-d array", getattr(u, "shape", None))
    if not np.all(np.isfinite(u)):
        raise InvalidParameterError("utilities", "every utility must be finite (no NaN/inf)")
    return u


def _as_histogram(histogram, field: str = "histogram") -> np.ndarray:
    h = np.asarray(histogram)
    if h.ndim != 1 or h.size == 0:
        raise InvalidParameterError(field, "must be a non-empty 1-d array of counts", getattr(h, "shape", None))
    if h.dtype == bool or not (np.issubdtype(h.dtype, np.integer) or np.issubdtype(h.dtype, np.floating)):
        raise InvalidParameterError(field, "must hold non-negative integer counts", h.dtype)
    if np.issubdtype(h.dtype, np.floating):
        if not np.all(np.isfinite(h)) or np.any(h != np.floor(h)):
            raise InvalidParameterError(field, "must hold non-negative integer counts")
    if np.any(h < 0):
        raise InvalidParameterError(field, "counts must be >= 0")
    if h.max() >= 2**53:
        raise InvalidParameterError(field, "counts must be < 2^53")
    return h.astype(np.int64)


def _check_method(method: str) -> str:
    if method not in _METHODS:
        raise InvalidParameterError("method", "must be 'direct' or 'gumbel'", method)
    return method


def _source(source: RandomSource | None) -> RandomSource:
    if source is None:
        return RandomSource.system()
    if not isinstance(source, RandomSource):
        raise InvalidParameterError("source", "must be an accounting.noise.RandomSource", type(source).__name__)
    return source


def _gamma(epsilon: float, sensitivity: float, monotone: bool) -> float:
    """Weight exponent per unit of utility: ε/(2Δ), or ε/Δ for monotone utilities."""
    return epsilon / sensitivity if monotone else epsilon / (2.0 * sensitivity)


# --------------------------------------------------------------------------------------------
# exact sampler
# --------------------------------------------------------------------------------------------
def sample_exponential(
    gamma: float,
    utilities: np.ndarray,
    multiplicities: np.ndarray | None,
    source: RandomSource,
) -> int:
    """Index g drawn exactly with probability n_g·exp(γ u_g) / Σ_h n_h·exp(γ u_h).

    ``utilities`` finite float64, ``multiplicities`` positive integers (None = all 1), γ > 0 finite.
    The algorithm is in the module docstring. Randomness: one 64-bit word, plus 64 bits per refinement
    round (a refinement happens with probability ≤ 2Gμ = 2G(G + 1024)·2^-46).
    """
    u = np.asarray(utilities, dtype=np.float64)
    G = u.size
    n = np.ones(G, dtype=np.float64) if multiplicities is None else np.asarray(multiplicities, dtype=np.float64)
    word = int(source.uint64(1)[0])
    if G == 1:
        return 0
    x = gamma * (u.max() - u)  # >= 0, the exponent gap of each outcome
    w = n * np.exp(-x)
    c = np.cumsum(w)  # outcomes in their given order (any fixed order is exact)
    t = c / c[-1]
    t[-1] = 1.0
    uf = word * 2.0**-64  # within 2^-53 of the exact U's first 64 bits
    j = min(int(np.searchsorted(t, uf, side="right")), G - 1)
    mu = (G + 1024) * 2.0**-46  # ≥ 64× the float error bound 2^-45 + G·2^-52 (module docstring)
    lower_ok = j == 0 or uf >= t[j - 1] + mu
    upper_ok = j == G - 1 or uf < t[j] - mu
    if lower_ok and upper_ok:
        return j
    return _exact_refine(gamma, u, n.astype(np.int64), word, source)


def _exact_refine(gamma: float, u: np.ndarray, n: np.ndarray, word: int, source: RandomSource) -> int:
    """Rigorous interval refinement (see module docstring); same outcome order as the fast path."""
    G = u.size
    gam = Fraction(float(gamma))
    uf = [Fraction(float(v)) for v in u]
    umax = max(uf)
    xs = [gam * (umax - v) for v in uf]  # exact rationals >= 0
    counts = [int(v) for v in n]
    bits, U = 64, int(word)
    xmax_digits = len(str(int(max(xs)))) if xs else 1  # exponents up to 10^d need d more digits
    rounds = 0
    while True:
        # enough digits to resolve U's interval (2^-bits) after an exponent of size 10^xmax_digits, plus a
        # margin that grows every round (so refinement terminates with probability 1)
        prec = 40 + int(bits * 0.30103) + xmax_digits + 8 * rounds
        rounds += 1
        floor, ceil, near = (
            decimal.Context(prec=prec, rounding=r, Emin=decimal.MIN_EMIN, Emax=decimal.MAX_EMAX, traps=[])
            for r in (decimal.ROUND_FLOOR, decimal.ROUND_CEILING, decimal.ROUND_HALF_EVEN)
        )
        c_lo = decimal.Decimal(0)
        c_hi = decimal.Decimal(0)
        cum_lo: list[decimal.Decimal] = []
        cum_hi: list[decimal.Decimal] = []
        for x, cnt in zip(xs, counts):
            num, den = decimal.Decimal(x.numerator), decimal.Decimal(x.denominator)
            x_lo = floor.divide(num, den)
            x_hi = ceil.divide(num, den)
            # Decimal.exp is correctly rounded (half-even): widen by one ulp for rigorous bounds.
            e_near_lo = near.exp(-x_lo)
            e_near_hi = e_near_lo if x_hi == x_lo else near.exp(-x_hi)
            e_lo = near.next_minus(e_near_hi)
            e_hi = near.next_plus(e_near_lo)
            if e_lo < 0:
                e_lo = decimal.Decimal(0)
            c_lo = floor.add(c_lo, floor.multiply(decimal.Decimal(cnt), e_lo))
            c_hi = ceil.add(c_hi, ceil.multiply(decimal.Decimal(cnt), e_hi))
            cum_lo.append(c_lo)
            cum_hi.append(c_hi)
        z_lo, z_hi = cum_lo[-1], cum_hi[-1]
        # U ∈ [U/2^bits, (U+1)/2^bits), written exactly in decimal (2^-b = 5^b·10^-b).
        u_lo = decimal.Decimal(U * 5**bits).scaleb(-bits, context=decimal.Context(prec=10**6))
        u_hi = decimal.Decimal((U + 1) * 5**bits).scaleb(-bits, context=decimal.Context(prec=10**6))
        prev_hi = decimal.Decimal(0)  # upper bound of t_{g-1}; t_{-1} = 0 exactly
        for g in range(G):
            if g == G - 1:
                t_lo = decimal.Decimal(1)  # t_{G-1} = 1 exactly
                t_hi_g = decimal.Decimal(1)
            else:
                t_lo = floor.divide(cum_lo[g], z_hi)
                t_hi_g = ceil.divide(cum_hi[g], z_lo) if z_lo > 0 else decimal.Decimal(1)
            if prev_hi <= u_lo and u_hi <= t_lo:
                return g
            if u_lo < t_hi_g:  # U may lie at or below this boundary: undecided at this precision
                break
            prev_hi = t_hi_g
        U = (U << 64) | int(source.uint64(1)[0])
        bits += 64


# --------------------------------------------------------------------------------------------
# the exponential mechanism
# --------------------------------------------------------------------------------------------
def exponential_mechanism_probabilities(
    utilities, sensitivity: float, epsilon: float, *, monotone: bool = False
) -> np.ndarray:
    """The exact output law of :func:`exponential_mechanism` (float64 softmax of γ·u, computed stably)."""
    u = _as_utilities(utilities)
    sensitivity = check_epsilon("sensitivity", sensitivity)
    epsilon = check_epsilon("epsilon", epsilon)
    z = _gamma(epsilon, sensitivity, monotone) * (u - u.max())
    w = np.exp(z)
    return w / w.sum()


def exponential_mechanism(
    utilities,
    sensitivity: float,
    epsilon: float,
    source: RandomSource | None = None,
    *,
    method: str = "direct",
    monotone: bool = False,
) -> tuple[int, ExponentialMechanismEvent]:
    """Select index i with probability ∝ exp(ε·u_i / (2Δ)) (∝ exp(ε·u_i / Δ) if ``monotone``).

    McSherry & Talwar 2007 Thm 6; ε-DP and ε-bounded-range (Durfee & Rogers 2019) under whatever
    neighbouring relation Δ is the sensitivity for: Δ ≥ max_{x~x'} max_i |u_i(x) − u_i(x')|. ``monotone=True``
    is valid only if, for every neighbouring pair, all u_i(x) − u_i(x') have the same sign (e.g. counts under
    add-only/remove-only); vote histograms are *not* monotone.

    ``method="direct"`` samples exactly (module docstring); ``"gumbel"`` is argmax of γ·u + Gumbel(0, 1).
    Returns (index, ExponentialMechanismEvent(ε, bounded_range=True)). Bad input raises
    InvalidParameterError before any randomness is drawn.
    """
    u = _as_utilities(utilities)
    sensitivity = check_epsilon("sensitivity", sensitivity)
    epsilon = check_epsilon("epsilon", epsilon)
    method = _check_method(method)
    source = _source(source)
    gamma = _gamma(epsilon, sensitivity, bool(monotone))
    if not math.isfinite(gamma):
        raise InvalidParameterError("epsilon", "epsilon / sensitivity must be finite", epsilon)
    event = ExponentialMechanismEvent(epsilon, bounded_range=True)
    if method == "gumbel":
        from ..noise import gumbel  # helper A's standard Gumbel sampler

        noise = np.asarray(gumbel(u.size, source), dtype=np.float64)
        return int(np.argmax(gamma * u + noise)), event
    return sample_exponential(gamma, u, None, source), event


# --------------------------------------------------------------------------------------------
# 000 Alg. 5 line 12: the exponential mechanism on a vote histogram over the whole vocabulary
# --------------------------------------------------------------------------------------------
def _count_groups(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct counts (as utilities) and how many tokens have each; zeros counted without a full sort."""
    nz = h[h != 0]
    vals, mult = np.unique(nz, return_counts=True)
    zeros = h.size - nz.size
    if zeros:
        vals = np.concatenate(([0], vals))
        mult = np.concatenate(([zeros], mult))
    return vals.astype(np.float64), mult.astype(np.int64)


def _as_log_base(log_base, size: int) -> np.ndarray:
    b = np.asarray(log_base, dtype=np.float64)
    if b.shape != (size,):
        raise InvalidParameterError("log_base", f"must be a 1-d array of the histogram's length {size}",
                                    getattr(b, "shape", None))
    if np.any(np.isnan(b)) or np.any(b == np.inf) or not np.any(np.isfinite(b)):
        raise InvalidParameterError("log_base", "must be log-weights: finite or -inf, not NaN or +inf, one finite")
    return b


def vote_exponential_probabilities(histogram, epsilon: float, log_base=None) -> np.ndarray:
    """Exact output law of :func:`vote_exponential_mechanism`: softmax of ε·count/2 (+ log base measure)."""
    h = _as_histogram(histogram)
    if log_base is None:
        return exponential_mechanism_probabilities(h.astype(np.float64), 1.0, epsilon)
    b = _as_log_base(log_base, h.size)
    z = b + check_epsilon("epsilon", epsilon) / 2.0 * h
    z = z - z[np.isfinite(z)].max()
    w = np.exp(z)
    return w / w.sum()


def vote_exponential_mechanism(
    histogram,
    epsilon: float,
    source: RandomSource | None = None,
    *,
    method: str = "direct",
    log_base=None,
) -> tuple[int, ExponentialMechanismEvent]:
    """000 Algorithm 5 line 12 (001 Alg. 7): expoMech(Hist_t; ε_Expo) over the whole vocabulary.

    ``histogram[v]`` is the number of voters whose next token is v (length = vocabulary size, zeros
    included). Utility = count, sensitivity 1 (one changed document changes one voter's vote: one count −1,
    one +1; not monotone), so token v is drawn with probability ∝ exp(ε·Hist[v]/2). ε-DP and ε-bounded-range
    with respect to the retrieved document set under add/remove or replace-one of a document (the
    partition into voters is fixed given the ranked list, 003 Thm 2 proof). Exact; the tokens sharing a
    count are sampled as one group and then uniformly within it, so the cost is O(vocab) for the scan plus
    O(#distinct counts) for the draw. Returns (token id, ExponentialMechanismEvent(ε)).

    ``log_base`` (beyond 000): a *public* base measure μ (McSherry & Talwar 2007 define the mechanism with an
    arbitrary base measure): token v is drawn with probability ∝ μ(v)·exp(ε·Hist[v]/2). The privacy proof is
    unchanged — μ is the same on neighbouring inputs, so the density ratio is still ≤ e^{ε/2} and the
    normaliser ratio ≤ e^{ε/2}; bounded range too — provided μ depends on public data only (000 Alg. 5 with
    ``em_prior="non-rag"`` passes the no-context model's next-token log-probabilities). Sampled by Gumbel-max
    (argmax of log μ + ε·Hist/2 + Gumbel(0, 1), the secure Gumbel sampler); float rounding of log μ only
    changes which public base measure is used.
    """
    h = _as_histogram(histogram)
    epsilon = check_epsilon("epsilon", epsilon)
    method = _check_method(method)
    base = None if log_base is None else _as_log_base(log_base, h.size)
    source = _source(source)
    event = ExponentialMechanismEvent(epsilon, bounded_range=True)
    gamma = epsilon / 2.0
    if base is not None:
        from ..noise import gumbel

        noise = np.asarray(gumbel(h.size, source), dtype=np.float64)
        return int(np.argmax(base + gamma * h + noise)), event
    if method == "gumbel":
        from ..noise import gumbel

        noise = np.asarray(gumbel(h.size, source), dtype=np.float64)
        return int(np.argmax(gamma * h + noise)), event
    vals, mult = _count_groups(h)
    g = sample_exponential(gamma, vals, mult, source)
    members = np.flatnonzero(h == int(vals[g]))
    j = int(source.uniform_below(int(mult[g]), 1)[0]) if mult[g] > 1 else 0
    return int(members[j]), event
