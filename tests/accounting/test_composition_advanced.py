"""(ε, δ) composition theorems (accounting/composition/advanced.py) against brute force and each other.

Expected values come from independent computations: enumeration of every output of the composed canonical
mechanism (randomized response plus a δ-mass), mpmath sums, KOV's literal Thm 3.3 formula, dp_accounting's
PLD of the canonical mechanism, and direct evaluation of a subsampled mechanism's likelihood ratio.
"""

import itertools
import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprag.accounting.composition import (
    basic_composition,
    drv_composition,
    kov_composition,
    optimal_composition_delta,
    optimal_composition_epsilon,
    optimal_composition_states,
    optimal_homogeneous_delta,
    optimal_homogeneous_epsilon,
    poisson_amplify,
)
from dprag.errors import InvalidParameterError

# ----------------------------------------------------------------------------------------------------------
# brute-force oracles
# ----------------------------------------------------------------------------------------------------------


def canonical_pair(eps, delta):
    """Output distributions (P, Q) of KOV's canonical (ε, δ) mechanism on outputs {0, 1, 2, 3}
    (randomized response on outputs {1, 2} when δ = 0)."""
    p = math.exp(eps) / (1 + math.exp(eps))
    if delta == 0:
        return [p, 1 - p], [1 - p, p]
    return ([delta, (1 - delta) * p, (1 - delta) * (1 - p), 0.0], [0.0, (1 - delta) * (1 - p), (1 - delta) * p, delta])


def brute_force_delta(pairs, eps_g):
    """H_{e^{ε_g}}(⊗P_i ‖ ⊗Q_i) = Σ_x max(P(x) − e^{ε_g} Q(x), 0) by enumerating every joint output."""
    total = mpmath.mpf(0)
    ratio = mpmath.exp(eps_g)
    for outs in itertools.product(*[range(len(p)) for p, _ in pairs]):
        P = mpmath.mpf(1)
        Q = mpmath.mpf(1)
        for (p, q), o in zip(pairs, outs, strict=False):
            P *= p[o]
            Q *= q[o]
        diff = P - ratio * Q
        if diff > 0:
            total += diff
    return float(total)


def kov_thm33_literal(eps, delta, k, i):
    """KOV 2015 Thm 3.3 as printed: δ_total at ε_g = (k − 2i)ε, in mpmath."""
    mpmath.mp.dps = 50
    e = mpmath.mpf(eps)
    s = mpmath.fsum(
        mpmath.binomial(k, j) * (mpmath.exp((k - j) * e) - mpmath.exp((k - 2 * i + j) * e)) for j in range(i)
    )
    d_i = s / (1 + mpmath.exp(e)) ** k
    return float(1 - (1 - mpmath.mpf(delta)) ** k * (1 - d_i))


# ----------------------------------------------------------------------------------------------------------
# exact optimal composition
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("eps", [0.05, 0.5, 1.3])
def test_homogeneous_rr_equals_brute_force(k, eps):
    pairs = [canonical_pair(eps, 0.0)] * k
    for eps_g in [0.0, 0.37 * eps, eps, 1.5 * eps, (k - 1) * eps + 0.01, k * eps, k * eps + 0.5]:
        expected = brute_force_delta(pairs, eps_g)
        assert optimal_homogeneous_delta(eps, 0.0, k, eps_g) == pytest.approx(expected, rel=1e-11, abs=1e-15)


@pytest.mark.parametrize("k,eps,delta", [(1, 0.7, 0.01), (3, 0.4, 1e-3), (4, 1.0, 0.05), (5, 0.2, 1e-4)])
def test_homogeneous_canonical_with_delta_equals_brute_force(k, eps, delta):
    pairs = [canonical_pair(eps, delta)] * k
    for eps_g in [0.0, 0.3, eps, 2 * eps, k * eps]:
        expected = brute_force_delta(pairs, eps_g)
        assert optimal_homogeneous_delta(eps, delta, k, eps_g) == pytest.approx(expected, rel=1e-11, abs=1e-15)


