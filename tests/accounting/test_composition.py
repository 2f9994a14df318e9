"""Accountants of accounting/composition: cross-checked against dp_accounting, exact GDP and brute force."""

import math

import dp_accounting
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.stats import norm

from dprag.accounting.composition import (
    MixedAccountant,
    PldAccountant,
    PureDpAccountant,
    RdpAccountant,
    basic_composition,
    dp_terms,
    epsilon_with_tv,
    optimal_composition_epsilon,
)
from dprag.accounting.events import (
    ApproxDpEvent,
    ApproxRdpEvent,
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    ExponentialMechanismEvent,
    GaussianEvent,
    LaplaceEvent,
    NoOpEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    PureDpEvent,
    RdpCurveEvent,
    SelfComposedEvent,
)
from dprag.accounting.rdp import DEFAULT_ORDERS, pure_dp_rdp, rdp_to_delta, rdp_to_epsilon
from dprag.errors import InvalidParameterError, UnsupportedEventError

ORDERS = np.array(DEFAULT_ORDERS)


# ----------------------------------------------------------------------------------------------------------
# independent oracles
# ----------------------------------------------------------------------------------------------------------


def gdp_delta(eps, mu):
    """Exact δ(ε) of μ-GDP (Balle & Wang 2018 Thm 8; Dong, Roth, Su 2022 Cor. 2.13)."""
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps + norm.logcdf(-eps / mu - mu / 2))


def gdp_epsilon(delta, mu):
    if gdp_delta(0.0, mu) <= delta:
        return 0.0
    return brentq(lambda e: gdp_delta(e, mu) - delta, 0.0, mu * mu / 2 + 12 * mu + 50, xtol=1e-14, rtol=1e-14)


def to_dpa(event):
    """Our event → dp_accounting DpEvent, written here independently of events.to_dp_event."""
    if isinstance(event, GaussianEvent):
        return dp_accounting.GaussianDpEvent(event.sigma / event.sensitivity)
    if isinstance(event, LaplaceEvent):
        return dp_accounting.LaplaceDpEvent(event.scale / event.sensitivity)
    if isinstance(event, ComposedEvent):
        return dp_accounting.ComposedDpEvent([to_dpa(e) for e in event.events])
    if isinstance(event, SelfComposedEvent):
        return dp_accounting.SelfComposedDpEvent(to_dpa(event.event), event.count)
    if isinstance(event, PoissonSampledEvent):
        return dp_accounting.PoissonSampledDpEvent(event.sampling_probability, to_dpa(event.event))
    raise AssertionError(event)


# ----------------------------------------------------------------------------------------------------------
# strategies
# ----------------------------------------------------------------------------------------------------------

sensitivities = st.sampled_from([1.0, 0.5, 2.0])
gaussians = st.builds(GaussianEvent, sigma=st.floats(0.5, 50.0), sensitivity=sensitivities)
laplaces = st.builds(LaplaceEvent, scale=st.floats(0.5, 50.0), sensitivity=sensitivities)
sampled = st.builds(
    PoissonSampledEvent,
    sampling_probability=st.floats(1e-3, 1.0),
    event=st.one_of(
        st.builds(GaussianEvent, sigma=st.floats(0.6, 20.0)),
        st.lists(st.builds(GaussianEvent, sigma=st.floats(0.8, 20.0)), min_size=1, max_size=3).map(ComposedEvent),
    ),
)
rdp_leaves = st.one_of(gaussians, laplaces, sampled)


def trees(leaves, max_count=50, max_leaves=6):
    return st.recursive(
        leaves,
        lambda ch: st.one_of(
            st.lists(ch, min_size=1, max_size=4).map(ComposedEvent),
            st.builds(SelfComposedEvent, event=ch, count=st.integers(1, max_count)),
        ),
        max_leaves=max_leaves,
    )


