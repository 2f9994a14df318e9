"""The single-query mechanism the multi-query algorithms run (000 §4: "our multi-query framework is modular
and supports any private single-query RAG method – that is, an algorithm that ensures DP with respect to
the retrieved document set").

A ``SingleQueryMechanism`` is data-independent configuration with

- ``m``: voters; the document list it is given has a length that is a multiple of m (Top-K, K = m·k);
- ``cost``: the ex-ante worst-case privacy event of one answer with respect to the document list (add,
  remove or replace one document). MuRAG / MuRAG-Ada charge it to every document they touch, so it must be
  pure-DP or RDP — or ``ApproxDpEvent(ε, δ)`` in a *pure* filter: the filter counts ε and every charge adds
  δ outside it (``filter_charge``; the individual basic-composition filter, spec/accounting/rag.md §5.3).
  Any other δ is refused by the individual filter (``filters.refuse_delta_events``);
- ``respond(question, doc_ids, retriever, generator, *, source, history) -> RagAnswer``.

Implementations: ``PureDpRagParams`` (000 Algorithm 5, the papers' default: pure ε, runs in a pure or an RDP
filter) and ``GaussianVoteRagParams`` (GNMax voting, RDP only: it needs an RDP filter). LimitedDomain
(DPVoteRAG / DPSparseVoteRAG) and PTR (DP-KSA) are only (ε, δ)-DP and do not plug in (spec/accounting.md).
"""

from __future__ import annotations

from typing import Protocol, cast, runtime_checkable

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError, UnsupportedEventError

from ..errors import check_positive_int
from ..events import ApproxDpEvent, PrivacyEvent, PureDpEvent
from ..filters import PURE, IndividualRenyiFilter, filter_rdp_curve, pure_epsilon
from ..noise.source import RandomSource
from ..protocols import Generator, Retriever
from .common import RagAnswer
from .single_query import GaussianVoteRagParams, PureDpRagParams


@runtime_checkable
class SingleQueryMechanism(Protocol):
    @property
    def m(self) -> int: ...

    @property
    def cost(self) -> PrivacyEvent: ...

    def respond(
        self,
        question: str,
        doc_ids: npt.NDArray[np.int64],
        retriever: Retriever,
        generator: Generator,
        *,
        source: RandomSource | None = None,
        history: tuple[tuple[str, str], ...] = (),
    ) -> RagAnswer: ...


def filter_charge(cost: PrivacyEvent) -> tuple[PrivacyEvent, float]:
    """(the event the per-document filter counts, the δ each charge adds outside it).

    ``ApproxDpEvent(ε, δ)`` with δ > 0 → (``PureDpEvent(ε)``, δ): the individual basic-composition filter
    (spec/accounting/rag.md §5.3) — a pure filter caps Σε per document, and a document charged n times adds
    n·δ. Every other cost → (cost, 0.0) (the filter counts it whole; a δ inside it is refused there)."""
    if isinstance(cost, ApproxDpEvent) and cost.delta > 0:
        return PureDpEvent(float(cost.epsilon)), float(cost.delta)
    return cost, 0.0


def check_mechanism(rag: object, filter: IndividualRenyiFilter | None = None) -> SingleQueryMechanism:
    """``rag`` if it is a ``SingleQueryMechanism`` whose cost ``filter`` (if given) can count; else a typed error
    before anything is charged (``InvalidParameterError`` naming ``rag``, or the filter's
    ``UnsupportedEventError`` for a pure-ε filter given an RDP-only cost, an RDP filter given a δ cost, or any
    filter given a δ other than an ``ApproxDpEvent``'s)."""
    if not isinstance(rag, SingleQueryMechanism) or isinstance(rag, type):
        raise InvalidParameterError("rag", "must be a SingleQueryMechanism (m, cost, respond)", type(rag).__name__)
    check_positive_int("rag.m", rag.m)
    if filter is not None:
        event, delta = filter_charge(rag.cost)
        if delta > 0 and filter.mode != PURE:
            raise UnsupportedEventError(
                "an (ε, δ) cost runs only in a pure-ε filter (ε counted per document, δ added per charge: "
                "spec/accounting/rag.md §5.3); an individual Rényi filter has no theorem for a δ per charge"
            )
        if filter.mode == PURE:
            pure_epsilon(event)
        else:
            filter_rdp_curve(event, cast(npt.NDArray[np.float64], filter.orders))  # an RDP filter has orders
    return rag


def max_charges(filter: IndividualRenyiFilter, event: PrivacyEvent) -> int:
    """The most times any one document can be charged ``event`` by ``filter`` (its limit over the event's
    units, per order; the smallest over orders). An upper bound on the charges of every document whatever
    else it is charged."""
    units = np.asarray(filter.cost_units(event), dtype=np.int64)
    positive = units > 0  # orders where the event costs nothing do not bound the count
    return int(np.min(np.asarray(filter.budget.limits, dtype=np.int64)[positive] // units[positive]))


__all__ = [
    "SingleQueryMechanism",
    "PureDpRagParams",
    "GaussianVoteRagParams",
    "check_mechanism",
    "filter_charge",
    "max_charges",
]
