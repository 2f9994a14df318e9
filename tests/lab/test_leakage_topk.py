"""The top-K harness (lab/leakage/topk.py): its vectorised membership test agrees with the service's
noisy_top_k, its scores are the service's, and a tiny run stays below its certified bound."""

from __future__ import annotations

import numpy as np

from dprag.audit.protocol.retrieval import noise_table, noisy_top_k
from dprag.lab.auc import mann_whitney_auc
from dprag.lab.leakage.bounds import certified_auc_bound
from dprag.lab.leakage.topk import TopKCell, geometry, score_sensitivity, target_in_noisy_top_k, topk_trials


def test_membership_matches_noisy_top_k_with_ties():
    rng = np.random.default_rng(2)
    for _ in range(30):
        N, m, K = int(rng.integers(3, 30)), 40, int(rng.integers(1, 3))
        scores = rng.integers(0, 5, N)
        noise = rng.integers(-3, 4, (m, N))  # small ranges: many ties
        target = int(rng.integers(N))
        got = target_in_noisy_top_k(scores, noise, target, K)
        want = [target in noisy_top_k(scores, noise[r], K) for r in range(m)]
        assert got.tolist() == want


def test_geometry_is_the_service_scoring():
    cell = TopKCell(1, 1, 4.0, 1e-6, 1000.0)
    s_in, s_out, pos = geometry(cell, b"g", 0)
    assert s_in.shape == s_out.shape == (51,) and 0 <= pos <= 50
    assert 1000 <= s_in[pos] <= 1024  # x* = q*: cosine 1, quantised, clipped to [0, S], shifted
    assert s_out[pos] <= 40  # decoy orthogonal to the probe
    assert np.array_equal(np.delete(s_in, pos), np.delete(s_out, pos))  # paired worlds share the background
    assert score_sensitivity(1 << 10) == 1025
    ext = TopKCell(1, 1, 4.0, 1e-6, 1000.0, regime="external-m4")
    assert geometry(ext, b"g", 0)[0].shape == (101,)


def test_tiny_run_leaks_and_stays_below_the_certified_bound():
    sigma = 3000.0
    cell = TopKCell(2, 20, 4.0, 1e-6, sigma)
    rows = topk_trials(cell, b"t", 0, 60)
    assert rows.shape == (60, 2) and rows.min() >= 0 and rows.max() <= 40
    est = mann_whitney_auc(rows[:, 0], rows[:, 1])
    tv = noise_table(sigma, 10.0, 64).tv_distance
    ub = certified_auc_bound(2, 20, sigma, 1025, "discrete", tv)["upper_bound"]
    assert est.auc <= ub + 3 * est.stderr
    assert est.auc > 0.5 + 2 * est.stderr  # σ = 3000 against a gap of ~1000 units over 40 queries: clear signal