# ----------------------------------------------------------------------------------------------------------
# RdpAccountant vs dp_accounting
# ----------------------------------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    events=st.lists(st.tuples(trees(rdp_leaves), st.integers(1, 20)), min_size=1, max_size=3),
    log_delta=st.floats(-12, -2),
    eps_target=st.floats(0.05, 30.0),
)
def test_rdp_accountant_agrees_with_dp_accounting(events, log_delta, eps_target):
    ours = RdpAccountant()
    theirs = dp_accounting.rdp.RdpAccountant()
    for ev, count in events:
        ours.compose(ev, count)
        theirs.compose(to_dpa(ev), count)
    delta = 10.0**log_delta
    their_rdp = np.asarray(theirs._rdp)
    # where dp_accounting's Poisson-subsampled series is inf or negative, ours takes the unsampled curve / 0
    # (rdp.py), which is valid and can only be lower. Elsewhere: equal.
    assert np.all(ours.rdp <= np.maximum(their_rdp, 0) * (1 + 1e-9) + 1e-300)
    if np.all(np.isfinite(their_rdp)) and np.all(their_rdp >= 0):
        np.testing.assert_allclose(ours.rdp, their_rdp, rtol=1e-9)
        assert ours.get_epsilon(delta) == pytest.approx(theirs.get_epsilon(delta), rel=1e-6, abs=1e-12)
        assert ours.get_delta(eps_target) == pytest.approx(theirs.get_delta(eps_target), rel=1e-6, abs=1e-300)
    else:
        assert ours.get_epsilon(delta) <= theirs.get_epsilon(delta) * (1 + 1e-6) + 1e-12
    # the standard (Mironov) conversion is never tighter than the improved one
    assert ours.get_epsilon(delta, "standard") >= ours.get_epsilon(delta) * (1 - 1e-12)


@settings(max_examples=10, deadline=None)
@given(
    events=st.lists(
        st.tuples(trees(st.one_of(gaussians, laplaces), max_count=5, max_leaves=3), st.integers(1, 3)),
        min_size=1,
        max_size=2,
    ),
    log_delta=st.floats(-10, -3),
)
def test_pld_accountant_agrees_with_dp_accounting_and_is_below_rdp(events, log_delta):
    ours = PldAccountant()
    theirs = dp_accounting.pld.PLDAccountant()
    rdp = RdpAccountant()
    for ev, count in events:
        ours.compose(ev, count)
        theirs.compose(to_dpa(ev), count)
        rdp.compose(ev, count)
    delta = 10.0**log_delta
    pld_eps = ours.get_epsilon(delta)
    assert pld_eps == pytest.approx(theirs.get_epsilon(delta), rel=1e-9, abs=1e-12)
    # Both are upper bounds, so this is not a theorem: the PLD is near-exact while the RDP conversion keeps a
    # slack of several percent at these sizes; 6e-4 allows for the PLD's pessimistic rounding (1e-4 per step).
    assert pld_eps <= rdp.get_epsilon(delta) + 6 * 1e-4


@pytest.mark.parametrize(
    "sigmas,delta",
    [
        ((1.0,), 1e-5),
        ((2.0, 3.0, 0.8), 1e-6),
        ((5.0,) * 12, 1e-8),
        ((0.7, 12.0, 12.0, 3.3), 1e-3),
    ],
)
def test_exact_gdp_between_pld_bounds_and_below_rdp(sigmas, delta):
    """Composition of Gaussians is exactly μ-GDP with μ = sqrt(Σ 1/σ_i²): its ε must lie between dp_accounting's
    optimistic and pessimistic PLD estimates, and below every RDP conversion."""
    from dp_accounting.pld import privacy_loss_distribution as pld_mod

    mu = math.sqrt(sum(1 / s**2 for s in sigmas))
    exact = gdp_epsilon(delta, mu)
    bounds = []
    for pessimistic in (False, True):
        dist = None
        for s in sigmas:
            d = pld_mod.from_gaussian_mechanism(s, pessimistic_estimate=pessimistic, value_discretization_interval=1e-4)
            dist = d if dist is None else dist.compose(d)
        bounds.append(dist.get_epsilon_for_delta(delta))
    lo, hi = bounds
    assert lo - 1e-9 <= exact <= hi + 1e-9
    assert hi - lo <= len(sigmas) * 2e-4 + 1e-6  # discretisation: one grid step per composed PLD each way
    acc = PldAccountant()
    rdp = RdpAccountant()
    for s in sigmas:
        acc.compose(GaussianEvent(s))
        rdp.compose(GaussianEvent(s))
    assert acc.get_epsilon(delta) == pytest.approx(hi, rel=1e-6)  # same PLD, FFT rounding aside
    assert rdp.get_epsilon(delta) >= exact
    assert rdp.get_epsilon(delta, "standard") >= rdp.get_epsilon(delta)
    # and the δ(ε) direction: RDP's δ at the exact ε is at least the exact δ
    assert rdp.get_delta(exact) >= delta * (1 - 1e-9)


