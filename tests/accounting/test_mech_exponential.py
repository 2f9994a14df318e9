"""Tests of accounting.mechanisms.exponential (exponential mechanism, exact sampler, vote-histogram form).

Expected laws are written out here from McSherry–Talwar's formula (weights exp(ε u / 2Δ)), independently of
the module; the refinement path of the exact sampler is checked against mpmath at 80 digits.
Statistical tests are seeded; each chi-square/homogeneity check fails with probability ≤ 1e-6 if the code
is right (P_FAIL below), so the file's false-failure rate is below 1e-5.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import stats

from dprag.accounting.events import ExponentialMechanismEvent
from dprag.accounting.mechanisms.exponential import (
    exponential_mechanism,
    exponential_mechanism_probabilities,
    sample_exponential,
    vote_exponential_mechanism,
    vote_exponential_probabilities,
)
from dprag.accounting.noise import RandomSource
from dprag.errors import InvalidParameterError

P_FAIL = 1e-6


def em_law(u, sensitivity, epsilon, monotone=False):
    """McSherry–Talwar: P[i] ∝ exp(ε u_i / (2Δ)) (exp(ε u_i / Δ) for monotone utilities)."""
    g = epsilon / sensitivity if monotone else epsilon / (2 * sensitivity)
    top = max(u)
    w = [math.exp(g * (x - top)) for x in u]
    z = math.fsum(w)
    return np.array([x / z for x in w])


def chi2_pvalue(samples, probs):
    """Goodness of fit; outcomes with expected count < 5 are pooled into one cell."""
    n = len(samples)
    obs = np.bincount(np.asarray(samples), minlength=len(probs)).astype(float)
    exp = n * np.asarray(probs)
    big = exp >= 5
    o = np.concatenate((obs[big], [obs[~big].sum()])) if (~big).any() else obs[big]
    e = np.concatenate((exp[big], [exp[~big].sum()])) if (~big).any() else exp[big]
    if (~big).any() and e[-1] < 5:  # pool the small cell into the smallest big one
        o[-2] += o[-1]
        e[-2] += e[-1]
        o, e = o[:-1], e[:-1]
    return stats.chisquare(o, e).pvalue


class CountingSource(RandomSource):
    """A seeded source that counts the bytes it hands out."""

    def __init__(self, seed: bytes = b"count"):
        inner = RandomSource.from_seed(seed, b"counting")
        self.n = 0

        def read(k):
            self.n += k
            return inner.bytes(k)

        super().__init__(read, deterministic=True)


class ScriptedSource(RandomSource):
    """Hands out the given 64-bit words, then repeats the last one."""

    def __init__(self, words):
        self.words = [int(w) for w in words]
        self.used = 0
        super().__init__(self._never, deterministic=True)

    def _never(self, n):  # pragma: no cover - only uint64 is used by the sampler
        raise AssertionError("bytes() not expected")

    def uint64(self, size):
        out = []
        for _ in range(int(size)):
            out.append(self.words[min(self.used, len(self.words) - 1)])
            self.used += 1
        return np.array(out, dtype=np.uint64)


UTILS = [0.0, 1.0, 2.0, 3.5, -1.0, 2.0, 0.25]


@pytest.mark.parametrize("sensitivity,epsilon", [(1.0, 1.5), (2.0, 3.0), (0.5, 0.4)])
def test_probabilities_match_mcsherry_talwar(sensitivity, epsilon):
    got = exponential_mechanism_probabilities(UTILS, sensitivity, epsilon)
    np.testing.assert_allclose(got, em_law(UTILS, sensitivity, epsilon), rtol=1e-12)
    got_m = exponential_mechanism_probabilities(UTILS, sensitivity, epsilon, monotone=True)
    np.testing.assert_allclose(got_m, em_law(UTILS, sensitivity, epsilon, monotone=True), rtol=1e-12)


@pytest.mark.parametrize("method", ["direct"])
@pytest.mark.parametrize("monotone", [False, True])
def test_empirical_frequencies_match_softmax(method, monotone):
    src = RandomSource.from_seed(b"em-freq", f"{method}-{monotone}".encode())
    n = 30_000
    draws = []
    for _ in range(n):
        i, ev = exponential_mechanism(UTILS, 1.0, 1.5, src, method=method, monotone=monotone)
        draws.append(i)
    assert ev == ExponentialMechanismEvent(1.5, bounded_range=True)
    assert chi2_pvalue(draws, em_law(UTILS, 1.0, 1.5, monotone)) > P_FAIL


@pytest.mark.parametrize("call", ["em", "vote"])
def test_float_gumbel_is_refused(call):
    """Issue 10 item 3: float Gumbel-max gives probability 0 to outcomes ~40/γ below the best; refused by name."""
    with pytest.raises(InvalidParameterError, match="gumbel.*removed"):
        if call == "em":
            exponential_mechanism(UTILS, 1.0, 1.0, RandomSource.from_seed(b"g"), method="gumbel")
        else:
            vote_exponential_mechanism(np.array([1, 2]), 1.0, RandomSource.from_seed(b"g"), method="gumbel")


def test_refinement_matches_high_precision_oracle():
    """Force the slow path (first word right at a boundary) and compare with an mpmath computation."""
    mpmath.mp.dps = 80
    u = [0.0, -0.7, 0.3, -2.5]
    gamma = 1.1
    w = [mpmath.e ** (mpmath.mpf(gamma) * (mpmath.mpf(x) - mpmath.mpf(0.3))) for x in u]
    z = mpmath.fsum(w)
    bounds = [mpmath.fsum(w[: i + 1]) / z for i in range(len(u))]
    rng = np.random.default_rng(7)
    hits = set()
    for b in range(len(u) - 1):
        first = int(mpmath.floor(bounds[b] * 2**64))
        for _trial in range(40):
            tail = [int(x) for x in rng.integers(0, 2**64 - 1, size=3, dtype=np.uint64, endpoint=True)]
            src = ScriptedSource([first] + tail)
            got = sample_exponential(gamma, np.array(u), None, src)
            assert src.used >= 2  # the fast path could not decide
            used_words = ([first] + tail)[: src.used]
            U = mpmath.mpf(0)
            for k, word in enumerate(used_words):
                U += mpmath.mpf(word) / mpmath.mpf(2) ** (64 * (k + 1))
            want = next(i for i, t in enumerate(bounds) if U < t)
            # U was only read to src.used words: its interval must lie inside the chosen cell
            U_hi = U + mpmath.mpf(2) ** (-64 * src.used)
            assert got == want
            assert (got == 0 or bounds[got - 1] <= U) and U_hi <= bounds[got]
            hits.add((b, got))
    # both sides of every boundary were exercised
    assert {(b, b) for b in range(len(u) - 1)} <= hits and {(b, b + 1) for b in range(len(u) - 1)} <= hits


def test_fast_path_agrees_with_the_rigorous_path():
    """The float fast path must pick the same outcome as the rigorous interval refinement for the same U."""
    from dprag.accounting.mechanisms.exponential import _exact_refine

    rng = np.random.default_rng(11)
    for _trial in range(6):
        G = int(rng.integers(2, 60))
        u = rng.normal(scale=rng.choice([0.1, 3.0, 40.0]), size=G)
        mult = rng.integers(1, 1000, size=G)
        gamma = float(rng.uniform(0.05, 3.0))
        for w in rng.integers(0, 2**64 - 1, size=50, dtype=np.uint64, endpoint=True):
            fast = sample_exponential(gamma, u, mult, ScriptedSource([int(w)]))
            slow = _exact_refine(gamma, u, mult.astype(np.int64), int(w), RandomSource.from_seed(b"tail"))
            assert fast == slow


def test_outcomes_far_in_the_tail_keep_positive_probability():
    """A float sampler gives probability 0 to weight e^-1000; the exact sampler reaches it when U is that close to 1."""
    u = np.array([0.0, -1000.0])
    src = ScriptedSource([2**64 - 1])  # U = 1 - 2^-b for every b read
    assert sample_exponential(1.0, u, None, src) == 1
    assert 64 * src.used > 1000 / math.log(2)  # it had to read past e^-1000 ≈ 2^-1443
    src = ScriptedSource([2**64 - 1, 0])  # U = 1 - 2^-64 + 0...: below 1 - e^-1000
    assert sample_exponential(1.0, u, None, src) == 0


def test_seeded_runs_are_reproducible():
    a = [exponential_mechanism(UTILS, 1, 1.0, RandomSource.from_seed(b"rep", str(i).encode()))[0] for i in range(50)]
    b = [exponential_mechanism(UTILS, 1, 1.0, RandomSource.from_seed(b"rep", str(i).encode()))[0] for i in range(50)]
    assert a == b and len(set(a)) > 1


# -- the vote-histogram form (000 Alg. 5 line 12) -----------------------------------------------
def test_vote_mechanism_small_vocabulary_matches_softmax_over_all_tokens():
    h = np.array([5, 0, 0, 3, 3, 0, 1, 0, 0, 0, 2, 0])
    law = em_law(list(h.astype(float)), 1.0, 1.0)  # sensitivity 1, weights exp(ε·count/2)
    np.testing.assert_allclose(vote_exponential_probabilities(h, 1.0), law, rtol=1e-12)
    src = RandomSource.from_seed(b"vote-small")
    draws = [vote_exponential_mechanism(h, 1.0, src)[0] for _ in range(30_000)]
    assert chi2_pvalue(draws, law) > P_FAIL


def test_vote_mechanism_large_vocabulary():
    """50k-token vocabulary: voted tokens individually, the ~50k unvoted tokens as one class, then uniformity."""
    d = 50_000
    h = np.zeros(d, dtype=np.int64)
    h[[3, 17, 20_000, 49_999]] = [20, 12, 12, 6]
    eps = 0.5  # unvoted tokens then carry most of the mass: exercises the zero group
    w = {t: math.exp(eps * (h[t] - 20) / 2) for t in (3, 17, 20_000, 49_999)}
    w0 = (d - 4) * math.exp(eps * (0 - 20) / 2)
    z = math.fsum(w.values()) + w0
    classes = [3, 17, 20_000, 49_999]
    expected = np.array([w[t] / z for t in classes] + [w0 / z])
    src = RandomSource.from_seed(b"vote-large")
    draws = np.array([vote_exponential_mechanism(h, eps, src)[0] for _ in range(20_000)])
    cls = np.array([classes.index(t) if t in classes else 4 for t in draws])
    assert chi2_pvalue(cls, expected) > P_FAIL
    # the unvoted tokens are drawn uniformly: their ids spread evenly over 10 equal-width id ranges
    zero_ids = draws[cls == 4]
    buckets = np.bincount(np.minimum(zero_ids * 10 // d, 9), minlength=10)
    assert stats.chisquare(buckets).pvalue > P_FAIL


def test_vote_mechanism_is_eps_bounded_range_on_neighbours():
    """One voter moves (count −1 here, +1 there): every output's log-ratio moves within an interval of width ε."""
    eps = 1.3
    h = np.array([9, 0, 2, 1, 0])
    for a in range(5):
        for b in range(5):
            if a == b or h[a] == 0:
                continue
            h2 = h.copy()
            h2[a] -= 1
            h2[b] += 1
            p, q = vote_exponential_probabilities(h, eps), vote_exponential_probabilities(h2, eps)
            lr = np.log(p / q)
            assert lr.max() - lr.min() <= eps + 1e-12
            assert np.abs(lr).max() <= eps + 1e-12


