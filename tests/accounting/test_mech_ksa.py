"""DP-KSA mechanisms (004): FindBestK and TopKWithPTR — distributions, PTR refusal, events, bad input.

Expected values are computed independently of accounting/mechanisms/ksa.py: brute-force sorting, a softmax
written here, exact discrete-Gaussian tails summed from the pmf, the Gaussian RDP closed form α/(2σ²).
Statistical tests use seeded sources; each states its false-failure rate (over seeds).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from dprag.accounting.events import (
    ApproxRdpEvent,
    ComposedEvent,
    DiscreteGaussianEvent,
    ExponentialMechanismEvent,
    SelfComposedEvent,
)
from dprag.accounting.mechanisms.ksa import (
    GAP_SENSITIVITY,
    KeywordSelection,
    calibrate_dp_ksa,
    dp_ksa_select,
    find_best_k,
    keyword_histogram,
    ptr_release_top_k,
    ptr_sigma_for,
    ptr_threshold,
    sorted_gaps,
    top_k_with_ptr,
)
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.rdp import DEFAULT_ORDERS, additive_delta, epsilon_of, rdp_curve
from dprag.accounting.testing import strategies as dps
from dprag.errors import InvalidParameterError

P_MIN = 1e-6  # p-value threshold of every goodness-of-fit test below: false-failure rate 1e-6 each


def src(label: str) -> RandomSource:
    return RandomSource.from_seed(b"test_mech_ksa", label)


class CountingSource(RandomSource):
    """Records how many bytes were read, to prove bad input draws no randomness."""

    def __init__(self):
        inner = RandomSource.from_seed(b"counting")
        self.read = 0

        def read(n):
            self.read += n
            return inner.bytes(n)

        super().__init__(read, deterministic=True)


# ---------------------------------------------------------------------------------------------------
# oracles
# ---------------------------------------------------------------------------------------------------
def brute_gaps(h):
    s = sorted((int(x) for x in h), reverse=True)
    return np.array([s[i] - s[i + 1] for i in range(len(s) - 1)])


def em_law(utilities, epsilon):
    """P[k] ∝ exp(ε u_k / (2Δ)), Δ = 2 (Definition A.7 with the gap sensitivity)."""
    z = np.asarray(utilities, dtype=float) * epsilon / 4.0
    w = np.exp(z - z.max())
    return w / w.sum()


def dgauss_sf(c, s):
    """P[X > c] for X ~ N_Z(0, s²), summed from the pmf (independent of the sampler and of ptr_threshold)."""
    L = int(math.ceil(40 * s)) + abs(int(c)) + 10
    xs = np.arange(-L, L + 1, dtype=float)
    logw = -xs * xs / (2 * s * s)
    w = np.exp(logw - logw.max())
    return float(w[xs > c].sum() / w.sum())


def chi2_p(counts, probs):
    counts = np.asarray(counts, dtype=float)
    exp = np.asarray(probs) * counts.sum()
    keep = exp > 0
    assert counts[~keep].sum() == 0, "an outcome of probability 0 was drawn"
    return stats.chisquare(counts[keep], exp[keep]).pvalue


# ---------------------------------------------------------------------------------------------------
# the histogram and its gaps
# ---------------------------------------------------------------------------------------------------
def test_keyword_histogram_counts_each_token_once_per_response():
    h = keyword_histogram([[1, 1, 2], [2, 3, 3, 3], [], [0]], vocab_size=5)
    np.testing.assert_array_equal(h, [1, 1, 2, 1, 0])


def test_keyword_histogram_rejects_ids_outside_the_vocabulary():
    with pytest.raises(InvalidParameterError) as e:
        keyword_histogram([[0, 5]], vocab_size=5)
    assert e.value.field == "responses[0]"
    with pytest.raises(InvalidParameterError):
        keyword_histogram([[-1]], vocab_size=5)


@given(st.lists(st.integers(0, 30), min_size=2, max_size=30))
def test_sorted_gaps_match_brute_force(h):
    np.testing.assert_array_equal(sorted_gaps(np.array(h)), brute_gaps(h))


@given(dps.mechanism_inputs("token_sets", relation="replace", max_bins=10))
def test_gap_sensitivity_is_two_and_a_gap_above_two_fixes_the_top_k_set(pair):
    """004 Thm A.11 (Δ(d_k) = 2) and the PTR stability lemma behind Thm A.10 (d_k > 2 ⇒ same top-k set on
    every neighbour), on neighbours generated from datasets of responses (one response replaced)."""
    h0, h1 = pair
    g0, g1 = brute_gaps(h0), brute_gaps(h1)
    assert np.abs(g0 - g1).max() <= GAP_SENSITIVITY
    for k in range(1, len(h0)):
        if g0[k - 1] > 2:
            top0 = set(np.argsort(-h0, kind="stable")[:k].tolist())
            top1 = set(np.argsort(-h1, kind="stable")[:k].tolist())
            assert top0 == top1
            out0, _ = ptr_release_top_k(h0, k, sigma=1e-3, failure_probability=0.5, source=src("stab0"))
            out1, _ = ptr_release_top_k(h1, k, sigma=1e-3, failure_probability=0.5, source=src("stab1"))
            if out0 is not None and out1 is not None:
                assert out0 == out1 == tuple(sorted(top0))


def test_the_gap_bound_two_is_attained():
    """One response containing only token B is replaced by one containing A and C: d_1 goes 0 → 2 and d_2
    goes 2 → 0 (tokens A, B, C = 0, 1, 2)."""
    responses = [[0, 1, 2]] * 3 + [[0, 1], [1], [0]]
    h0 = keyword_histogram(responses, 3)
    h1 = keyword_histogram(responses[:4] + [[0, 2]] + responses[5:], 3)
    np.testing.assert_array_equal(h0, [5, 5, 3])
    np.testing.assert_array_equal(h1, [6, 4, 4])
    np.testing.assert_array_equal(sorted_gaps(h0), [0, 2])
    np.testing.assert_array_equal(sorted_gaps(h1), [2, 0])


# ---------------------------------------------------------------------------------------------------
# FindBestK
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method,n", [("direct", 20_000)])
def test_find_best_k_samples_the_exponential_mechanism_with_scale_4_over_eps(method, n):
    h = np.array([9, 2, 9, 0, 4, 4, 1])
    eps = 1.3
    ks, ev = find_best_k(h, eps, src(f"fbk-{method}"), method=method, size=n)
    counts = np.bincount(ks, minlength=len(h))[1:]
    law = em_law(brute_gaps(h), eps)
    assert chi2_p(counts, law) > P_MIN
    assert ev == SelfComposedEvent(ExponentialMechanismEvent(eps, bounded_range=True), n)
    # and NOT the printed Gumbel(2/ε) law (scale 2/ε = weights exp(ε d / 2)): rejected at 1e-6
    printed = em_law(brute_gaps(h), 2 * eps)
    assert chi2_p(counts, printed) < P_MIN


def test_find_best_k_refuses_float_gumbel():
    """Issue 10 item 3: Algorithm 3's float Gumbel-max form is not ε-DP (bounded Gumbels); it is refused by name."""
    with pytest.raises(InvalidParameterError, match="gumbel.*removed"):
        find_best_k(np.array([9, 2, 9]), 1.0, src("fbk-g"), method="gumbel")


