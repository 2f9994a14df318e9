"""Empirical DP tests of every mechanism with accounting.testing.check_dp (black-box, sample based).

For each mechanism: (1) the checker finds no violation of the claimed (ε, δ) on a neighbouring pair, with
automatically selected events (atoms, likelihood-ratio unions, tails); (2) a deliberately broken variant IS
caught on an event fixed in advance.

Error rates, stated once for the whole file:
- a correct-mechanism test fails spuriously with probability ≤ ALPHA = 1e-6 (the checker's guarantee —
  Clopper–Pearson + Bonferroni — holds whenever the mechanism really is (ε, δ)-DP on the pair);
- a broken-variant test misses with probability 1 − detection_probability(...), computed EXACTLY in the test
  from the two binomial laws of the fixed event (its true probabilities are derived here in closed form or
  from the exact pmf, independently of the code under test) and asserted to be < 1e-6 before running.
  Broken-variant checks use α = 0.01: α only sets how conservative the bounds are; what can go wrong in a
  broken-variant test is a miss, whose probability is the stated one.
All sources are seeded, so each run is deterministic; the rates above are over the choice of seed.

Neighbouring inputs are chosen where the broken variant's privacy loss is large (worst-case pairs from the
proofs), so that a moderate number of trials suffices. Where a mechanism accepts arrays, n runs are drawn in
one call of the real mechanism (n i.i.d. copies of a scalar query, ``l0_sensitivity=1`` so that each entry
gets exactly the scalar mechanism's noise).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dprag.accounting.mechanisms.additive import (
    discrete_gaussian_mechanism,
    discrete_laplace_mechanism,
    gaussian_mechanism,
    laplace_mechanism,
)
from dprag.accounting.mechanisms.exponential import exponential_mechanism, vote_exponential_mechanism
from dprag.accounting.mechanisms.ksa import find_best_k, ptr_release_top_k, ptr_threshold, top_k_with_ptr
from dprag.accounting.mechanisms.limited_domain import BOTTOM, limited_domain
from dprag.accounting.mechanisms.prefix_sums import noisy_prefix_sums
from dprag.accounting.mechanisms.sparse_vector import SparseVector
from dprag.accounting.testing import OutputEvent, check_dp, detection_probability, seeded

ALPHA = 1e-6  # false-failure rate of every "no violation" test
ALPHA_BROKEN = 1e-2  # decision level of the broken-variant checks (their miss rate is computed below)
MAX_MISS = 1e-6


def assert_no_violation(mech, d0, d1, epsilon, delta=0.0, *, trials, label, vectorized=False, tight_above=None, **kw):
    """No violation at the claim. ``tight_above``: where the claim is tight on this pair, the certified lower
    bound must also exceed this value — the check is not vacuous (margins used are ≥ 8 standard errors)."""
    rep = check_dp(
        mech,
        d0,
        d1,
        epsilon,
        delta,
        trials=trials,
        vectorized=vectorized,
        source_factory=seeded(label),
        alpha=ALPHA,
        **kw,
    )
    assert rep.passed, rep.summary()
    if tight_above is not None:
        assert rep.epsilon_lower_bound > tight_above, rep.summary()
    return rep


def assert_caught(mech, d0, d1, epsilon, delta, event, p_a, p_b, *, direction, trials, label, vectorized=False):
    """``event`` has true probability p_a under d_a and p_b under d_b, (a, b) = (0, 1) if direction is
    "d0 vs d1" else (1, 0); the miss probability is checked to be < MAX_MISS before running."""
    power = detection_probability(p_a, p_b, epsilon, delta, trials=trials, alpha=ALPHA_BROKEN, n_bounds=4)
    assert power > 1 - MAX_MISS, f"test design: miss probability {1 - power:.3g} too large"
    rep = check_dp(
        mech,
        d0,
        d1,
        epsilon,
        delta,
        trials=trials,
        events=[event],
        vectorized=vectorized,
        source_factory=seeded(label),
        alpha=ALPHA_BROKEN,
    )
    assert any(r.violated and r.direction == direction for r in rep.results), rep.summary()
    return rep


def dlap_cdf(t, b):
    """P[Z ≤ t] for the discrete Laplace P(z) ∝ exp(−|z|/b), t an integer (closed form)."""
    r = math.exp(-1.0 / b)
    return r ** (-t) / (1 + r) if t < 0 else 1 - r ** (t + 1) / (1 + r)


def dgauss_pmf(sigma, L=None):
    L = L or int(math.ceil(30 * sigma)) + 5
    xs = np.arange(-L, L + 1)
    w = np.exp(-(xs.astype(float) ** 2) / (2 * sigma * sigma))
    return xs, w / w.sum()


# ---------------------------------------------------------------------------------------------------
# helper A: additive mechanisms
# ---------------------------------------------------------------------------------------------------
def _laplace(eps):
    return lambda x, s, n: laplace_mechanism(np.full(n, x), 1.0, eps, s, l0_sensitivity=1)[0]


def test_laplace_mechanism():
    """Secure Laplace, Δ = 1, ε = 1 on 0 vs 1. Broken: halved noise (run at 2ε). On {x ≤ 0} the broken
    mechanism has P0 = 1/2, P1 = e^{-2}/2 (continuous Laplace; the 2^-40 grid changes these by < 1e-11)."""
    assert_no_violation(_laplace(1.0), 0.0, 1.0, 1.0, trials=100_000, label="lap", vectorized=True, tight_above=0.8)
    ev = OutputEvent.at_most(0.0)
    assert_caught(
        _laplace(2.0),
        0.0,
        1.0,
        1.0,
        0.0,
        ev,
        0.5,
        0.5 * math.exp(-2),
        direction="d0 vs d1",
        trials=5_000,
        label="lap-b",
        vectorized=True,
    )


def gaussian_delta(eps, sigma, sens=1.0):
    """Exact δ(ε) of the Gaussian mechanism (Balle & Wang 2018, Thm 8)."""
    a = sens / (2 * sigma)
    b = eps * sigma / sens
    return stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b)


def _gauss(sigma):
    return lambda x, s, n: gaussian_mechanism(np.full(n, x), 1.0, sigma, s, l0_sensitivity=1)[0]


def test_gaussian_mechanism():
    """Secure Gaussian σ = 1, Δ = 1 claimed (ε, δ) = (1, δ_exact(1)) — tight. Broken: σ/2; on {x > 0.75}
    (the likelihood-ratio set of the broken mechanism) P1 = Φ̄(−0.5), P0 = Φ̄(1.5)."""
    eps = 1.0
    delta = gaussian_delta(eps, 1.0)
    assert_no_violation(
        _gauss(1.0), 0.0, 1.0, eps, delta, trials=100_000, label="gau", vectorized=True, tight_above=0.8
    )
    ev = OutputEvent.greater_than(0.75)
    assert_caught(
        _gauss(0.5),
        0.0,
        1.0,
        eps,
        delta,
        ev,
        stats.norm.sf(-0.5),
        stats.norm.sf(1.5),
        direction="d1 vs d0",
        trials=2_000,
        label="gau-b",
        vectorized=True,
    )


def _dlap_mech(scale):
    return lambda x, s, n: discrete_laplace_mechanism(np.full(n, x, dtype=np.int64), 1, scale, s)[0]


def test_discrete_laplace_mechanism():
    """Scale 1 on 0 vs 1: ε = 1. Broken: scale 1/2; on {x ≤ 0}: P0 = F(0), P1 = F(−1) with b = 1/2."""
    assert_no_violation(_dlap_mech(1.0), 0, 1, 1.0, trials=100_000, label="dlap", vectorized=True, tight_above=0.8)
    ev = OutputEvent.at_most(0)
    assert_caught(
        _dlap_mech(0.5),
        0,
        1,
        1.0,
        0.0,
        ev,
        dlap_cdf(0, 0.5),
        dlap_cdf(-1, 0.5),
        direction="d0 vs d1",
        trials=2_000,
        label="dlap-b",
        vectorized=True,
    )


def _dgauss_mech(sigma):
    return lambda x, s, n: discrete_gaussian_mechanism(np.full(n, x, dtype=np.int64), 1, sigma, s)[0]


def test_discrete_gaussian_mechanism():
    """σ = 1, Δ = 1 claimed (1, δ) with δ the exact hockey-stick divergence Σ_x max(0, p0 − e^ε p1) summed
    from the pmf (CKS 2020 Thm 7). Broken: σ = 1/2; event S = {x : p1(x) > e^ε p0(x)} of the broken law."""
    eps = 1.0
    xs, p = dgauss_pmf(1.0)
    p0, p1 = p, np.concatenate(([0.0], p[:-1]))  # law of 0 + X and of 1 + X on the same grid
    delta = float(np.maximum(p0 - math.exp(eps) * p1, 0).sum())
    assert delta > 0.05  # sanity: the claim is tight, not vacuous
    assert_no_violation(
        _dgauss_mech(1.0), 0, 1, eps, delta, trials=100_000, label="dg", vectorized=True, tight_above=0.8
    )
    xs, q = dgauss_pmf(0.5)
    q0, q1 = q, np.concatenate(([0.0], q[:-1]))
    S = xs[q1 > math.exp(eps) * q0]
    ev = OutputEvent("output in S", lambda outs: np.isin(outs, S))
    assert_caught(
        _dgauss_mech(0.5),
        0,
        1,
        eps,
        delta,
        ev,
        float(q1[np.isin(xs, S)].sum()),
        float(q0[np.isin(xs, S)].sum()),
        direction="d1 vs d0",
        trials=2_000,
        label="dg-b",
        vectorized=True,
    )


# ---------------------------------------------------------------------------------------------------
# helper E1: exponential mechanism, LimitedDomain, sparse vector, prefix sums
# ---------------------------------------------------------------------------------------------------
# Utilities of sensitivity 1 moving in opposite directions (not monotone): output 0 gains 1, the rest lose 1.
U0, U1 = np.array([0.0, 2, 2, 2]), np.array([1.0, 1, 1, 1])


@pytest.mark.parametrize("method", ["direct"])
def test_exponential_mechanism(method):
    """ε = 1, Δ = 1. Broken: ``monotone=True`` (weights e^{εu/Δ}) used on non-monotone neighbours, which is
    only 2ε-DP: P[0] = 1/4 under U1 vs 1/(1 + 3e²) under U0, log-ratio 1.76 > 1."""
    mech = lambda u, s: exponential_mechanism(u, 1.0, 1.0, s, method=method)[0]  # noqa: E731
    assert_no_violation(mech, U0, U1, 1.0, trials=20_000, label=f"em-{method}")
    broken = lambda u, s: exponential_mechanism(u, 1.0, 1.0, s, method=method, monotone=True)[0]  # noqa: E731
    ev = OutputEvent("output == 0", lambda outs: outs == 0)
    assert_caught(
        broken,
        U0,
        U1,
        1.0,
        0.0,
        ev,
        0.25,
        1 / (1 + 3 * math.e**2),
        direction="d1 vs d0",
        trials=3_000,
        label=f"em-{method}-b",
    )


def test_vote_exponential_mechanism():
    """000 Alg. 5's per-token EM on a vote histogram; one vote moves from token 1 to token 0."""
    mech = lambda h, s: vote_exponential_mechanism(h, 1.0, s)[0]  # noqa: E731
    assert_no_violation(mech, np.array([3, 5, 5, 0, 0]), np.array([4, 4, 5, 0, 0]), 1.0, trials=10_000, label="vote")


