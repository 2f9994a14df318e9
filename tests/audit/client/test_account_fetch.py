"""An account fetches a stored answer (``GET /v1/answers/{counter}``) from a real ``dprag serve`` on loopback whose
responses a dishonest provider rewrites: ``AccountClient.fetch`` checks a fetched answer exactly as a served one —
the receipt's signature under the pinned key, that it answers the request the client signed at that counter, that
the text hashes to h_answer, the position shown, the checkpoint's consistency with the last receipt accepted — and
refuses (``ReceiptError`` naming the field and the rule) without keeping anything as an accepted receipt.

Each test's account first asks one question (accepted: the client's head), then sends a second request whose
response it never checked (a client that crashed after sending) and fetches that stored answer."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from dprag.audit.client.account import AccountClient, ReceiptError
from dprag.audit.client.remote import RemoteError, RemoteService
from dprag.audit.protocol.ledger import NoteSigner
from dprag.audit.protocol.receipts import sign_receipt
from dprag.audit.protocol.request import AccountKey
from dprag.audit.testing.toy import HashEmbedder, make_toy_directory
from dprag.audit.verify import verify
from dprag.errors import InvalidParameterError
from tests.support.live import LiveServer

pytestmark = pytest.mark.integration  # starts servers or processes (CONTRIBUTING.md)

pytest.importorskip("fastapi")


class Liar:
    """What the provider does to a stored answer on its way out (``mode`` None: nothing)."""

    def __init__(self, signer):
        self.signer, self.mode, self.other = signer, None, None

    def resign(self, receipt: dict, signer=None, **changes) -> dict:
        body = {k: v for k, v in receipt.items() if k != "sig"}
        return sign_receipt({**body, **changes}, signer or self.signer)

    def __call__(self, served: dict) -> dict:
        r, m = served["receipt"], self.mode
        if m == "changed text":  # the receipt is the honest one; the text is not what it signs
            return {**served, "answer": served["answer"] + " (edited)"}
        if m == "changed text, h_answer edited":  # the receipt edited to match, its signature left as it was
            text = served["answer"] + " (edited)"
            return {**served, "answer": text, "receipt": {**r, "h_answer": hashlib.sha256(text.encode()).hexdigest()}}
        if m == "signed by another key":
            return {**served, "receipt": self.resign(r, NoteSigner.generate("mallory"))}
        if m == "another counter's answer":  # an honest, validly signed answer: of the client's previous request
            return dict(self.other)
        if m == "another request, same counter":  # the provider's own key signs another request's hash here
            return {**served, "receipt": self.resign(r, h_req=self.other["receipt"]["h_req"])}
        if m == "another position shown":
            return {**served, "pos": served["pos"] + 1}
        if m == "forked root":  # validly signed, but its checkpoint is on no history consistent with the client's
            return {**served, "receipt": self.resign(r, root="ab" * 32)}
        if m == "second receipt":  # validly signed, for the same request, but not the receipt it already gave
            return {**served, "receipt": self.resign(r, leaf_hash="cd" * 32)}
        if m == "malformed":
            return {"answer": served["answer"]}
        return served


@pytest.fixture(scope="module")
def liar_server(tmp_path_factory):
    from fastapi.responses import JSONResponse

    from dprag.audit.provider.http.app import create_app

    d = tmp_path_factory.mktemp("toy")
    svc = make_toy_directory(d, n=40, accounts=12, seed=b"\x05" * 32)
    liar = Liar(svc.signer)
    app = create_app(svc)

    @app.middleware("http")
    async def lie(request, call_next):
        response = await call_next(request)
        if liar.mode is None or not request.url.path.startswith("/v1/answers/") or response.status_code != 200:
            return response
        served = json.loads(b"".join([chunk async for chunk in response.body_iterator]))
        return JSONResponse(liar(served))

    with LiveServer(app) as url:
        yield d, svc, url, liar
    svc.close()


def _setup(liar_server, account: str, tmp_path: Path):
    """The account's client (state on disk), its remote, its first (accepted) answer and its second request, served
    but never checked."""
    d, svc, url, liar = liar_server
    key = AccountKey.from_hex((d / "accounts" / account / "account.key").read_text().strip())
    client = AccountClient(
        account,
        svc.policy.window,
        key,
        provider_vkey=svc.signer.vkey(),
        origin=svc.origin,
        embedder=HashEmbedder(32),
        embedding_scale=svc.embedder_descriptor["embedding_scale"],
        directory=tmp_path / account,
    )
    remote = RemoteService(url, account=account, key=key)
    first = client.ask(remote, f"asthma protocol inhaler patient {account}")
    second = client.request(f"inhaler drug protocol {account}")
    remote.serve(second)  # stored by the provider; the client never saw the response (it crashed, say)
    liar.other = first.to_dict()
    return client, remote, first


def _kept_counters(client: AccountClient, directory: Path) -> tuple[list[int], list[int]]:
    on_disk = [json.loads(x)["receipt"]["counter"] for x in (directory / "receipts.jsonl").read_text().splitlines()]
    return [e["receipt"]["counter"] for e in client.receipts], on_disk


LIES = [
    ("changed text", "receipt.h_answer", "alice"),
    ("changed text, h_answer edited", "receipt.sig", "bob"),
    ("signed by another key", "receipt.key", "dave"),  # it names a key the client does not hold
    ("another counter's answer", "receipt.counter", "a05"),
    ("another request, same counter", "receipt.h_req", "a06"),
    ("another position shown", "pos", "a07"),
    ("forked root", "receipt.root", "a08"),
]


@pytest.mark.parametrize("mode,field,account", LIES, ids=[x[0] for x in LIES])
def test_a_fetched_answer_that_does_not_check_is_refused_and_not_kept(liar_server, tmp_path, mode, field, account):
    d, svc, url, liar = liar_server
    client, remote, first = _setup(liar_server, account, tmp_path)
    incidents = len(client.kept.get("incidents.jsonl", []))
    liar.mode = mode
    try:
        with pytest.raises(ReceiptError) as e:
            client.fetch(remote, 2)
    finally:
        liar.mode = None
    assert e.value.field == field, e.value
    assert e.value.rule and str(e.value).startswith(f"{field}: ")
    # nothing of it was kept as an accepted receipt, in memory or on disk; the incident is kept
    assert _kept_counters(client, tmp_path / account) == ([1], [1])
    assert len(client.kept["incidents.jsonl"]) == incidents + 1
    assert client.kept["incidents.jsonl"][-1]["field"] == field
    if mode == "forked root":  # a validly signed checkpoint off the client's history: kept as a fork proof
        assert client.kept["forks.jsonl"][-1]["kind"] == "inconsistent checkpoints"
    # the honest stored answer still checks afterwards: the refusal left no state behind
    honest = client.fetch(remote, 2)
    assert _kept_counters(client, tmp_path / account) == ([1, 2], [1, 2])
    assert honest.receipt["counter"] == 2 and honest.pos == honest.receipt["pos"]


def test_an_honest_fetched_answer_is_accepted_kept_once_and_verifies(liar_server, tmp_path):
    d, svc, url, liar = liar_server
    client, remote, first = _setup(liar_server, "a09", tmp_path)
    fetched = client.fetch(remote, 2)
    assert fetched.receipt["counter"] == 2 and fetched.receipt["pos"] == fetched.pos > first.pos
    again = client.fetch(remote, 2)  # the same stored bytes: accepted again, kept once
    assert again.to_dict() == fetched.to_dict()
    assert _kept_counters(client, tmp_path / "a09") == ([1, 2], [1, 2])
    assert client.fetch(remote, 1).to_dict() == first.to_dict()  # an earlier one, too (its receipt is the same)
    assert not client.kept.get("incidents.jsonl")
    receipts = client.export_receipts(tmp_path / "receipts.jsonl")
    v = verify(svc.export_bundle(tmp_path / "bundle"), receipts=receipts)
    assert v.verdict == "PASS", v.reasons[:3]
    assert v.checked["receipts_accepted"] == 2


def test_a_second_receipt_for_an_answered_request_is_kept_as_a_fork(liar_server, tmp_path):
    d, svc, url, liar = liar_server
    client, remote, first = _setup(liar_server, "a11", tmp_path)
    client.fetch(remote, 2)  # accepted
    liar.mode = "second receipt"
    try:
        with pytest.raises(ReceiptError) as e:
            client.fetch(remote, 2)
    finally:
        liar.mode = None
    assert e.value.field == "receipt" and "second, different receipt" in e.value.rule
    fork = client.kept["forks.jsonl"][-1]
    assert fork["kind"] == "two receipts for one request"
    assert fork["receipts"][0] == client.receipts[-1]["receipt"] and fork["receipts"][1] != fork["receipts"][0]
    assert _kept_counters(client, tmp_path / "a11") == ([1, 2], [1, 2])


def test_fetch_refuses_what_it_cannot_check(liar_server, tmp_path):
    d, svc, url, liar = liar_server
    client, remote, first = _setup(liar_server, "a10", tmp_path)
    with pytest.raises(InvalidParameterError, match="counter"):
        client.fetch(remote, 3)  # this client signed no request for it: nothing to check an answer against
    liar.mode = "malformed"
    try:
        with pytest.raises(RemoteError, match="not {answer, citations, receipt, pos}"):
            client.fetch(remote, 2)
    finally:
        liar.mode = None
    assert _kept_counters(client, tmp_path / "a10") == ([1], [1])
