"""DP-RAG algorithms (accounting/rag) on the toy retriever/generator: behaviour, charging and accounting.

Seeded RandomSources make every run deterministic; where an outcome is random in principle, the
parameters make the other outcome astronomically unlikely (each case states the probability).
"""

import math

import numpy as np
import pytest

from dprag.accounting.composition import PureDpAccountant
from dprag.accounting.events import PureDpEvent
from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.rag.common import random_partition, top_k_padded
from dprag.accounting.rag.multi_query import MuRAG, MuRAGAda, NaiveMultiRAG, SubsamplingMultiRAG
from dprag.accounting.rag.single_query import (
    PureDpRagParams,
    dp_sparse_vote_rag,
    dp_vote_rag,
    non_private_rag,
    non_rag,
    pure_dp_rag,
    vote_rag,
)
from dprag.accounting.stores import MemoryBudgetStore
from dprag.audit.testing.toy import ToyGenerator, ToyRetriever
from dprag.errors import InvalidParameterError


def corpus(n_relevant=40, n_other=60):
    docs = [f"patient {i} clinic protocol asthma drug ANSWER: zorvatin 5mg" for i in range(n_relevant)]
    docs += [f"note {i} unrelated garden weather" for i in range(n_other)]
    return docs


def src(tag="t"):
    return RandomSource.from_seed(b"rag-tests", tag.encode())


# -- building blocks -------------------------------------------------------------------------------------
def test_top_k_padded_orders_and_pads():
    ids = np.array([5, 2, 9])
    scores = np.array([0.1, 0.9, 0.5])
    assert list(top_k_padded(ids, scores, 2)) == [2, 9]
    assert list(top_k_padded(ids, scores, 5)) == [2, 9, 5, -1, -1]
    # ties broken by the smaller id
    assert list(top_k_padded(np.array([7, 3]), np.array([1.0, 1.0]), 1)) == [3]


def test_random_partition_is_a_partition_and_uniform():
    # Each of the 6 ids lands in part 0 with probability 1/3; over 3000 seeded draws the count for id 0 is
    # Binomial(3000, 1/3): |x - 1000| > 130 has probability < 1e-4.
    s = src("partition")
    hits = 0
    for _ in range(3000):
        parts = random_partition(np.arange(6), 3, s)
        assert sorted(np.concatenate(parts).tolist()) == list(range(6))
        assert all(len(p) == 2 for p in parts)
        hits += 0 in parts[0]
    assert abs(hits - 1000) < 130


# -- single query --------------------------------------------------------------------------------------
def test_non_rag_and_non_private_rag():
    r, g = ToyRetriever(corpus()), ToyGenerator()
    assert non_rag("asthma drug?", g, max_tokens=8).text == "unknown"
    ans = non_private_rag("asthma drug?", r, g, k=3, max_tokens=8)
    assert ans.text == "zorvatin 5mg" and ans.info["private"] is False


def test_vote_rag_majority():
    r, g = ToyRetriever(corpus()), ToyGenerator()
    assert vote_rag("clinic asthma drug", r, g, m=10, k=2, max_tokens=8, source=src()).text == "zorvatin 5mg"


def test_dp_sparse_vote_rag_answers_and_spends_only_on_discoveries():
    r, g = ToyRetriever(corpus()), ToyGenerator()
    ans = dp_sparse_vote_rag(
        "clinic asthma drug",
        r,
        g,
        m=20,
        k=1,
        epsilon_token=8.0,
        delta_token=1e-6,
        epsilon_total=40.0,
        delta_total=1e-4,
        max_tokens=8,
        source=src("svr"),
    )
    # All 20 voters say "zorvatin" while the non-RAG lane says "unknown": a_t = 0 for that token, far below
    # τ = 10 (noise scale 4/ε_Lap = 1); LimitedDomain with ε = 4 picks the 20-vote token unless ⊥ beats it
    # (probability < e^-30).
    assert ans.text.startswith("zorvatin")
    assert 1 <= ans.private_tokens <= ans.info["c_max"]
    assert ans.info["epsilon"] <= 40.0
    assert len(ans.charged) == 20


