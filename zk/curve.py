"""BN254 G1 / G2 arithmetic on plain integers, and multi-scalar multiplication.

Points are affine tuples: G1 ``(x, y)`` with ints mod q, G2 ``((x0, x1), (y0, y1))`` over F_q2 = F_q[u]/(u^2 + 1);
``None`` is the point at infinity. Jacobian coordinates are used for single scalar multiplications and window sums;
MSM uses Pippenger's bucket method with *batched affine additions*: in every round all pending bucket additions
share one modular inversion (Montgomery's trick), so an addition costs ~6 multiplications. Scalars 0 are skipped,
scalars 1 are summed directly, and signed window digits halve the number of buckets.

py-ecc's ``optimized_bn128`` is the reference these functions (and ``pairing`` / ``verify``) are tested against
(tests/zk/test_zk_curve.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, TypeAlias, cast, overload

from dprag.zk.field import R

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

Q = 21888242871839275222246405745257275088696311157297823662689037894645226208583
"""Base field modulus of BN254."""

G1_GEN = (1, 2)
G2_GEN = (
    (
        10857046999023057135944570762232829481370756359578518086990519993285655852781,
        11559732032986387107991004021392285783925812861821192530917403151452391805634,
    ),
    (
        8495653923123431417604973247489272438418190587263600148770280649306958101930,
        4082367875863433681332203403145435568316851327593401208105741076214120093531,
    ),
)
B1 = 3
B2 = (
    19485874751759354771024239261021720505790618469301721065564631296452457478373,
    266929791119991161246907387137283842545076965332900288569378510910307636690,
)  # 3 / (9 + u)

Fq2: TypeAlias = tuple[int, int]  # a + b u as (a, b)
G1Affine: TypeAlias = tuple[int, int]
G2Affine: TypeAlias = tuple[Fq2, Fq2]
G1Point: TypeAlias = G1Affine | None  # None: the point at infinity
G2Point: TypeAlias = G2Affine | None
G1Jac: TypeAlias = tuple[int, int, int]
G2Jac: TypeAlias = tuple[Fq2, Fq2, Fq2]
# Either group, for the MSM code shared by G1 and G2: a ``g2`` flag names the group, and the points of one call
# all belong to it (the group operations picked by the flag are cast to these signatures).
AnyAffine: TypeAlias = G1Affine | G2Affine
AnyPoint: TypeAlias = AnyAffine | None
AnyJac: TypeAlias = G1Jac | G2Jac
PointNeg: TypeAlias = Callable[[AnyAffine], AnyAffine]
PointAdd: TypeAlias = Callable[[AnyPoint, AnyPoint], AnyPoint]
AddPairs: TypeAlias = Callable[[Sequence[AnyPoint], Sequence[AnyPoint]], list[AnyPoint]]
ReduceBuckets: TypeAlias = Callable[[list[list[AnyAffine]]], list[AnyPoint]]
JacAdd: TypeAlias = Callable[[AnyJac, AnyJac], AnyJac]
JacDouble: TypeAlias = Callable[[AnyJac], AnyJac]
ToJac: TypeAlias = Callable[[AnyPoint], AnyJac]
FromJac: TypeAlias = Callable[[AnyJac], AnyPoint]


class no_gc:
    """Context manager: the cyclic garbage collector paused while the prover / setup allocates millions of point
    tuples (it would otherwise rescan every live tuple of the key at each full collection: ~13% of a proof's CPU
    time here). Nothing they build holds a reference cycle; memory is freed by reference counting as usual. The
    collector is re-enabled on exit only if it was enabled on entry."""

    def __enter__(self) -> no_gc:
        import gc

        self._was = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        import gc

        if self._was:
            gc.enable()
        return False


# ---------------------------------------------------------------- F_q2
def f2_add(a: Fq2, b: Fq2) -> Fq2:
    return ((a[0] + b[0]) % Q, (a[1] + b[1]) % Q)


def f2_sub(a: Fq2, b: Fq2) -> Fq2:
    return ((a[0] - b[0]) % Q, (a[1] - b[1]) % Q)


def f2_mul(a: Fq2, b: Fq2) -> Fq2:
    a0, a1 = a
    b0, b1 = b
    t0 = a0 * b0
    t1 = a1 * b1
    return ((t0 - t1) % Q, ((a0 + a1) * (b0 + b1) - t0 - t1) % Q)


def f2_sqr(a: Fq2) -> Fq2:
    a0, a1 = a
    return ((a0 + a1) * (a0 - a1) % Q, 2 * a0 * a1 % Q)


def f2_inv(a: Fq2) -> Fq2:
    a0, a1 = a
    t = pow(a0 * a0 + a1 * a1, -1, Q)
    return (a0 * t % Q, -a1 * t % Q)


def f2_neg(a: Fq2) -> Fq2:
    return (-a[0] % Q, -a[1] % Q)


# ---------------------------------------------------------------- membership
def g1_on_curve(p: G1Point) -> bool:
    if p is None:
        return True
    x, y = p
    return 0 <= x < Q and 0 <= y < Q and (y * y - x * x * x - B1) % Q == 0


def g2_on_curve(p: G2Point) -> bool:
    if p is None:
        return True
    x, y = p
    if not all(0 <= c < Q for c in (*x, *y)):
        return False
    return f2_sub(f2_sqr(y), f2_add(f2_mul(f2_sqr(x), x), B2)) == (0, 0)


def g2_in_subgroup(p: G2Point) -> bool:
    """r * P == O (G2 has a large cofactor, so on-curve points need this check; G1's cofactor is 1)."""
    return p is None or g2_mul(p, R) is None


# ---------------------------------------------------------------- G1 Jacobian
G1_INF_J = (1, 1, 0)


def g1_to_jac(p: G1Point) -> G1Jac:
    return G1_INF_J if p is None else (p[0], p[1], 1)


def g1_from_jac(p: G1Jac) -> G1Point:
    X, Y, Z = p
    if Z % Q == 0:
        return None
    zi = pow(Z, -1, Q)
    zi2 = zi * zi % Q
    return (X * zi2 % Q, Y * zi2 * zi % Q)


def g1_jdouble(p: G1Jac) -> G1Jac:
    X, Y, Z = p
    if Z == 0 or Y == 0:
        return G1_INF_J
    A = X * X % Q
    B = Y * Y % Q
    C = B * B % Q
    D = 2 * ((X + B) * (X + B) - A - C) % Q
    E = 3 * A
    F = E * E % Q
    X3 = (F - 2 * D) % Q
    Y3 = (E * (D - X3) - 8 * C) % Q
    Z3 = 2 * Y * Z % Q
    return (X3, Y3, Z3)


def g1_jadd(p: G1Jac, q: G1Jac) -> G1Jac:
    X1, Y1, Z1 = p
    X2, Y2, Z2 = q
    if Z1 == 0:
        return q
    if Z2 == 0:
        return p
    Z1Z1 = Z1 * Z1 % Q
    Z2Z2 = Z2 * Z2 % Q
    U1 = X1 * Z2Z2 % Q
    U2 = X2 * Z1Z1 % Q
    S1 = Y1 * Z2 * Z2Z2 % Q
    S2 = Y2 * Z1 * Z1Z1 % Q
    if U1 == U2:
        if S1 == S2:
            return g1_jdouble(p)
        return G1_INF_J
    H = (U2 - U1) % Q
    I = 4 * H * H % Q  # noqa: E741 - the name of the published addition formula (EFD add-2007-bl)
    J = H * I % Q
    r = 2 * (S2 - S1) % Q
    V = U1 * I % Q
    X3 = (r * r - J - 2 * V) % Q
    Y3 = (r * (V - X3) - 2 * S1 * J) % Q
    Z3 = ((Z1 + Z2) * (Z1 + Z2) - Z1Z1 - Z2Z2) * H % Q
    return (X3, Y3, Z3)


def g1_add(p: G1Point, q: G1Point) -> G1Point:
    return g1_from_jac(g1_jadd(g1_to_jac(p), g1_to_jac(q)))


@overload
def g1_neg(p: None) -> None: ...
@overload
def g1_neg(p: G1Affine) -> G1Affine: ...
def g1_neg(p: G1Point) -> G1Point:
    return None if p is None else (p[0], -p[1] % Q)


def g1_mul(p: G1Point, k: int) -> G1Point:
    k %= R
    acc = G1_INF_J
    base = g1_to_jac(p)
    for bit in bin(k)[2:] if k else "":
        acc = g1_jdouble(acc)
        if bit == "1":
            acc = g1_jadd(acc, base)
    return g1_from_jac(acc)


# ---------------------------------------------------------------- G2 Jacobian
G2_INF_J = ((1, 0), (1, 0), (0, 0))


def g2_to_jac(p: G2Point) -> G2Jac:
    return G2_INF_J if p is None else (p[0], p[1], (1, 0))


def g2_from_jac(p: G2Jac) -> G2Point:
    X, Y, Z = p
    if Z == (0, 0):
        return None
    zi = f2_inv(Z)
    zi2 = f2_sqr(zi)
    return (f2_mul(X, zi2), f2_mul(Y, f2_mul(zi2, zi)))


def g2_jdouble(p: G2Jac) -> G2Jac:
    X, Y, Z = p
    if Z == (0, 0) or Y == (0, 0):
        return G2_INF_J
    A = f2_sqr(X)
    B = f2_sqr(Y)
    C = f2_sqr(B)
    t = f2_add(X, B)
    D = f2_sub(f2_sub(f2_sqr(t), A), C)
    D = f2_add(D, D)
    E = f2_add(f2_add(A, A), A)
    F = f2_sqr(E)
    X3 = f2_sub(F, f2_add(D, D))
    C8 = ((8 * C[0]) % Q, (8 * C[1]) % Q)
    Y3 = f2_sub(f2_mul(E, f2_sub(D, X3)), C8)
    YZ = f2_mul(Y, Z)
    Z3 = f2_add(YZ, YZ)
    return (X3, Y3, Z3)


def g2_jadd(p: G2Jac, q: G2Jac) -> G2Jac:
    X1, Y1, Z1 = p
    X2, Y2, Z2 = q
    if Z1 == (0, 0):
        return q
    if Z2 == (0, 0):
        return p
    Z1Z1 = f2_sqr(Z1)
    Z2Z2 = f2_sqr(Z2)
    U1 = f2_mul(X1, Z2Z2)
    U2 = f2_mul(X2, Z1Z1)
    S1 = f2_mul(Y1, f2_mul(Z2, Z2Z2))
    S2 = f2_mul(Y2, f2_mul(Z1, Z1Z1))
    if U1 == U2:
        if S1 == S2:
            return g2_jdouble(p)
        return G2_INF_J
    H = f2_sub(U2, U1)
    H2 = f2_add(H, H)
    I = f2_sqr(H2)  # noqa: E741 - the name of the published addition formula (EFD add-2007-bl)
    J = f2_mul(H, I)
    rr = f2_sub(S2, S1)
    rr = f2_add(rr, rr)
    V = f2_mul(U1, I)
    X3 = f2_sub(f2_sub(f2_sqr(rr), J), f2_add(V, V))
    S1J = f2_mul(S1, J)
    Y3 = f2_sub(f2_mul(rr, f2_sub(V, X3)), f2_add(S1J, S1J))
    Z3 = f2_mul(f2_sub(f2_sub(f2_sqr(f2_add(Z1, Z2)), Z1Z1), Z2Z2), H)
    return (X3, Y3, Z3)


def g2_add(p: G2Point, q: G2Point) -> G2Point:
    return g2_from_jac(g2_jadd(g2_to_jac(p), g2_to_jac(q)))


@overload
def g2_neg(p: None) -> None: ...
@overload
def g2_neg(p: G2Affine) -> G2Affine: ...
def g2_neg(p: G2Point) -> G2Point:
    return None if p is None else (p[0], f2_neg(p[1]))


def g2_mul(p: G2Point, k: int) -> G2Point:
    """k * P for any non-negative k (not reduced mod r, so the subgroup check can use k = r)."""
    acc = G2_INF_J
    base = g2_to_jac(p)
    for bit in bin(k)[2:] if k else "":
        acc = g2_jdouble(acc)
        if bit == "1":
            acc = g2_jadd(acc, base)
    return g2_from_jac(acc)


# ---------------------------------------------------------------- batched affine additions
def _g1_add_pairs(ps: Sequence[G1Point], qs: Sequence[G1Point]) -> list[G1Point]:
    """[p + q for p, q in zip(ps, qs)] in affine G1 with one shared inversion (None = infinity)."""
    q_ = Q
    out: list[G1Point] = [None] * len(ps)
    idx: list[int] = []
    dens: list[int] = []
    for i, (p, r) in enumerate(zip(ps, qs, strict=False)):
        if p is None:
            out[i] = r
        elif r is None:
            out[i] = p
        elif p[0] != r[0]:
            idx.append(i)
            dens.append(r[0] - p[0])
        else:
            out[i] = g1_add(p, r)  # doubling or P + (-P): rare, slow path
    if not idx:
        return out
    invs = _batch_inv_q(dens)
    for i, dinv in zip(idx, invs, strict=False):
        x1, y1 = cast("G1Affine", ps[i])  # idx holds the pairs of two finite points
        x2, y2 = cast("G1Affine", qs[i])
        lam = (y2 - y1) * dinv % q_
        x3 = (lam * lam - x1 - x2) % q_
        out[i] = (x3, (lam * (x1 - x3) - y1) % q_)
    return out


def _batch_inv_q(dens: list[int]) -> list[int]:
    q_ = Q
    m = len(dens)
    prefix = [0] * m
    acc = 1
    for i in range(m):
        prefix[i] = acc
        acc = acc * dens[i] % q_
    acc = pow(acc, -1, q_)
    out = [0] * m
    for i in range(m - 1, -1, -1):
        out[i] = acc * prefix[i] % q_
        acc = acc * dens[i] % q_
    return out


def _g1_reduce_buckets(buckets: list[list[G1Affine]]) -> list[G1Point]:
    """Sum every list of affine G1 points; all additions of a round share one inversion (Montgomery's trick).
    Returns one point (or None) per bucket. The lists are consumed."""
    q_ = Q
    active = [i for i, lst in enumerate(buckets) if len(lst) > 1]
    while active:
        pend: list[tuple[int, int, int, int, list[G1Affine]]] = []
        dens: list[int] = []
        nxt: list[int] = []
        pa = pend.append
        da = dens.append
        for bi in active:
            lst = buckets[bi]
            n = len(lst)
            keep = [lst[-1]] if n & 1 else []
            buckets[bi] = keep
            if n > 2:
                nxt.append(bi)
            it = iter(lst)
            for (x1, y1), (x2, y2) in zip(it, it, strict=False):
                if x1 != x2:
                    pa((x1, y1, x2, y2, keep))
                    da(x2 - x1)
                else:
                    s = g1_add((x1, y1), (x2, y2))  # doubling / inverse pair: rare
                    if s is not None:
                        keep.append(s)
        m = len(dens)
        if m:
            prefix = [1] * m
            acc = 1
            for i, d in enumerate(dens):
                prefix[i] = acc
                acc = acc * d % q_
            acc = pow(acc, -1, q_)
            for i in range(m - 1, -1, -1):
                x1, y1, x2, y2, keep = pend[i]
                dinv = acc * prefix[i] % q_
                acc = acc * dens[i] % q_
                lam = (y2 - y1) * dinv % q_
                x3 = (lam * lam - x1 - x2) % q_
                keep.append((x3, (lam * (x1 - x3) - y1) % q_))
        active = nxt
    return [lst[0] if lst else None for lst in buckets]


def _g2_add_pairs(ps: Sequence[G2Point], qs: Sequence[G2Point]) -> list[G2Point]:
    """[p + q for p, q in zip(ps, qs)] in affine G2 with one shared F_q inversion (of the norms of the x
    differences: 1 / (a + b u) = (a - b u) / (a^2 + b^2))."""
    q_ = Q
    out: list[G2Point] = [None] * len(ps)
    idx: list[int] = []
    norms: list[int] = []
    for i, (p, r) in enumerate(zip(ps, qs, strict=False)):
        if p is None:
            out[i] = r
        elif r is None:
            out[i] = p
        elif p[0] != r[0]:
            idx.append(i)
            d0 = r[0][0] - p[0][0]
            d1 = r[0][1] - p[0][1]
            norms.append((d0 * d0 + d1 * d1) % q_)
        else:
            out[i] = g2_add(p, r)
    if not idx:
        return out
    for i, ninv in zip(idx, _batch_inv_q(norms), strict=False):
        x1, y1 = cast("G2Affine", ps[i])  # idx holds the pairs of two finite points
        x2, y2 = cast("G2Affine", qs[i])
        d0 = x2[0] - x1[0]
        d1 = x2[1] - x1[1]
        out[i] = _g2_affine_finish(x1, y1, x2, y2, (d0 * ninv % q_, -d1 * ninv % q_))
    return out


def _batch_inv_q2(dens: list[Fq2]) -> list[Fq2]:
    m = len(dens)
    prefix: list[Fq2] = [(0, 0)] * m  # every entry is written before it is read
    acc = (1, 0)
    for i in range(m):
        prefix[i] = acc
        acc = f2_mul(acc, dens[i])
    acc = f2_inv(acc)
    out: list[Fq2] = [(0, 0)] * m
    for i in range(m - 1, -1, -1):
        out[i] = f2_mul(acc, prefix[i])
        acc = f2_mul(acc, dens[i])
    return out


def _g2_affine_finish(x1: Fq2, y1: Fq2, x2: Fq2, y2: Fq2, dinv: Fq2) -> G2Affine:
    q_ = Q
    n0 = y2[0] - y1[0]
    n1 = y2[1] - y1[1]
    d0, d1 = dinv
    t0 = n0 * d0
    t1 = n1 * d1
    l0 = (t0 - t1) % q_
    l1 = ((n0 + n1) * (d0 + d1) - t0 - t1) % q_
    x30 = ((l0 + l1) * (l0 - l1) - x1[0] - x2[0]) % q_
    x31 = (2 * l0 * l1 - x1[1] - x2[1]) % q_
    e0 = x1[0] - x30
    e1 = x1[1] - x31
    t0 = l0 * e0
    t1 = l1 * e1
    return ((x30, x31), ((t0 - t1 - y1[0]) % q_, ((l0 + l1) * (e0 + e1) - t0 - t1 - y1[1]) % q_))


def _g2_reduce_buckets(buckets: list[list[G2Affine]]) -> list[G2Point]:
    """As ``_g1_reduce_buckets`` over F_q2: 1 / (a + b u) = (a - b u) / (a^2 + b^2), so the shared inversion is of
    the F_q norms."""
    q_ = Q
    active = [i for i, lst in enumerate(buckets) if len(lst) > 1]
    while active:
        pend: list[tuple[G2Affine, G2Affine, int, int, list[G2Affine]]] = []
        norms: list[int] = []
        nxt: list[int] = []
        pa = pend.append
        na = norms.append
        for bi in active:
            lst = buckets[bi]
            n = len(lst)
            keep = [lst[-1]] if n & 1 else []
            buckets[bi] = keep
            if n > 2:
                nxt.append(bi)
            it = iter(lst)
            for p, r in zip(it, it, strict=False):
                x1 = p[0]
                x2 = r[0]
                if x1 != x2:
                    d0 = x2[0] - x1[0]
                    d1 = x2[1] - x1[1]
                    pa((p, r, d0, d1, keep))
                    na((d0 * d0 + d1 * d1) % q_)
                else:
                    s = g2_add(p, r)
                    if s is not None:
                        keep.append(s)
        m = len(norms)
        if m:
            prefix = [1] * m
            acc = 1
            for i, v in enumerate(norms):
                prefix[i] = acc
                acc = acc * v % q_
            acc = pow(acc, -1, q_)
            for i in range(m - 1, -1, -1):
                p, r, d0, d1, keep = pend[i]
                ninv = acc * prefix[i] % q_
                acc = acc * norms[i] % q_
                (x10, x11), (y10, y11) = p
                (x20, x21), (y20, y21) = r
                # lam = (y2 - y1) * conj(d) / |d|^2
                n0 = y20 - y10
                n1 = y21 - y11
                t0 = n0 * d0
                t1 = n1 * d1
                l0 = (t0 + t1) * ninv % q_
                l1 = ((n1 - n0) * (d0 + d1) + t0 - t1) * ninv % q_
                x30 = ((l0 + l1) * (l0 - l1) - x10 - x20) % q_
                x31 = (2 * l0 * l1 - x11 - x21) % q_
                e0 = x10 - x30
                e1 = x11 - x31
                t0 = l0 * e0
                t1 = l1 * e1
                keep.append(((x30, x31), ((t0 - t1 - y10) % q_, ((l0 + l1) * (e0 + e1) - t0 - t1 - y11) % q_)))
        active = nxt
    return [lst[0] if lst else None for lst in buckets]


def _window_bits(n: int) -> int:
    """Window width c minimising the batched-affine addition count of one MSM of n points: per window, n minus
    the expected number of non-empty buckets (a bucket's first point costs nothing) plus 2 per bucket for the
    running sums, times ceil(255 / c) windows (2^(c-1) buckets: signed digits)."""
    import math

    best: tuple[float, int] | None = None
    for c in range(2, 17):
        b = 1 << (c - 1)
        cost = -(-255 // c) * (n - b * (1 - math.exp(-n / b)) + 2 * b)
        if best is None or cost < best[0]:
            best = (cost, c)
    return cast("tuple[float, int]", best)[1]  # set by the first iteration


def _n_windows(c: int) -> int:
    return 254 // c + 2  # scalars < 2^254, plus the carry of the top signed digit


def _msm_prep(
    points: Sequence[AnyPoint], scalars: Sequence[int], g2: bool
) -> tuple[list[AnyAffine], list[AnyAffine], list[int], int]:
    """Drop scalars 0 (and points at infinity); collect points with scalar 1 or -1 (summed without buckets).
    Returns (ones, pts, scs, c)."""
    neg = cast(PointNeg, g2_neg if g2 else g1_neg)
    ones: list[AnyAffine] = []
    pts: list[AnyAffine] = []
    scs: list[int] = []
    r_ = R
    rm1 = R - 1
    for p, s in zip(points, scalars, strict=False):
        if p is None:
            continue
        if not 0 <= s < r_:
            s %= r_
        if s <= 1:
            if s == 1:
                ones.append(p)
        elif s == rm1:
            ones.append(neg(p))
        else:
            pts.append(p)
            scs.append(s)
    return ones, pts, scs, _window_bits(len(pts))


def _signed_digits(scs: Sequence[int], c: int, lo: int, hi: int) -> npt.NDArray[np.int64]:
    """Signed c-bit digits (in (-2^(c-1), 2^(c-1)]) of windows lo..hi-1 of every scalar, as an int64 array
    (len(scs), hi - lo). The digits of windows >= lo are recoded from s >> (c lo) plus the carry out of the lower
    windows, which is 1 exactly when s mod 2^(c lo) > sum_{j < lo} 2^(c-1) 2^(c j) (the largest value the lower
    signed digits can represent), so a window range needs no pass over the lower windows."""
    import numpy as np

    half = 1 << (c - 1)
    mask = (1 << c) - 1
    shift = c * lo
    low_mask = (1 << shift) - 1
    bound = half * low_mask // mask
    nw = hi - lo
    nbytes = (nw * c + 1 + 7) // 8 + 1
    top = (1 << (8 * nbytes)) - 1
    if shift:
        vals = [((s >> shift) + ((s & low_mask) > bound)) & top for s in scs]
    else:
        vals = [s & top for s in scs]  # windows >= hi belong to another range
    raw = np.frombuffer(b"".join(v.to_bytes(nbytes, "little") for v in vals), dtype=np.uint8)
    bits = np.unpackbits(raw.reshape(len(scs), nbytes), axis=1, bitorder="little")[:, : nw * c]
    windows = bits.reshape(len(scs), nw, c).astype(np.int64) @ (1 << np.arange(c, dtype=np.int64))
    digits = np.empty_like(windows)
    carry = np.zeros(len(scs), dtype=np.int64)
    for w in range(nw):
        d = windows[:, w] + carry
        carry = (d > half).astype(np.int64)
        digits[:, w] = d - (carry << c)
    return digits


def _buckets(
    pts: Sequence[AnyAffine], scs: Sequence[int], neg: PointNeg, c: int, lo: int, hi: int
) -> list[list[AnyAffine]]:
    """Bucket lists of windows lo..hi-1: list (w - lo) * 2^(c-1) + |digit| - 1 holds the points whose digit in
    window w is +-|digit| (negated for negative digits). Bucketing by a stable sort of (bucket, point) pairs."""
    import numpy as np

    half = 1 << (c - 1)
    n = len(pts)
    nw = hi - lo
    digits = _signed_digits(scs, c, lo, hi)  # (n, nw)
    nz_pt, nz_w = np.nonzero(digits)  # point-major order
    d = digits[nz_pt, nz_w]
    bucket = nz_w * half + np.abs(d) - 1
    order = np.argsort(bucket, kind="stable")
    neg_pt = d < 0
    sel: list[int] = (nz_pt + n * neg_pt)[order].tolist()
    has_neg = np.zeros(n, dtype=bool)
    has_neg[nz_pt[neg_pt]] = True
    negs = {i: neg(pts[i]) for i in np.nonzero(has_neg)[0].tolist()}
    both = list(pts) + [negs.get(i) for i in range(n)]
    flat = cast("list[AnyAffine]", [both[i] for i in sel])  # sel picks only points and their negations
    ends: list[int] = np.cumsum(np.bincount(bucket, minlength=nw * half)).tolist()
    out: list[list[AnyAffine]] = []
    a = 0
    for e in ends:
        out.append(flat[a:e])
        a = e
    return out


def _msm_windows(pts: Sequence[AnyAffine], scs: Sequence[int], g2: bool, c: int, lo: int, hi: int) -> AnyJac:
    """sum_{lo <= w < hi} 2^(c w) T_w (Jacobian), T_w = sum_i digit_w(s_i) P_i with signed c-bit digits in
    (-2^(c-1), 2^(c-1)]. The digits of windows >= lo are recoded from s >> (c lo) plus the carry out of the lower
    windows, which is 1 exactly when s mod 2^(c lo) > sum_{j < lo} 2^(c-1) 2^(c j) (the largest value the lower
    signed digits can represent), so a window range needs no pass over the lower windows."""
    neg = cast(PointNeg, g2_neg if g2 else g1_neg)
    reduce = cast(ReduceBuckets, _g2_reduce_buckets if g2 else _g1_reduce_buckets)
    add_pairs = cast(AddPairs, _g2_add_pairs if g2 else _g1_add_pairs)
    jadd, jdouble, to_jac, inf = cast(
        "tuple[JacAdd, JacDouble, ToJac, AnyJac]",
        (g2_jadd, g2_jdouble, g2_to_jac, G2_INF_J) if g2 else (g1_jadd, g1_jdouble, g1_to_jac, G1_INF_J),
    )
    half = 1 << (c - 1)
    nw = hi - lo
    shift = c * lo
    buckets = _buckets(pts, scs, neg, c, lo, hi)
    sums = reduce(buckets)
    # window sums T_w = sum_d d * B_{w,d}, d = j L + t (m segments j of L buckets, t = 1..L):
    #   T_w = sum_j sum_t t B_{w,jL+t}  +  L * sum_j j S_{w,j},   S_{w,j} = sum_t B_{w,jL+t},
    # both by running sums, all windows and segments in lockstep (batched affine: one inversion per step for
    # nw * m additions, instead of one per step for nw additions over 2^(c-1) steps)
    m = 1 << ((c - 1) // 2)
    seg = half // m
    width = nw * m
    running: list[AnyPoint] = [None] * width
    accs: list[AnyPoint] = [None] * width
    base = [w * half + j * seg - 1 for w in range(nw) for j in range(m)]
    for t in range(seg, 0, -1):
        running = add_pairs(running, [sums[b + t] for b in base])
        accs = add_pairs(accs, running)
    r2: list[AnyPoint] = [None] * nw
    a2: list[AnyPoint] = [None] * nw
    for j in range(m - 1, 0, -1):
        r2 = add_pairs(r2, running[j::m])
        a2 = add_pairs(a2, r2)
    inner = reduce([[p for p in accs[w * m : (w + 1) * m] if p is not None] for w in range(nw)])
    k = seg.bit_length() - 1  # seg = 2^k
    total = inf
    for w in range(nw - 1, -1, -1):
        if total is not inf:
            for _ in range(c):
                total = jdouble(total)
        tw = to_jac(a2[w])
        if a2[w] is not None:
            for _ in range(k):
                tw = jdouble(tw)
        total = jadd(jadd(total, tw), to_jac(inner[w]))
    if total is not inf:
        for _ in range(shift):
            total = jdouble(total)
    return total


def _msm(points: Sequence[AnyPoint], scalars: Sequence[int], g2: bool) -> AnyPoint:
    ones, pts, scs, c = _msm_prep(points, scalars, g2)
    reduce = cast(ReduceBuckets, _g2_reduce_buckets if g2 else _g1_reduce_buckets)
    jadd, to_jac, from_jac, inf = cast(
        "tuple[JacAdd, ToJac, FromJac, AnyJac]",
        (g2_jadd, g2_to_jac, g2_from_jac, G2_INF_J) if g2 else (g1_jadd, g1_to_jac, g1_from_jac, G1_INF_J),
    )
    result = to_jac(reduce([ones])[0]) if ones else inf
    if not pts:
        return from_jac(result)
    return from_jac(jadd(_msm_windows(pts, scs, g2, c, 0, _n_windows(c)), result))


def g1_msm(points: Sequence[G1Point], scalars: Sequence[int]) -> G1Point:
    """sum_i scalars[i] * points[i] over G1 (affine in, affine out)."""
    return cast("G1Point", _msm(points, scalars, g2=False))


def g2_msm(points: Sequence[G2Point], scalars: Sequence[int]) -> G2Point:
    return cast("G2Point", _msm(points, scalars, g2=True))


_MSM_JOBS: list[
    tuple[bool, list[AnyAffine], list[int], int]
] = []  # (g2, pts, scs, c) per MSM of the current msm_many call: inherited by forked workers


def _msm_unit(unit: tuple[int, int, int]) -> AnyPoint:
    ti, lo, hi = unit
    g2, pts, scs, c = _MSM_JOBS[ti]
    return cast(FromJac, g2_from_jac if g2 else g1_from_jac)(_msm_windows(pts, scs, g2, c, lo, hi))


def msm_many(tasks: list[tuple[str, Sequence[AnyPoint], Sequence[int]]], workers: int = 1) -> list[AnyPoint]:
    """Run several MSMs (("g1"|"g2", points, scalars) each), split across ``workers`` processes.

    Each MSM is cut into ranges of windows (no work is repeated: every range has its own buckets and running
    sums, and its partial sum is already shifted to its windows' place), the ranges are handed out largest first
    to a pool of forked processes that inherit the points and scalars (nothing but the range is sent to them), and
    the partial sums are added here. The result is the same group element as with one process.
    """
    if workers <= 1:
        return [_msm(p, s, k == "g2") for k, p, s in tasks]
    import concurrent.futures as cf
    import multiprocessing as mp

    global _MSM_JOBS
    jobs: list[tuple[bool, list[AnyAffine], list[int], int]] = []
    ones: list[list[AnyAffine]] = []
    units: list[tuple[int, int, int]] = []
    costs: list[int] = []
    for ti, (kind, points, scalars) in enumerate(tasks):
        g2 = kind == "g2"
        o, pts, scs, c = _msm_prep(points, scalars, g2)
        jobs.append((g2, pts, scs, c))
        ones.append(o)
        nw = _n_windows(c)
        # cost of one window ~ (points + running sums) x (2 for F_q2 arithmetic)
        wcost = (len(pts) + (1 << c)) * (2 if g2 else 1) if pts else 0
        for lo, hi in _window_ranges(nw, wcost, workers):
            units.append((ti, lo, hi))
            costs.append(wcost * (hi - lo))
    total = sum(costs)
    order = sorted(range(len(units)), key=lambda i: -costs[i])
    out: list[AnyPoint] = [None] * len(tasks)
    _MSM_JOBS = jobs
    try:
        if total:
            with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as ex:
                futs = [(units[i][0], ex.submit(_msm_unit, units[i])) for i in order if costs[i]]
                # the 0 / 1 / -1 scalars' points are summed here meanwhile
                sums = [
                    cast(ReduceBuckets, _g2_reduce_buckets if tasks[ti][0] == "g2" else _g1_reduce_buckets)([o])[0]
                    if o
                    else None
                    for ti, o in enumerate(ones)
                ]
                parts = [(ti, f.result()) for ti, f in futs]
        else:
            sums = [
                cast(ReduceBuckets, _g2_reduce_buckets if tasks[ti][0] == "g2" else _g1_reduce_buckets)([o])[0]
                if o
                else None
                for ti, o in enumerate(ones)
            ]
            parts = []
    finally:
        _MSM_JOBS = []
    for ti, s in enumerate(sums):
        out[ti] = s
    for ti, part in parts:
        out[ti] = cast(PointAdd, g2_add if tasks[ti][0] == "g2" else g1_add)(out[ti], part)
    return out


def _window_ranges(nw: int, wcost: int, workers: int) -> list[tuple[int, int]]:
    """Contiguous window ranges of one MSM: about 3 units per worker over all MSMs, so that the pool balances."""
    if wcost == 0:
        return [(0, nw)]
    parts = max(1, min(nw, 3 * workers))
    step = -(-nw // parts)
    return [(lo, min(nw, lo + step)) for lo in range(0, nw, step)]
