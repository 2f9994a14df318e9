"""The power that ``check_dp`` reports beside a pass (issue 25, item 5): ``report.power`` /
``report.detectable_epsilon`` and ``detectable_epsilon(...)``.

The figure is checked two ways:

- against an independent reference written here from the binomial law alone (Clopper–Pearson upper bounds by
  bisection on ``scipy.stats.binom.cdf``, lower bounds through the identity lower(x) > c ⇔ P_c[X ≥ x] < level;
  the module uses ``scipy.stats.beta.ppf``): at the reported ε' the detection probability is ≥ 1 − β, and 0.002
  below it, < 1 − β (so the figure is the smallest, to the bisection's width);
- against an adversary: after a seeded pass of a correct mechanism, a broken mechanism built on the reported event,
  at the reported mass, with true ratio above the reported ε' is caught in ≥ (1 − β) of 200 seeded repetitions,
  and a mechanism whose violation is far below it almost always passes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dprag.accounting.testing import OutputEvent, check_dp, seeded
from dprag.accounting.testing.empirical_dp import detectable_epsilon
from dprag.errors import InvalidParameterError

EVENT = OutputEvent("output == 1", lambda outs: outs == 1)
BETA = 0.05
REPS = 200


def ref_detection(p_a: float, p_b: float, eps: float, delta: float, n: int, level: float) -> float:
    """P[check_dp flags the event] when P[M(d_a) ∈ S] = p_a, P[M(d_b) ∈ S] = p_b, from the binomial law only."""
    xs = np.arange(n + 1)
    pmf_b = stats.binom.pmf(xs, n, p_b)
    xb = np.flatnonzero(pmf_b > 1e-18)
    # Clopper–Pearson upper bound U(x): P_U[X ≤ x] = level (cdf decreasing in p), U(n) = 1; bisection to 2^-60
    lo, hi = xb / n, np.ones(len(xb))
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        above = stats.binom.cdf(xb, n, mid) > level
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    upper = np.where(xb == n, 1.0, hi)
    c = math.exp(eps) * upper + delta
    ok = c < 1.0  # lower bounds are < 1: no x_a exceeds c ≥ 1
    # lower(x_a) > c  ⇔  P_c[X ≥ x_a] < level
    flagged = stats.binom.sf(xs[None, :] - 1, n, c[ok, None]) < level
    pmf_a = stats.binom.pmf(xs, n, p_a)
    return float(np.sum(pmf_b[xb[ok]] * (flagged * pmf_a[None, :]).sum(axis=1)))


def bernoulli(p0: float, p1: float):
    """Outputs 1 with probability p0 on input 0 and p1 on input 1 (vectorised)."""

    def mechanism(d, source, n):
        return (source.uniform01(n) < (p0 if d == 0 else p1)).astype(np.int64)

    return mechanism


def on_side(direction: str, p_a: float, p_b: float):
    """A Bernoulli mechanism with P[M(d_a) = 1] = p_a and P[M(d_b) = 1] = p_b for the report's direction."""
    return bernoulli(p_a, p_b) if direction == "d0 vs d1" else bernoulli(p_b, p_a)


@pytest.mark.parametrize(
    ("p_b", "eps", "delta", "n", "alpha", "n_bounds"),
    [(0.3, 0.5, 0.0, 2000, 1e-3, 4), (0.05, 1.0, 0.01, 5000, 1e-6, 40), (0.6, 0.2, 0.0, 3000, 0.05, 2)],
)
def test_detectable_epsilon_is_the_smallest_with_power_by_an_independent_reference(p_b, eps, delta, n, alpha, n_bounds):
    x = detectable_epsilon(p_b, eps, delta, trials=n, alpha=alpha, n_bounds=n_bounds, beta=BETA)
    assert eps < x < math.log((1 - delta) / p_b)
    level = alpha / n_bounds
    assert ref_detection(math.exp(x) * p_b + delta, p_b, eps, delta, n, level) >= 1 - BETA
    assert ref_detection(math.exp(x - 0.002) * p_b + delta, p_b, eps, delta, n, level) < 1 - BETA


