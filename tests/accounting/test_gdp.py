"""accounting.gdp: exact Gaussian composition (GDP) and the discrete Gaussian's lattice PLD.

Expected values come from independent sources: numerical integration of the privacy-loss distribution,
mpmath at 50 digits, dp_accounting's PLD accountant and calibration, and brute-force enumeration of the
discrete Gaussian's product space.
"""

import math

import dp_accounting
import mpmath
import numpy as np
import pytest
from dp_accounting.pld import accountant as pld_accountant
from dp_accounting.pld import privacy_loss_distribution as pldm
from hypothesis import given
from hypothesis import strategies as st
from scipy import integrate, optimize, signal
from scipy.special import log_ndtr, ndtr

from dprag.accounting import gdp
from dprag.accounting.events import ComposedEvent, GaussianEvent, LaplaceEvent, NoOpEvent, SelfComposedEvent
from dprag.errors import InvalidParameterError, UnsupportedEventError

mpmath.mp.dps = 50


# ---------------------------------------------------------------- independent references


def _delta_by_integration(mu, eps):
    """δ(ε) = E[(1 − e^{ε−L})_+], L ~ N(μ²/2, μ²): the privacy loss of N(0,1) vs N(μ,1), integrated numerically."""
    mean, sd = mu * mu / 2.0, mu

    def f(x):
        return (1.0 - math.exp(eps - x)) * math.exp(-0.5 * ((x - mean) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))

    val, _ = integrate.quad(f, eps, mean + 40 * sd + eps, limit=400, epsabs=0, epsrel=1e-12)
    return val


def _mp_delta(mu, eps):
    mu, eps = mpmath.mpf(mu), mpmath.mpf(eps)
    return mpmath.ncdf(-eps / mu + mu / 2) - mpmath.exp(eps) * mpmath.ncdf(-eps / mu - mu / 2)


def _pld_accountant_epsilon(mu, delta):
    """dp_accounting's PLD accountant on a single Gaussian with noise multiplier 1/μ (= the composition)."""
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier=1.0 / mu))
    return acc.get_epsilon(delta)


# ---------------------------------------------------------------- the scipy primitives the margin relies on


def test_scipy_normal_cdf_accuracy_supports_the_certification_margin():
    # _TAU = 1e-12 assumes Φ and log Φ are accurate to 1e-12 relative (up to the representation of log Φ).
    for x in np.concatenate([np.linspace(-38, 8, 301), -np.logspace(1.6, 4, 40)]):
        ref = mpmath.log(mpmath.ncdf(mpmath.mpf(float(x))))
        got = float(log_ndtr(float(x)))
        assert abs(got - float(ref)) <= gdp._TAU / 2 + 4 * 2**-53 * abs(float(ref)), x
        if x > -37:
            ref_p = mpmath.ncdf(mpmath.mpf(float(x)))
            assert abs(float(ndtr(float(x))) / float(ref_p) - 1) < gdp._TAU / 2, x  # observed max ~2e-13


# ---------------------------------------------------------------- δ(ε) and ε(δ) of μ-GDP


