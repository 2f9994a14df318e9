"""``dprag serve``: the provider's HTTP API on FastAPI (spec/api.md; the OpenAPI document is ``spec/openapi.json``).

One ``ProviderService`` per process serves every request: the handlers run its blocking calls in the worker
thread pool, so generation runs in parallel across requests while the store serialises each request's charge,
opening and leaf (spec/provider.md §6). Replicas are more processes, on this host or others, over the same store.

Every error is a JSON body ``{"error": {"type", "field", "rule", ...}}`` (``wire.error_body``) with its status:
400 refused (with the provider's signed refusal when the request can be named) or malformed, 401 unauthenticated,
404 not found, 413 too large, 429 rate limited (signed refusal), 503 answer pending, store unavailable or busy
(retry the same signed request; ``Retry-After``). A 500 is a defect of ours: its body names no more than the
exception type.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, TypeVarTuple, Unpack

import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI, Query
from fastapi import Path as PathParam
from fastapi import Request as HttpRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from dprag.errors import DpragError, InvalidParameterError

from ...protocol.encoding import EncodingError, loads_bounded
from ...protocol.errors import (
    AnswerPendingError,
    RateLimitError,
    RequestError,
    ServiceBusyError,
    ServiceStateError,
    StoreUnavailableError,
)
from ...protocol.request import Request
from ...protocol.wire import API_VERSION, AUDITOR, MAX_BODY, AuthError, check_auth, error_body, tar_directory
from . import schemas
from .observe import NoTracer, Observed, Telemetry, Tracer

if TYPE_CHECKING:
    from ..service import ProviderService
    from ..serving import ServedQuery

log = logging.getLogger("dprag.serve")
#: every integer the API takes (counters, ledger sizes) lies in [1, 2^53 - 1], as in the protocol's JSON
MAX_INT = 2**53 - 1

E = TypeVar("E", bound=Exception)
T = TypeVar("T")
Ts = TypeVarTuple("Ts")
#: an exception handler as Starlette takes it
Handler = Callable[[HttpRequest, Exception], Awaitable[JSONResponse]]


def _error(
    status: int,
    kind: str,
    rule: str,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: object,
) -> JSONResponse:
    return JSONResponse(error_body(kind, rule, field, **extra), status_code=status, headers=headers)


def _service(request: HttpRequest) -> ProviderService:
    """The service ``create_app`` put in the app's state."""
    svc: ProviderService = request.app.state.svc
    return svc


#: Retry the same signed request (503)
RETRY = {"Retry-After": "1"}


# -- one handler per error type: what each error of the wire's vocabulary answers (spec/api.md) ---------------------
async def _refused(request: HttpRequest, e: RequestError) -> JSONResponse:
    return _error(400, "refused", e.rule, e.field, refusal=e.refusal)


async def _rate_limited(request: HttpRequest, e: RateLimitError) -> JSONResponse:
    return _error(429, "rate_limited", e.rule, e.field, refusal=e.refusal)


async def _pending(request: HttpRequest, e: AnswerPendingError) -> JSONResponse:
    log.warning("answer of ledger position %d pending (operator log only): %s", e.pos, e.cause)
    return _error(503, "answer_pending", str(e), None, headers=RETRY, pos=e.pos)


async def _store_unavailable(request: HttpRequest, e: StoreUnavailableError) -> JSONResponse:
    return _error(503, "store_unavailable", str(e)[:300], None, headers=RETRY)


async def _busy(request: HttpRequest, e: ServiceBusyError) -> JSONResponse:
    return _error(503, "busy", ServiceBusyError.MESSAGE, None, headers=RETRY)  # fixed: nothing was charged


async def _invalid_parameter(request: HttpRequest, e: InvalidParameterError) -> JSONResponse:
    return _error(400, "refused", e.rule, e.field)


async def _service_state(request: HttpRequest, e: ServiceStateError) -> JSONResponse:
    log.error("service state: %s", e)
    return _error(500, "service_state", "the provider's state needs an operator; nothing was released")


async def _malformed(request: HttpRequest, exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0] if exc.errors() else {}
    field = ".".join(str(x) for x in first.get("loc", ())[1:]) or None
    return _error(400, "malformed", str(first.get("msg", "invalid request")), field)


