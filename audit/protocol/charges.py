"""The generation channel's charges, replayed (spec/protocol.md §5.3 and §8.9).

One function computes what MuRAG / MuRAG-Ada must charge for one request, from the exact integer scores,
the per-document spend replayed from the ledger, and the request's committed-seed selection stream. The
verifier checks every opened charge against it, and the provider's crash recovery uses it to name the
charges a recovery record restores, so the two can never disagree about the rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from dprag.accounting.events import DiscreteLaplaceEvent
from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.mechanisms.prefix_sums import assign_bins, bin_counts, noisy_prefix_sums
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.stores import MemoryBudgetStore

from .encoding import EncodingError

if TYPE_CHECKING:  # annotations only: policy.py -> recommended.py -> certify.py must not import policy back
    from .policy import Policy


@dataclass(frozen=True)
class ChargeRule:
    """The policy's charges in filter units: the budget limit, the RAG cost and (MuRAG-Ada) the ε_thr cost."""

    limit: int
    rag_units: int
    thr_units: int | None

    @classmethod
    def of(cls, policy: Policy) -> ChargeRule:
        g = policy.generation
        budget = FilterBudget.for_queries(g.max_queries_per_doc, policy.query_cost(), mode="pure")
        probe = IndividualRenyiFilter(MemoryBudgetStore(1), budget)
        rag = int(probe.cost_units(policy.rag_charge())[0])  # the ε part of an (ε, δ) cost (filter_charge)
        thr = None
        if g.algorithm == "murag-ada":
            # epsilon_thr is set for "murag-ada" (Policy.validate)
            thr = int(probe.cost_units(DiscreteLaplaceEvent(1.0 / cast(float, g.epsilon_thr), 1))[0])
        return cls(limit=int(np.asarray(budget.limits)[0]), rag_units=rag, thr_units=thr)


def opened_excluded(charge: object, n_docs: int) -> list[int]:
    """The records a charge opening excludes (its optional ``excluded``, spec/protocol.md §6.2; absent: none):
    strictly increasing ids of the tenant's corpus, else ``EncodingError``."""
    if not isinstance(charge, dict) or "excluded" not in charge:
        return []
    ids = charge["excluded"]
    if (
        not isinstance(ids, list)
        or not ids
        or not all(type(x) is int and 0 <= x < n_docs for x in ids)
        or any(a >= b for a, b in zip(ids, ids[1:], strict=False))
    ):
        raise EncodingError("a charge opening's excluded must be a non-empty strictly increasing list of document ids")
    return list(ids)


def expected_charges(
    policy: Policy,
    rule: ChargeRule,
    scores: np.ndarray,
    spent: np.ndarray,
    select_source: RandomSource,
    excluded: Sequence[int] = (),
) -> tuple[list[tuple[int, np.ndarray]], int | None]:
    """The charges one request must make: [(units, sorted ids), ...] and MuRAG-Ada's released bin count.

    ``spent``: per-document units before this request (not modified). MuRAG charges every document with
    score > τ that can afford the RAG cost (000 Alg. 1; every such document, not only the top-k used);
    MuRAG-Ada releases noisy prefix sums from ``select_source`` over the affordable documents' bins,
    charges ε_thr to every counted document of the released bins, then the RAG cost to those of them that
    can still afford it (000 Alg. 2). ``excluded``: records excluded for this query (§5.3 steps 3-4): never
    a candidate, so never counted nor charged.
    """
    g = policy.generation
    s = np.asarray(scores, dtype=np.int64)
    out = np.zeros(s.size, dtype=bool)
    if len(excluded):
        out[np.asarray(excluded, dtype=np.int64)] = True
    k = g.m * g.docs_per_voter
    if g.algorithm == "murag":
        ids = np.flatnonzero((s > cast(int, g.tau)) & (spent + rule.rag_units <= rule.limit) & ~out)
        return [(rule.rag_units, ids.astype(np.int64))], None
    edges = np.asarray(g.edges, dtype=np.float64)
    sf = s.astype(np.float64)
    in_range = np.flatnonzero((sf >= edges[-1]) & ~out)
    bins = assign_bins(np.minimum(sf[in_range], edges[0]), edges)
    active = spent[in_range] + rule.thr_units <= rule.limit
    # MuRAG-Ada: epsilon_thr and thr_units are set (Policy.validate, ChargeRule.of)
    release = noisy_prefix_sums(bin_counts(bins, edges.size - 1, active), k, cast(float, g.epsilon_thr), select_source)
    thr_ids = np.sort(in_range[release.charged_documents(bins, active)]).astype(np.int64)
    after = spent[thr_ids] + rule.thr_units
    rag_ids = thr_ids[after + rule.rag_units <= rule.limit]
    return [(cast(int, rule.thr_units), thr_ids), (rule.rag_units, rag_ids)], int(release.bins_released)
