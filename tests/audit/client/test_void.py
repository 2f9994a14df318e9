"""A pending request that can never be served gets a signed void that frees its counter (spec/protocol.md §5.1).

The state: a request recorded (charged, its counter consumed) whose answer is not stored, and whose account then
re-keyed or was revoked: the provider never answers a key rotated out, nor a revoked account, so the account would
stay a counter ahead for good. The provider signs a ``void`` (``consumed: true``), stored as the request's outcome;
the client keeps it and signs its next counter. Each test is the party that would break it: a provider voiding a
charged request it could answer, or answering one it voided; an account handing in a void it forged or one of
another log."""

from __future__ import annotations

import hashlib
import json

import pytest

from dprag.audit.client.account import ReceiptError
from dprag.audit.protocol.encoding import decode, encode
from dprag.audit.protocol.errors import AnswerPendingError, RequestError
from dprag.audit.protocol.ledger import NoteSigner
from dprag.audit.protocol.receipts import receipt_body, refusal_body, sign_receipt, sign_refusal
from dprag.audit.protocol.request import AccountKey
from dprag.audit.testing import window as fx
from dprag.audit.verify import verify


def _fail_generation(monkeypatch, svc) -> None:
    """The generator fails after the charge: the request is recorded (its leaf, its charge), its answer not stored."""

    def boom(*a, **k):
        raise RuntimeError("the generator failed (test)")

    monkeypatch.setattr(svc, "_generate", boom)


def _recorded_unanswered(monkeypatch, svc, client, question: str) -> int:
    with monkeypatch.context() as m:
        _fail_generation(m, svc)
        with pytest.raises(AnswerPendingError):
            client.ask(svc, question)
    assert client.pending() == [client.counter]
    return client.counter


def _query_leaves(svc) -> list[str]:
    return [json.loads(svc.ledger.leaf(p))["h_req"] for p in range(svc.ledger.size) if b'"query"' in svc.ledger.leaf(p)]


def _rekey(svc, client) -> AccountKey:
    new = AccountKey.generate()
    svc.rotate_account_key(client.rotation_leaf(new))
    client.key = new
    return new


def _verify(svc, tmp_path, lines: list[bytes]):
    bundle = svc.export_bundle(tmp_path / "bundle")
    p = tmp_path / "handed-in.jsonl"
    p.write_bytes(b"".join(x + b"\n" for x in lines))
    return verify(bundle, receipts=p)


def _export(client, tmp_path) -> list[bytes]:
    return client.export_receipts(tmp_path / f"{client.account}.jsonl").read_bytes().splitlines()


def test_a_recorded_request_of_a_re_keyed_account_is_voided_and_the_account_moves_on(tmp_path, monkeypatch):
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice", directory=tmp_path / "alice")
    alice.ask(svc, "asthma protocol inhaler patient")
    c = _recorded_unanswered(monkeypatch, svc, alice, "inhaler drug protocol")
    h = alice._sent[c].h_req.hex()
    _rekey(svc, alice)
    served = alice.ask(svc, "garden weather rain")  # resends c (under the key rotated out): voided; then c + 1
    assert served.receipt["counter"] == c + 1 and alice.pending() == []
    assert alice.voided() == {c: h}
    (kept,) = [e for e in alice.kept["refusals.jsonl"] if e["refusal"]["code"] == "void"]
    assert kept["refusal"]["consumed"] is True and kept["refusal"]["h_req"] == h and kept["request"]["counter"] == c
    # one query leaf per request: the void charged nothing and recorded nothing
    assert _query_leaves(svc) == [alice._sent[k].h_req.hex() for k in (1, 2, 3)]
    # the void is the request's stored outcome: every later retry gets the same signed bytes, never an answer
    with pytest.raises(RequestError) as again:
        svc.serve(alice._sent[c])
    assert again.value.refusal == kept["refusal"] and again.value.code == "void"
    # a client reopened from its directory still knows c was voided, and signs c + 2 next
    reopened = fx.client(svc, "alice", directory=tmp_path / "alice")
    assert reopened.pending() == [] and reopened.voided() == {c: h}
    v = _verify(svc, tmp_path, _export(alice, tmp_path))
    assert v.verdict == "PASS", v.reasons
    assert v.checked["voids"] == 1 and v.checked["receipts_accepted"] == 2
    svc.close()
    fx.reopen_service(tmp_path / "svc").close()  # spend is exactly what the openings charge: nothing refunded


