"""MIA metrics (lab/auc.py) against independent computations: brute-force pair counts,
scipy's Mann–Whitney U, DeLong's variance by midranks (Sun & Xu 2014, a different algorithm), an ROC walk for
TPR at a fixed FPR, and Hanley–McNeil's closed form at AUC = 1/2."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import ndtr
from scipy.stats import mannwhitneyu, rankdata

from dprag.errors import InvalidParameterError
from dprag.lab.auc import Z975, auc, auc_ci, delong_se, hanley_mcneil_se, members_for_halfwidth, tpr_at_fpr


def _brute_auc(pos, neg):
    s = 0.0
    for p in pos:
        for q in neg:
            s += 1.0 if p > q else (0.5 if p == q else 0.0)
    return s / (len(pos) * len(neg))


@pytest.mark.parametrize("seed", range(5))
def test_auc_matches_pair_count_and_mann_whitney(seed):
    rng = np.random.default_rng(seed)
    pos = rng.integers(0, 6, size=17).astype(float)  # many ties on purpose
    neg = rng.integers(0, 5, size=23).astype(float)
    a = auc(pos, neg)
    assert a == pytest.approx(_brute_auc(pos, neg), abs=1e-15)
    u = mannwhitneyu(pos, neg, alternative="two-sided").statistic
    assert a == pytest.approx(u / (len(pos) * len(neg)), abs=1e-12)


def test_auc_extremes_and_ties():
    assert auc([2, 3], [0, 1]) == 1.0
    assert auc([0, 1], [2, 3]) == 0.0
    assert auc([1, 1, 1], [1, 1]) == 0.5


def _delong_midranks(pos, neg):
    """DeLong's variance from midranks (Sun & Xu 2014): V10_i = (R_all(i) - R_pos(i)) / n0, etc."""
    m, n = len(pos), len(neg)
    allr = rankdata(np.concatenate([pos, neg]))
    rx, ry = rankdata(pos), rankdata(neg)
    v10 = (allr[:m] - rx) / n
    v01 = 1.0 - (allr[m:] - ry) / m
    return math.sqrt(np.var(v10, ddof=1) / m + np.var(v01, ddof=1) / n)


@pytest.mark.parametrize("seed", range(5))
def test_delong_se_matches_midrank_algorithm(seed):
    rng = np.random.default_rng(100 + seed)
    pos = np.round(rng.normal(0.7, 1.0, size=31), 1)  # rounding makes ties
    neg = np.round(rng.normal(0.0, 1.0, size=26), 1)
    assert delong_se(pos, neg) == pytest.approx(_delong_midranks(pos, neg), rel=1e-12)


def test_ci_coverage_gaussian_scores():
    """Binormal scores with known AUC Φ(μ/√2). 400 seeded replications of 60 + 60: the 95% DeLong interval
    must cover the true AUC at least 370 times (expected ≈ 378-380; P(X < 370) for Bin(400, 0.945) ≈ 1e-3, so
    the false-failure rate of this check is about 0.1%; it is deterministic with the fixed seed)."""
    rng = np.random.default_rng(7)
    mu = 1.0
    true = float(ndtr(mu / math.sqrt(2)))
    cover = 0
    for _ in range(400):
        ci = auc_ci(rng.normal(mu, 1, 60), rng.normal(0, 1, 60))
        cover += ci.lo <= true <= ci.hi
        assert ci.se_method == "delong" and ci.lo <= ci.auc <= ci.hi
    assert cover >= 370


def test_ci_fallback_when_delong_is_zero():
    ci = auc_ci([5, 6, 7], [1, 2, 3])  # perfectly separated: DeLong variance 0
    assert ci.auc == 1.0 and ci.se_method == "hanley-mcneil" and ci.hi == 1.0
    ci = auc_ci([1, 1], [1, 1])
    assert ci.auc == 0.5 and ci.se > 0


def _roc_walk_tpr(pos, neg, alpha):
    """TPR at FPR <= alpha by walking the ROC curve over tie groups of the sorted scores."""
    s = sorted([(x, 1) for x in pos] + [(x, 0) for x in neg], key=lambda t: -t[0])
    tp = fp = 0
    best = 0.0
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j][0] == s[i][0]:
            tp += s[j][1]
            fp += 1 - s[j][1]
            j += 1
        if fp / len(neg) <= alpha:
            best = max(best, tp / len(pos))
        i = j
    return best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alpha", [0.0, 0.01, 0.05, 0.2])
def test_tpr_at_fpr_matches_roc_walk(seed, alpha):
    rng = np.random.default_rng(200 + seed)
    pos = rng.integers(0, 30, size=40).astype(float)
    neg = rng.integers(0, 25, size=150).astype(float)
    assert tpr_at_fpr(pos, neg, alpha) == pytest.approx(_roc_walk_tpr(pos, neg, alpha))


def test_tpr_at_fpr_hand_example():
    # non-members 0.85 (one false positive = 1/3 FPR); at FPR 0 only 0.9 is above every non-member
    assert tpr_at_fpr([0.9, 0.8, 0.3], [0.85, 0.1, 0.2], 0.01) == pytest.approx(1 / 3)
    assert tpr_at_fpr([0.9, 0.8, 0.3], [0.85, 0.1, 0.2], 0.30) == pytest.approx(1 / 3)
    # one false positive allowed: threshold 0.3 keeps every member and only the non-member 0.85
    assert tpr_at_fpr([0.9, 0.8, 0.3], [0.85, 0.1, 0.2], 0.34) == pytest.approx(1.0)


def test_hanley_mcneil_closed_form_at_half():
    # A = 1/2: Q1 = Q2 = 1/3, so Var = (1/4 + (n1 - 1)/12 + (n0 - 1)/12) / (n1 n0)
    for n1, n0 in ((5, 7), (260, 260), (1, 1)):
        want = math.sqrt((0.25 + (n1 - 1) / 12 + (n0 - 1) / 12) / (n1 * n0))
        assert hanley_mcneil_se(0.5, n1, n0) == pytest.approx(want, rel=1e-12)


def test_members_for_halfwidth():
    n = members_for_halfwidth(0.5, 0.05)
    # independent: the smallest n with 1.96 * sqrt((1/4 + (n-1)/6) / n^2) <= 0.05
    brute = next(k for k in range(1, 10_000) if Z975 * math.sqrt((0.25 + (k - 1) / 6) / k**2) <= 0.05)
    assert n == brute and 250 <= n <= 270
    assert members_for_halfwidth(0.9, 0.05) < n  # the interval narrows away from 1/2


def test_bad_input_raises_typed():
    with pytest.raises(InvalidParameterError, match="members"):
        auc([], [1.0])
    with pytest.raises(InvalidParameterError, match="finite"):
        auc([float("nan")], [1.0])
    with pytest.raises(InvalidParameterError, match="fpr"):
        tpr_at_fpr([1.0], [0.0], 1.5)
    with pytest.raises(InvalidParameterError, match="halfwidth"):
        members_for_halfwidth(0.5, 0.0)