# ----------------------------------------------------------------------------------------------------------
# additive δ, sampler TV, (ε, δ)-only events
# ----------------------------------------------------------------------------------------------------------


def test_approx_rdp_delta_is_added_to_the_total():
    acc = RdpAccountant()
    acc.compose(ApproxRdpEvent(GaussianEvent(4.0), 2e-7), 3)
    acc.compose(GaussianEvent(2.0))
    assert acc.additive_delta == pytest.approx(6e-7)
    expected, _ = rdp_to_epsilon(3 * ORDERS / 32 + ORDERS / 8, ORDERS, 1e-5 - 6e-7)
    assert acc.get_epsilon(1e-5) == pytest.approx(expected, rel=1e-12)
    assert acc.get_epsilon(6e-7) == math.inf  # no δ left for the conversion
    d, _ = rdp_to_delta(3 * ORDERS / 32 + ORDERS / 8, ORDERS, 2.0)
    assert acc.get_delta(2.0) == pytest.approx(d + 6e-7, rel=1e-12)


def test_approx_dp_event_is_delta_approximate_pure_dp():
    acc = RdpAccountant()
    acc.compose(ApproxDpEvent(0.4, 1e-7), 5)
    np.testing.assert_allclose(acc.rdp, 5 * pure_dp_rdp(0.4, ORDERS))
    assert acc.additive_delta == pytest.approx(5e-7)
    # a valid guarantee never beats the exact optimal composition of five (0.4, 1e-7)-DP mechanisms
    assert acc.get_epsilon(1e-5) >= optimal_composition_epsilon(1e-5, [0.4], [1e-7], [5]) - 1e-12


@settings(max_examples=30, deadline=None)
@given(sigma=st.floats(0.5, 20.0), count=st.integers(1, 500), log_tv=st.floats(-30, -8), log_delta=st.floats(-9, -2))
def test_sampler_tv_solver_is_valid_and_minimal(sigma, count, log_tv, log_delta):
    tv, delta = 10.0**log_tv, 10.0**log_delta
    acc = RdpAccountant().compose(DiscreteGaussianEvent(sigma, 1, sampler_tv=tv), count)
    assert acc.sampler_tv == pytest.approx(count * tv)
    eps = acc.get_epsilon(delta)
    rdp = count * ORDERS / (2 * sigma * sigma)
    if eps == math.inf:
        # then no order reaches δ even at the best ε: check on a fine ε grid
        grid = np.linspace(0, 200, 4001)
        assert all(rdp_to_delta(rdp, ORDERS, e)[0] + (1 + math.exp(e)) * count * tv > delta for e in grid)
        return
    # valid: the δ actually spent at ε is within the target
    assert rdp_to_delta(rdp, ORDERS, eps)[0] + (1 + math.exp(eps)) * count * tv <= delta * (1 + 1e-9)
    # minimal: slightly below ε, no order meets the target
    if eps > 1e-6:
        e2 = eps * (1 - 1e-6)
        assert rdp_to_delta(rdp, ORDERS, e2)[0] + (1 + math.exp(e2)) * count * tv > delta
    # with tv → 0 it is the plain conversion
    assert epsilon_with_tv(rdp, ORDERS, delta, 0.0)[0] == pytest.approx(rdp_to_epsilon(rdp, ORDERS, delta)[0])


# ----------------------------------------------------------------------------------------------------------
# PureDpAccountant, MixedAccountant, PldAccountant for (ε, δ) events
# ----------------------------------------------------------------------------------------------------------


