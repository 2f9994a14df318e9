"""RDP curves and RDP ↔ (ε, δ) conversions of accounting/rdp.py.

Expected values: numerical Rényi divergences (mpmath quadrature / direct sums over outputs), dp_accounting's
own conversion functions, and closed forms worked out in the test.
"""

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprag.accounting.events import (
    ApproxDpEvent,
    ApproxRdpEvent,
    DiscreteGaussianEvent,
    ExponentialMechanismEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    PureDpEvent,
    RdpCurveEvent,
    SelfComposedEvent,
)
from dprag.accounting.rdp import (
    DEFAULT_ORDERS,
    bounded_range_rdp,
    epsilon_of,
    gaussian_rdp,
    laplace_rdp,
    pure_dp_rdp,
    rdp_curve,
    rdp_to_delta,
    rdp_to_epsilon,
)
from dprag.errors import InvalidParameterError, UnsupportedEventError

ORDERS = np.array(DEFAULT_ORDERS)
mpmath.mp.dps = 50


def renyi_divergence_continuous(logp, logq, alpha, lo, hi, breakpoints=()):
    """D_α(P‖Q) = (1/(α−1)) log ∫ p^α q^{1−α} by mpmath quadrature (50 digits)."""
    mpmath.mp.dps = 50
    a = mpmath.mpf(alpha)
    pts = [lo, *breakpoints, hi]
    integral = mpmath.quad(lambda x: mpmath.exp(a * logp(x) + (1 - a) * logq(x)), pts)
    return float(mpmath.log(integral) / (a - 1))


def rr_renyi(eps, alpha):
    """Rényi divergence of randomized response: P = (p, 1−p), Q = (1−p, p), p = e^ε/(1+e^ε), in mpmath."""
    mpmath.mp.dps = 50
    e, a = mpmath.mpf(eps), mpmath.mpf(alpha)
    p = mpmath.exp(e) / (1 + mpmath.exp(e))
    q = 1 - p
    return float(mpmath.log(p**a * q ** (1 - a) + q**a * p ** (1 - a)) / (a - 1))


# ----------------------------------------------------------------------------------------------------------
# curves
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lam", [0.3, 1.0, 4.0])
@pytest.mark.parametrize("alpha", [1.1, 2.0, 7.5, 32.0])
def test_laplace_rdp_is_the_renyi_divergence(lam, alpha):
    # Lap(0, λ) vs Lap(1, λ): log densities −|x|/λ and −|x−1|/λ (the common normaliser cancels in D_α)
    c = -math.log(2 * lam)
    expected = renyi_divergence_continuous(
        lambda x: c - abs(x) / lam, lambda x: c - abs(x - 1) / lam, alpha, -mpmath.inf, mpmath.inf, breakpoints=(0, 1)
    )
    assert laplace_rdp(lam, np.array([alpha]))[0] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("sigma,alpha", [(0.7, 1.5), (2.0, 3.0), (5.0, 40.0)])
def test_gaussian_rdp_is_the_renyi_divergence(sigma, alpha):
    c = -0.5 * math.log(2 * math.pi * sigma**2)
    expected = renyi_divergence_continuous(
        lambda x: c - x**2 / (2 * sigma**2),
        lambda x: c - (x - 1) ** 2 / (2 * sigma**2),
        alpha,
        -mpmath.inf,
        mpmath.inf,
        breakpoints=(0, 1),
    )
    assert gaussian_rdp(sigma, np.array([alpha]))[0] == pytest.approx(expected, rel=1e-9)


def test_laplace_rdp_matches_dp_accounting_over_a_wide_range():
    from dp_accounting.rdp.rdp_privacy_accountant import _laplace_rdp

    for lam in [1e-2, 0.5, 3.0, 1e2, 1e4, 1e6]:
        ours = laplace_rdp(lam, ORDERS)
        theirs = np.array([_laplace_rdp(1.0 / lam, a) for a in ORDERS])
        np.testing.assert_allclose(ours, theirs, rtol=1e-9)


@settings(max_examples=80, deadline=None)
@given(eps=st.floats(1e-4, 8.0), alpha=st.floats(1.01, 200.0))
def test_sinh_bound_is_below_the_other_pure_dp_bounds_and_exact_for_randomized_response(eps, alpha):
    a = np.array([alpha])
    # the sinh bound alone (pure_dp_rdp returns the min of the three, so recompute it from 004 Thm A.9)
    e, al = mpmath.mpf(eps), mpmath.mpf(alpha)
    sinh = float(mpmath.log((mpmath.sinh(al * e) - mpmath.sinh((al - 1) * e)) / mpmath.sinh(e)) / (al - 1))
    assert sinh <= eps * (1 + 1e-12)
    assert sinh <= alpha * eps * eps / 2 * (1 + 1e-12)
    assert sinh == pytest.approx(rr_renyi(eps, alpha), rel=1e-9, abs=1e-15)
    assert pure_dp_rdp(eps, a)[0] == pytest.approx(sinh, rel=1e-9, abs=1e-15)
    assert bounded_range_rdp(eps, a)[0] <= pure_dp_rdp(eps, a)[0] * (1 + 1e-12)
    assert bounded_range_rdp(eps, a)[0] <= alpha * eps * eps / 8 * (1 + 1e-12)


