"""LangChain over a dprag window (extra ``langchain``: langchain-core, MIT).

- ``PrivateRAG(service, clients)``: a ``Runnable[str, dict]`` for the private RAG call — ``invoke``, ``batch``,
  ``ainvoke``, ``abatch`` — returning ``{"answer", "citations", "receipt"}``. Each call is an account's signed request
  through its ``AccountClient`` (receipt checked before the answer is returned). An account's counter is gapless, so
  one client carries one request at a time: ``clients`` is a pool, and a batch runs as many calls at once as there
  are clients (the rest wait for one). ``service``: an in-process ``ProviderService`` or a ``RemoteService`` (HTTP).
- ``PrivateRetriever(rag, tenant)``: a ``BaseRetriever`` that returns only what the policy releases: the DP
  citations of a private RAG call — ``Document(page_content="")`` each, never a document's text — and only for a
  tenant with citations on (otherwise no document at all); each names the provider's own document id only where the
  policy declares that tenant's ids public (``retrieval.public_id_tenants``: under replace-one an id such as
  ``victor-hiv.txt`` is part of the record), its index position otherwise.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableConfig

from dprag.errors import InvalidParameterError

__all__ = ["PrivateRAG", "PrivateRetriever"]


class PrivateRAG(Runnable[Any, dict]):
    """See the module docstring."""

    def __init__(self, service: Any, clients: Sequence[Any]):
        if not clients:
            raise InvalidParameterError("clients", "need at least one AccountClient")
        self.service = service
        self._pool: queue.Queue = queue.Queue()
        for c in clients:
            self._pool.put(c)
        self.tenant_of = {c.account: _tenant(service, c.account) for c in clients}

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict:
        question = input.get("question") if isinstance(input, dict) else input
        if not isinstance(question, str) or not question.strip():
            raise InvalidParameterError("input", "must be a question (a non-empty string, or {'question': ...})")
        client = self._pool.get()
        try:
            served = client.ask(self.service, question)
        finally:
            self._pool.put(client)
        return {
            "answer": served.answer,
            "citations": served.citations,
            "receipt": served.receipt,
            "tenant": self.tenant_of.get(client.account),
        }


class PrivateRetriever(BaseRetriever):
    """See the module docstring."""

    rag: Any
    public_ids: list[str] | None = None

    @classmethod
    def over(cls, rag: PrivateRAG) -> PrivateRetriever:
        """The retriever over ``rag``'s accounts (one tenant: a retriever's documents come from one corpus)."""
        tenants = set(rag.tenant_of.values())
        if len(tenants) != 1:
            raise InvalidParameterError("rag", "its accounts must belong to one tenant", sorted(map(str, tenants)))
        (tenant,) = tenants
        return cls(rag=rag, public_ids=_public_ids(rag.service, tenant))

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        out = self.rag.invoke(query)
        cites = out["citations"]
        if cites is None:  # the tenant's citation channel is off: nothing may be shown
            return []
        docs = []
        for rank, pos in enumerate(cites):
            meta = {"rank": rank, "tenant": out["tenant"], "dp": "noisy top-K citation (spec/protocol.md §5.3)"}
            if self.public_ids is not None:
                meta["id"] = self.public_ids[int(pos)]
            else:
                meta["position"] = int(pos)
            docs.append(Document(page_content="", metadata=meta))
        return docs


def _tenant(service: Any, account: str) -> str | None:
    registry = getattr(service, "registry", None)  # an in-process service; over HTTP the tenant is not known here
    entry = registry.get(account) if registry is not None else None
    return None if entry is None else str(entry.tenant)


def _public_ids(service: Any, tenant: str) -> list[str] | None:
    """The provider's document ids of ``tenant`` if its policy declares them public (an in-process service)."""
    policy = getattr(service, "policy", None)
    if policy is None or tenant not in policy.retrieval.public_id_tenants:
        return None
    return list(json.loads((service.dir / "docs" / f"{tenant}.json").read_text())["ids"])
