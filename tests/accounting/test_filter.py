"""IndividualRenyiFilter: units, admission rule, modes, guarantees, unsupported events, bad input.

Expected values are derived independently of accounting/filters.py: integer units with Python
``fractions.Fraction`` arithmetic, closed-form RDP curves, and dp_accounting's RdpAccountant.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as dpa

from dprag.accounting.events import (
    ApproxDpEvent,
    ApproxRdpEvent,
    ComposedEvent,
    DiscreteGaussianEvent,
    ExponentialMechanismEvent,
    GaussianEvent,
    LaplaceEvent,
    NoOpEvent,
    PoissonSampledEvent,
    PureDpEvent,
    RdpCurveEvent,
    SelfComposedEvent,
)
from dprag.accounting.filters import (
    MAX_BUDGET,
    ChargeResult,
    FilterBudget,
    IndividualRenyiFilter,
    cost_to_units,
    pure_epsilon,
)
from dprag.accounting.rdp import DEFAULT_ORDERS
from dprag.accounting.stores import MemoryBudgetStore, SqliteBudgetStore
from dprag.errors import InvalidParameterError, UnknownDocumentError, UnsupportedEventError

TWO32 = 2**32


def units_up(c: float) -> int:
    """Independent model of the cost rounding: ceil(c·2^32), computed in exact rationals."""
    return math.ceil(Fraction(c) * TWO32)


def units_down(b: float) -> int:
    return math.floor(Fraction(b) * TWO32)


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request, tmp_path):
    made = []

    def make(n):
        if request.param == "memory":
            s = MemoryBudgetStore(n)
        else:
            s = SqliteBudgetStore(tmp_path / f"s{len(made)}.db", n, synchronous="NORMAL")
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


# ----------------------------------------------------------------------------------------------
# units
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("c", [0.0, 0.1, 1 / 3, 0.25, 1.0, 1e-12, 5e-324, 12345.678, 2.0**-32, 3 * 2.0**-32])
def test_cost_units_match_exact_rational_model(c):
    assert int(cost_to_units([c])[0]) == units_up(c)
    assert Fraction(int(cost_to_units([c])[0]), TWO32) >= Fraction(c)
    assert c == 0 or cost_to_units([c])[0] >= 1


def test_cost_units_cap_inf_and_huge():
    out = cost_to_units([np.inf, 1e300, 2.0**30])
    assert out.tolist() == [2**62, 2**62, 2**62]


def test_ten_charges_of_point_one_never_overspend(make_store):
    # 10 × float(0.1) exceeds 1 in exact arithmetic, so the 10th charge must be refused.
    assert 10 * Fraction(0.1) > 1
    f = IndividualRenyiFilter(make_store(3), 1.0)
    admitted = [f.try_charge([0], 0.1).n_admitted for _ in range(12)]
    assert admitted == [1] * 9 + [0] * 3
    assert f.spent_units([0])[0, 0] == 9 * units_up(0.1) <= units_down(1.0)


def test_for_queries_admits_exactly_m_charges(make_store):
    # The M-query budget is M × the per-query units: exactly M charges, never M+1, even for 0.1 or 1/3.
    for eps_q, m in [(0.1, 10), (1 / 3, 3), (0.7, 1), (0.05, 37)]:
        b = FilterBudget.for_queries(m, eps_q, mode="pure")
        f = IndividualRenyiFilter(make_store(2), b)
        n = sum(f.try_charge([1], eps_q).n_admitted for _ in range(m + 3))
        assert n == m
        eps, delta = f.guarantee()
        assert delta == 0.0 and Fraction(eps) >= m * Fraction(eps_q)
        assert eps - m * eps_q <= m * 2.0**-32 + 1e-15


def test_pure_mode_sums_events_basic_composition():
    f = IndividualRenyiFilter(MemoryBudgetStore(4), 3.0)
    ev = ComposedEvent((LaplaceEvent(scale=2.0), ExponentialMechanismEvent(0.5)))  # 0.5 + 0.5
    assert pure_epsilon(ev) == 1.0
    assert [f.try_charge([0, 1], ev).n_admitted for _ in range(4)] == [2, 2, 2, 0]
    assert f.try_charge([0], NoOpEvent()).n_admitted == 1  # zero cost always fits
    assert f.try_charge([2], SelfComposedEvent(PureDpEvent(1.0), 3)).n_admitted == 1
    assert f.remaining([2])[0] == 0.0


def test_pure_epsilon_poisson_amplification_closed_form():
    ev = PoissonSampledEvent(0.1, PureDpEvent(1.0))
    assert pure_epsilon(ev) == pytest.approx(math.log(1 + 0.1 * (math.e - 1)), rel=1e-15)
    assert pure_epsilon(PoissonSampledEvent(0.0, PureDpEvent(1.0))) == 0.0


# ----------------------------------------------------------------------------------------------
# RDP mode
# ----------------------------------------------------------------------------------------------
def test_rdp_admission_requires_every_order(make_store):
    orders = (2.0, 8.0, 32.0)
    f = IndividualRenyiFilter(make_store(5), [1.0, 1.0, 1.0], orders=orders)
    # fits at orders 2 and 8 but not 32 -> refused, nothing charged
    r = f.try_charge([0], [0.5, 0.5, 1.5])
    assert r.n_admitted == 0 and r.refused.tolist() == [0]
    assert f.spent_units([0]).tolist() == [[0, 0, 0]]
    # exactly the budget at each order -> admitted
    r = f.try_charge([0], [0.5, 1.0, 0.25])
    assert r.n_admitted == 1
    # order 8 is now full: any positive cost there is refused even if other orders have room
    assert f.try_charge([0], [0.0, 1e-9, 0.0]).n_admitted == 0
    assert f.try_charge([0], [0.5, 0.0, 0.75]).n_admitted == 1
    assert f.spent_units([0]).tolist() == [[units_up(0.5) * 2, units_up(1.0), units_up(0.25) + units_up(0.75)]]


def test_gaussian_event_curve_and_m_charges():
    sigma, m = 3.0, 7
    a = np.asarray(DEFAULT_ORDERS)
    f = IndividualRenyiFilter(MemoryBudgetStore(100), FilterBudget.for_queries(m, GaussianEvent(sigma)))
    units = f.cost_units(GaussianEvent(sigma))
    expected = [units_up(x) for x in (a / (2 * sigma * sigma)).tolist()]  # Mironov 2017 Prop. 7
    assert units.tolist() == expected
    counts = [f.try_charge([5, 6, 7], GaussianEvent(sigma)).n_admitted for _ in range(m + 2)]
    assert counts == [3] * m + [0, 0]


def test_guarantee_matches_dp_accounting():
    sigma, m, delta = 2.5, 12, 1e-6
    b = FilterBudget.for_queries(m, GaussianEvent(sigma))
    eps, d = b.guarantee(delta)
    acc = dpa.RdpAccountant(orders=list(DEFAULT_ORDERS))
    acc.compose(dp_event.GaussianDpEvent(sigma), m)
    ref = acc.get_epsilon(delta)
    assert d == delta
    assert eps >= ref - 1e-12  # rounding units up can only increase ε
    assert eps == pytest.approx(ref, rel=1e-6)
    # A budget given directly as a curve converts the same way as dp_accounting's compute_epsilon.
    curve = np.linspace(0.1, 3.0, len(DEFAULT_ORDERS))
    eps2, _ = FilterBudget.rdp(curve).guarantee(1e-5)
    assert eps2 == pytest.approx(dpa.compute_epsilon(DEFAULT_ORDERS, curve, 1e-5)[0], rel=1e-6)


def test_laplace_cost_agrees_with_dp_accounting_curve():
    a = [1.5, 2.0, 4.0, 16.0, 64.0]
    f = IndividualRenyiFilter(MemoryBudgetStore(2), FilterBudget.for_queries(3, LaplaceEvent(2.0), orders=a), orders=a)
    acc = dpa.RdpAccountant(orders=a)
    acc.compose(dp_event.LaplaceDpEvent(2.0))
    ref = np.asarray(acc._rdp)  # noqa: SLF001
    got = f.cost_units(LaplaceEvent(2.0)) / TWO32
    np.testing.assert_allclose(got, ref, rtol=1e-9)


def _sinh_bound(alpha: float, eps: float) -> float:
    """004 Thm A.9's tight ε-DP → RDP bound, evaluated in 60-digit arithmetic (mpmath), not via rdp.py."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 60
    a, e = mpmath.mpf(alpha), mpmath.mpf(eps)
    return float(mpmath.log((mpmath.sinh(a * e) - mpmath.sinh((a - 1) * e)) / mpmath.sinh(e)) / (a - 1))


