"""zk floor: field, NTT and plain-integer curve arithmetic against py-ecc's optimized_bn128 (the oracle)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from py_ecc import optimized_bn128 as ob

from dprag.zk import curve as C
from dprag.zk.field import R, batch_inv, root_of_unity
from dprag.zk.fixed_base import fixed_base_muls
from dprag.zk.ntt import intt, ntt

scalars = st.integers(min_value=0, max_value=R - 1)


def _g1(p):
    a = ob.normalize(p)
    return None if ob.is_inf(p) else (int(a[0]), int(a[1]))


def _g2(p):
    if ob.is_inf(p):
        return None
    a = ob.normalize(p)
    return ((a[0].coeffs[0], a[0].coeffs[1]), (a[1].coeffs[0], a[1].coeffs[1]))


def test_generators_match_py_ecc():
    assert _g1(ob.G1) == C.G1_GEN
    assert _g2(ob.G2) == C.G2_GEN
    assert C.g1_on_curve(C.G1_GEN) and C.g2_on_curve(C.G2_GEN) and C.g2_in_subgroup(C.G2_GEN)


@settings(max_examples=15, deadline=None)
@given(scalars)
def test_scalar_mul_matches_py_ecc(k):
    assert C.g1_mul(C.G1_GEN, k) == _g1(ob.multiply(ob.G1, k))
    assert C.g2_mul(C.G2_GEN, k) == _g2(ob.multiply(ob.G2, k))


@settings(max_examples=10, deadline=None)
@given(st.lists(scalars, min_size=1, max_size=40), st.integers(0, 2**32))
def test_msm_matches_naive_sum(ks, seed):
    rng = random.Random(seed)
    pts = [C.g1_mul(C.G1_GEN, rng.randrange(1, R)) for _ in ks]
    # special scalars and repeated points exercise the 0 / 1 / -1 paths and the doubling / P + (-P) slow path
    ks = list(ks)
    if len(ks) > 3:
        ks[0], ks[1], ks[2] = 0, 1, R - 1
        pts[3] = pts[2]
    exp = None
    for p, k in zip(pts, ks, strict=False):
        exp = C.g1_add(exp, C.g1_mul(p, k))
    assert C.g1_msm(pts, ks) == exp


@pytest.mark.integration
def test_msm_large_windows_and_inverse_pairs():
    rng = random.Random(7)
    pts = [C.g1_mul(C.G1_GEN, rng.randrange(1, R)) for _ in range(600)]
    ks = [rng.randrange(R) for _ in pts]
    pts += [C.g1_neg(p) for p in pts[:50]]  # P and -P with the same scalar cancel
    ks += ks[:50]
    exp = C.g1_msm(pts[50:600], ks[50:600])
    assert C.g1_msm(pts, ks) == exp
    assert C.msm_many([("g1", pts, ks)], workers=2)[0] == exp


@pytest.mark.integration
def test_g2_msm_matches_naive_sum():
    rng = random.Random(3)
    pts = [C.g2_mul(C.G2_GEN, rng.randrange(1, R)) for _ in range(20)]
    ks = [rng.randrange(R) for _ in pts]
    ks[0] = 0
    ks[1] = 1
    exp = None
    for p, k in zip(pts, ks, strict=False):
        exp = C.g2_add(exp, C.g2_mul(p, k))
    assert C.g2_msm(pts, ks) == exp
    # split across processes by window ranges: the same point
    assert C.msm_many([("g2", pts, ks), ("g1", [C.G1_GEN] * 3, ks[:3])], workers=2) == [
        exp,
        C.g1_mul(C.G1_GEN, sum(ks[:3])),
    ]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.one_of(scalars, st.integers(0, 2**40)), min_size=1, max_size=30),
    st.integers(2, 14),
    st.integers(0, 30),
    st.integers(1, 30),
)
def test_signed_digits_of_a_window_range(ks, c, lo, width):
    """Signed digits of windows lo..hi-1 recoded without the lower windows (carry rule) equal the plain
    low-to-high recoding's digits, which reproduce the scalar."""
    nw = C._n_windows(c)
    lo = min(lo, nw - 1)
    hi = min(nw, lo + width)
    half, full, mask = 1 << (c - 1), 1 << c, (1 << c) - 1
    got = C._signed_digits(ks, c, lo, hi)
    for i, k in enumerate(ks):
        digits, t = [], k
        for _ in range(nw):
            d = t & mask
            t >>= c
            if d > half:
                d -= full
                t += 1
            digits.append(d)
        assert t == 0 and sum(d << (c * j) for j, d in enumerate(digits)) == k
        assert all(-half < d <= half for d in digits)
        assert got[i].tolist() == digits[lo:hi]


def test_msm_window_ranges_add_up():
    """Partial sums over window ranges (what each process of msm_many computes) add up to the naive sum."""
    rng = random.Random(11)
    pts = [C.g1_mul(C.G1_GEN, rng.randrange(1, R)) for _ in range(120)]
    ks = [rng.randrange(R) for _ in pts]
    ks[:3] = [0, 1, R - 1]
    exp = None
    for p, k in zip(pts, ks, strict=False):
        exp = C.g1_add(exp, C.g1_mul(p, k))
    ones, pp, ss, _ = C._msm_prep(pts, ks, False)
    for c in (3, 6, 9, 13):
        nw = C._n_windows(c)
        tot = C.g1_to_jac(C._g1_reduce_buckets([list(ones)])[0])
        for lo in range(0, nw, 4):
            tot = C.g1_jadd(tot, C._msm_windows(pp, ss, False, c, lo, min(nw, lo + 4)))
        assert C.g1_from_jac(tot) == exp, c


