"""The scalar mechanism M* of 002 (3.3) through the library's own Gaussian mechanism (lab/leakage/scalar.py):
per-query draws (every release's noise) and the sufficient statistic (group sums) both agree with the closed
form Φ(Δ√(kn)/(√2σ)) (accounting.collusion.pooled_mean_auc) and with each other."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dprag.accounting import collusion
from dprag.errors import InvalidParameterError
from dprag.lab.auc import mann_whitney_auc
from dprag.lab.leakage.adversaries import split_auc
from dprag.lab.leakage.scalar import ScalarCell, calibrate_sigma, group_size, scalar_trials

SEED = b"test-leakage-scalar"


def _cell(mode, rhos=(), k=2, n=10, sigma=8.0):
    return ScalarCell(k, n, 4.0, 1e-6, sigma, gap=2.0, sensitivity=2.0, rhos=rhos, mode=mode)


def _check_modes(k, n, sigma, trials, seed):
    """Both modes: AUC within 3 SE of the closed form and of each other; pooled means N(s_b, σ²/(kn))."""
    pred = collusion.pooled_mean_auc(k, n, sigma, 2.0)
    ests = {}
    sd = sigma / math.sqrt(k * n)
    for mode in ("per-query", "sufficient"):
        rows = scalar_trials(_cell(mode, k=k, n=n, sigma=sigma), seed, 0, trials)
        ests[mode] = mann_whitney_auc(rows[:, 0], rows[:, 1])
        assert abs(ests[mode].auc - pred) <= 3 * ests[mode].stderr, (mode, ests[mode], pred)
        for col, mu in ((0, 1.0), (1, -1.0)):  # mean within 4 SE; variance within 5 SE of its estimate
            assert abs(rows[:, col].mean() - mu) < 4 * sd / math.sqrt(trials)
            assert rows[:, col].var(ddof=1) == pytest.approx(sd * sd, rel=5 * math.sqrt(2 / trials))
    a, b = ests["per-query"], ests["sufficient"]
    assert abs(a.auc - b.auc) <= 3 * math.hypot(a.stderr, b.stderr)
    return pred


def test_per_query_and_sufficient_agree_with_the_closed_form():
    # k = 2, n = 10, σ = 8: AUC = Φ(2·√20/(√2·8)) ≈ 0.785; 200 trials per mode (SE ≈ 0.032). Each AUC check is a
    # |z| <= 3 test (two-sided false-failure rate 0.27% each, ≈ 0.8% for the three; mean/variance checks at 4-5
    # SE add < 0.1%); the seed is fixed, so the outcome is reproducible.
    assert _check_modes(2, 10, 8.0, 200, SEED) == pytest.approx(0.785, abs=2e-3)


@pytest.mark.slow
def test_per_query_and_sufficient_agree_with_the_closed_form_larger():
    # k = 5, n = 40, σ = 60: AUC ≈ Φ(0.471) ≈ 0.681; 2000 trials (SE ≈ 0.012); same false-failure rates.
    _check_modes(5, 40, 60.0, 2000, SEED + b"/large")


def test_split_columns_agree_with_split_auc():
    # k = 8: ρ = 0.5 → 4 accounts, ρ = 0.25 → 2 (groups of g = 2). 200 trials, 3-SE checks (0.27% each).
    cell = ScalarCell(8, 10, 4.0, 1e-6, 20.0, rhos=(0.5, 0.25))
    assert group_size(cell) == 2
    rows = scalar_trials(cell, SEED + b"/split", 0, 200)
    for j, rho in enumerate((0.5, 0.25)):
        e = mann_whitney_auc(rows[:, 2 + 2 * j], rows[:, 3 + 2 * j])
        assert abs(e.auc - split_auc(8, 10, 20.0, 2.0, rho)) <= 3 * e.stderr
    full = mann_whitney_auc(rows[:, 0], rows[:, 1])
    assert abs(full.auc - collusion.pooled_mean_auc(8, 10, 20.0, 2.0)) <= 3 * full.stderr


def test_a_trial_depends_only_on_seed_cell_and_index():
    cell = _cell("sufficient", rhos=(0.5,), k=4)
    whole = scalar_trials(cell, SEED, 0, 6)
    assert np.array_equal(scalar_trials(cell, SEED, 3, 6), whole[3:])
    assert not np.array_equal(scalar_trials(cell, SEED + b"x", 0, 6), whole)


def test_calibrations_are_the_accounting_ones():
    assert calibrate_sigma(1.0, 1e-6, 10_000, 2.0, "3.4") == collusion.eq_3_4_sigma(1.0, 1e-6, 10_000, 2.0)
    assert calibrate_sigma(1.0, 1e-6, 10_000, 2.0, "exact") == collusion.exact_sigma(1.0, 1e-6, 10_000, 2.0)
    # with Δ = gap = sensitivity the prediction is scale-free: 002's Δ = 1 reading gives the same AUC
    s2, s1 = (collusion.eq_3_4_sigma(4.0, 1e-6, 10_000, d) for d in (2.0, 1.0))
    assert collusion.pooled_mean_auc(20, 10_000, s2, 2.0) == pytest.approx(
        collusion.pooled_mean_auc(20, 10_000, s1, 1.0)
    )
    with pytest.raises(InvalidParameterError, match="calibration"):
        calibrate_sigma(1.0, 1e-6, 10, 2.0, "3.11")
    with pytest.raises(InvalidParameterError, match="gap"):
        ScalarCell(1, 10, 1.0, 1e-6, 3.0, gap=3.0, sensitivity=2.0)
