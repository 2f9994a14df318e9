"""Conversions are upper bounds on the exact privacy profile wherever that is known.

Exact values are computed here independently: μ-GDP's closed form for Gaussian compositions, numerical
integration of the Laplace mechanism's hockey-stick divergence, binomial sums (mpmath) for k-fold randomized
response (the worst case of k-fold ε-DP), and dp_accounting's optimistic PLD as a lower estimate where no
closed form exists (Poisson-subsampled Gaussian).
"""

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate
from scipy.optimize import brentq
from scipy.stats import norm

from dprag.accounting.composition import MixedAccountant, RdpAccountant, zcdp_rdp, zcdp_to_epsilon
from dprag.accounting.events import GaussianEvent, LaplaceEvent, PoissonSampledEvent, PureDpEvent
from dprag.accounting.rdp import DEFAULT_ORDERS, rdp_to_epsilon
from dprag.errors import InvalidParameterError

ORDERS = np.array(DEFAULT_ORDERS)
mpmath.mp.dps = 40


def gdp_delta(eps, mu):
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps + norm.logcdf(-eps / mu - mu / 2))


def gdp_epsilon(delta, mu):
    if gdp_delta(0.0, mu) <= delta:
        return 0.0
    return brentq(lambda e: gdp_delta(e, mu) - delta, 0.0, mu * mu / 2 + 12 * mu + 50, xtol=1e-14, rtol=1e-14)


def laplace_delta(eps, lam):
    """Hockey-stick ∫ max(p(x) − e^ε q(x), 0) dx for Lap(0, λ) vs Lap(1, λ), numerically (both directions agree)."""
    p = lambda x: math.exp(-abs(x) / lam) / (2 * lam)  # noqa: E731
    q = lambda x: math.exp(-abs(x - 1) / lam) / (2 * lam)  # noqa: E731
    f = lambda x: max(p(x) - math.exp(eps) * q(x), 0.0)  # noqa: E731
    # p > e^ε q only for x < (1 − ελ)/2 (empty when ελ ≥ 1)
    cut = (1 - eps * lam) / 2
    if cut <= -50 * lam:
        return 0.0
    val = integrate.quad(f, -np.inf, min(cut, 0.0), epsabs=1e-15, epsrel=1e-12)[0]
    if cut > 0:
        val += integrate.quad(f, 0.0, cut, epsabs=1e-15, epsrel=1e-12)[0]
    return val


def rr_k_fold_delta(eps, k, eps_g):
    """δ(ε_g) of k-fold randomized response(ε) by its binomial privacy-loss distribution, in mpmath."""
    e, g = mpmath.mpf(eps), mpmath.mpf(eps_g)
    p = mpmath.exp(e) / (1 + mpmath.exp(e))
    return float(
        mpmath.fsum(
            mpmath.binomial(k, j) * p ** (k - j) * (1 - p) ** j * (1 - mpmath.exp(g - (k - 2 * j) * e))
            for j in range(k + 1)
            if (k - 2 * j) * e > g
        )
    )


@settings(max_examples=40, deadline=None)
@given(
    sigmas=st.lists(st.floats(0.3, 30.0), min_size=1, max_size=6),
    count=st.integers(1, 200),
    log_delta=st.floats(-12, -2),
)
def test_rdp_epsilon_of_gaussian_composition_is_above_exact_gdp(sigmas, count, log_delta):
    delta = 10.0**log_delta
    acc = RdpAccountant()
    for s in sigmas:
        acc.compose(GaussianEvent(s), count)
    mu = math.sqrt(count * sum(1 / s**2 for s in sigmas))
    exact = gdp_epsilon(delta, mu)
    assert acc.get_epsilon(delta) >= exact - 1e-9
    assert acc.get_epsilon(delta, "standard") >= acc.get_epsilon(delta) - 1e-12
    rho = mu * mu / 2  # the composition is (μ²/2)-zCDP
    assert zcdp_to_epsilon(rho, delta) >= exact - 1e-9
    assert zcdp_to_epsilon(rho, delta, method="standard") >= zcdp_to_epsilon(rho, delta) - 1e-12
    # the continuum optimum over α is at least as good as the grid of orders
    assert zcdp_to_epsilon(rho, delta) <= acc.get_epsilon(delta) + 1e-9
    # δ(ε) direction
    e = exact * 1.05 + 0.01
    assert acc.get_delta(e) >= gdp_delta(e, mu) * (1 - 1e-9)


