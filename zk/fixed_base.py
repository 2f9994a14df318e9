"""Many scalar multiples of one fixed base point (setup's workhorse): a windowed table of the base, then every
multiple is a sum of table entries, added in lockstep with batched affine additions (one inversion per step)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, cast, overload

from dprag.zk import curve as C
from dprag.zk.field import R

_W = 8


def _table(base: C.AnyPoint, g2: bool) -> list[list[C.AnyPoint]]:
    jadd, jdouble, to_jac, from_jac = cast(
        "tuple[C.JacAdd, C.JacDouble, C.ToJac, C.FromJac]",
        (C.g2_jadd, C.g2_jdouble, C.g2_to_jac, C.g2_from_jac)
        if g2
        else (C.g1_jadd, C.g1_jdouble, C.g1_to_jac, C.g1_from_jac),
    )
    rows: list[list[C.AnyPoint]] = []
    b = to_jac(base)
    for _ in range((254 + _W - 1) // _W):
        row: list[C.AnyPoint] = [None]
        acc = b
        for _d in range(1, 1 << _W):
            row.append(from_jac(acc))
            acc = jadd(acc, b)
        rows.append(row)
        for _ in range(_W):
            b = jdouble(b)
    return rows


@overload
def fixed_base_muls(base: C.G1Point, scalars: Sequence[int], g2: Literal[False] = False) -> list[C.G1Point]: ...
@overload
def fixed_base_muls(base: C.G2Point, scalars: Sequence[int], g2: Literal[True]) -> list[C.G2Point]: ...
def fixed_base_muls(base: C.AnyPoint, scalars: Sequence[int], g2: bool = False) -> list[C.G1Point] | list[C.G2Point]:
    """[k * base for k in scalars] (affine; None for k = 0 mod r)."""
    add_pairs = cast(C.AddPairs, C._g2_add_pairs if g2 else C._g1_add_pairs)
    with C.no_gc():
        table = _table(base, g2)
        ks = [k % R for k in scalars]
        acc: list[C.AnyPoint] = [None] * len(ks)
        mask = (1 << _W) - 1
        for j, row in enumerate(table):
            shift = j * _W
            acc = add_pairs(acc, [row[(k >> shift) & mask] for k in ks])
    return cast("list[C.G1Point] | list[C.G2Point]", acc)  # points of the group g2 names
