"""Exact discrete Laplace and discrete Gaussian samplers (Canonne–Kamath–Steinke 2020, Algorithms 2 and 3).

Source: C. Canonne, G. Kamath, T. Steinke, "The Discrete Gaussian for Differential Privacy",
NeurIPS 2020 (arXiv:2004.00010), Section 5.

- ``discrete_laplace(scale, size, source)``: P[X = x] ∝ exp(-|x|/scale) on ℤ (CKS Algorithm 2 with
  scale = t/s in lowest terms).
- ``discrete_gaussian(sigma, size, source)``: P[X = x] ∝ exp(-x²/(2σ²)) on ℤ (CKS Algorithm 3: rejection
  from the discrete Laplace of scale t = ⌊σ⌋ + 1 with acceptance probability exp(-(|y| - σ²/t)²/(2σ²))).

Parameters are rationals, converted *exactly*: a float ``scale`` or ``sigma`` is read as the binary
rational it denotes (``Fraction(0.1) = 3602879701896397/2^55``) and σ² = Fraction(σ)², so the samplers
are exact for the number actually passed, never for a decimal the caller had in mind. ``Fraction`` and
``int`` parameters are used as given.

All randomness comes from a ``RandomSource``; every sample is produced in bulk rounds whose stream
consumption is specified in spec/accounting/noise.md §4–§5 (so the audit protocol's committed-seed noise can
be re-derived bit for bit). The outputs are exactly distributed, independent samples: within a round
every word is fresh and the assignment of words to samples depends only on earlier outcomes.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import SupportsFloat

import numpy as np
import numpy.typing as npt

from dprag.errors import DpragError, InvalidParameterError

from ..errors import check_positive_int
from .bernoulli import (
    as_fraction,
    bernoulli_exp_fraction,
    bernoulli_exp_minus_one,
    bernoulli_half,
)
from .stream import RandomStream

#: largest accepted discrete-Laplace scale and discrete-Gaussian σ (outputs stay far inside int64, and
#: the float filter's error analysis assumes |y| < 2^53)
MAX_SCALE = Fraction(2) ** 48
MAX_SIGMA = Fraction(2) ** 40
MIN_SIGMA = Fraction(1, 2**16)
_INT64_SAFE = 1 << 62


def check_source(source: object) -> RandomStream:
    if not isinstance(source, RandomStream):
        raise InvalidParameterError("source", "must be an accounting.noise.RandomSource", type(source).__name__)
    return source


def check_size(size: int) -> int:
    return check_positive_int("size", size, minimum=0)


def laplace_parameter(scale: SupportsFloat) -> Fraction:
    """Validate a discrete-Laplace scale and return it as an exact rational t/s."""
    b = as_fraction("scale", scale)
    if b <= 0:
        raise InvalidParameterError("scale", "must be > 0", scale)
    if b > MAX_SCALE:
        raise InvalidParameterError("scale", "must be <= 2^48", scale)
    if b.numerator > 1 << 53:
        raise InvalidParameterError("scale", "numerator of the reduced fraction must be <= 2^53", scale)
    return b


def gaussian_variance(sigma: SupportsFloat) -> Fraction:
    """Validate σ and return σ² as an exact rational (σ² = Fraction(σ)²)."""
    s = as_fraction("sigma", sigma)
    if s <= 0:
        raise InvalidParameterError("sigma", "must be > 0", sigma)
    if not (MIN_SIGMA <= s <= MAX_SIGMA):
        raise InvalidParameterError("sigma", "must lie in [2^-16, 2^40]", sigma)
    return s * s


def _floor_sqrt(q: Fraction) -> int:
    """⌊√q⌋ exactly for a rational q ≥ 0."""
    n, d = q.numerator, q.denominator
    r = math.isqrt(n // d)
    while (r + 1) * (r + 1) * d <= n:
        r += 1
    while r * r * d > n:
        r -= 1
    return r


# ---------------------------------------------------------------------------------------------------
# Uniform integers (spec §4, step U)
# ---------------------------------------------------------------------------------------------------
def _uniform(source: RandomStream, t: int, n: int) -> npt.NDArray[np.int64]:
    """n exactly uniform integers in [0, t): bulk rejection, one word per pending sample per round.

    A word w is accepted iff w < 2^64 - (2^64 mod t), giving w mod t; rejected samples retry in the next
    round (index order). t = 1 reads nothing.
    """
    out = np.zeros(n, dtype=np.int64)
    if t == 1 or n == 0:
        return out
    limit = (1 << 64) - ((1 << 64) % t)
    todo = np.arange(n)
    tt = np.uint64(t)
    while todo.size:
        w = source.uint64(todo.size)
        if limit < (1 << 64):
            ok = w < np.uint64(limit)
        else:
            ok = np.ones(todo.size, dtype=bool)
        out[todo[ok]] = (w[ok] % tt).astype(np.int64)
        todo = todo[~ok]
    return out


# ---------------------------------------------------------------------------------------------------
# CKS Algorithm 2: discrete Laplace with scale t/s
# ---------------------------------------------------------------------------------------------------
def sample_dlap(source: RandomStream, t: int, s: int, m: int) -> npt.NDArray[np.int64]:
    """m exact samples with P[z] ∝ exp(-|z|·s/t) (CKS Algorithm 2), bulk rounds as in spec §4."""
    out = np.zeros(m, dtype=np.int64)
    pending = np.arange(m)
    tf = float(t)  # exact: t <= 2^53
    while pending.size:
        n = pending.size
        # step U: U uniform in {0, ..., t-1}
        u = _uniform(source, t, n)
        # step D: D ~ Bernoulli(exp(-U/t)); U/t ∈ [0, 1), exact zero iff U = 0
        g_f = u.astype(np.float64) / tf
        uu = u

        def exact_u(i: int, uu: npt.NDArray[np.int64] = uu) -> Fraction:
            return Fraction(int(uu[i]), t)

        d = bernoulli_exp_fraction(source, g_f, g_f * 2.0**-52, exact_u, u == 0)
        sel = np.flatnonzero(d)
        # step V: V ~ Geometric: count Bernoulli(exp(-1)) successes before the first failure
        v = np.zeros(sel.size, dtype=np.int64)
        act = np.arange(sel.size)
        while act.size:
            a = bernoulli_exp_minus_one(source, act.size)
            act = act[a]
            v[act] += 1
        # X = U + t·V ; Y = ⌊X / s⌋ (exact integers)
        y = _floor_div(u[sel], v, t, s)
        # step B: sign
        b = bernoulli_half(source, sel.size)
        accept = ~(b & (y == 0))
        z = np.where(b, -y, y)
        acc_pos = sel[accept]
        out[pending[acc_pos]] = z[accept]
        keep = np.ones(n, dtype=bool)
        keep[acc_pos] = False
        pending = pending[keep]
    return out


def _floor_div(u: npt.NDArray[np.int64], v: npt.NDArray[np.int64], t: int, s: int) -> npt.NDArray[np.int64]:
    """⌊(u + t·v)/s⌋ exactly (numpy where it cannot overflow, Python integers otherwise)."""
    safe_v = (_INT64_SAFE - t) // t
    y = np.zeros(u.size, dtype=np.int64)
    small = v <= safe_v
    x = u[small] + np.int64(t) * v[small]
    if s < _INT64_SAFE:
        y[small] = x // np.int64(s)
    # else: x < 2^62 <= s, so y = 0
    for j in np.flatnonzero(~small):  # probability < exp(-2^9) per sample
        yy = (int(u[j]) + t * int(v[j])) // s
        if yy >= _INT64_SAFE:
            raise DpragError("discrete Laplace sample outside the int64 range (probability < 2^-700)")
        y[j] = yy
    return y


def discrete_laplace(scale: SupportsFloat, size: int, source: RandomStream) -> npt.NDArray[np.int64]:
    """``size`` exact samples of the discrete Laplace distribution, P[x] ∝ exp(-|x|/scale), as int64.

    CKS 2020, Algorithm 2, with scale = t/s in lowest terms (float scales are converted exactly). Stream
    consumption: spec/accounting/noise.md §4. ``scale`` must lie in (0, 2^48] and, as a reduced fraction, have
    numerator ≤ 2^53 (true for every float ≤ 2^48).
    """
    b = laplace_parameter(scale)
    n = check_size(size)
    src = check_source(source)
    return sample_dlap(src, b.numerator, b.denominator, n)


# ---------------------------------------------------------------------------------------------------
# CKS Algorithm 3: discrete Gaussian
# ---------------------------------------------------------------------------------------------------
#: relative+absolute bound used by the float filter for γ = (|y| - σ²/t)²/(2σ²): |γ_f - γ| ≤ 2^-44 (γ_f + 1)
#: (the error analysis in spec §5 gives ≤ 2^-53·(9γ + 3); the factor 2^9 margin covers γ vs γ_f)
_GAMMA_REL = 2.0**-44


def sample_dgauss(source: RandomStream, s2: Fraction, m: int) -> npt.NDArray[np.int64]:
    """m exact samples with P[y] ∝ exp(-y²/(2σ²)), σ² = ``s2`` (CKS Algorithm 3), bulk rounds (spec §5)."""
    t = _floor_sqrt(s2) + 1
    tau = s2 / t
    two_s2 = 2 * s2
    s2_f = float(s2)
    tau_f = s2_f / float(t)
    two_s2_f = 2.0 * s2_f
    out = np.zeros(m, dtype=np.int64)
    pending = np.arange(m)

    def exact_gamma(yv: int) -> Fraction:
        d = abs(yv) - tau
        return d * d / two_s2

    while pending.size:
        n = pending.size
        y = sample_dlap(source, t, 1, n)
        a = np.abs(y).astype(np.float64)
        d = a - tau_f
        g = d * d / two_s2_f
        mg = (g + 1.0) * _GAMMA_REL
        whole = np.floor(g)
        frac = g - whole  # exact in floating point
        f_err = mg.copy()
        # ambiguous: ⌊γ⌋ undecided, γ possibly an integer, or |y| too large for an exact float (spec §5)
        amb = (np.floor(g - mg) != np.floor(g + mg)) | (frac <= mg) | (a >= 2.0**52)
        exact_frac: dict[int, Fraction] = {}
        for i in np.flatnonzero(amb):
            gi = exact_gamma(int(y[i]))
            wi = gi.numerator // gi.denominator
            fi = gi - wi
            exact_frac[int(i)] = fi
            whole[i] = float(wi)  # rounding is monotone: comparisons with small j stay exact
            frac[i] = float(fi)
            f_err[i] = float(fi) * 2.0**-52
        # stage 1: ⌊γ⌋ trials of Bernoulli(exp(-1)), j = 1, 2, ...
        ok = np.ones(n, dtype=bool)
        j = 1
        while True:
            act = np.flatnonzero(ok & (whole >= j))
            if not act.size:
                break
            ok[act[~bernoulli_exp_minus_one(source, act.size)]] = False
            j += 1
        # stage 2: Bernoulli(exp(-(γ - ⌊γ⌋)))
        st2 = np.flatnonzero(ok)
        zero_mask = np.zeros(n, dtype=bool)
        for idx, fi in exact_frac.items():
            if fi == 0:
                zero_mask[idx] = True
        is_zero = zero_mask[st2]
        yy = y

        def exact_f(k: int, st2: npt.NDArray[np.intp] = st2, yy: npt.NDArray[np.int64] = yy) -> Fraction:
            gi = exact_gamma(int(yy[st2[k]]))
            return gi - gi.numerator // gi.denominator

        c = bernoulli_exp_fraction(source, frac[st2], f_err[st2], exact_f, is_zero)
        acc_pos = st2[c]
        out[pending[acc_pos]] = y[acc_pos]
        keep = np.ones(n, dtype=bool)
        keep[acc_pos] = False
        pending = pending[keep]
    return out


def discrete_gaussian(sigma: SupportsFloat, size: int, source: RandomStream) -> npt.NDArray[np.int64]:
    """``size`` exact samples of the discrete Gaussian N_ℤ(0, σ²), P[x] ∝ exp(-x²/(2σ²)), as int64.

    CKS 2020, Algorithm 3 (rejection from the discrete Laplace of scale t = ⌊σ⌋ + 1, itself Algorithm 2,
    with Bernoulli(exp(-γ)) coins from Algorithm 1). σ² = Fraction(σ)² exactly (a float σ is the binary
    rational it denotes). σ must lie in [2^-16, 2^40]. Stream consumption: spec/accounting/noise.md §5.
    """
    s2 = gaussian_variance(sigma)
    n = check_size(size)
    src = check_source(source)
    return sample_dgauss(src, s2, n)


__all__ = ["discrete_laplace", "discrete_gaussian", "laplace_parameter", "gaussian_variance"]
