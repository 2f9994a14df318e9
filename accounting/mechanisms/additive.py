"""Additive-noise mechanisms: secure (granular) Laplace and Gaussian, discrete Laplace and discrete Gaussian.

Every mechanism validates all of its input before drawing a single word from the ``RandomSource``, and
returns ``(noisy, event)`` where ``event`` is the privacy event it spent (``accounting.events``), stated
for the effective integer query actually noised — an honest upper bound, never the textbook value.

Sensitivities are under whatever neighbouring relation the caller's query is analysed for:
``sensitivity`` bounds ‖f(D) - f(D')‖₁ for the Laplace mechanisms and ‖f(D) - f(D')‖₂ for the Gaussian
ones (for a scalar query both are |f(D) - f(D')|). ``l0_sensitivity`` (default: the number of entries)
bounds how many entries of f can differ between neighbours.

Granular (secure floating-point) mechanisms — Mironov 2012 ("On significance of the least significant
bits for differential privacy"); granularity approach of Google's DP library (Secure_Noise_Generation.pdf):
with γ = 2^k, k(v) = ⌊v/γ + ½⌋ per entry and output γ·fl(k(f(D)) + Z), Z integer noise, the sum formed
exactly before its one rounding. The output is a post-processing (float rounding of the exact integer,
then the scaling by γ) of the integer mechanism k(f(D)) + Z, so its privacy is that of the integer
mechanism with integer sensitivity

    L1: Δ_ℤ = ⌈Δ/γ⌉ + m - 1          L2: Δ_ℤ = ⌈Δ/γ + √m⌉ (= ⌈Δ/γ⌉ when m = 1),    m = l0_sensitivity.

Derivation (spec/accounting/noise.md §7): for reals a, b, |⌊a⌋ - ⌊b⌋| ≤ ⌈|a - b|⌉; with a = v/γ + ½ this
gives |k(v) - k(v')| ≤ ⌈|v - v'|/γ⌉ < |v - v'|/γ + 1 per entry that changed (entries equal on both sides
round equally). Summing over at most m changed entries: Σ⌈x_i⌉ < Σx_i + m ≤ Δ/γ + m, an integer strictly
below Δ/γ + m, hence ≤ ⌈Δ/γ⌉ + m - 1. In L2: ‖⌈x⌉‖₂ ≤ ‖x‖₂ + ‖1_S‖₂ ≤ Δ/γ + √m. Google's library uses
the slightly larger Δ/γ + 1 (scalar; any rounding rule). Caveat: Δ must bound the sensitivity of the
floating-point values actually passed in, not of an idealised real-valued query.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import overload

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

from ..errors import check_epsilon, check_positive_int
from ..events import DiscreteGaussianEvent, DiscreteLaplaceEvent
from ..noise.bernoulli import as_fraction
from ..noise.discrete import (
    MAX_SCALE,
    check_source,
    gaussian_variance,
    laplace_parameter,
    sample_dgauss,
    sample_dlap,
)
from ..noise.secure import check_granularity, granularity_for, is_power_of_two, round_to_grid
from ..noise.stream import RandomStream
from ..noise.table import DiscreteGaussianTable

_INT_LIMIT = 1 << 62


# ---------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------
def _float_values(values: npt.ArrayLike) -> tuple[npt.NDArray[np.float64], bool]:
    try:
        v = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameterError("values", "must be a real number or an array of real numbers") from None
    if v.size == 0:
        raise InvalidParameterError("values", "must be non-empty")
    if not np.all(np.isfinite(v)):
        raise InvalidParameterError("values", "must be finite (no NaN or inf)")
    return v, v.ndim == 0


def _int_values(values: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], bool]:
    arr = np.asarray(values)
    if arr.size == 0:
        raise InvalidParameterError("values", "must be non-empty")
    if arr.dtype == bool or arr.dtype.kind not in "iuf":
        raise InvalidParameterError("values", "must be integers (an int array or integral numbers)")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.floor(arr)):
            raise InvalidParameterError("values", "must be integers (an int array or integral numbers)")
    if np.any(np.abs(arr.astype(np.float64)) >= float(_INT_LIMIT)):
        raise InvalidParameterError("values", "must lie in (-2^62, 2^62)")
    return arr.astype(np.int64), arr.ndim == 0


def _l0(l0_sensitivity: int | None, size: int) -> int:
    if l0_sensitivity is None:
        return size
    m = check_positive_int("l0_sensitivity", l0_sensitivity)
    if m > size:
        raise InvalidParameterError("l0_sensitivity", f"must be <= the number of entries ({size})", l0_sensitivity)
    return m


def _float_up(x: Fraction) -> float:
    f = float(x)
    if Fraction(f) < x:
        f = math.nextafter(f, math.inf)
    return f


def _float_down(x: Fraction) -> float:
    f = float(x)
    if Fraction(f) > x:
        f = math.nextafter(f, -math.inf)
    return f


def granular_l1_sensitivity(sensitivity: float, granularity: float, l0_sensitivity: int = 1) -> int:
    """Integer L1 sensitivity ⌈Δ/γ⌉ + m - 1 of the rounded query (module docstring, spec §7)."""
    x = Fraction(check_epsilon("sensitivity", sensitivity)) / Fraction(check_granularity(granularity))
    m = check_positive_int("l0_sensitivity", l0_sensitivity)
    return math.ceil(x) + m - 1


def granular_l2_sensitivity(sensitivity: float, granularity: float, l0_sensitivity: int = 1) -> int:
    """Integer bound ⌈Δ/γ + √m⌉ (⌈Δ/γ⌉ for m = 1) on the L2 sensitivity of the rounded query (spec §7)."""
    x = Fraction(check_epsilon("sensitivity", sensitivity)) / Fraction(check_granularity(granularity))
    m = check_positive_int("l0_sensitivity", l0_sensitivity)
    if m == 1:
        return math.ceil(x)
    # smallest integer N with N - x ≥ √m, i.e. (N - x)² ≥ m and N ≥ x (exact)
    n = math.ceil(x) + max(0, math.isqrt(m) - 1)
    while (n - x) < 0 or (n - x) * (n - x) < m:
        n += 1
    return n


def _grid_output(k: npt.NDArray[np.float64], z: npt.NDArray[np.int64], g: float) -> npt.NDArray[np.float64]:
    """γ·fl(k + z), a deterministic function of the exact integer k + z (post-processing, spec §7).

    k: float64 integers (``round_to_grid``), z: int64 noise. The sum is formed exactly (int64 where
    |k| < 2^62, Python integers otherwise) before the single rounding to float64 and the scaling by γ.
    """
    out = np.empty(k.shape, dtype=np.float64)
    small = np.abs(k) < 2.0**62
    out[small] = (k[small].astype(np.int64) + z[small]).astype(np.float64)
    big = np.flatnonzero(~small.ravel())
    if big.size:
        flat_out, flat_k, flat_z = out.reshape(-1), k.reshape(-1), z.reshape(-1)
        for j in big:
            flat_out[j] = float(int(flat_k[j]) + int(flat_z[j]))
    return out * g


@overload
def _shape(noisy: npt.NDArray[np.float64], scalar: bool) -> float | npt.NDArray[np.float64]: ...
@overload
def _shape(noisy: npt.NDArray[np.int64], scalar: bool) -> int | npt.NDArray[np.int64]: ...
def _shape(
    noisy: npt.NDArray[np.float64] | npt.NDArray[np.int64], scalar: bool
) -> float | int | npt.NDArray[np.float64] | npt.NDArray[np.int64]:
    return noisy.item() if scalar else noisy


# ---------------------------------------------------------------------------------------------------
# granular (secure floating-point) mechanisms
# ---------------------------------------------------------------------------------------------------
def laplace_mechanism(
    values: npt.ArrayLike,
    sensitivity: float,
    epsilon: float,
    source: RandomStream,
    *,
    granularity: float | None = None,
    l0_sensitivity: int | None = None,
) -> tuple[float | npt.NDArray[np.float64], DiscreteLaplaceEvent]:
    """ε-DP secure Laplace mechanism on real values (scalar or array); returns (noisy, DiscreteLaplaceEvent).

    ``sensitivity``: L1 sensitivity Δ of the query (over all entries). γ = ``granularity`` (a power of two;
    default ``granularity_for(Δ/ε)`` = ⌈Δ/ε / 2^40⌉₂). The query is rounded to γℤ, the integer query gets
    discrete Laplace noise of scale b_ℤ = Δ_ℤ/ε (rounded up to a float) with Δ_ℤ = ⌈Δ/γ⌉ + m - 1, and
    γ·(k + Z) is released. Guarantee: exactly ε-DP — the event DiscreteLaplaceEvent(scale=b_ℤ,
    sensitivity=Δ_ℤ) has ε = Δ_ℤ/b_ℤ ≤ ``epsilon`` (spec §7). The noise is Laplace-like with scale
    γ·b_ℤ = (Δ + (m-1+θ)γ)/ε, θ ∈ [0,1): larger than Δ/ε by at most m·γ/ε.
    """
    v, scalar = _float_values(values)
    delta = check_epsilon("sensitivity", sensitivity)
    eps = check_epsilon("epsilon", epsilon)
    g = granularity_for(delta / eps) if granularity is None else check_granularity(granularity)
    m = _l0(l0_sensitivity, v.size)
    src = check_source(source)
    dz = granular_l1_sensitivity(delta, g, m)
    scale_z = _float_up(Fraction(dz) / Fraction(eps))
    if Fraction(scale_z) > MAX_SCALE:
        raise InvalidParameterError(
            "granularity", "is too fine: the integer noise scale (sensitivity/granularity)/epsilon exceeds 2^48", g
        )
    b = laplace_parameter(scale_z)
    k = round_to_grid(v, g)
    event = DiscreteLaplaceEvent(scale=scale_z, sensitivity=dz)
    z = sample_dlap(src, b.numerator, b.denominator, v.size).reshape(v.shape)
    return _shape(_grid_output(k, z, g), scalar), event


def gaussian_mechanism(
    values: npt.ArrayLike,
    sensitivity: float,
    sigma: float,
    source: RandomStream,
    *,
    granularity: float | None = None,
    l0_sensitivity: int | None = None,
    table: DiscreteGaussianTable | None = None,
) -> tuple[float | npt.NDArray[np.float64], DiscreteGaussianEvent]:
    """Secure Gaussian mechanism on real values; returns (noisy, DiscreteGaussianEvent).

    ``sensitivity``: L2 sensitivity Δ. The query is rounded to γℤ (γ = ``granularity``, a power of two;
    default ``granularity_for(σ)``, or σ/table.sigma when a ``table`` is given), the integer query gets
    discrete Gaussian noise N_ℤ(0, (σ/γ)²) and γ·(k + Z) is released. Guarantee: the event
    DiscreteGaussianEvent(sigma=σ/γ, sensitivity=Δ_ℤ) with Δ_ℤ = ⌈Δ/γ + √m⌉ (⌈Δ/γ⌉ for m = 1), i.e.
    (α·Δ_ℤ²γ²/(2σ²))-RDP (CKS 2020, Thm 4 / Thm 14 multivariate) — noise multiplier σ/(γΔ_ℤ) ≥ σ/(Δ + γ(1 + √m)).
    With ``table`` (a ``DiscreteGaussianTable`` of σ/γ) the event carries sampler_tv = n·table.tv_distance
    for n noised entries (TV of a product ≤ sum of TVs).
    """
    v, scalar = _float_values(values)
    delta = check_epsilon("sensitivity", sensitivity)
    sig = check_epsilon("sigma", sigma)
    if table is not None and not isinstance(table, DiscreteGaussianTable):
        raise InvalidParameterError("table", "must be a DiscreteGaussianTable", type(table).__name__)
    if granularity is not None:
        g = check_granularity(granularity)
    elif table is not None:
        ratio = sig / table.sigma
        if not is_power_of_two(ratio) or Fraction(sig) != Fraction(ratio) * Fraction(table.sigma):
            raise InvalidParameterError(
                "table", "sigma / table.sigma must be a power of two (or pass granularity)", table.sigma
            )
        g = ratio
    else:
        g = granularity_for(sig)
    m = _l0(l0_sensitivity, v.size)
    src = check_source(source)
    sig_z_q = Fraction(sig) / Fraction(g)
    try:
        s2 = gaussian_variance(sig_z_q)
    except InvalidParameterError:
        raise InvalidParameterError("granularity", "sigma / granularity must lie in [2^-16, 2^40]", g) from None
    sig_z = float(sig_z_q)
    if Fraction(sig_z) != sig_z_q:  # cannot happen for normal floats (γ is a power of two)
        raise InvalidParameterError("granularity", "sigma / granularity is not exactly representable", g)
    tv = 0.0
    if table is not None:
        if table.variance != s2:
            raise InvalidParameterError("table", f"is for sigma={table.sigma}, not sigma/granularity={sig_z}")
        tv = _float_up(Fraction(table.tv_distance) * v.size)
        if tv >= 1:
            raise InvalidParameterError("table", "n·tv_distance >= 1: the table is too coarse for this many entries")
    dz = granular_l2_sensitivity(delta, g, m)
    k = round_to_grid(v, g)
    event = DiscreteGaussianEvent(sigma=sig_z, sensitivity=dz, sampler_tv=tv)
    if table is not None:
        z = table.sample(v.size, src)
    else:
        z = sample_dgauss(src, s2, v.size)
    return _shape(_grid_output(k, z.reshape(v.shape), g), scalar), event


# ---------------------------------------------------------------------------------------------------
# integer mechanisms
# ---------------------------------------------------------------------------------------------------
def discrete_laplace_mechanism(
    values: npt.ArrayLike, sensitivity: int, scale: float | Fraction, source: RandomStream
) -> tuple[int | npt.NDArray[np.int64], DiscreteLaplaceEvent]:
    """Discrete Laplace mechanism on integer values; returns (noisy int64, DiscreteLaplaceEvent).

    ``sensitivity``: integer L1 sensitivity Δ; noise P[z] ∝ exp(-|z|/scale) per entry (CKS Algorithm 2,
    exact). Guarantee: (Δ/scale)-DP (pure). A non-float ``scale`` (Fraction) is recorded in the event
    rounded down, so the event's ε is never below the truth.
    """
    v, scalar = _int_values(values)
    dz = check_positive_int("sensitivity", sensitivity)
    b = laplace_parameter(scale)
    src = check_source(source)
    event = DiscreteLaplaceEvent(scale=_float_down(b), sensitivity=dz)
    z = sample_dlap(src, b.numerator, b.denominator, v.size).reshape(v.shape)
    return _shape(v + z, scalar), event


def discrete_gaussian_mechanism(
    values: npt.ArrayLike,
    sensitivity: int,
    sigma: float | Fraction,
    source: RandomStream,
    *,
    table: DiscreteGaussianTable | None = None,
) -> tuple[int | npt.NDArray[np.int64], DiscreteGaussianEvent]:
    """Discrete Gaussian mechanism on integer values; returns (noisy int64, DiscreteGaussianEvent).

    ``sensitivity``: integer upper bound on the L2 sensitivity Δ. Noise N_ℤ(0, σ²) per entry: exact
    (CKS Algorithm 3) by default, or drawn from ``table`` (a ``DiscreteGaussianTable`` for the same σ),
    in which case the event's sampler_tv = n·table.tv_distance for n entries.
    Guarantee (CKS 2020, Thm 4; Thm 14 for vectors): (Δ²/(2σ²))-zCDP, i.e. α·Δ²/(2σ²)-RDP; plus the sampler TV.
    """
    v, scalar = _int_values(values)
    dz = check_positive_int("sensitivity", sensitivity)
    s2 = gaussian_variance(sigma)
    src = check_source(source)
    if table is not None and not isinstance(table, DiscreteGaussianTable):
        raise InvalidParameterError("table", "must be a DiscreteGaussianTable", type(table).__name__)
    sig_event = _float_down(as_fraction("sigma", sigma))  # event σ never above the true σ
    tv = 0.0
    if table is not None:
        if table.variance != s2:
            raise InvalidParameterError(
                "table", f"is for sigma={table.sigma}, not sigma={float(as_fraction('sigma', sigma))}"
            )
        tv = _float_up(Fraction(table.tv_distance) * v.size)
        if tv >= 1:
            raise InvalidParameterError("table", "n·tv_distance >= 1: the table is too coarse for this many entries")
    event = DiscreteGaussianEvent(sigma=sig_event, sensitivity=dz, sampler_tv=tv)
    z = (table.sample(v.size, src) if table is not None else sample_dgauss(src, s2, v.size)).reshape(v.shape)
    return _shape(v + z, scalar), event


__all__ = [
    "laplace_mechanism",
    "gaussian_mechanism",
    "discrete_laplace_mechanism",
    "discrete_gaussian_mechanism",
    "granular_l1_sensitivity",
    "granular_l2_sensitivity",
]
