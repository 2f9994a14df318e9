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

1. fast path: t_g computed in float64; if U lies farther than μ from every boundary, the float boundaries
   cannot be on the other side of U, so the answer is exact. Error bound: each weight is exp(y_g) with
   y_g = ln n_g − γ·(u_max − u_g) − max (ln of the exact integer multiplicities n_g, any size);
   the few float operations giving y_g carry an absolute error ≤ 2^-50·(mag_g + 1), mag_g = |ln n_g| +
   x_g + |shift| (exp and log assumed accurate to 4 ulp; glibc/numpy: ≤ 1–3 ulp), i.e. a relative weight
   error ≤ 2^-49·(mag_g + 1). The code evaluates Σ_g w_g·2^-49·(mag_g + 1)/Z a posteriori (the law's mean
   of the error, ≤ 2^-49·(ln N + 2) without multiplicities since P[x ≥ t] ≤ N·e^-t) and adds the cumulative
   sum's (G + 1)·2^-52; μ = max((G + 1024)·2^-46, 64× that bound);
2. otherwise (probability ≤ 2Gμ, e.g. 7·10^-5 for G = 50 000 without multiplicities): the boundaries are
   enclosed with ``decimal``
   arithmetic (exact rational exponents γ·(u_max − u_g) from the binary floats, correctly-rounded exp widened
   by one ulp, sums with directed rounding), U is extended by 64 more bits and the precision raised
   (≈ 0.3 digits per bit of U), until U's interval fits between two boundaries.
Both paths use the same (given) order of outcomes, so the output is, in every case, the outcome whose exact
interval contains U: the sampler is exact. Cost: O(G) float work per draw (G outcomes or groups).

``method="gumbel"`` (the float Gumbel-max form) was removed (spec/accounting/noise.md §8): float Gumbels are bounded, so
it gives probability 0 to outcomes ≈ 40/γ below the best, an infinite privacy loss on some neighbouring pair.
``method`` accepts only ``"direct"``; asking for ``"gumbel"`` raises InvalidParameterError saying why.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

from ..errors import check_epsilon
from ..events import ExponentialMechanismEvent
from ..noise.source import RandomSource

__all__ = [
    "exponential_mechanism",
    "exponential_mechanism_probabilities",
    "vote_exponential_mechanism",
    "vote_exponential_probabilities",
    "sample_exponential",
    "sample_with_base_measure",
    "PublicBaseMeasure",
]

