"""Mann–Whitney AUC and its standard errors (lab/auc.py) against independent computations:
brute-force pair counting, scipy's Mann–Whitney U, explicit DeLong placements, the exact null variance of U,
a hand-computed Hanley–McNeil value, and the Monte Carlo spread of the estimator."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import ndtr
from scipy.stats import mannwhitneyu

from dprag.errors import InvalidParameterError
from dprag.lab.auc import delong_se, hanley_mcneil_se, mann_whitney_auc


def _brute(x, y):
    return np.mean([[1.0 if a > b else 0.5 if a == b else 0.0 for b in y] for a in x])


def _brute_delong(x, y):
    psi = np.array([[1.0 if a > b else 0.5 if a == b else 0.0 for b in y] for a in x])
    v10, v01 = psi.mean(axis=1), psi.mean(axis=0)
    return math.sqrt(np.var(v10, ddof=1) / len(x) + np.var(v01, ddof=1) / len(y))


@pytest.mark.parametrize("ties", [False, True])
def test_auc_and_delong_against_brute_force(ties):
    rng = np.random.default_rng(1)
    for m, n in ((7, 5), (40, 33), (2, 2)):
        x = rng.normal(0.4, 1, m)
        y = rng.normal(0.0, 1, n)
        if ties:
            x, y = np.round(x * 2), np.round(y * 2)  # many ties
        est = mann_whitney_auc(x, y)
        assert est.auc == pytest.approx(_brute(x, y), abs=1e-12)
        u = mannwhitneyu(x, y, alternative="two-sided").statistic
        assert est.auc == pytest.approx(u / (m * n), abs=1e-12)
        assert est.stderr == pytest.approx(_brute_delong(x, y), rel=1e-9, abs=1e-12)
        assert delong_se(x, y) == pytest.approx(est.stderr)


def test_infinite_scores_rank_last_and_first():
    est = mann_whitney_auc([math.inf, 1.0, 2.0], [-math.inf, -math.inf, 1.0])
    assert est.auc == pytest.approx(_brute([math.inf, 1.0, 2.0], [-math.inf, -math.inf, 1.0]))


def test_hanley_mcneil_hand_computed():
    # A = 1/2, m = n = 50: Q1 = Q2 = 1/3, SE² = (1/4 + 2·49·(1/3 − 1/4)) / 2500 = 8.41667/2500
    assert hanley_mcneil_se(0.5, 50, 50) == pytest.approx(math.sqrt((0.25 + 98 / 12) / 2500), rel=1e-12)
    # A = 0.9, m = 30, n = 20: Q1 = 0.9/1.1, Q2 = 1.62/1.9
    q1, q2 = 0.9 / 1.1, 1.62 / 1.9
    want = math.sqrt((0.09 + 29 * (q1 - 0.81) + 19 * (q2 - 0.81)) / 600)
    assert hanley_mcneil_se(0.9, 30, 20) == pytest.approx(want, rel=1e-12)


def test_standard_errors_match_the_spread_of_the_estimator():
    # Null: Var(U/(mn)) = (m + n + 1)/(12mn) exactly (continuous scores). Shifted Gaussians: the Monte Carlo
    # standard deviation of the estimate over 250 replications. Seeded; the 20% tolerance is > 4 standard errors
    # of a standard-deviation estimate from 250 replications (≈ 4.5%), false-failure rate < 1e-4.
    rng = np.random.default_rng(7)
    m, n = 120, 90
    for shift in (0.0, 1.0):
        aucs, ses, hms = [], [], []
        for _ in range(250):
            e = mann_whitney_auc(rng.normal(shift, 1, m), rng.normal(0, 1, n))
            aucs.append(e.auc)
            ses.append(e.stderr)
            hms.append(e.stderr_hanley_mcneil)
        sd = np.std(aucs, ddof=1)
        if shift == 0.0:
            assert sd == pytest.approx(math.sqrt((m + n + 1) / (12 * m * n)), rel=0.20)
        assert np.mean(ses) == pytest.approx(sd, rel=0.20)
        assert np.mean(hms) == pytest.approx(sd, rel=0.20)
        assert np.mean(aucs) == pytest.approx(float(ndtr(shift / math.sqrt(2))), abs=4 * sd / math.sqrt(250))


def test_bad_input_names_the_field():
    with pytest.raises(InvalidParameterError, match="pos"):
        mann_whitney_auc([1.0], [1.0, 2.0])
    with pytest.raises(InvalidParameterError, match="neg"):
        mann_whitney_auc([1.0, 2.0], [1.0, math.nan])
    with pytest.raises(InvalidParameterError, match="auc"):
        hanley_mcneil_se(1.5, 10, 10)
