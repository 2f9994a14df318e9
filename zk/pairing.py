"""Optimal-ate multi-Miller loop on plain integers, for the verifier.

The loop (NAF of 6x + 2, then the two Frobenius lines) and the F_q12 basis are py-ecc's ``optimized_bn128``
(w^12 = 18 w^6 - 82, u = w^6 - 9, the twist (x, y) -> (x w^2, y w^3)), so the value equals py-ecc's
``miller_loop(twist(Q), P)`` exactly (tested: py-ecc is the oracle, not a runtime dependency of verification).
The speed comes from: the running point R kept affine in F_q2 (lines exact, no denominators), sparse line x dense
products on int lists (``fq12``), one shared accumulator f for all pairs (one squaring per step), and Frobenius maps
instead of exponentiations by q.
"""

from __future__ import annotations

from collections.abc import Iterable

from dprag.zk import curve as C
from dprag.zk import fq12 as F

_Q = C.Q
# The ate loop count 6x + 2 = 29793968203157093288 as signed binary digits, least significant first (the same
# expansion py-ecc uses, so the Miller value is identical; checked below). The top digit is the initial R = Q.
_ATE = 29793968203157093288
_DIGITS = [{"0": 0, "+": 1, "-": -1}[c] for c in "000+0+0-00+-00+00++0-00+0-0000+++00-00+00000-00++00-000++0-00+0++"]
if sum(d << i for i, d in enumerate(_DIGITS)) != _ATE:
    raise ImportError("ate loop digits are inconsistent")
_LOOP = _DIGITS[63::-1]


def _line(lam: C.Fq2, xr: C.Fq2, yr: C.Fq2, xp: int, yp: int) -> list[tuple[int, int]]:
    """-yp + (lam xp) w + (yr - lam xr) w^3, each F_q2 value a + b u placed as (a - 9 b) w^k + b w^(k+6)."""
    l1 = (lam[0] * xp % _Q, lam[1] * xp % _Q)
    t = C.f2_mul(lam, xr)
    l3 = ((yr[0] - t[0]) % _Q, (yr[1] - t[1]) % _Q)
    return [(0, -yp % _Q), (1, (l1[0] - 9 * l1[1]) % _Q), (7, l1[1]), (3, (l3[0] - 9 * l3[1]) % _Q), (9, l3[1])]


def multi_miller(pairs: Iterable[tuple[C.G2Point, C.G1Point]]) -> list[int]:
    """prod_i f_{Q_i}(P_i) for pairs (Q_i in G2, P_i in G1) of affine int points (F_q12 as 12 ints); pairs with a
    point at infinity contribute 1."""
    live = [(q, p) for q, p in pairs if q is not None and p is not None]
    f = list(F.ONE)
    rs = [q for q, _ in live]
    negs = [C.g2_neg(q) for q, _ in live]
    for v in _LOOP:
        f = F.mul(f, f)
        for i, (q, (xp, yp)) in enumerate(live):
            xr, yr = rs[i]
            s = C.f2_sqr(xr)
            lam = C.f2_mul(((3 * s[0]) % _Q, (3 * s[1]) % _Q), C.f2_inv(((2 * yr[0]) % _Q, (2 * yr[1]) % _Q)))
            f = F.mul_sparse(f, _line(lam, xr, yr, xp, yp))
            l2 = C.f2_sqr(lam)
            x3 = ((l2[0] - 2 * xr[0]) % _Q, (l2[1] - 2 * xr[1]) % _Q)
            t = C.f2_mul(lam, ((xr[0] - x3[0]) % _Q, (xr[1] - x3[1]) % _Q))
            rs[i] = (x3, ((t[0] - yr[0]) % _Q, (t[1] - yr[1]) % _Q))
            if v:
                xr, yr = rs[i]
                xq, yq = q if v == 1 else negs[i]
                lam = C.f2_mul(
                    ((yq[0] - yr[0]) % _Q, (yq[1] - yr[1]) % _Q), C.f2_inv(((xq[0] - xr[0]) % _Q, (xq[1] - xr[1]) % _Q))
                )
                f = F.mul_sparse(f, _line(lam, xr, yr, xp, yp))
                l2 = C.f2_sqr(lam)
                x3 = ((l2[0] - xr[0] - xq[0]) % _Q, (l2[1] - xr[1] - xq[1]) % _Q)
                t = C.f2_mul(lam, ((xr[0] - x3[0]) % _Q, (xr[1] - x3[1]) % _Q))
                rs[i] = (x3, ((t[0] - yr[0]) % _Q, (t[1] - yr[1]) % _Q))
    # the two Frobenius lines, in F_q12 (twisted coordinates)
    for i, (q, (xp, yp)) in enumerate(live):
        X, Y = F.from_fq2(q[0], 2), F.from_fq2(q[1], 3)
        q1 = (F.frob(X, 1), F.frob(Y, 1))
        nq2 = (F.frob(X, 2), F.neg(F.frob(Y, 2)))
        R = (F.from_fq2(rs[i][0], 2), F.from_fq2(rs[i][1], 3))
        xp12, yp12 = [xp] + [0] * 11, [yp] + [0] * 11
        for T in (q1, nq2):
            m = F.mul(F.sub(T[1], R[1]), F.inv(F.sub(T[0], R[0])))
            f = F.mul(f, F.sub(F.mul(m, F.sub(xp12, R[0])), F.sub(yp12, R[1])))
            x3t = F.sub(F.sub(F.mul(m, m), R[0]), T[0])
            R = (x3t, F.sub(F.mul(m, F.sub(R[0], x3t)), R[1]))
    return f
