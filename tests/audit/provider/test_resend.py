"""What a retry or a replica sends a hosted generator (spec/provider.md §3.7): once an answer is stored, nothing.

The adversary's view is the hosted LLM's: every prompt it receives that carries a document is a copy of that document
outside the provider. A retry of a pending request resends the voters' prompts (the request has no answer yet); a
retry or a replica that arrives while the answer is being generated, or after it is stored, must not."""

from __future__ import annotations

import re
import threading

from dprag.accounting.rag.ksa import TextOnlyGenerator
from dprag.audit.provider.service import ProviderService
from dprag.audit.testing import window as fx
from dprag.audit.testing.toy import CLINIC, HashEmbedder

Q = "asthma protocol inhaler patient"


class GatedLLM:
    """A hosted LLM (``prompt_text -> str``, deterministic): records every prompt it receives; with ``gate`` set its
    first call waits for ``go`` (the test's replica or retry runs meanwhile)."""

    def __init__(self, gate: bool = False):
        self.prompts: list[str] = []
        self.gate, self.entered, self.go = gate, threading.Event(), threading.Event()
        self.lock = threading.Lock()

    def __call__(self, text: str) -> str:
        with self.lock:
            self.prompts.append(text)
            first = len(self.prompts) == 1
        if self.gate and first:
            self.entered.set()
            assert self.go.wait(10)
        found = re.findall(r"(?:ANSWER|Keywords):\s*([^\n.]+)", text)
        return found[0].replace(",", " ").strip() if found else "unknown"

    def with_documents(self, after: int = 0) -> int:
        """How many prompts from the ``after``-th on carried a clinic document."""
        return sum(any(doc in p for doc in CLINIC) for p in self.prompts[after:])


def _hosted(llm: GatedLLM) -> TextOnlyGenerator:
    return TextOnlyGenerator(llm, max_concurrency=1, name="gated")  # one call at a time: a deterministic count


def test_rule_a_replica_sends_no_document_once_another_replica_stored_the_answer(tmp_path):
    """Replica 1 is generating (its hosted call in flight); the account's retry reaches replica 2, which generates
    and stores the answer. On the parent commit replica 1 went on sending the other voters' prompts, documents and
    all, after the answer was stored (19 more prompts with documents: "replica 1 sent 19 more prompts
    with documents after the answer was stored"); now it sends none and returns replica 2's
    bytes."""
    llm1, llm2 = GatedLLM(gate=True), GatedLLM()
    svc1 = fx.open_text_service(tmp_path / "svc", _hosted(llm1), replayable=False)
    svc2 = ProviderService.open(tmp_path / "svc", embedder=HashEmbedder(32), generator=_hosted(llm2))
    try:
        alice = fx.client(svc1, "alice")
        req = alice.request(Q)
        got: dict[str, object] = {}
        t = threading.Thread(target=lambda: got.update(one=svc1.serve(req)))
        t.start()
        assert llm1.entered.wait(10)
        two = svc2.serve(req)  # the retry, on the other replica: generated and stored there
        sent_before_store = len(llm1.prompts)
        llm1.go.set()
        t.join(10)
        after = llm1.with_documents(sent_before_store)
        assert after == 0, f"replica 1 sent {after} more prompts with documents after the answer was stored"
        assert got["one"].to_dict() == two.to_dict()  # the stored bytes, one answer
        assert llm2.with_documents() > 0
    finally:
        svc1.close()
        svc2.close()


def test_rule_a_retry_in_the_same_process_waits_for_the_answer_instead_of_resending(tmp_path):
    """The account's retry reaches the same replica while its first try is generating. On the parent commit the
    retry generated the answer a second time (every voter's documents sent twice: "assert 40 == 20"); now it waits
    and returns the stored bytes: the documents are sent once."""
    llm = GatedLLM(gate=True)
    svc = fx.open_text_service(tmp_path / "svc", _hosted(llm), replayable=False)
    try:
        req = fx.client(svc, "alice").request(Q)
        got: dict[str, object] = {}
        t1 = threading.Thread(target=lambda: got.update(one=svc.serve(req)))
        t1.start()
        assert llm.entered.wait(10)
        t2 = threading.Thread(target=lambda: got.update(two=svc.serve(req)))
        t2.start()
        t2.join(0.5)  # the retry reaches the finishing step (parent: it generates; now: it waits)
        llm.go.set()
        t1.join(10)
        t2.join(10)
        once = fx.open_text_service(tmp_path / "ref", _hosted(ref := GatedLLM()), replayable=False)
        fx.client(once, "alice").ask(once, Q)  # the same request served once, on a fresh window
        once.close()
        assert llm.with_documents() == ref.with_documents(), (llm.with_documents(), ref.with_documents())
        assert got["one"].to_dict() == got["two"].to_dict()
    finally:
        svc.close()


def test_a_pending_request_resends_its_voters_prompts_and_a_stored_one_nothing(tmp_path):
    """What a retry resends (spec/provider.md §3.7): a pending request (every call failed) resends the same voter
    prompts on retry; a retry of a stored answer sends nothing."""

    class Down(GatedLLM):
        up = False

        def __call__(self, text: str) -> str:
            out = super().__call__(text)
            if not self.up:
                raise ConnectionError("the hosted API is down")
            return out

    llm = Down()
    svc = fx.open_text_service(tmp_path / "svc", _hosted(llm), replayable=False)
    try:
        alice = fx.client(svc, "alice")
        req = alice.request(Q)
        try:
            svc.serve(req)
            raise AssertionError("served while the hosted API was down")
        except Exception as e:  # noqa: BLE001 - the pending answer
            assert type(e).__name__ == "AnswerPendingError", e
        first = list(llm.prompts)
        llm.up = True
        served = svc.serve(req)
        resent = llm.prompts[len(first) :]
        voters_first = sorted({p for p in first if any(d in p for d in CLINIC)})
        voters_again = sorted({p for p in resent if any(d in p for d in CLINIC)})
        assert voters_again == voters_first  # the same prompts: the recorded selection, the same partition
        n = len(llm.prompts)
        assert svc.serve(req).to_dict() == served.to_dict()
        assert len(llm.prompts) == n  # a stored answer's retry sends nothing
    finally:
        svc.close()
