"""Groth16 verifier: e(A, B) = e(alpha, beta) * e(vk_x, gamma) * e(C, delta), pairings by py-ecc.

Three Miller loops and one final exponentiation per proof; e(alpha, beta) is computed once per key and cached.
Points are checked on the curve and (G2) in the subgroup, public inputs must be field elements (< r), as snarkjs
does; a malformed proof or input is a ``False`` (or a typed error from the readers), never a crash.
"""

from __future__ import annotations

from collections.abc import Sequence

from py_ecc.optimized_bn128 import FQ, FQ2, FQ12
from py_ecc.optimized_bn128.optimized_pairing import miller_loop, twist, cast_point_to_fq12

from dprag.accounting.errors import InvalidParameterError
from dprag.zk import curve as C
from dprag.zk.field import R
from dprag.zk.keys import Proof, VerifyingKey


_Q = C.Q
_HARD = (_Q ** 4 - _Q ** 2 + 1) // R
_FROB: dict[int, list] = {}


def _frob(f, k: int):
    """f^(q^k) in py-ecc's FQ12 basis (w^12 = 18 w^6 - 82): the coefficients are in F_q, so only the powers of w
    move: f^(q^k) = sum c_i (w^(q^k))^i, with the 12 images precomputed once."""
    tab = _FROB.get(k)
    if tab is None:
        w = FQ12([0, 1] + [0] * 10)
        wq = w ** (_Q ** k)
        tab = [FQ12.one()]
        for _ in range(11):
            tab.append(tab[-1] * wq)
        tab = [[int(c) for c in t.coeffs] for t in tab]
        _FROB[k] = tab
    coeffs = [int(c) for c in f.coeffs]
    out = [0] * 12
    for ci, t in zip(coeffs, tab):
        if ci:
            for j in range(12):
                out[j] += ci * t[j]
    return FQ12([x % _Q for x in out])


def final_exp(f):
    """f^((q^12 - 1) / r) = ((f^(q^6 - 1))^(q^2 + 1))^((q^4 - q^2 + 1) / r): the easy part by Frobenius maps,
    the hard part (a 762-bit exponent) by square-and-multiply. Equals py-ecc's final_exponentiate (tested)."""
    f1 = _frob(f, 6) * f.inv()
    f2 = _frob(f1, 2) * f1
    return f2 ** _HARD


def _p1(p):
    return (FQ(p[0]), FQ(p[1]), FQ(1))


def _p2(p):
    return (FQ2([p[0][0], p[0][1]]), FQ2([p[1][0], p[1][1]]), FQ2([1, 0]))


def _ml(q2, p1):
    return miller_loop(twist(_p2(q2)), cast_point_to_fq12(_p1(p1)), final_exponentiate=False)


def check_public(public: Sequence[int], n_public: int) -> list[int]:
    """Public signals as field elements; raises InvalidParameterError naming the index for one >= r or < 0."""
    if len(public) != n_public:
        raise InvalidParameterError("public", f"the key has {n_public} public signals", len(public))
    out = []
    for i, v in enumerate(public):
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidParameterError(f"public[{i}]", "must be an integer", v)
        if not 0 <= v < R:
            raise InvalidParameterError(f"public[{i}]", "must be a field element (0 <= value < r)", v)
        out.append(v)
    return out


def proof_well_formed(proof: Proof) -> bool:
    return (proof.a is not None and proof.b is not None and proof.c is not None
            and C.g1_on_curve(proof.a) and C.g1_on_curve(proof.c)
            and C.g2_on_curve(proof.b) and C.g2_in_subgroup(proof.b))


def verify(vk: VerifyingKey, proof: Proof, public: Sequence[int]) -> bool:
    """True iff ``proof`` verifies for ``public`` under ``vk``. Public inputs outside [0, r) raise
    InvalidParameterError (a caller error, like snarkjs's "Public inputs are not valid")."""
    pub = check_public(public, vk.n_public)
    if not proof_well_formed(proof):
        return False
    vk_x = C.g1_msm(vk.ic[1:], pub)
    vk_x = C.g1_add(vk_x, vk.ic[0])
    if vk._alphabeta is None:
        vk._alphabeta = final_exp(_ml(vk.beta2, vk.alpha1))
    f = _ml(proof.b, C.g1_neg(proof.a))
    if vk_x is not None:
        f = f * _ml(vk.gamma2, vk_x)
    if proof.c is not None:
        f = f * _ml(vk.delta2, proof.c)
    return final_exp(f) * vk._alphabeta == FQ12.one()