def test_find_best_k_regularizer_and_range():
    h = np.array([10, 8, 7, 1, 1, 0])
    eps = 2.0
    r = np.array([0.0, -1.0, 0.5, -np.inf, 0.0])  # r(k), k = 1..5; k = 4 excluded
    ks, _ = find_best_k(h, eps, src("reg"), regularizer=r, k_max=4, size=20_000)
    assert set(np.unique(ks).tolist()) <= {1, 2, 3}
    u = brute_gaps(h)[:3] + r[:3]
    law = em_law(u, eps)
    assert chi2_p(np.bincount(ks, minlength=4)[1:], law) > P_MIN
    k, ev = find_best_k(h, eps, src("range"), k_min=3, k_max=3)
    assert k == 3 and ev == ExponentialMechanismEvent(eps, bounded_range=True)


def test_find_best_k_event_rdp_is_the_bounded_range_curve():
    _, ev = find_best_k(np.array([3, 1, 0]), 0.8, src("ev"))
    a = np.array([x for x in DEFAULT_ORDERS if x <= 256])  # sinh(α·0.8) overflows float64 beyond
    # Cesar–Rogers: ε-bounded-range ⇒ α ε²/8 (never above the pure-DP curve of 004 Thm A.9)
    sinh_bound = np.log((np.sinh(a * 0.8) - np.sinh((a - 1) * 0.8)) / np.sinh(0.8)) / (a - 1)
    thm_a9 = np.minimum(a * 0.8**2 / 2, sinh_bound)
    curve = rdp_curve(ev, a)
    assert np.all(curve <= a * 0.8**2 / 8 + 1e-15)
    assert np.all(curve <= thm_a9 + 1e-12)