def _sparse_after_c_max(**kw):
    """dp_sparse_vote_rag run past its c_max-th discovery; (answer, exception or None)."""
    docs = [f"patient {i} clinic asthma drug ANSWER: take zorvatin 5mg daily" for i in range(40)]
    r, g = ToyRetriever(docs), ToyGenerator()
    try:
        return dp_sparse_vote_rag(
            "clinic asthma drug",
            r,
            g,
            m=20,
            k=1,
            epsilon_token=40.0,
            delta_token=1e-6,
            epsilon_total=80.0,
            delta_total=1e-5,
            max_tokens=8,
            source=src("svr-cmax"),
            **kw,
        ), None
    except Exception as e:  # noqa: BLE001 - issue 10 item 6: the c_max path raised NameError
        return None, e


def test_dp_sparse_vote_rag_stops_after_c_max_discoveries():
    # Issue 10 item 6: once the c_max discoveries were spent the rule read an undefined ``params`` (NameError).
    # Every token is a discovery here (all 20 voters disagree with the non-RAG lane: a_t = 0, τ = 10, Lap scale
    # 4/ε_Lap = 0.2; a false "no discovery" has probability < e^-50), and LimitedDomain(ε = 20) releases the
    # 20-vote token (⊥ wins with probability < e^-200). So 003 Alg. 3 releases exactly c_max = 2 tokens and stops.
    ans, err = _sparse_after_c_max()
    assert err is None, f"dp_sparse_vote_rag raised {err!r} after c_max discoveries"
    assert ans.info["c_max"] == 2
    assert ans.text == "take zorvatin"
    assert ans.private_tokens == 2 and ans.info["stop"] == "c_max"
    assert ans.info["epsilon"] <= 80.0


def test_dp_sparse_vote_rag_public_completion_after_c_max():
    # With public completion the non-RAG lane's tokens follow (the toy non-RAG lane says <eos> after 2 tokens).
    ans, err = _sparse_after_c_max(public_completion=True)
    assert err is None, f"dp_sparse_vote_rag raised {err!r} after c_max discoveries"
    assert ans.text == "take zorvatin" and ans.private_tokens == 2 and ans.info["stop"] == "eos"


def test_dp_sparse_vote_rag_reports_a_bottom_halt():
    # The clinic cell's setting (m = 20, ε_token/2 = 0.025, δ_token = 2.5e-8): LimitedDomain's threshold is ~1478
    # votes > m, so the first discovery is ⊥ with probability 1 and the answer is empty: 0/100, no crash.
    r, g = ToyRetriever(corpus()), ToyGenerator()
    ans = dp_sparse_vote_rag(
        "clinic asthma drug",
        r,
        g,
        m=20,
        k=1,
        epsilon_token=0.05,
        delta_token=2.5e-8,
        epsilon_total=0.1,
        delta_total=1e-7,
        max_tokens=8,
        source=src("svr-bottom"),
    )
    assert ans.text == "" and ans.private_tokens == 1 and ans.info["stop"] == "bottom"


def test_dp_vote_rag_token_budget_from_composition():
    r, g = ToyRetriever(corpus()), ToyGenerator()
    ans = dp_vote_rag(
        "clinic asthma drug",
        r,
        g,
        m=20,
        k=1,
        epsilon_token=4.0,
        delta_token=1e-6,
        epsilon_total=12.0,
        delta_total=1e-5,
        max_tokens=20,
        source=src("dv"),
    )
    # basic composition alone allows 3 tokens; the certified accountant may allow more but never breaks the total
    assert ans.info["t_max"] >= 3
    assert ans.info["epsilon"] <= 12.0 + 1e-12
    assert len(ans.events) <= ans.info["t_max"]


def test_pure_dp_rag_cost_is_pure_and_bounded():
    r, g = ToyRetriever(corpus()), ToyGenerator()
    params = PureDpRagParams.for_budget(20, 4.0, 20.0)
    eps = PureDpAccountant().compose(params.cost).epsilon
    assert eps <= 20.0
    # one more private token would exceed ε_RAG
    over = PureDpRagParams(20, 4.0, params.max_private_tokens + 1)
    assert PureDpAccountant().compose(over.cost).epsilon > 20.0
    # 20 votes, ε_Expo = 2: the voted token has weight e^20 against 511 others of weight <= 1
    ans = pure_dp_rag("clinic asthma drug", np.arange(20), r, g, params, source=src("p"))
    assert ans.text.startswith("zorvatin")