def test_murag_budget_rdp_reading_is_m_exponential_mechanisms():
    # E(z) = M·ε_q read as B(α) = M·ρ_EM(α), ρ_EM = min(αε²/8 (Cesar–Rogers, bounded range), ε, αε²/2, sinh bound):
    # exactly M retrievals; its (ε, δ) conversion matches the closed form; pure mode gives (M ε_q, 0).
    m, eps_q, delta = 5, 1.0, 1e-6
    a = np.asarray(DEFAULT_ORDERS)
    rho = np.array([min(x * eps_q**2 / 8, eps_q, x * eps_q**2 / 2, _sinh_bound(x, eps_q)) for x in a])
    b = FilterBudget.for_queries(m, ExponentialMechanismEvent(eps_q))
    excess = b.values - m * rho  # rounding each per-query cost up to the 2^-32 grid, M times
    assert np.all(excess >= -1e-14 * m * rho) and np.all(excess <= m * 2.0**-32 + 1e-14 * m * rho)
    best = np.min(m * rho + np.log((a - 1) / a) - (math.log(delta) + np.log(a)) / (a - 1))
    assert b.guarantee(delta)[0] == pytest.approx(best, rel=1e-9)
    f = IndividualRenyiFilter(MemoryBudgetStore(3), b)
    assert [f.try_charge([0, 2], ExponentialMechanismEvent(eps_q)).n_admitted for _ in range(m + 1)] == [2] * m + [0]
    assert FilterBudget.for_queries(m, eps_q, mode="pure").guarantee()[0] == pytest.approx(m * eps_q, rel=1e-9)


