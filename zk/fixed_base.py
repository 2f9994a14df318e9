"""Many scalar multiples of one fixed base point (setup's workhorse): a windowed table of the base, then every
multiple is a sum of table entries, added in lockstep with batched affine additions (one inversion per step)."""

from __future__ import annotations

from collections.abc import Sequence

from dprag.zk import curve as C
from dprag.zk.field import R

_W = 8


def _table(base, g2: bool) -> list[list]:
    jadd, jdouble, to_jac, from_jac = ((C.g2_jadd, C.g2_jdouble, C.g2_to_jac, C.g2_from_jac) if g2 else
                                       (C.g1_jadd, C.g1_jdouble, C.g1_to_jac, C.g1_from_jac))
    rows = []
    b = to_jac(base)
    for _ in range((254 + _W - 1) // _W):
        row = [None]
        acc = b
        for _d in range(1, 1 << _W):
            row.append(from_jac(acc))
            acc = jadd(acc, b)
        rows.append(row)
        for _ in range(_W):
            b = jdouble(b)
    return rows


def fixed_base_muls(base, scalars: Sequence[int], g2: bool = False) -> list:
    """[k * base for k in scalars] (affine; None for k = 0 mod r)."""
    add_pairs = C._g2_add_pairs if g2 else C._g1_add_pairs
    with C.no_gc():
        table = _table(base, g2)
        ks = [k % R for k in scalars]
        acc = [None] * len(ks)
        mask = (1 << _W) - 1
        for j, row in enumerate(table):
            shift = j * _W
            acc = add_pairs(acc, [row[(k >> shift) & mask] for k in ks])
    return acc
