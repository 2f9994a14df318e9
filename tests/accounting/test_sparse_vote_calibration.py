"""Session calibration of DPSparseVoteRAG (003 Alg. 3): ``calibrate_sparse_vote(ε, δ, discoveries=c, queries=T)``.

Reference: an independent mpmath computation (50 digits) of the two rules the accountant takes the best of —
RDP (the exact RDP of randomized response, which is the worst ε-DP mechanism at every order, summed over the T·c
SVT runs and T·c LimitedDomain releases, converted with Canonne–Kamath–Steinke, at δ − T·c·δ_token) and the exact
optimal composition of the same 2·T·c pure-DP releases (the binomial privacy-loss distribution of as many
randomized responses) with the LimitedDomain δ's folded in as 1 − Π(1 − δ_i)(1 − δ').
"""

from __future__ import annotations

import math

import pytest

from dprag.accounting.mechanisms.sparse_vector import SparseVector
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.rag.single_query import calibrate_sparse_vote, dp_sparse_vote_rag
from dprag.accounting.rdp import DEFAULT_ORDERS
from dprag.audit.testing.toy import ToyGenerator, ToyRetriever
from dprag.errors import InvalidParameterError

mp = pytest.importorskip("mpmath")


def _rr_rdp(e, a):
    """RDP of ε-randomized response at order α: log((sinh(αε) − sinh((α−1)ε))/sinh ε)/(α − 1), and ≤ ε."""
    return min(mp.log((mp.sinh(a * e) - mp.sinh((a - 1) * e)) / mp.sinh(e)) / (a - 1), e)


def _ref_rdp_epsilon(eps_list, counts, conversion_delta):
    best = None
    for a in DEFAULT_ORDERS:
        a = mp.mpf(a)
        rdp = sum(n * _rr_rdp(mp.mpf(e), a) for e, n in zip(eps_list, counts, strict=False))
        conv = rdp + mp.log((a - 1) / a) - (mp.log(conversion_delta) + mp.log(a)) / (a - 1)
        best = conv if best is None or conv < best else best
    return best


def _ref_optimal_epsilon(e0, k, conversion_delta):
    """Smallest ε with E_P[(1 − e^{ε − L})_+] ≤ δ', L the sum of k independent ±ε0 losses, +ε0 w.p.
    e^{ε0}/(1 + e^{ε0}) (exact for k ε0-DP mechanisms, Kairouz–Oh–Viswanath 2015 Thm 3.3)."""
    e0 = mp.mpf(e0)
    p = mp.e**e0 / (1 + mp.e**e0)
    states = [(mp.binomial(k, i) * p**i * (1 - p) ** (k - i), (2 * i - k) * e0) for i in range(k + 1)]

    def delta(eps):
        return mp.fsum(w * (1 - mp.e ** (eps - loss)) for w, loss in states if loss > eps)

    lo, hi = mp.mpf(0), k * e0
    for _ in range(80):
        mid = (lo + hi) / 2
        if delta(mid) > conversion_delta:
            lo = mid
        else:
            hi = mid
    return hi


def _reference(b, delta):
    """Both rules on the 2·T·c releases, all charged at ε_s = SVT's certified ε ≥ ε_token/2 (``sparse_vote_cost``
    charges LimitedDomain at it too)."""
    mp.mp.dps = 50
    k = b.queries * b.discoveries
    eps_s = SparseVector.certified_max_epsilon(b.epsilon_token / 2, 1, 1, redraw_threshold=True)
    assert b.epsilon_token / 2 <= eps_s <= b.epsilon_token / 2 * (1 + 1e-12)  # ~1 ulp of float certification
    rdp = _ref_rdp_epsilon((eps_s,), (2 * k,), mp.mpf(delta) - k * mp.mpf(b.delta_token))  # LD's δ are additive
    # 1 − Π(1 − δ_i)·(1 − δ'(ε)) = δ  ⇔  δ'(ε) = 1 − (1 − δ)/(1 − δ_token)^k
    opt = _ref_optimal_epsilon(eps_s, 2 * k, 1 - (1 - mp.mpf(delta)) / (1 - mp.mpf(b.delta_token)) ** k)
    return float(min(rdp, opt))