def test_rdp_curve_event_costs_and_inf_beyond_grid():
    f = IndividualRenyiFilter(MemoryBudgetStore(3), [1.0, 1.0], orders=(2.0, 4.0))
    # RdpCurveEvent defined only up to order 3: order 4 gets +inf -> never admissible.
    assert f.try_charge([0], RdpCurveEvent((2.0, 3.0), (0.1, 0.2))).n_admitted == 0
    assert f.try_charge([0], RdpCurveEvent((2.0, 4.0), (0.1, 0.2))).n_admitted == 1
    assert f.spent_units([0]).tolist() == [[units_up(0.1), units_up(0.2)]]


def test_try_charge_many_sees_earlier_requests_of_the_batch(make_store):
    f = IndividualRenyiFilter(make_store(6), 1.0)
    res = f.try_charge_many([([0, 1], 0.75), ([1, 2], 0.75), ([0, 3], 0.25), ([4], 2.0), ([0, 5], 0.6)])
    assert [r.admitted.tolist() for r in res] == [[0, 1], [2], [0, 3], [], [5]]
    assert [r.refused.tolist() for r in res] == [[], [1], [], [4], [0]]
    assert f.spent_units(range(6))[:, 0].tolist() == [
        TWO32,
        3 * TWO32 // 4,
        3 * TWO32 // 4,
        TWO32 // 4,
        0,
        units_up(0.6),
    ]
    # float(0.6) + float(0.4) == 1 exactly, but each cost is rounded UP to the 2^-32 grid (neither is on it),
    # so together they take 2^32 + 1 units: the conservative side of rounding, at most one unit per charge.
    assert Fraction(0.6) + Fraction(0.4) == 1 and units_up(0.6) + units_up(0.4) == TWO32 + 1
    assert f.try_charge_many([([4], 0.6), ([4], 0.4)])[1].n_admitted == 0


def test_ids_as_object_arrays_and_numpy_integers_are_accepted():
    f = IndividualRenyiFilter(MemoryBudgetStore(10), 1.0)
    assert f.try_charge(np.array([1, 2], dtype=object), 0.5).admitted.tolist() == [1, 2]
    assert f.try_charge([np.int32(3), np.uint8(4)], 0.5).admitted.tolist() == [3, 4]
    assert f.try_charge(range(5, 8), 0.5).admitted.tolist() == [5, 6, 7]
    assert f.try_charge(np.array([9], dtype=np.uint64), 0.5).admitted.tolist() == [9]