# ---------------------------------------------------------------------------------------------------
# TopKWithPTR
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sigma,delta", [(0.3, 0.1), (1.0, 1e-3), (2.5, 1e-6), (17.0, 1e-9), (0.05, 0.2)])
def test_ptr_threshold_bounds_the_failure_probability(sigma, delta):
    c = ptr_threshold(sigma, delta)
    assert dgauss_sf(c, 2 * sigma) <= delta
    # not wastefully large: one step less would already be at or above the continuous quantile
    assert c - 1 < 2 * sigma * stats.norm.isf(delta) + 1e-9 or c == 0


@pytest.mark.parametrize("gap", [0, 1, 2, 3, 4, 6, 9])
def test_ptr_pass_rate_matches_the_exact_law(gap):
    sigma, delta, n = 1.0, 0.05, 100_000
    h = np.array([20 + gap, 20, 3, 0, 0])
    c = ptr_threshold(sigma, delta)
    p = dgauss_sf(c + 2 - max(2, gap), 2 * sigma)  # pass iff X > c + 2 − max(2, d_k)
    outs, ev = ptr_release_top_k(h, 1, sigma=sigma, failure_probability=delta, source=src(f"rate{gap}"), size=n)
    passes = sum(o is not None for o in outs)
    assert stats.binomtest(passes, n, p).pvalue > P_MIN
    if gap <= 2:
        assert p <= delta  # refusal: at gap ≤ 2 the test passes w.p. ≤ δ
    assert ev == SelfComposedEvent(ApproxRdpEvent(DiscreteGaussianEvent(2 * sigma, 2), delta), n)
    for o in outs:
        assert o is None or o == (0,)


def test_ptr_refuses_when_the_gap_is_small_and_releases_the_exact_set_when_large():
    h_small = np.array([7, 6, 6, 5, 0, 0])  # d_3 = 1
    outs, _ = ptr_release_top_k(h_small, 3, sigma=0.5, failure_probability=1e-9, source=src("small"), size=10_000)
    # P[any pass] <= 1e4 * 1e-9 = 1e-5 (the false-failure rate of this assertion)
    assert all(o is None for o in outs)
    h_large = np.array([3, 40, 0, 38, 41, 2])  # top-3 = tokens {1, 3, 4}, d_3 = 36
    out, _ = top_k_with_ptr(h_large, 3, 4.0, 1e-6, src("large"))
    assert out == (1, 3, 4)  # a set, in increasing token id (count order 4, 1, 3 is NOT released)


def test_ptr_events_and_calibration():
    a = np.array(DEFAULT_ORDERS)
    _, ev = ptr_release_top_k(np.array([5, 1, 0]), 1, sigma=1.7, failure_probability=1e-5, source=src("e"))
    assert isinstance(ev, ApproxRdpEvent) and ev.delta == 1e-5
    np.testing.assert_allclose(rdp_curve(ev, a), a / (2 * 1.7**2), rtol=1e-12)  # 004 Thm A.10: α/(2σ²)
    assert additive_delta(ev) == 1e-5
    eps, delta = 1.5, 1e-4
    out, ev2 = top_k_with_ptr(np.array([5, 1, 0]), 1, eps, delta, src("cal"))
    sigma = ptr_sigma_for(eps, delta)
    assert ev2 == ApproxRdpEvent(DiscreteGaussianEvent(2 * sigma, 2), delta / 2)
    e, d = epsilon_of(ev2, delta / 2)
    assert d == pytest.approx(delta) and eps - 1e-6 < e <= eps
    # independent check of the conversion: min over α of α/(2σ²) + log((α−1)/α) − (log δ' + log α)/(α − 1)
    conv = a / (2 * sigma**2) + np.log((a - 1) / a) - (math.log(delta / 2) + np.log(a)) / (a - 1)
    assert conv.min() == pytest.approx(eps, abs=1e-6)


