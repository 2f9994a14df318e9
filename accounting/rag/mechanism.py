"""The single-query mechanism the multi-query algorithms run (000 §4: "our multi-query framework is modular
and supports any private single-query RAG method – that is, an algorithm that ensures DP with respect to
the retrieved document set").

A ``SingleQueryMechanism`` is data-independent configuration with

- ``m``: voters; the document list it is given has a length that is a multiple of m (Top-K, K = m·k);
- ``cost``: the ex-ante worst-case privacy event of one answer with respect to the document list (add,
  remove or replace one document). MuRAG / MuRAG-Ada charge it to every document they touch, so it must be
  pure-DP or RDP — a cost carrying δ is refused by the individual filter (``filters.refuse_delta_events``);
- ``respond(question, doc_ids, retriever, generator, *, source, history) -> RagAnswer``.

Implementations: ``PureDpRagParams`` (000 Algorithm 5, the papers' default: pure ε, runs in a pure or an RDP
filter) and ``GaussianVoteRagParams`` (GNMax voting, RDP only: it needs an RDP filter). LimitedDomain
(DPVoteRAG / DPSparseVoteRAG) and PTR (DP-KSA) are only (ε, δ)-DP and do not plug in (spec/accounting.md).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import InvalidParameterError, check_positive_int
from ..events import PrivacyEvent
from ..filters import PURE, filter_rdp_curve, pure_epsilon
from ..noise.source import RandomSource
from ..protocols import Generator, Retriever
from .common import RagAnswer
from .single_query import GaussianVoteRagParams, PureDpRagParams


@runtime_checkable
class SingleQueryMechanism(Protocol):
    m: int

    @property
    def cost(self) -> PrivacyEvent: ...

    def respond(self, question: str, doc_ids: np.ndarray, retriever: Retriever, generator: Generator, *,
                source: RandomSource | None = None, history: tuple = ()) -> RagAnswer: ...


def check_mechanism(rag, filter=None) -> SingleQueryMechanism:
    """``rag`` if it is a ``SingleQueryMechanism`` whose cost ``filter`` (if given) can count; else a typed error
    before anything is charged (``InvalidParameterError`` naming ``rag``, or the filter's
    ``UnsupportedEventError`` for a pure-ε filter given an RDP-only cost or any filter given a δ cost)."""
    if not isinstance(rag, SingleQueryMechanism) or isinstance(rag, type):
        raise InvalidParameterError("rag", "must be a SingleQueryMechanism (m, cost, respond)", type(rag).__name__)
    check_positive_int("rag.m", rag.m)
    if filter is not None:
        if filter.mode == PURE:
            pure_epsilon(rag.cost)
        else:
            filter_rdp_curve(rag.cost, filter.orders)
    return rag


__all__ = ["SingleQueryMechanism", "PureDpRagParams", "GaussianVoteRagParams", "check_mechanism"]