def test_pure_dp_rag_public_completion_is_free_post_processing():
    # voters say "zorvatin 5mg"; the no-context lane says "guess 5mg". c = 1: the first token is a discovery
    # (0 votes for "guess"), after which 000 Alg. 5 returns "zorvatin". With public completion the non-RAG
    # lane, now conditioned on the released "zorvatin", continues with "5mg" <eos>, at no extra cost.
    r, g = ToyRetriever(corpus()), ToyGenerator(default="guess 5mg")
    base = PureDpRagParams(20, 40.0, 1, max_tokens=8)
    done = PureDpRagParams(20, 40.0, 1, max_tokens=8, public_completion=True)
    a = pure_dp_rag("clinic asthma drug", np.arange(20), r, g, base, source=src("pc"))
    b = pure_dp_rag("clinic asthma drug", np.arange(20), r, g, done, source=src("pc"))
    assert a.text == "zorvatin" and b.text == "zorvatin 5mg"
    assert a.private_tokens == b.private_tokens == 1 and len(a.events) == len(b.events) == 2
    assert (
        base.cost == done.cost
        and PureDpAccountant().compose(b.spent).epsilon == PureDpAccountant().compose(a.spent).epsilon
    )


def test_pure_dp_rag_non_rag_prior_releases_plausible_tokens_on_split_votes():
    # 20 voters split 7/7/6 over three answers; the no-context lane says "guess" (0 votes) -> discovery.
    # Uniform base (000 Alg. 5), ε_Expo = 0.2: the 509 unvoted vocabulary tokens dominate (junk).
    # Non-RAG prior: the toy no-context lane puts weight e^10 on "guess" against 1 for each other token, so the
    # release is "guess" with probability ≈ e^10/(e^10 + 3·e^0.7 + 508) ≈ 0.97. Expected laws are computed
    # here in closed form; 300 seeded runs each, 6-sd margins (false-failure rate < 1e-8).
    docs = (
        [f"r{i} clinic asthma drug ANSWER: alpha" for i in range(7)]
        + [f"s{i} clinic asthma drug ANSWER: bravo" for i in range(7)]
        + [f"t{i} clinic asthma drug ANSWER: cobalt" for i in range(6)]
    )
    r = ToyRetriever(docs)
    firsts = {}
    for prior in ("uniform", "non-rag"):
        g = ToyGenerator(default="guess", vocab_size=512)
        p = PureDpRagParams(20, 0.4, 1, max_tokens=2, em_prior=prior)
        s = src(f"prior-{prior}")
        answers = [pure_dp_rag("clinic asthma drug", np.arange(20), r, g, p, source=s) for _ in range(300)]
        # only the answers whose first token was a discovery (the SVT noise at ε_Lap = 0.2 is wide)
        firsts[prior] = [a.text for a in answers if a.private_tokens == 1]
        assert len(firsts[prior]) >= 100
    n_u, n_g = len(firsts["uniform"]), len(firsts["non-rag"])
    p_named_uniform = (2 * math.exp(0.1 * 7) + math.exp(0.1 * 6) + 1) / (2 * math.exp(0.7) + math.exp(0.6) + 509)
    frac_u = np.mean([t in ("alpha", "bravo", "cobalt", "guess") for t in firsts["uniform"]])
    assert frac_u <= p_named_uniform + 6 * math.sqrt(p_named_uniform / n_u)
    p_guess = math.exp(10) / (math.exp(10) + 2 * math.exp(0.7) + math.exp(0.6) + 508)
    frac_g = np.mean([t == "guess" for t in firsts["non-rag"]])
    assert frac_g >= p_guess - 6 * math.sqrt(p_guess * (1 - p_guess) / n_g) - 0.02
    with pytest.raises(InvalidParameterError, match="em_prior"):
        PureDpRagParams(20, 0.4, 1, em_prior="lm")