def test_pure_dp_curve_is_non_decreasing_in_order():
    for eps in [0.01, 0.5, 3.0]:
        c = pure_dp_rdp(eps, ORDERS)
        assert np.all(np.diff(c) >= -1e-15)
        assert c[-1] <= eps


def test_rdp_curve_event_reads_the_next_grid_order_up():
    coarse = (1.5, 2.0, 4.0, 8.0, 16.0)
    ev = RdpCurveEvent(coarse, tuple(gaussian_rdp(3.0, np.array(coarse))))
    fine = np.array([1.2, 1.5, 1.7, 3.0, 8.0, 15.9, 16.5])
    got = rdp_curve(ev, fine)
    # RDP is non-decreasing in α, so each value is at least the exact Gaussian value, and ∞ past the grid
    assert np.all(got[:-1] >= gaussian_rdp(3.0, fine[:-1]))
    np.testing.assert_allclose(got[:-1], gaussian_rdp(3.0, np.array([1.5, 1.5, 2.0, 4.0, 8.0, 16.0])))
    assert got[-1] == np.inf


def test_poisson_sampled_without_an_amplification_bound_raises_our_typed_error():
    # dp_accounting only amplifies Gaussians; other inner events either get a registered bound or our error,
    # never dp_accounting's own exception type
    for inner in [ApproxDpEvent(0.5, 1e-6), ApproxRdpEvent(GaussianEvent(1.0), 1e-6)]:
        with pytest.raises(UnsupportedEventError):
            rdp_curve(PoissonSampledEvent(0.1, inner), ORDERS)
    for inner in [LaplaceEvent(1.0), PureDpEvent(1.0)]:
        try:
            curve = rdp_curve(PoissonSampledEvent(0.1, inner), ORDERS)
        except UnsupportedEventError:
            continue
        # a registered amplification bound never exceeds the unamplified curve
        assert np.all(curve <= rdp_curve(inner, ORDERS) * (1 + 1e-12))


def test_poisson_sampled_gaussian_matches_dp_accounting():
    import dp_accounting

    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)), 7)
    ours = rdp_curve(SelfComposedEvent(PoissonSampledEvent(0.01, GaussianEvent(2.2, 2.0)), 7), ORDERS)
    np.testing.assert_allclose(ours, acc.rdp, rtol=1e-12)


# ----------------------------------------------------------------------------------------------------------
# conversions
# ----------------------------------------------------------------------------------------------------------

curves = st.tuples(st.floats(1e-6, 50.0), st.sampled_from(["gauss", "lap", "pure", "br"]))


def make_curve(scale, kind):
    if kind == "gauss":
        return gaussian_rdp(1.0, ORDERS) * scale
    if kind == "lap":
        return laplace_rdp(1.0 / scale, ORDERS)
    if kind == "pure":
        return pure_dp_rdp(scale, ORDERS)
    return bounded_range_rdp(scale, ORDERS)


@settings(max_examples=80, deadline=None)
@given(c=curves, log_delta=st.floats(-14, -0.5))
def test_rdp_to_epsilon_matches_dp_accounting_and_orders_the_methods(c, log_delta):
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    rdp = make_curve(*c)
    delta = 10.0**log_delta
    eps_imp, _ = rdp_to_epsilon(rdp, ORDERS, delta, "improved")
    eps_std, _ = rdp_to_epsilon(rdp, ORDERS, delta, "standard")
    theirs, _ = compute_epsilon(ORDERS, rdp, delta)
    assert eps_imp == pytest.approx(theirs, rel=1e-9, abs=1e-12)
    # Mironov's Prop. 3 by hand
    assert eps_std == pytest.approx(max(0.0, float(np.min(rdp + math.log(1 / delta) / (ORDERS - 1)))), rel=1e-12)
    assert eps_imp <= eps_std * (1 + 1e-12)


