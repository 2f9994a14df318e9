"""Bit decomposition and range checks."""

from __future__ import annotations

from dprag.errors import InvalidParameterError
from dprag.zk.r1cs import LC, ConstraintSystem, lc_sum


def to_bits(cs: ConstraintSystem, x: LC, n: int, label: str = "bits") -> list[LC]:
    """n boolean variables b_i with sum b_i 2^i = x: proves 0 <= x < 2^n (n + 1 constraints). n <= 252."""
    if not 1 <= n <= 252:
        raise InvalidParameterError("n", "bit width must be in [1, 252] (below the field size)", n)
    bits = cs.alloc_many(n, lambda v: [(v >> i) & 1 for i in range(n)], x)
    for b in bits:
        cs.assert_bool(b, label)
    cs.enforce_equal(lc_sum(b * (1 << i) for i, b in enumerate(bits)), x, label + " sum")
    return bits


def range_check(cs: ConstraintSystem, x: LC, n: int, label: str = "range") -> list[LC]:
    """0 <= x < 2^n; returns the bits."""
    return to_bits(cs, x, n, label)


def signed_range_check(cs: ConstraintSystem, x: LC, n: int, label: str = "signed range") -> list[LC]:
    """-2^(n-1) <= x < 2^(n-1) (x as a field element, negatives as r - |x|); returns the bits of x + 2^(n-1)."""
    return to_bits(cs, x + (1 << (n - 1)), n, label)


def from_bits(bits: list[LC]) -> LC:
    return lc_sum(b * (1 << i) for i, b in enumerate(bits))
