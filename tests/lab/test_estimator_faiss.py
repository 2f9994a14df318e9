"""FAISS neighbour search for the coalition-size estimator (rag_adapters/ann_links.py): it must give exactly
the numpy default's links, clusters and ĉ (spec/estimator.md §3)."""

from __future__ import annotations

import numpy as np
import pytest

from dprag.audit.verify.estimator import (
    NeighbourSearch,
    coalition_clusters,
    coalition_size,
    coalition_size_curve,
    link_pairs,
)
from dprag.errors import InvalidParameterError
from dprag.lab.estimator_calibration import THETA_GRID, ToyConfig, toy_queries
from dprag.rag_adapters.ann_links import FaissWindowSearch, float32_margin


@pytest.fixture(scope="module")
def faiss_search():
    return FaissWindowSearch(threads=2)


def _near_boundary(rng, n, d, theta):
    """Unit rows where many pairs have cosine within ~1e-7 of θ (the float32 values cannot decide them)."""
    base = rng.standard_normal((n // 2, d))
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    # partner = cos(φ)·b + sin(φ)·w with w ⟂ b, cos(φ) = θ + tiny
    w = rng.standard_normal((n // 2, d))
    w -= (w * base).sum(1, keepdims=True) * base
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    c = theta + rng.uniform(-3e-7, 3e-7, (n // 2, 1))
    partner = c * base + np.sqrt(1 - c * c) * w
    out = np.empty((2 * (n // 2), d))
    out[0::2], out[1::2] = base, partner
    return out


def test_is_a_neighbour_search(faiss_search):
    assert isinstance(faiss_search, NeighbourSearch)
    assert faiss_search.exact is True


@pytest.mark.parametrize(
    "n, d, window, theta",
    [
        (2000, 8, 50, 0.7),
        (3000, 32, 2999, 0.6),
        (1500, 384, 400, 0.15),
        (900, 384, 3, 0.05),
        (5, 4, 10, 0.5),
    ],
)
def test_same_links_as_numpy_on_random_data(faiss_search, n, d, window, theta):
    rng = np.random.default_rng(n + d)
    x = rng.standard_normal((n, d))
    ref = link_pairs(x, theta, window)
    got = link_pairs(x, theta, window, search=faiss_search)
    assert np.array_equal(got, ref)


def test_same_links_near_the_threshold(faiss_search):
    rng = np.random.default_rng(8)
    for d, theta in [(32, 0.8), (384, 0.9)]:
        x = _near_boundary(rng, 600, d, theta)
        ref = link_pairs(x, theta, 1)
        got = link_pairs(x, theta, 1, search=faiss_search)
        assert 50 < ref.shape[0] < 250  # the case really straddles θ (about half of the 300 pairs link)
        assert np.array_equal(got, ref)


def test_same_on_int16_with_duplicates_and_gapped_positions(faiss_search):
    rng = np.random.default_rng(21)
    q = np.clip(np.round(rng.standard_normal((2500, 64)) * 1024), -32768, 32767).astype(np.int16)
    q[100:400] = q[rng.integers(0, 100, 300)]  # verbatim repeats
    acc = [f"a{k}" for k in rng.integers(0, 40, 2500)]
    pos = np.cumsum(rng.integers(1, 3, 2500))
    for theta in (0.2, 0.9, 1.0):
        kw = dict(positions=pos)
        assert np.array_equal(link_pairs(q, theta, 120, search=faiss_search, **kw), link_pairs(q, theta, 120, **kw))
        assert coalition_size(q, acc, theta, 120, search=faiss_search, **kw) == coalition_size(q, acc, theta, 120, **kw)
        got = coalition_clusters(q, acc, theta, 120, search=faiss_search, **kw)
        assert got == coalition_clusters(q, acc, theta, 120, **kw)


def test_same_curve_on_toy_trials(faiss_search):
    cfg = ToyConfig()
    rng = np.random.default_rng(5)
    for pattern, k in [(None, 0), ("P-A", 5), ("P-B", 10), ("P-C", 2)]:
        x, acc = toy_queries(rng, cfg, pattern, k)
        for window in (cfg.n_queries - 1, 300):
            a = coalition_size_curve(x, acc, THETA_GRID, window, search=faiss_search)
            b = coalition_size_curve(x, acc, THETA_GRID, window)
            assert a.tolist() == b.tolist(), (pattern, window)


def test_returned_values_respect_the_declared_bound(faiss_search):
    # the float32 values FAISS returns are within float32_margin(d) of the float64 inner products
    # (a theorem, module docstring); checked on ~2.4·10^5 pairs, with the real error far inside it
    rng = np.random.default_rng(3)
    for d in (32, 384):
        x = rng.standard_normal((700, d))
        u = x / np.linalg.norm(x, axis=1, keepdims=True)
        pairs, vals, bound = faiss_search(u, -1.0, 699, np.arange(700))
        assert bound == float32_margin(d)
        assert pairs.shape[0] == 700 * 699 // 2  # θ = -1: every pair is returned
        exact = np.einsum("ij,ij->i", u[pairs[:, 0]], u[pairs[:, 1]])
        err = np.abs(vals - exact).max()
        assert err <= bound / 2
        assert err < bound / 20  # typical error is far below the worst case


def test_float32_margin():
    assert float32_margin(384) == pytest.approx(2 * 386 * 2.0**-24)
    with pytest.raises(InvalidParameterError):
        float32_margin(0)


def test_bad_input():
    with pytest.raises(InvalidParameterError) as e:
        FaissWindowSearch(block=0)
    assert e.value.field == "block"
    with pytest.raises(InvalidParameterError) as e:
        FaissWindowSearch(threads=0)
    assert e.value.field == "threads"
    s = FaissWindowSearch()
    with pytest.raises(InvalidParameterError) as e:
        s(np.ones(5), 0.5, 3, np.arange(5))
    assert e.value.field == "unit"
    with pytest.raises(InvalidParameterError) as e:
        s(np.ones((5, 2)), 0.5, 0, np.arange(5))
    assert e.value.field == "window"
    with pytest.raises(InvalidParameterError) as e:
        s(np.ones((5, 2)), 0.5, 2, np.arange(4))
    assert e.value.field == "positions"
