"""Poseidon over the BN254 scalar field with circomlib's parameters (so hashes equal circomlibjs's ``poseidon``).

Width t = inputs + 1 (1..16 inputs), S-box x^5, 8 full rounds, N_ROUNDS_P[t - 2] partial rounds, state
``[0, inputs...]``, output ``state[0]``; constants in ``poseidon_constants.py`` (generated from circomlibjs 0.1.7).
``poseidon_chain`` extends it to any length (see its docstring); it is dprag's convention, not circomlib's.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from dprag.errors import InvalidParameterError
from dprag.zk.field import R
from dprag.zk.r1cs import LC, ConstraintSystem

N_ROUNDS_F = 8
N_ROUNDS_P = [56, 57, 56, 60, 60, 63, 64, 63, 60, 66, 60, 65, 70, 60, 64, 68]
MAX_INPUTS = len(N_ROUNDS_P)


@cache
def params(t: int) -> tuple[list[int], list[list[int]]]:
    from dprag.zk.gadgets import poseidon_constants as pc

    c = [int(x, 16) for x in pc.C[t - 2].split()]
    m = [[int(x, 16) for x in row.split()] for row in pc.M[t - 2].split(";")]
    return c, m


def _check(inputs: Sequence[object]) -> int:
    if not 1 <= len(inputs) <= MAX_INPUTS:
        raise InvalidParameterError("inputs", f"Poseidon takes 1..{MAX_INPUTS} inputs", len(inputs))
    return len(inputs) + 1


def poseidon_hash(inputs: Sequence[int]) -> int:
    """circomlib Poseidon of 1..16 field elements (each must be < r)."""
    t = _check(inputs)
    for i, v in enumerate(inputs):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < R:
            raise InvalidParameterError(f"inputs[{i}]", "must be a field element (0 <= value < r)", v)
    c, m = params(t)
    n_p = N_ROUNDS_P[t - 2]
    state = [0, *inputs]
    p = R
    for r in range(N_ROUNDS_F + n_p):
        state = [(s + c[r * t + i]) % p for i, s in enumerate(state)]
        if r < N_ROUNDS_F // 2 or r >= N_ROUNDS_F // 2 + n_p:
            state = [pow(s, 5, p) for s in state]
        else:
            state[0] = pow(state[0], 5, p)
        state = [sum(mij * s for mij, s in zip(row, state, strict=False)) % p for row in m]
    return state[0]


def poseidon_chain(elements: Sequence[int]) -> int:
    """Hash of any non-empty sequence: Poseidon of it if it has <= 16 elements, else h = Poseidon(first 16)
    followed by h = Poseidon(h, next <= 15) until consumed (a Merkle-Damgard chain; the length is fixed by the
    circuit, so no padding rule is needed)."""
    if not elements:
        raise InvalidParameterError("elements", "must be non-empty", 0)
    h = poseidon_hash(list(elements[:MAX_INPUTS]))
    rest = list(elements[MAX_INPUTS:])
    while rest:
        h = poseidon_hash([h, *rest[: MAX_INPUTS - 1]])
        rest = rest[MAX_INPUTS - 1 :]
    return h


def _pow5(cs: ConstraintSystem, x: LC) -> LC:
    x2 = cs.mul(x, x, "poseidon sbox")
    x4 = cs.mul(x2, x2, "poseidon sbox")
    return cs.mul(x4, x, "poseidon sbox")


def _compact(cs: ConstraintSystem, x: LC) -> LC:
    v = cs.alloc(lambda a: a, x)
    cs.enforce_equal(v, x, "poseidon state")
    return v


def poseidon(cs: ConstraintSystem, inputs: Sequence[LC]) -> LC:
    """In-circuit Poseidon (3 constraints per S-box; the linear layers are free). State linear combinations are
    re-materialised when they grow past 2t terms, which keeps the R1CS sparse at ~t extra constraints per few
    partial rounds."""
    t = _check(inputs)
    c, m = params(t)
    n_p = N_ROUNDS_P[t - 2]
    state = [LC(), *[x if isinstance(x, LC) else LC.const(x) for x in inputs]]
    for r in range(N_ROUNDS_F + n_p):
        state = [s + c[r * t + i] for i, s in enumerate(state)]
        if r < N_ROUNDS_F // 2 or r >= N_ROUNDS_F // 2 + n_p:
            state = [_pow5(cs, s) for s in state]
        else:
            state[0] = _pow5(cs, state[0])
        new = []
        for row in m:
            terms: dict[int, int] = {}
            for mij, s in zip(row, state, strict=False):
                for k, v in s.terms.items():
                    terms[k] = (terms.get(k, 0) + mij * v) % R
            new.append(LC({k: v for k, v in terms.items() if v}))
        state = new
        if max(len(s.terms) for s in state[1:]) > 2 * t + 2:
            state = [state[0]] + [_compact(cs, s) for s in state[1:]]
    return state[0]


def poseidon_chain_gadget(cs: ConstraintSystem, elements: Sequence[LC]) -> LC:
    if not elements:
        raise InvalidParameterError("elements", "must be non-empty", 0)
    h = poseidon(cs, list(elements[:MAX_INPUTS]))
    rest = list(elements[MAX_INPUTS:])
    while rest:
        h = poseidon(cs, [h, *rest[: MAX_INPUTS - 1]])
        rest = rest[MAX_INPUTS - 1 :]
    return h
