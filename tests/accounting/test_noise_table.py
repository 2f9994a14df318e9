"""DiscreteGaussianTable: exactness of the table, soundness and tightness of ``tv_distance``, sampling.

The exact discrete Gaussian pmf is computed here independently with ``decimal`` at 60 significant digits
(relative error ~1e-58, far below the table's 2^-64 quantum), and the true TV(Q, N_Z(0, σ²)) of the table's
distribution Q is summed in decimal, tails included. Statistical tests: fixed seeds, false-failure
probability ≤ 1e-6 per assertion (p-value threshold, or a McDiarmid bound at 1e-6).
"""

from __future__ import annotations

import hashlib
import math
from decimal import Decimal, getcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dprag.accounting.noise import DiscreteGaussianTable, RandomSource
from dprag.accounting.noise import table as table_mod
from dprag.accounting.noise.table import exp_neg_bounds
from dprag.errors import InvalidParameterError

getcontext().prec = 60


def _dec(q: Fraction) -> Decimal:
    return Decimal(q.numerator) / Decimal(q.denominator)


def exact_pmf_decimal(sigma, L: int) -> dict[int, Decimal]:
    s2 = _dec(Fraction(sigma) ** 2)
    w = {x: (-(Decimal(x * x)) / (2 * s2)).exp() for x in range(-L, L + 1)}
    z = sum(w.values())
    return {x: v / z for x, v in w.items()}


def true_tv(table: DiscreteGaussianTable, sigma) -> Decimal:
    L = table.support_bound + int(30 * float(sigma)) + 10  # mass beyond L < e^-450
    p = exact_pmf_decimal(sigma, L)
    B = table.precision_bits
    T = table.support_bound
    q = {x: Decimal(v) / Decimal(2**B) for x, v in zip(range(-T, T + 1), table.weights, strict=False)}
    return sum(abs(q.get(x, Decimal(0)) - px) for x, px in p.items()) / 2


# ------------------------------------------------------------------------------------------------
# exp brackets
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "y",
    [
        Fraction(0),
        Fraction(1, 10**12),
        Fraction(1, 3),
        Fraction(1),
        Fraction(5, 2),
        Fraction(0.7) ** 2 * 3,
        Fraction(100),
        Fraction(255, 1),
    ],
)
def test_exp_neg_bounds_bracket_decimal(y):
    P = 200
    lo, hi = exp_neg_bounds(y, P)
    ref = (-_dec(y)).exp() * Decimal(2) ** P  # 60 digits ≈ 199 bits: relative error 1e-59
    tol = ref * Decimal(10) ** -55
    assert Decimal(lo) <= ref + tol and ref - tol <= Decimal(hi)
    assert 0 <= hi - lo <= 8 + int(y) * 8  # tight: a few units at 2^-P


def test_exp_neg_bounds_huge_argument():
    assert exp_neg_bounds(Fraction(10**6), 64) == (0, 1)
    with pytest.raises(InvalidParameterError):
        exp_neg_bounds(Fraction(-1), 64)


# ------------------------------------------------------------------------------------------------
# the table and its TV bound
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "sigma,kwargs",
    [
        (0.5, {}),
        (1.0, {}),
        (3.7, {}),
        (Fraction(10, 3), {}),
        (20.0, {}),
        (3.7, {"precision_bits": 20}),  # quantisation-dominated
        (3.7, {"tail_bound": 2.5}),  # tail-dominated
        (6.0, {"tail_bound": 4.0, "precision_bits": 32}),
    ],
)
def test_tv_bound_is_sound_and_tight(sigma, kwargs):
    table = DiscreteGaussianTable(sigma, **kwargs)
    tv = true_tv(table, sigma)
    assert Decimal(table.tv_distance) >= tv  # rigorous upper bound
    # and not loose: the bound counts the tail mass twice at most (spec §6)
    assert Decimal(table.tv_distance) <= 2 * tv + Decimal(10) ** -40


@pytest.mark.parametrize("sigma", [0.5, 3.7, 20.0])
def test_weights_are_floor_of_exact_probabilities(sigma):
    # q(x) = ⌊2^B p_T(x)⌋ for x ≠ 0, q(0) = 2^B - Σ_{x≠0} q(x), with p_T the pmf conditioned on |x| ≤ T.
    table = DiscreteGaussianTable(sigma)
    B = table.precision_bits
    T = math.ceil(Fraction(table.tail_bound) * Fraction(sigma))
    p = exact_pmf_decimal(sigma, T)  # normalised over |x| ≤ T: exactly p_T
    weights = dict(zip(range(-table.support_bound, table.support_bound + 1), table.weights, strict=False))
    for x in range(-T, T + 1):
        if x == 0:
            continue
        assert weights.get(x, 0) == int((p[x] * Decimal(2**B)).to_integral_value(rounding="ROUND_FLOOR"))
    assert sum(table.weights) == 2**B
    assert table.weights == table.weights[::-1]  # symmetric
    assert table.weights[0] > 0  # zero-probability tails trimmed


def test_tiny_sigma_point_mass():
    table = DiscreteGaussianTable(2.0**-10)
    assert table.support_bound == 0 and table.weights == [2**64]
    x = table.sample(100, RandomSource.from_seed(b"z"))
    assert np.all(x == 0)
    # true TV = P[|X| ≥ 1] ≈ 2e^{-2^19}; the bound is limited by the 2^-(B+192) working precision
    assert 0 < table.tv_distance < 1e-70


def test_precision_refinement_path(monkeypatch):
    calls = []
    real = table_mod._build

    def flaky(s2, T, B, P):
        calls.append(P)
        if len(calls) == 1:
            raise table_mod._NeedPrecision
        return real(s2, T, B, P)

    monkeypatch.setattr(table_mod, "_build", flaky)
    t = DiscreteGaussianTable(2.0)
    monkeypatch.undo()
    assert len(calls) == 2 and calls[1] > calls[0]
    assert t.weights == DiscreteGaussianTable(2.0).weights