# -- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(utilities=[], sensitivity=1, epsilon=1), "utilities"),
        (dict(utilities=[[1, 2]], sensitivity=1, epsilon=1), "utilities"),
        (dict(utilities=[1, float("nan")], sensitivity=1, epsilon=1), "utilities"),
        (dict(utilities=[1, float("inf")], sensitivity=1, epsilon=1), "utilities"),
        (dict(utilities=["a", "b"], sensitivity=1, epsilon=1), "utilities"),
        (dict(utilities=[1, 2], sensitivity=0, epsilon=1), "sensitivity"),
        (dict(utilities=[1, 2], sensitivity=-1, epsilon=1), "sensitivity"),
        (dict(utilities=[1, 2], sensitivity=1, epsilon=0), "epsilon"),
        (dict(utilities=[1, 2], sensitivity=1, epsilon=-0.5), "epsilon"),
        (dict(utilities=[1, 2], sensitivity=1, epsilon=float("nan")), "epsilon"),
        (dict(utilities=[1, 2], sensitivity=1, epsilon=float("inf")), "epsilon"),
        (dict(utilities=[1, 2], sensitivity=1e-300, epsilon=1e300), "epsilon"),
        (dict(utilities=[1, 2], sensitivity=1, epsilon=1, method="softmax"), "method"),
    ],
)
def test_bad_input_raises_typed_error_and_draws_nothing(kwargs, field):
    src = CountingSource()
    with pytest.raises(InvalidParameterError) as err:
        exponential_mechanism(source=src, **kwargs)
    assert err.value.field == field
    assert src.n == 0


