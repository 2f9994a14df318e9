"""What the operator sees (audit/provider/http/observe.py, admin.py), in process (FastAPI's TestClient: no socket):
the metrics, the JSON access log and the OpenTelemetry spans count and time the requests — and hold no question, no
answer, no document id, no account, no counter, no request hash. An adversary's view: everything the operator's
tools receive is collected and searched for what the accounts sent and got; each record's keys and each label are
checked against what may be there, so a field added later that carries one of them fails here."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")

from fastapi.testclient import TestClient  # noqa: E402

from dprag.audit.client.account import AccountClient  # noqa: E402
from dprag.audit.protocol.request import AccountKey  # noqa: E402
from dprag.audit.provider.http.admin import create_admin_app  # noqa: E402
from dprag.audit.provider.http.app import create_app  # noqa: E402
from dprag.audit.provider.http.observe import NoTracer, Telemetry, make_tracer  # noqa: E402
from dprag.audit.testing.toy import HashEmbedder, make_toy_directory  # noqa: E402
from dprag.errors import InvalidParameterError  # noqa: E402

QUESTION = "asthma inhaler protocol for the patient called quokka-7731"
TOKEN = "t0ken-of-the-admin-listener-1234"
#: what an access-log record may hold
ACCESS_KEYS = {"ts", "kind", "request_id", "method", "route", "status", "error", "duration_ms", "bytes_out"}
#: what a span's attributes may hold
SPAN_KEYS = {"http.request.method", "http.route", "http.response.status_code", "dprag.error_type"}
#: the label names the dprag_* series may carry
LABELS = {"route", "method", "status", "type", "tenant", "window", "store", "le"}
ROUTES = {"/v1/requests", "/v1/answers/{counter}", "/v1/info", "/readyz", "/healthz", "unmatched"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    d = tmp_path_factory.mktemp("toy")
    svc = make_toy_directory(d, n=12, accounts=3, seed=b"\x05" * 32)
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    log = io.StringIO()
    t = Telemetry(access_log=log, tracer=provider.get_tracer("test"))
    public = TestClient(create_app(svc, telemetry=t))
    admin = TestClient(create_admin_app(svc, t, token=TOKEN))
    yield d, svc, t, public, admin, log, spans
    svc.close()


def _client(d: Path, svc, account: str) -> AccountClient:
    key = AccountKey.from_hex((d / "accounts" / account / "account.key").read_text().strip())
    return AccountClient(
        account,
        svc.policy.window,
        key,
        provider_vkey=svc.signer.vkey(),
        origin=svc.origin,
        embedder=HashEmbedder(32),
        embedding_scale=svc.embedder_descriptor["embedding_scale"],
    )


def _scrape(admin) -> str:
    r = admin.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200, r.text
    return r.text


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if not line.startswith("dprag_"):
            continue
        m = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        assert m, line
        labels = dict(re.findall(r'([a-z_]+)="([^"]*)"', m.group(2) or ""))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def test_requests_are_counted_timed_spanned_and_logged_without_what_was_asked(world):
    d, svc, t, public, admin, log, spans = world
    alice = _client(d, svc, "alice")
    secrets_seen: list[str] = [QUESTION, "quokka-7731", "alice"]
    for i in range(3):
        req = alice.request(f"{QUESTION} {i}")
        r = public.post("/v1/requests", content=json.dumps(req.to_json()).encode())
        assert r.status_code == 200, r.text
        body = r.json()
        secrets_seen += [f"{QUESTION} {i}", body["answer"], req.h_req.hex(), body["receipt"]["h_answer"]]
        secrets_seen += [json.dumps(body["citations"]), json.dumps(body["citations"], separators=(",", ":"))]
    assert public.post("/v1/requests", content=b"{not json").status_code == 400
    assert public.get("/v1/answers/77").status_code == 401  # no Authorization: the counter is in the path only
    assert public.get("/metrics").status_code == 404  # the public port serves no metrics
    text = _scrape(admin)
    samples = _samples(text)
    got = {(n, tuple(sorted(lab.items()))): v for n, lab, v in samples}
    key = ("dprag_http_requests_total", (("method", "POST"), ("route", "/v1/requests"), ("status", "200")))
    assert got[key] == 3, text
    key = ("dprag_http_errors_total", (("route", "/v1/requests"), ("type", "malformed")))
    assert got[key] == 1, text
    key = ("dprag_http_request_duration_seconds_count", (("method", "POST"), ("route", "/v1/requests")))
    assert got[key] == 4, text
    assert got[("dprag_store_up", ())] == 1 and got[("dprag_ledger_size", ())] >= 4
    assert got[("dprag_documents", (("tenant", "clinic"),))] == 100
    for name, labels, _ in samples:
        assert set(labels) <= LABELS, (name, labels)
        assert labels.get("route", "unmatched") in ROUTES, (name, labels)
    records = [json.loads(line) for line in log.getvalue().splitlines()]
    assert len(records) == 6 and all(set(r) == ACCESS_KEYS for r in records), records
    assert [r["status"] for r in records] == [200, 200, 200, 400, 401, 404]
    assert records[3]["error"] == "malformed" and records[4]["route"] == "/v1/answers/{counter}"
    finished = spans.get_finished_spans()
    http_spans = [s for s in finished if s.name.startswith("HTTP ")]
    assert len(http_spans) == 6 and all(set(s.attributes) <= SPAN_KEYS for s in http_spans)
    assert {s.name for s in finished} >= {"HTTP POST", "HTTP GET", "dprag work"}
    span_text = json.dumps([(s.name, dict(s.attributes or {})) for s in finished])  # what a span says of a request
    status = admin.get("/status", headers={"Authorization": f"Bearer {TOKEN}"}).text
    for seen in secrets_seen:
        for where, out in (("metrics", text), ("access log", log.getvalue()), ("spans", span_text)):
            assert seen not in out, (where, seen)
        if seen != "alice":
            assert seen not in status, seen


def test_the_admin_listener_needs_its_token_when_it_has_one(world):
    d, svc, t, public, admin, log, spans = world
    assert admin.get("/metrics").status_code == 401
    assert admin.get("/metrics", headers={"Authorization": "Bearer " + TOKEN[:-1] + "X"}).status_code == 401
    assert admin.get("/status", headers={"Authorization": TOKEN}).status_code == 401
    r = admin.get("/status", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200 and r.json()["store"]["up"] is True and r.json()["window"] == svc.policy.window
    assert admin.get("/docs").status_code in (401, 404) and admin.get("/openapi.json").status_code in (401, 404)
    with pytest.raises(InvalidParameterError) as e:
        create_admin_app(svc, Telemetry(), token="short")
    assert e.value.field == "admin_token"


def test_a_store_that_does_not_answer_is_reported_down_not_a_failed_scrape(world, monkeypatch):
    from dprag.audit.protocol.errors import StoreUnavailableError

    d, svc, t, public, admin, log, spans = world

    def down():
        raise StoreUnavailableError("the store is unreachable (test)")

    monkeypatch.setattr(svc.store, "snapshot", down)
    got = {n: v for n, lab, v in _samples(_scrape(admin)) if not lab}
    assert got["dprag_store_up"] == 0 and "dprag_ledger_size" not in got
    st = admin.get("/status", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert st["store"]["up"] is False and "unreachable" in st["store"]["error"]


def test_exhausted_documents_are_counted(tmp_path):
    """A document is exhausted once it cannot pay one more query's charge: spending a tenant's budget of a few
    documents by hand moves the gauge by exactly those."""
    import numpy as np

    svc = make_toy_directory(tmp_path / "toy", n=12, accounts=1, seed=b"\x06" * 32)
    t = Telemetry()
    admin = TestClient(create_admin_app(svc, t))
    before = admin.get("/status").json()["tenants"]
    assert before == {"clinic": {"documents": 100, "exhausted": 0}, "legal": {"documents": 50, "exhausted": 0}}
    flt = svc.tenants["legal"].filter
    cost = svc.epochs[-1].policy.query_cost()
    victims = np.array([3, 11, 42])
    while flt.can_afford(victims, cost).any():
        flt.try_charge(victims, cost)
    after = admin.get("/status").json()["tenants"]
    assert after == {"clinic": {"documents": 100, "exhausted": 0}, "legal": {"documents": 50, "exhausted": 3}}
    got = {(n, lab.get("tenant")): v for n, lab, v in _samples(admin.get("/metrics").text)}
    assert got[("dprag_documents_exhausted", "legal")] == 3 and got[("dprag_documents_exhausted", "clinic")] == 0
    svc.close()


def test_no_exporter_is_no_tracer_and_an_unknown_one_is_refused():
    tracer, provider = make_tracer("none")
    assert isinstance(tracer, NoTracer) and provider is None
    with pytest.raises(InvalidParameterError) as e:
        make_tracer("jaeger")
    assert e.value.field == "otel_exporter"
    out = io.StringIO()
    tracer, provider = make_tracer("console", out)
    with tracer.start_as_current_span("HTTP GET", attributes={"http.route": "/healthz"}):
        pass
    provider.shutdown()
    span = json.loads(out.getvalue().splitlines()[0])
    assert span["name"] == "HTTP GET" and span["attributes"] == {"http.route": "/healthz"}


def test_pending_answers_are_counted_until_answered_or_voided(tmp_path, monkeypatch, store_url):
    """``dprag_pending_answers``: recorded requests whose answer is not stored (nor voided). A generator failing after
    the charge leaves one pending; its resend answers it; a void ends one too. Questions holding the very bytes the
    count looks for (``"served":null``, ``"void":{``) are JSON strings in the row, escaped, and move nothing."""
    from dprag.audit.protocol.errors import AnswerPendingError

    d = tmp_path / "toy"
    svc = make_toy_directory(d, n=12, accounts=2, seed=b"\x07" * 32, store=store_url)  # SQLite, and PostgreSQL
    admin = TestClient(create_admin_app(svc, Telemetry()))

    def pending() -> tuple[float, int]:
        got = {n: v for n, _, v in _samples(admin.get("/metrics").text)}
        return got["dprag_pending_answers"], admin.get("/status").json()["pending_answers"]

    alice, bob = _client(d, svc, "alice"), _client(d, svc, "bob")
    alice.ask(svc, 'asthma inhaler "served":null and "void":{"x":1}')
    assert pending() == (0, 0)
    with monkeypatch.context() as m:
        m.setattr(svc, "_generate", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("generator down (test)")))
        for c, q in ((alice, 'inhaler protocol "void":{'), (bob, "garden weather rain")):
            with pytest.raises(AnswerPendingError):
                c.ask(svc, q)
    assert pending() == (2, 2)
    alice.retry(svc, 2)  # the generator is back: the resend finishes it
    assert pending() == (1, 1)
    new = AccountKey.generate()
    svc.rotate_account_key(bob.rotation_leaf(new))
    bob.key = new
    bob.ask(svc, "garden weather rain again")  # bob's pending request is voided, his next one answered
    assert bob.voided() and pending() == (0, 0)
    svc.close()


def test_a_w3c_traceparent_continues_the_callers_trace_and_brings_nothing_else(tmp_path):
    """``traceparent: 00-<trace id>-<parent span id>-01`` on a request: its span (and the spans of the work it ran)
    join the caller's trace under the caller's span. A malformed one, or none, starts a new trace. ``tracestate``
    (free text a caller chooses) reaches no span."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    svc = make_toy_directory(tmp_path / "toy", n=12, accounts=1, seed=b"\x09" * 32)
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    public = TestClient(create_app(svc, telemetry=Telemetry(tracer=provider.get_tracer("test"))))
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    headers = {"traceparent": f"00-{trace_id}-{parent_id}-01", "tracestate": "quokka=7731"}
    assert public.get("/v1/info", headers=headers).status_code == 200
    got = spans.get_finished_spans()
    (top,) = [s for s in got if s.name == "HTTP GET"]
    assert f"{top.context.trace_id:032x}" == trace_id and f"{top.parent.span_id:016x}" == parent_id
    assert top.parent.is_remote
    children = [s for s in got if s.name.startswith("dprag ")]
    assert children and all(s.context.trace_id == top.context.trace_id for s in children)
    assert all(s.parent.span_id == top.context.span_id for s in children)
    text = "".join(s.to_json() for s in got)
    assert "quokka" not in text and "7731" not in text  # the tracestate went nowhere
    for bad in ({"traceparent": "00-zz-not-a-traceparent-01"}, {}):  # a new trace, no parent
        spans.clear()
        assert public.get("/v1/info", headers=bad).status_code == 200
        (top,) = [s for s in spans.get_finished_spans() if s.name == "HTTP GET"]
        assert top.parent is None and f"{top.context.trace_id:032x}" != trace_id
    svc.close()
