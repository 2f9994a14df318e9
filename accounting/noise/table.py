"""Table (inverse-CDF) sampler for the discrete Gaussian, with a rigorous total-variation bound.

For hot paths (the audit protocol's retrieval channel noises 10^5–10^6 scores per query) the exact CKS
sampler (``discrete.py``) is too slow. ``DiscreteGaussianTable`` draws from a fixed distribution Q on
{-T, …, T} with dyadic probabilities q(x)/2^B, one 64-bit word per sample, and reports
``tv_distance`` ≥ TV(Q, N_ℤ(0, σ²)) — an upper bound the accountant adds to δ as (1 + e^ε)·TV.

Construction (spec/accounting/noise.md §6), all in exact big-integer arithmetic — no floating point:

1. w(x) = exp(-x²/(2σ²)) is bracketed, for x = 0..T, as integers w_lo(x) ≤ 2^P·w(x) ≤ w_hi(x) by the
   recursion w(x+1) = w(x)·g(x), g(x) = c·d^x, c = e^{-1/(2σ²)}, d = e^{-1/σ²}, with outward (floor/ceil)
   rounding at every product; c, d and the tail constants are bracketed by the alternating Taylor
   series of e^{-z}, z ∈ (0, 1] (partial sums bracket the limit), raised to integer powers.
2. Z_T = Σ_{|x|≤T} w(x) is bracketed by the sums of the brackets, and so is p_T(x) = w(x)/Z_T, the
   discrete Gaussian conditioned on |x| ≤ T.
3. The table is the *mathematically defined* q(x) = ⌊2^B·p_T(x)⌋ for x ≠ 0 and q(0) = 2^B - Σ_{x≠0} q(x)
   (symmetric, sums to 2^B). ⌊·⌋ is computed from the brackets; if a bracket straddles an integer the
   whole computation is redone at higher precision P (it never stalls: 2^B·p_T(x) is irrational for
   x ≠ 0 by Lindemann–Weierstrass), so any correct implementation builds the same table (``digest``).
4. TV(Q, N_ℤ(0,σ²)) ≤ TV(Q, p_T) + TV(p_T, p) = Σ_{x≠0}(p_T(x) - q(x)/2^B) + P[|X| > T], bounded
   above with the upper brackets of p_T and the geometric tail bound
   Σ_{x>T} w(x) ≤ w(T+1)/(1 - e^{-(2T+3)/(2σ²)}); the final rational is rounded up to a float.

Sampling: u = w >> (64 - B) for a word w; x = -T + #{i : C_i ≤ u} with C_i = Σ_{j≤i} q(j - T) — the
inverse CDF. A guide table indexed by the top bits of u only speeds up the search; the output is that
of the plain inverse CDF.
"""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

from ..errors import check_positive_int
from .discrete import check_size, check_source, gaussian_variance
from .stream import RandomStream

MAX_TABLE_ENTRIES = 1 << 21


