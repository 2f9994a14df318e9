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


def test_invoke_after_an_outage_finishes_the_lost_request_and_goes_on(tmp_path):
    """v3: after one lost response every later `PrivateRAG.invoke` raised ("must be the next counter N"). The
    client resends the pending request first, so the next invoke answers, and nothing is charged twice."""
    from dprag.audit.protocol.errors import StoreUnavailableError

    svc = fx.open_service(tmp_path / "svc")

    class LosesOneResponse:
        lost = False

        def __getattr__(self, name):
            return getattr(svc, name)

        def serve(self, req):
            served = svc.serve(req)
            if not self.lost:
                self.lost = True
                raise StoreUnavailableError("the response was lost (test)")
            return served

    alice = fx.client(svc, "alice")
    rag = PrivateRAG(LosesOneResponse(), [alice])
    with pytest.raises(StoreUnavailableError):
        rag.invoke("asthma protocol inhaler patient")
    out = rag.invoke("garden weather rain")
    assert out["receipt"]["counter"] == 2 and [r["receipt"]["counter"] for r in alice.receipts] == [1, 2]
    assert svc.ledger.size == 1 + 2  # two query leaves: the lost one was answered from what the provider stored
    svc.close()


def test_invoke_moves_on_after_a_void_of_the_pending_request_and_charges_nothing_twice(tmp_path, monkeypatch):
    """spec/protocol.md §5.1: the request recorded before the account re-keyed is never answered; the provider's
    signed void frees its counter, and the next invoke is answered on the next counter (before, every later invoke
    raised, the pending request resent and refused forever)."""
    from dprag.audit.protocol.errors import AnswerPendingError
    from dprag.audit.protocol.request import AccountKey

    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice", directory=tmp_path / "alice")
    rag = PrivateRAG(svc, [alice])
    assert rag.invoke("asthma protocol inhaler patient")["receipt"]["counter"] == 1
    with monkeypatch.context() as m:
        m.setattr(svc, "_generate", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("generator down (test)")))
        with pytest.raises(AnswerPendingError):
            rag.invoke("inhaler drug protocol")  # recorded and charged, its answer never stored
    new = AccountKey.generate()
    svc.rotate_account_key(alice.rotation_leaf(new))
    alice.key = new
    out = rag.invoke("garden weather rain")
    assert out["receipt"]["counter"] == 3 and alice.voided() == {2: alice._sent[2].h_req.hex()}
    leaves = [svc.ledger.leaf(p) for p in range(svc.ledger.size)]
    assert sum(b'"query"' in x for x in leaves) == 3  # one charge per request: the void recorded nothing
    svc.close()