def test_single_query_bad_inputs():
    r, g = ToyRetriever(corpus(5, 5)), ToyGenerator()
    with pytest.raises(InvalidParameterError, match="k"):
        vote_rag("q", r, g, m=10, k=2, max_tokens=4)  # 20 > corpus of 10
    with pytest.raises(InvalidParameterError, match="retriever"):
        non_private_rag("q", ToyRetriever([]), g, k=1, max_tokens=4)
    with pytest.raises(InvalidParameterError, match="epsilon_token"):
        dp_sparse_vote_rag(
            "q",
            r,
            g,
            m=2,
            k=1,
            epsilon_token=float("nan"),
            delta_token=1e-6,
            epsilon_total=1,
            delta_total=1e-5,
            max_tokens=4,
        )
    with pytest.raises(InvalidParameterError, match="doc_ids"):
        pure_dp_rag("q", np.arange(3), r, g, PureDpRagParams(2, 1.0, 1))


# -- multi query ---------------------------------------------------------------------------------------
def make_filter(n, per_query, M=1, mode="pure"):
    return IndividualRenyiFilter(MemoryBudgetStore(n), FilterBudget.for_queries(M, per_query, mode=mode))


@pytest.mark.parametrize("mode", ["pure", "rdp"])
def test_murag_charges_every_document_above_threshold(mode):
    docs = corpus(40, 60)
    r, g = ToyRetriever(docs), ToyGenerator()
    rag = PureDpRagParams.for_budget(20, 4.0, 20.0)
    flt = make_filter(len(docs), rag.cost, M=1, mode=mode)
    mu = MuRAG(r, g, flt, rag, tau=2.5, source=src("mu"))
    a1 = mu.answer("clinic asthma drug")
    # 40 documents score 3 > τ: all are charged (not just the 20 used), the other 60 are untouched
    assert sorted(a1.charged.tolist()) == list(range(40))
    assert np.all(flt.remaining(np.arange(40, 100)) > 0)
    assert a1.text.startswith("zorvatin")
    # M = 1: the second identical query finds every relevant document exhausted and answers without them
    a2 = mu.answer("clinic asthma drug")
    assert a2.charged.size == 0 and a2.text == "unknown"


def test_murag_filter_guarantee_is_M_times_query_cost():
    rag = PureDpRagParams.for_budget(20, 4.0, 8.0)
    flt = make_filter(10, rag.cost, M=3)
    eps, delta = flt.guarantee()
    assert delta == 0 and math.isclose(eps, 3 * PureDpAccountant().compose(rag.cost).epsilon, rel_tol=1e-9)


def test_murag_ada_charges_threshold_to_released_bins_only():
    docs = corpus(40, 60)
    r, g = ToyRetriever(docs), ToyGenerator()
    rag = PureDpRagParams.for_budget(20, 4.0, 12.0)
    eps_thr = 1.0
    per_query = PureDpEvent(eps_thr + PureDpAccountant().compose(rag.cost).epsilon)
    flt = make_filter(len(docs), per_query, M=1)
    # bins over the toy score scale (0..3 words): [3, 4], [2, 3), [1, 2), [0, 1)
    ada = MuRAGAda(r, g, flt, rag, edges=[4.0, 3.0, 2.0, 1.0, 0.0], epsilon_thr=eps_thr, source=src("ada"))
    ans = ada.answer("clinic asthma drug")
    # bin 0 holds the 40 relevant docs: its noisy count exceeds K = 20 unless the discrete Laplace noise
    # (scale 1) is below -20, probability < e^-20; so exactly that bin is released and charged.
    assert ans.info["bins_released"] == 1
    assert sorted(ans.charged.tolist()) == list(range(40))
    assert np.all(flt.spent(np.arange(40, 100)) == 0)
    assert ans.text.startswith("zorvatin")