def test_a_recorded_request_of_a_revoked_account_gets_a_void_not_a_refusal_that_frames_the_provider(
    tmp_path, monkeypatch
):
    """Before the void, the provider refused the revoked account's recorded request with ``revoked`` (the counter
    "not consumed"), a refusal of a request its log held: the verifier FAILed the honest provider."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice", directory=tmp_path / "alice")
    c = _recorded_unanswered(monkeypatch, svc, alice, "asthma protocol inhaler patient")
    svc.revoke_account("alice")
    with pytest.raises(RequestError) as e:
        alice.ask(svc, "inhaler drug protocol")  # c is voided; c + 1 is refused (revoked: not consumed)
    assert e.value.refusal["code"] == "revoked" and e.value.refusal["consumed"] is False
    assert alice.voided() == {c: alice._sent[c].h_req.hex()} and alice.pending() == []
    v = _verify(svc, tmp_path, _export(alice, tmp_path))
    assert v.verdict == "PASS", v.reasons
    assert v.checked["voids"] == 1 and v.checked["refusals"] == 2
    svc.close()


def test_a_request_the_provider_can_still_answer_is_never_voided(tmp_path, monkeypatch):
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    c = _recorded_unanswered(monkeypatch, svc, alice, "asthma protocol inhaler patient")
    served = alice.ask(svc, "inhaler drug protocol")  # no registry change: c is finished, then c + 1
    assert [r["receipt"]["counter"] for r in alice.receipts] == [c, c + 1] and served.receipt["counter"] == c + 1
    assert alice.voided() == {}
    svc.close()


def _forged_void(svc, signed: dict, size: int | None = None) -> dict:
    size = svc.ledger.size if size is None else size
    body = refusal_body(
        origin=svc.origin,
        h_req=hashlib.sha256(encode(signed)).hexdigest(),
        field="request.sig",
        rule="voided (a provider skipping a charged request)",
        code="void",
        size=size,
        root=svc.ledger.root(size).hex(),
    )
    return sign_refusal(body, svc.signer_at(size))


def test_a_provider_voiding_a_charged_request_it_could_answer_fails(tmp_path, monkeypatch):
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    alice.ask(svc, "asthma protocol inhaler patient")
    c = _recorded_unanswered(monkeypatch, svc, alice, "inhaler drug protocol")
    signed = alice._sent[c].signed
    void = _forged_void(svc, signed)  # the provider's own key: a valid signature, a false statement
    lines = [*_export(alice, tmp_path), encode({"refusal": void, "request": signed})]
    v = _verify(svc, tmp_path, lines)
    assert v.verdict == "FAIL" and any("could answer it: a charged request skipped" in r for r in v.reasons), v.reasons
    # a void of a request the log does not hold below its size (its counter was not consumed there)
    early = _forged_void(svc, signed, size=svc.ledger.size - 1)
    v = _verify(svc, tmp_path, [*_export(alice, tmp_path), encode({"refusal": early, "request": signed})])
    assert v.verdict == "FAIL" and any("did not hold below size" in r for r in v.reasons), v.reasons
    svc.close()


def test_a_void_for_a_request_answered_later_fails_and_the_client_keeps_both(tmp_path, monkeypatch):
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    c = _recorded_unanswered(monkeypatch, svc, alice, "asthma protocol inhaler patient")
    old = alice._sent[c]
    _rekey(svc, alice)
    alice.ask(svc, "inhaler drug protocol")  # c voided (honestly), c + 1 answered
    # the provider answers c anyway: it signs a receipt for the request it voided
    row = decode(svc.aud.served("alice", c), what="served")
    body = {**row["receipt_body"], "h_answer": hashlib.sha256(b"an answer after all").hexdigest()}
    receipt = sign_receipt(receipt_body(**{k: v for k, v in body.items() if k != "type"}), svc.signer_at(body["size"]))
    with pytest.raises(ReceiptError, match="voided"):
        alice.accept(old, receipt, None, answer="an answer after all")
    assert alice.kept["forks.jsonl"][-1]["kind"] == "a receipt for a request the provider voided"
    lines = [*_export(alice, tmp_path), encode({"receipt": receipt, "request": old.signed})]
    v = _verify(svc, tmp_path, lines)
    assert v.verdict == "FAIL" and any("answered and voided" in r for r in v.reasons), v.reasons
    svc.close()


def test_an_account_cannot_frame_the_provider_with_a_void_it_forged_or_one_of_another_log(tmp_path, monkeypatch):
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    alice.ask(svc, "asthma protocol inhaler patient")
    signed = alice.receipts[0]["request"]
    honest = _export(alice, tmp_path)
    # a void the account signed itself (no provider key): rejected evidence, never a FAIL
    mine = NoteSigner.generate("alice-forges")
    forged = _signed_by(mine, _forged_void(svc, signed))
    # a genuine void of another log (another provider key, another origin)
    other = fx.open_service(tmp_path / "other")
    them = fx.client(other, "alice")
    c = _recorded_unanswered(monkeypatch, other, them, "asthma protocol inhaler patient")
    _rekey(other, them)
    them.ask(other, "inhaler drug protocol")
    (theirs,) = [e for e in them.kept["refusals.jsonl"] if e["refusal"]["code"] == "void"]
    assert theirs["request"]["counter"] == c
    lines = [*honest, encode({"refusal": forged, "request": signed}), encode(theirs)]
    v = _verify(svc, tmp_path, lines)
    assert v.verdict == "PASS", v.reasons
    assert len(v.rejected_evidence) == 2, v.rejected_evidence  # listed as evidence the log's key did not sign
    assert "signature does not verify" in v.rejected_evidence[0] and "key" in v.rejected_evidence[1]
    other.close()
    svc.close()


def _signed_by(signer, refusal: dict) -> dict:
    body = {k: v for k, v in refusal.items() if k != "sig"}
    return {**body, "sig": signer.sign(b"dprag/refusal/v4\n" + encode(body)).hex()}


class _ForgesVoids:
    """A service (or a man in the middle) answering every request with a void no provider key signed."""

    def __init__(self, svc, signer):
        self.svc, self.signer = svc, signer

    def __getattr__(self, name):
        return getattr(self.svc, name)

    def serve(self, req):
        e = RequestError("request.sig", "void (forged)")
        e.refusal = _signed_by(self.signer, _forged_void(self.svc, req.signed))
        raise e


def test_the_client_keeps_only_a_void_its_pinned_key_signed_for_its_request(tmp_path):
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice", directory=tmp_path / "alice")
    req = alice.request("asthma protocol inhaler patient")
    with pytest.raises(RequestError):
        alice.send(_ForgesVoids(svc, NoteSigner.generate("mitm")), req)
    assert alice.voided() == {} and alice.pending() == [1]  # still pending: resent (and answered) next
    served = alice.ask(svc, "inhaler drug protocol")
    assert [r["receipt"]["counter"] for r in alice.receipts] == [1, 2] and served.receipt["counter"] == 2

    # a void the provider's key signed, but for another request of the account's: it voids nothing here
    class _VoidsAnother:
        def __getattr__(self, name):
            return getattr(svc, name)

        def serve(self, r):
            e = RequestError("request.sig", "void")
            e.refusal = _forged_void(svc, alice._sent[1].signed)
            raise e

    with pytest.raises(RequestError):
        alice.send(_VoidsAnother(), alice.request("garden weather rain"))
    assert alice.voided() == {} and alice.pending() == [3]
    svc.close()


def test_a_stored_answer_is_resent_after_a_re_key_never_voided_nor_refused(tmp_path):
    """A response lost after the answer was stored, then a re-key: the resend under the key rotated out gets the
    stored bytes (nothing new is released). A void there would let an account that kept the receipt frame the
    provider (answered and voided); before, the provider signed a ``request`` refusal (counter "not consumed") of a
    request its log held, which FAILs the honest provider."""
    from dprag.audit.protocol.errors import StoreUnavailableError

    class Lost:  # the provider answers (and stores the answer); the response never reaches the account
        def __getattr__(self, name):
            return getattr(svc, name)

        def serve(self, req):
            svc.serve(req)
            raise StoreUnavailableError("the response was lost (test)")

    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice", directory=tmp_path / "alice")
    with pytest.raises(StoreUnavailableError):
        alice.ask(Lost(), "asthma protocol inhaler patient")
    _rekey(svc, alice)
    served = alice.ask(svc, "inhaler drug protocol")
    assert [r["receipt"]["counter"] for r in alice.receipts] == [1, 2] and served.receipt["counter"] == 2
    assert alice.voided() == {} and "refusals.jsonl" not in alice.kept
    v = _verify(svc, tmp_path, _export(alice, tmp_path))
    assert v.verdict == "PASS" and v.checked["receipts_accepted"] == 2, v.reasons
    svc.close()