@pytest.mark.parametrize("lam", [0.5, 1.0, 3.0, 10.0])
def test_rdp_conversion_of_laplace_is_above_the_exact_profile(lam):
    acc = RdpAccountant().compose(LaplaceEvent(lam))
    for eps in [0.0, 0.2 / lam, 0.5 / lam, 0.9 / lam]:
        exact = laplace_delta(eps, lam)
        # closed form of the same profile, as a second independent check: 1 − e^{(ε − 1/λ)/2}
        assert exact == pytest.approx(-math.expm1((eps - 1 / lam) / 2), rel=1e-7, abs=1e-13)
        assert acc.get_delta(eps) >= exact * (1 - 1e-9)
    for delta in [1e-8, 1e-4, 0.05]:
        exact_eps = max(0.0, 1 / lam + 2 * math.log1p(-delta))  # inverse of the closed form
        assert acc.get_epsilon(delta) >= exact_eps - 1e-12


@pytest.mark.parametrize("eps,k", [(0.1, 10), (0.5, 30), (1.0, 5), (0.05, 400)])
def test_pure_dp_conversions_are_above_k_fold_randomized_response(eps, k):
    """k-fold ε-DP is worst-case k-fold randomized response (KOV 2015); every conversion must cover it."""
    acc = RdpAccountant().compose(PureDpEvent(eps), k)
    mixed = MixedAccountant().compose(PureDpEvent(eps), k)
    for e_g in [0.0, 0.3 * k * eps, 0.6 * k * eps]:
        exact = rr_k_fold_delta(eps, k, e_g)
        assert acc.get_delta(e_g) >= exact * (1 - 1e-9)
        assert mixed.get_delta(e_g) == pytest.approx(exact, rel=1e-9, abs=1e-300)  # the optimal rule is exact


@settings(max_examples=8, deadline=None)
@given(q=st.floats(0.005, 0.5), sigma=st.floats(0.8, 5.0), count=st.integers(1, 30), log_delta=st.floats(-9, -3))
def test_rdp_of_subsampled_gaussian_is_above_the_optimistic_pld(q, sigma, count, log_delta):
    from dp_accounting.pld import privacy_loss_distribution as pld_mod

    delta = 10.0**log_delta
    acc = RdpAccountant().compose(PoissonSampledEvent(q, GaussianEvent(sigma)), count)
    lower = pld_mod.from_gaussian_mechanism(
        sigma, sampling_prob=q, pessimistic_estimate=False, value_discretization_interval=1e-3
    ).self_compose(count)
    assert acc.get_epsilon(delta) >= lower.get_epsilon_for_delta(delta) - 1e-9


def test_zcdp_helpers():
    np.testing.assert_allclose(zcdp_rdp(0.3, ORDERS, xi=0.1), 0.1 + 0.3 * ORDERS)
    rho, delta = 0.5, 1e-6
    # standard: Bun–Steinke Prop. 1.3 = the minimum of Mironov's conversion over α (check on a fine grid)
    alphas = 1 + np.logspace(-4, 4, 200_001)
    brute = float(np.min(rho * alphas + math.log(1 / delta) / (alphas - 1)))
    assert zcdp_to_epsilon(rho, delta, method="standard") == pytest.approx(brute, rel=1e-7)
    imp_brute, _ = rdp_to_epsilon(rho * alphas, alphas, delta, "improved")
    assert zcdp_to_epsilon(rho, delta) == pytest.approx(imp_brute, rel=1e-7)
    assert zcdp_to_epsilon(rho, delta) <= imp_brute + 1e-12
    assert zcdp_to_epsilon(0.0, delta) == 0.0
    assert zcdp_to_epsilon(1e-14, 1e-3) == 0.0  # KL rule: δ ≥ sqrt(1 − e^{−ρ})
    for bad in [
        dict(rho=-1.0, delta=1e-6),
        dict(rho=0.5, delta=0.0),
        dict(rho=0.5, delta=1e-6, method="x"),
        dict(rho=float("nan"), delta=1e-6),
        dict(rho=0.5, delta=1e-6, xi=-0.1),
    ]:
        with pytest.raises(InvalidParameterError):
            zcdp_to_epsilon(**bad)


def test_epsilon_is_monotone_in_delta():
    acc = RdpAccountant().compose(GaussianEvent(1.5), 20).compose(LaplaceEvent(4.0), 3)
    deltas = np.logspace(-12, -1, 40)
    eps = [acc.get_epsilon(d) for d in deltas]
    assert all(a >= b - 1e-12 for a, b in zip(eps, eps[1:], strict=False))
    d = [acc.get_delta(e) for e in np.linspace(0, 20, 40)]
    assert all(a >= b - 1e-15 for a, b in zip(d, d[1:], strict=False))
