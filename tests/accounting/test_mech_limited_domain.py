"""Tests of accounting.mechanisms.limited_domain (Durfee–Rogers LimitedDomain with k = 1, as used by 003).

The privacy claims are checked by brute force against the definition: for every vote histogram of m voters
over a small vocabulary and every neighbour (one vote moved, or one vote added/removed for the monotone
calibration) the exact δ(ε) = Σ_o max(0, P[o] − e^ε P'[o]) of the two output laws is computed and compared
with the claimed δ. The output law itself is re-derived here (Gumbel-max = softmax over T ∪ {⊥}) and the
sampler is checked against it by a seeded chi-square test (false-failure probability ≤ 1e-6 per test).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from dprag.accounting.events import ApproxDpEvent, ExponentialMechanismEvent
from dprag.accounting.mechanisms.limited_domain import (
    BOTTOM,
    limited_domain,
    limited_domain_probabilities,
    limited_domain_threshold,
)
from dprag.accounting.noise import RandomSource
from dprag.errors import InvalidParameterError

P_FAIL = 1e-6


def reference_law(h, eps, delta, kbar, l0=2, monotone=False):
    """Durfee–Rogers LimitedDomain (k=1) law, written from the algorithm: softmax of h/s over T ∪ {⊥}."""
    h = [int(x) for x in h]
    d = len(h)
    s, c = (1.0 / eps, 1) if monotone else (2.0 / eps, 2)
    order = sorted(range(d), key=lambda i: (-h[i], i))
    probs = np.zeros(d)
    if d <= kbar:
        w = [math.exp((x - max(h)) / s) for x in h]
        return np.array(w) / math.fsum(w), 0.0
    T = order[:kbar]
    hb = h[order[kbar]] + c + s * math.log(min(l0, kbar, d - kbar) / delta)
    top = max([h[i] for i in T] + [hb])
    w = [math.exp((h[i] - top) / s) for i in T] + [math.exp((hb - top) / s)]
    z = math.fsum(w)
    for i, wi in zip(T, w, strict=False):
        probs[i] = wi / z
    return probs, w[-1] / z


def histograms(m, d):
    for combo in itertools.combinations_with_replacement(range(d), m):
        h = np.zeros(d, dtype=np.int64)
        for x in combo:
            h[x] += 1
        yield h


def delta_of(p, q, eps):
    """Exact δ(ε) of the pair (P, Q): Σ_o max(0, P[o] − e^ε Q[o]) over tokens and ⊥."""
    (pt, pb), (qt, qb) = p, q
    return float(np.maximum(0.0, pt - math.exp(eps) * qt).sum() + max(0.0, pb - math.exp(eps) * qb))


def vote_moves(h):
    d = len(h)
    for a in range(d):
        if h[a] == 0:
            continue
        for b in range(d):
            if b != a:
                h2 = h.copy()
                h2[a] -= 1
                h2[b] += 1
                yield h2


@pytest.mark.parametrize("monotone", [False, True])
@pytest.mark.parametrize("eps,delta,kbar", [(1.0, 1e-3, 2), (0.5, 0.2, 1), (2.0, 0.05, 3)])
def test_law_matches_the_algorithm(monotone, eps, delta, kbar):
    for h in ([7, 0, 3, 3, 0, 1, 0, 0], [0, 0, 0, 0, 0, 0, 0, 1], [2, 2, 2, 2, 0, 0, 0, 0]):
        got_t, got_b = limited_domain_probabilities(h, eps, delta, kbar, monotone=monotone)
        want_t, want_b = reference_law(h, eps, delta, kbar, monotone=monotone)
        np.testing.assert_allclose(got_t, want_t, rtol=1e-9, atol=1e-15)
        assert got_b == pytest.approx(want_b, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("eps,delta", [(0.5, 0.2), (1.0, 0.05), (2.0, 1e-3), (1.0, 0.3)])
def test_default_calibration_is_eps_delta_dp_under_vote_moves(eps, delta):
    """003's relation: one document changes one voter's vote (one count −1, another +1). Brute force."""
    worst = 0.0
    for m, d in ((4, 4), (5, 3), (3, 5)):
        for kbar in range(1, d):
            for h in histograms(m, d):
                p = limited_domain_probabilities(h, eps, delta, kbar)
                for h2 in vote_moves(h):
                    q = limited_domain_probabilities(h2, eps, delta, kbar)
                    worst = max(worst, delta_of(p, q, eps), delta_of(q, p, eps))
    assert worst <= delta * (1 + 1e-9)
    assert worst > 0.5 * delta  # and the δ is not vacuous: some pair comes close to it


@pytest.mark.parametrize("eps,delta", [(0.5, 0.2), (1.0, 0.05), (2.0, 1e-3)])
def test_durfee_rogers_calibration_is_eps_delta_dp_under_monotone_changes(eps, delta):
    """Durfee–Rogers' own relation (a voter added or removed: counts move in one direction)."""
    worst = 0.0
    for m, d in ((4, 4), (3, 5)):
        for kbar in range(1, d):
            for h in histograms(m, d):
                p = limited_domain_probabilities(h, eps, delta, kbar, l0_sensitivity=1, monotone=True)
                for b in range(d):
                    h2 = h.copy()
                    h2[b] += 1
                    q = limited_domain_probabilities(h2, eps, delta, kbar, l0_sensitivity=1, monotone=True)
                    worst = max(worst, delta_of(p, q, eps), delta_of(q, p, eps))
    assert worst <= delta * (1 + 1e-9)


