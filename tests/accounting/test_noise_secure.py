"""Secure (granular) real-valued noise, grid rounding, and the Gumbel helper.

Distribution checks are Kolmogorov–Smirnov tests against scipy's continuous laws (the grid is 2^-40 of
the noise scale, far below what 20 000 samples can resolve); fixed seeds; p-value > 1e-6 (false-failure
probability ≤ 1e-6 per assertion).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from dprag.accounting.noise import RandomSource, gaussian, granularity_for, gumbel, laplace, round_to_grid
from dprag.accounting.noise.secure import ceil_power_of_two, is_power_of_two
from dprag.errors import InvalidParameterError

P_MIN = 1e-6


def test_granularity_for_is_ceil_power_of_two_of_scale_over_2_40():
    assert granularity_for(1.0) == 2.0**-40
    assert granularity_for(2.0**-3) == 2.0**-43
    assert granularity_for(3.0) == 2.0**-38  # 3·2^-40 → next power of two 4·2^-40
    for s in [0.37, 1e-5, 12345.678, 2.0**60]:
        g = granularity_for(s)
        assert is_power_of_two(g)
        assert g >= s * 2.0**-40 > g / 2


def test_ceil_power_of_two_exact():
    assert ceil_power_of_two(1.0) == 1.0
    assert ceil_power_of_two(1.0000000000000002) == 2.0
    assert ceil_power_of_two(0.75) == 1.0
    assert not is_power_of_two(3.0) and not is_power_of_two(0.0) and not is_power_of_two(float("nan"))


@given(
    v=st.floats(min_value=-1e12, max_value=1e12, allow_nan=False),
    k=st.integers(min_value=-60, max_value=10),
)
def test_round_to_grid_is_exact_round_half_up(v, k):
    g = 2.0**k
    got = float(round_to_grid(np.array([v]), g)[0])
    x = Fraction(v) / Fraction(g)
    assert Fraction(got) == math.floor(x + Fraction(1, 2))


def test_round_to_grid_half_up_cases():
    g = 1.0
    vals = np.array([0.5, -0.5, 1.5, 2.5, -2.5, 2.0**52 + 1, -(2.0**52) - 1, 0.49999999999999994])
    np.testing.assert_array_equal(round_to_grid(vals, g), [1, 0, 2, 3, -2, 2.0**52 + 1, -(2.0**52) - 1, 0])


def test_round_to_grid_rejects_bad_input():
    with pytest.raises(InvalidParameterError, match="granularity"):
        round_to_grid([1.0], 3.0)
    with pytest.raises(InvalidParameterError, match="values"):
        round_to_grid([float("nan")], 1.0)
    with pytest.raises(InvalidParameterError, match="granularity"):
        round_to_grid([1e300], 2.0**-100)  # overflow of v/γ


def test_laplace_noise_on_grid_and_laplace_distributed():
    b = 1.7
    x = laplace(b, 20_000, RandomSource.from_seed(b"lap"))
    g = granularity_for(b)
    assert np.all(x / g == np.floor(x / g))
    assert stats.kstest(x / b, "laplace").pvalue > P_MIN


def test_gaussian_noise_on_grid_and_normal():
    s = 0.3
    x = gaussian(s, 20_000, RandomSource.from_seed(b"gau"))
    g = granularity_for(s)
    assert np.all(x / g == np.floor(x / g))
    assert stats.kstest(x / s, "norm").pvalue > P_MIN


def test_coarse_granularity_is_honoured():
    x = gaussian(1.0, 5000, RandomSource.from_seed(b"c"), granularity=0.25)
    assert set(np.unique(x * 4 - np.floor(x * 4))) == {0.0}
    # Var of N_Z(0, 16)/4 is just below 1
    assert 0.9 < x.var() < 1.1  # sd of the estimate ≈ 0.02 → 5 sd margins


def test_gumbel_distribution():
    g = gumbel(50_000, RandomSource.from_seed(b"gumbel"))
    assert np.all(np.isfinite(g))
    assert stats.kstest(g, "gumbel_r").pvalue > P_MIN


def test_gumbel_max_selects_with_softmax_probabilities():
    # argmax(u + G) picks i with probability exp(u_i)/Σ exp(u_j) (exponential mechanism, weights e^u)
    u = np.array([0.0, 1.0, 2.0])
    n = 60_000
    g = gumbel(n * 3, RandomSource.from_seed(b"gm")).reshape(n, 3)
    counts = np.bincount(np.argmax(u + g, axis=1), minlength=3)
    p = np.exp(u) / np.exp(u).sum()
    assert stats.chisquare(counts, p * n).pvalue > P_MIN


@pytest.mark.parametrize("g", [3.0, 0.0, -0.5, float("nan"), float("inf"), "0.5", True])
def test_bad_granularity(g):
    with pytest.raises(InvalidParameterError, match="granularity"):
        laplace(1.0, 3, RandomSource.from_seed(b"x"), granularity=g)
    with pytest.raises(InvalidParameterError, match="granularity"):
        gaussian(1.0, 3, RandomSource.from_seed(b"x"), granularity=g)


def test_granularity_too_fine_for_the_sampler():
    with pytest.raises(InvalidParameterError, match="granularity"):
        gaussian(1.0, 3, RandomSource.from_seed(b"x"), granularity=2.0**-45)  # σ/γ = 2^45 > 2^40
    with pytest.raises(InvalidParameterError, match="granularity"):
        laplace(1.0, 3, RandomSource.from_seed(b"x"), granularity=2.0**-50)  # b/γ = 2^50 > 2^48


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_scale_sigma(bad):
    with pytest.raises(InvalidParameterError, match="scale"):
        laplace(bad, 3, RandomSource.from_seed(b"x"))
    with pytest.raises(InvalidParameterError, match="sigma"):
        gaussian(bad, 3, RandomSource.from_seed(b"x"))


def test_gumbel_bad_args():
    with pytest.raises(InvalidParameterError, match="size"):
        gumbel(-1, RandomSource.from_seed(b"x"))
    with pytest.raises(InvalidParameterError, match="source"):
        gumbel(2, np.random.default_rng(0))