def test_result_keeps_input_order_and_mask():
    f = IndividualRenyiFilter(MemoryBudgetStore(10), 1.0)
    f.try_charge([7], 0.9)
    r = f.try_charge([9, 7, 3], 0.5)
    assert isinstance(r, ChargeResult)
    assert r.admitted.tolist() == [9, 3] and r.refused.tolist() == [7]
    assert r.mask.tolist() == [True, False, True]
    assert r.cost_units.tolist() == [units_up(0.5)]


def test_can_afford_remaining_spent_do_not_charge(make_store):
    f = IndividualRenyiFilter(make_store(4), [2.0, 4.0], orders=(2.0, 10.0))
    f.try_charge([1], [1.5, 1.0])
    assert f.can_afford([0, 1, 1], [1.0, 1.0]).tolist() == [True, False, False]
    assert f.can_afford([0, 1], [0.5, 3.0]).tolist() == [True, True]  # exactly fills both orders
    assert f.can_afford([0, 1], [0.5, 3.5]).tolist() == [True, False]
    np.testing.assert_array_equal(f.spent_units([1]), [[units_up(1.5), units_up(1.0)]])
    rem = f.remaining([0, 1])
    assert rem.shape == (2, 2)
    assert rem[0].tolist() == [2.0, 4.0]
    assert Fraction(rem[1, 0]) == Fraction(units_down(2.0) - units_up(1.5), TWO32)
    assert f.spent([0]).tolist() == [[0.0, 0.0]]


def test_unaffordable_doc_does_not_block_others():
    f = IndividualRenyiFilter(MemoryBudgetStore(3), 1.0)
    f.try_charge([0], 1.0)
    r = f.try_charge([0, 1, 2], 0.5)
    assert r.admitted.tolist() == [1, 2] and r.refused.tolist() == [0]


def test_memory_store_is_lazily_zero_at_a_million_docs():
    def rss_pages():
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1])

    before = rss_pages()
    f = IndividualRenyiFilter(MemoryBudgetStore(10**6), FilterBudget.for_queries(5, GaussianEvent(1.0)))
    rng = np.random.default_rng(0)
    for _ in range(20):
        f.try_charge(rng.choice(10**6, size=50, replace=False), GaussianEvent(1.0))
    grown_mb = (rss_pages() - before) * os.sysconf("SC_PAGE_SIZE") / 2**20
    assert grown_mb < 200  # the dense array would be 10^6 × 156 × 8 B = 1190 MiB


# ----------------------------------------------------------------------------------------------
# unsupported events
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "event",
    [
        ApproxDpEvent(1.0, 1e-6),
        ApproxRdpEvent(GaussianEvent(1.0), 1e-6),
        DiscreteGaussianEvent(2.0, 1, sampler_tv=1e-12),
        ComposedEvent((GaussianEvent(5.0), ApproxDpEvent(0.1, 1e-9))),
        SelfComposedEvent(ApproxRdpEvent(LaplaceEvent(1.0), 1e-7), 2),
        PoissonSampledEvent(0.5, ApproxRdpEvent(GaussianEvent(1.0), 1e-6)),
        ApproxRdpEvent(ComposedEvent((GaussianEvent(3.0), ApproxDpEvent(0.1, 1e-9))), 0.0),
    ],
)
def test_rdp_filter_refuses_events_with_delta(event, make_store):
    f = IndividualRenyiFilter(make_store(3), FilterBudget.for_queries(10, GaussianEvent(1.0)))
    with pytest.raises(UnsupportedEventError):
        f.try_charge([0, 1], event)
    assert f.spent_units([0, 1]).sum() == 0


