"""Single-query mechanisms plug into the multi-query algorithms (000 §4), and GNMax voting (RDP).

Expected values: the discrete Gaussian's RDP in closed form (α·Δ²/(2σ²), CKS 2020) and argmax
probabilities computed from the discrete Gaussian pmf by direct summation (independent of the sampler).
"""

import math

import numpy as np
import pytest

from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.mechanisms.noisy_max import gaussian_vote_max, gaussian_vote_max_event
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.rag.common import RagAnswer
from dprag.accounting.rag.mechanism import GaussianVoteRagParams, SingleQueryMechanism, check_mechanism
from dprag.accounting.rag.multi_query import MuRAG, MuRAGAda, NaiveMultiRAG
from dprag.accounting.rag.single_query import PureDpRagParams
from dprag.accounting.rdp import DEFAULT_ORDERS, rdp_curve
from dprag.accounting.stores import MemoryBudgetStore
from dprag.audit.testing.toy import ToyGenerator, ToyRetriever
from dprag.errors import InvalidParameterError, UnsupportedEventError


def corpus(n_relevant=40, n_other=60):
    docs = [f"patient {i} clinic protocol asthma drug ANSWER: zorvatin 5mg" for i in range(n_relevant)]
    return docs + [f"note {i} unrelated garden weather" for i in range(n_other)]


def src(tag):
    return RandomSource.from_seed(b"mechanism-tests", tag.encode())


def test_gnmax_event_is_alpha_over_sigma_squared():
    # one vote moves: two counts change by 1 -> ||Δ||² = 2 -> RDP α·2/(2σ²) = α/σ²
    for sigma in (0.7, 3.0, 12.5):
        orders = np.asarray(DEFAULT_ORDERS, dtype=np.float64)
        got = rdp_curve(gaussian_vote_max_event(sigma), orders)
        np.testing.assert_allclose(got, orders / sigma**2, rtol=1e-12)
    assert isinstance(GaussianVoteRagParams(10, 2.0, 7).cost.count, int)
    np.testing.assert_allclose(rdp_curve(GaussianVoteRagParams(10, 2.0, 7).cost, orders), 7 * orders / 4.0, rtol=1e-12)


def _dgauss_pmf(sigma, lim=80):
    x = np.arange(-lim, lim + 1)
    w = np.exp(-(x.astype(np.float64) ** 2) / (2 * sigma**2))
    return x, w / w.sum()


def test_gnmax_argmax_distribution_matches_the_pmf():
    # histogram (3, 2): token 0 wins iff 3 + X0 >= 2 + X1 (ties -> smaller id), i.e. X1 - X0 <= 1
    sigma = 1.5
    x, p = _dgauss_pmf(sigma)
    diff = np.convolve(p, p[::-1])  # pmf of X1 - X0 on [-2·lim, 2·lim]
    dx = np.arange(-2 * x[-1], 2 * x[-1] + 1)
    p0 = float(diff[dx <= 1].sum())
    n = 20_000
    s = src("gnmax-dist")
    wins = sum(gaussian_vote_max(np.array([3, 2]), sigma, s)[0] == 0 for _ in range(n))
    # binomial sd ≈ 0.0023; 5 sd => false-failure rate < 1e-6 (seeded anyway)
    assert abs(wins / n - p0) < 5 * math.sqrt(p0 * (1 - p0) / n)


def test_gnmax_rejects_bad_input():
    with pytest.raises(InvalidParameterError, match="histogram"):
        gaussian_vote_max(np.array([1.5, 2.0]), 1.0, src("x"))
    with pytest.raises(InvalidParameterError, match="histogram"):
        gaussian_vote_max(np.array([], dtype=np.int64), 1.0, src("x"))
    with pytest.raises(InvalidParameterError, match="sigma"):
        gaussian_vote_max(np.array([1, 2]), 0.0, src("x"))
    with pytest.raises(InvalidParameterError, match="sigma"):
        GaussianVoteRagParams(5, -1.0)


def _rdp_filter(n, cost, M=1):
    return IndividualRenyiFilter(MemoryBudgetStore(n), FilterBudget.for_queries(M, cost, mode="rdp"))


