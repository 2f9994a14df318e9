"""Requests that always finish (the issue "Operations", item 1): a lost response or an outage never leaves the account
a counter ahead. The client keeps every signed request durably and resends the unanswered ones, byte for byte,
before it signs a new counter; the provider answers a resend from what it stored, so nothing is charged twice."""

from __future__ import annotations

import json

import pytest

from dprag.audit.cli import main
from dprag.audit.client.account import PendingRequestError
from dprag.audit.protocol.errors import StoreUnavailableError
from dprag.audit.testing import window as fx
from dprag.audit.verify import verify


class Flaky:
    """The service behind an unreliable network: ``lose`` responses are lost after the provider answered (the
    request recorded and charged), then ``down`` calls fail before it is reached (the database down)."""

    def __init__(self, svc, *, lose: int = 0, down: int = 0):
        self.svc, self.lose, self.down = svc, lose, down

    def __getattr__(self, name):  # everything else (consistency proofs, key history) reaches the provider
        return getattr(self.svc, name)

    def serve(self, req):
        if self.down:
            self.down -= 1
            raise StoreUnavailableError("the store is unavailable (test: down)")
        served = self.svc.serve(req)
        if self.lose:
            self.lose -= 1
            raise StoreUnavailableError("the response was lost (test: after the answer was stored)")
        return served


def _queries(svc) -> int:
    return sum(1 for _ in svc.aud.openings(svc.ledger.size))


def test_a_lost_response_is_finished_before_the_next_question_and_charged_once(tmp_path):
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice", directory=tmp_path / "alice")
    net = Flaky(svc, lose=1)
    with pytest.raises(StoreUnavailableError):
        alice.ask(net, "asthma protocol inhaler patient")
    assert alice.pending() == [1] and _queries(svc) == 1  # recorded and charged once, the receipt never arrived
    served = alice.ask(net, "garden weather rain")
    assert [r["receipt"]["counter"] for r in alice.receipts] == [1, 2] and served.receipt["counter"] == 2
    assert alice.pending() == [] and _queries(svc) == 2  # one query leaf (one charge) per request, none for the resend
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    receipts = tmp_path / "r.jsonl"
    alice.export_receipts(receipts)
    v = verify(bundle, receipts=receipts)
    assert v.verdict == "PASS" and v.checked["receipts_accepted"] == 2, v.reasons


def test_an_outage_longer_than_the_retries_names_the_pending_request_and_signs_nothing_new(tmp_path):
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice", directory=tmp_path / "alice")
    net = Flaky(svc, down=2)
    with pytest.raises(StoreUnavailableError):
        alice.ask(net, "asthma protocol inhaler patient")  # never reached the provider
    with pytest.raises(PendingRequestError) as e:
        alice.ask(net, "garden weather rain")  # request 1 is resent first, and fails again: nothing new signed
    assert e.value.counter == 1 and alice.counter == 1 and alice.pending() == [1]
    assert "dprag account resend DIR 1" in str(e.value) and "AccountClient.retry(service, 1)" in str(e.value)
    served = alice.ask(net, "garden weather rain")  # the service is back: 1 first, then 2
    assert served.receipt["counter"] == 2 and [r["receipt"]["counter"] for r in alice.receipts] == [1, 2]
    assert _queries(svc) == 2
    # the client reopened from its directory still knows request 1 was answered, and signs 3 next
    again = fx.client(svc, "alice", directory=tmp_path / "alice")
    assert again.pending() == [] and again.request("x").signed["counter"] == 3
    svc.close()


def test_resend_finds_the_request_the_client_kept(tmp_path, capsys):
    """`dprag account resend DIR N` printed "no pending request of this account has it" for a request `ask` had
    signed (it looked only where `account request` writes): it finds the client's durable copy too."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice", directory=tmp_path / "alice")
    with pytest.raises(StoreUnavailableError):
        alice.ask(Flaky(svc, down=1), "asthma protocol inhaler patient")
    svc.close()
    assert main(["account", "resend", str(tmp_path / "alice"), "1"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["request"]["counter"] == 1 and printed == json.loads(
        (tmp_path / "alice" / "sent" / "1.json").read_text()
    )
    assert main(["account", "resend", str(tmp_path / "alice"), "7"]) == 2
    assert "COUNTER 7" in capsys.readouterr().err


def test_the_counter_refusal_names_the_request_that_is_pending_and_how_to_finish_it(tmp_path):
    from dprag.audit.protocol.errors import RequestError

    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    alice.request("signed, its answer lost")
    with pytest.raises(RequestError) as e:
        alice.send(svc, alice.request("the next one"))
    assert "must be the next counter 1" in str(e.value) and "dprag account resend DIR 1" in str(e.value)
    assert e.value.refusal["code"] == "counter"
    svc.close()