# ---------------------------------------------------------------------------------------------------
# Exact brackets of exp(-y)
# ---------------------------------------------------------------------------------------------------
def exp_neg_bounds(y: Fraction, prec: int) -> tuple[int, int]:
    """Integers (lo, hi) with lo ≤ 2^prec·exp(-y) ≤ hi, for rational y ≥ 0. Exact big-integer arithmetic.

    y ≥ prec: (0, 1) (since e^{-y} < 2^{-prec}). Otherwise n = ⌈y⌉, z = y/n ∈ (0, 1]: e^{-z} lies between
    consecutive partial sums of its alternating Taylor series (terms decrease since z ≤ 1); the bracket is
    raised to the n-th power with floor/ceil rounding at working precision prec + 64 + bitlen(n).
    """
    y = Fraction(y)
    if y < 0:
        raise InvalidParameterError("y", "must be >= 0", y)
    one = 1 << prec
    if y == 0:
        return one, one
    if y >= prec:
        return 0, 1
    n = max(1, math.ceil(y))
    z = y / n
    q = prec + 64 + n.bit_length()
    scale = 1 << q
    s_cur = Fraction(1)
    s_prev = Fraction(1)
    term = Fraction(1)
    k = 0
    while True:
        k += 1
        term = term * z / k
        s_prev = s_cur
        s_cur = s_cur - term if k % 2 else s_cur + term
        if term * scale < Fraction(1, 4):
            break
    lo_s, hi_s = min(s_cur, s_prev), max(s_cur, s_prev)
    lo = (lo_s.numerator * scale) // lo_s.denominator
    hi = -((-hi_s.numerator * scale) // hi_s.denominator)
    lo_p, hi_p = lo, hi
    for _ in range(n - 1):
        lo_p = (lo_p * lo) >> q
        hi_p = -((-hi_p * hi) >> q)
    shift = q - prec
    return lo_p >> shift, -((-hi_p) >> shift)


class _NeedPrecision(Exception):
    pass


def _build(s2: Fraction, T: int, B: int, P: int) -> tuple[list[int], Fraction, Fraction]:
    """Brackets of 2^P·w(x), x = 0..T, and the quantised table; raises _NeedPrecision if undecided."""
    one = 1 << P
    c_lo, c_hi = exp_neg_bounds(1 / (2 * s2), P)
    d_lo, d_hi = exp_neg_bounds(1 / s2, P)
    w_lo = [one]
    w_hi = [one]
    g_lo, g_hi = c_lo, c_hi
    a_lo, a_hi = one, one
    for _ in range(T):
        a_lo = (a_lo * g_lo) >> P
        a_hi = -((-a_hi * g_hi) >> P)
        w_lo.append(a_lo)
        w_hi.append(a_hi)
        g_lo = (g_lo * d_lo) >> P
        g_hi = -((-g_hi * d_hi) >> P)
    z_lo = one + 2 * sum(w_lo[1:])
    z_hi = one + 2 * sum(w_hi[1:])
    q = [0] * (T + 1)
    for x in range(1, T + 1):
        lo = (w_lo[x] << B) // z_hi
        hi = (w_hi[x] << B) // z_lo
        if lo != hi:
            raise _NeedPrecision
        q[x] = lo
    q[0] = (1 << B) - 2 * sum(q[1:])
    # Σ_{x≠0} (p_T(x) - q(x)/2^B) ≤ Σ_{x≠0} (w_hi(x)·2^B - q(x)·z_lo) / (z_lo·2^B)
    quant_num = 2 * sum((w_hi[x] << B) - q[x] * z_lo for x in range(1, T + 1))
    quant = Fraction(max(quant_num, 0), z_lo << B)
    # P[|X| > T] ≤ 2·w(T+1)/(1 - r)/Z_T with r = e^{-(2T+3)/(2σ²)}
    e_lo, e_hi = exp_neg_bounds(Fraction((T + 1) ** 2) / (2 * s2), P)
    r_lo, r_hi = exp_neg_bounds(Fraction(2 * T + 3) / (2 * s2), P)
    if r_hi >= one:
        tail = Fraction(1)
    else:
        tail = min(Fraction(1), Fraction(2 * e_hi * one, (one - r_hi) * z_lo))
    return q, quant, tail


def _float_up(x: Fraction) -> float:
    f = float(x)
    if Fraction(f) < x:
        f = math.nextafter(f, math.inf)
    return f


class DiscreteGaussianTable:
    """Inverse-CDF sampler for N_ℤ(0, σ²) truncated to [-T, T] and quantised to B bits.

    ``sigma``: σ (converted exactly, σ² = Fraction(σ)², as in ``discrete_gaussian``), in [2^-16, 2^40].
    ``tail_bound``: T = ⌈tail_bound·σ⌉ (exact rationals); default ⌈16·√(2 ln2 (B+16))⌉/16 (= 10.5625 for
    B = 64; tail mass ≈ 2^-(B+16)).
    ``precision_bits``: B ∈ [16, 64]; one word per sample, its top B bits are used.

    Attributes: ``sigma``, ``variance`` (Fraction), ``support_bound`` (largest |x| with q(x) > 0),
    ``precision_bits``, ``tv_distance`` (rigorous upper bound on TV(Q, N_ℤ(0, σ²)), a float rounded up),
    ``weights`` (int array q(-T..T) as Python ints), ``digest`` (SHA-256 of the table, hex).
    Building costs O(T) big-integer operations (≈ 30 ms at σ = 1000); reuse the instance.
    """

    def __init__(self, sigma: float | Fraction, tail_bound: float | None = None, precision_bits: int = 64) -> None:
        s2 = gaussian_variance(sigma)
        B = check_positive_int("precision_bits", precision_bits, minimum=16)
        if B > 64:
            raise InvalidParameterError("precision_bits", "must lie in [16, 64]", precision_bits)
        if tail_bound is None:
            # ⌈16·√(2 ln2 (B+16))⌉/16, an exact rational (16·√… stays ≥ 0.025 away from an integer for every
            # B ∈ [16, 64], so the ceiling does not depend on the libm's last bit)
            tail: Fraction | float = Fraction(math.ceil(16.0 * math.sqrt(2.0 * math.log(2.0) * (B + 16))), 16)
        else:
            try:
                tail = float(tail_bound)
            except (TypeError, ValueError):
                raise InvalidParameterError("tail_bound", "must be a finite number > 0", tail_bound) from None
            if not (tail > 0 and math.isfinite(tail)):
                raise InvalidParameterError("tail_bound", "must be a finite number > 0", tail_bound)
        sigma_q = Fraction(sigma) if not isinstance(sigma, Fraction) else sigma
        T = math.ceil(Fraction(tail) * sigma_q)
        tail = float(tail)
        if 2 * T + 1 > MAX_TABLE_ENTRIES:
            raise InvalidParameterError(
                "tail_bound", f"gives a table of {2 * T + 1} entries (> 2^21); lower sigma or tail_bound", tail_bound
            )
        P = B + 192
        while True:
            try:
                q, quant, tail_mass = _build(s2, T, B, P)
                break
            except _NeedPrecision:
                P += 128
        self.sigma = float(sigma_q)
        self.variance = s2
        self.precision_bits = B
        self.tail_bound = tail
        self.quantisation_tv = _float_up(quant)
        self.tail_mass = _float_up(tail_mass)
        self.tv_distance = _float_up(quant + tail_mass)
        # trim zero-probability tails
        Te = T
        while Te > 0 and q[Te] == 0:
            Te -= 1
        self.support_bound = Te
        full = q[Te:0:-1] + q[: Te + 1]  # q(-Te), ..., q(Te)
        self.weights = full
        h = hashlib.sha256()
        h.update(b"dprag.DiscreteGaussianTable.v1")
        h.update(s2.numerator.to_bytes((s2.numerator.bit_length() + 7) // 8 + 1, "big"))
        h.update(b"/")
        h.update(s2.denominator.to_bytes((s2.denominator.bit_length() + 7) // 8 + 1, "big"))
        h.update(B.to_bytes(1, "big") + Te.to_bytes(8, "big"))
        for v in full:
            h.update(v.to_bytes(9, "little"))
        self.digest = h.hexdigest()
        # cumulative sums C_0..C_{n-2} (all < 2^64 because q(Te) ≥ 1 when Te > 0)
        n = len(full)
        cum = np.empty(max(n - 1, 0), dtype=np.uint64)
        acc = 0
        for i in range(n - 1):
            acc += full[i]
            cum[i] = acc
        self._cum = cum
        self._shift = np.uint64(64 - B)
        # guide table: for bucket j of the top h bits of u, the inverse-CDF answer at the bucket start
        self._h = min(B, max(4, (n - 1).bit_length() + 2), 20)
        hb = self._h
        starts = np.arange(1 << hb, dtype=np.uint64) << np.uint64(B - hb)
        guide = np.searchsorted(cum, starts, side="right").astype(np.int64)
        guide_end = np.append(guide[1:], np.int64(n - 1))
        self._guide = guide
        self._narrow = (guide_end - guide) <= 1
        self._cum_pad = np.append(cum, np.uint64(0))  # padding; index n-1 is masked by ``_last``
        self._last = np.int64(n - 1)

    def __repr__(self) -> str:
        return (
            f"DiscreteGaussianTable(sigma={self.sigma!r}, support_bound={self.support_bound}, "
            f"precision_bits={self.precision_bits}, tv_distance={self.tv_distance:.3e})"
        )

    def pmf(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """(support -T..T as int64, probabilities q(x)/2^B as float64) of the sampled distribution Q."""
        xs = np.arange(-self.support_bound, self.support_bound + 1, dtype=np.int64)
        return xs, np.array([float(v) for v in self.weights]) * 2.0**-self.precision_bits

    def sample(self, size: int, source: RandomStream) -> npt.NDArray[np.int64]:
        """``size`` samples of Q as int64; reads exactly ``size`` words (one per sample, in order)."""
        n = check_size(size)
        src = check_source(source)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        w = src.uint64(n)
        if self.support_bound == 0:
            return np.zeros(n, dtype=np.int64)
        u = w >> self._shift if self.precision_bits < 64 else w
        j = (u >> np.uint64(self.precision_bits - self._h)).astype(np.intp)
        idx = self._guide[j]
        idx += (self._cum_pad[idx] <= u) & (idx < self._last)
        wide = np.flatnonzero(~self._narrow[j])
        if wide.size:
            idx[wide] = np.searchsorted(self._cum, u[wide], side="right")
        return idx - np.int64(self.support_bound)


__all__ = ["DiscreteGaussianTable", "exp_neg_bounds"]