def test_digest_follows_spec():
    table = DiscreteGaussianTable(3.7)
    s2 = Fraction(3.7) ** 2
    h = hashlib.sha256()
    h.update(b"dprag.DiscreteGaussianTable.v1")
    h.update(s2.numerator.to_bytes((s2.numerator.bit_length() + 7) // 8 + 1, "big"))
    h.update(b"/")
    h.update(s2.denominator.to_bytes((s2.denominator.bit_length() + 7) // 8 + 1, "big"))
    h.update(bytes([64]) + table.support_bound.to_bytes(8, "big"))
    for v in table.weights:
        h.update(v.to_bytes(9, "little"))
    assert table.digest == h.hexdigest()
    assert DiscreteGaussianTable(3.7).digest == table.digest
    assert DiscreteGaussianTable(3.7000000000000006).digest != table.digest


# ------------------------------------------------------------------------------------------------
# sampling
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sigma", [0.5, 3.7, 1000.0])
def test_samples_follow_table_pmf(sigma):
    table = DiscreteGaussianTable(sigma)
    n = 300_000
    x = table.sample(n, RandomSource.from_seed(b"ts", str(sigma).encode()))
    assert x.dtype == np.int64
    xs, q = table.pmf()
    counts = np.bincount(x + table.support_bound, minlength=xs.size)
    # chi-square over bins with expected count ≥ 20 (merge the sparse tails into the end bins)
    order = np.arange(xs.size)
    keep = q * n >= 20
    lo, hi = order[keep][0], order[keep][-1]
    obs = np.concatenate([[counts[: lo + 1].sum()], counts[lo + 1 : hi], [counts[hi:].sum()]])
    exp = np.concatenate([[q[: lo + 1].sum()], q[lo + 1 : hi], [q[hi:].sum()]]) * n
    assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > 1e-6


def test_empirical_tv_within_sampling_error_plus_bound():
    # TV(empirical, N_Z) ≤ TV(empirical, Q) + TV(Q, N_Z). E[TV(emp, Q)] ≤ ½ Σ sqrt(Q(1-Q)/n); TV(emp, Q)
    # changes by ≤ 1/n per sample, so by McDiarmid it exceeds its mean by sqrt(ln(1e6)/(2n)) w.p. ≤ 1e-6.
    sigma = 1000.0
    table = DiscreteGaussianTable(sigma)
    n = 1_000_000
    x = table.sample(n, RandomSource.from_seed(b"emp"))
    L = table.support_bound + 100
    xs = np.arange(-L, L + 1)
    # exact pmf (float64 log-space; relative error ~1e-13 is far below the sampling error here)
    s2 = sigma * sigma
    w = np.exp(-(xs.astype(np.float64) ** 2) / (2 * s2))
    p = w / math.fsum(w)
    emp = np.bincount(x + L, minlength=xs.size) / n
    tv_emp = 0.5 * np.abs(emp - p).sum()
    q_full = np.zeros(xs.size)
    _, q = table.pmf()
    q_full[L - table.support_bound : L + table.support_bound + 1] = q
    bound = 0.5 * np.sqrt(q_full * (1 - q_full) / n).sum() + math.sqrt(math.log(1e6) / (2 * n)) + table.tv_distance
    assert tv_emp <= bound
    # and the sampler is not degenerate: the bound is within a factor ~1.3 of the observed value
    assert tv_emp > 0.5 * bound


def test_same_seed_same_samples():
    t = DiscreteGaussianTable(12.0)
    a = t.sample(1000, RandomSource.from_seed(b"d"))
    b = t.sample(1000, RandomSource.from_seed(b"d"))
    np.testing.assert_array_equal(a, b)
    assert t.sample(0, RandomSource.from_seed(b"d")).shape == (0,)


def test_large_table_sampling_matches_plain_inverse_cdf():
    # the guide table only accelerates: compare with a plain searchsorted inverse CDF on the same words
    t = DiscreteGaussianTable(5000.0)
    src = RandomSource.from_seed(b"guide")
    got = t.sample(200_000, src)
    w = RandomSource.from_seed(b"guide").uint64(200_000)
    cum = np.cumsum(np.array(t.weights[:-1], dtype=object)).astype(np.uint64)
    ref = np.searchsorted(cum, w, side="right") - t.support_bound
    np.testing.assert_array_equal(got, ref)


# ------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"sigma": -1.0}, "sigma"),
        ({"sigma": float("nan")}, "sigma"),
        ({"sigma": 1.0, "precision_bits": 15}, "precision_bits"),
        ({"sigma": 1.0, "precision_bits": 65}, "precision_bits"),
        ({"sigma": 1.0, "precision_bits": 32.5}, "precision_bits"),
        ({"sigma": 1.0, "tail_bound": 0}, "tail_bound"),
        ({"sigma": 1.0, "tail_bound": float("inf")}, "tail_bound"),
        ({"sigma": 1.0, "tail_bound": "x"}, "tail_bound"),
        ({"sigma": 2.0**30}, "tail_bound"),  # table would have ~2·10^10 entries
    ],
)
def test_bad_parameters(kwargs, field):
    with pytest.raises(InvalidParameterError, match=field):
        DiscreteGaussianTable(**kwargs)


def test_bad_sample_arguments():
    t = DiscreteGaussianTable(1.0)
    with pytest.raises(InvalidParameterError, match="size"):
        t.sample(-1, RandomSource.from_seed(b"x"))
    with pytest.raises(InvalidParameterError, match="source"):
        t.sample(3, "not a source")