@pytest.mark.parametrize("k,eps,delta", [(10, 0.1, 0.0), (25, 0.3, 1e-6), (200, 0.05, 1e-7), (1000, 0.01, 0.0)])
def test_grid_points_equal_kov_theorem_3_3_as_printed(k, eps, delta):
    for i in sorted({0, 1, 2, k // 4, k // 2}):
        eps_g = (k - 2 * i) * eps
        expected = kov_thm33_literal(eps, delta, k, i)
        assert optimal_homogeneous_delta(eps, delta, k, eps_g) == pytest.approx(expected, rel=1e-9, abs=1e-15)


@settings(max_examples=40, deadline=None)
@given(
    eps=st.lists(st.sampled_from([0.05, 0.2, 0.2, 0.7, 1.1]), min_size=1, max_size=9),
    dels=st.lists(st.sampled_from([0.0, 0.0, 1e-4, 0.02]), min_size=9, max_size=9),
    eps_g=st.floats(0.0, 4.0),
)
def test_heterogeneous_equals_brute_force(eps, dels, eps_g):
    dels = dels[: len(eps)]
    # RR parts enumerated exactly; the δ parts enter through 1 − Π(1 − δ_i)(1 − H) (checked separately above
    # with the 4-output canonical mechanism), so the enumeration stays at 2^k outputs.
    rr = brute_force_delta([canonical_pair(e, 0.0) for e in eps], eps_g)
    expected = 1 - np.prod([1 - d for d in dels]) * (1 - rr)
    got = optimal_composition_delta(eps_g, eps, dels)
    assert got == pytest.approx(expected, rel=1e-10, abs=1e-14)


def test_heterogeneous_with_deltas_equals_four_output_brute_force():
    eps = [0.3, 0.9, 0.3, 0.1]
    dels = [1e-3, 0.0, 0.02, 1e-4]
    pairs = [canonical_pair(e, d) for e, d in zip(eps, dels, strict=False)]
    for eps_g in [0.0, 0.25, 0.6, 1.0, 1.6, 2.0]:
        assert optimal_composition_delta(eps_g, eps, dels) == pytest.approx(
            brute_force_delta(pairs, eps_g), rel=1e-11, abs=1e-15
        )


@settings(max_examples=40, deadline=None)
@given(
    eps=st.lists(st.sampled_from([0.01, 0.1, 0.25, 0.5, 1.0]), min_size=1, max_size=3),
    counts=st.lists(st.integers(1, 60), min_size=3, max_size=3),
    delta_i=st.sampled_from([0.0, 1e-9, 1e-7]),
    log_target=st.floats(-12, -1),
)
def test_epsilon_inverse_is_certified_and_minimal(eps, counts, delta_i, log_target):
    counts = counts[: len(eps)]
    dels = [delta_i] * len(eps)
    target = 10.0**log_target
    e = optimal_composition_epsilon(target, eps, dels, counts)
    floor = 1 - np.prod([(1 - d) ** c for d, c in zip(dels, counts, strict=False)])
    if target < floor:
        assert e == math.inf
        return
    assert optimal_composition_delta(e, eps, dels, counts) <= target
    if e > 1e-9:
        # minimal: a slightly smaller ε_g misses the target (δ is continuous and strictly decreasing there)
        assert optimal_composition_delta(e * (1 - 1e-7) - 1e-12, eps, dels, counts) > target


def test_large_k_is_stable_and_matches_mpmath():
    k, eps, delta = 10_000, 0.01, 0.0
    for i in [4000, 4500, 4800]:
        eps_g = (k - 2 * i) * eps
        mpmath.mp.dps = 60
        e = mpmath.mpf(eps)
        # independent: δ(ε_g) = Σ_{j<i} C(k,j) (e^{(k−j)ε} − e^{ε_g + jε}) / (1+e^ε)^k in 60-digit arithmetic
        s = mpmath.fsum(mpmath.binomial(k, j) * (mpmath.exp((k - j) * e) - mpmath.exp(eps_g + j * e)) for j in range(i))
        expected = float(s / (1 + mpmath.exp(e)) ** k)
        assert optimal_homogeneous_delta(eps, delta, k, eps_g) == pytest.approx(expected, rel=1e-9)
    # ε_g(δ) for k = 10^4 and 10^6: finite, certified, and below the closed forms
    for k, e0 in [(10_000, 0.01), (200_000, 0.002)]:
        eg = optimal_homogeneous_epsilon(e0, 0.0, k, 1e-6)
        assert 0 < eg < kov_composition([e0], 1e-6, counts=[k])[0] < drv_composition(e0, 0.0, k, 1e-6)[0]
        assert optimal_homogeneous_delta(e0, 0.0, k, eg) <= 1e-6


@pytest.mark.parametrize("eps,k,target", [(0.1, 50, 1e-6), (0.05, 400, 1e-8), (0.02, 2000, 1e-6)])
def test_returned_epsilon_is_certified_in_exact_arithmetic(eps, k, target):
    """Floating point must not put ε_g below the true root: check δ(ε_g) ≤ target with 60-digit sums."""
    eg = optimal_homogeneous_epsilon(eps, 0.0, k, target)
    mpmath.mp.dps = 60
    e, g = mpmath.mpf(eps), mpmath.mpf(eg)
    exact = (
        mpmath.fsum(
            mpmath.binomial(k, j) * (mpmath.exp((k - j) * e) - mpmath.exp(g + j * e))
            for j in range(k + 1)
            if (k - 2 * j) * e > g
        )
        / (1 + mpmath.exp(e)) ** k
    )
    assert exact <= target
    assert exact >= target * (1 - 1e-6)  # and it is not needlessly loose


def test_optimal_matches_dp_accounting_pld_of_canonical_mechanism():
    """dp_accounting's pessimistic PLD of the canonical mechanism is an upper bound within its discretisation."""
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld

    interval = 1e-4
    for eps, delta, k, d_target in [(0.1, 0.0, 50, 1e-6), (0.3, 1e-7, 20, 1e-5), (0.05, 0.0, 400, 1e-8)]:
        dist = pld.from_privacy_parameters(
            common.DifferentialPrivacyParameters(eps, delta), value_discretization_interval=interval
        ).self_compose(k)
        exact = optimal_homogeneous_epsilon(eps, delta, k, d_target)
        pld_eps = dist.get_epsilon_for_delta(d_target)
        # dp_accounting composes by FFT, whose absolute rounding (~1e-16 per mass) is ~1e-8 relative at δ = 1e-8
        # and moves ε by ~1e-8; beyond that the pessimistic PLD must not undercut the exact optimum.
        assert exact <= pld_eps + 1e-6
        assert pld_eps - exact <= k * interval  # each composed copy rounds its loss up by < one interval


# ----------------------------------------------------------------------------------------------------------
# closed forms and their order
# ----------------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(1e-3, 2.0), k=st.integers(1, 3000), log_dp=st.floats(-12, -1), delta=st.sampled_from([0.0, 1e-9]))
def test_optimal_le_kov_le_basic_and_le_drv(eps, k, log_dp, delta):
    dp = 10.0**log_dp
    drv_eps, drv_delta = drv_composition(eps, delta, k, dp)
    kov_eps, kov_delta = kov_composition([eps], dp, [delta], [k])
    basic_eps, basic_delta = basic_composition([eps], [delta], [k])
    assert kov_delta <= drv_delta * (1 + 1e-12)
    assert kov_eps <= basic_eps * (1 + 1e-12)
    assert kov_eps <= drv_eps * (1 + 1e-12)
    opt = optimal_homogeneous_epsilon(eps, delta, k, kov_delta)
    assert opt <= kov_eps * (1 + 1e-9) + 1e-12
    assert optimal_homogeneous_epsilon(eps, delta, k, drv_delta) <= drv_eps * (1 + 1e-9) + 1e-12


@settings(max_examples=40, deadline=None)
@given(
    eps=st.lists(st.floats(0.01, 1.5), min_size=1, max_size=3),
    counts=st.lists(st.integers(1, 40), min_size=3, max_size=3),
    log_dt=st.floats(-10, -1),
)
def test_kov_heterogeneous_bound_is_valid(eps, counts, log_dt):
    """KOV Thm 3.5 must never undercut the exact optimum (Murtagh–Vadhan) at the same total δ."""
    counts = counts[: len(eps)]
    dt = 10.0**log_dt
    bound, total_delta = kov_composition(eps, dt, None, counts)
    assert total_delta == pytest.approx(dt)
    assert optimal_composition_delta(bound, eps, None, counts) <= total_delta * (1 + 1e-9)


def test_drv_and_kov_closed_forms():
    eps, k, dp = 0.1, 100, 1e-5
    e, d = drv_composition(eps, 1e-7, k, dp)
    assert e == pytest.approx(eps * math.sqrt(2 * k * math.log(1 / dp)) + k * eps * (math.exp(eps) - 1))
    assert d == pytest.approx(k * 1e-7 + dp)
    e, d = kov_composition([eps], dp, [1e-7], [k])
    s2 = k * eps * (math.exp(eps) - 1) / (math.exp(eps) + 1)
    expected = min(
        k * eps,
        s2 + eps * math.sqrt(2 * k * math.log(math.e + math.sqrt(k) * eps / dp)),
        s2 + eps * math.sqrt(2 * k * math.log(1 / dp)),
    )
    assert e == pytest.approx(expected)
    assert d == pytest.approx(1 - (1 - dp) * (1 - 1e-7) ** k)
    assert basic_composition([0.1, 0.2], [1e-6, 0.0], [3, 2]) == pytest.approx((0.7, 3e-6))


# ----------------------------------------------------------------------------------------------------------
# amplification by Poisson subsampling
# ----------------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(0.01, 5.0), q=st.floats(0.0, 1.0))
def test_poisson_amplification_is_tight_for_randomized_response(eps, q):
    """Record present with prob. q: output RR(1) else RR(0). Exact max log-ratio equals log(1 + q(e^ε − 1))."""
    p = math.exp(eps) / (1 + math.exp(eps))
    without = np.array([p, 1 - p])  # M(D): RR on bit 0
    with_ = q * np.array([1 - p, p]) + (1 - q) * without  # M(D ∪ {x}) after Poisson sampling
    exact = max(np.max(np.log(with_ / without)), np.max(np.log(without / with_)))
    amp_eps, amp_delta = poisson_amplify(eps, 0.0, q)
    assert exact <= amp_eps + 1e-12
    assert amp_eps == pytest.approx(math.log(np.max(with_ / without)), abs=1e-12)
    assert amp_eps <= eps + 1e-15 and amp_delta == 0.0


# ----------------------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda: basic_composition([]), "epsilons"),
        (lambda: basic_composition([-0.1]), "epsilons"),
        (lambda: basic_composition([float("nan")]), "epsilons"),
        (lambda: basic_composition([0.1], [1.0]), "deltas"),
        (lambda: basic_composition([0.1], [0.1, 0.2]), "deltas"),
        (lambda: basic_composition([0.1], None, [0]), "counts"),
        (lambda: basic_composition([0.1], None, [1.5]), "counts"),
        (lambda: drv_composition(0.1, 0.0, 0, 1e-6), "k"),
        (lambda: drv_composition(0.1, 0.0, 10, 0.0), "delta_prime"),
        (lambda: kov_composition([0.1], 0.0), "delta_tilde"),
        (lambda: kov_composition([0.1], float("nan")), "delta_tilde"),
        (lambda: optimal_composition_delta(-1.0, [0.1]), "epsilon_g"),
        (lambda: optimal_composition_epsilon(1.0, [0.1]), "delta_g"),
        (lambda: optimal_composition_epsilon(1e-6, [0.1, 0.2, 0.3], counts=[200, 200, 200]), "epsilons"),
        (lambda: optimal_homogeneous_epsilon(0.1, 0.0, 0, 1e-6), "k"),
        (lambda: poisson_amplify(0.1, 0.0, 1.5), "sampling_probability"),
        (lambda: poisson_amplify(float("inf"), 0.0, 0.5), "epsilon"),
    ],
)
def test_bad_input_raises_typed_error(call, field):
    with pytest.raises(InvalidParameterError) as err:
        call()
    assert err.value.field == field


def test_state_count_and_edge_cases():
    assert optimal_composition_states([0.1, 0.2, 0.1, 0.0], [3, 4, 2, 7]) == 6 * 5
    # zero-ε mechanisms only contribute their δ
    assert optimal_composition_delta(0.0, [0.0], [1e-3], [3]) == pytest.approx(1 - (1 - 1e-3) ** 3)
    assert optimal_composition_epsilon(0.5, [0.0], [1e-3], [3]) == 0.0
    # target below the unavoidable 1 − Π(1 − δ_i): no ε works
    assert optimal_composition_epsilon(1e-6, [0.1], [1e-6], [10]) == math.inf
    # δ_g at ε_g = kε is exactly the δ floor
    assert optimal_homogeneous_delta(0.2, 1e-5, 7, 1.4) == pytest.approx(1 - (1 - 1e-5) ** 7, rel=1e-12)
