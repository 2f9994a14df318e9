"""What an operator sees of a serving process: Prometheus metrics, OpenTelemetry spans and a JSON access log
(spec/provider.md §7). Operator-only: the counts and latencies depend on the corpus (how many documents are exhausted,
how many answers wait, how long a request takes) and no ε covers them, so none of it is served on the public port —
the metrics on the admin listener (``admin.py``), the spans to the operator's collector, the log to the operator's
file. None of it ever holds a question, an answer, a document id, an account or a counter: a request is named by
its route's template (``/v1/answers/{counter}``, never the path), its method, its status and its error type.

``Telemetry``: the process's metrics (one registry per process, never the library's global one), its access log and
its tracer. ``Observed``: the ASGI middleware that records each request of the public app. ``ServiceCollector``:
the store-backed gauges, read when a scrape asks (one snapshot; a store that does not answer is ``dprag_store_up 0``).
"""

from __future__ import annotations

import json
import logging
import secrets
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Protocol, cast

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dprag.errors import DpragError, InvalidParameterError

if TYPE_CHECKING:
    from ..service import ProviderService

__all__ = ["EXPORTERS", "Observed", "ServiceCollector", "Telemetry", "make_tracer"]

#: the bytes of an error body read for its type (every body of the wire's errors is smaller)
ERROR_BODY_PEEK = 4096
#: the span exporters ``make_tracer`` knows
EXPORTERS = ("none", "console", "otlp")
#: request latency buckets (seconds): a cached answer is milliseconds, a generation seconds
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Span(Protocol):
    """What the middleware does with a span (an OpenTelemetry span, or ``_NoSpan``)."""

    def set_attribute(self, key: str, value: str | int) -> object: ...


class Tracer(Protocol):
    """What the middleware asks of a tracer (an OpenTelemetry tracer, or ``NoTracer``)."""

    def start_as_current_span(
        self, name: str, *, attributes: Mapping[str, str | int] | None = None
    ) -> AbstractContextManager[Span]: ...


class _NoSpan:
    def set_attribute(self, key: str, value: str | int) -> object:
        return None


class NoTracer:
    """The tracer without OpenTelemetry (not installed, or no exporter chosen): every span is nothing."""

    def start_as_current_span(
        self, name: str, *, attributes: Mapping[str, str | int] | None = None
    ) -> AbstractContextManager[Span]:
        return nullcontext(_NoSpan())


@contextmanager
def caller_trace(scope: Scope) -> Iterator[None]:
    """Within it, the current OpenTelemetry context is the one the request's W3C ``traceparent`` header names (trace
    id, parent span id, flags), so the spans started inside join the caller's trace; without the header, or without
    OpenTelemetry, nothing changes (a malformed header gives an empty context: a new trace). Only ``traceparent`` is
    read: ``tracestate`` is free text a caller chooses, and spans carry nothing an account wrote beyond those ids."""
    value = next((v for k, v in scope.get("headers") or [] if k.lower() == b"traceparent"), None)
    try:
        from opentelemetry.context import attach, detach
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        value = None
    if value is None:
        yield
        return
    token = attach(TraceContextTextMapPropagator().extract({"traceparent": value.decode("latin-1")[:128]}))
    try:
        yield
    finally:
        detach(token)


def make_tracer(exporter: str, stream: IO[str] | None = None) -> tuple[Tracer, object | None]:
    """The tracer for ``exporter`` (``EXPORTERS``) and its provider (to shut down at exit; None for ``none``):
    ``console`` writes each span as JSON to ``stream`` (default stderr), ``otlp`` sends them over OTLP/HTTP to the
    collector the standard ``OTEL_EXPORTER_OTLP_*`` variables name. Needs the ``otel`` extra (an error naming it if
    absent); ``none`` never imports OpenTelemetry."""
    if exporter not in EXPORTERS:
        raise InvalidParameterError("otel_exporter", f"must be one of {', '.join(EXPORTERS)}", exporter)
    if exporter == "none":
        return NoTracer(), None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError as e:
        raise InvalidParameterError(
            "otel_exporter", f"needs the otel extra (pip install 'dprag[otel]'): {e}", exporter
        ) from None
    provider = TracerProvider(resource=Resource.create({"service.name": "dprag-serve"}))
    if exporter == "console":
        out = stream or sys.stderr
        provider.add_span_processor(
            SimpleSpanProcessor(ConsoleSpanExporter(out=out, formatter=lambda s: s.to_json(indent=None) + "\n"))
        )
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as e:
            raise InvalidParameterError("otel_exporter", f"otlp needs the otel extra: {e}", exporter) from None
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer: Tracer = provider.get_tracer("dprag.serve")
    return tracer, provider


