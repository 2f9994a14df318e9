"""Groth16 keys in snarkjs's layout (what a ``.zkey`` holds), and proofs.

The proving key follows snarkjs's zkey: A / B1 / B2 points per witness variable, C points per private variable
(divided by delta), H points ``L^{2n}_{2i+1}(tau) / delta`` (odd Lagrange points of the doubled domain), IC points per
public signal (divided by gamma), and the A / B matrix coefficients including the extra rows ``A[n_constraints +
s][s] = 1`` for every public signal s (0 = one) that snarkjs adds to bind the public inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class VerifyingKey:
    alpha1: tuple
    beta2: tuple
    gamma2: tuple
    delta2: tuple
    ic: list  # n_public + 1 G1 points
    _alphabeta: list | None = field(default=None, repr=False, compare=False)  # cached e(alpha, beta) (zk.fq12)

    @property
    def n_public(self) -> int:
        return len(self.ic) - 1


@dataclass
class ProvingKey:
    n_vars: int
    n_public: int
    domain_size: int
    alpha1: tuple
    beta1: tuple
    beta2: tuple
    gamma2: tuple
    delta1: tuple
    delta2: tuple
    ic: list
    a_rows: list  # per QAP row (domain point): list of (signal, coeff) -- A matrix incl. public-input rows
    b_rows: list
    a_points: list
    b1_points: list
    b2_points: list
    c_points: list  # n_vars - n_public - 1
    h_points: list  # domain_size
    development: bool = False  # True when made by dprag's development setup (toxic waste was known)

    def verifying_key(self) -> VerifyingKey:
        return VerifyingKey(alpha1=self.alpha1, beta2=self.beta2, gamma2=self.gamma2, delta2=self.delta2,
                            ic=list(self.ic))


@dataclass(frozen=True)
class Proof:
    a: tuple  # G1
    b: tuple  # G2
    c: tuple  # G1
