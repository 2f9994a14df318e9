"""Exact Bernoulli coins: Bern(p) by lazy digit comparison and Bernoulli(exp(-γ)) by CKS Algorithm 1.

Frequencies are checked with exact two-sided binomial tests against the closed-form probabilities
(p, e^{-γ}); fixed seeds; threshold p-value > 1e-6 (false-failure probability ≤ 1e-6 per assertion).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dprag.accounting.noise import RandomSource, bernoulli_exp
from dprag.accounting.noise.bernoulli import (
    bernoulli_exp_fraction,
    bernoulli_exp_minus_one,
    bernoulli_half,
    bernoulli_shared,
)
from dprag.errors import InvalidParameterError

P_MIN = 1e-6


def _binom_ok(k: int, n: int, p: float) -> bool:
    return stats.binomtest(int(k), int(n), p).pvalue > P_MIN


@pytest.mark.parametrize("gamma", [Fraction(3, 10), 0.3, 1, Fraction(7, 3), 5.5])
def test_bernoulli_exp_frequency(gamma):
    n = 200_000
    x = bernoulli_exp(gamma, n, RandomSource.from_seed(b"be", str(gamma).encode()))
    assert x.dtype == bool and x.shape == (n,)
    assert _binom_ok(x.sum(), n, math.exp(-float(Fraction(gamma))))


def test_bernoulli_exp_zero_is_always_one_and_reads_nothing():
    reads = []
    src = RandomSource(lambda k: reads.append(k) or bytes(k))
    assert bernoulli_exp(0, 100, src).all()
    assert sum(reads) == 0


def test_bernoulli_exp_large_gamma():
    x = bernoulli_exp(200, 10_000, RandomSource.from_seed(b"large"))
    assert not x.any()  # P[any 1] = 10^4 e^-200 ≈ 1e-83


def test_exp_minus_one_frequency():
    n = 200_000
    x = bernoulli_exp_minus_one(RandomSource.from_seed(b"e1"), n)
    assert _binom_ok(x.sum(), n, math.exp(-1))


@pytest.mark.parametrize("p", [Fraction(1, 3), Fraction(2, 7), Fraction(999, 1000), Fraction(1, 2**70 + 1)])
def test_shared_frequency(p):
    n = 200_000
    x = bernoulli_shared(RandomSource.from_seed(b"sh", str(p).encode()), p, n)
    assert _binom_ok(x.sum(), n, float(p))


def test_half():
    n = 200_000
    x = bernoulli_half(RandomSource.from_seed(b"half"), n)
    assert _binom_ok(x.sum(), n, 0.5)


def test_per_sample_gamma_frequencies():
    # Mixed γ in one bulk call; each group's frequency must match its own e^{-γ}.
    gammas = [Fraction(1, 10), Fraction(1, 2), Fraction(9, 10), Fraction(0)]
    reps = 50_000
    g = np.repeat(np.array([float(v) for v in gammas]), reps)
    exact = [gammas[i // reps] for i in range(len(gammas) * reps)]
    out = bernoulli_exp_fraction(RandomSource.from_seed(b"mix"), g, g * 2.0**-52, lambda i: exact[i], g == 0.0)
    for j, gm in enumerate(gammas):
        k = int(out[j * reps : (j + 1) * reps].sum())
        if gm == 0:
            assert k == reps
        else:
            assert _binom_ok(k, reps, math.exp(-float(gm)))


@pytest.mark.parametrize("gamma", [-0.1, float("nan"), float("inf"), "1", None, True])
def test_bad_gamma(gamma):
    with pytest.raises(InvalidParameterError, match="gamma"):
        bernoulli_exp(gamma, 3, RandomSource.from_seed(b"x"))


def test_bad_size_and_source():
    with pytest.raises(InvalidParameterError, match="size"):
        bernoulli_exp(1, -2, RandomSource.from_seed(b"x"))
    with pytest.raises(InvalidParameterError, match="source"):
        bernoulli_exp(1, 2, object())