class Telemetry:
    """One serving process's metrics, access log and tracer. ``access_log``: a text stream for the JSON lines (None:
    no access log); ``tracer``: ``make_tracer``'s (default: none)."""

    def __init__(self, *, access_log: IO[str] | None = None, tracer: Tracer | None = None):
        cast(
            Callable[[], None], disable_created_metrics
        )()  # the library leaves it unannotated; no ``_created`` series beside every counter (the process's setting)
        self.registry = CollectorRegistry(auto_describe=True)
        self.started = time.time()
        self.tracer: Tracer = tracer or NoTracer()
        labels = ("route", "method")
        self.requests = Counter(
            "dprag_http_requests", "HTTP requests answered", (*labels, "status"), registry=self.registry
        )
        self.latency = Histogram(
            "dprag_http_request_duration_seconds", "time to answer", labels, buckets=BUCKETS, registry=self.registry
        )
        self.in_flight = Gauge("dprag_http_requests_in_flight", "requests being answered", registry=self.registry)
        self.errors = Counter(
            "dprag_http_errors", "error answers by the wire's error type", ("route", "type"), registry=self.registry
        )
        self.log: logging.Logger | None = None
        if access_log is not None:
            self.log = logging.getLogger(f"dprag.access.{id(self)}")
            self.log.propagate = False  # never into uvicorn's or the root's handlers
            self.log.setLevel(logging.INFO)
            handler = logging.StreamHandler(access_log)
            handler.setFormatter(logging.Formatter("%(message)s"))
            self.log.addHandler(handler)

    def watch(self, svc: ProviderService) -> None:
        """Add the store-backed gauges of ``svc`` (``ServiceCollector``) to the registry."""
        self.registry.register(ServiceCollector(svc))

    def access(self, record: Mapping[str, str | int | float | None]) -> None:
        if self.log is not None:
            self.log.info(json.dumps(record, separators=(",", ":")))

    def close(self) -> None:
        if self.log is not None:
            for h in list(self.log.handlers):
                h.flush()
                self.log.removeHandler(h)


def error_type(body: bytes) -> str:
    """The wire's error type of an error body (``{"error": {"type": ...}}``), or ``error`` if it holds none: only
    that word is kept (the body's other fields never reach the metrics or the log)."""
    try:
        doc = json.loads(body)
        kind = doc["error"]["type"]
    except (ValueError, KeyError, TypeError):
        return "error"
    return kind if isinstance(kind, str) and kind.isidentifier() and len(kind) <= 40 else "error"


