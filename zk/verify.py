"""Groth16 verifier: e(A, B) = e(alpha, beta) * e(vk_x, gamma) * e(C, delta).

Pairings: ``zk.pairing.multi_miller`` (one shared Miller loop on plain integers, equal to py-ecc's ``miller_loop``
value, tested) and ``final_exp`` (equal to py-ecc's ``final_exponentiate``, tested); py-ecc is the oracle.

Four Miller loops and one final exponentiation per proof, or three once ``prepare(vk)`` has cached e(alpha, beta).
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
        if k == 1:
            wq = FQ12([0, 1] + [0] * 10) ** _Q
            tab = [FQ12.one()]
            for _ in range(11):
                tab.append(tab[-1] * wq)
            tab = [[int(c) for c in t.coeffs] for t in tab]
        else:  # (w^i)^(q^k) = ((w^i)^(q^(k-1)))^q
            prev = [FQ12.one()] + [FQ12([0] * i + [1] + [0] * (11 - i)) for i in range(1, 12)]
            for _ in range(k):
                prev = [_frob(t, 1) for t in prev]
            tab = [[int(c) for c in t.coeffs] for t in prev]
        _FROB[k] = tab
    coeffs = [int(c) for c in f.coeffs]
    out = [0] * 12
    for ci, t in zip(coeffs, tab):
        if ci:
            for j in range(12):
                out[j] += ci * t[j]
    return FQ12([x % _Q for x in out])


_HARD_DIGITS: list[int] = []
_h = _HARD
while _h:
    _HARD_DIGITS.append(_h % _Q)
    _h //= _Q
del _h


def final_exp(f):
    """f^((q^12 - 1) / r) = ((f^(q^6 - 1))^(q^2 + 1))^((q^4 - q^2 + 1) / r): the easy part by Frobenius maps; the
    hard part written in base q, h = sum h_i q^i, as one joint (Straus) exponentiation of the Frobenius images
    f^(q^i) by the 254-bit digits h_i. Equals py-ecc's final_exponentiate (tested)."""
    f1 = _frob(f, 6) * f.inv()
    f2 = _frob(f1, 2) * f1
    bases = [f2] + [_frob(f2, i) for i in range(1, len(_HARD_DIGITS))]
    table = [FQ12.one()]
    for b in bases:
        table += [t * b for t in table]
    nb = max(d.bit_length() for d in _HARD_DIGITS)
    acc = FQ12.one()
    for bit in range(nb - 1, -1, -1):
        acc = acc * acc
        mask = 0
        for i, d in enumerate(_HARD_DIGITS):
            if d >> bit & 1:
                mask |= 1 << i
        if mask:
            acc = acc * table[mask]
    return acc


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
    from dprag.zk.pairing import multi_miller

    pairs = [(proof.b, C.g1_neg(proof.a)), (vk.gamma2, vk_x), (vk.delta2, proof.c)]
    if vk._alphabeta is None:  # one proof: a fourth Miller loop, still one final exponentiation
        return final_exp(multi_miller(pairs + [(vk.beta2, vk.alpha1)])) == FQ12.one()
    return final_exp(multi_miller(pairs)) * vk._alphabeta == FQ12.one()


def prepare(vk: VerifyingKey) -> VerifyingKey:
    """Cache e(alpha, beta) in ``vk`` (worth it when verifying several proofs under one key)."""
    if vk._alphabeta is None:
        from dprag.zk.pairing import multi_miller

        vk._alphabeta = final_exp(multi_miller([(vk.beta2, vk.alpha1)]))
    return vk
