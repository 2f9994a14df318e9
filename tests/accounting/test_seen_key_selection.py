"""The (ε, δ) selection over the voters' own keys (``accounting.mechanisms.seen_key_selection``; issue 13,
spec/accounting/rag.md §5.2), the answer-vote mechanism that uses it, and its δ inside MuRAG / MuRAG-Ada's
pure filter (the individual basic-composition filter, §5.3).

References are independent of the module: the law is rewritten from the definition in mpmath at 60 digits,
and the privacy profile is the exact hockey-stick divergence of that law. Statistical tests are seeded; each
states its false-failure rate under fresh randomness.
"""

import math
from collections import Counter

import mpmath
import numpy as np
import pytest
from _rag_doubles import Docs as _Docs
from _rag_doubles import Scripted as _Scripted
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dprag.accounting.events import ApproxDpEvent, PureDpEvent
from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.mechanisms.seen_key_selection import (
    MIN_DELTA,
    seen_key_probabilities,
    select_seen_key,
    vote_threshold,
)
from dprag.accounting.mechanisms.string_selection import BOTTOM
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.rag.answer_vote import AnswerVoteParams, answer_vote_rag
from dprag.accounting.rag.mechanism import check_mechanism, filter_charge
from dprag.accounting.rag.multi_query import MuRAG, MuRAGAda
from dprag.accounting.stores import MemoryBudgetStore
from dprag.accounting.testing import check_dp, seeded
from dprag.errors import InvalidParameterError, UnsupportedEventError

mpmath.mp.dps = 60
RUN = 1 - mpmath.mpf(2) ** -20  # the module runs at ε·(1 − 2^-20) and adds 2^-30 to ⊥'s log-weight


def reference_law(keys, eps, delta):
    """P(s) ∝ exp(ε_run·h(s)/2), P(⊥) ∝ exp(ε_run/2 + ln(1/δ) + 2^-30), in mpmath, from the definition."""
    e = mpmath.mpf(eps) * RUN
    h = Counter(keys)
    w = {s: mpmath.exp(e * c / 2) for s, c in h.items()}
    w[None] = mpmath.exp(e / 2 - mpmath.log(mpmath.mpf(delta)) + mpmath.mpf(2) ** -30)
    z = mpmath.fsum(w.values())
    return {k: v / z for k, v in w.items()}


def hockey_stick(p, q, eps):
    """δ(ε) = Σ_ω max(0, p(ω) − e^ε q(ω)): the smallest δ for which p ≤ e^ε q + δ on every event."""
    ee = mpmath.exp(mpmath.mpf(eps))
    return mpmath.fsum(max(mpmath.mpf(0), p.get(k, 0) - ee * q.get(k, 0)) for k in set(p) | set(q))


# ------------------------------------------------------------------------------------------------------
# the claim, against an exact reference
# ------------------------------------------------------------------------------------------------------
keys_st = st.lists(st.sampled_from(["a", "b", "c", "dd"]), max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    keys=keys_st,
    old=st.sampled_from(["", "a", "b", "e"]),
    new=st.sampled_from(["", "a", "c", "f"]),
    eps=st.sampled_from([0.5, 1.0, 2.0, 4.0, 10.0]),
    log10_delta=st.integers(-12, -2),
)
def test_exact_privacy_profile_within_the_claim(keys, old, new, eps, log10_delta):
    """For every neighbouring pair (one voter's key moved from ``old`` to ``new``; "" = no key), the exact
    hockey-stick divergence at the claimed ε, both directions, is ≤ the claimed δ (60-digit reference)."""
    delta = 10.0**log10_delta
    if delta > -math.expm1(-eps / 2) / 2:
        with pytest.raises(InvalidParameterError, match="delta"):
            vote_threshold(eps, delta)
        return
    d0 = list(keys) + ([old] if old else [])
    d1 = list(keys) + ([new] if new else [])
    p, q = reference_law(d0, eps, delta), reference_law(d1, eps, delta)
    assert hockey_stick(p, q, eps) <= delta
    assert hockey_stick(q, p, eps) <= delta