def _route(scope: Scope) -> str:
    """The matched route's template (``/v1/answers/{counter}``), or ``unmatched``: never the request's own path."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


class Observed:
    """ASGI middleware: each HTTP request of the wrapped app counted, timed, spanned and logged (module docstring)."""

    def __init__(self, app: ASGIApp, telemetry: Telemetry):
        self.app = app
        self.t = telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t = self.t
        method = str(scope.get("method", ""))
        request_id = secrets.token_hex(8)
        sent = {"status": 500, "bytes": 0}
        peek = bytearray()  # the start of an error's body: its type (``error_type``)
        start = time.perf_counter()

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent["status"] = int(message["status"])
            elif message["type"] == "http.response.body":
                body = message.get("body", b"")
                sent["bytes"] += len(body)
                if sent["status"] >= 400 and len(peek) < ERROR_BODY_PEEK:
                    peek.extend(body[: ERROR_BODY_PEEK - len(peek)])
            await send(message)

        t.in_flight.inc()
        parent = nullcontext() if isinstance(t.tracer, NoTracer) else caller_trace(scope)  # the caller's trace (W3C)
        attributes = {"http.request.method": method}
        with parent, t.tracer.start_as_current_span(f"HTTP {method}", attributes=attributes) as span:
            try:
                await self.app(scope, receive, counting_send)
            finally:
                t.in_flight.dec()
                seconds = time.perf_counter() - start
                route, status = _route(scope), sent["status"]
                outcome = error_type(bytes(peek)) if status >= 400 else None
                span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status)
                if isinstance(outcome, str):
                    span.set_attribute("dprag.error_type", outcome)
                    t.errors.labels(route, outcome).inc()
                t.requests.labels(route, method, str(status)).inc()
                t.latency.labels(route, method).observe(seconds)
                t.access(
                    {
                        "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
                        "kind": "access",
                        "request_id": request_id,
                        "method": method,
                        "route": route,
                        "status": status,
                        "error": outcome if isinstance(outcome, str) else None,
                        "duration_ms": round(seconds * 1000, 3),
                        "bytes_out": sent["bytes"],
                    }
                )


class ServiceCollector(Collector):
    """The store-backed gauges of one service, read at scrape time: whether the store answers, its schema version,
    the ledger's size, the served rows, and per tenant its documents and those that cannot pay one more query."""

    def __init__(self, svc: ProviderService):
        self.svc = svc

    def describe(self) -> list[Metric]:
        return []  # read at scrape time only: describing would read the store at registration

    def collect(self) -> Iterator[Metric]:
        svc = self.svc
        info = InfoMetricFamily("dprag_window", "the window this process serves")
        info.add_metric([], {"window": svc.policy.window, "store": svc.store.dialect})
        yield info
        up = GaugeMetricFamily("dprag_store_up", "1 if the store answered this scrape's read, else 0")
        version = getattr(svc.store, "schema_version", None)
        if isinstance(version, int):
            yield GaugeMetricFamily("dprag_store_schema_version", "the store's schema version", value=version)
        try:
            size, served, pending, per_tenant = store_figures(svc)
        except DpragError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield GaugeMetricFamily("dprag_ledger_size", "leaves in the window's ledger", value=size)
        yield GaugeMetricFamily("dprag_served_requests", "requests recorded (answered or pending)", value=served)
        yield GaugeMetricFamily(
            "dprag_pending_answers", "requests recorded whose answer is not stored yet (nor voided)", value=pending
        )
        docs = GaugeMetricFamily("dprag_documents", "documents of a tenant", labels=["tenant"])
        gone = GaugeMetricFamily(
            "dprag_documents_exhausted", "documents that cannot pay one more query's charge", labels=["tenant"]
        )
        for tenant, (n, exhausted) in sorted(per_tenant.items()):
            docs.add_metric([tenant], n)
            gone.add_metric([tenant], exhausted)
        yield docs
        yield gone


def store_figures(svc: ProviderService) -> tuple[int, int, int, dict[str, tuple[int, int]]]:
    """The ledger's size, the served rows, those whose answer is pending (recorded, neither answered nor voided)
    and, per tenant, (documents, exhausted documents), in one snapshot of the store (``StoreUnavailableError`` if it
    does not answer)."""
    cost = svc.epochs[-1].policy.query_cost()
    with svc.store.snapshot():
        size = svc.ledger.size
        served = svc.aud.served_count()
        pending = svc.aud.pending_count()
        per_tenant: dict[str, tuple[int, int]] = {}
        for name, tenant in svc.tenants.items():
            n = len(tenant.retriever)
            ok = tenant.filter.can_afford(np.arange(n), cost) if n else np.zeros(0, dtype=bool)
            per_tenant[name] = (n, int(n - int(np.count_nonzero(ok))))
    return size, served, pending, per_tenant
