"""Groth16 prover (snarkjs-compatible: the same key layout, domain and quotient evaluation)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import cast

from dprag.errors import InvalidParameterError
from dprag.zk import curve as C
from dprag.zk.field import R
from dprag.zk.keys import Proof, ProvingKey
from dprag.zk.qap import quotient_evals


def _nonzero() -> int:
    return 1 + secrets.randbelow(R - 1)


def prove(pk: ProvingKey, witness: Sequence[int], *, workers: int = 1) -> Proof:
    """A proof for ``witness`` (full, w[0] = 1, public signals at 1..n_public). r and s come from the OS CSPRNG
    and are never zero. The witness is not checked here (a witness that violates the R1CS yields a proof that fails
    verification); call ``R1CS.check`` first to get the violated constraint. ``workers`` > 1 splits the
    multi-scalar multiplications across processes."""
    if len(witness) != pk.n_vars:
        raise InvalidParameterError("witness", f"needs {pk.n_vars} values", len(witness))
    w = list(witness)
    if w[0] != 1 or any(not 0 <= x < R for x in w):
        raise InvalidParameterError("witness", "w[0] must be 1 and every value a field element", w[0])
    with C.no_gc():
        h = quotient_evals((pk.a_rows, pk.b_rows), w, pk.domain_size)
        priv = w[pk.n_public + 1 :]
        # the C and H terms both go into pi_C: one MSM over the concatenated bases (one bucket pass instead of two)
        pa, pb2, pb1, pch = C.msm_many(
            [
                ("g1", pk.a_points, w),
                ("g2", pk.b2_points, w),
                ("g1", pk.b1_points, w),
                ("g1", pk.c_points + pk.h_points, priv + h),
            ],
            workers=workers,
        )
    r = _nonzero()
    s = _nonzero()
    # msm_many returns each MSM's sum in the group of its task
    a = C.g1_add(C.g1_add(cast(C.G1Point, pa), pk.alpha1), C.g1_mul(pk.delta1, r))
    b = C.g2_add(C.g2_add(cast(C.G2Point, pb2), pk.beta2), C.g2_mul(pk.delta2, s))
    if not C.g2_in_subgroup(b):
        # only possible with a malformed key (B2 / beta2 / delta2 points outside the subgroup): such a pi_B could
        # carry residues of the witness in its cofactor component, so it is never released
        raise InvalidParameterError("pk.b2_points", "a G2 point of the key is outside the order-r subgroup", None)
    b1 = C.g1_add(C.g1_add(cast(C.G1Point, pb1), pk.beta1), C.g1_mul(pk.delta1, s))
    c = C.g1_add(cast(C.G1Point, pch), C.g1_mul(a, s))
    c = C.g1_add(c, C.g1_mul(b1, r))
    c = C.g1_add(c, C.g1_mul(pk.delta1, (-r * s) % R))
    return Proof(a=a, b=b, c=c)