def test_durfee_rogers_calibration_is_not_eps_delta_dp_under_vote_moves():
    """The 003 discrepancy: Gumbel(1/ε) with the +1 threshold, used where a vote MOVES, breaks (ε, δ)."""
    eps, delta = 1.0, 1e-3
    worst = 0.0
    for h in histograms(8, 3):
        p = limited_domain_probabilities(h, eps, delta, 1, monotone=True)
        for h2 in vote_moves(h):
            q = limited_domain_probabilities(h2, eps, delta, 1, monotone=True)
            worst = max(worst, delta_of(p, q, eps))
    assert worst > 100 * delta  # far beyond the claimed δ
    # ... while the same pairs are within (2ε, ·): the factor the default calibration pays
    worst2 = max(
        delta_of(
            limited_domain_probabilities(h, eps, delta, 1, monotone=True),
            limited_domain_probabilities(h2, eps, delta, 1, monotone=True),
            2 * eps,
        )
        for h in histograms(8, 3)
        for h2 in vote_moves(h)
    )
    assert worst2 < 10 * delta


def test_sampler_matches_law_including_bottom():
    h = np.zeros(40, dtype=np.int64)
    h[[2, 5, 9, 30]] = [6, 5, 5, 2]
    eps, delta, kbar = 1.0, 0.3, 3
    probs, pb = limited_domain_probabilities(h, eps, delta, kbar)
    support = list(np.flatnonzero(probs))
    assert support == [2, 5, 9]  # T = top 3 by count, ties by smaller id; token 30 is outside T
    src = RandomSource.from_seed(b"ld-sampler")
    n = 30_000
    out = []
    for _ in range(n):
        tok, ev = limited_domain(h, eps, delta, kbar, src)
        out.append(len(support) if tok is BOTTOM else support.index(tok))
    assert ev == ApproxDpEvent(eps, delta)
    expected = np.array([probs[t] for t in support] + [pb])
    assert stats.chisquare(np.bincount(out, minlength=4), n * expected).pvalue > P_FAIL


def test_tokens_outside_the_limited_domain_are_never_output():
    h = np.array([3, 3, 3, 0, 0, 0, 0, 0, 0, 0])
    src = RandomSource.from_seed(b"ld-outside")
    seen = {limited_domain(h, 5.0, 0.5, 2, src)[0] for _ in range(3000)}
    assert seen <= {0, 1, BOTTOM} and {0, 1} <= seen