def test_calibrate_dp_ksa_spends_exactly_the_target():
    p = calibrate_dp_ksa(3.0, 1e-4, em_fraction=0.4)
    assert p.epsilon_em == pytest.approx(1.2) and p.ptr_delta == p.conversion_delta == 5e-5
    a = np.array(DEFAULT_ORDERS)
    em = np.minimum(a * 1.2**2 / 8, rdp_curve(ExponentialMechanismEvent(1.2, bounded_range=False), a))
    total = em + a / (2 * p.sigma**2)
    conv = total + np.log((a - 1) / a) - (math.log(5e-5) + np.log(a)) / (a - 1)
    assert conv.min() == pytest.approx(3.0, abs=1e-6)
    e, d = epsilon_of(p.event(), 5e-5)
    assert e <= 3.0 and d == pytest.approx(1e-4)
    with pytest.raises(InvalidParameterError) as info:
        calibrate_dp_ksa(0.5, 1e-4, em_fraction=0.9999999)
    assert info.value.field == "em_fraction"


def test_dp_ksa_select_runs_both_steps():
    h = keyword_histogram([[1, 2, 3]] * 60 + [[4]] * 10 + [[5, 6]] * 10, vocab_size=10)
    sel, ev = dp_ksa_select(h, 8.0, 1e-4, src("ksa"), k_max=5)
    assert isinstance(sel, KeywordSelection) and 1 <= sel.k <= 5
    assert sel.tokens is None or len(sel.tokens) == sel.k
    assert isinstance(ev, ComposedEvent) and len(ev.events) == 2
    # with gap 50 at k = 3 and ε = 8 the EM picks k = 3 w.p. ≈ 1 − 4e-43 and PTR passes w.p. ≈ 1 − 1e-30
    assert sel == KeywordSelection(3, (1, 2, 3))


# ---------------------------------------------------------------------------------------------------
# bad input: typed errors naming the field, nothing drawn
# ---------------------------------------------------------------------------------------------------
BAD_FBK = [
    (dict(histogram=[3]), "histogram"),
    (dict(histogram=[[1, 2], [3, 4]]), "histogram"),
    (dict(histogram=[1, -1, 2]), "histogram"),
    (dict(histogram=[1.5, 2, 0]), "histogram"),
    (dict(histogram=[1, float("nan"), 0]), "histogram"),
    (dict(histogram=["a", "b"]), "histogram"),
    (dict(epsilon=0.0), "epsilon"),
    (dict(epsilon=float("nan")), "epsilon"),
    (dict(epsilon=-1.0), "epsilon"),
    (dict(k_min=0), "k_min"),
    (dict(k_max=4), "k_max"),
    (dict(k_min=3, k_max=2), "k_min"),
    (dict(regularizer=[0.0, 0.0]), "regularizer"),
    (dict(regularizer=[0.0, np.inf, 0.0]), "regularizer"),
    (dict(regularizer=[0.0, np.nan, 0.0]), "regularizer"),
    (dict(regularizer=[-np.inf] * 3), "regularizer"),
    (dict(method="softmax"), "method"),
    (dict(size=0), "size"),
]


@pytest.mark.parametrize("kwargs,field", BAD_FBK)
def test_find_best_k_bad_input(kwargs, field):
    s = CountingSource()
    args = dict(histogram=[4, 2, 1, 0], epsilon=1.0)
    args.update(kwargs)
    h, eps = args.pop("histogram"), args.pop("epsilon")
    with pytest.raises(InvalidParameterError) as info:
        find_best_k(h, eps, s, **args)
    assert info.value.field == field
    assert s.read == 0


BAD_PTR = [
    (dict(k=0), "k"),
    (dict(k=4), "k"),
    (dict(k=1.5), "k"),
    (dict(epsilon=-0.5), "epsilon"),
    (dict(delta=0.0), "delta"),
    (dict(delta=1.0), "delta"),
    (dict(histogram=[2]), "histogram"),
    (dict(histogram=[2, -3, 1, 0]), "histogram"),
]