@pytest.mark.parametrize(
    "hist,eps,field",
    [
        ([], 1.0, "histogram"),
        ([1, -1, 0], 1.0, "histogram"),
        ([1.5, 0], 1.0, "histogram"),
        ([[1, 0]], 1.0, "histogram"),
        ([True, False], 1.0, "histogram"),
        ([1, 0], 0.0, "epsilon"),
        ([1, 0], float("nan"), "epsilon"),
    ],
)
def test_vote_mechanism_bad_input(hist, eps, field):
    src = CountingSource()
    with pytest.raises(InvalidParameterError) as err:
        vote_exponential_mechanism(hist, eps, src)
    assert err.value.field == field
    assert src.n == 0


def test_source_must_be_a_random_source():
    with pytest.raises(InvalidParameterError) as err:
        exponential_mechanism([1, 2], 1, 1, source=np.random.default_rng(0))
    assert err.value.field == "source"


# -- public base measure (000 Alg. 5 with em_prior="non-rag") ------------------------------------------------
def test_vote_exponential_mechanism_with_a_base_measure_follows_its_law():
    # P(v) ∝ μ(v)·exp(ε·Hist[v]/2): closed form computed here from μ and Hist, not by the code under test
    h = np.array([0, 3, 1, 0])
    mu = np.array([0.6, 0.01, 0.09, 0.3])
    eps = 1.2
    w = mu * np.exp(eps * h / 2)
    expected = w / w.sum()
    np.testing.assert_allclose(vote_exponential_probabilities(h, eps, np.log(mu)), expected, rtol=1e-12)
    src = RandomSource.from_seed(b"em-base", b"law")
    n = 20_000
    draws = np.array([vote_exponential_mechanism(h, eps, src, log_base=np.log(mu))[0] for _ in range(n)])
    freq = np.bincount(draws, minlength=4) / n
    # 5 binomial sd per cell: false-failure rate < 4·6e-7 (seeded anyway)
    assert np.all(np.abs(freq - expected) <= 5 * np.sqrt(expected * (1 - expected) / n) + 1e-12)
    # -inf weight: never drawn
    base = np.log(mu)
    base[0] = -np.inf
    assert all(vote_exponential_mechanism(h, eps, src, log_base=base)[0] != 0 for _ in range(200))


@pytest.mark.parametrize(
    "bad", [np.array([0.0, np.nan, 0.0, 0.0]), np.array([0.0, np.inf, 0.0, 0.0]), np.full(4, -np.inf), np.zeros(3)]
)
def test_vote_exponential_mechanism_rejects_bad_base(bad):
    with pytest.raises(InvalidParameterError, match="log_base"):
        vote_exponential_mechanism(np.array([0, 3, 1, 0]), 1.0, RandomSource.from_seed(b"x", b"y"), log_base=bad)
