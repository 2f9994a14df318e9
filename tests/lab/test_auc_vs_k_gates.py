"""The auc-vs-k gates say what they can resolve (issue 25, item 5; lab/experiments/auc_vs_k_report.py):
a predicted effect below a gate's resolution at the trials given is "too few trials to decide" — never FAIL,
never PASS — with the trials that would decide it; a large predicted effect with a clear miss still FAILs and a
clear hit still PASSes; gates.json keeps its old keys (``pass``) beside the new ``status``."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from dprag.lab.experiments.auc_vs_k_report import RESOLUTION_SE, gate_lines, gates

KS = (1, 2, 5, 10, 20)
OLD_P1_KEYS = {"curve", "slope", "slope_stderr", "slope_z", "chi2", "dof", "p_linear", "pass"}
OLD_P3_KEYS = {"cells", "above_half_by_2se", "below_upper_bound", "ratio_min", "ratio_max", "pass"}


def scalar_rows(predicted, measured, stderr, trials=1000, eps_acc=1.0, upper_bound=0.99):
    """Scalar rows with the keys the gates read; ``predicted`` / ``measured`` map k to an AUC."""
    rows = []
    for k in KS:
        auc, pred = measured(k), predicted(k)
        rows.append(
            {
                "mechanism": "scalar",
                "statistic": "pooled-mean",
                "eps_acc": eps_acc,
                "k": k,
                "trials": trials,
                "auc": auc,
                "stderr": stderr,
                "predicted": pred,
                "upper_bound": upper_bound,
                "within_1se": abs(auc - pred) <= stderr,
                "within_2se": abs(auc - pred) <= 2 * stderr,
                "alternatives": {},
            }
        )
    return rows


def wls_slope_se(stderr):
    """SE of the weighted least-squares slope on √k with equal SEs: 1/sqrt(Σ w (x − x̄)²)."""
    x = np.sqrt(KS)
    return 1.0 / math.sqrt(np.sum((x - x.mean()) ** 2) / stderr**2)


def test_resolution_is_the_effect_a_2_se_test_sees_with_probability_095():
    assert stats.norm.sf(2.0 - RESOLUTION_SE) == pytest.approx(0.95, abs=1e-12)


def test_tiny_predicted_effect_is_too_few_trials_to_decide():
    rows = scalar_rows(lambda k: 0.5 + 0.001 * math.sqrt(k), lambda k: 0.5, stderr=0.01)  # would FAIL before
    g = gates(rows)
    p1, p3 = g["P1"][0], g["P3"]
    assert p1["status"] == "undecided" and p1["pass"] is False
    assert p1["predicted_slope"] == pytest.approx(0.001, rel=1e-9)
    se_b = wls_slope_se(0.01)
    assert p1["slope_stderr"] == pytest.approx(se_b, rel=1e-9)
    assert p1["resolution"] == pytest.approx(RESOLUTION_SE * se_b, rel=1e-9)
    assert p1["trials_needed"] == math.ceil(1000 * (RESOLUTION_SE * se_b / 0.001) ** 2)
    assert p3["status"] == "undecided" and p3["pass"] is False and len(p3["undecided_cells"]) == 5
    worst = 0.001  # k = 1: the smallest predicted excess over 1/2
    assert p3["trials_needed"] == math.ceil(1000 * (RESOLUTION_SE * 0.01 / worst) ** 2)
    lines = gate_lines(g)
    assert lines[0].endswith(
        f"too few trials to decide (predicted slope 0.0010 < resolution "
        f"{RESOLUTION_SE * se_b:.4f} at T = 1000; needs T >= {p1['trials_needed']})"
    )
    assert "too few trials to decide (predicted AUC - 1/2 below the resolution in k=1 eps_acc=1" in lines[1]
    assert f"needs T >= {p3['trials_needed']})" in lines[1]
    assert not any("FAIL" in x or "PASS" in x for x in lines)


def test_even_a_lucky_hit_under_the_resolution_is_not_a_pass():
    # the measurement passes z > 2 but the prediction could not have: the gate does not claim it
    rows = scalar_rows(lambda k: 0.5 + 0.001 * math.sqrt(k), lambda k: 0.5 + 0.02 * math.sqrt(k), stderr=0.005)
    g = gates(rows)
    assert g["P1"][0]["slope_z"] > 2 and g["P1"][0]["status"] == "undecided"


def test_large_effect_with_a_clear_miss_still_fails():
    rows = scalar_rows(lambda k: 0.5 + 0.05 * math.sqrt(k), lambda k: 0.5, stderr=0.005)
    g = gates(rows)
    assert g["P1"][0]["status"] == "fail" and g["P1"][0]["pass"] is False and g["P1"][0]["trials_needed"] is None
    assert g["P3"]["status"] == "fail" and g["P3"]["undecided_cells"] == []
    lines = gate_lines(g)
    assert lines[0].endswith(": FAIL") and lines[1].endswith(": FAIL")


def test_clear_hit_still_passes():
    rows = scalar_rows(lambda k: 0.5 + 0.05 * math.sqrt(k), lambda k: 0.5 + 0.05 * math.sqrt(k), stderr=0.005)
    g = gates(rows)
    assert g["P1"][0]["status"] == "pass" and g["P1"][0]["pass"] is True
    assert g["P3"]["status"] == "pass" and g["P3"]["pass"] is True
    lines = gate_lines(g)
    assert lines[0].endswith(": PASS") and lines[1].endswith(": PASS")


def test_p3_a_decided_miss_fails_even_beside_undecided_cells():
    rows = scalar_rows(lambda k: 0.5 + 0.05 * math.sqrt(k), lambda k: 0.5 + 0.05 * math.sqrt(k), stderr=0.005)
    rows[0] = dict(rows[0], predicted=0.501)  # k = 1: under the resolution (0.018)
    rows[-1] = dict(rows[-1], auc=0.5)  # k = 20: predicted 0.72, measured at 1/2
    assert gates(rows)["P3"]["status"] == "fail"
    rows[-1] = dict(rows[-1], auc=rows[-1]["predicted"])
    p3 = gates(rows)["P3"]
    assert p3["status"] == "undecided" and [u["k"] for u in p3["undecided_cells"]] == [1]


def test_p3_a_cell_above_its_certified_bound_always_fails():
    rows = scalar_rows(lambda k: 0.5 + 0.001, lambda k: 0.9, stderr=0.005, upper_bound=0.6)
    assert gates(rows)["P3"]["status"] == "fail"


def test_zero_predicted_effect_names_no_trial_count():
    rows = scalar_rows(lambda k: 0.5, lambda k: 0.5, stderr=0.01)
    g = gates(rows)
    assert g["P1"][0]["status"] == "undecided" and g["P1"][0]["trials_needed"] is None
    assert g["P3"]["trials_needed"] is None
    assert "no trial count given decides it" in gate_lines(g)[0]


def test_without_a_prediction_the_gate_decides_as_before():
    rows = [
        dict(r, mechanism="topk", predicted=None, regime="x") for r in scalar_rows(lambda k: 0.5, lambda k: 0.5, 0.01)
    ]
    p1 = gates(rows)["P1"][0]
    assert p1["status"] == "fail" and p1["predicted_slope"] is None


def test_gates_json_keeps_the_old_keys_and_old_files_still_print():
    rows = scalar_rows(lambda k: 0.5 + 0.001 * math.sqrt(k), lambda k: 0.5, stderr=0.01)
    g = json.loads(json.dumps(gates(rows), sort_keys=True))
    assert OLD_P1_KEYS <= set(g["P1"][0]) and OLD_P3_KEYS <= set(g["P3"])
    assert {"within_1se", "within_2se", "cells", "alternatives_max_excess_over_baseline"} <= set(g)
    # a gates.json written before the status field: PASS / FAIL from ``pass``
    old = {
        "P1": [{k: g["P1"][0][k] for k in OLD_P1_KEYS} | {"pass": True}],
        "P3": {k: g["P3"][k] for k in OLD_P3_KEYS} | {"pass": False},
        "within_1se": 1,
        "within_2se": 2,
        "cells": 5,
    }
    lines = gate_lines(old)
    assert lines[0].endswith(": PASS") and lines[1].endswith(": FAIL")