def test_the_module_law_matches_the_reference_and_delta_is_nearly_attained():
    """``seen_key_probabilities`` against the 60-digit law (relative 1e-12); and on (a) vs (b) at ε = 10,
    δ = 1e-6 the exact δ(ε) is ≥ 0.99·δ: the bound is tight, not a loose over-estimate."""
    for keys, eps, delta in [(["a"] * 4 + ["b"], 10.0, 1e-6), (["x", "y", "y"], 2.0, 1e-3), ([], 1.0, 1e-5)]:
        got = seen_key_probabilities(keys, eps, delta)
        ref = reference_law(keys, eps, delta)
        assert set(got) == set(ref)
        for k in ref:
            assert abs(got[k] - float(ref[k])) <= 1e-12 * float(ref[k]) + 1e-300
    p, q = reference_law(["b"], 10.0, 1e-6), reference_law(["a"], 10.0, 1e-6)
    assert 0.99e-6 <= hockey_stick(p, q, 10.0) <= 1e-6


def test_vote_threshold_and_parameter_errors():
    assert vote_threshold(10.0, 1e-6) == pytest.approx(1 + 2 * math.log(1e6) / 10)
    src = RandomSource.from_seed(b"errors")
    for kw, field in [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": 1e-4}, "epsilon"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"delta": MIN_DELTA / 2}, "delta"),
        ({"epsilon": 0.1, "delta": 0.1}, "delta"),
    ]:
        args = {"epsilon": 2.0, "delta": 1e-3, **kw}
        with pytest.raises(InvalidParameterError, match=field):
            select_seen_key(["a"], args["epsilon"], args["delta"], src)
    with pytest.raises(InvalidParameterError, match="keys"):
        select_seen_key(["Upper"], 2.0, 1e-3, src)
    with pytest.raises(InvalidParameterError, match="epsilon"):
        select_seen_key(["a"] * 121, 10.0, 1e-3, src)  # ε·h/2 = 605 > 600


@pytest.mark.parametrize(
    "keys,eps,delta",
    [(["ab"] * 5 + ["cd"] * 2, 4.0, 1e-3), (["x", "x", "y"], 2.0, 0.05), (["abc"] * 4 + ["d"] * 3, 10.0, 1e-6)],
)
def test_sampler_follows_its_law(keys, eps, delta):
    """χ² goodness of fit of 20 000 seeded draws against the reference law; p < 1e-4 fails (false-failure
    rate 1e-4 per case under fresh randomness). Nothing outside the seen keys and ⊥ is ever drawn."""
    src = RandomSource.from_seed(b"seen-key-law", repr((keys, eps, delta)).encode())
    ref = {k: float(v) for k, v in reference_law(keys, eps, delta).items()}
    n = 20_000
    counts = Counter()
    for _ in range(n):
        out, ev = select_seen_key(keys, eps, delta, src)
        assert out is BOTTOM or out in ref
        counts[out] += 1
    assert ev == ApproxDpEvent(eps, delta)
    cats = sorted(ref, key=repr)
    probs = np.array([ref[c] for c in cats])
    obs = np.array([counts[c] for c in cats], dtype=float)
    mask = probs * n >= 5
    assert obs[~mask].sum() <= 10
    exp = probs[mask] / probs[mask].sum() * obs[mask].sum()
    assert stats.chisquare(obs[mask], exp).pvalue > 1e-4, (counts, ref)


# ------------------------------------------------------------------------------------------------------
# the empirical DP checker at the claimed (ε, δ), and two broken variants it catches
# ------------------------------------------------------------------------------------------------------
EPS, DELTA = 2.0, 1e-6  # T = 1 + 2·ln(10^6)/2 ≈ 14.8 votes
SPLIT0 = ("a",) * 14 + ("b",) * 16  # one voter moves from a to b: a common key loses a vote, b gains one
SPLIT1 = ("a",) * 13 + ("b",) * 17
NEW0 = ("a",) * 16  # an abstaining voter now votes "b": b is unseen on one side (the δ event)
NEW1 = ("a",) * 16 + ("b",)


def _correct(keys, source):
    return select_seen_key(list(keys), EPS, DELTA, source)[0]


def _threshold_without_noise(keys, source):
    """Broken: the plurality key when it reaches ⌈T⌉ votes, else ⊥."""
    c = Counter(keys).most_common(1)
    return c[0][0] if c and c[0][1] >= math.ceil(vote_threshold(EPS, DELTA)) else BOTTOM


def _half_noise(keys, source):
    """Broken: half the noise — weights exp(ε·h), ⊥ at exp(ε·T) (the exponential mechanism at 2ε)."""
    t = vote_threshold(EPS, DELTA)
    h = Counter(keys)
    seen = sorted(h)
    from dprag.accounting.mechanisms.string_selection import exact_index

    logs = [EPS * t] + [EPS * h[s] for s in seen]
    top = max(logs)
    i = exact_index([math.exp(x - top) for x in logs], source)
    return BOTTOM if i == 0 else seen[i - 1]