def test_fixed_base_matches_scalar_mul():
    ks = [0, 1, 2, R - 1, 12345678901234567890, random.Random(1).randrange(R)]
    assert fixed_base_muls(C.G1_GEN, ks) == [C.g1_mul(C.G1_GEN, k) for k in ks]
    assert fixed_base_muls(C.G2_GEN, ks[:4], g2=True) == [C.g2_mul(C.G2_GEN, k) for k in ks[:4]]


def _f2_pow(a, e):
    out = (1, 0)
    while e:
        if e & 1:
            out = C.f2_mul(out, a)
        a = C.f2_sqr(a)
        e >>= 1
    return out


def _f2_sqrt(a):
    """Tonelli-Shanks in F_q2 (test helper: builds twist points outside the order-r subgroup)."""
    order = C.Q * C.Q - 1
    s, t = 0, order
    while t % 2 == 0:
        s, t = s + 1, t // 2
    if _f2_pow(a, order // 2) != (1, 0):
        return None
    z = (1, 1)
    while _f2_pow(z, order // 2) == (1, 0):
        z = (z[0] + 1, 1)
    m, c, x, b = s, _f2_pow(z, t), _f2_pow(a, (t + 1) // 2), _f2_pow(a, t)
    while b != (1, 0):
        i, bb = 0, b
        while bb != (1, 0):
            bb, i = C.f2_sqr(bb), i + 1
        g = _f2_pow(c, 1 << (m - i - 1))
        m, c, x, b = i, C.f2_sqr(g), C.f2_mul(x, g), C.f2_mul(b, C.f2_sqr(g))
    return x


def twist_point_outside_subgroup():
    x0 = 1
    while True:
        x = (x0, 1)
        y = _f2_sqrt(C.f2_add(C.f2_mul(C.f2_sqr(x), x), C.B2))
        if y is not None:
            p = (x, y)
            assert C.g2_on_curve(p)
            if not C.g2_in_subgroup(p):
                return p
        x0 += 1


def test_g2_subgroup_check_rejects_cofactor_points():
    p = twist_point_outside_subgroup()
    assert C.g2_on_curve(p) and not C.g2_in_subgroup(p)


@pytest.mark.parametrize("log_n", [0, 1, 3, 6])
def test_ntt_roundtrip_and_evaluation(log_n):
    rng = random.Random(log_n)
    n = 1 << log_n
    a = [rng.randrange(R) for _ in range(n)]
    e = ntt(a)
    w = root_of_unity(log_n)
    for i in range(n):
        assert e[i] == sum(c * pow(w, i * j, R) for j, c in enumerate(a)) % R
    assert intt(e) == a


def test_roots_of_unity_are_snarkjs_ones():
    # ffjavascript: Fr.w[28] = 5^((r-1)/2^28); w[k] = w[k+1]^2; primitive
    for k in (1, 5, 28):
        w = root_of_unity(k)
        assert pow(w, 1 << k, R) == 1 and pow(w, 1 << (k - 1), R) != 1
    assert root_of_unity(1) == R - 1


def test_batch_inv():
    vals = [3, 5, R - 1, 123456789]
    assert [v * i % R for v, i in zip(vals, batch_inv(vals), strict=False)] == [1] * 4


def _p1(p):
    return (ob.FQ(p[0]), ob.FQ(p[1]), ob.FQ(1))


def _p2(p):
    return (ob.FQ2([p[0][0], p[0][1]]), ob.FQ2([p[1][0], p[1][1]]), ob.FQ2([1, 0]))


def _ints(x):
    return [int(c) for c in x.coeffs]


def _py_ecc_miller(q, p):
    from py_ecc.optimized_bn128.optimized_pairing import cast_point_to_fq12, miller_loop, twist

    return miller_loop(twist(_p2(q)), cast_point_to_fq12(_p1(p)), final_exponentiate=False)


def test_fq12_matches_py_ecc():
    from dprag.zk import fq12 as F

    rng = random.Random(3)
    a = [rng.randrange(C.Q) for _ in range(12)]
    b = [rng.randrange(C.Q) for _ in range(12)]
    A, B = ob.FQ12(a), ob.FQ12(b)
    assert F.mul(a, b) == _ints(A * B)
    assert F.inv(a) == _ints(A.inv())
    assert F.frob(a, 1) == _ints(A**C.Q)
    assert F.frob(a, 2) == _ints(A ** (C.Q**2))
    with pytest.raises(ZeroDivisionError):
        F.inv([0] * 12)


def test_final_exponentiation_matches_py_ecc():
    from dprag.zk.verify import final_exp

    f = _py_ecc_miller(C.g2_mul(C.G2_GEN, 5), C.g1_mul(C.G1_GEN, 7))
    assert final_exp(_ints(f)) == _ints(ob.final_exponentiate(f))
    g = ob.FQ12([random.Random(2).randrange(C.Q) for _ in range(12)])
    assert final_exp(_ints(g)) == _ints(ob.final_exponentiate(g))


@settings(max_examples=4, deadline=None)
@given(scalars.filter(bool), scalars.filter(bool))
def test_multi_miller_equals_py_ecc_miller_loop(a, b):
    from dprag.zk import fq12 as F
    from dprag.zk.pairing import multi_miller
    from dprag.zk.verify import final_exp

    q, p = C.g2_mul(C.G2_GEN, a), C.g1_mul(C.G1_GEN, b)
    assert multi_miller([(q, p)]) == _ints(_py_ecc_miller(q, p))
    # bilinearity through the shared loop: e(aQ, bP) * e(Q, -abP) = 1, and e(aQ, bP) != 1
    prod = multi_miller([(q, p), (C.G2_GEN, C.g1_mul(C.G1_GEN, -a * b))])
    assert final_exp(prod) == F.ONE
    assert final_exp(multi_miller([(q, p)])) != F.ONE