@pytest.mark.parametrize("mu", [0.01, 0.0882, 0.5, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("eps", [0.0, 0.05, 0.5, 2.0, 8.0])
def test_delta_matches_numerical_integration_of_the_privacy_loss(mu, eps):
    ref = _delta_by_integration(mu, eps)
    got = gdp.delta_for_epsilon(mu, eps)
    if ref < 1e-280:
        assert got < 1e-250
    else:
        assert got == pytest.approx(ref, rel=1e-8, abs=1e-300)


def test_delta_vectorised_and_decreasing():
    eps = np.linspace(0, 10, 101)
    d = gdp.delta_for_epsilon(1.3, eps)
    assert d.shape == eps.shape and np.all(np.diff(d) < 0)
    assert d[0] == pytest.approx(2 * ndtr(1.3 / 2) - 1, rel=1e-12)  # δ(0) = TV = 2Φ(μ/2) − 1


@pytest.mark.parametrize("mu,delta", [(0.0882, 1e-6), (0.2789, 1e-6), (1.0, 1e-5), (2.367, 1.01e-4), (3.0, 1e-10)])
def test_epsilon_matches_dp_accounting_pld_accountant(mu, delta):
    ours = gdp.epsilon_for_delta(mu, delta)
    theirs = _pld_accountant_epsilon(mu, delta)  # pessimistic discretisation: not below the exact value
    assert ours <= theirs * (1 + 1e-9)  # (up to dp_accounting's own floating-point root)
    assert ours == pytest.approx(theirs, rel=1e-4, abs=1e-4)


@pytest.mark.parametrize("mu", [1e-6, 1e-3, 0.0882, 1.0, 30.0, 1000.0])
@pytest.mark.parametrize("delta", [1e-300, 1e-12, 1e-6, 0.3])
def test_certified_epsilon_is_verified_at_50_digits(mu, delta):
    exact = gdp.epsilon_for_delta(mu, delta)
    cert = gdp.certified_epsilon_for_delta(mu, delta)
    assert cert >= exact
    # the margin costs ~1e-12 relative in ordinary regimes; in extreme ones (δ/Φ(a) ~ 1e-6) it is amplified
    tight = 1e-9 if (mu >= 1e-3 and delta >= 1e-12) else 1e-6
    assert cert - exact <= tight * max(exact, 1e-3)
    assert _mp_delta(mu, cert) <= delta  # the certificate holds in 50-digit arithmetic
    if exact > 0:
        # and the exact root is the root: just below it δ exceeds the target
        assert _mp_delta(mu, exact * (1 - 1e-9)) > delta


def test_zero_mu_and_small_mu():
    assert gdp.epsilon_for_delta(0.0, 1e-6) == 0.0
    assert gdp.certified_epsilon_for_delta(0.0, 1e-6) == 0.0
    # δ(0) = 2Φ(μ/2) − 1 <= δ  ⇒  ε = 0
    assert gdp.epsilon_for_delta(1e-7, 1e-6) == 0.0


def test_certified_delta_is_above_exact_delta():
    for mu in (0.1, 1.0, 5.0):
        for eps in (0.0, 0.3, 3.0, 30.0):
            assert gdp.certified_delta_for_epsilon(mu, eps) >= float(_mp_delta(mu, eps)) * (1 - 1e-15)


@given(
    mu=st.floats(1e-4, 200.0),
    delta=st.floats(1e-14, 0.5),
    factor=st.floats(1.0001, 4.0),
)
def test_properties_certified_above_exact_and_monotone(mu, delta, factor):
    exact = gdp.epsilon_for_delta(mu, delta)
    cert = gdp.certified_epsilon_for_delta(mu, delta)
    assert exact <= cert <= exact * (1 + 1e-7) + 1e-12  # the margin: ~1e-12 relative, more when μ → 0
    assert gdp.epsilon_for_delta(mu * factor, delta) >= exact  # more releases / less noise: more loss
    assert gdp.epsilon_for_delta(mu, min(delta * factor, 0.9)) <= exact  # larger δ: smaller ε
    # the zCDP conversion is an upper bound on the exact value (Bun–Steinke Prop. 1.3 with ρ = μ²/2)
    assert cert <= mu * mu / 2 + mu * math.sqrt(2 * math.log(1 / delta)) + 1e-9


# ---------------------------------------------------------------- composition


def test_gdp_mu_of_heterogeneous_composition():
    sig = np.array([1.0, 2.0, 4.0])
    sens = np.array([1.0, 1.0, 2.0])
    cnt = np.array([3, 5, 7])
    expect = math.sqrt(3 * 1.0 + 5 * 0.25 + 7 * 0.25)
    assert gdp.gdp_mu(sig, sens, cnt) == pytest.approx(expect, rel=1e-15)
    assert gdp.gdp_mu(2.0, 1.0, 16) == pytest.approx(2.0, rel=1e-15)
    big = np.full(10**6, 3584.392437877454)
    assert gdp.gdp_mu(big) == pytest.approx(1000 / 3584.392437877454, rel=1e-12)


def test_heterogeneous_composition_matches_dp_accounting_pld_composition():
    # Two different Gaussians composed by dp_accounting's PLD (FFT convolution) vs exact GDP.
    p1 = pldm.from_gaussian_mechanism(2.0, value_discretization_interval=1e-4, use_connect_dots=True)
    p2 = pldm.from_gaussian_mechanism(0.7, sensitivity=0.5, value_discretization_interval=1e-4, use_connect_dots=True)
    theirs = p1.compose(p2).get_epsilon_for_delta(1e-6)
    comp = gdp.GaussianComposition.of(np.array([2.0, 0.7]), np.array([1.0, 0.5]), 1)
    assert comp.mu == pytest.approx(math.sqrt(0.25 + (0.5 / 0.7) ** 2), rel=1e-14)
    assert comp.certified_epsilon(1e-6) == pytest.approx(theirs, rel=2e-4)
    assert comp.certified_epsilon(1e-6) <= theirs + 1e-6


def test_mu_of_events():
    ev = ComposedEvent((SelfComposedEvent(GaussianEvent(2.0, 1.0), 4), GaussianEvent(1.0, 1.0), NoOpEvent()))
    assert gdp.gdp_mu_of_event(ev) == pytest.approx(math.sqrt(4 * 0.25 + 1.0))
    with pytest.raises(UnsupportedEventError):
        gdp.gdp_mu_of_event(LaplaceEvent(1.0))


# ---------------------------------------------------------------- calibration


@pytest.mark.parametrize("eps,delta,count", [(1.0, 1e-6, 10_000), (0.5, 1e-5, 1), (4.0, 1e-9, 100)])
def test_sigma_calibration_matches_dp_accounting(eps, delta, count):
    ours = gdp.gaussian_sigma_for(eps, delta, count)
    theirs = pld_accountant.get_smallest_gaussian_noise(
        dp_accounting.pld.common.DifferentialPrivacyParameters(eps, delta), num_queries=count
    )
    assert ours == pytest.approx(theirs, rel=1e-6)
    # and it is certified: the composition at σ is (ε, δ)-DP in 50-digit arithmetic, barely
    mu = math.sqrt(count) / ours
    assert _mp_delta(mu, eps) <= delta
    assert _mp_delta(mu * (1 + 1e-8), eps) > delta


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda: gdp.epsilon_for_delta(1.0, 0.0), "delta"),
        (lambda: gdp.epsilon_for_delta(1.0, 1.0), "delta"),
        (lambda: gdp.epsilon_for_delta(1.0, float("nan")), "delta"),
        (lambda: gdp.epsilon_for_delta(-1.0, 1e-6), "mu"),
        (lambda: gdp.epsilon_for_delta(float("nan"), 1e-6), "mu"),
        (lambda: gdp.delta_for_epsilon(1.0, -0.1), "epsilon"),
        (lambda: gdp.gdp_mu(-1.0), "sigma"),
        (lambda: gdp.gdp_mu(np.array([1.0, np.nan])), "sigma"),
        (lambda: gdp.gdp_mu(np.array([])), "sigma"),
        (lambda: gdp.gdp_mu(1.0, 0.0), "sensitivity"),
        (lambda: gdp.gdp_mu(1.0, 1.0, -3), "count"),
        (lambda: gdp.gdp_mu(np.ones(3), 1.0, np.array([1, 2.5, 1])), "count"),
        (lambda: gdp.gaussian_sigma_for(float("nan"), 1e-6), "epsilon"),
        (lambda: gdp.discrete_gaussian_epsilon(10.0, 1.5, 3, 1e-6), "sensitivity"),
        (lambda: gdp.discrete_gaussian_epsilon(10.0, 1, 0, 1e-6), "count"),
        (lambda: gdp.discrete_gaussian_epsilon(10.0, 1, 3, 2.0), "delta"),
        (lambda: gdp.discrete_gaussian_epsilon(10.0, 1, 3, 1e-6, method="magic"), "method"),
    ],
)
def test_bad_input_is_a_typed_error_naming_the_field(call, field):
    with pytest.raises(InvalidParameterError) as ei:
        call()
    assert ei.value.field == field