def test_pure_dp_accountant_is_basic_composition():
    acc = PureDpAccountant()
    acc.compose(ComposedEvent((LaplaceEvent(2.0), ExponentialMechanismEvent(0.3), NoOpEvent())), 3)
    acc.compose(DiscreteLaplaceEvent(4.0, 2))
    acc.compose(ApproxDpEvent(0.25, 0.0))
    acc.compose(PoissonSampledEvent(0.1, PureDpEvent(1.0)))
    expected = 3 * (0.5 + 0.3) + 0.5 + 0.25 + math.log1p(0.1 * math.expm1(1.0))
    assert acc.epsilon == pytest.approx(expected, rel=1e-12)
    for bad in [GaussianEvent(1.0), ApproxDpEvent(0.1, 1e-6), ApproxRdpEvent(PureDpEvent(0.1), 1e-9)]:
        with pytest.raises(UnsupportedEventError):
            acc.compose(bad)
    assert acc.epsilon == pytest.approx(expected, rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(
    eps=st.lists(st.sampled_from([0.01, 0.05, 0.1, 0.3, 1.0]), min_size=1, max_size=3),
    counts=st.lists(st.integers(1, 60), min_size=3, max_size=3),  # ≤ 61³ loss states: the exact rule applies
    with_gauss=st.booleans(),
    log_delta=st.floats(-10, -3),
)
def test_mixed_accountant_reports_the_best_valid_rule(eps, counts, with_gauss, log_delta):
    delta = 10.0**log_delta
    mixed = MixedAccountant()
    rdp = RdpAccountant()
    for e, c in zip(eps, counts, strict=False):
        mixed.compose(PureDpEvent(e), c)
        rdp.compose(PureDpEvent(e), c)
    if with_gauss:
        mixed.compose(GaussianEvent(3.0), 10)
        rdp.compose(GaussianEvent(3.0), 10)
    cands = mixed.candidates(delta)
    assert cands["rdp"] == pytest.approx(rdp.get_epsilon(delta), rel=1e-12)
    if with_gauss:
        assert set(cands) == {"rdp"} and mixed.dp_terms is None and mixed.gdp_mu is None
    else:
        exact = optimal_composition_epsilon(delta, eps, None, counts[: len(eps)])
        assert cands["optimal"] == pytest.approx(exact, rel=1e-12)
        # the exact optimum is a lower bound on every valid rule, so also on the RDP one
        assert exact <= cands["rdp"] * (1 + 1e-9)
        assert exact <= basic_composition(eps, None, counts[: len(eps)])[0] * (1 + 1e-12)
    best = mixed.get_epsilon(delta)
    assert best == min(cands.values())
    # δ direction: the mixed δ at the reported ε never exceeds the target
    assert mixed.get_delta(best) <= delta * (1 + 1e-6)


@pytest.mark.parametrize("sigmas,delta", [((1.0,), 1e-5), ((2.0, 3.0, 0.8), 1e-6), ((0.7, 12.0, 4.0), 1e-3)])
def test_mixed_accountant_uses_exact_gdp_for_gaussian_compositions(sigmas, delta):
    mixed = MixedAccountant()
    for s in sigmas:
        mixed.compose(ComposedEvent((GaussianEvent(s), NoOpEvent())), 3)
    mu = math.sqrt(3 * sum(1 / s**2 for s in sigmas))
    assert mixed.gdp_mu == pytest.approx(mu, rel=1e-14)
    exact = gdp_epsilon(delta, mu)
    eps, rule = mixed.get_epsilon_and_rule(delta)
    assert rule == "gdp"
    assert exact <= eps <= exact * (1 + 1e-9) + 1e-12  # certified: never below the exact value
    assert eps < mixed.candidates(delta)["rdp"]
    assert mixed.get_delta(eps) <= delta * (1 + 1e-9)
    assert mixed.get_delta(exact) >= gdp_delta(exact, mu) * (1 - 1e-9)
    # anything non-Gaussian switches the rule off (and state stays consistent)
    mixed.compose(LaplaceEvent(5.0))
    assert mixed.gdp_mu is None and "gdp" not in mixed.candidates(delta)


def test_mixed_accountant_falls_back_to_kov_past_the_state_cap():
    mixed = MixedAccountant(max_states=1000)
    mixed.compose(PureDpEvent(0.1), 40)
    mixed.compose(PureDpEvent(0.2), 40)  # 41 × 41 = 1681 states > 1000
    cands = mixed.candidates(1e-6)
    assert set(cands) == {"rdp", "kov"}
    exact = optimal_composition_epsilon(1e-6, [0.1, 0.2], None, [40, 40])
    assert exact <= cands["kov"] <= 40 * 0.3 + 1e-12
    assert mixed.get_delta(cands["kov"]) <= 1e-6 * (1 + 1e-9)


def test_pld_accountant_handles_eps_delta_events_soundly():
    pld = PldAccountant()
    pld.compose(ApproxDpEvent(0.2, 1e-7), 30)
    pld.compose(PureDpEvent(0.1), 20)
    pld.compose(PoissonSampledEvent(0.5, ApproxDpEvent(0.4, 2e-7)))
    amp = math.log1p(0.5 * math.expm1(0.4))
    exact = optimal_composition_epsilon(1e-5, [0.2, 0.1, amp], [1e-7, 0.0, 1e-7], [30, 20, 1])
    got = pld.get_epsilon(1e-5)
    assert exact <= got + 1e-6  # pessimistic PLD of the canonical mechanism: an upper bound (up to FFT rounding)
    assert got <= exact + 51 * 1e-4
    # Laplace + discrete Laplace go through dp_accounting's own PLDs
    a = PldAccountant().compose(ComposedEvent((LaplaceEvent(2.0), DiscreteLaplaceEvent(3.0, 1))))
    b = dp_accounting.pld.PLDAccountant()
    b.compose(dp_accounting.LaplaceDpEvent(2.0))
    b.compose(dp_accounting.dp_event.DiscreteLaplaceDpEvent(1 / 3.0, 1))
    assert a.get_epsilon(1e-6) == pytest.approx(b.get_epsilon(1e-6), rel=1e-12)
    assert a.get_delta(0.3) == pytest.approx(b.get_delta(0.3), rel=1e-12)


def test_dp_terms_flattens_compositions():
    ev = ComposedEvent(
        (
            SelfComposedEvent(PureDpEvent(0.1), 3),
            ApproxDpEvent(0.1, 0.0),
            SelfComposedEvent(ComposedEvent((ApproxDpEvent(0.5, 1e-6), NoOpEvent())), 2),
        )
    )
    assert dict(dp_terms(ev)) == {(0.1, 0.0): 4, (0.5, 1e-6): 2}
    assert dp_terms(ComposedEvent((PureDpEvent(0.1), GaussianEvent(1.0)))) is None


# ----------------------------------------------------------------------------------------------------------
# bad input and unsupported events: typed errors, state unchanged
# ----------------------------------------------------------------------------------------------------------


class _Unknown(PrivacyEvent):
    pass


@pytest.mark.parametrize("make", [RdpAccountant, MixedAccountant, PldAccountant, PureDpAccountant])
def test_unsupported_events_raise_without_changing_state(make):
    acc = make()
    acc.compose(PureDpEvent(0.5))
    before = acc.get_epsilon() if make is PureDpAccountant else acc.get_epsilon(1e-6)
    bad_events = [ComposedEvent((PureDpEvent(1.0), _Unknown())), _Unknown()]
    if make is PldAccountant:
        bad_events += [ApproxRdpEvent(GaussianEvent(1.0), 1e-6), RdpCurveEvent((2.0,), (0.1,))]
    if make is PureDpAccountant:
        bad_events += [GaussianEvent(1.0)]
    for bad in bad_events:
        with pytest.raises(UnsupportedEventError):
            acc.compose(bad)
    after = acc.get_epsilon() if make is PureDpAccountant else acc.get_epsilon(1e-6)
    assert after == before


@pytest.mark.parametrize("make", [RdpAccountant, MixedAccountant, PldAccountant, PureDpAccountant])
@pytest.mark.parametrize("count", [0, -1, 1.5, True, "2"])
def test_bad_count_is_refused(make, count):
    acc = make()
    with pytest.raises(InvalidParameterError) as err:
        acc.compose(PureDpEvent(0.5), count)
    assert err.value.field == "count"
    with pytest.raises(InvalidParameterError):
        acc.compose("not an event")


@pytest.mark.parametrize("make", [RdpAccountant, MixedAccountant, PldAccountant])
def test_bad_queries_are_refused(make):
    acc = make().compose(GaussianEvent(2.0))
    for d in [0.0, 1.0, -1e-6, float("nan"), "x"]:
        with pytest.raises(InvalidParameterError) as err:
            acc.get_epsilon(d)
        assert err.value.field == "delta"
    for e in [-0.1, float("nan"), float("inf")]:
        with pytest.raises(InvalidParameterError) as err:
            acc.get_delta(e)
        assert err.value.field == "epsilon"
    if make is not PldAccountant:
        with pytest.raises(InvalidParameterError) as err:
            acc.get_epsilon(1e-6, method="renyi")
        assert err.value.field == "method"


def test_bad_constructor_arguments():
    with pytest.raises(InvalidParameterError):
        RdpAccountant(orders=[0.5, 2.0])
    with pytest.raises(InvalidParameterError):
        RdpAccountant(orders=[])
    with pytest.raises(InvalidParameterError):
        PldAccountant(value_discretization_interval=0.0)
    with pytest.raises(InvalidParameterError):
        MixedAccountant(max_states=0)
