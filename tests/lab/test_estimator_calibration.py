"""Calibration harnesses of the coalition-size estimator (lab/estimator_calibration.py; 002 §5.5).

Statistical tests are seeded (numpy Generators); each states its false-failure rate, i.e. the probability
that a *correct* implementation fails it for a fresh seed. Expected values are derived independently:
the sphere-cosine tail by numerical integration of its density, FPR bounds by Bonferroni, binomial
bounds with scipy.stats.binom.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from dprag.audit.verify.estimator import coalition_size, exact_window_search
from dprag.errors import InvalidParameterError
from dprag.lab.estimator_calibration import (
    ATTACK_PARAPHRASES,
    HONEST_THETA_GRID,
    THETA_GRID,
    Calibration,
    HonestConfig,
    ToyConfig,
    analytic_null_fpr,
    attack_rows,
    clinic_attack_questions,
    clinic_honest_questions,
    clopper_pearson_upper,
    honest_queries,
    run_honest_calibration,
    run_toy_calibration,
    sphere_cosine_tail,
    toy_queries,
)


def _tail_by_quadrature(theta: float, d: int) -> float:
    """P(u·v >= θ) on S^{d-1}: the density of t = u·v is ∝ (1 - t²)^{(d-3)/2} on [-1, 1]."""

    def f(t):
        return (1 - t * t) ** ((d - 3) / 2)

    num = integrate.quad(f, theta, 1, epsabs=0, epsrel=1e-12)[0]
    den = integrate.quad(f, -1, 1, epsabs=0, epsrel=1e-12)[0]
    return num / den


def test_grid_is_002s():
    assert len(THETA_GRID) == 16 and THETA_GRID[0] == 0.20 and THETA_GRID[-1] == 0.95
    assert np.allclose(np.diff(THETA_GRID), 0.05)
    assert HONEST_THETA_GRID[-1] == 1.0 and 0.97 in HONEST_THETA_GRID


@pytest.mark.parametrize("d", [3, 8, 32, 384])
def test_sphere_cosine_tail_matches_quadrature(d):
    for theta in (0.0, 0.2, 0.5, 0.8):
        want = _tail_by_quadrature(theta, d)
        assert sphere_cosine_tail(theta, d) == pytest.approx(want, rel=1e-8, abs=1e-300)


def test_sphere_cosine_tail_monte_carlo():
    # 200k pairs in d = 8 at θ = 0.5: the binomial sd is ~8e-4; tolerance 5 sd -> false-failure < 1e-6
    rng = np.random.default_rng(1)
    u = rng.standard_normal((200_000, 8))
    v = rng.standard_normal((200_000, 8))
    cos = np.einsum("ij,ij->i", u, v) / np.linalg.norm(u, axis=1) / np.linalg.norm(v, axis=1)
    p = sphere_cosine_tail(0.5, 8)
    assert abs((cos >= 0.5).mean() - p) <= 5 * math.sqrt(p * (1 - p) / 200_000)


# ---------------------------------------------------------------------------------------------------------
# the toy null against its closed form (small config, many trials)
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("window, theta", [(None, 0.96), (10, 0.93)])
def test_toy_null_fpr_matches_bonferroni_bounds(window, theta):
    # A = 5 accounts x n = 20 queries, d = 8: S1 ≈ 0.1 at these θ. The empirical FPR over T = 3000 trials
    # must fall within [lower - 4 sd, upper + 4 sd]; false-failure < 1e-4 (normal approximation of the
    # binomial, p ≈ 0.1, T·p = 300).
    cfg = ToyConfig(accounts=5, queries_per_account=20, dim=8, thetas=(theta,), k_true=(2,), patterns=(), window=window)
    T = 3000
    res = run_toy_calibration(cfg, trials=T, seed=17)
    fpr = res.fpr()[0]
    # independent closed form: M cross-account pairs in the window (E[M] under random interleaving)
    N, n = 100, 20
    p = _tail_by_quadrature(theta, 8)
    if window is None:
        m = math.comb(N, 2) - 5 * math.comb(n, 2)
        s2 = math.comb(m, 2) * p * p
    else:
        pw = sum(N - g for g in range(1, window + 1))
        m = pw * (1 - (n - 1) / (N - 1))
        s2 = math.comb(pw, 2) * p * p
    upper, lower = m * p, m * p - s2
    sd = math.sqrt(upper * (1 - upper) / T)
    assert lower - 4 * sd <= fpr <= upper + 4 * sd, (fpr, lower, upper)
    a = analytic_null_fpr(cfg)
    assert a["upper"][0] == pytest.approx(upper, rel=1e-9)
    assert a["lower"][0] == pytest.approx(lower, rel=1e-9)


def test_analytic_null_fpr_full_toy_brackets_002():
    # d = 32, A = 30, n = 100, every pair: the rigorous bounds put FPR(0.80) in [0.049, 0.0504] and
    # FPR(0.85) < 0.001, so 002's θ* = 0.80 is right in the limit of many trials, but only just.
    a = analytic_null_fpr(ToyConfig())
    g80, g85 = THETA_GRID.index(0.80), THETA_GRID.index(0.85)
    assert 0.049 <= a["lower"][g80] <= a["upper"][g80] <= 0.0505
    assert a["upper"][g85] < 1e-3
    assert a["lower"][THETA_GRID.index(0.70)] > 0.999 or a["poisson"][THETA_GRID.index(0.70)] > 0.999


# ---------------------------------------------------------------------------------------------------------
# 002's toy calibration at reduced trials: the qualitative result
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_reduced():
    # ĉ is the same with every exact search (coalition_size_curve's contract); the blocked float64 search is about a
    # third faster than the default streamed one on these all-pairs windows. The streamed default is checked equal
    # to the float64 search in test_estimator_stream.py and to FAISS on toy trials in test_estimator_faiss.py.
    cfg = ToyConfig(k_true=(2, 10))
    return run_toy_calibration(cfg, trials=30, attack_trials=3, seed=2024, search=exact_window_search)


def test_toy_fpr_is_monotone_and_theta_star_is_002s(toy_reduced):
    res = toy_reduced
    # nested clusters: every trial's ĉ is non-increasing in θ, hence so is the FPR (deterministic)
    assert (np.diff(res.null, axis=1) <= 0).all()
    assert (np.diff(res.fpr()) <= 0).all()
    # below 0.70 the sphere null is over-connected (002: FPR = 1). With 30 trials, P(some trial has no
    # cross-account link at θ = 0.70) <= 30 · 3.5e-6 ≈ 1e-4 (false-failure).
    assert (res.fpr()[np.asarray(THETA_GRID) <= 0.70] == 1.0).all()
    # θ* = smallest grid θ with FPR <= 5%. The closed form gives FPR(0.75) ≈ 0.67, FPR(0.80) ≈ 0.049,
    # FPR(0.85) ≈ 8.4e-4, so θ* ∈ {0.80, 0.85}; false-failure = P(Bin(30, 8.4e-4) >= 2) +
    # P(Bin(30, 0.67) <= 1) ≈ 3e-4.
    assert res.theta_star() in (0.80, 0.85)
    assert res.fpr()[res.theta_index()] <= 0.05
    # the conservative reading (Clopper-Pearson upper bound <= 5%) needs 0 hits in 30 trials at most
    # (upper bound 0.095 with 0 hits > 5%): no grid θ qualifies with 30 trials (deterministic given the data)
    assert res.theta_star(conservative=True) is None


def test_toy_tpr_at_theta_star(toy_reduced):
    res = toy_reduced
    tpr, ex = res.tpr(), res.exact_recovery()
    # P-A: identical probes have cosine 1, so every coalition is found (deterministic) and ĉ = k_true
    # unless an honest query links to q* (≈ 2800 · 1.2e-8 per trial) or two honest clusters outgrow k_true
    # (impossible at k_true >= 2 when honest clusters have size <= 2 — they do at θ*, FPR <= 5%):
    for k in (2, 10):
        assert tpr[("P-A", k)] == 1.0
        assert ex[("P-A", k)] == 1.0
        # P-C: colluders draw from 5 shared intents -> exact duplicates -> found at any θ <= 1
        assert tpr[("P-C", k)] == 1.0
        # P-B: pairwise cosines ≈ 1 / (1 + ζ²d) ≈ 0.76 ± 0.08: with >= 200 queries the coalition's link graph
        # at θ <= 0.85 is connected with overwhelming probability (checked at 200 trials: TPR = 1.00)
        assert tpr[("P-B", k)] == 1.0
    # every alternative's ĉ is at least k_true at θ* (the coalition is found whole)
    g = res.theta_index()
    for (p, k), v in res.attacks.items():
        assert (v[:, g] >= k).all(), (p, k)


def test_calibration_reading_at_k_max(toy_reduced):
    res = toy_reduced
    r2 = res.at(2)
    assert r2.k_max == 2 and res.k_max == 1
    assert (r2.fpr() <= res.fpr()).all()
    assert r2.tpr()[("P-A", 2)] == 0.0  # ĉ = 2 is not > 2
    assert r2.theta_star() <= res.theta_star()
    impossible = Calibration("x", np.array([0.5, 0.9]), 10, 4, np.full((4, 2), 5), {}, 0.05, 1)
    assert impossible.theta_star() is None and impossible.tpr() == {}
    with pytest.raises(InvalidParameterError):
        res.tpr(0.123)
    md = res.to_markdown(res.info["analytic"])
    assert "θ*" in md and "P-B" in md


@pytest.mark.parametrize("x, n", [(0, 30), (1, 30), (5, 200), (30, 30), (10, 13)])
def test_clopper_pearson_upper(x, n):
    u = float(clopper_pearson_upper(np.array([x]), n, 0.95)[0])
    if x == n:
        assert u == 1.0
    else:  # the exact one-sided bound: P(Bin(n, u) <= x) = 0.05
        assert stats.binom.cdf(x, n, u) == pytest.approx(0.05, abs=1e-9)


# ---------------------------------------------------------------------------------------------------------
# query generators
# ---------------------------------------------------------------------------------------------------------


def test_attack_rows():
    rng = np.random.default_rng(4)
    probe = np.eye(6)[2]
    intents = np.eye(6)[:5]
    a = attack_rows(rng, "P-A", 7, probe, intents, 0.1)
    assert (a == probe).all()
    b = attack_rows(rng, "P-B", 4000, probe, intents, 0.1)
    assert np.allclose(np.linalg.norm(b, axis=1), 1.0)
    # probe + ζη normalised: cos with the probe = (1 + ζg) / sqrt((1 + ζg)² + ζ²·χ²_{d-1}), g ~ N(0, 1);
    # its mean by an independent Monte Carlo of that formula (10^6 draws). The harness's 4000-row mean has
    # sd ≈ 1.6e-4 (cos sd ≈ 0.01); tolerance 1e-3 > 6 sd -> false-failure < 1e-8
    r2 = np.random.default_rng(99)
    g, chi2 = r2.standard_normal(10**6), r2.chisquare(5, 10**6)
    want = np.mean((1 + 0.1 * g) / np.sqrt((1 + 0.1 * g) ** 2 + 0.01 * chi2))
    assert abs((b @ probe).mean() - want) < 1e-3
    assert (attack_rows(rng, "P-B", 3, probe, intents, 0.0) == probe).all()
    c = attack_rows(rng, "P-C", 500, probe, intents, 0.1)
    rows = {tuple(r) for r in c.tolist()}
    assert rows == {tuple(r) for r in intents.tolist()}  # all 5 used (P(missing one) = 5·0.8^500 ≈ 0)
    with pytest.raises(InvalidParameterError):
        attack_rows(rng, "P-Z", 3, probe, intents, 0.1)


def test_toy_queries_shapes_and_coalition():
    cfg = ToyConfig(accounts=6, queries_per_account=10, dim=5, k_true=(3,))
    rng = np.random.default_rng(0)
    x, acc = toy_queries(rng, cfg)
    assert x.shape == (60, 5) and np.allclose(np.linalg.norm(x, axis=1), 1)
    assert sorted(np.bincount(acc).tolist()) == [10] * 6
    x, acc = toy_queries(rng, cfg, "P-A", 3)
    # exactly 3 accounts send one identical vector 10 times each
    uniq, counts = np.unique(x, axis=0, return_counts=True)
    assert counts.max() == 30
    probe = uniq[counts.argmax()]
    members = set(np.asarray(acc)[(x == probe).all(axis=1)].tolist())
    assert len(members) == 3
    assert coalition_size(x, acc, 0.999, 59) >= 3


def test_honest_queries_draw_distinct_pool_rows_per_account():
    rng = np.random.default_rng(1)
    pool = np.eye(40)
    cfg = HonestConfig(accounts=4, queries_per_account=25, k_true=(2,))
    x, acc = honest_queries(rng, cfg, pool)
    for a in range(4):
        rows = x[np.asarray(acc) == a]
        assert rows.shape == (25, 40) and len({r.argmax() for r in rows}) == 25
    probes = np.full((2, 40), 1 / math.sqrt(40))
    para = np.repeat(probes[:, None, :], 3, axis=1)
    x, acc = honest_queries(rng, cfg, pool, "P-A", 2, probes, para)
    assert ((x == probes[0]).all(axis=1)).sum() == 50


def test_honest_harness_on_a_synthetic_pool_reads_like_the_theory():
    # a pool of 60 orthonormal "questions": honest accounts link only through verbatim repeats
    # (cosine 0 otherwise), so at every θ the honest ĉ is the number of accounts sharing a question.
    pool = np.eye(60)
    probes = np.full((1, 60), 1 / math.sqrt(60))
    para = probes[:, None, :].repeat(5, axis=1)
    cfg = HonestConfig(accounts=6, queries_per_account=20, thetas=(0.5, 1.0), k_true=(3,), patterns=("P-A",))
    res = run_honest_calibration(pool, probes, para, cfg, trials=5, seed=3)
    assert (res.null[:, 0] == res.null[:, 1]).all()
    # 6 accounts x 20 of 60 questions: a question is shared by >= 2 accounts almost surely
    assert (res.null >= 2).all()
    assert (res.attacks[("P-A", 3)] >= 3).all()


def test_clinic_question_helpers():
    from dprag.rag_adapters.datasets import generate_clinic_corpus

    c = generate_clinic_corpus(1, n_conditions=3, support_min=2, support_max=3, n_distractors=5)
    honest = clinic_honest_questions(c)
    assert len(honest) == 3 * 4 * 4 + 3 * 4  # 4 kinds x 4 phrasings + a dependent chain of 4, per condition
    att = clinic_attack_questions(c, targets=4, seed=0)
    assert len(att) == 4 and all(len(g) == len(ATTACK_PARAPHRASES) for g in att)
    names = {can.name for can in c.canaries}
    for g in att:
        assert any(n in g[0] for n in names)
        assert g[0] == c.canaries[[can.name in g[0] and can.kind in g[0] for can in c.canaries].index(True)].question()
    assert att == clinic_attack_questions(c, targets=4, seed=0)
    with pytest.raises(InvalidParameterError):
        clinic_attack_questions(c, targets=10_000)
    with pytest.raises(InvalidParameterError):
        clinic_honest_questions(c, splits=("nope",))


# ---------------------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(accounts=1), "accounts"),
        (dict(queries_per_account=0), "queries_per_account"),
        (dict(thetas=()), "thetas"),
        (dict(thetas=(0.5, 0.4)), "thetas"),
        (dict(thetas=(0.0, 0.5)), "thetas"),
        (dict(thetas=(0.5, 1.2)), "thetas"),
        (dict(k_true=(1,)), "k_true"),
        (dict(k_true=(40,)), "k_true"),
        (dict(patterns=("P-D",)), "patterns"),
        (dict(zeta=float("nan")), "zeta"),
        (dict(zeta=-0.1), "zeta"),
        (dict(window=0), "window"),
        (dict(target_fpr=0.0), "target_fpr"),
        (dict(target_fpr=1.0), "target_fpr"),
        (dict(dim=1), "dim"),
        (dict(intents=0), "intents"),
    ],
)
def test_bad_toy_config(kwargs, field):
    with pytest.raises(InvalidParameterError) as e:
        ToyConfig(**kwargs)
    assert e.value.field == field


def test_bad_run_arguments():
    with pytest.raises(InvalidParameterError) as e:
        run_toy_calibration(ToyConfig(accounts=2, queries_per_account=2, dim=2, k_true=(2,)), trials=0)
    assert e.value.field == "trials"
    with pytest.raises(InvalidParameterError) as e:
        run_toy_calibration(HonestConfig(), trials=1)
    assert e.value.field == "cfg"
    pool, probes, para = np.eye(8), np.eye(8)[:1], np.eye(8)[None, :5]
    cfg = HonestConfig(accounts=2, queries_per_account=4, k_true=(2,))
    with pytest.raises(InvalidParameterError) as e:
        run_honest_calibration(pool[:3], probes, para, cfg, trials=1)
    assert e.value.field == "pool"
    with pytest.raises(InvalidParameterError) as e:
        run_honest_calibration(pool, np.eye(5)[:1], para, cfg, trials=1)
    assert e.value.field == "probes"
    with pytest.raises(InvalidParameterError) as e:
        run_honest_calibration(pool, probes, np.eye(8)[:5], cfg, trials=1)
    assert e.value.field == "paraphrases"
    with pytest.raises(InvalidParameterError) as e:
        HonestConfig(zeta_reference_dim=0)
    assert e.value.field == "zeta_reference_dim"


@pytest.mark.slow
def test_toy_calibration_at_002s_200_trials():
    """002's full trial count on the null (200) and 20 trials per attack cell (~2-10 min on 2 cores)."""
    res = run_toy_calibration(ToyConfig(), trials=200, attack_trials=20, seed=7)
    g75, g80 = THETA_GRID.index(0.75), THETA_GRID.index(0.80)
    hits80 = int((res.null[:, g80] >= 2).sum())
    # X ~ Bin(200, p), p ∈ [0.0492, 0.0504] (rigorous bracket): P(X = 0) + P(X >= 25) < 1e-4
    assert 1 <= hits80 <= 24
    # FPR(0.75) >= 0.495 (rigorous lower bound); 4 binomial sd below it: false-failure < 1e-4
    assert res.fpr()[g75] >= 0.495 - 4 * math.sqrt(0.25 / 200)
    assert res.theta_star() in (0.80, 0.85)  # false-failure ≈ P(Bin(200, 8.4e-4) >= 11) ≈ 0
    # conservative: FPR(0.80) ≈ 0.049 keeps its upper bound above 5% unless <= 4 hits (P ≈ 0.03), and
    # 0.85's upper bound is <= 5% with <= 4 hits of p = 8.4e-4 (P ≈ 1 - 1e-7): false-failure ≈ 0.03 for
    # "conservative θ* == 0.85", so only the weaker, certain statement is asserted
    assert res.theta_star(conservative=True) in (0.80, 0.85)
    tpr, ex = res.tpr(), res.exact_recovery()
    assert all(v == 1.0 for v in tpr.values())
    assert all(ex[("P-A", k)] == 1.0 for k in (2, 5, 10, 20))