async def _http(request: HttpRequest, exc: StarletteHTTPException) -> JSONResponse:
    kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return _error(exc.status_code, kind, str(exc.detail), headers=getattr(exc, "headers", None))


async def _internal(request: HttpRequest, exc: Exception) -> JSONResponse:
    log.exception("internal error serving %s %s", request.method, request.url.path)
    return _error(500, "internal", f"the provider failed ({type(exc).__name__}); nothing about it is public")


def _for(kind: type[E], handle: Callable[[HttpRequest, E], Awaitable[JSONResponse]]) -> Handler:
    """``handle`` as the handler of ``kind`` (Starlette calls it with an instance of ``kind`` only)."""

    async def handler(request: HttpRequest, exc: Exception) -> JSONResponse:
        if not isinstance(exc, kind):  # never: Starlette picks the handler by the exception's class
            raise exc
        return await handle(request, exc)

    return handler


HANDLERS: dict[type[Exception], Handler] = {
    RequestError: _for(RequestError, _refused),
    RateLimitError: _for(RateLimitError, _rate_limited),
    AnswerPendingError: _for(AnswerPendingError, _pending),
    ServiceBusyError: _for(ServiceBusyError, _busy),
    StoreUnavailableError: _for(StoreUnavailableError, _store_unavailable),
    InvalidParameterError: _for(InvalidParameterError, _invalid_parameter),
    ServiceStateError: _for(ServiceStateError, _service_state),
    RequestValidationError: _for(RequestValidationError, _malformed),
    StarletteHTTPException: _for(StarletteHTTPException, _http),
    Exception: _for(Exception, _internal),
}


def create_app(
    svc: ProviderService,
    *,
    auditor_key: str | None = None,
    threads: int | None = None,
    telemetry: Telemetry | None = None,
) -> FastAPI:
    """The API over ``svc`` (a ProviderService). ``auditor_key``: the auditor's Ed25519 public key (hex), which
    authenticates the confidential bundle export; without it that endpoint answers 404. ``threads``: how many of the
    service's blocking calls run at once in this process (None: anyio's default, 40); the others queue.
    ``telemetry``: where each request is counted, timed, spanned and logged for the operator (``observe.py``; its
    metrics are served by the admin listener, ``admin.py``, never by this app)."""
    if threads is not None and not (isinstance(threads, int) and 1 <= threads <= 1024):
        raise InvalidParameterError("threads", "must be an integer in [1, 1024]", threads)
    app = FastAPI(
        title="dprag provider API",
        version=API_VERSION,
        description="Signed requests in, signed answers and receipts out; the auditor's bundle (spec/api.md).",
        openapi_url="/v1/openapi.json",
        docs_url="/docs",  # the API's documentation on the public port (its OpenAPI document: /v1/openapi.json)
        redoc_url=None,
    )
    app.state.svc = svc
    if auditor_key is not None:
        svc.set_auditor_key(auditor_key)  # kept in the store: every replica serves the auditor's export
    auditor_key = auditor_key or svc.auditor_key()
    app.state.auditor_key = auditor_key
    app.state.keys = lambda key_id: auditor_key if key_id == AUDITOR else svc.account_key(key_id)
    app.state.threads = threads
    app.state.limiter = None  # made inside the event loop, on first use
    app.state.tracer = telemetry.tracer if telemetry is not None else NoTracer()
    for kind, handler in HANDLERS.items():
        app.add_exception_handler(kind, handler)
    app.include_router(router)
    if telemetry is not None:
        app.add_middleware(Observed, telemetry=telemetry)
    return app


