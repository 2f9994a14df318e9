"""Tests of accounting.mechanisms.prefix_sums (MuRAG-Ada's noisy prefix sums over score bins, 000 Alg. 2).

Expected laws are computed here from the discrete Laplace pmf P(x) = tanh(ε/2)·e^{−ε|x|}; seeded statistical
tests use exact binomial / chi-square tests with false-failure probability ≤ 1e-6 each (P_FAIL).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from dprag.accounting.events import DiscreteLaplaceEvent
from dprag.accounting.mechanisms.prefix_sums import assign_bins, bin_counts, noisy_prefix_sums, score_bins
from dprag.accounting.noise import RandomSource
from dprag.errors import InvalidParameterError

P_FAIL = 1e-6


def dlap(eps, support=200):
    x = np.arange(-support, support + 1)
    return x, math.tanh(eps / 2) * np.exp(-eps * np.abs(x))


def test_stopping_rule_on_released_values():
    counts = np.array([0, 1, 4, 6, 9, 20, 40, 80])
    src = RandomSource.from_seed(b"prefix-stop")
    for k in (1, 10, 35, 10_000):
        for _ in range(300):
            r = noisy_prefix_sums(counts, k, 0.7, src)
            sums = np.array(r.noisy_prefix_sums)
            assert len(sums) == r.bins_released >= 1
            assert np.all(sums[:-1] <= k)  # it did not stop earlier
            if r.exceeded:
                assert sums[-1] > k
            else:
                assert r.bins_released == len(counts) and sums[-1] <= k
            assert list(r.charged_bins) == list(range(r.bins_released))


def test_noise_is_discrete_laplace():
    eps = 0.8
    counts = np.array([3, 0, 7, 2, 5])
    src = RandomSource.from_seed(b"prefix-noise")
    noise = []
    for _ in range(4000):
        r = noisy_prefix_sums(counts, 10**9, eps, src)  # never stops early: every bin's noise is unconditioned
        s = np.array(r.noisy_prefix_sums)
        noise.extend(np.diff(np.concatenate(([0], s))) - counts)
    x, p = dlap(eps)
    noise = np.array(noise)
    cells = np.arange(-6, 7)
    obs = [np.sum(noise <= -7)] + [np.sum(noise == c) for c in cells] + [np.sum(noise >= 7)]
    exp = [p[x <= -7].sum()] + [p[x == c].sum() for c in cells] + [p[x >= 7].sum()]
    assert stats.chisquare(obs, len(noise) * np.array(exp)).pvalue > P_FAIL


def test_probability_of_stopping_after_the_first_bin_is_exact():
    eps, k = 1.0, 10
    counts = np.array([9, 50])
    x, p = dlap(eps)
    p_stop1 = p[counts[0] + x > k].sum()  # 9 + N > 10
    src = RandomSource.from_seed(b"prefix-first")
    n = 8000
    stops = sum(noisy_prefix_sums(counts, k, eps, src).bins_released == 1 for _ in range(n))
    assert stats.binomtest(stops, n, p_stop1).pvalue > P_FAIL


def test_only_released_bins_depend_on_their_documents():
    """000 App. C.2 on the exact law (2 bins): a document in bin 2 changes nothing when only bin 1 is released,
    and every output's log-ratio is ≤ ε_thr for a document in either bin."""
    eps, k, sup = 0.9, 4, 40
    x, p = dlap(eps, sup)

    def law(c1, c2):
        out = {}
        for (n1, p1), (n2, p2) in itertools.product(zip(x, p, strict=False), zip(x, p, strict=False)):
            s1 = c1 + n1
            key = (s1,) if s1 > k else (s1, s1 + c2 + n2)
            out[key] = out.get(key, 0.0) + p1 * p2
        return out

    base = law(3, 2)
    for nb in (law(4, 2), law(3, 3)):  # one more document in bin 1 / in bin 2
        for key in set(base) | set(nb):
            a, b = base.get(key, 0.0), nb.get(key, 0.0)
            if min(a, b) < 1e-14:  # truncation of the support
                continue
            assert abs(math.log(a / b)) <= eps + 1e-9
    nb2 = law(3, 3)
    for key, a in base.items():
        if len(key) == 1 and a > 1e-14:  # bin 2 not released: identical probabilities
            assert nb2[key] == pytest.approx(a, rel=1e-12)