def _ld(eps, delta, k_bar, monotone=False):
    return lambda h, s: limited_domain(h, eps, delta, k_bar, s, monotone=monotone)[0]


def dr_bottom_probability(h, eps, delta):
    """P[⊥] of Durfee–Rogers' LimitedDomain, k̄ = 1, calibration s = 1/ε, c = 1, ℓ0 = 2 (written here)."""
    srt = np.sort(h)[::-1]
    h_bot = srt[1] + 1 + math.log(min(2, 1, len(h) - 1) / delta) / eps
    return 1.0 / (1.0 + math.exp(eps * (srt[0] - h_bot)))


def test_limited_domain():
    """003's relation (one vote moves). Correct calibration passes on a pair where the broken one fails and
    on a pair where the correct one is nearly tight (a tie at the k̄-th count; found by exact search).
    Broken: Durfee–Rogers' monotone calibration (s = 1/ε, c = 1) on this non-monotone relation — what 003
    uses: h = (4, 1, 0, 0) → (5, 0, 0, 0), ε = 2, δ = 0.01: P[⊥] = 0.646 vs 0.032 (> e²·0.032 + 0.01)."""
    h_a, h_b = np.array([4, 1, 0, 0]), np.array([5, 0, 0, 0])
    assert_no_violation(_ld(2.0, 0.01, 1), h_a, h_b, 2.0, 0.01, trials=10_000, label="ld")
    assert_no_violation(
        _ld(0.5, 0.01, 1), np.array([5, 7, 5, 0]), np.array([6, 6, 5, 0]), 0.5, 0.01, trials=10_000, label="ld-tight"
    )
    ev = OutputEvent.elementwise("output is ⊥", lambda o: o is BOTTOM)
    pa, pb = dr_bottom_probability(h_a, 2.0, 0.01), dr_bottom_probability(h_b, 2.0, 0.01)
    assert_caught(
        _ld(2.0, 0.01, 1, monotone=True),
        h_a,
        h_b,
        2.0,
        0.01,
        ev,
        pa,
        pb,
        direction="d0 vs d1",
        trials=2_000,
        label="ld-b",
    )