@pytest.mark.parametrize(
    "event",
    [
        GaussianEvent(1.0),
        ApproxDpEvent(1.0, 1e-6),
        ApproxRdpEvent(LaplaceEvent(1.0), 0.0),
        RdpCurveEvent((2.0,), (0.1,)),
        DiscreteGaussianEvent(1.0),
        ComposedEvent((PureDpEvent(0.1), ApproxDpEvent(0.1, 1e-9))),
        PoissonSampledEvent(0.5, ApproxDpEvent(0.1, 1e-9)),
    ],
)
def test_pure_filter_refuses_non_pure_events(event):
    # (δ > 0 anywhere in a composition is refused too)
    f = IndividualRenyiFilter(MemoryBudgetStore(3), 10.0)
    with pytest.raises(UnsupportedEventError):
        f.try_charge([0], event)
    assert f.spent_units([0]).sum() == 0


def test_delta_zero_approx_events_are_accepted():
    f = IndividualRenyiFilter(MemoryBudgetStore(2), 1.0)
    assert f.try_charge([0], ApproxDpEvent(0.5, 0.0)).n_admitted == 1
    g = IndividualRenyiFilter(MemoryBudgetStore(2), FilterBudget.for_queries(2, PureDpEvent(0.5)))
    assert g.cost_units(ApproxDpEvent(0.5, 0.0)).tolist() == g.cost_units(PureDpEvent(0.5)).tolist()
    assert g.cost_units(ApproxRdpEvent(GaussianEvent(2.0), 0.0)).tolist() == g.cost_units(GaussianEvent(2.0)).tolist()


# ----------------------------------------------------------------------------------------------
# bad input: typed errors, nothing charged
# ----------------------------------------------------------------------------------------------
BAD_IDS = [
    ([5], UnknownDocumentError),
    ([-1], UnknownDocumentError),
    ([0, 2**70], UnknownDocumentError),
    (np.array([0, 7], dtype=np.uint64), UnknownDocumentError),
    ([0.0, 1.0], InvalidParameterError),
    ([True, False], InvalidParameterError),
    ([], InvalidParameterError),
    ([[0, 1]], InvalidParameterError),
    ("01", InvalidParameterError),
    (3, InvalidParameterError),
    ([1, 2, 1], InvalidParameterError),
    ([0, None], InvalidParameterError),
]


@pytest.mark.parametrize("ids,err", BAD_IDS)
def test_bad_ids_raise_and_charge_nothing(ids, err, make_store):
    store = make_store(5)
    f = IndividualRenyiFilter(store, 1.0)
    f.try_charge([3], 0.25)
    with pytest.raises(err) as ei:
        f.try_charge(ids, 0.5)
    if err is InvalidParameterError:
        assert ei.value.field == "doc_ids"
    with pytest.raises(err):
        f.try_charge_many([([0], 0.1), (ids, 0.5)])  # a bad request anywhere rejects the whole batch
    assert f.spent_units(range(5))[:, 0].tolist() == [0, 0, 0, units_up(0.25), 0]


@pytest.mark.parametrize("cost", [float("nan"), -0.1, "0.1", None, [0.1], True])
def test_bad_pure_costs(cost):
    f = IndividualRenyiFilter(MemoryBudgetStore(2), 1.0)
    with pytest.raises(InvalidParameterError) as ei:
        f.try_charge([0], cost)
    assert ei.value.field == "cost"
    assert f.spent_units([0, 1]).sum() == 0


@pytest.mark.parametrize("cost", [[0.1, float("nan")], [0.1, -1.0], [0.1], 0.5, [[0.1, 0.1]], ["a", "b"]])
def test_bad_rdp_costs(cost):
    f = IndividualRenyiFilter(MemoryBudgetStore(2), [1.0, 1.0], orders=(2.0, 3.0))
    with pytest.raises(InvalidParameterError):
        f.try_charge([0], cost)
    with pytest.raises(InvalidParameterError):
        f.try_charge_many([([1], [0.1, 0.1]), ([0], cost)])
    assert f.spent_units([0, 1]).sum() == 0


def test_bad_batches():
    f = IndividualRenyiFilter(MemoryBudgetStore(2), 1.0)
    for reqs in ([], "ab", [([0],)], [5], None):
        with pytest.raises(InvalidParameterError):
            f.try_charge_many(reqs)