async def run_in_threadpool(request: HttpRequest, fn: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
    """``fn(*args)`` in the worker thread pool, at most ``threads`` at once (create_app)."""
    state = request.app.state
    tracer: Tracer = state.tracer
    with tracer.start_as_current_span(f"dprag {getattr(fn, '__name__', 'call')}"):  # its queueing and its work
        if state.threads is None:
            return await anyio.to_thread.run_sync(fn, *args)
        if state.limiter is None:
            state.limiter = anyio.CapacityLimiter(state.threads)
        return await anyio.to_thread.run_sync(fn, *args, limiter=state.limiter)


async def _body(request: HttpRequest) -> bytes | JSONResponse:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
        return _error(413, "too_large", f"the body must be at most {MAX_BODY} bytes", "body")
    data = b""
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_BODY:
            return _error(413, "too_large", f"the body must be at most {MAX_BODY} bytes", "body")
    return data


async def _authed(request: HttpRequest, body: bytes = b"") -> str | JSONResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    try:
        return check_auth(request.headers.get("authorization"), request.method, target, body, request.app.state.keys)
    except AuthError as e:
        challenge = {"WWW-Authenticate": "Dprag-Ed25519"}
        return _error(401, "unauthenticated", e.rule, "authorization", headers=challenge)


def _known_query(request: HttpRequest) -> None:
    """Every query parameter is one the endpoint declares: an unknown one is a 400 naming it (FastAPI would ignore
    it, so a client's typo — ``?sinse=`` — would pass silently)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    known = {p.alias for p in dependant.query_params} if dependant is not None else set()
    for name in request.query_params:
        if name not in known:
            raise RequestValidationError(
                [{"loc": ("query", name[:64]), "msg": "is not a parameter of this endpoint", "type": "extra_forbidden"}]
            )


router = APIRouter(dependencies=[Depends(_known_query)])


@router.get("/healthz", responses=schemas.responses("Health"), tags=["operations"])
async def healthz(request: HttpRequest) -> JSONResponse:
    """Liveness: the process answers (it reads nothing, so it says nothing of the log or the store)."""
    return JSONResponse({"status": "ok"})


@router.get("/readyz", responses=schemas.responses("Health", 503), tags=["operations"])
async def readyz(request: HttpRequest) -> JSONResponse:
    """Readiness: the store answers (one trivial read); 503 with Retry-After while it does not, as every other
    endpoint then. Nothing of the log, its size or its load is in the answer."""
    svc = _service(request)

    def ping() -> None:
        with svc.store.read() as s:
            s.one("SELECT 1")

    await run_in_threadpool(request, ping)
    return JSONResponse({"status": "ready"})


@router.get("/v1/info", responses=schemas.responses("Info", 503), tags=["public"])
async def info(request: HttpRequest) -> JSONResponse:
    """The window this service serves: what an account pins (provider key, chain id) and the API version."""
    svc = _service(request)

    def read() -> dict[str, object]:
        return {
            "api": API_VERSION,
            "window": svc.policy.window,
            "origin": svc.origin,
            "provider_key": svc.signer.vkey(),
            "chain": svc.chain_id,
            "epoch": svc.epochs[-1].number,
            "tenants": sorted(svc.tenants),
        }

    return JSONResponse(await run_in_threadpool(request, read))


@router.post(
    "/v1/requests",
    openapi_extra=schemas.request_body("Submission"),
    responses=schemas.responses("Served", 400, 413, 429, 503),
    tags=["account"],
)
async def submit(request: HttpRequest, since: int | None = Query(None, ge=1, le=MAX_INT)) -> Response:
    """Submit an account-signed request, or retry one: the same signed bytes again return the stored answer
    (or finish one charged before a failure). A refusal carries the provider's signed refusal. ``since``: the
    size of the account's last receipt; the answer then carries the consistency proof from it to its receipt's."""
    svc = _service(request)
    body = await _body(request)
    if isinstance(body, JSONResponse):
        return body
    try:
        req = Request.from_json(loads_bounded(body, what="body"))
        if not isinstance(req.question, str):
            raise EncodingError("question: must be a string")
    except (ValueError, EncodingError, DpragError, UnicodeDecodeError) as e:
        return _error(400, "malformed", str(e)[:300], "body")

    def work() -> tuple[ServedQuery, dict[str, object] | None]:  # one hop to the worker thread: answer, then proof
        served = svc.serve(req)
        size = served.receipt.get("size")
        if since is None or not isinstance(size, int) or since == size:
            return served, None
        try:
            return served, svc.ledger.consistency_proof(*sorted((since, size))).to_json_dict()
        except StoreUnavailableError:
            raise
        except DpragError:
            return served, None  # a size the ledger does not have: the client's own check refuses the receipt

    served, proof = await run_in_threadpool(request, work)  # a refusal or a failure: its handler (HANDLERS)
    out: dict[str, object] = {**served.to_dict()}
    if proof is not None:
        out["consistency"] = proof
    return JSONResponse(out)


@router.get("/v1/answers/{counter}", responses=schemas.responses("Served", 400, 401, 404), tags=["account"])
async def answer(request: HttpRequest, counter: int = PathParam(ge=1, le=MAX_INT)) -> Response:
    """The stored answer and receipt of the authenticated account's request ``counter`` (404 until stored, and
    until its ``release_at`` when the policy sets a release period: spec/protocol.md §5.6)."""
    who = await _authed(request)
    if isinstance(who, JSONResponse):
        return who
    if who == AUDITOR:
        return _error(404, "not_found", "no stored answer for this account and counter", "counter")
    served = await run_in_threadpool(request, _service(request).released_answer, who, counter)
    if served is None:
        return _error(404, "not_found", "no stored answer for this account and counter", "counter")
    return JSONResponse(served)


@router.get("/v1/checkpoint", responses=schemas.responses("Checkpoint", 400, 401, 404), tags=["account"])
async def checkpoint(request: HttpRequest, size: int | None = Query(None, ge=1, le=MAX_INT)) -> Response:
    """A signed checkpoint note of the ledger (the latest, or of ``size``)."""
    who = await _authed(request)
    if isinstance(who, JSONResponse):
        return who
    notes = dict(await run_in_threadpool(request, _service(request).aud.checkpoints, 2**62))
    if not notes:
        return _error(404, "not_found", "no checkpoint is signed yet", "size")
    size = max(notes) if size is None else size
    if size not in notes:
        return _error(404, "not_found", "no checkpoint of that size was signed", "size")
    return JSONResponse({"size": size, "note": notes[size].decode()})


@router.get("/v1/keys", responses=schemas.responses("Keys", 503), tags=["public"])
async def keys(request: HttpRequest) -> JSONResponse:
    """The provider's keys along the log: genesis's, then each rotation with the proof that follows it from the
    outgoing key (spec/protocol.md §3.3). Public: a rotation is a leaf of the public log."""
    return JSONResponse(await run_in_threadpool(request, _service(request).key_history))


@router.get("/v1/consistency", responses=schemas.responses("Consistency", 400, 401, 503), tags=["account"])
async def consistency(
    request: HttpRequest, first: int = Query(ge=1, le=MAX_INT), second: int = Query(ge=1, le=MAX_INT)
) -> Response:
    """The RFC 6962 consistency proof between ledger sizes ``first`` <= ``second`` (both signed sizes or less)."""
    who = await _authed(request)
    if isinstance(who, JSONResponse):
        return who

    def prove() -> dict[str, object] | str:
        try:
            return _service(request).ledger.consistency_proof(first, second).to_json_dict()
        except StoreUnavailableError:
            raise  # transient (a restarting database): retryable (its handler), never a refusal
        except DpragError as e:
            return str(e)[:300]

    proof = await run_in_threadpool(request, prove)
    if isinstance(proof, str):
        return _error(400, "refused", proof, "first")
    return JSONResponse(proof)


@router.get("/v1/bundle", responses=schemas.responses("Archive", 400, 401, 404, 503), tags=["auditor"])
async def bundle(request: HttpRequest, part: str = "all", since: int = 0) -> Response:
    """The bundle cut at a freshly signed checkpoint, as a tar archive: ``part=public`` (anyone) or ``all`` (the
    confidential ``auditor/`` part too, authenticated by the auditor's key). ``since``: only the log from that size
    on (``public/range.json``; for an auditor's state, spec/protocol.md §8.14)."""
    if part not in ("public", "all"):
        return _error(400, "malformed", "part must be 'public' or 'all'", "part")
    if since < 0:
        return _error(400, "malformed", "since must be a ledger size (>= 0)", "since")
    if part == "all":
        if request.app.state.auditor_key is None:
            return _error(404, "not_found", "this service has no auditor key configured", "part")
        who = await _authed(request)
        if isinstance(who, JSONResponse):
            return who
        if who != AUDITOR:
            return _error(401, "unauthenticated", "only the auditor's key may fetch the confidential part", "key")
    svc = _service(request)

    def export() -> bytes | str:
        tmp = Path(tempfile.mkdtemp(prefix="dprag-bundle-"))
        try:
            out = svc.export_bundle(tmp / "bundle", since=since)
            return tar_directory(out, only="public" if part == "public" else None)
        except InvalidParameterError as e:
            return e.rule
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    data = await run_in_threadpool(request, export)
    if isinstance(data, str):
        return _error(400, "refused", f"since: {data}", "since")
    return Response(data, media_type="application/x-tar")
