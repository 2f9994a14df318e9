"""Multi-query DP-RAG: MuRAG, MuRAG-Ada, Naive-Multi-RAG and Subsampling-Multi-RAG.

Sources: 000 Algorithms 1, 2, 3, 4 and Lemmas 1–2 (Appendix C); 001 Algorithms 1, 2, 8, 9.

MuRAG / MuRAG-Ada give every document its own budget in an individual Rényi filter (Feldman & Zrnic 2021)
and charge a document only for queries that *touch* it: every document that passes the relevance threshold
and can still afford the cost is charged — all of them, not only the top-K that reach the prompt (the
seeds' README trap: 000/001 charge every document above the threshold). The charge is made, atomically and
durably, *before* anything that depends on it is generated. A document that cannot afford the cost is
left out of the query (the filter's stopping rule), which is what makes the composition valid.

The single-query mechanism (``rag``) is any ``mechanism.SingleQueryMechanism``: pure-DP or RDP (the filter
refuses (ε, δ)-only costs). The default is 000 Algorithm 5 (``PureDpRagParams``), as in the papers; GNMax
voting (``GaussianVoteRagParams``, RDP) plugs in with an RDP filter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol, TypedDict, Unpack

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

from ..composition import MixedAccountant, PureDpAccountant
from ..errors import check_delta, check_epsilon, check_positive_int
from ..events import ComposedEvent, PoissonSampledEvent, PrivacyEvent, SelfComposedEvent
from ..filters import FilterBudget, IndividualRenyiFilter
from ..mechanisms.prefix_sums import assign_bins, bin_counts, noisy_prefix_sums
from ..mechanisms.subsampling import poisson_subsample
from ..noise.source import RandomSource
from ..protocols import Generator, Retriever
from ..rounding import sum_products_up, up
from .common import RagAnswer, top_k_padded
from .mechanism import SingleQueryMechanism, check_mechanism, filter_charge, max_charges
from .single_query import PureDpRagOptions, PureDpRagParams


@dataclass(frozen=True)
class RetrievalParams:
    """``docs_per_voter``: documents each of the m voters reads; Top-K uses K = m · docs_per_voter."""

    docs_per_voter: int = 1

    def __post_init__(self) -> None:
        check_positive_int("docs_per_voter", self.docs_per_voter)


class _RunOptions(TypedDict, total=False):
    """Keyword options of the multi-query constructors that ``for_total`` passes on."""

    retrieval: RetrievalParams
    source: RandomSource | None


class _NaiveOptions(_RunOptions, total=False):
    rag_options: PureDpRagOptions


class _FilteredRAG(Protocol):
    """What ``MuRAG.respond`` / ``MuRAG.guarantee`` read (MuRAG-Ada shares both methods)."""

    retriever: Retriever
    generator: Generator
    filter: IndividualRenyiFilter
    rag: SingleQueryMechanism
    source: RandomSource
    delta_per_charge: float
    _charge: PrivacyEvent


@dataclass
class Selection:
    """What MuRAG / MuRAG-Ada decided and charged for one query before any generation.

    ``top``: the K document ids for the prompt (-1 = empty padding); ``charges``: (cost event, ids) in the
    order they were charged; ``events``: events released by the selection itself (MuRAG-Ada's prefix sums).
    """

    top: npt.NDArray[np.int64]
    charges: list[tuple[PrivacyEvent, npt.NDArray[np.int64]]]
    events: list[PrivacyEvent] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def charged(self) -> npt.NDArray[np.int64]:
        """Every document charged by this query (union over the charges)."""
        if not self.charges:
            return np.zeros(0, dtype=np.int64)
        return np.unique(np.concatenate([ids for _, ids in self.charges])).astype(np.int64)


class MuRAG:
    """000 Algorithm 1: fixed threshold τ, per-document filter, Top-K with padding, pure-DP DP-RAG.

    ``answer(question)``: scores every document exactly; D_q = {z : r(z, q) > τ}; charges the RAG cost to
    every z ∈ D_q the filter admits (refused documents are dropped); D_q^K = Top-K(admitted) padded with
    empty documents (000 Alg. 3); answers with the single-query mechanism ``rag`` (default 000 Alg. 5) on D_q^K.
    """

    def __init__(
        self,
        retriever: Retriever,
        generator: Generator,
        filter: IndividualRenyiFilter,
        rag: SingleQueryMechanism,
        *,
        tau: float,
        retrieval: RetrievalParams = RetrievalParams(),
        source: RandomSource | None = None,
    ):
        if filter.n_docs != len(retriever):
            raise InvalidParameterError("filter", f"covers {filter.n_docs} documents, corpus has {len(retriever)}")
        if not math.isfinite(float(tau)):
            raise InvalidParameterError("tau", "must be finite", tau)
        self.retriever, self.generator, self.filter = retriever, generator, filter
        self.rag = check_mechanism(rag, filter)
        self._charge, self.delta_per_charge = filter_charge(rag.cost)
        self.tau = float(tau)
        self.k = rag.m * retrieval.docs_per_voter
        self.source = RandomSource.resolve(source)

    @property
    def per_query_cost(self) -> PrivacyEvent:
        return self.rag.cost

    def select(self, question: str) -> Selection:
        """Threshold retrieval and the (durable) filter charge; nothing is generated yet."""
        scores = np.asarray(self.retriever.scores(question), dtype=np.float64)
        above = np.flatnonzero(scores > self.tau)
        # constant work (spec/accounting/filters.md): an empty set still takes the store's durable step
        charged = (
            self.filter.try_charge(above, self._charge) if above.size else self.filter.charge_nothing(self._charge)
        ).admitted
        top = top_k_padded(charged, scores[charged], self.k)
        return Selection(
            top=top,
            charges=[(self.rag.cost, np.asarray(charged, dtype=np.int64))],
            info={"method": "murag", "above_threshold": int(above.size), "admitted": int(charged.size)},
        )

    def respond(
        self: _FilteredRAG, question: str, selection: Selection, history: tuple[tuple[str, str], ...] = ()
    ) -> RagAnswer:
        """Generation on a selection whose charge has been made (post-processing of the charged documents)."""
        ans = self.rag.respond(
            question, selection.top, self.retriever, self.generator, source=self.source, history=history
        )
        ans.charged = selection.charged
        ans.events = [*selection.events, *ans.events]
        ans.info.update(selection.info)
        return ans

    def answer(self, question: str, history: tuple[tuple[str, str], ...] = ()) -> RagAnswer:
        return self.respond(question, self.select(question), history)

    def guarantee(self: _FilteredRAG, delta: float | None = None, *, replace_one: bool = False) -> tuple[float, float]:
        """Certified ex-ante (ε, δ) of every document (``_guarantee``)."""
        return _guarantee(self, delta, replace_one)


def _guarantee(algo: _FilteredRAG, delta: float | None, replace_one: bool) -> tuple[float, float]:
    """The filter's (ε_B, δ_B) (add / remove one document) plus, for an (ε, δ) single-query cost, n·δ_q with n
    the most RAG charges any document can take (the individual basic-composition filter, spec/accounting/rag.md
    §5.3). ``replace_one``: (2ε, δ + e^ε·δ) (remove, then add)."""
    eps, d = algo.filter.guarantee(delta)
    if algo.delta_per_charge > 0:
        d = sum_products_up([algo.delta_per_charge, d], [max_charges(algo.filter, algo._charge), 1])
    if replace_one:
        e_up = math.nextafter(math.exp(eps), math.inf) if eps < 700 else math.inf  # exp within 1 ulp
        d = up(Fraction(d) * (1 + Fraction(e_up))) if math.isfinite(e_up) else (0.0 if d == 0 else math.inf)
        eps = 2.0 * eps
    return eps, min(d, 1.0)


class MuRAGAda:
    """000 Algorithm 2 (MuRAG-Ada): a query-specific threshold from noisy prefix sums over fixed score bins.

    Per query: documents whose filter can afford ε_thr are counted per bin (bins fixed in configuration,
    most relevant first; 001 Remark 1); noisy prefix sums are released until they exceed K
    (``noisy_prefix_sums``), and every counted document of a released bin is charged ε_thr; then every
    document of the released bins that can afford the RAG cost is charged it (A'_t), and the answer uses
    Top-K(A'_t). ε_q = ε_thr + ε_RAG per touched document.

    Scores above the top edge are clipped into the top bin. The bin counts and the ε_thr charge are computed
    from the same filter state; callers serving concurrent queries must serialise ``answer`` per filter
    (the audit service does), so no document is counted without being charged.
    """

    def __init__(
        self,
        retriever: Retriever,
        generator: Generator,
        filter: IndividualRenyiFilter,
        rag: SingleQueryMechanism,
        *,
        edges: Sequence[float],
        epsilon_thr: float = 1.0,
        retrieval: RetrievalParams = RetrievalParams(),
        source: RandomSource | None = None,
    ):
        if filter.n_docs != len(retriever):
            raise InvalidParameterError("filter", f"covers {filter.n_docs} documents, corpus has {len(retriever)}")
        e = np.asarray(edges, dtype=np.float64)
        if e.ndim != 1 or e.size < 2 or not np.all(np.diff(e) < 0) or not np.all(np.isfinite(e)):
            raise InvalidParameterError("edges", "must be a strictly decreasing 1-d array of >= 2 finite edges")
        self.retriever, self.generator, self.filter = retriever, generator, filter
        self.rag = check_mechanism(rag, filter)
        self._charge, self.delta_per_charge = filter_charge(rag.cost)
        self.edges = e
        self.epsilon_thr = check_epsilon("epsilon_thr", epsilon_thr)
        self.k = rag.m * retrieval.docs_per_voter
        self.source = RandomSource.resolve(source)

    def select(self, question: str) -> Selection:
        """Prefix-sum threshold release and both (durable) filter charges; nothing is generated yet."""
        scores = np.asarray(self.retriever.scores(question), dtype=np.float64)
        in_range = np.flatnonzero(scores >= self.edges[-1])
        clipped = np.minimum(scores[in_range], self.edges[0])
        bins = assign_bins(clipped, self.edges)
        nb = self.edges.size - 1
        active = self.filter.can_afford(in_range, self._thr_cost) if in_range.size else np.zeros(0, bool)
        release = noisy_prefix_sums(bin_counts(bins, nb, active), self.k, self.epsilon_thr, self.source)
        touched = in_range[release.charged_documents(bins, active)]
        # constant work (spec/accounting/filters.md): both charges take the store's durable step, empty or not
        f = self.filter
        thr_admitted = (
            f.try_charge(touched, release.event) if touched.size else f.charge_nothing(release.event)
        ).admitted
        rag_admitted = (
            f.try_charge(thr_admitted, self._charge) if thr_admitted.size else f.charge_nothing(self._charge)
        ).admitted
        top = top_k_padded(rag_admitted, scores[rag_admitted], self.k)
        return Selection(
            top=top,
            charges=[
                (release.event, np.asarray(thr_admitted, dtype=np.int64)),
                (self.rag.cost, np.asarray(rag_admitted, dtype=np.int64)),
            ],
            events=[release.event],
            info={
                "method": "murag-ada",
                "bins_released": release.bins_released,
                "threshold": release.threshold(self.edges),
                "touched": int(touched.size),
                "admitted": int(rag_admitted.size),
            },
        )

    respond = MuRAG.respond
    guarantee = MuRAG.guarantee

    def answer(self, question: str, history: tuple[tuple[str, str], ...] = ()) -> RagAnswer:
        return self.respond(question, self.select(question), history)

    @staticmethod
    def threshold_cost(epsilon_thr: float) -> PrivacyEvent:
        """The charge of the prefix-sum release to every counted document of a released bin."""
        from ..events import DiscreteLaplaceEvent

        return DiscreteLaplaceEvent(scale=1.0 / check_epsilon("epsilon_thr", epsilon_thr), sensitivity=1)

    @staticmethod
    def filter_budget(max_queries: int, rag_cost: PrivacyEvent, epsilon_thr: float) -> FilterBudget:
        """The pure budget of M MuRAG-Ada queries per document: both charges a touched document pays (the
        threshold release, then the RAG cost as the filter counts it, ``filter_charge``), each rounded to
        units on its own as the filter charges them (``FilterBudget.for_queries``)."""
        return FilterBudget.for_queries(
            max_queries, (MuRAGAda.threshold_cost(epsilon_thr), filter_charge(rag_cost)[0]), mode="pure"
        )

    @property
    def _thr_cost(self) -> PrivacyEvent:
        return self.threshold_cost(self.epsilon_thr)

    @property
    def per_query_cost(self) -> PrivacyEvent:
        return ComposedEvent((self._thr_cost, self.rag.cost))


class NaiveMultiRAG:
    """000 Algorithm 4 / 001 Algorithm 8: the single-query mechanism on each of T queries, composed.

    Every query reads the Top-K documents of the whole corpus; the total guarantee is the composition of the
    T per-query costs (pure DP: T·ε_q by basic composition, as 000 reports; ``guarantee(delta)`` also
    gives the RDP/optimal-composition ε at a δ > 0).
    """

    def __init__(
        self,
        retriever: Retriever,
        generator: Generator,
        rag: SingleQueryMechanism,
        *,
        retrieval: RetrievalParams = RetrievalParams(),
        source: RandomSource | None = None,
    ):
        self.retriever, self.generator, self.rag = retriever, generator, check_mechanism(rag)
        self.k = rag.m * retrieval.docs_per_voter
        if self.k > len(retriever):
            raise InvalidParameterError(
                "k", f"K = m·docs_per_voter = {self.k} exceeds the corpus size {len(retriever)}"
            )
        self.source = RandomSource.resolve(source)
        self.queries = 0

    @classmethod
    def for_total(
        cls,
        retriever: Retriever,
        generator: Generator,
        *,
        m: int,
        epsilon_token: float,
        epsilon_total: float,
        queries: int,
        **kw: Unpack[_NaiveOptions],
    ) -> NaiveMultiRAG:
        """Per-query budget ε_total / T (basic composition)."""
        queries = check_positive_int("queries", queries)
        rag_options: PureDpRagOptions = kw.pop("rag_options", {})
        rag = PureDpRagParams.for_budget(
            m, epsilon_token, check_epsilon("epsilon_total", epsilon_total) / queries, **rag_options
        )
        options: _RunOptions = kw  # rag_options popped above
        return cls(retriever, generator, rag, **options)

    def answer(self, question: str, history: tuple[tuple[str, str], ...] = ()) -> RagAnswer:
        scores = np.asarray(self.retriever.scores(question), dtype=np.float64)
        top = top_k_padded(np.arange(len(scores)), scores, self.k)
        self.queries += 1
        ans = self.rag.respond(question, top, self.retriever, self.generator, source=self.source, history=history)
        ans.info.update(method="naive-multi-rag")
        return ans

    def guarantee(self, delta: float = 0.0) -> tuple[float, float]:
        cost = SelfComposedEvent(self.rag.cost, max(self.queries, 0))
        if delta == 0:
            return PureDpAccountant().compose(cost).epsilon, 0.0
        return MixedAccountant().compose(cost).get_epsilon(check_delta("delta", delta)), delta


class SubsamplingMultiRAG:
    """001 Algorithm 9: per query, Poisson-subsample the corpus with rate p, then the single-query mechanism.

    Add/remove neighbouring relation (the relation amplification by subsampling is proven for). The total
    guarantee composes T copies of ``PoissonSampledEvent(p, cost)`` through RDP (amplification bound of
    ``accounting.mechanisms.subsampling``), at the δ given.
    """

    def __init__(
        self,
        retriever: Retriever,
        generator: Generator,
        rag: SingleQueryMechanism,
        *,
        probability: float,
        retrieval: RetrievalParams = RetrievalParams(),
        source: RandomSource | None = None,
    ):
        p = float(probability)
        if not (0 < p <= 1):
            raise InvalidParameterError("probability", "must lie in (0, 1]", probability)
        self.retriever, self.generator, self.rag, self.p = retriever, generator, check_mechanism(rag), p
        self.k = rag.m * retrieval.docs_per_voter
        self.source = RandomSource.resolve(source)
        self.queries = 0

    @staticmethod
    def total_epsilon(cost: PrivacyEvent, probability: float, queries: int, delta: float) -> float:
        ev = SelfComposedEvent(PoissonSampledEvent(probability, cost), queries)
        return MixedAccountant().compose(ev).get_epsilon(delta)

    @classmethod
    def for_total(
        cls,
        retriever: Retriever,
        generator: Generator,
        *,
        m: int,
        epsilon_token: float,
        epsilon_total: float,
        delta: float,
        queries: int,
        probability: float,
        **kw: Unpack[_RunOptions],
    ) -> SubsamplingMultiRAG:
        """The largest per-query c (private tokens) whose amplified T-fold composition fits ε_total at δ."""
        from .budget import max_steps, require_steps

        check_delta("delta", delta)
        queries = check_positive_int("queries", queries)

        def cost(c: int) -> PrivacyEvent:
            return SelfComposedEvent(
                PoissonSampledEvent(probability, PureDpRagParams(m, epsilon_token, c).cost), queries
            )

        c = require_steps(max_steps(cost, epsilon_total, delta, limit=256), "epsilon_total")
        return cls(retriever, generator, PureDpRagParams(m, epsilon_token, c), probability=probability, **kw)

    def answer(self, question: str, history: tuple[tuple[str, str], ...] = ()) -> RagAnswer:
        scores = np.asarray(self.retriever.scores(question), dtype=np.float64)
        kept = poisson_subsample(np.arange(len(scores)), self.p, self.source)
        top = top_k_padded(kept, scores[kept], self.k)
        self.queries += 1
        ans = self.rag.respond(question, top, self.retriever, self.generator, source=self.source, history=history)
        ans.info.update(method="subsampling-multi-rag", subsample=int(kept.size))
        return ans

    def guarantee(self, delta: float) -> tuple[float, float]:
        return self.total_epsilon(self.rag.cost, self.p, self.queries, check_delta("delta", delta)), delta
