"""The LangChain adapter (rag_adapters/langchain.py): one client carries one request at a time, whatever the batch's
concurrency; the retriever shows only what the policy releases — nothing for a tenant with citations off, positions
where ids are not declared public, never a document's text."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langchain_core")

from dprag.audit.testing import window as fx  # noqa: E402
from dprag.rag_adapters.langchain import PrivateRAG, PrivateRetriever  # noqa: E402


def test_one_client_serialises_a_concurrent_batch_and_async_calls(tmp_path):
    svc = fx.open_service(tmp_path / "svc")
    rag = PrivateRAG(svc, [fx.client(svc, "alice")])
    out = rag.batch([f"asthma protocol inhaler patient {i}" for i in range(6)], config={"max_concurrency": 6})
    assert len(out) == 6 and all(isinstance(o["answer"], str) for o in out)
    more = asyncio.run(rag.abatch(["asthma drug 1", "asthma drug 2"]))
    assert len(more) == 2
    assert svc.ledger.size == 1 + 8  # every call one request, counters gapless (a clash would have been refused)
    svc.close()


def test_the_retriever_releases_positions_only_and_nothing_where_citations_are_off(tmp_path):
    svc = fx.open_service(tmp_path / "svc")  # clinic: citations on, ids not declared public; legal: citations off
    clinic = PrivateRetriever.over(PrivateRAG(svc, [fx.client(svc, "alice")]))
    docs = clinic.invoke("asthma protocol inhaler patient")
    assert docs and all(d.page_content == "" and "id" not in d.metadata for d in docs)
    assert all(isinstance(d.metadata["position"], int) for d in docs)
    legal = PrivateRetriever.over(PrivateRAG(svc, [fx.client(svc, "carol")]))
    assert legal.invoke("contract dispute court") == []
    with pytest.raises(Exception, match="one tenant"):
        PrivateRetriever.over(PrivateRAG(svc, [fx.client(svc, "alice"), fx.client(svc, "carol")]))
    svc.close()