@pytest.mark.slow
@pytest.mark.parametrize("d0,d1", [(SPLIT0, SPLIT1), (NEW0, NEW1)], ids=["split", "new-key"])
def test_checker_passes_the_mechanism_at_its_claimed_epsilon_delta(d0, d1):
    """A violation is reported with probability ≤ α = 1e-6 if the mechanism is (2, 1e-6)-DP on the pair."""
    rep = check_dp(
        _correct,
        d0,
        d1,
        epsilon=EPS,
        delta=DELTA,
        trials=100_000,
        selection_trials=20_000,
        source_factory=seeded(b"seen-key-dp"),
        alpha=1e-6,
    )
    assert rep.passed, rep.summary()


def test_checker_catches_a_threshold_without_noise():
    """15 votes for a vs 14 (one voter abstains): the noiseless threshold ⌈T⌉ = 15 releases a always on one
    side and ⊥ always on the other — infinite loss (deterministic outputs: false-failure rate 0)."""
    d0, d1 = ("a",) * 15, ("a",) * 14
    rep = check_dp(
        _threshold_without_noise,
        d0,
        d1,
        epsilon=EPS,
        delta=DELTA,
        trials=20_000,
        selection_trials=1000,
        source_factory=seeded(b"seen-broken-threshold"),
        alpha=1e-6,
    )
    assert not rep.passed and rep.epsilon_lower_bound > EPS


def test_checker_catches_half_noise():
    """On SPLIT: P0(a) ≈ 0.0166 vs P1(a) ≈ 3.3e-4 under half noise (loss ≈ e^3.9 > e^2; computed from the
    law), a violation of about 0.014 ≫ δ. With 60 000 trials the expected counts are ~1,000 vs ~20; the
    Clopper–Pearson bounds at α = 1e-6 separate them unless the counts deviate by > 4 standard deviations
    (false-failure rate < 1e-4)."""
    rep = check_dp(
        _half_noise,
        SPLIT0,
        SPLIT1,
        epsilon=EPS,
        delta=DELTA,
        trials=60_000,
        selection_trials=10_000,
        source_factory=seeded(b"seen-broken-half"),
        alpha=1e-6,
    )
    assert not rep.passed and rep.epsilon_lower_bound > EPS, rep.summary()


# ------------------------------------------------------------------------------------------------------
# answer-vote with the seen selection, and its δ in MuRAG / MuRAG-Ada's pure filter
# ------------------------------------------------------------------------------------------------------
def test_answer_vote_params_with_the_seen_selection():
    p = AnswerVoteParams(8, 10.0, selection="seen", delta=1e-6)
    assert p.cost == ApproxDpEvent(10.0, 1e-6)
    assert p.vote_threshold == pytest.approx(1 + 2 * math.log(1e6) / 10)
    assert filter_charge(p.cost) == (PureDpEvent(10.0), 1e-6)
    assert AnswerVoteParams(8, 10.0).vote_threshold is None
    with pytest.raises(InvalidParameterError, match="selection"):
        AnswerVoteParams(8, 10.0, selection="best")
    with pytest.raises(InvalidParameterError, match="delta"):
        AnswerVoteParams(8, 10.0, selection="seen")  # δ = 0 is not an (ε, δ) selection
    with pytest.raises(InvalidParameterError, match="delta"):
        AnswerVoteParams(8, 10.0, delta=1e-6)  # the universal selection is pure


def test_seen_selection_releases_the_plurality_above_threshold():
    """6 of 8 voters read "zorvex ..." (T ≈ 3.76 votes at ε = 10, δ = 1e-6): the release is "zorvex" with
    probability 1 − O(e^-10) (seeded), and with 2 readers (below T) it is the fallback with probability
    ≥ 0.99 (one seeded draw each; false-failure rate < 1e-2 for the second)."""
    r = _Docs(["zorvex is the drug"] * 6 + ["other"] * 2, np.zeros(8))
    p = AnswerVoteParams(8, 10.0, selection="seen", delta=1e-6, abstain_empty=True)
    a = answer_vote_rag("Which drug?", np.arange(8), r, _Scripted(), p, source=RandomSource.from_seed(b"s1"))
    assert a.text == "zorvex" and not a.info["fallback"] and a.events == [ApproxDpEvent(10.0, 1e-6)]
    ids = np.array([0, 1, -1, -1, -1, -1, -1, -1])
    b = answer_vote_rag("Which drug?", ids, r, _Scripted(), p, source=RandomSource.from_seed(b"s2"))
    assert b.info["fallback"] and b.text == "nothing"