# ---------------------------------------------------------------- discrete Gaussian


def _dg_pmf(sigma, T):
    xs = np.arange(-T, T + 1)
    w = np.exp(-0.5 * (xs / sigma) ** 2)
    return xs, w / w.sum()


def _brute_delta_product(sigma, sens, m, eps):
    """δ(ε) = Σ_o (P(o) − e^ε Q(o))_+ over the product space of m releases, Q = P shifted by Δ per coordinate."""
    T = int(math.ceil(14 * sigma)) + sens
    xs, p = _dg_pmf(sigma, T)
    q = np.zeros_like(p)
    q[sens:] = p[:-sens]  # Q(x) = P(x − Δ)
    P, Q = p, q
    for _ in range(m - 1):
        P = np.multiply.outer(P, p).ravel()
        Q = np.multiply.outer(Q, q).ravel()
    return float(np.sum(np.maximum(P - math.exp(eps) * Q, 0.0)))


def _sum_pmf(sigma, m):
    """pmf of S = sum of m i.i.d. N_Z(0, σ²) by FFT convolution (binary powering)."""
    T = int(math.ceil(14 * sigma))
    _, p = _dg_pmf(sigma, T)
    result, base, k = np.array([1.0]), p, m
    while k:
        if k & 1:
            result = signal.fftconvolve(result, base)
        k >>= 1
        if k:
            base = signal.fftconvolve(base, base)
    result = np.maximum(result, 0.0)
    offset = -T * m
    return np.arange(result.size) + offset, result


def _delta_from_sum(sigma, sens, m, eps, s, ps):
    L = (m * sens * sens - 2.0 * s * sens) / (2.0 * sigma * sigma)
    mask = L > eps
    return float(np.sum(ps[mask] * -np.expm1(eps - L[mask])))