@settings(max_examples=80, deadline=None)
@given(c=curves, eps=st.floats(0.0, 20.0))
def test_rdp_to_delta_matches_dp_accounting_and_inverts_rdp_to_epsilon(c, eps):
    from dp_accounting.rdp.rdp_privacy_accountant import compute_delta

    rdp = make_curve(*c)
    d_imp, _ = rdp_to_delta(rdp, ORDERS, eps, "improved")
    d_std, _ = rdp_to_delta(rdp, ORDERS, eps, "standard")
    # independent reference: min over orders of CKS Prop. 12 and the KL bound, evaluated here in mpmath
    ref = min(
        min(
            mpmath.exp((a - 1) * (mpmath.mpf(r) - eps + mpmath.log(1 - 1 / mpmath.mpf(a))) - mpmath.log(a)),
            mpmath.sqrt(-mpmath.expm1(-mpmath.mpf(r))),
        )
        for a, r in zip(ORDERS, rdp, strict=False)
    )
    assert d_imp == pytest.approx(min(1.0, float(ref)), rel=1e-9, abs=1e-300)
    if c[0] >= 1e-2:
        # dp_accounting evaluates the KL term as log1p(-exp(-R)), which is inaccurate for tiny R
        theirs, _ = compute_delta(ORDERS, rdp, eps)
        assert d_imp == pytest.approx(theirs, rel=1e-8, abs=1e-300)
    assert d_imp <= d_std * (1 + 1e-12) or d_std >= 1.0
    # round trip: ε at (a hair above) δ(ε) is at most ε, and δ at that ε is at most δ
    if 1e-300 < d_imp < 0.5:
        e_back, _ = rdp_to_epsilon(rdp, ORDERS, d_imp * (1 + 1e-9), "improved")
        assert e_back <= eps * (1 + 1e-9) + 1e-12
        assert rdp_to_delta(rdp, ORDERS, e_back, "improved")[0] <= d_imp * (1 + 1e-8)


def test_kl_rule_gives_zero_epsilon_for_tiny_curves():
    rdp = np.full(ORDERS.shape, 1e-12)  # δ > sqrt(1 − e^{−R}) ≈ 1e-6
    assert rdp_to_epsilon(rdp, ORDERS, 1e-5, "improved")[0] == 0.0
    assert rdp_to_epsilon(rdp, ORDERS, 1e-5, "standard")[0] > 0.0
    assert rdp_to_delta(rdp, ORDERS, 0.0, "improved")[0] == pytest.approx(math.sqrt(-math.expm1(-1e-12)), rel=1e-6)


def test_epsilon_of_adds_the_sampler_tv_term():
    ev = DiscreteGaussianEvent(sigma=3.0, sensitivity=1, sampler_tv=1e-10)
    eps, delta_total = epsilon_of(ev, 1e-6)
    eps_exact, _ = rdp_to_epsilon(gaussian_rdp(3.0, ORDERS), ORDERS, 1e-6)
    assert eps == pytest.approx(eps_exact)
    assert delta_total == pytest.approx(1e-6 + (1 + math.exp(eps)) * 1e-10)


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda: rdp_to_epsilon(np.ones(3), np.array([2.0, 3.0, 4.0]), 0.0), "delta"),
        (lambda: rdp_to_epsilon(np.ones(3), np.array([2.0, 3.0, 4.0]), 1.0), "delta"),
        (lambda: rdp_to_epsilon(np.ones(3), np.array([2.0, 3.0, 4.0]), float("nan")), "delta"),
        (lambda: rdp_to_epsilon(np.ones(3), np.array([2.0, 3.0, 4.0]), 1e-5, "mironov"), "method"),
        (lambda: rdp_to_epsilon(np.ones(2), np.array([2.0, 3.0, 4.0]), 1e-5), "rdp"),
        (lambda: rdp_to_delta(np.ones(3), np.array([2.0, 3.0, 4.0]), -1.0), "epsilon"),
        (lambda: rdp_to_delta(np.ones(3), np.array([2.0, 3.0, 4.0]), float("nan")), "epsilon"),
        (lambda: rdp_to_delta(np.ones(3), np.array([2.0, 3.0, 4.0]), 1.0, "x"), "method"),
        (lambda: epsilon_of(GaussianEvent(1.0), 1e-5, orders=[0.5, 2.0]), "orders"),
    ],
)
def test_bad_input_raises_typed_error(call, field):
    with pytest.raises(InvalidParameterError) as err:
        call()
    assert err.value.field == field


def test_exponential_mechanism_curves():
    br = rdp_curve(ExponentialMechanismEvent(0.5, bounded_range=True), ORDERS)
    gen = rdp_curve(ExponentialMechanismEvent(0.5, bounded_range=False), ORDERS)
    np.testing.assert_allclose(br, np.minimum(ORDERS * 0.25 / 8, pure_dp_rdp(0.5, ORDERS)))
    np.testing.assert_allclose(gen, pure_dp_rdp(0.5, ORDERS))
