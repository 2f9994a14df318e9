"""R1CS -> QAP: the domain snarkjs uses, Lagrange evaluations at tau, and the prover's quotient evaluations.

Domain: the smallest power of two n > n_constraints + n_public (snarkjs: ``2^(floor(log2(m + n_pub)) + 1)``), whose
rows are the constraints followed by one row per public signal (0..n_public) with ``A[row][s] = 1``.
The quotient H = (A*B - C) / Z is never formed: like snarkjs, the prover evaluates A*B - C on the odd points
``w_2n^(2i+1)`` of the doubled domain (where Z = -2 is constant, folded into the H points), since those values and
the zeros on the n-th roots determine the degree < 2n polynomial A*B - C.
"""

from __future__ import annotations

from collections.abc import Sequence

from dprag.errors import InvalidParameterError
from dprag.zk.field import TWO_ADICITY, R, batch_inv, root_of_unity
from dprag.zk.ntt import coset_scale, intt, ntt
from dprag.zk.r1cs import R1CS


def domain_size(n_constraints: int, n_public: int) -> int:
    m = n_constraints + n_public
    power = max(m, 1).bit_length()  # floor(log2 m) + 1
    if power > TWO_ADICITY - 1:
        raise InvalidParameterError("n_constraints", f"circuit too large: domain 2^{power}", n_constraints)
    return 1 << power


def ab_rows(r1cs: R1CS, n: int) -> tuple[list[list[tuple[int, int]]], list[list[tuple[int, int]]]]:
    """The A and B matrices as per-row lists of (signal, coeff), with snarkjs's public-input rows appended."""
    a_rows: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    b_rows: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for c, (a, b, _) in enumerate(r1cs.constraints):
        a_rows[c] = sorted(a.items())
        b_rows[c] = sorted(b.items())
    m = r1cs.n_constraints
    for s in range(r1cs.n_public + 1):
        a_rows[m + s] = [(s, 1)]
    return a_rows, b_rows


def lagrange_at(tau: int, n: int) -> list[int]:
    """L_i(tau) for the n-th roots of unity w^i (tau must not be a root)."""
    w = root_of_unity(n.bit_length() - 1)
    zt = (pow(tau, n, R) - 1) % R
    if zt == 0:
        raise InvalidParameterError("tau", "must not be an n-th root of unity", "<secret>")
    pts = [1] * n
    for i in range(1, n):
        pts[i] = pts[i - 1] * w % R
    invs = batch_inv([(tau - x) % R for x in pts])
    k = zt * pow(n, -1, R) % R
    return [k * x % R * iv % R for x, iv in zip(pts, invs, strict=False)]


def odd_lagrange_at(tau: int, n: int) -> list[int]:
    """L^{2n}_{2i+1}(tau), i < n: the Lagrange polynomials of the odd points of the 2n-domain."""
    full = lagrange_at(tau, 2 * n)
    return full[1::2]


def quotient_evals(
    pk_rows: tuple[list[list[tuple[int, int]]], list[list[tuple[int, int]]]], witness: Sequence[int], n: int
) -> list[int]:
    """(A*B - C)(w_2n^(2i+1)) for i < n, with C taken as A*B on the domain (snarkjs's joinABC)."""
    a_rows, b_rows = pk_rows
    w = witness
    a = [sum(k * w[s] for s, k in row) % R if row else 0 for row in a_rows]
    b = [sum(k * w[s] for s, k in row) % R if row else 0 for row in b_rows]
    c = [x * y % R for x, y in zip(a, b, strict=False)]
    shift = root_of_unity(n.bit_length())  # w_2n
    out = []
    ea, eb, ec = (ntt(coset_scale(intt(v), shift)) for v in (a, b, c))
    for x, y, z in zip(ea, eb, ec, strict=False):
        out.append((x * y - z) % R)
    return out
