"""Groth16 keys in snarkjs's layout (what a ``.zkey`` holds), and proofs.

The proving key follows snarkjs's zkey: A / B1 / B2 points per witness variable, C points per private variable
(divided by delta), H points ``L^{2n}_{2i+1}(tau) / delta`` (odd Lagrange points of the doubled domain), IC points per
public signal (divided by gamma), and the A / B matrix coefficients including the extra rows ``A[n_constraints +
s][s] = 1`` for every public signal s (0 = one) that snarkjs adds to bind the public inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dprag.zk.curve import G1Point, G2Point


@dataclass
class VerifyingKey:
    alpha1: G1Point
    beta2: G2Point
    gamma2: G2Point
    delta2: G2Point
    ic: list[G1Point]  # n_public + 1 G1 points
    _alphabeta: list[int] | None = field(default=None, repr=False, compare=False)  # cached e(alpha, beta) (zk.fq12)

    @property
    def n_public(self) -> int:
        return len(self.ic) - 1


@dataclass
class ProvingKey:
    n_vars: int
    n_public: int
    domain_size: int
    alpha1: G1Point
    beta1: G1Point
    beta2: G2Point
    gamma2: G2Point
    delta1: G1Point
    delta2: G2Point
    ic: list[G1Point]
    a_rows: list[list[tuple[int, int]]]  # per QAP row (domain point): list of (signal, coeff) -- A matrix incl.
    b_rows: list[list[tuple[int, int]]]  # public-input rows
    a_points: list[G1Point]
    b1_points: list[G1Point]
    b2_points: list[G2Point]
    c_points: list[G1Point]  # n_vars - n_public - 1
    h_points: list[G1Point]  # domain_size
    development: bool = False  # True when made by dprag's development setup (toxic waste was known)

    def verifying_key(self) -> VerifyingKey:
        return VerifyingKey(
            alpha1=self.alpha1, beta2=self.beta2, gamma2=self.gamma2, delta2=self.delta2, ic=list(self.ic)
        )


@dataclass(frozen=True)
class Proof:
    a: G1Point
    b: G2Point
    c: G1Point
