"""The adversaries of 002 (lab/leakage/adversaries.py) against closed forms and independent computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from dprag.accounting import collusion
from dprag.errors import InvalidParameterError
from dprag.lab.auc import mann_whitney_auc
from dprag.lab.leakage.adversaries import bayes_llr, midpoint_decision, pooled_mean, split_accounts, split_auc


def test_bayes_llr_is_the_gaussian_log_likelihood_ratio():
    ybar = np.linspace(-3, 4, 29)
    s_in, s_out, sigma, m = 1.0, -0.5, 7.0, 40
    se = sigma / math.sqrt(m)
    want = norm.logpdf(ybar, s_in, se) - norm.logpdf(ybar, s_out, se)
    assert np.allclose(bayes_llr(ybar, s_in, s_out, sigma, m), want, rtol=1e-10, atol=1e-10)
    # 002's form (s_out = 0, s_in = Δ): (Δ/σ_e²) ȳ − Δ²/(2σ_e²)
    d = 0.3
    assert np.allclose(bayes_llr(ybar, d, 0.0, sigma, m), d / se**2 * ybar - d * d / (2 * se**2))


def test_lr_auc_equals_pooled_mean_auc_trial_by_trial():
    rng = np.random.default_rng(3)
    k, n, sigma, gap = 5, 200, 30.0, 2.0
    yin = rng.normal(1.0, sigma / math.sqrt(k * n), 3000)
    yout = rng.normal(1.0 - gap, sigma / math.sqrt(k * n), 3000)
    a = mann_whitney_auc(yin, yout)
    b = mann_whitney_auc(bayes_llr(yin, 1.0, -1.0, sigma, k * n), bayes_llr(yout, 1.0, -1.0, sigma, k * n))
    assert a.auc == b.auc and a.stderr == b.stderr


def test_midpoint_test_has_the_advantage_of_theorem_3_5():
    # advantage = TPR − FPR of the midpoint test = 2Φ(Δ√(kn)/(2σ)) − 1 (collusion.thm_3_5_advantage).
    # 200,000 draws per world: SE of the advantage ≈ 0.0022; tolerance 5 SE (false-failure rate < 1e-6).
    rng = np.random.default_rng(11)
    k, n, sigma, gap = 3, 100, 20.0, 1.0
    N = 200_000
    yin = pooled_mean(rng.normal(1.0, sigma, (N // 100, 1)).repeat(1, 1))  # shape check of pooled_mean
    assert yin.shape == (N // 100,)
    yin = rng.normal(1.0, sigma / math.sqrt(k * n), N)
    yout = rng.normal(1.0 - gap, sigma / math.sqrt(k * n), N)
    adv = np.mean(midpoint_decision(yout, 1.0, 1.0 - gap)) - np.mean(midpoint_decision(yin, 1.0, 1.0 - gap))
    assert adv == pytest.approx(collusion.thm_3_5_advantage(k, n, sigma, gap), abs=5 * 0.0022)


def test_pooled_mean_is_the_mean_over_the_last_axis():
    a = np.arange(24.0).reshape(2, 3, 4)
    assert np.array_equal(pooled_mean(a), a.mean(axis=-1))


def test_split_accounts_and_split_auc():
    assert [split_accounts(k, 0.5) for k in (1, 2, 5, 10, 20)] == [1, 1, 3, 5, 10]
    assert [split_accounts(k, 0.25) for k in (1, 2, 5, 10, 20)] == [1, 1, 2, 3, 5]
    assert split_accounts(7, 1.0) == 7
    k, n, sigma, gap = 20, 1000, 500.0, 2.0
    for rho in (1.0, 0.5, 0.25):
        kt = split_accounts(k, rho)
        # the split adversary is the pooled-mean adversary of its k_t accounts
        assert split_auc(k, n, sigma, gap, rho) == pytest.approx(collusion.pooled_mean_auc(kt, n, sigma, gap))
        assert split_auc(k, n, sigma, gap, rho) <= collusion.pooled_mean_auc(k, n, sigma, gap)


def test_split_statistic_monte_carlo():
    # the statistic uses only the k_t target accounts' releases; 4000 trials, AUC SE ≈ 0.006, tolerance 4 SE
    rng = np.random.default_rng(5)
    k, n, sigma, gap, rho = 8, 50, 40.0, 2.0, 0.25
    kt = split_accounts(k, rho)
    T = 4000
    zin = rng.normal(0, sigma, (T, k, n))
    zout = rng.normal(0, sigma, (T, k, n))
    yin = (1.0 + zin[:, :kt, :]).reshape(T, -1).mean(axis=1)
    yout = (1.0 - gap + zout[:, :kt, :]).reshape(T, -1).mean(axis=1)
    est = mann_whitney_auc(yin, yout)
    assert abs(est.auc - split_auc(k, n, sigma, gap, rho)) < 4 * est.stderr


def test_bad_input():
    with pytest.raises(InvalidParameterError, match="rho"):
        split_accounts(5, 0.0)
    with pytest.raises(InvalidParameterError, match="s_in"):
        midpoint_decision([0.0], 0.0, 1.0)
    with pytest.raises(InvalidParameterError, match="sigma"):
        bayes_llr([0.0], 1.0, 0.0, -1.0, 10)