@pytest.mark.parametrize(
    "budget,orders",
    [
        (float("nan"), None),
        (-1.0, None),
        (0.0, None),
        (float("inf"), None),
        (2.0**31, None),
        (1.0, (2.0, 3.0)),
        ([1.0, float("nan")], (2.0, 3.0)),
        ([1.0, -0.5], (2.0, 3.0)),
        ([1.0], (2.0, 3.0)),
        ([1.0, 1.0], (2.0, 2.0)),
        ([1.0, 1.0], (1.0, 2.0)),
        ([1.0, 1.0], (2.0, float("inf"))),
        ("1.0", None),
    ],
)
def test_bad_budgets(budget, orders):
    with pytest.raises(InvalidParameterError):
        IndividualRenyiFilter(MemoryBudgetStore(2), budget, orders=orders)


def test_bad_for_queries_and_guarantee_args():
    with pytest.raises(InvalidParameterError):
        FilterBudget.for_queries(0, 0.1)
    with pytest.raises(InvalidParameterError):
        FilterBudget.for_queries(2, float("nan"))
    with pytest.raises(InvalidParameterError):
        FilterBudget.for_queries(2, 0.1, mode="zcdp")
    with pytest.raises(InvalidParameterError):
        FilterBudget.for_queries(2, 0.1, mode="pure", orders=(2.0,))
    with pytest.raises(InvalidParameterError):
        FilterBudget.for_queries(10**9, 10.0, mode="pure")  # exceeds MAX_BUDGET
    assert MAX_BUDGET < 2**30
    b = FilterBudget.for_queries(2, GaussianEvent(1.0))
    for d in (None, 0.0, 1.0, -1e-3, float("nan")):
        with pytest.raises(InvalidParameterError):
            b.guarantee(d)
    with pytest.raises(InvalidParameterError):
        IndividualRenyiFilter(object(), 1.0)


def test_cost_cache_does_not_confuse_types_or_modes():
    f = IndividualRenyiFilter(MemoryBudgetStore(2), 10.0)
    assert f.cost_units(1).tolist() == f.cost_units(1.0).tolist() == [TWO32]
    assert f.cost_units(PureDpEvent(1.0)).tolist() == [TWO32]
    assert f.cost_units(0.1).tolist() == [units_up(0.1)] != [TWO32 // 10]
    g = IndividualRenyiFilter(MemoryBudgetStore(2), [5.0, 5.0], orders=(2.0, 3.0))
    # generic ε-DP curve at ε = 1: 004 Thm A.9, (1/(α-1)) log[(sinh(αε) - sinh((α-1)ε)) / sinh ε]
    sinh_bound = [math.log((math.sinh(a) - math.sinh(a - 1)) / math.sinh(1.0)) / (a - 1) for a in (2.0, 3.0)]
    got = g.cost_units(PureDpEvent(1.0)).tolist()
    assert all(abs(u - units_up(v)) <= 2 for u, v in zip(got, sinh_bound, strict=False))
    assert g.cost_units(np.array([1.0, 1.0])).tolist() == [TWO32] * 2  # arrays are not cached by identity
    assert g.cost_units(np.array([2.0, 2.0])).tolist() == [2 * TWO32] * 2


@pytest.mark.parametrize("mode", ["pure", "rdp"])
def test_budget_for_a_sequence_of_charges_admits_exactly_M_queries(mode):
    # MuRAG-Ada charges a touched document twice per query (threshold release, then the RAG cost); each
    # charge is rounded up to units separately, so a budget built from the float sum can refuse the M-th
    # query. The sequence form sums the rounded charges: exactly M queries fit, the (M+1)-th does not.
    from dprag.accounting.events import DiscreteLaplaceEvent, ExponentialMechanismEvent

    thr, rag = DiscreteLaplaceEvent(scale=1 / 0.3, sensitivity=1), ExponentialMechanismEvent(1.1)
    M = 3
    flt = IndividualRenyiFilter(MemoryBudgetStore(4), FilterBudget.for_queries(M, (thr, rag), mode=mode))
    ids = np.arange(4)
    for _ in range(M):
        assert flt.try_charge(ids, thr).admitted.size == 4
        assert flt.try_charge(ids, rag).admitted.size == 4
    assert flt.try_charge(ids, thr).admitted.size == 0
    with pytest.raises(InvalidParameterError, match="per_query"):
        FilterBudget.for_queries(2, (), mode=mode)
    with pytest.raises(InvalidParameterError, match="per_query"):
        FilterBudget.for_queries(2, (thr, "x"), mode=mode)
