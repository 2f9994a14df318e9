"""Secure real-valued Laplace and Gaussian noise on a power-of-two grid, and a Gumbel helper.

Why: textbook floating-point samplers (e.g. b·log(U) for Laplace) leak the input through the pattern of
representable outputs — Mironov 2012, "On significance of the least significant bits for differential
privacy" (CCS 2012). Serving code in dprag never uses them. Instead, following Google's differential
privacy library ("Secure Noise Generation", common_docs/Secure_Noise_Generation.pdf; LaplaceNoise.java),
noise lives on a grid γℤ with γ a power of two:

    laplace(b)  = γ·Z,  Z ~ discrete Laplace with scale b/γ     (CKS Algorithm 2, exact)
    gaussian(σ) = γ·Z,  Z ~ discrete Gaussian N_ℤ(0, (σ/γ)²)   (CKS Algorithm 3, exact)

and a mechanism first rounds its query to the grid (``round_to_grid``), so that the released value
γ·(k + Z) is a post-processing of the *integer* mechanism k + Z; see ``accounting.mechanisms.additive``
for the privacy statements (rounding raises the integer sensitivity to ⌈Δ/γ⌉ + m - 1).

**Only add these noises to values already on the grid.** Adding γ·Z to an arbitrary float re-introduces the
floating-point rounding of the sum that Mironov exploits; use the mechanisms, which round first.

Default granularity (as Google's library): γ = the smallest power of two ≥ scale / 2^40, so the discrete
noise has scale (or σ) in (2^39, 2^40] grid steps and the grid is ~12 decimal digits finer than the noise.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

from ..errors import check_epsilon
from .discrete import check_size, check_source, gaussian_variance, laplace_parameter, sample_dgauss, sample_dlap
from .stream import RandomStream

#: grid steps per unit of noise scale in the default granularity (Google: GRANULARITY_PARAM = 2^40)
GRANULARITY_PARAM = 2.0**40


def is_power_of_two(x: float) -> bool:
    """True iff x is a finite float equal to 2^k for an integer k."""
    if isinstance(x, (bool, str, bytes)):
        return False
    try:
        x = float(x)
    except (TypeError, ValueError):
        return False
    if not (x > 0 and math.isfinite(x)):
        return False
    m, _ = math.frexp(x)
    return m == 0.5


def ceil_power_of_two(x: float) -> float:
    """The smallest power of two ≥ x (x > 0 finite), computed exactly with ``frexp``."""
    x = check_epsilon("x", x)
    m, e = math.frexp(x)
    return x if m == 0.5 else math.ldexp(1.0, e)


def granularity_for(scale: float) -> float:
    """Default grid step for noise of ``scale`` (Laplace b or Gaussian σ): ceil_pow2(scale / 2^40)."""
    s = check_epsilon("scale", scale)
    return ceil_power_of_two(math.ldexp(s, -40)) if math.ldexp(s, -40) > 0 else math.ldexp(1.0, -1074)


def check_granularity(granularity: float) -> float:
    if isinstance(granularity, (bool, str, bytes)) or not is_power_of_two(granularity):
        raise InvalidParameterError("granularity", "must be a power of two (2^k, k an integer)", granularity)
    return float(granularity)


def round_to_grid(values: npt.ArrayLike, granularity: float) -> npt.NDArray[np.float64]:
    """k = ⌊v/γ + 1/2⌋ (round half up) as float64 integers, computed exactly.

    x = v/γ is exact (division by a power of two) unless it overflows (refused) or falls below 2^-1022
    (then k = 0 either way); ⌊x⌋ is exact, and x - ⌊x⌋ is exact for x ∉ (-1, 0) (Sterbenz) while on
    (-1, 0) the test x - ⌊x⌋ = x + 1 ≥ ½ is still decided correctly (x + 1 is exact on [-1, -½]). So k is
    the exact round-half-up of v/γ (checked against ``Fraction`` arithmetic in the tests). Round half up
    (rather than half to even) is what makes |k(v) - k(v')| ≤ ⌈|v - v'|/γ⌉ hold (spec §7).
    """
    g = check_granularity(granularity)
    v = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(v)):
        raise InvalidParameterError("values", "must be finite (no NaN or inf)")
    with np.errstate(over="ignore"):
        x = v / g
    if not np.all(np.isfinite(x)):
        raise InvalidParameterError("granularity", "is too small: values / granularity overflows float64", g)
    k = np.floor(x)
    k = k + ((x - k) >= 0.5)
    return k


def laplace(scale: float, size: int, source: RandomStream, granularity: float | None = None) -> npt.NDArray[np.float64]:
    """``size`` samples of secure Laplace noise γ·Z, Z ~ discrete Laplace of scale b/γ, as float64 on γℤ.

    ``scale`` b > 0 (float); ``granularity`` γ a power of two (default ``granularity_for(b)``); b/γ must
    be ≤ 2^48. P[γZ = γz] ∝ exp(-|z|γ/b): the Laplace density with scale b restricted to the grid.
    Add only to values rounded to the same grid (``round_to_grid``), or use
    ``accounting.mechanisms.additive.laplace_mechanism``.
    """
    b = check_epsilon("scale", scale)
    g = granularity_for(b) if granularity is None else check_granularity(granularity)
    try:
        z_scale = laplace_parameter(Fraction(b) / Fraction(g))
    except InvalidParameterError:
        raise InvalidParameterError("granularity", "scale / granularity must be <= 2^48", granularity) from None
    n = check_size(size)
    src = check_source(source)
    return sample_dlap(src, z_scale.numerator, z_scale.denominator, n).astype(np.float64) * g


def gaussian(
    sigma: float, size: int, source: RandomStream, granularity: float | None = None
) -> npt.NDArray[np.float64]:
    """``size`` samples of secure Gaussian noise γ·Z, Z ~ N_ℤ(0, (σ/γ)²) exact, as float64 on γℤ.

    ``granularity`` γ a power of two (default ``granularity_for(σ)``); σ/γ must lie in [2^-16, 2^40].
    Add only to values rounded to the same grid, or use ``accounting.mechanisms.additive.gaussian_mechanism``.
    """
    s = check_epsilon("sigma", sigma)
    g = granularity_for(s) if granularity is None else check_granularity(granularity)
    try:
        s2 = gaussian_variance(Fraction(s) / Fraction(g))
    except InvalidParameterError:
        raise InvalidParameterError(
            "granularity", "sigma / granularity must lie in [2^-16, 2^40]", granularity
        ) from None
    n = check_size(size)
    src = check_source(source)
    return sample_dgauss(src, s2, n).astype(np.float64) * g


def gumbel(size: int, source: RandomStream) -> npt.NDArray[np.float64]:
    """``size`` standard Gumbel samples -log(-log U), for Gumbel-max selection (report-noisy-max).

    U = ``source.uniform01`` (grid k·2^-53); draws with U = 0 are replaced by fresh draws, one word at a
    time in index order, until nonzero, so U ∈ (0, 1) and the result is finite.

    Privacy note: argmax_i (u_i + β·G_i) releases only the arg max; with exact Gumbels it is the exponential
    mechanism (McSherry–Talwar) with weights exp(u_i/β). These Gumbels are floating-point values, so the
    selection probabilities match the exponential mechanism only up to the 2^-53 grid of U and the rounding
    of log: use it for the index only (never release the noisy values), as the DP-KSA / exponential-mechanism
    callers do.
    """
    n = check_size(size)
    src = check_source(source)
    u = src.uniform01(n)
    zeros = np.flatnonzero(u == 0.0)
    for j in zeros:
        v = 0.0
        while v == 0.0:
            v = float(src.uniform01(1)[0])
        u[j] = v
    return -np.log(-np.log(u))


__all__ = [
    "laplace",
    "gaussian",
    "gumbel",
    "granularity_for",
    "round_to_grid",
    "ceil_power_of_two",
    "is_power_of_two",
    "check_granularity",
    "GRANULARITY_PARAM",
]