@pytest.mark.parametrize(
    "eps,delta,c,t",
    [(2.0, 1e-6, 3, 1), (1.0, 1e-6, 1, 1), (30.0, 1e-5, 2, 6), (10.0, 1e-5, 4, 520), (10.0, 1e-5, 1, 2000)],
)
def test_session_of_t_answers_composes_to_the_target_against_mpmath(eps, delta, c, t):
    """The reference's ε for T answers of c discoveries at the calibrated ε_token is ≤ ε and within 1e-6 of it
    (not wasteful); the δ split is δ_token = δ/(2cT), δ_query = δ/T."""
    b = calibrate_sparse_vote(eps, delta, discoveries=c, queries=t)
    assert b.delta_token == pytest.approx(delta / (2 * c * t)) and b.delta_query == pytest.approx(delta / t)
    ref = _reference(b, delta)
    assert ref <= eps * (1 + 1e-12)
    assert ref >= eps * (1 - 1e-6)


def test_per_answer_budget_gives_exactly_c_discoveries_and_the_answer_charges_its_share():
    """Handed to dp_sparse_vote_rag, (ε_query, δ_query) make c_max = c, so the answer's ex-ante cost is the
    calibrated per-answer cost (a larger c_max would overspend the session)."""
    docs = [f"record {j} topic protocol drug ANSWER: cobalt" for j in range(20)]
    for c in (1, 3, 4):
        b = calibrate_sparse_vote(10.0, 1e-5, discoveries=c, queries=520)
        ans = dp_sparse_vote_rag(
            "which drug protocol for topic",
            ToyRetriever(docs),
            ToyGenerator(),
            m=5,
            k=2,
            epsilon_token=b.epsilon_token,
            delta_token=b.delta_token,
            epsilon_total=b.epsilon_query,
            delta_total=b.delta_query,
            max_tokens=6,
            source=RandomSource.from_seed(b"sparse-vote-calibration"),
        )
        assert ans.cost == b.cost
        assert ans.private_tokens <= c


def test_one_answer_is_at_least_basic_composition():
    """T = 1, c = 3, ε = 2: basic composition certifies c·ε_token (each discovery ε/2 + ε/2), so ε_token ≥ 2/3."""
    assert calibrate_sparse_vote(2.0, 1e-6, discoveries=3).epsilon_token >= 2.0 / 3 * (1 - 1e-9)


def test_session_calibration_beats_basic_composition_shares_tenfold():
    """ε = 10, δ = 1e-5, c = 4, T = 520: (ε/T, δ/T) per answer gives ε_token < 0.005; RDP over the session
    gives > 0.06 (the mpmath reference above certifies the latter)."""
    shares = calibrate_sparse_vote(10.0 / 520, 1e-5 / 520, discoveries=4)
    session = calibrate_sparse_vote(10.0, 1e-5, discoveries=4, queries=520)
    assert shares.epsilon_token < 0.005 < 0.06 < session.epsilon_token
    assert session.epsilon_token > 10 * shares.epsilon_token


def test_bad_input_names_the_field():
    for kw, field in [
        ({"discoveries": 0}, "discoveries"),
        ({"discoveries": 1, "queries": 0}, "queries"),
        ({"discoveries": 2.5}, "discoveries"),
    ]:
        with pytest.raises(InvalidParameterError) as info:
            calibrate_sparse_vote(1.0, 1e-5, **kw)
        assert info.value.field == field
    with pytest.raises(InvalidParameterError) as info:
        calibrate_sparse_vote(1.0, 0.0, discoveries=1)
    assert info.value.field == "delta"
    with pytest.raises(InvalidParameterError) as info:
        calibrate_sparse_vote(1e-300, 1e-5, discoveries=1, queries=10**6)
    assert info.value.field == "epsilon"
    assert math.isfinite(calibrate_sparse_vote(1e-3, 1e-5, discoveries=1).epsilon_token)
