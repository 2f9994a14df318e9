"""The streamed estimator (issue 9 items 6 and 9): the auditor's defaults, bounded memory for any θ, float32
candidates with exact decisions, and the probe-detection harness."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from dprag.audit.verify import estimator as E
from dprag.errors import InvalidParameterError
from dprag.lab.estimator_calibration import sphere
from dprag.lab.estimator_probe import PLACEMENTS, ProbeConfig, probe_detection, probe_table, probe_trial


class Float64Search:
    """The pre-streaming path (float64 band search, every candidate materialised) as a reference."""

    def __call__(self, unit, theta, window, positions):
        return E.exact_window_search(unit, theta, window, positions)


def _case(rng, n, d, accounts, dup=0.2):
    x = rng.integers(-3, 4, size=(n, d)).astype(np.int16)
    k = int(dup * n)
    src = rng.integers(0, n, size=k)
    x[rng.integers(0, n, size=k)] = x[src]  # exact duplicates: cosine 1
    acc = rng.integers(0, accounts, size=n).tolist()
    pos = np.cumsum(rng.integers(1, 4, size=n))
    return x, acc, pos


def test_defaults_are_the_auditors():
    assert 0 < E.DEFAULT_THETA < 1 and E.DEFAULT_WINDOW is None
    import inspect

    sig = inspect.signature(E.coalition_size)
    assert sig.parameters["theta"].default == E.DEFAULT_THETA
    assert sig.parameters["window"].default is None


def test_stream_equals_float64_reference_at_many_thresholds():
    rng = np.random.default_rng(7)
    for trial in range(12):
        x, acc, pos = _case(rng, 400, 6, 15)
        w = int(rng.integers(1, 60))
        # θ at exact cosines that occur in the data: every boundary case is exercised
        u = E.unit_rows(x)
        g = u[:50] @ u[50:100].T
        thetas = sorted({float(t) for t in np.clip(rng.choice(g.ravel(), 4), 0.05, 1.0)} | {1.0, 0.5})
        a = E.coalition_size_curve(x, acc, thetas, w, positions=pos)
        b = E.coalition_size_curve(x, acc, thetas, w, positions=pos, search=Float64Search())
        assert a.tolist() == b.tolist(), (trial, thetas)
        for t in thetas:
            ca = E.coalition_clusters(x, acc, t, w, positions=pos)
            cb = E.coalition_clusters(x, acc, t, w, positions=pos, search=Float64Search())
            assert ca == cb


def test_float32_margin_keeps_near_threshold_pairs_exact():
    """Pairs whose cosine is within 1e-7 of θ (below float32 resolution) are decided by the exact rule."""
    rng = np.random.default_rng(3)
    d = 384
    base = rng.standard_normal(d)
    base /= np.linalg.norm(base)
    rows, acc = [], []
    for k in range(60):
        v = base + 0.35 * rng.standard_normal(d) / np.sqrt(d)
        rows.append(v)
        acc.append(k)
    x = np.asarray(rows)
    u = E.unit_rows(x)
    cos = u[0] @ u[1:].T
    theta = float(np.sort(cos)[len(cos) // 2])  # exactly one pair's computed cosine
    for th in (theta, np.nextafter(theta, 1), np.nextafter(theta, 0), theta + 1e-7, theta - 1e-7):
        a = E.coalition_size(x, acc, th, 100)
        b = E.coalition_size(x, acc, th, 100, search=Float64Search())
        assert a == b
        la = E.link_pairs(x, th, 100)
        ok = E.exact_links(x, la, th)
        assert ok.all()


def test_memory_is_bounded_for_a_tiny_theta():
    """n = 8,000, θ = 0.01: every pair is a candidate (3.2·10^7 of them, > 500 MB as index pairs alone);
    the streamed estimator stays within a few tiles."""
    rng = np.random.default_rng(0)
    n, d = 8000, 16
    x = np.abs(rng.standard_normal((n, d)))  # positive orthant: every cosine > 0.01
    acc = rng.integers(0, 2000, size=n).tolist()
    tracemalloc.start()
    try:
        c = E.coalition_size(x, acc, 0.01, n)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert c == len(set(acc))
    assert peak < 96 * 2**20, peak / 2**20
    tracemalloc.start()
    try:  # no saturation shortcut: the labels are still computed in bounded memory
        labels = E.component_labels(x, acc, [0.01], n)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (labels == 0).all() and peak < 96 * 2**20


def test_component_labels_match_clusters():
    rng = np.random.default_rng(11)
    x, acc, pos = _case(rng, 300, 5, 12)
    th = [0.6, 0.9, 1.0]
    labels = E.component_labels(x, acc, th, 40, positions=pos)
    assert labels.shape == (3, 300)
    for g, t in enumerate(th):
        sets = []
        for lab in np.unique(labels[g]):
            members = {acc[i] for i in np.flatnonzero(labels[g] == lab)}
            if len(members) >= 2:
                sets.append((int(lab), members))
        sets.sort()
        assert [s for _, s in sets] == E.coalition_clusters(x, acc, t, 40, positions=pos)
        assert labels[g][labels[g]].tolist() == labels[g].tolist()  # label = a member (the smallest row)
    # nested in θ: a cluster at a higher θ lies inside one cluster at a lower θ
    for hi_, lo_ in ((2, 1), (1, 0)):
        for lab in np.unique(labels[hi_]):
            assert np.unique(labels[lo_][labels[hi_] == lab]).size == 1


def test_default_window_covers_the_whole_audit_window_within_budget():
    pos = np.arange(100_000) + np.arange(100_000) // 10
    assert E.default_window(pos, 384) == pos[-1] - pos[0]
    assert E.resolve_window(None, pos, 384) == pos[-1] - pos[0]
    assert E.resolve_window(77, pos, 384) == 77
    big = np.arange(1_000_000)
    w = E.default_window(big, 384)
    assert w < 999_999
    assert E.band_pairs(big, w) * 384 <= E.DEFAULT_PAIR_DIM_BUDGET < E.band_pairs(big, w + 1) * 384
    assert E.band_pairs(np.arange(10), 9) == 45 and E.band_pairs(np.array([0, 5, 6]), 1) == 1
    assert E.default_window(np.array([3]), 384) == 1
    with pytest.raises(InvalidParameterError, match="window"):
        E.resolve_window(0, pos, 384)
    # None reaches the estimator: the same ĉ as the explicit whole window
    rng = np.random.default_rng(2)
    x, acc, p = _case(rng, 200, 4, 10)
    assert E.coalition_size(x, acc, 0.8, None, positions=p) == E.coalition_size(
        x, acc, 0.8, int(p[-1] - p[0]), positions=p
    )


def test_probe_trial_placements():
    rng = np.random.default_rng(5)
    pool = sphere(rng, 300, 8)
    cfg = ProbeConfig(honest_accounts=10, queries_per_account=100)
    probes = sphere(rng, 8, 8)
    for placement in PLACEMENTS:
        x, acc, isp = probe_trial(rng, cfg, pool, probes, placement)
        assert x.shape == (1008, 8) and isp.sum() == 8
        where = np.flatnonzero(isp)
        step = 1 if placement == "adjacent" else 100
        assert np.diff(where).tolist() == [step] * 7
        assert acc[where].tolist() == list(range(10, 18)) and np.allclose(x[where], probes)
        assert sorted(np.bincount(acc[~isp]).tolist()) == [100] * 10
    with pytest.raises(InvalidParameterError, match="placement"):
        probe_trial(rng, cfg, pool, probes, "sideways")
    with pytest.raises(InvalidParameterError, match="probes"):
        probe_trial(rng, cfg, pool, probes[:3], "adjacent")


def test_probe_detection_separates_linked_from_diverse_coalitions():
    """Deterministic given the seed: identical probes are caught at every θ and placement (any window
    covering the traffic links them); probes drawn iid on S^31 are never linked at θ >= 0.8 (P(cos >= 0.8)
    < 1e-7 per pair, so 28 pairs × 4 trials give a false-failure rate < 1e-5)."""
    rng = np.random.default_rng(9)
    pool = sphere(rng, 2000, 32)
    probe = sphere(rng, 1, 32)[0]
    cells = {"same": lambda r: np.repeat(probe[None], 8, 0), "iid": lambda r: sphere(r, 8, 32)}
    cfg = ProbeConfig(honest_accounts=10, queries_per_account=100, thetas=(0.8, 0.9, 1.0))
    res = probe_detection(pool, cells, cfg, trials=4, seed=1)
    for p in PLACEMENTS:
        assert res["cells"][f"same/{p}"]["caught"].tolist() == [1.0, 1.0, 1.0]
        assert res["cells"][f"same/{p}"]["alarm"].tolist() == [1.0, 1.0, 1.0]
        assert res["cells"][f"iid/{p}"]["caught"].tolist() == [0.0, 0.0, 0.0]
        assert (res["cells"][f"iid/{p}"]["mean_colluders_linked"] == 1).all()
    table = probe_table(res, 0.9)
    assert "| same/spaced | 1.00 | 1.00 | 8.0 |" in table and "| iid/adjacent |" in table
    with pytest.raises(InvalidParameterError, match="theta"):
        probe_table(res, 0.5)
    # a window shorter than the spacing loses the spaced coalition, not the adjacent one
    short = ProbeConfig(honest_accounts=10, queries_per_account=100, thetas=(1.0,), window=50)
    r2 = probe_detection(pool, cells, short, trials=2, seed=1)
    assert r2["cells"]["same/adjacent"]["caught"].tolist() == [1.0]
    assert r2["cells"]["same/spaced"]["caught"].tolist() == [0.0]