def test_detectable_epsilon_is_infinite_without_power():
    # 10 trials: upper(p_b) is so loose that even P[M(d_a) ∈ S] = 1 is never flagged
    assert detectable_epsilon(0.3, 1.0, trials=10, alpha=1e-3, n_bounds=4) == math.inf
    assert ref_detection(1.0, 0.3, 1.0, 0.0, 10, 1e-3 / 4) < 1 - BETA
    # no event of mass p_b can violate e^ε·p_b + δ ≥ 1
    assert detectable_epsilon(0.5, 1.0, trials=1000, alpha=1e-3) == math.inf
    assert detectable_epsilon(0.0, 1.0, trials=1000, alpha=1e-3) == math.inf
    rep = check_dp(
        bernoulli(0.3, 0.3), 0, 1, 1.0, trials=10, events=[EVENT], vectorized=True, source_factory=seeded(b"tiny")
    )
    assert rep.passed and rep.detectable_epsilon == math.inf
    assert "no tested event has power 0.95" in rep.summary()


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 2.0])
def test_beta_must_lie_in_the_open_unit_interval(bad):
    with pytest.raises(InvalidParameterError, match="beta"):
        check_dp(bernoulli(0.3, 0.3), 0, 1, 1.0, trials=100, events=[EVENT], source_factory=seeded(b"b"), beta=bad)
    with pytest.raises(InvalidParameterError, match="beta"):
        detectable_epsilon(0.3, 1.0, trials=100, alpha=1e-3, beta=bad)


def _caught(mechanism, eps, direction, label, alpha):
    hits = 0
    for r in range(REPS):
        rep = check_dp(
            mechanism,
            0,
            1,
            eps,
            trials=2000,
            events=[EVENT],
            vectorized=True,
            source_factory=seeded(f"{label}-{r}"),
            alpha=alpha,
        )
        hits += any(x.violated and x.direction == direction for x in rep.results)
    return hits


def test_the_reported_power_means_what_it_says():
    """Claim ε = 0.5 on {output = 1}, 2000 trials per input, α = 1e-3, β = 0.05.

    A correct mechanism (P[1 | d0] = e^0.5 · 0.2, P[1 | d1] = 0.2) passes and reports ε' = X on an event and
    direction at a measured mass m. Then, on that event and direction with P[M(d_b) = 1] = m:

    - true ratio e^(X + 0.05): detection probability D ≥ 0.9997 (reference); caught in ≥ 190 of 200 seeded runs
      = 1 − β. False-failure rate P[Binomial(200, D) < 190] < 1e-20 (computed below);
    - true ratio e^X exactly: D ≥ 0.95; caught ≥ the 1e-6 quantile of Binomial(200, 0.95) (false failure ≤ 1e-6);
    - true ratio e^(ε + (X − ε)/4), far below the power: flagged in at most the 1 − 1e-6 quantile of
      Binomial(200, D) runs (false failure ≤ 1e-6).
    """
    eps, alpha, n = 0.5, 1e-3, 2000
    rep = check_dp(
        bernoulli(math.exp(eps) * 0.2, 0.2),
        0,
        1,
        eps,
        trials=n,
        events=[EVENT],
        vectorized=True,
        source_factory=seeded(b"power/correct"),
        alpha=alpha,
    )
    assert rep.passed, rep.summary()
    power = rep.power
    x, m, direction = power.epsilon, power.mass, power.direction
    assert rep.detectable_epsilon == x and power.beta == BETA and power.event == EVENT.name
    assert eps < x < 1.0  # a real, finite figure at this size (0.711 when written)
    assert f"PASS at {n} trials per input; would detect ε >= {x:.4g} with probability >= 0.95" in rep.summary()
    level = alpha / 4  # one event, two directions, two bounds each
    assert ref_detection(math.exp(x) * m, m, eps, 0.0, n, level) >= 1 - BETA

    above = x + 0.05
    d_above = ref_detection(math.exp(above) * m, m, eps, 0.0, n, level)
    assert stats.binom.cdf(189, REPS, d_above) < 1e-20  # design: false-failure rate
    assert _caught(on_side(direction, math.exp(above) * m, m), eps, direction, "power/above", alpha) >= 190

    at = _caught(on_side(direction, math.exp(x) * m, m), eps, direction, "power/at", alpha)
    assert at >= stats.binom.ppf(1e-6, REPS, 1 - BETA)

    below = eps + (x - eps) / 4
    d_below = ref_detection(math.exp(below) * m, m, eps, 0.0, n, level)
    assert d_below < 0.01
    flagged = _caught(on_side(direction, math.exp(below) * m, m), eps, direction, "power/below", alpha)
    assert flagged <= stats.binom.isf(1e-6, REPS, d_below)


def test_automatic_events_report_the_power_of_a_tested_event():
    def rr(bit, source, n):
        flip = source.uniform01(n) < 1.0 / (1.0 + math.e)
        return np.where(flip, 1 - bit, bit)

    rep = check_dp(rr, 0, 1, 1.0, trials=20_000, vectorized=True, source_factory=seeded(b"auto"), alpha=1e-6)
    assert rep.passed
    p = rep.power
    tested = {(r.name, r.direction, r.p_b) for r in rep.results}
    assert (p.event, p.direction, p.mass) in tested
    assert p.epsilon == detectable_epsilon(p.mass, 1.0, trials=20_000, alpha=1e-6, n_bounds=2 * len(rep.results))
    assert 1.0 < p.epsilon < 1.2