def test_naive_multi_rag_composes_per_query_costs():
    r, g = ToyRetriever(corpus()), ToyGenerator()
    naive = NaiveMultiRAG.for_total(r, g, m=20, epsilon_token=4.0, epsilon_total=60.0, queries=3, source=src("n"))
    for _ in range(3):
        naive.answer("clinic asthma drug")
    eps, _ = naive.guarantee()
    assert eps <= 60.0
    assert math.isclose(eps, 3 * PureDpAccountant().compose(naive.rag.cost).epsilon)


def test_subsampling_multi_rag_fits_total():
    r, g = ToyRetriever(corpus()), ToyGenerator()
    sub = SubsamplingMultiRAG.for_total(
        r, g, m=10, epsilon_token=2.0, epsilon_total=10.0, delta=1e-5, queries=20, probability=0.1, source=src("s")
    )
    sub.answer("clinic asthma drug")
    assert SubsamplingMultiRAG.total_epsilon(sub.rag.cost, 0.1, 20, 1e-5) <= 10.0
    # amplification really helps: without subsampling the same per-query cost over 20 queries costs more
    assert PureDpAccountant().compose(sub.rag.cost).epsilon * 20 > 10.0


# -- DP-KSA and answer history -------------------------------------------------------------------------
def test_ksa_and_dp_ksa_release_the_shared_keyword():
    from dprag.accounting.rag.ksa import dp_ksa, ksa
    from dprag.accounting.rdp import epsilon_of

    r, g = ToyRetriever(corpus(40, 60)), ToyGenerator()
    k = ksa("clinic asthma drug", r, g, n_docs=30, k=2)
    assert set(g.decode(list(k.info["keywords"])).split()) == {"zorvatin", "5mg"}
    # 30 responses all contain both tokens, every other count is 0: the gap at k = 2 is 30, far above PTR's
    # threshold, so the release fails only if the noise exceeds ~28 noise-standard-deviations (< 1e-100).
    ans = dp_ksa("clinic asthma drug", r, g, n_docs=30, epsilon=4.0, delta=1e-5, source=src("ksa"), k_max=10)
    assert ans.info["released"] and ans.text.startswith("zorvatin")
    eps, delta = epsilon_of(ans.cost, 1e-5 / 2)
    assert eps <= 4.0 + 1e-9 and delta <= 1e-5 + 1e-18


def test_answer_history_reuse_is_scoped_and_free():
    from dprag.accounting.rag.history import AnswerHistory

    r, g = ToyRetriever(corpus(40, 60)), ToyGenerator()
    rag = PureDpRagParams.for_budget(20, 4.0, 20.0)
    flt = make_filter(100, rag.cost, M=1)
    mu = MuRAG(r, g, flt, rag, tau=2.5, source=src("hist"))
    hist = AnswerHistory()
    alice, bob = hist.scope("alice"), hist.scope("bob")
    first = mu.answer("clinic asthma drug")
    hist.record(alice, "clinic asthma drug", first.text)
    spent = flt.spent(np.arange(100)).copy()
    # the documents are exhausted (M = 1); alice's history still answers her follow-up, bob's does not
    a2 = mu.answer("which asthma drug at the clinic", history=hist.relevant(alice, "which asthma drug at the clinic"))
    b2 = mu.answer("which asthma drug at the clinic", history=hist.relevant(bob, "which asthma drug at the clinic"))
    assert a2.text.startswith("zorvatin") and b2.text == "unknown"
    assert np.array_equal(flt.spent(np.arange(100)), spent)  # reuse charged nothing
    assert hist.scope("alice", "clinic", tenant_opt_in=True) == "tenant:clinic"


def test_answer_history_ignores_template_words():
    from dprag.accounting.rag.history import AnswerHistory

    h = AnswerHistory(max_pairs=1)
    s = h.scope("alice")
    for cond, drug in [("asthma", "zorvatin"), ("lyme", "fomnivir"), ("gout", "kelbrax"), ("flu", "tamiqel")]:
        h.record(s, f"what medication does the clinic protocol start patients with {cond} on", drug)
    # shares only template words with every recorded question: nothing is reused
    assert h.relevant(s, "what medication does the clinic protocol start patients with measles on") == ()
    # shares the entity: the right answer is reused
    got = h.relevant(s, "what dose of medication for lyme patients")
    assert got and got[0][1] == "fomnivir"