_METHODS = ("direct",)


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------
def _as_utilities(utilities: npt.ArrayLike) -> npt.NDArray[np.float64]:
    try:
        u = np.asarray(utilities, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameterError("utilities", "must be a 1-d array of real numbers") from None
    if u.ndim != 1 or u.size == 0:
        raise InvalidParameterError("utilities", "must be a non-empty 1-d array", getattr(u, "shape", None))
    if not np.all(np.isfinite(u)):
        raise InvalidParameterError("utilities", "every utility must be finite (no NaN/inf)")
    return u


def as_histogram(histogram: npt.ArrayLike, field: str = "histogram") -> npt.NDArray[np.int64]:
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
    if method == "gumbel":
        raise InvalidParameterError(
            "method",
            "'gumbel' was removed: float Gumbel-max gives probability 0 to "
            "outcomes ~40/γ below the best (not ε-DP); use 'direct', the exact sampler",
            method,
        )
    if method not in _METHODS:
        raise InvalidParameterError("method", "must be 'direct' (the exact sampler)", method)
    return method


def _gamma(epsilon: float, sensitivity: float, monotone: bool) -> float:
    """Weight exponent per unit of utility: ε/(2Δ), or ε/Δ for monotone utilities."""
    return epsilon / sensitivity if monotone else epsilon / (2.0 * sensitivity)


# --------------------------------------------------------------------------------------------
# exact sampler
# --------------------------------------------------------------------------------------------
def sample_exponential(
    gamma: float,
    utilities: npt.NDArray[np.float64],
    multiplicities: npt.NDArray[np.int64] | Sequence[int] | None,
    source: RandomSource,
) -> int:
    """Index g drawn exactly with probability n_g·exp(γ u_g) / Σ_h n_h·exp(γ u_h).

    ``utilities`` finite float64, ``multiplicities`` positive integers of any size (None = all 1), γ > 0 finite.
    The algorithm is in the module docstring. Randomness: one 64-bit word, plus 64 bits per refinement
    round (a refinement happens with probability ≤ 2Gμ = 2G(G + 1024)·2^-46).
    """
    u = np.asarray(utilities, dtype=np.float64)
    G = u.size
    if multiplicities is None:
        n_exact = None
    else:
        # exact Python integers (any size) for the rigorous path; their correctly rounded float images (scaled
        # by a common power of two, relative error <= 2^-53 each, or an absolute error below 2^-1000 of the
        # largest) for the fast path
        n_exact = [int(v) for v in multiplicities]
        # ln n_g from the exact integers (math.log takes any int: no overflow or underflow)
        ln_n = np.array([math.log(v) if v > 0 else -math.inf for v in n_exact], dtype=np.float64)
    word = int(source.uint64(1)[0])
    if G == 1:
        return 0
    x = gamma * (u.max() - u)  # >= 0, the exponent gap of each outcome
    if n_exact is None:
        w = np.exp(-x)
        mag = x
    else:
        y = ln_n - x  # log-weights: a product n·e^{-x} could overflow / underflow where the weight does not
        top = y.max()
        y = y - top
        w = np.exp(y)
        fin = np.isfinite(y)
        mag = np.where(fin, np.abs(np.where(fin, ln_n, 0.0)) + x + abs(top) + np.abs(np.where(fin, y, 0.0)), 0.0)
    c = np.cumsum(w)  # outcomes in their given order (any fixed order is exact)
    t = c / c[-1]
    t[-1] = 1.0
    uf = word * 2.0**-64  # within 2^-53 of the exact U's first 64 bits
    j = min(int(np.searchsorted(t, uf, side="right")), G - 1)
    # a-posteriori float error bound (module docstring): each weight's exponent is within 2^-50·(mag_g + 1) of
    # the exact one, so Σ_g w_g·2^-49·(mag_g + 1)/Z bounds the weights' error relative to Z (factor 2 for
    # evaluating it in floats); plus the cumulative sum's (G + 1)·2^-52 and 2^-900 for underflowed weights
    err = 2.0**-49 * float(np.dot(w, mag + 1.0)) / c[-1] + (G + 1) * 2.0**-52 + 2.0**-900
    mu = max((G + 1024) * 2.0**-46, 64.0 * err)
    lower_ok = j == 0 or uf >= t[j - 1] + mu
    upper_ok = j == G - 1 or uf < t[j] - mu
    if lower_ok and upper_ok:
        return j
    return _exact_refine(gamma, u, [1] * G if n_exact is None else n_exact, word, source)


def _exact_refine(gamma: float, u: npt.NDArray[np.float64], n: Sequence[int], word: int, source: RandomSource) -> int:
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
        for x, cnt in zip(xs, counts, strict=False):
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
# exact sampler with a public base measure: P(v) ∝ μ̃(v)·exp(γ·h_v)
# --------------------------------------------------------------------------------------------
#: log-weights more than this many nats below the best get μ̃ = 0 (public: on every input alike)
BASE_MEASURE_FLOOR_NATS = 2.0**16
_INV_LN2 = 1.0 / math.log(2.0)
_FLOOR_BITS = BASE_MEASURE_FLOOR_NATS * _INV_LN2


class PublicBaseMeasure:
    """A public base measure, defined exactly from public log-weights: μ̃(v) = 2^{k_v}·f_v with

        x_v = (log_base[v] − max log_base)·fl(1/ln 2)  (float64),   k_v = ⌊x_v⌋,
        f_v = min(fl(2^{x_v − k_v}), 2 − 2^-52),

    so f_v ∈ [1, 2) has a 52-bit fraction (the integer mantissa m_v = f_v·2^52 ∈ [2^52, 2^53)) and μ̃(v) is
    within ~2^-40 relative of e^{log_base[v] − max}. μ̃(v) > 0 for every finite log-weight within
    ``BASE_MEASURE_FLOOR_NATS`` = 2^16 nats of the best (e^{−65536} is below any float), μ̃ = 0 for −inf and
    below that floor — on every input alike. μ̃ is a deterministic function of the public floats, so it *is*
    the public base measure the mechanism uses. Only x and k are computed for the whole vocabulary; f_v only
    for the tokens the sampler proposes.
    """

    __slots__ = ("x", "k", "live", "size")

    def __init__(self, x: npt.NDArray[np.float64], k: npt.NDArray[np.int64], live: npt.NDArray[np.bool_]) -> None:
        self.x, self.k, self.live = x, k, live
        self.size = x.size

    @classmethod
    def from_log(cls, log_base: npt.ArrayLike) -> PublicBaseMeasure:
        b = np.asarray(log_base, dtype=np.float64)
        top = b.max()  # finite or -inf entries only (``_as_log_base``), at least one finite
        x = (b - top) * _INV_LN2  # ≤ 0 or -inf
        live = x >= -_FLOOR_BITS
        k = np.floor(np.where(live, x, 0.0)).astype(np.int64)
        return cls(x, k, live)

    def mantissa(self, v: int) -> int:
        """m_v = f_v·2^52 (0 if μ̃(v) = 0): μ̃(v) = m_v·2^(k_v − 52)."""
        if not self.live[v]:
            return 0
        f = float(np.exp2(self.x[v] - self.k[v]))
        return int(min(max(f, 1.0), 2.0 - 2.0**-52) * 2.0**52)

    def log_weights(self) -> npt.NDArray[np.float64]:
        """ln μ̃ for every token (float; −inf where μ̃ = 0), for the float law and tests."""
        out = np.full(self.size, -np.inf)
        for v in np.flatnonzero(self.live).tolist():
            out[v] = math.log(self.mantissa(v)) + (int(self.k[v]) - 52) * math.log(2.0)
        return out


def _uniform_int(bound: int, source: RandomSource) -> int:
    """An exactly uniform integer in [0, bound) for any bound >= 1 (rejection on whole 64-bit words)."""
    if bound <= 1 << 63:
        return int(source.uniform_below(bound, 1)[0])
    nbits = (bound - 1).bit_length()
    words = (nbits + 63) // 64
    mask = (1 << nbits) - 1
    while True:
        w = source.uint64(words)
        v = 0
        for x in w.tolist():
            v = (v << 64) | int(x)
        v &= mask
        if v < bound:
            return v


def sample_with_base_measure(
    gamma: float, utilities: npt.ArrayLike, measure: PublicBaseMeasure, source: RandomSource
) -> int:
    """Index v drawn exactly with probability μ̃(v)·exp(γ·u_v) / Σ_w μ̃(w)·exp(γ·u_w).

    ``utilities``: vote counts (integers, 0 for most tokens); ``measure``: a ``PublicBaseMeasure``. Exact
    rejection sampling from an envelope that needs no per-token exponential:

    1. cells (c, k) = {v : u_v = c, k_v = k, μ̃(v) > 0} with their integer sizes n_{c,k} (one bincount for c = 0);
       the envelope weight of v is 2^{k_v + 1}·e^{γc} ≥ μ̃(v)·e^{γc};
    2. propose a cell with probability ∝ n_{c,k}·2^{k+1}·e^{γc} (``sample_exponential`` with the exact integer
       multiplicities n_{c,k}·2^{k − k_min}), then a uniform member v of it: v has probability
       2^{k_v + 1}e^{γu_v} / Σ (envelope);
    3. accept v with probability μ̃(v)/2^{k_v + 1} = m_v/2^53 ∈ [1/2, 1) (a uniform 53-bit integer r < m_v), else
       start again from 2 with fresh bits.
    An accepted v has probability ∝ μ̃(v)·e^{γu_v}, exactly, for every v with μ̃(v) > 0, however far below the
    best; at most 2 rounds on average. Cost: a few O(V) numpy passes (no exp over the vocabulary), O(#cells)
    Python integer work per round (tests/accounting/test_exponential_base_measure.py measures it at V = 49,152).
    """
    u = np.asarray(utilities)
    if u.shape != (measure.size,):
        raise InvalidParameterError("log_base", f"must have the utilities' length {u.size}", measure.size)
    k = measure.k
    zero = measure.live & (u == 0)
    cells: list[tuple[float, int]] = []
    sizes: list[int] = []
    members: dict[int, npt.NDArray[np.intp]] = {}
    kz = k[zero]
    if kz.size:
        k0 = int(kz.min())
        counts = np.bincount(kz - k0)
        for j in np.flatnonzero(counts).tolist():
            cells.append((0.0, k0 + j))
            sizes.append(int(counts[j]))
    nz = np.flatnonzero(measure.live & (u != 0))
    if nz.size:
        groups: dict[tuple[float, int], list[int]] = {}
        for v, c, kv in zip(nz.tolist(), u[nz].tolist(), k[nz].tolist(), strict=False):
            groups.setdefault((float(c), kv), []).append(v)
        for key, vs in groups.items():
            members[len(cells)] = np.array(vs, dtype=np.int64)
            cells.append(key)
            sizes.append(len(vs))
    kmin = min(kk for _, kk in cells)
    utils = np.array([c for c, _ in cells], dtype=np.float64)
    mults = [n << (kk - kmin) for (_, kk), n in zip(cells, sizes, strict=False)]
    while True:
        i = sample_exponential(gamma, utils, mults, source) if len(cells) > 1 else 0
        if i not in members:  # a zero-vote cell: its members on demand
            members[i] = np.flatnonzero(zero & (k == cells[i][1]))
        cand = members[i]
        v = int(cand[_uniform_int(cand.size, source)]) if cand.size > 1 else int(cand[0])
        r = int(source.uint64(1)[0]) >> 11  # uniform in [0, 2^53)
        if r < measure.mantissa(v):
            return v


# --------------------------------------------------------------------------------------------
# the exponential mechanism
# --------------------------------------------------------------------------------------------
def exponential_mechanism_probabilities(
    utilities: npt.ArrayLike, sensitivity: float, epsilon: float, *, monotone: bool = False
) -> npt.NDArray[np.float64]:
    """The exact output law of :func:`exponential_mechanism` (float64 softmax of γ·u, computed stably)."""
    u = _as_utilities(utilities)
    sensitivity = check_epsilon("sensitivity", sensitivity)
    epsilon = check_epsilon("epsilon", epsilon)
    z = _gamma(epsilon, sensitivity, monotone) * (u - u.max())
    w = np.exp(z)
    probs: npt.NDArray[np.float64] = w / w.sum()
    return probs


def exponential_mechanism(
    utilities: npt.ArrayLike,
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

    ``method="direct"`` (the only one) samples exactly (module docstring).
    Returns (index, ExponentialMechanismEvent(ε, bounded_range=True)). Bad input raises
    InvalidParameterError before any randomness is drawn.
    """
    u = _as_utilities(utilities)
    sensitivity = check_epsilon("sensitivity", sensitivity)
    epsilon = check_epsilon("epsilon", epsilon)
    method = _check_method(method)
    source = RandomSource.resolve(source)
    gamma = _gamma(epsilon, sensitivity, bool(monotone))
    if not math.isfinite(gamma):
        raise InvalidParameterError("epsilon", "epsilon / sensitivity must be finite", epsilon)
    event = ExponentialMechanismEvent(epsilon, bounded_range=True)
    return sample_exponential(gamma, u, None, source), event


# --------------------------------------------------------------------------------------------
# 000 Alg. 5 line 12: the exponential mechanism on a vote histogram over the whole vocabulary
# --------------------------------------------------------------------------------------------
def _count_groups(h: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Distinct counts (as utilities) and how many tokens have each; zeros counted without a full sort."""
    nz = h[h != 0]
    vals, mult = np.unique(nz, return_counts=True)
    zeros = h.size - nz.size
    if zeros:
        vals = np.concatenate(([0], vals))
        mult = np.concatenate(([zeros], mult))
    return vals.astype(np.float64), mult.astype(np.int64)


def _as_log_base(log_base: npt.ArrayLike, size: int) -> npt.NDArray[np.float64]:
    b = np.asarray(log_base, dtype=np.float64)
    if b.shape != (size,):
        raise InvalidParameterError(
            "log_base", f"must be a 1-d array of the histogram's length {size}", getattr(b, "shape", None)
        )
    if np.any(np.isnan(b)) or np.any(b == np.inf) or not np.any(np.isfinite(b)):
        raise InvalidParameterError("log_base", "must be log-weights: finite or -inf, not NaN or +inf, one finite")
    return b


def vote_exponential_probabilities(
    histogram: npt.ArrayLike, epsilon: float, log_base: npt.ArrayLike | None = None
) -> npt.NDArray[np.float64]:
    """Exact output law of :func:`vote_exponential_mechanism`: softmax of ε·count/2 (+ log base measure)."""
    h = as_histogram(histogram)
    if log_base is None:
        return exponential_mechanism_probabilities(h.astype(np.float64), 1.0, epsilon)
    b = _as_log_base(log_base, h.size)
    z = b + check_epsilon("epsilon", epsilon) / 2.0 * h
    z = z - z[np.isfinite(z)].max()
    w = np.exp(z)
    probs: npt.NDArray[np.float64] = w / w.sum()
    return probs


def vote_exponential_mechanism(
    histogram: npt.ArrayLike,
    epsilon: float,
    source: RandomSource | None = None,
    *,
    method: str = "direct",
    log_base: npt.ArrayLike | None = None,
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
    ``em_prior="non-rag"`` passes the no-context model's next-token log-probabilities). The measure used is
    ``PublicBaseMeasure.from_log(log_base)`` (μ̃ ≈ e^{log_base − max}, a public function of the floats, > 0
    wherever log_base is finite and within 2^16 nats of its maximum), sampled *exactly* by
    ``sample_with_base_measure`` (module docstring): P(v) = μ̃(v)·e^{ε·Hist[v]/2} / Z for every v, however
    far below the best (spec/accounting/noise.md §8: float Gumbel-max gave probability 0 beyond ≈ 40 nats).
    """
    h = as_histogram(histogram)
    epsilon = check_epsilon("epsilon", epsilon)
    method = _check_method(method)
    base = None if log_base is None else _as_log_base(log_base, h.size)
    source = RandomSource.resolve(source)
    event = ExponentialMechanismEvent(epsilon, bounded_range=True)
    gamma = epsilon / 2.0
    if base is not None:
        return sample_with_base_measure(gamma, h, PublicBaseMeasure.from_log(base), source), event
    vals, mult = _count_groups(h)
    g = sample_exponential(gamma, vals, mult, source)
    members = np.flatnonzero(h == int(vals[g]))
    j = int(source.uniform_below(int(mult[g]), 1)[0]) if mult[g] > 1 else 0
    return int(members[j]), event
