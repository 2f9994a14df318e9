"""Issue 8 §2 (accounting side): dp_accounting interop both ways, one BudgetExhaustedError hierarchy,
RandomSource helpers for test writers, and accounting.testing's pytest plugin.

Deterministic except the sampler sanity checks, which are seeded; each states its false-failure rate.
"""

import math

import dp_accounting as dpa
import numpy as np
import pytest

from dprag.accounting import events as ev_mod
from dprag.accounting.composition import MixedAccountant, PldAccountant, PureDpAccountant, RdpAccountant
from dprag.accounting.events import DiscreteGaussianEvent
from dprag.accounting.mechanisms.sparse_vector import SparseVector
from dprag.accounting.noise.source import RandomSource
from dprag.errors import BudgetExhaustedError, DpragError, UnsupportedEventError

ACCOUNTANTS = [RdpAccountant, MixedAccountant, PldAccountant, PureDpAccountant]


def _eps(acc, delta=1e-6):
    return acc.get_epsilon() if isinstance(acc, PureDpAccountant) else acc.get_epsilon(delta)


def test_accountants_accept_dp_accounting_events_and_agree_with_it():
    e = dpa.ComposedDpEvent(
        [dpa.GaussianDpEvent(2.0), dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(3.0), 4), dpa.NoOpDpEvent()]
    )
    assert RdpAccountant().compose(e).get_epsilon(1e-6) == pytest.approx(
        dpa.rdp.RdpAccountant().compose(e).get_epsilon(1e-6), rel=1e-9
    )
    assert PldAccountant().compose(e).get_epsilon(1e-6) == pytest.approx(
        dpa.pld.PLDAccountant().compose(e).get_epsilon(1e-6), rel=1e-9
    )
    assert MixedAccountant().compose(e).get_epsilon(1e-6) <= RdpAccountant().compose(e).get_epsilon(1e-6) + 1e-12
    # pure DP: Laplace(3) x4 and randomized response (p = 0.5, 2 buckets: ε = ln 3)
    pure = PureDpAccountant().compose(dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(3.0), 4))
    pure.compose(dpa.RandomizedResponseDpEvent(0.5, 2))
    assert pure.get_epsilon() >= 4 / 3 + math.log(3) and pure.get_epsilon() == pytest.approx(4 / 3 + math.log(3))


@pytest.mark.parametrize("make", ACCOUNTANTS)
@pytest.mark.parametrize(
    "bad",
    [
        dpa.NonPrivateDpEvent(),
        dpa.UnsupportedDpEvent(),
        dpa.SampledWithReplacementDpEvent(100, 10, dpa.GaussianDpEvent(1.0)),
    ],
)
def test_unsupported_dp_accounting_events_are_refused_by_name(make, bad):
    acc = make()
    with pytest.raises(UnsupportedEventError, match=type(bad).__name__):
        acc.compose(bad)


def test_discrete_gaussian_as_zcdp_both_ways():
    dg = DiscreteGaussianEvent(2.0, 1)
    z = dg.to_dp_event()
    assert isinstance(z, dpa.ZCDpEvent)
    back = ev_mod.from_dp_event(z)
    assert isinstance(back, ev_mod.ZCDpEvent) and back.rho == pytest.approx(1 / 8)
    ours = RdpAccountant().compose(z, 5).get_epsilon(1e-6)
    theirs = dpa.rdp.RdpAccountant().compose(z, 5).get_epsilon(1e-6)
    assert ours == pytest.approx(theirs, rel=1e-9)
    assert ours == pytest.approx(RdpAccountant().compose(dg, 5).get_epsilon(1e-6), rel=1e-12)
    with pytest.raises(UnsupportedEventError, match="ZCDpEvent"):
        PldAccountant().compose(z)
    with pytest.raises(UnsupportedEventError):
        PureDpAccountant().compose(z)


def test_budget_exhausted_is_one_documented_hierarchy():
    from dprag.audit.protocol.errors import RateLimitError

    assert issubclass(RateLimitError, BudgetExhaustedError) and issubclass(BudgetExhaustedError, DpragError)
    assert "rate limit" in BudgetExhaustedError.__doc__ or "query allowance" in BudgetExhaustedError.__doc__
    sv = SparseVector(0.0, 50.0, 1, source=RandomSource.from_seed(b"sv", b"x"))
    while not sv.halted:
        sv.test(100)  # far above the threshold: a discovery (ε = 50: noise scale 0.04)
    with pytest.raises(BudgetExhaustedError) as info:
        sv.test(0)
    assert (info.value.budget, info.value.limit, info.value.used) == ("max_discoveries", 1, 1)
    assert str(BudgetExhaustedError("x")) == "x"  # a plain message still works (subclasses pass one)


def test_random_source_helpers_for_test_writers():
    from dprag.accounting.testing import seeded_source

    s = seeded_source("helpers")
    u = s.uniform01()
    assert isinstance(u, float) and 0.0 <= u < 1.0
    assert isinstance(s.laplace(1.0), float) and isinstance(s.gaussian(1.0), float)
    assert isinstance(s.discrete_laplace(2.0), int) and isinstance(s.discrete_gaussian(2.0), int)
    assert isinstance(s.integers(7), int) and 0 <= s.integers(7) < 7
    assert seeded_source("a", "b").uniform01() == seeded_source("a", "b").uniform01()  # seeded: reproducible
    # variances: n = 20 000 draws; |sample var − σ²| > 6·sd(var) has probability < 1e-8 each (seeded anyway)
    n = 20_000
    for draw, var, kurt in (
        (s.discrete_gaussian(3.0, n), 9.0, 3.0),
        (s.gaussian(3.0, n), 9.0, 3.0),
        (s.laplace(2.0, n), 8.0, 6.0),
    ):
        x = np.asarray(draw, dtype=np.float64)
        sd = var * math.sqrt((kurt - 1) / n)
        assert abs(x.var() - var) <= 6 * sd


def test_pytest_plugin_registers_the_hypothesis_profile(pytestconfig):
    from hypothesis import HealthCheck, settings

    from dprag.accounting.testing import pytest_plugin

    pytest_plugin._register()
    prof = settings.get_profile(pytest_plugin.PROFILE)
    assert prof.deadline is None and prof.derandomize
    assert HealthCheck.too_slow in prof.suppress_health_check