def test_padding_with_zero_count_tokens_when_fewer_than_kbar_voted():
    h = np.array([0, 4, 0, 0, 1, 0])
    probs, pb = limited_domain_probabilities(h, 1.0, 0.1, 4)
    assert list(np.flatnonzero(probs)) == [0, 1, 2, 4]  # voted tokens + the smallest-id unvoted ones
    want_t, want_b = reference_law(h, 1.0, 0.1, 4)
    np.testing.assert_allclose(probs, want_t, rtol=1e-9)


def test_threshold_formula():
    # h_⊥ = h_(k̄+1) + c + s·ln(min(Δ₀, k̄, d − k̄)/δ), rounded up by at most a few ulp
    got = limited_domain_threshold(3, 0.5, 1e-5, 50, 50_272)
    want = 3 + 2 + (2 / 0.5) * math.log(2 / 1e-5)
    assert want <= got <= want * (1 + 1e-11)
    got_m = limited_domain_threshold(3, 0.5, 1e-5, 50, 50_272, monotone=True, l0_sensitivity=7)
    assert (3 + 1 + 2 * math.log(7 / 1e-5)) <= got_m <= (3 + 1 + 2 * math.log(7 / 1e-5)) * (1 + 1e-11)
    got_d = limited_domain_threshold(0, 1.0, 0.01, 9, 10)  # only one token can leave T: d − k̄ = 1
    assert got_d >= 2 + 2 * math.log(1 / 0.01)


def test_whole_domain_case_is_the_exponential_mechanism():
    h = np.array([3, 1, 0])
    probs, pb = limited_domain_probabilities(h, 1.0, 0.01, 3)
    assert pb == 0.0
    np.testing.assert_allclose(probs, np.exp(h / 2) / np.exp(h / 2).sum(), rtol=1e-12)
    tok, ev = limited_domain(h, 1.0, 0.01, 5, RandomSource.from_seed(b"ld-whole"))
    assert tok in (0, 1, 2) and ev == ExponentialMechanismEvent(1.0, bounded_range=True)


def test_large_vocabulary_vote_histogram():
    d = 50_272  # OPT's vocabulary, k̄ = m = 50 voters as in 003 §IV-A
    h = np.zeros(d, dtype=np.int64)
    h[[11, 500, 40_000]] = [40, 7, 3]
    src = RandomSource.from_seed(b"ld-large")
    outs = [limited_domain(h, 10.0, 1e-5, 50, src)[0] for _ in range(200)]
    assert set(outs) <= {11, 500, 40_000, BOTTOM} | set(range(60))
    assert outs.count(11) > 150  # 33 votes ahead at ε = 10: the majority token wins almost always


@pytest.mark.parametrize(
    "args,field",
    [
        (([], 1.0, 0.1, 1), "histogram"),
        (([1, -2, 0], 1.0, 0.1, 1), "histogram"),
        (([1, 0.5, 0], 1.0, 0.1, 1), "histogram"),
        (([1, 0, 0], 0.0, 0.1, 1), "epsilon"),
        (([1, 0, 0], float("nan"), 0.1, 1), "epsilon"),
        (([1, 0, 0], 1.0, 0.0, 1), "delta"),
        (([1, 0, 0], 1.0, 1.0, 1), "delta"),
        (([1, 0, 0], 1.0, float("nan"), 1), "delta"),
        (([1, 0, 0], 1.0, 0.1, 0), "k_bar"),
        (([1, 0, 0], 1.0, 0.1, 1.5), "k_bar"),
    ],
)
def test_bad_input(args, field):
    with pytest.raises(InvalidParameterError) as err:
        limited_domain(*args, RandomSource.from_seed(b"bad"))
    assert err.value.field == field
    with pytest.raises(InvalidParameterError):
        limited_domain([1, 0, 0], 1.0, 0.1, 1, RandomSource.from_seed(b"bad"), l0_sensitivity=0)