def test_event_and_threshold():
    r = noisy_prefix_sums([5, 5, 5, 5], 12, 0.5, RandomSource.from_seed(b"prefix-ev"))
    assert r.event == DiscreteLaplaceEvent(scale=2.0, sensitivity=1) and r.event.epsilon == pytest.approx(0.5)
    edges = score_bins(0.0, 4.0, 1.0)
    assert r.threshold(edges) == edges[r.bins_released]


def test_score_bins_and_assignment():
    edges = score_bins(0.0, 4.0, 0.5)
    np.testing.assert_array_equal(edges, [4.0, 3.5, 3.0, 2.5, 2.0, 1.5, 1.0, 0.5, 0.0])
    got = assign_bins([4.0, 3.9, 3.5, 3.49, 0.0, 0.49, -0.1, 4.1, 2.25], edges)
    np.testing.assert_array_equal(got, [0, 0, 0, 1, 7, 7, -1, -1, 3])
    e001 = score_bins(70, 100, 0.2)  # 001 App. E
    assert len(e001) == 151 and e001[0] == 100 and e001[-1] == 70
    b = assign_bins(np.linspace(70, 100, 1001), e001)
    assert b.min() == 0 and b.max() == 149 and np.all(np.diff(b) <= 0)


def test_bin_counts_and_charged_documents():
    scores = np.array([99.9, 99.7, 71.0, 50.0, 99.95, 85.3, 99.65])
    edges = score_bins(70, 100, 0.2)
    db = assign_bins(scores, edges)
    active = np.array([True, True, True, True, False, True, True])
    counts = bin_counts(db, len(edges) - 1, active)
    assert counts.sum() == 5 and counts[0] == 1 and counts[1] == 2  # 99.95 inactive, 50.0 in no bin
    r = noisy_prefix_sums(counts, 2, 50.0, RandomSource.from_seed(b"prefix-charge"))  # ε=50: ~noise-free
    assert r.bins_released == 2 and r.noisy_prefix_sums == (1, 3)
    np.testing.assert_array_equal(r.charged_documents(db, active), [0, 1, 6])
    np.testing.assert_array_equal(r.charged_documents(db), [0, 1, 4, 6])
    assert r.threshold(edges) == pytest.approx(99.6)


@pytest.mark.parametrize(
    "args,field",
    [
        (([], 3, 1.0), "bin_counts"),
        (([1, -1], 3, 1.0), "bin_counts"),
        (([1, 0.5], 3, 1.0), "bin_counts"),
        (([1, 2], 0, 1.0), "k"),
        (([1, 2], 2.5, 1.0), "k"),
        (([1, 2], 3, 0.0), "epsilon_thr"),
        (([1, 2], 3, float("nan")), "epsilon_thr"),
    ],
)
def test_bad_input(args, field):
    with pytest.raises(InvalidParameterError) as err:
        noisy_prefix_sums(*args, RandomSource.from_seed(b"bad"))
    assert err.value.field == field


def test_bad_bins():
    with pytest.raises(InvalidParameterError):
        score_bins(70, 100, 0.7)  # does not divide 30
    with pytest.raises(InvalidParameterError):
        score_bins(100, 70, 0.2)
    with pytest.raises(InvalidParameterError):
        assign_bins([1.0], [0.0, 1.0])  # edges must decrease
    with pytest.raises(InvalidParameterError):
        assign_bins([float("nan")], [1.0, 0.0])
    with pytest.raises(InvalidParameterError):
        bin_counts(np.array([0, 5]), 3)
