"""Directed rounding for certified privacy parameters (spec/accounting/filters.md §5).

A certified ε or δ must never be below the exact value of the formula it reports. ``math.fsum`` and ``a + b``
round to *nearest*, so a sum of floats can land one ulp below the exact sum; the products ``ε·count`` likewise.
These helpers compute the sum exactly (``fractions.Fraction`` holds every finite float exactly) and round the
result **up** to a float. Cost: O(n) rational additions, used only on short lists (terms of a composition).

Formulas with transcendental functions (the RDP → (ε, δ) conversions, amplification by subsampling) are
evaluated in floats and then moved outward by a proven bound on their error (``bound_up``, ``exp_up``). The
bound assumes the elementary functions (``math``/numpy ``log``, ``log1p``, ``exp``, ``expm1``, ``sqrt``) are
accurate to ``LIBM_REL`` = 2^-49 relative (8 ulps; glibc documents <= 2 ulps for these on x86-64 and aarch64,
numpy's SIMD kernels <= 4 ulps) and that + − × / are IEEE round-to-nearest (relative error <= u = 2^-53).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction
from typing import SupportsFloat

import numpy as np
import numpy.typing as npt

__all__ = [
    "LIBM_REL",
    "MARGIN",
    "up",
    "down",
    "sum_up",
    "sum_products_up",
    "mul_up",
    "sub_down",
    "outward",
    "bound_up",
    "bound_up_array",
    "exp_up",
]

#: Assumed relative accuracy of the elementary functions (see the module docstring).
LIBM_REL = 2.0**-49
#: Margin factor of ``bound_up``: 2^-48 = 32u, for results whose error is proven <= 20u·magnitude.
MARGIN = 2.0**-48


def up(exact: Fraction) -> float:
    """The smallest float >= ``exact`` (finite); overflow gives +inf, which is still an upper bound."""
    try:
        f = float(exact)
    except OverflowError:
        return math.inf
    return math.nextafter(f, math.inf) if math.isfinite(f) and Fraction(f) < exact else f


def down(exact: Fraction) -> float:
    """The largest float <= ``exact`` (finite); overflow gives -inf."""
    return -up(-exact)


def _exact(v: SupportsFloat) -> Fraction:
    f = float(v)
    if not math.isfinite(f):
        raise ValueError(f"not a finite number: {v!r}")
    return Fraction(f)


def sum_up(*values: float) -> float:
    """Σ values computed exactly and rounded up; +inf in the input gives +inf."""
    if any(float(v) == math.inf for v in values):
        return math.inf
    return up(sum((_exact(v) for v in values), Fraction(0)))


def sum_products_up(values: Iterable[float], counts: Iterable[int]) -> float:
    """Σ values[i]·counts[i] computed exactly (counts are exact integers) and rounded up."""
    total = Fraction(0)
    for v, c in zip(values, counts, strict=True):
        if float(v) == math.inf and int(c) > 0:
            return math.inf
        total += _exact(v) * int(c)
    return up(total)


def mul_up(value: float, count: int) -> float:
    """``count``·``value`` computed exactly and rounded up (``count`` a non-negative integer; +inf·0 = 0)."""
    return sum_products_up([value], [count])


def sub_down(value: float, *subtract: float) -> float:
    """``value`` − Σ ``subtract`` computed exactly and rounded *down* (what is left of a budget after certified
    amounts are taken from it); -inf if a subtrahend is +inf."""
    if any(float(v) == math.inf for v in subtract):
        return -math.inf
    return down(_exact(value) - sum((_exact(v) for v in subtract), Fraction(0)))


def bound_up(value: float, magnitude: float) -> float:
    """Certified upper bound on an exact result whose float evaluation ``value`` is proven to err by at most
    20u·``magnitude`` (u = 2^-53; the caller documents the proof): ``value`` + 2^-48·``magnitude``, then one
    more float up (the addition rounds to nearest, within half an ulp). Non-finite values are returned as is."""
    if not math.isfinite(value):
        return value
    return math.nextafter(value + MARGIN * abs(magnitude), math.inf)


def bound_up_array(values: npt.ArrayLike, magnitude: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Elementwise :func:`bound_up`; non-finite values (±inf, NaN) are kept."""
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.nextafter(v + MARGIN * np.abs(np.asarray(magnitude, dtype=np.float64)), np.inf)
    return np.where(np.isfinite(v), out, v)


def exp_up(x: float) -> float:
    """Certified upper bound on e^x: exp(x)·(1 + 2^-48) (covers ``LIBM_REL``), one more float up; +inf on
    overflow; results below 2^-1000 (where exp's error is absolute, not relative) become 2^-999."""
    if x == -math.inf:
        return 0.0
    try:
        r = math.exp(x)
    except OverflowError:
        return math.inf
    if r < 2.0**-1000:
        return 2.0**-999
    return math.nextafter(r * (1.0 + MARGIN), math.inf)


def outward(value: float, magnitude: float) -> float:
    """``value`` computed by a few float operations on terms of size <= ``magnitude``, moved up by a bound on
    their rounding (2^-48·(magnitude + 1)) and one more ulp: a certified upper bound on the exact result."""
    if not math.isfinite(value):
        return value
    return math.nextafter(value + 2.0**-48 * (abs(magnitude) + 1.0), math.inf)
