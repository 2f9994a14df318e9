"""The admin listener of ``dprag serve`` (spec/provider.md §7): ``/metrics`` (Prometheus text format) and ``/status``
(JSON, what ``dprag serve status`` prints), on a listener of its own, never on the public port.

Operator-only: what it serves depends on the corpus (documents exhausted, answers pending, latencies) and no ε covers
it. ``dprag serve`` binds it to loopback by default, and refuses to bind it anywhere else without a bearer token;
with a token every request must carry ``Authorization: Bearer <token>`` (compared in constant time), else 401.
"""

from __future__ import annotations

import hmac
import os
import time
from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from starlette.types import ASGIApp, Receive, Scope, Send

from dprag.errors import DpragError, InvalidParameterError

from ...protocol.wire import API_VERSION
from .observe import Telemetry, store_figures

if TYPE_CHECKING:
    from ..service import ProviderService

__all__ = ["MIN_TOKEN_LENGTH", "create_admin_app"]

#: a bearer token shorter than this is refused (``create_admin_app``)
MIN_TOKEN_LENGTH = 16


class _Bearer:
    """ASGI middleware: 401 unless the request carries ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                await JSONResponse(
                    {"error": {"type": "unauthenticated", "rule": "the admin listener needs its bearer token"}},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_admin_app(svc: ProviderService, telemetry: Telemetry, *, token: str | None = None) -> FastAPI:
    """The admin app over ``svc`` and the process's ``telemetry`` (whose registry gains the process, platform, GC and
    store collectors). ``token``: the bearer token every request must carry (None: none, for a loopback bind)."""
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise InvalidParameterError("admin_token", f"must be at least {MIN_TOKEN_LENGTH} characters")
    reg = telemetry.registry
    ProcessCollector(registry=reg)
    PlatformCollector(registry=reg)
    GCCollector(registry=reg)
    telemetry.watch(svc)
    app = FastAPI(title="dprag admin", docs_url=None, redoc_url=None, openapi_url=None)
    if token is not None:
        app.add_middleware(_Bearer, token=token)

    @app.get("/metrics")
    def metrics() -> Response:  # a sync handler: the scrape reads the store in a worker thread
        return Response(generate_latest(reg), media_type=CONTENT_TYPE_LATEST)

    @app.get("/status")
    def status() -> JSONResponse:
        store: dict[str, object] = {
            "dialect": svc.store.dialect,
            "describe": svc.store.describe(),  # never a password (ServiceStore.describe)
            "schema_version": getattr(svc.store, "schema_version", None),
        }
        out: dict[str, object] = {
            "api": API_VERSION,
            "window": svc.policy.window,
            "epoch": svc.epochs[-1].number,
            "pid": os.getpid(),
            "uptime_seconds": round(time.time() - telemetry.started, 1),
            "in_flight": _in_flight(telemetry),
            "store": store,
        }
        try:
            size, served, pending, per_tenant = store_figures(svc)
        except DpragError as e:
            store.update(up=False, error=str(e)[:300])
            return JSONResponse(out)
        store["up"] = True
        out.update(
            ledger_size=size,
            served_requests=served,
            pending_answers=pending,
            tenants={t: {"documents": n, "exhausted": x} for t, (n, x) in sorted(per_tenant.items())},
        )
        return JSONResponse(out)

    return app


def _in_flight(telemetry: Telemetry) -> int:
    """The requests the public app is answering now (the in-flight gauge's one sample)."""
    for metric in telemetry.in_flight.collect():
        for sample in metric.samples:
            return int(sample.value)
    return 0
