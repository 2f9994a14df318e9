"""The HTTP API's error handlers (spec/api.md): one handler per error type of the wire's vocabulary, whichever endpoint
raises it, in process (FastAPI's TestClient: no server, no socket). The finding: ``GET /v1/info`` answered 500
``internal`` while the store was down, where every other endpoint answered 503 ``store_unavailable`` (the mapping was
written three times, once per endpoint that remembered it)."""

from __future__ import annotations

import pytest

from dprag.audit.protocol.errors import (
    AnswerPendingError,
    RateLimitError,
    RequestError,
    ServiceStateError,
    StoreUnavailableError,
)
from dprag.errors import InvalidParameterError

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from dprag.audit.client.account import AccountClient  # noqa: E402
from dprag.audit.protocol.request import AccountKey  # noqa: E402
from dprag.audit.provider.http.app import create_app  # noqa: E402
from dprag.audit.testing.toy import HashEmbedder, make_toy_directory  # noqa: E402


@pytest.fixture
def toy(tmp_path):
    svc = make_toy_directory(tmp_path, n=4, accounts=2, seed=b"\x07" * 32)
    yield tmp_path, svc
    svc.close()


def test_info_is_a_503_while_the_store_is_down(toy):
    _, svc = toy
    with TestClient(create_app(svc), raise_server_exceptions=False) as http:
        assert http.get("/v1/info").status_code == 200
        svc.store.close()  # what a database that went away looks like to the service: StoreUnavailableError
        r = http.get("/v1/info")
    assert r.status_code == 503, r.text
    assert r.json()["error"]["type"] == "store_unavailable" and r.headers["retry-after"] == "1"


def _refusal(kind):
    e = kind("request.counter", "must be the next counter 2 (got 4)") if kind is RequestError else kind("all 4 used")
    e.refusal = {"signed": "refusal"}
    return e


@pytest.mark.parametrize(
    "error,status,kind,extra",
    [
        (lambda: _refusal(RequestError), 400, "refused", {"refusal": {"signed": "refusal"}}),
        (lambda: _refusal(RateLimitError), 429, "rate_limited", {"refusal": {"signed": "refusal"}}),
        (lambda: AnswerPendingError(7, cause="MemoryError"), 503, "answer_pending", {"pos": 7}),
        (lambda: StoreUnavailableError("connection lost"), 503, "store_unavailable", {}),
        (lambda: InvalidParameterError("question", "is too long"), 400, "refused", {}),
        (lambda: ServiceStateError("spend below the ledger's"), 500, "service_state", {}),
        (lambda: RuntimeError("a secret document's text"), 500, "internal", {}),
    ],
    ids=["request", "rate", "pending", "store", "invalid", "state", "defect"],
)
def test_each_error_type_has_one_answer(toy, monkeypatch, error, status, kind, extra):
    """``serve`` raising each error type gives its status, type and extras; a 503 says when to retry; a defect names
    nothing but its exception type, and no exception's text of a pending answer or a defect reaches the body."""
    d, svc = toy

    def fail(req):
        raise error()

    monkeypatch.setattr(svc, "serve", fail)
    client = AccountClient(
        "alice",
        svc.policy.window,
        AccountKey.from_hex((d / "accounts" / "alice" / "account.key").read_text().strip()),
        provider_vkey=svc.signer.vkey(),
        embedder=HashEmbedder(32),
        embedding_scale=svc.embedder_descriptor["embedding_scale"],
    )
    req = client.request("asthma protocol inhaler patient")
    wire = req.to_json()
    with TestClient(create_app(svc), raise_server_exceptions=False) as http:
        r = http.post("/v1/requests", json=wire)
    assert r.status_code == status, r.text
    body = r.json()["error"]
    assert body["type"] == kind
    for k, v in extra.items():
        assert body[k] == v
    assert ("retry-after" in r.headers) == (status == 503)
    assert "MemoryError" not in r.text and "secret document" not in r.text
