"""Groth16 verifier: e(A, B) = e(alpha, beta) * e(vk_x, gamma) * e(C, delta).

Pairings on plain integers: ``zk.pairing.multi_miller`` (one shared Miller loop) and ``final_exp``, both in
py-ecc's F_q12 basis and equal to py-ecc's ``miller_loop`` / ``final_exponentiate`` (tested: py-ecc is the oracle).
Four Miller loops and one final exponentiation per proof, or three once ``prepare(vk)`` has cached e(alpha, beta).
Points are checked on the curve and (G2) in the subgroup, public inputs must be field elements (< r), as snarkjs
does; a malformed proof or input is a ``False`` (or a typed error from the readers), never a crash.
"""

from __future__ import annotations

from collections.abc import Sequence

from dprag.errors import InvalidParameterError
from dprag.zk import curve as C
from dprag.zk import fq12 as F
from dprag.zk.field import R
from dprag.zk.keys import Proof, VerifyingKey

_Q = C.Q
_HARD = (_Q**4 - _Q**2 + 1) // R
_HARD_DIGITS: list[int] = []
_h = _HARD
while _h:
    _HARD_DIGITS.append(_h % _Q)
    _h //= _Q
del _h


def final_exp(f: list[int]) -> list[int]:
    """f^((q^12 - 1) / r) = ((f^(q^6 - 1))^(q^2 + 1))^((q^4 - q^2 + 1) / r): the easy part by Frobenius maps; the
    hard part written in base q, h = sum h_i q^i, as one joint (Straus) exponentiation of the Frobenius images
    f^(q^i) by the 254-bit digits h_i."""
    f1 = F.mul(F.frob(f, 6), F.inv(f))
    f2 = F.mul(F.frob(f1, 2), f1)
    bases = [f2] + [F.frob(f2, i) for i in range(1, len(_HARD_DIGITS))]
    table = [F.ONE]
    for b in bases:
        table += [F.mul(t, b) for t in table]
    nb = max(d.bit_length() for d in _HARD_DIGITS)
    acc = F.ONE
    for bit in range(nb - 1, -1, -1):
        acc = F.mul(acc, acc)
        mask = 0
        for i, d in enumerate(_HARD_DIGITS):
            if d >> bit & 1:
                mask |= 1 << i
        if mask:
            acc = F.mul(acc, table[mask])
    return acc


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
    return (
        proof.a is not None
        and proof.b is not None
        and proof.c is not None
        and C.g1_on_curve(proof.a)
        and C.g1_on_curve(proof.c)
        and C.g2_on_curve(proof.b)
        and C.g2_in_subgroup(proof.b)
    )


def verify(vk: VerifyingKey, proof: Proof, public: Sequence[int]) -> bool:
    """True iff ``proof`` verifies for ``public`` under ``vk``. Public inputs outside [0, r) raise
    InvalidParameterError (a caller error, like snarkjs's "Public inputs are not valid")."""
    from dprag.zk.pairing import multi_miller

    pub = check_public(public, vk.n_public)
    if not proof_well_formed(proof):
        return False
    vk_x = C.g1_msm(vk.ic[1:], pub)
    vk_x = C.g1_add(vk_x, vk.ic[0])
    pairs = [(proof.b, C.g1_neg(proof.a)), (vk.gamma2, vk_x), (vk.delta2, proof.c)]
    if vk._alphabeta is None:  # one proof: a fourth Miller loop, still one final exponentiation
        return final_exp(multi_miller(pairs + [(vk.beta2, vk.alpha1)])) == F.ONE
    return F.mul(final_exp(multi_miller(pairs)), vk._alphabeta) == F.ONE


def prepare(vk: VerifyingKey) -> VerifyingKey:
    """Cache e(alpha, beta) in ``vk`` (worth it when verifying several proofs under one key)."""
    if vk._alphabeta is None:
        from dprag.zk.pairing import multi_miller

        vk._alphabeta = final_exp(multi_miller([(vk.beta2, vk.alpha1)]))
    return vk


#: the bits of each proof's random weight in ``verify_batch``: a batch holding an invalid proof passes with
#: probability at most 2^-BATCH_WEIGHT_BITS (plus the negligible chance a weight is 0 mod r, excluded)
BATCH_WEIGHT_BITS = 128


def verify_batch(
    vk: VerifyingKey, items: Sequence[tuple[Proof, Sequence[int]]], weights: Sequence[int] | None = None
) -> bool:
    """True iff every (proof, public) of ``items`` verifies under ``vk``, checked at once: with weights r_i drawn
    here from the OS CSPRNG (never the caller's, unless a test passes ``weights``), the product over i of
    (e(−A_i, B_i) · e(vk_x_i, γ) · e(C_i, δ) · e(α, β))^{r_i} must be 1 — one Miller loop shared by the m pairs
    (B_i, −r_i·A_i) and the two (γ, Σ r_i·vk_x_i), (δ, Σ r_i·C_i), one final exponentiation, and e(α, β) raised
    to Σ r_i. An invalid proof makes its factor a non-identity element of the order-r group G_T, so the product is
    1 for at most one value of its r_i given the others: a batch with an invalid proof passes with probability
    ≤ 2^-128. Malformed points or public inputs are False / InvalidParameterError as in ``verify``. False does not
    say which proof failed: verify them one by one to name it."""
    import secrets

    from dprag.zk.pairing import multi_miller

    if not items:
        return True
    if weights is None:
        weights = [secrets.randbits(BATCH_WEIGHT_BITS) | 1 for _ in items]  # odd: never 0 mod r
    if len(weights) != len(items) or any(not 0 < w < R for w in weights):
        raise InvalidParameterError("weights", "one weight in (0, r) per proof", len(weights))
    pairs: list[tuple[C.G2Point, C.G1Point]] = []
    sum_x: C.G1Point = None
    sum_c: C.G1Point = None
    for (proof, public), w in zip(items, weights, strict=True):
        pub = check_public(public, vk.n_public)
        if not proof_well_formed(proof):
            return False
        vk_x = C.g1_add(C.g1_msm(vk.ic[1:], pub), vk.ic[0])
        pairs.append((proof.b, C.g1_neg(C.g1_mul(proof.a, w))))
        sum_x = C.g1_add(sum_x, C.g1_mul(vk_x, w))
        sum_c = C.g1_add(sum_c, C.g1_mul(proof.c, w))
    pairs += [(vk.gamma2, sum_x), (vk.delta2, sum_c)]
    alphabeta = prepare(vk)._alphabeta
    assert alphabeta is not None  # prepare() set it
    total = sum(weights) % R
    return F.mul(final_exp(multi_miller(pairs)), F.pow_(alphabeta, total)) == F.ONE
