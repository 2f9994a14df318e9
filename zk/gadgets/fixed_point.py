"""Signed fixed-point arithmetic: values are integers in [-2^(n-1), 2^(n-1)) (field elements, negatives as r - |x|)
with ``frac`` fractional bits by convention. Rescaling is floor division by 2^frac, as Python's ``>>``."""

from __future__ import annotations

from dprag.errors import InvalidParameterError
from dprag.zk.field import signed
from dprag.zk.gadgets.bits import signed_range_check, to_bits
from dprag.zk.gadgets.compare import less_than
from dprag.zk.r1cs import LC, ConstraintSystem


def rescale(cs: ConstraintSystem, x: LC, frac: int, out_bits: int) -> LC:
    """floor(x / 2^frac) for a signed x; proves x = q * 2^frac + rem with 0 <= rem < 2^frac and q a signed
    ``out_bits``-bit integer (frac + out_bits + 2 constraints)."""
    if frac == 0:
        signed_range_check(cs, x, out_bits, "rescale")
        return x
    q, rem = cs.alloc_many(2, lambda v: (signed(v) >> frac, signed(v) - ((signed(v) >> frac) << frac)), x)
    to_bits(cs, rem, frac, "rescale remainder")
    signed_range_check(cs, q, out_bits, "rescale quotient")
    cs.enforce_equal(q * (1 << frac) + rem, x, "rescale")
    return q


def fx_mul(cs: ConstraintSystem, a: LC, b: LC, frac: int, out_bits: int) -> LC:
    """floor(a * b / 2^frac) (a fixed-point product)."""
    return rescale(cs, cs.mul(a, b, "fx_mul"), frac, out_bits)


def clip(cs: ConstraintSystem, x: LC, lo: int, hi: int, n: int) -> LC:
    """min(max(x, lo), hi) for a signed n-bit x that the caller has range-checked; lo <= hi must be n-bit too."""
    if not -(1 << (n - 1)) <= lo <= hi < (1 << (n - 1)):
        raise InvalidParameterError("clip", f"need -2^{n - 1} <= lo <= hi < 2^{n - 1}", (lo, hi))
    off = 1 << (n - 1)
    u = x + off
    below = less_than(cs, u, LC.const(lo + off), n)
    above = less_than(cs, LC.const(hi + off), u, n)
    # y = x + below * (lo - x) + above * (hi - x)   (below and above are never both 1)
    return x + cs.mul(below, LC.const(lo) - x, "clip lo") + cs.mul(above, LC.const(hi) - x, "clip hi")


def clip_int(x: int, lo: int, hi: int) -> int:
    return min(max(x, lo), hi)
