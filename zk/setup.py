"""Groth16 development setup.

DEVELOPMENT ONLY: this function samples the toxic waste (tau, alpha, beta, gamma, delta) itself, so whoever runs it
can forge proofs for any statement under the resulting keys. A proof under a key made by the party being audited
attests nothing against that party; an auditor must use a key from its own setup or from a multi-party ceremony
(import its ``.zkey`` with ``dprag.zk.formats.read_zkey``). See spec/zk.md.

The key layout is snarkjs's (see ``keys.py``), so our prover runs on snarkjs-made keys and snarkjs verifies proofs
made under ours.
"""

from __future__ import annotations

import secrets

from dprag.zk import curve as C
from dprag.zk.field import R, inv
from dprag.zk.fixed_base import fixed_base_muls
from dprag.zk.keys import ProvingKey
from dprag.zk.qap import ab_rows, domain_size, lagrange_at, odd_lagrange_at
from dprag.zk.r1cs import R1CS


def _nonzero() -> int:
    return 1 + secrets.randbelow(R - 1)


def setup(r1cs: R1CS, *, toxic: dict[str, int] | None = None) -> ProvingKey:
    """DEVELOPMENT-ONLY Groth16 setup for ``r1cs`` (the caller knows the toxic waste; never use its keys to attest
    against the party that ran it). ``toxic`` (tests only) fixes tau / alpha / beta / gamma / delta."""
    t = dict(toxic or {})
    tau = t.get("tau") or _nonzero()
    alpha = t.get("alpha") or _nonzero()
    beta = t.get("beta") or _nonzero()
    gamma = t.get("gamma") or _nonzero()
    delta = t.get("delta") or _nonzero()
    n = domain_size(r1cs.n_constraints, r1cs.n_public)
    a_rows, b_rows = ab_rows(r1cs, n)
    lag = lagrange_at(tau, n)
    nv = r1cs.n_vars
    av = [0] * nv
    bv = [0] * nv
    cv = [0] * nv
    for row, lt in zip(a_rows, lag, strict=False):
        for s, k in row:
            av[s] = (av[s] + k * lt) % R
    for row, lt in zip(b_rows, lag, strict=False):
        for s, k in row:
            bv[s] = (bv[s] + k * lt) % R
    for ci, (_, _, c) in enumerate(r1cs.constraints):
        lt = lag[ci]
        for s, k in c.items():
            cv[s] = (cv[s] + k * lt) % R
    npub = r1cs.n_public
    gi = inv(gamma)
    di = inv(delta)
    lc = [(beta * a + alpha * b + c) % R for a, b, c in zip(av, bv, cv, strict=False)]
    ic_sc = [x * gi % R for x in lc[: npub + 1]]
    c_sc = [x * di % R for x in lc[npub + 1 :]]
    z = odd_lagrange_at(tau, n)
    h_sc = [x * di % R for x in z]
    g1_scalars = av + bv + ic_sc + c_sc + h_sc + [alpha, beta, delta]
    pts = fixed_base_muls(C.G1_GEN, g1_scalars)
    o = 0
    a_pts = pts[o : o + nv]
    o += nv  # noqa: E702
    b1_pts = pts[o : o + nv]
    o += nv  # noqa: E702
    ic = pts[o : o + npub + 1]
    o += npub + 1  # noqa: E702
    c_pts = pts[o : o + nv - npub - 1]
    o += nv - npub - 1  # noqa: E702
    h_pts = pts[o : o + n]
    o += n  # noqa: E702
    alpha1, beta1, delta1 = pts[o : o + 3]
    g2 = fixed_base_muls(C.G2_GEN, bv + [beta, gamma, delta], g2=True)
    b2_pts = g2[:nv]
    beta2, gamma2, delta2 = g2[nv:]
    return ProvingKey(
        n_vars=nv,
        n_public=npub,
        domain_size=n,
        alpha1=alpha1,
        beta1=beta1,
        beta2=beta2,
        gamma2=gamma2,
        delta1=delta1,
        delta2=delta2,
        ic=ic,
        a_rows=a_rows,
        b_rows=b_rows,
        a_points=a_pts,
        b1_points=b1_pts,
        b2_points=b2_pts,
        c_points=c_pts,
        h_points=h_pts,
        development=True,
    )