def test_murag_counts_epsilon_in_the_pure_filter_and_delta_per_charge():
    """MuRAG with an (ε, δ) cost: the pure filter is charged ε only (M = 2 queries per document, then
    refused), and the guarantee is (M·ε, M·δ) add/remove, (2Mε, Mδ(1 + e^{Mε})) replace-one; an RDP filter
    refuses the cost before anything is charged; MuRAG-Ada adds the threshold charge."""
    n = 6
    r = _Docs([f"w{i} x" for i in range(n)], [90, 80, 70, 60, 10, 5])
    p = AnswerVoteParams(2, 3.0, selection="seen", delta=1e-5, max_tokens=2)
    ev, d = filter_charge(p.cost)
    flt = IndividualRenyiFilter(MemoryBudgetStore(n), FilterBudget.for_queries(2, ev, mode="pure"))
    mu = MuRAG(r, _Scripted(), flt, p, tau=50.0, source=RandomSource.from_seed(b"mu"))
    for _ in range(2):
        assert sorted(mu.answer("q").charged.tolist()) == [0, 1, 2, 3]
    assert mu.answer("q").charged.size == 0
    assert flt.spent(np.arange(n)).tolist() == pytest.approx([6.0] * 4 + [0.0] * 2)
    eps, delta = mu.guarantee()
    assert eps >= 6.0 and eps == pytest.approx(6.0) and delta >= 2e-5 and delta == pytest.approx(2e-5)
    eps2, delta2 = mu.guarantee(replace_one=True)
    assert eps2 == 2 * eps and delta2 >= 2e-5 * (1 + math.exp(6.0)) * (1 - 1e-12)
    rdp = IndividualRenyiFilter(MemoryBudgetStore(n), FilterBudget.for_queries(2, PureDpEvent(3.0)))
    with pytest.raises(UnsupportedEventError):
        check_mechanism(p, rdp)
    with pytest.raises(UnsupportedEventError):
        MuRAG(r, _Scripted(), rdp, p, tau=50.0)
    assert rdp.spent(np.arange(n)).sum() == 0
    from dprag.accounting.events import DiscreteLaplaceEvent

    thr = DiscreteLaplaceEvent(scale=1.0, sensitivity=1)
    flt2 = IndividualRenyiFilter(MemoryBudgetStore(n), FilterBudget.for_queries(1, (thr, ev), mode="pure"))
    ada = MuRAGAda(
        r, _Scripted(), flt2, p, edges=[100.0, 60.0, 0.0], epsilon_thr=1.0, source=RandomSource.from_seed(b"ada")
    )
    ada.answer("q")
    e3, d3 = ada.guarantee()
    assert e3 == pytest.approx(4.0) and d3 == pytest.approx(1e-5)  # one RAG charge per document fits


def test_murag_ada_filter_budget_admits_exactly_m_queries_of_both_charges():
    """``MuRAGAda.filter_budget(M, cost, ε_thr)`` with the seen selection's (ε, δ) cost: the pure filter counts
    ε_thr + ε = 1 + 3 per touched document, so a document is served by exactly M = 2 queries and refused by the
    third; the guarantee is (M·(ε_thr + ε), M·δ) = (8, 2e-5) add/remove."""
    n = 6
    r = _Docs([f"w{i} x" for i in range(n)], [90, 80, 70, 60, 10, 5])
    p = AnswerVoteParams(2, 3.0, selection="seen", delta=1e-5, max_tokens=2)
    flt = IndividualRenyiFilter(MemoryBudgetStore(n), MuRAGAda.filter_budget(2, p.cost, 1.0))
    ada = MuRAGAda(
        r, _Scripted(), flt, p, edges=[100.0, 60.0, 0.0], epsilon_thr=1.0, source=RandomSource.from_seed(b"ada-budget")
    )
    served = Counter()
    for _ in range(5):
        served.update(ada.answer("q").charged.tolist())
    assert served[0] == served[1] == served[2] == served[3] == 2  # the top bin is always released
    assert max(served.values()) == 2
    assert flt.spent(np.arange(4)).tolist() == pytest.approx([8.0] * 4)
    eps, delta = ada.guarantee()
    assert eps == pytest.approx(8.0) and eps >= 8.0 and delta == pytest.approx(2e-5) and delta >= 2e-5
    with pytest.raises(InvalidParameterError, match="epsilon_thr"):
        MuRAGAda.filter_budget(2, p.cost, 0.0)
