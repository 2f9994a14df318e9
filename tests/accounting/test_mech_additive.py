"""Additive-noise mechanisms: outputs, the privacy events they return, and input validation.

The granular sensitivity bounds (spec §7) are checked against brute force on random neighbouring inputs
(hypothesis) and shown tight on hand-built worst cases. Distribution tests: fixed seeds, p-value > 1e-6
(false-failure probability ≤ 1e-6 per assertion).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from dprag.accounting.events import DiscreteGaussianEvent, DiscreteLaplaceEvent
from dprag.accounting.mechanisms.additive import (
    discrete_gaussian_mechanism,
    discrete_laplace_mechanism,
    gaussian_mechanism,
    granular_l1_sensitivity,
    granular_l2_sensitivity,
    laplace_mechanism,
)
from dprag.accounting.noise import DiscreteGaussianTable, RandomSource, granularity_for, round_to_grid
from dprag.accounting.rdp import epsilon_of
from dprag.errors import InvalidParameterError

P_MIN = 1e-6


class CountingSource(RandomSource):
    def __init__(self, seed=b"count"):
        self.n = 0
        inner = RandomSource.from_seed(seed)

        def read(k):
            self.n += k
            return inner.bytes(k)

        super().__init__(read, deterministic=True)


# ------------------------------------------------------------------------------------------------
# granular sensitivity: derivation checked by brute force
# ------------------------------------------------------------------------------------------------
@given(
    base=st.lists(st.floats(-50, 50, allow_nan=False), min_size=1, max_size=6),
    data=st.data(),
    k=st.integers(-6, 2),
    delta=st.floats(0.01, 20),
)
def test_l1_l2_sensitivity_bounds_hold(base, data, k, delta):
    g = 2.0**k
    v = np.array(base)
    d = v.size
    m = data.draw(st.integers(1, d))
    # neighbour: change m coordinates by a vector of L1 norm ≤ Δ (for L1) / L2 norm ≤ Δ (for L2)
    idx = np.array(data.draw(st.permutations(range(d)))[:m])
    raw = np.array(data.draw(st.lists(st.floats(-1, 1, allow_nan=False), min_size=m, max_size=m)))
    for norm, bound_fn in ((1, granular_l1_sensitivity), (2, granular_l2_sensitivity)):
        nrm = np.linalg.norm(raw, ord=norm)
        step = raw * (delta / nrm) * 0.999999 if nrm > 1e-12 else np.zeros(m)
        w = v.copy()
        w[idx] = w[idx] + step
        real = np.linalg.norm(w - v, ord=norm)
        if real > delta:  # float addition may have pushed it over: skip this pair (not a neighbour)
            continue
        kv, kw = round_to_grid(v, g), round_to_grid(w, g)
        diff = kv - kw
        bound = bound_fn(delta, g, m)
        if norm == 1:
            assert np.abs(diff).sum() <= bound
        else:
            assert float(np.sqrt(np.sum(diff * diff))) <= bound


def test_sensitivity_bounds_are_tight():
    g = 1.0
    # L1, m = 1, Δ = 1: v = 0.5 → 1, v' = -0.5 → 0 ... difference ⌈1⌉ = 1; Δ = 0.2: 0.5 → 1, 0.3 → 0
    assert granular_l1_sensitivity(0.2, g, 1) == 1
    assert round_to_grid([0.5], g)[0] - round_to_grid([0.3], g)[0] == 1
    # L1, m = 3, Δ = 0.3 (0.1 each): every coordinate crosses a rounding boundary → 3 = ⌈0.3⌉ + 3 - 1
    v = np.array([0.5, 1.5, 2.5])
    w = v - 0.1
    assert np.abs(round_to_grid(v, g) - round_to_grid(w, g)).sum() == 3 == granular_l1_sensitivity(0.3, g, 3)
    # integer Δ/γ: Δ = 2, m = 1 → ⌈2⌉ = 2 (not 3: round half up never gains a step here)
    assert granular_l1_sensitivity(2.0, g, 1) == 2
    # L2, m = 4, Δ = 0.2: four coordinates each crossing → ‖(1,1,1,1)‖ = 2 ≤ ⌈0.2 + 2⌉ = 3
    assert granular_l2_sensitivity(0.2, g, 4) == 3
    assert granular_l2_sensitivity(3.0, g, 1) == 3
    assert granular_l2_sensitivity(3.0, g, 9) == 6  # ⌈3 + 3⌉


# ------------------------------------------------------------------------------------------------
# laplace_mechanism
# ------------------------------------------------------------------------------------------------
def test_laplace_mechanism_event_and_grid():
    v = np.array([0.3, -12.25, 7.0])
    out, ev = laplace_mechanism(v, 2.0, 0.5, RandomSource.from_seed(b"lm"))
    g = granularity_for(2.0 / 0.5)
    assert out.shape == v.shape and np.all(out / g == np.floor(out / g))
    assert isinstance(ev, DiscreteLaplaceEvent)
    assert ev.sensitivity == math.ceil(2.0 / g) + 3 - 1
    assert Fraction(ev.sensitivity) / Fraction(ev.scale) <= Fraction(0.5)  # exactly ≤ ε
    assert ev.epsilon == pytest.approx(0.5, rel=1e-12)


def test_laplace_mechanism_scalar_and_l0():
    out, ev = laplace_mechanism(1.0, 1.0, 1.0, RandomSource.from_seed(b"s"))
    assert isinstance(out, float)
    _, ev1 = laplace_mechanism([1.0, 2.0], 1.0, 1.0, RandomSource.from_seed(b"s"), l0_sensitivity=1)
    _, ev2 = laplace_mechanism([1.0, 2.0], 1.0, 1.0, RandomSource.from_seed(b"s"))
    assert ev2.sensitivity == ev1.sensitivity + 1


def test_laplace_mechanism_noise_distribution():
    # noisy - value ~ Laplace(Δ/ε) up to the 2^-40-relative grid: KS test on many independent entries
    n = 20_000
    v = np.full(n, 3.0)
    out, ev = laplace_mechanism(v, 1.0, 2.0, RandomSource.from_seed(b"ld"), l0_sensitivity=1)
    assert stats.kstest((out - 3.0) / 0.5, "laplace").pvalue > P_MIN


def test_laplace_mechanism_explicit_granularity():
    out, ev = laplace_mechanism([0.26, 0.74], 1.0, 1.0, RandomSource.from_seed(b"g"), granularity=0.5, l0_sensitivity=1)
    assert np.all(out * 2 == np.floor(out * 2))
    assert ev.sensitivity == 2 and ev.scale == 2.0  # Δ/γ = 2, ε = 1 → scale 2 grid steps
    with pytest.raises(InvalidParameterError, match="granularity"):
        laplace_mechanism([0.1], 1.0, 1.0, RandomSource.from_seed(b"g"), granularity=2.0**-60)


# ------------------------------------------------------------------------------------------------
# gaussian_mechanism
# ------------------------------------------------------------------------------------------------
def test_gaussian_mechanism_event():
    out, ev = gaussian_mechanism([1.0, 2.0, 3.0], 1.0, 4.0, RandomSource.from_seed(b"gm"))
    g = granularity_for(4.0)
    assert isinstance(ev, DiscreteGaussianEvent)
    assert ev.sigma == 4.0 / g and ev.sampler_tv == 0.0
    assert ev.sensitivity == granular_l2_sensitivity(1.0, g, 3) == math.ceil(1.0 / g + math.sqrt(3))
    # noise multiplier within 2^-39 of σ/Δ
    assert ev.sigma / ev.sensitivity == pytest.approx(4.0, rel=2**-36)


def test_gaussian_mechanism_distribution():
    n = 20_000
    out, _ = gaussian_mechanism(np.zeros(n), 1.0, 2.5, RandomSource.from_seed(b"gd"))
    assert stats.kstest(out / 2.5, "norm").pvalue > P_MIN


def test_gaussian_mechanism_with_table():
    table = DiscreteGaussianTable(1024.0)
    v = np.linspace(-1, 1, 1000)
    out, ev = gaussian_mechanism(v, 0.5, 2.0, RandomSource.from_seed(b"gt"), table=table, l0_sensitivity=1)
    g = 2.0 / 1024.0
    assert np.all(out / g == np.floor(out / g))
    assert ev.sigma == 1024.0 and ev.sensitivity == math.ceil(0.5 / g)
    assert ev.sampler_tv >= 1000 * table.tv_distance
    eps, dlt = epsilon_of(ev, 1e-6)
    assert dlt > 1e-6  # the TV term is counted
    # the same words through the table directly
    z = table.sample(1000, RandomSource.from_seed(b"gt"))
    np.testing.assert_array_equal(out, (round_to_grid(v, g) + z) * g)


def test_gaussian_mechanism_table_mismatch():
    table = DiscreteGaussianTable(1000.0)
    with pytest.raises(InvalidParameterError, match="table"):
        gaussian_mechanism([0.0], 1.0, 3.0, RandomSource.from_seed(b"x"), table=table)  # 3/1000 not 2^k
    with pytest.raises(InvalidParameterError, match="table"):
        gaussian_mechanism([0.0], 1.0, 3.0, RandomSource.from_seed(b"x"), table=table, granularity=2.0**-8)
    coarse = DiscreteGaussianTable(1024.0, precision_bits=16)
    with pytest.raises(InvalidParameterError, match="table"):
        gaussian_mechanism(np.zeros(100_000), 1.0, 2.0, RandomSource.from_seed(b"x"), table=coarse)


# ------------------------------------------------------------------------------------------------
# integer mechanisms
# ------------------------------------------------------------------------------------------------
def test_discrete_laplace_mechanism():
    out, ev = discrete_laplace_mechanism([3, -4, 10], 2, 4.0, RandomSource.from_seed(b"dl"))
    assert out.dtype == np.int64 and out.shape == (3,)
    assert ev == DiscreteLaplaceEvent(scale=4.0, sensitivity=2)
    out1, _ = discrete_laplace_mechanism(7, 1, 1.0, RandomSource.from_seed(b"dl"))
    assert isinstance(out1, int)


def test_discrete_laplace_mechanism_fraction_scale_rounds_event_down():
    _, ev = discrete_laplace_mechanism([1], 1, Fraction(1, 3), RandomSource.from_seed(b"f"))
    assert Fraction(ev.scale) <= Fraction(1, 3)  # ε recorded ≥ true ε


def test_discrete_laplace_mechanism_distribution():
    # (noisy - value) must follow P[z] ∝ exp(-|z|/b): chi-square on the central values
    b = 2.0
    n = 50_000
    out, _ = discrete_laplace_mechanism(np.full(n, 5), 1, b, RandomSource.from_seed(b"dld"))
    z = out - 5
    q = math.exp(-1 / b)
    xs = np.arange(-12, 13)
    p = (1 - q) / (1 + q) * np.exp(-np.abs(xs) / b)
    obs = np.array([np.sum(z <= -12)] + [np.sum(z == x) for x in xs[1:-1]] + [np.sum(z >= 12)])
    tail = (1 - q) / (1 + q) * q**12 / (1 - q)
    exp = np.concatenate([[tail], p[1:-1], [tail]]) * n
    assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > P_MIN


def test_discrete_gaussian_mechanism():
    out, ev = discrete_gaussian_mechanism(np.arange(6).reshape(2, 3), 3, 5.5, RandomSource.from_seed(b"dg"))
    assert out.shape == (2, 3) and out.dtype == np.int64
    assert ev == DiscreteGaussianEvent(sigma=5.5, sensitivity=3, sampler_tv=0.0)
    _, ev2 = discrete_gaussian_mechanism([1], 1, Fraction(10, 3), RandomSource.from_seed(b"dg"))
    assert Fraction(ev2.sigma) <= Fraction(10, 3)


def test_discrete_gaussian_mechanism_table():
    table = DiscreteGaussianTable(8.0)
    v = np.arange(500)
    out, ev = discrete_gaussian_mechanism(v, 1, 8.0, RandomSource.from_seed(b"dt"), table=table)
    np.testing.assert_array_equal(out - v, table.sample(500, RandomSource.from_seed(b"dt")))
    assert ev.sampler_tv >= 500 * table.tv_distance > 0
    with pytest.raises(InvalidParameterError, match="table"):
        discrete_gaussian_mechanism(v, 1, 8.5, RandomSource.from_seed(b"dt"), table=table)


# ------------------------------------------------------------------------------------------------
# validation: typed errors, and no randomness consumed
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call,field",
    [
        (lambda s: laplace_mechanism([], 1.0, 1.0, s), "values"),
        (lambda s: laplace_mechanism([float("nan")], 1.0, 1.0, s), "values"),
        (lambda s: laplace_mechanism([1.0], -1.0, 1.0, s), "sensitivity"),
        (lambda s: laplace_mechanism([1.0], 1.0, 0.0, s), "epsilon"),
        (lambda s: laplace_mechanism([1.0], 1.0, float("nan"), s), "epsilon"),
        (lambda s: laplace_mechanism([1.0], 1.0, 1.0, s, granularity=0.3), "granularity"),
        (lambda s: laplace_mechanism([1.0, 2.0], 1.0, 1.0, s, l0_sensitivity=3), "l0_sensitivity"),
        (lambda s: laplace_mechanism([1.0, 2.0], 1.0, 1.0, s, l0_sensitivity=0), "l0_sensitivity"),
        (lambda s: laplace_mechanism(["a"], 1.0, 1.0, s), "values"),
        (lambda s: gaussian_mechanism([1.0], 1.0, -2.0, s), "sigma"),
        (lambda s: gaussian_mechanism([1.0], 0.0, 2.0, s), "sensitivity"),
        (lambda s: gaussian_mechanism([1.0], 1.0, 2.0, s, table="t"), "table"),
        (lambda s: gaussian_mechanism([1.0], 1.0, 2.0, s, granularity=2.0**-60), "granularity"),
        (lambda s: discrete_laplace_mechanism([1.5], 1, 1.0, s), "values"),
        (lambda s: discrete_laplace_mechanism([True], 1, 1.0, s), "values"),
        (lambda s: discrete_laplace_mechanism([], 1, 1.0, s), "values"),
        (lambda s: discrete_laplace_mechanism([2**62], 1, 1.0, s), "values"),
        (lambda s: discrete_laplace_mechanism([1], 0, 1.0, s), "sensitivity"),
        (lambda s: discrete_laplace_mechanism([1], 1.5, 1.0, s), "sensitivity"),
        (lambda s: discrete_laplace_mechanism([1], 1, -1.0, s), "scale"),
        (lambda s: discrete_gaussian_mechanism([1], 1, 0.0, s), "sigma"),
        (lambda s: discrete_gaussian_mechanism([1], -2, 1.0, s), "sensitivity"),
        (lambda s: discrete_gaussian_mechanism(np.array([], dtype=int), 1, 1.0, s), "values"),
        (lambda s: discrete_gaussian_mechanism([1], 1, 1.0, s, table=3), "table"),
    ],
)
def test_bad_input_raises_and_consumes_nothing(call, field):
    src = CountingSource()
    with pytest.raises(InvalidParameterError, match=field):
        call(src)
    assert src.n == 0


def test_bad_source():
    with pytest.raises(InvalidParameterError, match="source"):
        laplace_mechanism([1.0], 1.0, 1.0, None)
    with pytest.raises(InvalidParameterError, match="source"):
        discrete_gaussian_mechanism([1], 1, 1.0, np.random.default_rng(0))


def test_events_count_in_the_accountant():
    _, e1 = laplace_mechanism([1.0], 1.0, 0.7, RandomSource.from_seed(b"a"))
    _, e2 = gaussian_mechanism([1.0], 1.0, 3.0, RandomSource.from_seed(b"a"))
    assert e1.epsilon <= 0.7
    eps1, d1 = epsilon_of(e1, 1e-9)
    assert math.isfinite(eps1) and d1 == 1e-9
    eps2, _ = epsilon_of(e2, 1e-6)
    from dprag.accounting.events import GaussianEvent

    eps_ref, _ = epsilon_of(GaussianEvent(sigma=3.0, sensitivity=1.0), 1e-6)
    assert eps_ref <= eps2 <= eps_ref * (1 + 1e-9)  # granular rounding costs ~2^-40 relative


def test_grid_output_forms_the_integer_sum_exactly():
    # Double rounding: k = 2^55, z = 2^54 + 5. Exact k + z rounds (ulp 8) up to 2^55 + 2^54 + 8; the naive
    # float(k) + float(z) first rounds z to 2^54 + 4, then the tie rounds to even, 2^55 + 2^54.
    from dprag.accounting.mechanisms.additive import _grid_output

    k = np.array([2.0**55, 2.0**63, -(2.0**70)])
    z = np.array([2**54 + 5, 5, -3], dtype=np.int64)
    got = _grid_output(k, z, 0.5)
    expected = [float(2**55 + 2**54 + 5) * 0.5, float(2**63 + 5) * 0.5, float(-(2**70) - 3) * 0.5]
    assert got.tolist() == expected
    assert expected[0] == (2**55 + 2**54 + 8) * 0.5
    assert (k[0] + float(z[0])) * 0.5 == (2**55 + 2**54) * 0.5  # what the naive path would release
