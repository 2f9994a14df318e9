"""Comparisons (circomlib-style): is_zero, is_equal, less_than on n-bit values, select."""

from __future__ import annotations

from dprag.errors import InvalidParameterError
from dprag.zk.field import R
from dprag.zk.gadgets.bits import to_bits
from dprag.zk.r1cs import LC, ONE, ConstraintSystem


def is_zero(cs: ConstraintSystem, x: LC) -> LC:
    """1 if x == 0 else 0 (2 constraints)."""
    inv = cs.alloc(lambda v: pow(v, -1, R) if v else 0, x)
    out = cs.alloc(lambda v: 1 if v == 0 else 0, x)
    # out = 1 - x * inv ; x * out = 0
    cs.enforce(x, inv, ONE - out, "is_zero")
    cs.enforce(x, out, 0, "is_zero")
    return out


def is_equal(cs: ConstraintSystem, a: LC, b: LC) -> LC:
    return is_zero(cs, a - b)


def less_than(cs: ConstraintSystem, a: LC, b: LC, n: int) -> LC:
    """1 if a < b else 0, for a, b known to be in [0, 2^n) (n + 2 constraints). Unsound if the inputs are not
    range-checked by the caller."""
    if not 1 <= n <= 251:
        raise InvalidParameterError("n", "bit width must be in [1, 251]", n)
    bits = to_bits(cs, a - b + (1 << n), n + 1, "less_than")
    return ONE - bits[n]


def select(cs: ConstraintSystem, cond: LC, a: LC, b: LC) -> LC:
    """cond ? a : b for boolean cond (1 constraint)."""
    return b + cs.mul(cond, a - b, "select")
