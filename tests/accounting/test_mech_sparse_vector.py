"""Tests of accounting.mechanisms.sparse_vector (AboveThreshold / Sparse as 003 Alg. 3 and 000 Alg. 5 use it).

Hit probabilities are computed exactly here from the discrete Laplace pmf P(x) = tanh(1/2b)·e^{−|x|/b}
(convolved numerically on a truncated support; the truncation error is < 1e-12) and compared with seeded
sessions by exact binomial tests; each test's false-failure probability is ≤ 1e-6 (P_FAIL).
Queries ±10^6 away from the threshold (noise scales ≤ 8) give hits/misses with probability 1 − e^{−10^5}.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dprag.accounting.events import PureDpEvent
from dprag.accounting.mechanisms.sparse_vector import SparseVector, sparse_vector
from dprag.accounting.noise import RandomSource
from dprag.errors import BudgetExhaustedError, InvalidParameterError

P_FAIL = 1e-6
FAR = 10**6


class CountingSource(RandomSource):
    def __init__(self, seed: bytes = b"count"):
        inner = RandomSource.from_seed(seed, b"counting")
        self.n = 0

        def read(k):
            self.n += k
            return inner.bytes(k)

        super().__init__(read, deterministic=True)


def dlap_pmf(scale, support):
    x = np.arange(-support, support + 1)
    return x, math.tanh(1 / (2 * scale)) * np.exp(-np.abs(x) / scale)


def hit_probability(q, tau, eps, sens=1, direction="above", monotone=False):
    """P[q + ν ≥ τ + ρ] (or ≤ for 'below'), ρ ~ DLap(2Δ/ε), ν ~ DLap(4Δ/ε) (2Δ/ε if monotone)."""
    b1 = 2 * sens / eps
    b2 = (2 if monotone else 4) * sens / eps
    x, pr = dlap_pmf(b1, 400)
    _, pn = dlap_pmf(b2, 400)
    diff = np.convolve(pn, pr[::-1])  # law of ν − ρ on [−800, 800]
    vals = np.arange(-800, 801)
    if direction == "above":
        return float(diff[vals >= tau - q].sum())
    return float(diff[vals <= tau - q].sum())


def binom_ok(k, n, p):
    return stats.binomtest(k, n, p).pvalue > P_FAIL


@pytest.mark.parametrize(
    "q,tau,eps,direction,monotone",
    [
        (3, 5.0, 1.0, "above", False),
        (30, 25.0, 0.5, "below", False),
        (7, 7.5, 2.0, "above", True),
        (20, 25, 1.0, "below", False),
    ],
)
def test_single_query_hit_probability_is_exact(q, tau, eps, direction, monotone):
    src = RandomSource.from_seed(b"svt-single", f"{q}-{tau}-{eps}-{direction}".encode())
    n = 6_000
    hits = sum(SparseVector(tau, eps, 1, 1, src, direction=direction, monotone=monotone).test(q) for _ in range(n))
    assert binom_ok(hits, n, hit_probability(q, tau, eps, direction=direction, monotone=monotone))


def test_threshold_is_redrawn_after_a_discovery_only_when_asked():
    """Two queries at the threshold: with a fresh threshold the 2nd hit is independent of the 1st; with a shared
    threshold a 1st hit means ρ was low, so a 2nd hit is more likely — both conditional laws computed exactly."""
    q, tau, eps = 0, 0.0, 1.0
    b1, b2 = 2 / eps, 4 / eps
    x, pr = dlap_pmf(b1, 400)
    xs, pn = dlap_pmf(b2, 400)
    tail = np.array([pn[xs >= r - q].sum() for r in x])  # P[ν ≥ τ + ρ − q | ρ]
    p1 = float((pr * tail).sum())
    p12_shared = float((pr * tail**2).sum())
    n = 8_000
    for redraw, p_second in ((True, p1), (False, p12_shared / p1)):
        src = RandomSource.from_seed(b"svt-redraw", str(redraw).encode())
        first = second = 0
        for _ in range(n):
            sv = SparseVector(tau, eps, 2, 1, src, redraw_threshold=redraw)
            if sv.test(q):
                first += 1
                second += sv.test(q)
        assert binom_ok(second, first, p_second), (redraw, second, first, p_second)
    assert p12_shared / p1 > p1 + 0.05  # the two cases are really different


@pytest.mark.parametrize("redraw", [True, False])
def test_halts_after_c_discoveries(redraw):
    eps, c = 0.8, 3
    sv = SparseVector(0, eps, c, 1, RandomSource.from_seed(b"svt-halt"), redraw_threshold=redraw)
    assert [sv.test(FAR) for _ in range(c)] == [True] * c
    assert sv.halted and sv.discoveries == c and sv.remaining_discoveries == 0
    answered = sv.queries_answered
    with pytest.raises(BudgetExhaustedError):
        sv.test(FAR)
    assert sv.queries_answered == answered
    want = c * eps if redraw else (c + 1) * eps / 2  # Dwork–Roth Sparse / Lyu et al. Alg. 1
    assert sv.epsilon_spent == pytest.approx(want, rel=1e-12)
    assert sv.event == sv.max_event
    assert sv.max_event.epsilon == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("redraw", [True, False])
def test_spends_only_on_discoveries(redraw):
    eps = 1.0
    sv = SparseVector(0, eps, 2, 1, RandomSource.from_seed(b"svt-nospend"), redraw_threshold=redraw)
    assert sv.epsilon_spent == 0.0  # nothing answered yet: nothing spent
    assert not any(sv.test(-FAR) for _ in range(500))
    assert sv.discoveries == 0 and not sv.halted
    assert sv.epsilon_spent == pytest.approx(eps / 2)  # only the threshold that answered: Δ/b₁ = ε/2
    assert sv.test(FAR)
    assert sv.epsilon_spent == pytest.approx(eps)  # + one discovery: κΔ/b₂ = ε/2
    assert not any(sv.test(-FAR) for _ in range(100))
    # redraw: a fresh threshold has now answered ⊥'s (+ε/2); shared threshold: nothing new
    assert sv.epsilon_spent == pytest.approx(1.5 * eps if redraw else eps)
    assert sv.max_epsilon == pytest.approx(2 * eps if redraw else 1.5 * eps)


def test_costs_and_scales_follow_sensitivity_and_monotonicity():
    sv = SparseVector(10, 0.5, 4, 3, RandomSource.from_seed(b"svt-scales"))
    assert sv.threshold_scale == pytest.approx(2 * 3 / 0.5) and sv.query_scale == pytest.approx(4 * 3 / 0.5)
    svm = SparseVector(10, 0.5, 4, 3, RandomSource.from_seed(b"svt-scales"), monotone=True)
    assert svm.query_scale == pytest.approx(2 * 3 / 0.5)
    for s in (sv, svm):
        assert s.max_epsilon == pytest.approx(4 * 0.5)


def test_003_usage_below_threshold():
    """003 Alg. 3: a_t = voters agreeing with the non-RAG token; discovery iff a_t + Lap(4/ε) ≤ τ̂, τ = m/2."""
    m = 50
    sv = SparseVector(m / 2, 1.0, 2, 1, RandomSource.from_seed(b"svt-003"), direction="below")
    assert not sv.test(m) and not sv.test(m) and not sv.test(m - 1)  # most voters agree: keep the non-RAG token
    assert sv.test(0)  # nobody agrees: the private vote is used
    assert sv.discoveries == 1


def test_functional_form_stops_at_halt():
    answers, ev = sparse_vector([-FAR, FAR, -FAR, FAR, FAR, FAR], 0, 1.0, 2, 1, RandomSource.from_seed(b"svt-fn"))
    assert answers == (False, True, False, True)
    assert isinstance(ev, PureDpEvent) and ev.epsilon == pytest.approx(2.0)


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(threshold=float("nan")), "threshold"),
        (dict(threshold=float("inf")), "threshold"),
        (dict(threshold="x"), "threshold"),
        (dict(epsilon=0), "epsilon"),
        (dict(epsilon=-1), "epsilon"),
        (dict(epsilon=float("nan")), "epsilon"),
        (dict(max_discoveries=0), "max_discoveries"),
        (dict(max_discoveries=1.5), "max_discoveries"),
        (dict(max_discoveries=True), "max_discoveries"),
        (dict(sensitivity=0), "sensitivity"),
        (dict(sensitivity=1.5), "sensitivity"),
        (dict(direction="sideways"), "direction"),
    ],
)
def test_bad_parameters(kwargs, field):
    args = dict(threshold=1.0, epsilon=1.0, max_discoveries=2, sensitivity=1)
    args.update(kwargs)
    src = CountingSource()
    with pytest.raises(InvalidParameterError) as err:
        SparseVector(source=src, **args)
    assert err.value.field == field
    assert src.n == 0


@pytest.mark.parametrize("bad", [float("nan"), 1.5, float("inf"), True, "3", None])
def test_bad_query_changes_nothing(bad):
    src = CountingSource()
    sv = SparseVector(0, 1.0, 2, 1, src)
    before = (src.n, sv.queries_answered, sv.epsilon_spent)
    with pytest.raises(InvalidParameterError) as err:
        sv.test(bad)
    assert err.value.field == "query_value"
    assert (src.n, sv.queries_answered, sv.epsilon_spent) == before


def test_functional_form_validates_before_drawing():
    src = CountingSource()
    with pytest.raises(InvalidParameterError):
        sparse_vector([1, 2, float("nan")], 0, 1.0, 1, 1, src)
    with pytest.raises(InvalidParameterError):
        sparse_vector([], 0, 1.0, 1, 1, src)
    assert src.n == 0
