"""Exact discrete Laplace and discrete Gaussian samplers (CKS 2020, Algorithms 2–3): distribution and input checks.

Goodness-of-fit tests compare against pmfs computed here independently (closed form for the discrete
Laplace; log-space sums for the discrete Gaussian). All tests use fixed seeds, so they are deterministic;
each statistical assertion uses the threshold p > 1e-6 (or |z| < 5), i.e. a false-failure probability
of at most ~1e-6 per assertion under the null hypothesis, over the choice of seed.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dprag.accounting.noise import RandomSource, discrete_gaussian, discrete_laplace
from dprag.accounting.noise.discrete import _floor_div
from dprag.errors import InvalidParameterError

P_MIN = 1e-6


# ------------------------------------------------------------------------------------------------
# Independent pmfs and a chi-square helper
# ------------------------------------------------------------------------------------------------
def dlap_pmf(scale, xs: np.ndarray) -> np.ndarray:
    """P[x] = (1-q)/(1+q) q^|x|, q = exp(-1/scale) (normalising constant of the two-sided geometric)."""
    b = float(Fraction(scale))
    q = math.exp(-1.0 / b)
    return (1 - q) / (1 + q) * np.exp(-np.abs(xs) / b)


def dgauss_pmf(sigma, xs: np.ndarray) -> np.ndarray:
    """P[x] ∝ exp(-x²/(2σ²)), normalised by a log-space sum over |x| ≤ 40σ + 10 (tail < e^-800)."""
    s2 = float(Fraction(sigma) ** 2)
    L = int(math.ceil(40 * math.sqrt(s2))) + 10
    allx = np.arange(-L, L + 1, dtype=np.float64)
    z = math.fsum(np.exp(-allx * allx / (2 * s2)))
    return np.exp(-(xs.astype(np.float64) ** 2) / (2 * s2)) / z


def chisquare_pvalue(samples: np.ndarray, pmf, half_width: int) -> float:
    """Chi-square p-value of integer samples against pmf on [-W, W] (bins of expected count ≥ 20,
    consecutive integers merged; both tails merged into the end bins)."""
    n = samples.size
    xs = np.arange(-half_width, half_width + 1)
    p = pmf(xs)
    p = p / p.sum()
    edges = [0]
    acc = 0.0
    for i, pi in enumerate(p):
        acc += pi
        if acc * n >= 20:
            edges.append(i + 1)
            acc = 0.0
    if edges[-1] != len(p):
        if len(edges) > 1:
            edges[-1] = len(p)
        else:
            edges.append(len(p))
    idx = np.clip(samples + half_width, 0, len(p) - 1)
    bin_of = np.searchsorted(np.array(edges[1:]), idx, side="right")
    obs = np.bincount(bin_of, minlength=len(edges) - 1)
    exp = np.array([p[edges[i] : edges[i + 1]].sum() for i in range(len(edges) - 1)]) * n
    assert len(obs) >= 2
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


# ------------------------------------------------------------------------------------------------
# Goodness of fit
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scale", [0.5, 1.0, 3.7, Fraction(7, 3), 50.0, 1000.0])
def test_discrete_laplace_fits_pmf(scale):
    n = 100_000
    x = discrete_laplace(scale, n, RandomSource.from_seed(b"gof-lap", str(scale).encode()))
    assert x.dtype == np.int64 and x.shape == (n,)
    W = int(40 * float(scale)) + 5
    assert chisquare_pvalue(x, lambda xs: dlap_pmf(scale, xs), W) > P_MIN


@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.7, Fraction(10, 3), 30.0, 1000.0])
def test_discrete_gaussian_fits_pmf(sigma):
    n = 100_000
    x = discrete_gaussian(sigma, n, RandomSource.from_seed(b"gof-dg", str(sigma).encode()))
    assert x.dtype == np.int64 and x.shape == (n,)
    W = int(12 * float(sigma)) + 3
    assert chisquare_pvalue(x, lambda xs: dgauss_pmf(sigma, xs), W) > P_MIN


@pytest.mark.parametrize("sigma", [0.5, 2.0, 25.0])
def test_discrete_gaussian_mean_and_variance(sigma):
    # z-tests of the sample mean and variance against the exact moments (|z| < 5: false failure ≈ 5.7e-7)
    n = 200_000
    x = discrete_gaussian(sigma, n, RandomSource.from_seed(b"mom", str(sigma).encode())).astype(np.float64)
    W = int(40 * sigma) + 10
    xs = np.arange(-W, W + 1)
    p = dgauss_pmf(sigma, xs)
    var = float(np.sum(p * xs**2))
    m4 = float(np.sum(p * xs**4))
    assert var <= sigma**2  # CKS Prop. 19: Var[N_Z(0, σ²)] < σ²
    assert abs(x.mean()) / math.sqrt(var / n) < 5
    assert abs(np.mean(x**2) - var) / math.sqrt((m4 - var**2) / n) < 5


@pytest.mark.parametrize("scale", [0.5, 3.7, 100.0])
def test_discrete_laplace_mean_and_variance(scale):
    # closed forms: Var = 2q/(1-q)², E[X⁴] = 2q(1 + 10q + q²)/(1-q)⁴ with q = e^{-1/b}; |z| < 5 (≈5.7e-7)
    n = 200_000
    x = discrete_laplace(scale, n, RandomSource.from_seed(b"lmom", str(scale).encode())).astype(np.float64)
    q = math.exp(-1.0 / scale)
    var = 2 * q / (1 - q) ** 2
    m4 = 2 * q * (1 + 10 * q + q * q) / (1 - q) ** 4
    assert abs(x.mean()) / math.sqrt(var / n) < 5
    assert abs(np.mean(x**2) - var) / math.sqrt((m4 - var**2) / n) < 5


@pytest.mark.parametrize("sigma", [2.0**30 + 0.3, 2.0**40])
def test_discrete_gaussian_large_sigma_is_normal(sigma):
    # At σ ≥ 2^30 the discrete Gaussian is within ~1/σ (Kolmogorov distance) of N(0, σ²).
    x = discrete_gaussian(sigma, 20_000, RandomSource.from_seed(b"big", str(sigma).encode()))
    assert stats.kstest(x / sigma, "norm").pvalue > P_MIN


def test_discrete_laplace_large_scale_is_laplace():
    b = 2.0**40
    x = discrete_laplace(b, 20_000, RandomSource.from_seed(b"biglap"))
    assert stats.kstest(x / b, "laplace").pvalue > P_MIN


def test_discrete_laplace_tiny_scale_is_mostly_zero():
    # scale = 2^-60 has denominator 2^60 (> the numpy path's limits is irrelevant here: X < s ⇒ Y = 0),
    # so P[0] = (1-q)/(1+q) with q = e^{-2^60}: every sample is 0.
    x = discrete_laplace(2.0**-70, 1000, RandomSource.from_seed(b"tiny"))
    assert np.all(x == 0)


def test_floor_div_overflow_path_is_exact():
    # V beyond the int64-safe range falls back to Python integers (probability < e^-512 in practice).
    t = (1 << 53) - 1
    u = np.array([5, 7], dtype=np.int64)
    v = np.array([3, (1 << 10) + 1], dtype=np.int64)
    y = _floor_div(u, v, t, 3)
    assert y.tolist() == [(5 + t * 3) // 3, (7 + t * ((1 << 10) + 1)) // 3]


def test_symmetry_and_support():
    x = discrete_gaussian(1.5, 50_000, RandomSource.from_seed(b"sym"))
    pos, neg = np.sum(x > 0), np.sum(x < 0)
    # sign test: |pos - neg| / sqrt(pos + neg) < 5 (false failure ≈ 5.7e-7)
    assert abs(int(pos) - int(neg)) / math.sqrt(pos + neg) < 5


# ------------------------------------------------------------------------------------------------
# Determinism and the source
# ------------------------------------------------------------------------------------------------
def test_same_seed_same_samples_and_labels_separate():
    a = discrete_gaussian(3.3, 1000, RandomSource.from_seed(b"k", b"one"))
    b = discrete_gaussian(3.3, 1000, RandomSource.from_seed(b"k", b"one"))
    c = discrete_gaussian(3.3, 1000, RandomSource.from_seed(b"k", b"two"))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    d = discrete_laplace(2.0, 1000, RandomSource.from_seed(b"k"))
    e = discrete_laplace(2.0, 1000, RandomSource.from_seed(b"k"))
    np.testing.assert_array_equal(d, e)


def test_system_source_works():
    x = discrete_gaussian(4.0, 100, RandomSource.system())
    assert x.dtype == np.int64 and x.shape == (100,)


def test_size_zero_reads_nothing():
    reads = []
    src = RandomSource(lambda n: reads.append(n) or bytes(n))
    assert discrete_gaussian(2.0, 0, src).shape == (0,)
    assert discrete_laplace(2.0, 0, src).shape == (0,)
    assert reads == [] or sum(reads) == 0


def test_float_sigma_is_read_exactly():
    # σ = 0.1 is the binary rational 3602879701896397/2^55, not 1/10: the samplers use the former.
    from dprag.accounting.noise.discrete import gaussian_variance, laplace_parameter

    assert gaussian_variance(0.1) == Fraction(0.1) ** 2 != Fraction(1, 100)
    assert laplace_parameter(0.1) == Fraction(3602879701896397, 2**55)
    assert gaussian_variance(Fraction(1, 10)) == Fraction(1, 100)


# ------------------------------------------------------------------------------------------------
# The float filter's error bound for γ = (|y| - σ²/t)²/(2σ²) (spec §5)
# ------------------------------------------------------------------------------------------------
def test_gamma_float_error_within_proven_bound():
    rng = np.random.default_rng(7)
    u = 2.0**-53
    sigmas = [0.5, 0.7, 1.0, 3.7, 10.0 / 3, 123.456, 2.0**20 + 0.1, 1e9 / 7, 2.0**40]
    for sigma in sigmas:
        s2 = Fraction(sigma) ** 2
        t = math.isqrt(math.floor(s2))
        while (t + 1) ** 2 <= s2:
            t += 1
        t += 1
        s2_f = float(s2)
        tau_f = s2_f / float(t)
        ys = np.unique(np.concatenate([rng.integers(0, int(30 * sigma) + 3, 300), [0, 1, t, int(s2 / t)]]))
        for y in ys.tolist():
            d = float(y) - tau_f
            g_f = d * d / (2.0 * s2_f)
            g = (y - s2 / t) ** 2 / (2 * s2)
            err = abs(Fraction(g_f) - g)
            assert err <= Fraction(u) * (9 * g + 3), (sigma, y)


# ------------------------------------------------------------------------------------------------
# Bad input: typed errors naming the field, and no randomness consumed
# ------------------------------------------------------------------------------------------------
class CountingSource(RandomSource):
    def __init__(self):
        self.n = 0
        inner = RandomSource.from_seed(b"count")

        def read(k):
            self.n += k
            return inner.bytes(k)

        super().__init__(read)


@pytest.mark.parametrize(
    "sigma", [0, -1.0, float("nan"), float("inf"), "2", True, None, 2.0**41, 2.0**-17, Fraction(-1, 3)]
)
def test_bad_sigma(sigma):
    src = CountingSource()
    with pytest.raises(InvalidParameterError, match="sigma"):
        discrete_gaussian(sigma, 10, src)
    assert src.n == 0


@pytest.mark.parametrize(
    "scale", [0, -2.0, float("nan"), float("inf"), "x", False, 2.0**49, Fraction(2**60 + 1, 2**20)]
)
def test_bad_scale(scale):
    src = CountingSource()
    with pytest.raises(InvalidParameterError, match="scale"):
        discrete_laplace(scale, 10, src)
    assert src.n == 0


@pytest.mark.parametrize("size", [-1, 2.5, "3", True, None])
def test_bad_size(size):
    src = CountingSource()
    with pytest.raises(InvalidParameterError, match="size"):
        discrete_gaussian(1.0, size, src)
    with pytest.raises(InvalidParameterError, match="size"):
        discrete_laplace(1.0, size, src)
    assert src.n == 0


def test_bad_source():
    with pytest.raises(InvalidParameterError, match="source"):
        discrete_gaussian(1.0, 3, np.random.default_rng(0))
    with pytest.raises(InvalidParameterError, match="source"):
        discrete_laplace(1.0, 3, None)