@pytest.mark.parametrize("kwargs,field", BAD_PTR)
def test_top_k_with_ptr_bad_input(kwargs, field):
    s = CountingSource()
    args = dict(histogram=[4, 2, 1, 0], k=1, epsilon=1.0, delta=1e-5)
    args.update(kwargs)
    with pytest.raises(InvalidParameterError) as info:
        top_k_with_ptr(args["histogram"], args["k"], args["epsilon"], args["delta"], s)
    assert info.value.field == field
    assert s.read == 0


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(sigma=0.0), "sigma"),
        (dict(sigma=float("inf")), "sigma"),
        (dict(failure_probability=1.5), "failure_probability"),
    ],
)
def test_ptr_release_bad_input(kwargs, field):
    s = CountingSource()
    args = dict(sigma=1.0, failure_probability=1e-3)
    args.update(kwargs)
    with pytest.raises(InvalidParameterError) as info:
        ptr_release_top_k([4, 2, 1], 1, source=s, **args)
    assert info.value.field == field
    assert s.read == 0


def test_dp_ksa_select_bad_input_draws_nothing():
    s = CountingSource()
    with pytest.raises(InvalidParameterError) as info:
        dp_ksa_select([4, 2, 1, 0], 1.0, 1e-5, s, k_max=9)
    assert info.value.field == "k_max" and s.read == 0
    with pytest.raises(InvalidParameterError) as info:
        dp_ksa_select([4, 2, 1, 0], 1.0, 2.0, s)
    assert info.value.field == "delta" and s.read == 0


def test_source_must_be_a_random_source():
    with pytest.raises(InvalidParameterError) as info:
        find_best_k([3, 2, 1], 1.0, source=np.random.default_rng(0))
    assert info.value.field == "source"


def _mp_session_epsilon(eps_em: float, sigma: float, queries: int, conversion_delta: float) -> float:
    """Independent reference (mpmath, 40 digits): T-fold RDP of one release — the ε-bounded-range EM,
    min(α ε²/8, Bun–Steinke's pure-ε bound (1/(α−1))·log((sinh(αε) − sinh((α−1)ε))/sinh ε)), plus the Gaussian
    α/(2σ²) — converted by min over α of RDP + log((α−1)/α) − (log δ' + log α)/(α − 1)."""
    import mpmath as mp

    mp.mp.dps = 40
    e, s2, best = mp.mpf(eps_em), mp.mpf(sigma) ** 2, None
    for a in DEFAULT_ORDERS:
        a = mp.mpf(a)
        pure = mp.log((mp.sinh(a * e) - mp.sinh((a - 1) * e)) / mp.sinh(e)) / (a - 1)
        rdp = queries * (min(a * e * e / 8, pure) + a / (2 * s2))
        conv = rdp + mp.log((a - 1) / a) - (mp.log(conversion_delta) + mp.log(a)) / (a - 1)
        best = conv if best is None or conv < best else best
    return float(best)


@pytest.mark.parametrize("queries", [2, 100, 520])
def test_calibrate_dp_ksa_for_a_session_of_t_releases_against_mpmath(queries):
    """T releases compose (RDP) to the target (10, 1e-5): the reference's T-fold conversion is 10 to 1e-6 and
    not above it, PTR's T failures and the conversion δ sum to δ, and the split gives FindBestK's T releases
    alone ≤ half of ε. Basic composition of (ε/T, δ/T) cannot be calibrated at T = 520 at all."""
    p = calibrate_dp_ksa(10.0, 1e-5, queries=queries)
    ref = _mp_session_epsilon(p.epsilon_em, p.sigma, queries, p.conversion_delta)
    assert ref == pytest.approx(10.0, abs=1e-6) and ref <= 10.0 + 1e-9
    assert queries * p.ptr_delta + p.conversion_delta == pytest.approx(1e-5)
    assert _mp_session_epsilon(p.epsilon_em, math.inf, queries, p.conversion_delta) <= 5.0 + 1e-9
    e, d = epsilon_of(SelfComposedEvent(p.event(), queries), p.conversion_delta)
    assert e <= 10.0 and d == pytest.approx(1e-5)
    if queries == 520:
        with pytest.raises(InvalidParameterError, match="em_fraction"):
            calibrate_dp_ksa(10.0 / 520, 1e-5 / 520)


def test_calibrate_dp_ksa_one_query_is_unchanged_and_bad_queries_refused():
    assert calibrate_dp_ksa(3.0, 1e-4, queries=1) == calibrate_dp_ksa(3.0, 1e-4)
    with pytest.raises(InvalidParameterError) as info:
        calibrate_dp_ksa(3.0, 1e-4, queries=0)
    assert info.value.field == "queries"