def test_murag_runs_gnmax_in_an_rdp_filter_and_a_pure_filter_refuses_it():
    docs = corpus()
    r, g = ToyRetriever(docs), ToyGenerator()
    rag = GaussianVoteRagParams(m=20, sigma=1.0, max_tokens=4)
    pure = IndividualRenyiFilter(MemoryBudgetStore(len(docs)), FilterBudget.pure(10.0))
    with pytest.raises(UnsupportedEventError):
        MuRAG(r, g, pure, rag, tau=2.5)
    assert pure.remaining(np.arange(len(docs))).min() > 0 and np.all(
        pure.remaining(np.arange(len(docs))) == pure.remaining(np.array([0]))
    )
    flt = _rdp_filter(len(docs), rag.cost, M=1)
    mu = MuRAG(r, g, flt, rag, tau=2.5, source=src("gnmax-murag"))
    a = mu.answer("clinic asthma drug")
    # 20 unanimous voters vs discrete Gaussian noise of σ = 1 over a small vocabulary: the answer is exact
    assert a.text == "zorvatin 5mg"
    assert sorted(a.charged.tolist()) == list(range(40))  # every document above τ, as with Alg. 5
    assert a.private_tokens == len(a.events) == 3  # "zorvatin", "5mg", <eos>: every token is private
    eps, delta = flt.guarantee(1e-5)
    assert delta == 1e-5 and math.isfinite(eps) and eps > 0
    # M = 1: exhausted
    assert mu.answer("clinic asthma drug").charged.size == 0


def test_murag_ada_and_naive_take_any_mechanism():
    docs = corpus()
    r, g = ToyRetriever(docs), ToyGenerator()
    rag = GaussianVoteRagParams(m=10, sigma=1.0, max_tokens=4)
    from dprag.accounting.events import DiscreteLaplaceEvent

    thr = DiscreteLaplaceEvent(scale=1.0, sensitivity=1)
    flt = _rdp_filter(len(docs), (thr, rag.cost))  # two charges per query, each rounded up on its own
    ada = MuRAGAda(r, g, flt, rag, edges=[4.0, 3.0, 2.0, 1.0, 0.0], epsilon_thr=1.0, source=src("ada"))
    assert ada.answer("clinic asthma drug").text == "zorvatin 5mg"
    naive = NaiveMultiRAG(r, g, rag, source=src("naive"))
    assert naive.answer("clinic asthma drug").text == "zorvatin 5mg"


class RecordingMechanism:
    """A third-party mechanism: answers with a fixed text and records what MuRAG gave it and when."""

    def __init__(self, flt):
        self.m, self.flt, self.calls = 5, flt, []

    @property
    def cost(self):
        from dprag.accounting.events import PureDpEvent

        return PureDpEvent(1.0)

    def respond(self, question, doc_ids, retriever, generator, *, source=None, history=()):
        # the charge must already be durable when the mechanism reads the documents (charge, then generate)
        self.calls.append((np.asarray(doc_ids).copy(), self.flt.remaining(np.asarray(doc_ids)[doc_ids >= 0])))
        return RagAnswer(text="ok", cost=self.cost, retrieved=np.asarray(doc_ids)[doc_ids >= 0])


def test_a_third_party_mechanism_plugs_in_and_sees_charged_top_k_padded():
    docs = corpus(3, 20)  # 3 relevant documents, K = 5: two paddings
    r, g = ToyRetriever(docs), ToyGenerator()
    flt = IndividualRenyiFilter(MemoryBudgetStore(len(docs)), FilterBudget.pure(1.0))
    mech = RecordingMechanism(flt)
    assert isinstance(mech, SingleQueryMechanism)
    mu = MuRAG(r, g, flt, mech, tau=2.5, source=src("third"))
    assert mu.answer("clinic asthma drug").text == "ok"
    ((ids, remaining),) = mech.calls
    assert ids.tolist()[:3] == [0, 1, 2] and ids.tolist()[3:] == [-1, -1]
    assert np.all(remaining == 0)  # already charged ε = 1 of the budget 1


def test_check_mechanism_names_the_field():
    with pytest.raises(InvalidParameterError, match="rag"):
        check_mechanism(object())
    with pytest.raises(InvalidParameterError, match="rag"):
        MuRAG(
            ToyRetriever(corpus()),
            ToyGenerator(),
            IndividualRenyiFilter(MemoryBudgetStore(100), FilterBudget.pure(1.0)),
            "not a mechanism",
            tau=1.0,
        )
    assert check_mechanism(PureDpRagParams(10, 1.0, 2)).m == 10
