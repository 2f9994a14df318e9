"""Tests of accounting.mechanisms.subsampling (001 Alg. 9 Poisson subsampling; Zhu–Wang 2019 amplification).

Oracles: dp_accounting's exact RDP of the Poisson-subsampled Gaussian (Mironov, Talwar & Zhang 2019), exact
Rényi divergences of a Poisson-subsampled randomized response computed here in closed form, and exact
binomial tests for the sampling rates (false-failure probability ≤ 1e-6 each, P_FAIL).
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from dprag.accounting.amplification import amplified_pure_epsilon, zhu_wang_general_rdp, zhu_wang_tight_log_moment
from dprag.accounting.events import (
    ApproxDpEvent,
    ApproxRdpEvent,
    ComposedEvent,
    ExponentialMechanismEvent,
    GaussianEvent,
    LaplaceEvent,
    NoOpEvent,
    PoissonSampledEvent,
    PureDpEvent,
    SelfComposedEvent,
)
from dprag.accounting.mechanisms.subsampling import bernoulli, poisson_subsample
from dprag.accounting.noise import RandomSource
from dprag.accounting.rdp import (
    DEFAULT_ORDERS,
    epsilon_of,
    gaussian_rdp,
    poisson_subsampled_rdp,
    pure_dp_rdp,
    rdp_curve,
)
from dprag.errors import InvalidParameterError, UnsupportedEventError

P_FAIL = 1e-6
INT_ORDERS = np.arange(2, 65, dtype=np.float64)


@pytest.mark.parametrize("p", [0.3, 1e-3, 0.999, 0.5])
def test_bernoulli_rate(p):
    n = 200_000
    k = int(bernoulli(p, n, RandomSource.from_seed(b"bern", str(p).encode())).sum())
    assert stats.binomtest(k, n, p).pvalue > P_FAIL


def test_poisson_subsample_keeps_an_ordered_subset_at_rate_p():
    ids = np.arange(1000, 51_000)
    src = RandomSource.from_seed(b"poisson")
    kept = poisson_subsample(ids, 0.05, src)
    assert np.all(np.diff(kept) > 0) and np.isin(kept, ids).all()
    assert stats.binomtest(len(kept), len(ids), 0.05).pvalue > P_FAIL
    # independence across records: the kept count over many small runs is Binomial(20, 0.4)
    sizes = [len(poisson_subsample(np.arange(20), 0.4, src)) for _ in range(3000)]
    obs = np.bincount(sizes, minlength=21)
    exp = 3000 * stats.binom.pmf(np.arange(21), 20, 0.4)
    keep = exp >= 5
    o = np.concatenate((obs[keep], [obs[~keep].sum()]))
    e = np.concatenate((exp[keep], [exp[~keep].sum()]))
    assert stats.chisquare(o, e).pvalue > P_FAIL


def test_poisson_subsample_edge_probabilities():
    src = RandomSource.from_seed(b"poisson-edges")
    assert poisson_subsample(np.arange(10), 0.0, src).size == 0
    np.testing.assert_array_equal(poisson_subsample(np.arange(10), 1.0, src), np.arange(10))
    assert poisson_subsample(np.array([], dtype=np.int64), 0.5, src).size == 0
    assert poisson_subsample(["a", "b", "c"], 1.0, src).tolist() == ["a", "b", "c"]


@pytest.mark.parametrize("p", [float("nan"), -0.1, 1.5, "x", None])
def test_bad_probability(p):
    with pytest.raises(InvalidParameterError) as err:
        poisson_subsample(np.arange(5), p, RandomSource.from_seed(b"bad"))
    assert err.value.field == "probability"


def test_bad_ids_and_sizes():
    with pytest.raises(InvalidParameterError):
        poisson_subsample(np.zeros((2, 2)), 0.5, RandomSource.from_seed(b"bad"))
    with pytest.raises(InvalidParameterError):
        bernoulli(0.5, -1, RandomSource.from_seed(b"bad"))


def test_amplified_pure_epsilon_closed_form():
    for eps in (0.1, 1.0, 5.0, 800.0):
        for p in (1e-4, 0.01, 0.5, 1.0):
            want = math.log(1 + p * (math.exp(eps) - 1)) if eps < 700 else eps + math.log(p)
            assert amplified_pure_epsilon(eps, p) == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert amplified_pure_epsilon(2.0, 0.0) == 0.0


@pytest.mark.parametrize("sigma,q", [(1.0, 0.01), (0.8, 0.1), (2.0, 0.3), (5.0, 0.001)])
def test_tight_formula_matches_dp_accounting_for_the_gaussian(sigma, q):
    acc = dp_accounting.rdp.RdpAccountant(orders=list(INT_ORDERS))
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)))
    oracle = np.asarray(acc._rdp)  # noqa: SLF001
    tight = zhu_wang_tight_log_moment(lambda a: gaussian_rdp(sigma, a), q, INT_ORDERS)
    np.testing.assert_allclose(tight, oracle, rtol=1e-8, atol=1e-14)
    general = zhu_wang_general_rdp(lambda a: gaussian_rdp(sigma, a), q, INT_ORDERS)
    assert np.all(general >= tight - 1e-12)
    assert np.all(general <= tight + math.log(3) / (INT_ORDERS - 1) + 1e-12)  # Zhu–Wang: within log3/(α−1)


def _renyi(p, q, alpha):
    return math.log(np.sum(p**alpha * q ** (1 - alpha))) / (alpha - 1)


@pytest.mark.parametrize("eps", [0.3, 1.0, 3.0])
@pytest.mark.parametrize("gamma", [0.01, 0.2, 0.7])
def test_bound_is_sound_for_subsampled_randomized_response(eps, gamma):
    """ε-randomized response is ε-DP; Poisson-subsampled, the pair is (P, (1−γ)P + γQ) in both directions."""
    e = math.exp(eps)
    P = np.array([e, 1.0]) / (1 + e)
    Q = P[::-1]
    mix = (1 - gamma) * P + gamma * Q
    bound = poisson_subsampled_rdp(PureDpEvent(eps), gamma, INT_ORDERS)
    general = zhu_wang_general_rdp(lambda a: pure_dp_rdp(eps, a), gamma, INT_ORDERS)
    for i, a in enumerate(INT_ORDERS):
        exact = max(_renyi(mix, P, a), _renyi(P, mix, a))
        assert exact <= bound[i] + 1e-12
        assert exact <= general[i] + 1e-12


@pytest.mark.parametrize(
    "inner",
    [
        PureDpEvent(1.0),
        PureDpEvent(6.0),
        LaplaceEvent(2.0),
        ExponentialMechanismEvent(2.0),
        ComposedEvent((PureDpEvent(0.5), ExponentialMechanismEvent(1.0))),
        SelfComposedEvent(PureDpEvent(0.2), 5),
    ],
)
def test_amplified_curve_is_below_the_unamplified_one_and_monotone_in_p(inner):
    a = np.asarray(DEFAULT_ORDERS)
    base = rdp_curve(inner, a)
    prev = np.zeros(a.size)
    for p in (1e-4, 1e-2, 0.1, 0.5, 0.9):
        cur = poisson_subsampled_rdp(inner, p, a)
        assert np.all(cur <= base + 1e-12) and np.all(cur >= 0)
        assert np.all(cur >= prev - 1e-12)
        prev = cur
    np.testing.assert_allclose(poisson_subsampled_rdp(inner, 1.0, a), base)
    np.testing.assert_array_equal(poisson_subsampled_rdp(inner, 0.0, a), 0.0)


def test_amplified_curve_uses_the_pure_dp_bound_where_it_is_better():
    a = np.asarray(DEFAULT_ORDERS)
    eps, p = 0.5, 0.05
    cur = poisson_subsampled_rdp(PureDpEvent(eps), p, a)
    assert np.all(cur <= pure_dp_rdp(amplified_pure_epsilon(eps, p), a) + 1e-15)
    assert np.all(cur <= zhu_wang_general_rdp(lambda x: pure_dp_rdp(eps, x), p, a) + 1e-15)


def test_fractional_orders_use_the_next_integer_order():
    f = lambda x: pure_dp_rdp(2.0, x)  # noqa: E731
    v = zhu_wang_general_rdp(f, 0.1, [1.5, 2.0, 2.5, 3.0, 10.2, 11.0])
    assert v[0] == v[1] and v[2] == v[3] and v[4] == v[5]


def test_rdp_curve_registration():
    a = np.asarray(DEFAULT_ORDERS)
    ev = PoissonSampledEvent(0.02, PureDpEvent(2.0))
    np.testing.assert_array_equal(rdp_curve(ev, a), poisson_subsampled_rdp(PureDpEvent(2.0), 0.02, a))
    lap = PoissonSampledEvent(0.02, LaplaceEvent(1.0))  # dp_accounting cannot amplify Laplace: general bound
    np.testing.assert_array_equal(rdp_curve(lap, a), poisson_subsampled_rdp(LaplaceEvent(1.0), 0.02, a))
    # Gaussian inner: dp_accounting's exact curve, which the general bound must dominate
    g = rdp_curve(PoissonSampledEvent(0.02, GaussianEvent(1.0)), INT_ORDERS)
    assert np.all(zhu_wang_general_rdp(lambda x: gaussian_rdp(1.0, x), 0.02, INT_ORDERS) >= g - 1e-12)
    np.testing.assert_array_equal(rdp_curve(PoissonSampledEvent(0.3, NoOpEvent()), a), 0.0)


def test_subsampling_multi_rag_budget_is_amplified():
    """001 Alg. 9: T queries, each a Poisson-subsampled ε_q-DP DP-RAG (Alg. 7)."""
    T, eps_q, p = 100, 5.0, 0.01
    per_query = PoissonSampledEvent(p, PureDpEvent(eps_q))
    eps, delta = epsilon_of(SelfComposedEvent(per_query, T), 1e-5)
    assert delta == 1e-5
    assert eps < T * amplified_pure_epsilon(eps_q, p)  # better than basic composition of the amplified ε
    assert eps < epsilon_of(SelfComposedEvent(PureDpEvent(eps_q), T), 1e-5)[0]


def test_unsupported_inner_events():
    a = np.asarray(DEFAULT_ORDERS)
    with pytest.raises(UnsupportedEventError):
        rdp_curve(PoissonSampledEvent(0.1, ApproxRdpEvent(PureDpEvent(1.0), 1e-6)), a)
    with pytest.raises(UnsupportedEventError):
        rdp_curve(PoissonSampledEvent(0.1, ApproxDpEvent(1.0, 1e-6)), a)
    with pytest.raises(InvalidParameterError):
        poisson_subsampled_rdp("not an event", 0.1, a)
    with pytest.raises(InvalidParameterError):
        zhu_wang_tight_log_moment(lambda x: gaussian_rdp(1.0, x), 0.1, [2.5])
