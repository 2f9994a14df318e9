"""Directed rounding for certified privacy parameters (spec/accounting/filters.md §5).

A certified ε or δ must never be below the exact value of the formula it reports. ``math.fsum`` and ``a + b``
round to *nearest*, so a sum of floats can land one ulp below the exact sum; the products ``ε·count`` likewise.
These helpers compute the sum exactly (``fractions.Fraction`` holds every finite float exactly) and round the
result **up** to a float. Cost: O(n) rational additions, used only on short lists (terms of a composition).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction
from typing import SupportsFloat

__all__ = ["up", "sum_up", "sum_products_up", "outward"]


def up(exact: Fraction) -> float:
    """The smallest float >= ``exact`` (finite); overflow gives +inf, which is still an upper bound."""
    try:
        f = float(exact)
    except OverflowError:
        return math.inf
    return math.nextafter(f, math.inf) if math.isfinite(f) and Fraction(f) < exact else f


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


def outward(value: float, magnitude: float) -> float:
    """``value`` computed by a few float operations on terms of size <= ``magnitude``, moved up by a bound on
    their rounding (2^-48·(magnitude + 1)) and one more ulp: a certified upper bound on the exact result."""
    if not math.isfinite(value):
        return value
    return math.nextafter(value + 2.0**-48 * (abs(magnitude) + 1.0), math.inf)
