"""Optimal-ate multi-Miller loop on plain integers, for the verifier.

The loop (NAF of 6x + 2, then the two Frobenius lines) and the F_q12 basis are py-ecc's ``optimized_bn128``
(w^12 = 18 w^6 - 82, u = w^6 - 9, the twist (x, y) -> (x w^2, y w^3)), so the value equals py-ecc's
``miller_loop(twist(Q), P)`` exactly (tested) and py-ecc stays the oracle. The speed comes from: the running point R
kept affine in F_q2 (lines exact, no denominators), sparse line x dense products on int lists, one shared
accumulator f for all pairs (one squaring per step), and Frobenius maps instead of exponentiations by q.
"""

from __future__ import annotations

from py_ecc.optimized_bn128 import FQ12
from py_ecc.optimized_bn128.optimized_pairing import pseudo_binary_encoding

from dprag.zk import curve as C

_Q = C.Q
_NAF = pseudo_binary_encoding[63::-1]


def _mul12(a: list[int], b: list[int]) -> list[int]:
    prod = [0] * 23
    for i, ai in enumerate(a):
        if ai:
            for j, bj in enumerate(b):
                if bj:
                    prod[i + j] += ai * bj
    return _reduce(prod)


def _mul_sparse(a: list[int], line: list[tuple[int, int]]) -> list[int]:
    prod = [0] * 23
    for i, ai in enumerate(a):
        if ai:
            for j, lj in line:
                prod[i + j] += ai * lj
    return _reduce(prod)


def _reduce(prod: list[int]) -> list[int]:
    for k in range(22, 11, -1):
        c = prod[k]
        if c:
            prod[k - 6] += 18 * c
            prod[k - 12] -= 82 * c
    return [x % _Q for x in prod[:12]]


def _line(lam, xr, yr, xp: int, yp: int) -> list[tuple[int, int]]:
    """-yp + (lam xp) w + (yr - lam xr) w^3, each F_q2 value a + b u placed as (a - 9 b) w^k + b w^(k+6)."""
    l1 = (lam[0] * xp % _Q, lam[1] * xp % _Q)
    t = C.f2_mul(lam, xr)
    l3 = ((yr[0] - t[0]) % _Q, (yr[1] - t[1]) % _Q)
    return [(0, -yp % _Q), (1, (l1[0] - 9 * l1[1]) % _Q), (7, l1[1]), (3, (l3[0] - 9 * l3[1]) % _Q), (9, l3[1])]


def _to12(c, k: int) -> FQ12:
    v = [0] * 12
    v[k] = (c[0] - 9 * c[1]) % _Q
    v[k + 6] = c[1] % _Q
    return FQ12(v)


def multi_miller(pairs) -> FQ12:
    """prod_i f_{Q_i}(P_i) for pairs (Q_i in G2, P_i in G1), affine int points; pairs with infinity are skipped."""
    from dprag.zk.verify import _frob  # F_q12 Frobenius in py-ecc's basis

    pairs = [(q, p) for q, p in pairs if q is not None and p is not None]
    f = [1] + [0] * 11
    rs = [q for q, _ in pairs]
    negs = [C.g2_neg(q) for q, _ in pairs]
    for v in _NAF:
        f = _mul12(f, f)
        for i, (q, (xp, yp)) in enumerate(pairs):
            xr, yr = rs[i]
            s = C.f2_sqr(xr)
            lam = C.f2_mul(((3 * s[0]) % _Q, (3 * s[1]) % _Q), C.f2_inv(((2 * yr[0]) % _Q, (2 * yr[1]) % _Q)))
            f = _mul_sparse(f, _line(lam, xr, yr, xp, yp))
            l2 = C.f2_sqr(lam)
            x3 = ((l2[0] - 2 * xr[0]) % _Q, (l2[1] - 2 * xr[1]) % _Q)
            t = C.f2_mul(lam, ((xr[0] - x3[0]) % _Q, (xr[1] - x3[1]) % _Q))
            rs[i] = (x3, ((t[0] - yr[0]) % _Q, (t[1] - yr[1]) % _Q))
            if v:
                xr, yr = rs[i]
                xq, yq = q if v == 1 else negs[i]
                lam = C.f2_mul(((yq[0] - yr[0]) % _Q, (yq[1] - yr[1]) % _Q),
                               C.f2_inv(((xq[0] - xr[0]) % _Q, (xq[1] - xr[1]) % _Q)))
                f = _mul_sparse(f, _line(lam, xr, yr, xp, yp))
                l2 = C.f2_sqr(lam)
                x3 = ((l2[0] - xr[0] - xq[0]) % _Q, (l2[1] - xr[1] - xq[1]) % _Q)
                t = C.f2_mul(lam, ((xr[0] - x3[0]) % _Q, (xr[1] - x3[1]) % _Q))
                rs[i] = (x3, ((t[0] - yr[0]) % _Q, (t[1] - yr[1]) % _Q))
    out = FQ12(f)
    # the two Frobenius lines, in F_q12 (twisted coordinates)
    for i, (q, (xp, yp)) in enumerate(pairs):
        X, Y = _to12(q[0], 2), _to12(q[1], 3)
        q1 = (_frob(X, 1), _frob(Y, 1))
        nq2 = (_frob(X, 2), -_frob(Y, 2))
        R = (_to12(rs[i][0], 2), _to12(rs[i][1], 3))
        xp12, yp12 = FQ12([xp] + [0] * 11), FQ12([yp] + [0] * 11)
        for T in (q1, nq2):
            m = (T[1] - R[1]) / (T[0] - R[0])
            out = out * (m * (xp12 - R[0]) - (yp12 - R[1]))
            x3 = m * m - R[0] - T[0]
            R = (x3, m * (R[0] - x3) - R[1])
    return out