@pytest.mark.parametrize("sigma,sens,m", [(6.0, 1, 1), (6.0, 2, 1), (5.0, 1, 2), (7.5, 3, 2)])
def test_dg_lattice_bounds_contain_the_brute_force_product_space_delta(sigma, sens, m):
    for eps in (0.0, 0.05, 0.2, 0.6):
        ref = _brute_delta_product(sigma, sens, m, eps)
        lo, hi = gdp.discrete_gaussian_delta_bounds(sigma, sens, m, eps)
        assert lo <= ref * (1 + 1e-9) + 1e-15 and ref <= hi * (1 + 1e-9) + 1e-15, (eps, lo, ref, hi)


def test_dg_lattice_bounds_are_tight_and_contain_the_convolved_sum_delta():
    sigma, sens, m = 12.0, 1, 400
    s, ps = _sum_pmf(sigma, m)
    for eps in (0.5, 1.5, 3.0):
        ref = _delta_from_sum(sigma, sens, m, eps, s, ps)
        lo, hi = gdp.discrete_gaussian_delta_bounds(sigma, sens, m, eps)
        assert lo <= ref * (1 + 1e-7) and ref <= hi * (1 + 1e-7), (eps, lo, ref, hi)
        assert hi - lo <= 1e-6 * ref


def test_dg_certified_epsilon_brackets_the_brute_force_epsilon():
    sigma, sens, m, delta = 5.0, 1, 2, 1e-3
    ref = optimize.brentq(lambda e: _brute_delta_product(sigma, sens, m, e) - delta, 0.0, 5.0, xtol=1e-12)
    r = gdp.discrete_gaussian_epsilon(sigma, sens, m, delta, method="lattice")
    assert r.lower <= ref + 1e-9 and ref <= r.epsilon + 1e-9
    assert r.epsilon - r.lower < 1e-3


@pytest.mark.parametrize("sigma,sens,m", [(20.0, 1, 1000), (40.0, 3, 200)])
def test_dg_lattice_agrees_with_dp_accounting_discrete_gaussian_pld(sigma, sens, m):
    delta = 1e-6
    r = gdp.discrete_gaussian_epsilon(sigma, sens, m, delta, method="lattice")
    pess = (
        pldm.from_discrete_gaussian_mechanism(sigma, sens, value_discretization_interval=1e-4, use_connect_dots=True)
        .self_compose(m)
        .get_epsilon_for_delta(delta)
    )
    assert r.lower <= r.epsilon <= pess + 1e-9  # dp_accounting's pessimistic PLD is an upper bound too
    assert r.epsilon == pytest.approx(pess, rel=1e-4)
    assert (r.epsilon - r.lower) <= 1e-6 * r.epsilon


def test_dg_pld_method_and_auto_fallback_for_small_sigma():
    r_pld = gdp.discrete_gaussian_epsilon(2.0, 1, 10, 1e-6, method="pld")
    r_auto = gdp.discrete_gaussian_epsilon(2.0, 1, 10, 1e-6)
    assert r_auto.method == "pld" and r_auto.epsilon == pytest.approx(r_pld.epsilon)
    ref = optimize.brentq(lambda e: _brute_delta_product(2.0, 1, 1, e) - 1e-6, 0, 20, xtol=1e-12)
    one = gdp.discrete_gaussian_epsilon(2.0, 1, 1, 1e-6, method="pld")
    assert one.lower - 1e-6 <= ref <= one.epsilon + 1e-9


def test_dg_is_close_to_the_continuous_gaussian_at_large_sigma():
    sigma = 3584.392437877454 * 1000  # (3.4)'s σ with scores quantised to 1/1000
    r = gdp.discrete_gaussian_epsilon(sigma, 1000, 100_000, 1e-6)
    cont = gdp.epsilon_for_delta(math.sqrt(100_000) * 1000 / sigma, 1e-6)
    assert r.method == "lattice"
    assert r.lower <= r.epsilon and r.epsilon == pytest.approx(cont, rel=1e-6)


def test_dg_sampler_tv_costs_delta():
    base = gdp.discrete_gaussian_epsilon(50.0, 1, 100, 1e-6)
    worse = gdp.discrete_gaussian_epsilon(50.0, 1, 100, 1e-6, sampler_tv=1e-9)
    assert worse.epsilon > base.epsilon
    # verify the accounting: δ_hi(ε) + (1 + e^ε)·m·tv <= δ at the returned ε
    hi = gdp.discrete_gaussian_delta_bounds(50.0, 1, 100, worse.epsilon)[1]
    assert hi + (1 + math.exp(worse.epsilon)) * 100 * 1e-9 <= 1e-6