def _svt(cls, threshold, eps, c, **kw):
    def mech(queries, source):
        sv = cls(threshold, eps, c, 1, source, **kw)
        out = []
        for q in queries:
            if sv.halted:
                break
            out.append(sv.test(q))
        return tuple(out)

    return mech


class ThresholdNotNoised(SparseVector):
    """Broken SVT: the real SparseVector with its threshold noise removed (ρ = 0, never re-drawn)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._rho = 0

    def test(self, query_value):
        hit = super().test(query_value)
        self._rho = 0
        return hit


SVT_M = 7
SVT_Q0, SVT_Q1 = [-1] * SVT_M, [0] * SVT_M  # every query moves by 1 (sensitivity 1)


def test_sparse_vector():
    """AboveThreshold (c = 1, ε = 4; claimed ε = c·ε = 4) on 7 queries q = −1 vs 0, threshold 0.
    Broken: threshold not noised. Then the answers are independent and every ⊥ costs 1/b₂ = ε/4: the
    all-⊥ transcript has probability F(0)^7 vs F(−1)^7 (b₂ = 4/ε = 1), privacy loss 7 > 4."""
    eps = 4.0
    assert_no_violation(_svt(SparseVector, 0, eps, 1), SVT_Q0, SVT_Q1, eps, trials=6_000, label="svt")
    b2 = 4.0 / eps
    ev = OutputEvent.elementwise("no discovery", lambda o: o == (False,) * SVT_M)
    assert_caught(
        _svt(ThresholdNotNoised, 0, eps, 1),
        SVT_Q0,
        SVT_Q1,
        eps,
        0.0,
        ev,
        dlap_cdf(0, b2) ** SVT_M,
        dlap_cdf(-1, b2) ** SVT_M,
        direction="d0 vs d1",
        trials=12_000,
        label="svt-b",
    )


@pytest.mark.slow
@pytest.mark.parametrize("redraw", [True, False])
def test_sparse_vector_several_discoveries(redraw):
    """c = 3 with and without re-drawing the threshold, claimed at the worst case ``max_epsilon`` (c·ε with
    re-draw; (c+1)ε/2 without — Lyu et al. 2017 Alg. 1 with ε₁ = ε/2, ε₂ = cε/2). Not re-drawing is NOT a
    violation with this calibration (query noise 4Δ/ε already pays ε/2 per discovery), so it must pass."""
    eps, c = 2.0, 3
    mech = _svt(SparseVector, 0, eps, c, redraw_threshold=redraw)
    claim = SparseVector(0, eps, c, 1, seeded(b"x")("x"), redraw_threshold=redraw).max_epsilon
    q0, q1 = [0, -1, 0, -1, 0, -1, 0, -1], [1, -2, 1, -2, 1, -2, 1, -2]
    assert_no_violation(mech, q0, q1, claim, trials=10_000, label=f"svt3-{redraw}")


def _prefix(eps, k=2):
    return lambda counts, s: noisy_prefix_sums(counts, k, eps, s).noisy_prefix_sums


def test_noisy_prefix_sums():
    """MuRAG-Ada's threshold release, ε_thr = 1, K = 2; one document added to the most relevant bin.
    Output: the whole transcript of released sums. Broken: halved noise (run at 2ε); on {s̃₁ ≤ 3} the
    broken law has P0 = F(0), P1 = F(−1) with b = 1/2 (s̃₁ = count + Z, counts 3 vs 4)."""
    c0, c1 = np.array([3, 1, 2]), np.array([4, 1, 2])
    assert_no_violation(_prefix(1.0), c0, c1, 1.0, trials=6_000, label="pfx")
    ev = OutputEvent.elementwise("first sum <= 3", lambda o: o[0] <= 3)
    assert_caught(
        _prefix(2.0),
        c0,
        c1,
        1.0,
        0.0,
        ev,
        dlap_cdf(0, 0.5),
        dlap_cdf(-1, 0.5),
        direction="d0 vs d1",
        trials=2_000,
        label="pfx-b",
    )


# ---------------------------------------------------------------------------------------------------
# DP-KSA (this helper): FindBestK and TopKWithPTR
# ---------------------------------------------------------------------------------------------------
# Token-set neighbours (one response with token B only replaced by one with A and C): d = (0, 6) → (2, 4).
H0, H1 = np.array([7, 7, 1]), np.array([8, 6, 2])


def test_find_best_k():
    """FindBestK at ε = 1 (Gumbel scale 4/ε, the exact sampler). Broken: the scale printed in
    004 Alg. 3, Gumbel(2/ε) — i.e. find_best_k at 2ε — on {k = 1}: 1/(1+e) under H1 vs 1/(1+e³) under H0,
    log-ratio 1.74 > 1."""
    direct = lambda h, s: find_best_k(h, 1.0, s)[0]  # noqa: E731
    assert_no_violation(direct, H0, H1, 1.0, trials=20_000, label="fbk")
    printed = lambda h, s, n: find_best_k(h, 2.0, s, size=n)[0]  # noqa: E731
    ev = OutputEvent("k == 1", lambda outs: outs == 1)
    assert_caught(
        printed,
        H0,
        H1,
        1.0,
        0.0,
        ev,
        1 / (1 + math.e),
        1 / (1 + math.e**3),
        direction="d1 vs d0",
        trials=3_000,
        label="fbk-b",
        vectorized=True,
    )


def _ptr(sigma, fail):
    return lambda h, s, n: ptr_release_top_k(h, 1, sigma=sigma, failure_probability=fail, source=s, size=n)[0]


def test_top_k_with_ptr():
    """Case (ii) of the proof: d_1 = 1 on both sides and the top-1 token differs ((3, 2, 0) vs (2, 3, 0),
    one response's token moved), so the only privacy is the δ of the refusal: (0, δ)-DP. Case (i): gap
    4 vs 2, same top set: the Gaussian test's privacy, claimed at the calibrated (ε, δ).
    Broken: the offset c computed for 4δ while δ is claimed: P[release (0,)] = P[N_Z(0, 4σ²) > c(4δ)] ≈ 4δ."""
    sigma, delta = 1.0, 0.02
    a, b = np.array([3, 2, 0]), np.array([2, 3, 0])
    assert_no_violation(_ptr(sigma, delta), a, b, 0.0, delta, trials=100_000, label="ptr2", vectorized=True)
    calibrated = lambda h, s, n: top_k_with_ptr(h, 1, 1.0, 0.02, s, size=n)[0]  # noqa: E731
    assert_no_violation(
        calibrated, np.array([6, 2, 0]), np.array([5, 3, 0]), 1.0, 0.02, trials=100_000, label="ptr1", vectorized=True
    )
    c = ptr_threshold(sigma, 4 * delta)
    xs, p = dgauss_pmf(2 * sigma)
    p_pass = float(p[xs > c].sum())
    ev = OutputEvent.elementwise("released (0,)", lambda o: o == (0,))
    assert_caught(
        _ptr(sigma, 4 * delta),
        a,
        b,
        0.0,
        delta,
        ev,
        p_pass,
        0.0,
        direction="d0 vs d1",
        trials=10_000,
        label="ptr-b",
        vectorized=True,
    )
