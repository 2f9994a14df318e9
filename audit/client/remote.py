"""The account's and the auditor's side of ``dprag serve`` over HTTP (httpx: one connection pool per
``RemoteService``, kept alive between requests).

``RemoteService(urls, account=..., key=...)`` stands where a ``ProviderService`` stands for ``AccountClient``:
``serve(req)`` and ``ledger.consistency_proof(lo, hi)``, raising the same typed errors (``RequestError`` and
``RateLimitError`` with the provider's signed refusal, ``AnswerPendingError``, ``StoreUnavailableError``). A request
is resent, byte for byte, while the service answers 503, cannot be reached or cuts its response off (a replica
killed, the database restarting), to the next URL of ``urls`` each time, up to ``attempts`` times: a retry of the
same signed request is idempotent (spec/protocol.md §5.3), so every request is answered exactly once. What comes
back is the service's word only: ``AccountClient`` checks it before anything is shown (``send``; ``fetch`` for a
stored answer, which ``answer_unchecked`` merely transports).

``fetch_bundle(url, out, auditor_key=...)``: the auditor downloads the bundle cut at a signed checkpoint.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, cast, overload
from urllib.parse import urlencode

import httpx

from dprag.errors import DpragError, InvalidParameterError

from ..protocol.encoding import JSON, EncodingError, loads_bounded
from ..protocol.errors import AnswerPendingError, RateLimitError, RequestError, StoreUnavailableError
from ..protocol.ledger.proof import ConsistencyProof
from ..protocol.wire import AUDITOR, auth_header, untar_bundle

if TYPE_CHECKING:
    from ..protocol.request import Request

    class _Signer(Protocol):
        """An ``AccountKey``-like signer: ``sign(message) -> signature bytes``."""

        def sign(self, message: bytes, /) -> bytes: ...

    #: (key id, its sign function): what an authenticated call signs with
    _Auth = tuple[str, Callable[[bytes], bytes]]

__all__ = ["RemoteService", "RemoteError", "collect_consistency", "fetch_bundle"]


def _error_of(body: JSON) -> dict[str, JSON]:
    """The ``error`` object of an error body (``{"error": {"type", "field", "rule", ...}}``), or {}."""
    err = body.get("error") if isinstance(body, dict) else None
    return err if isinstance(err, dict) else {}


def _text(value: JSON, default: str) -> str:
    """``value`` if it is a non-empty string, else ``default``."""
    return value if isinstance(value, str) and value else default


class RemoteError(DpragError):
    """The service answered with an error that is neither a refusal nor retryable (its status and body)."""

    def __init__(self, status: int, body: JSON, url: str):
        self.status, self.body = status, body
        err = _error_of(body)
        super().__init__(f"{url}: HTTP {status} {err.get('type', '')}: {err.get('rule', '')}".strip())


class _RemoteLedger:
    def __init__(self, remote: RemoteService):
        self._remote = remote

    def consistency_proof(self, size1: int, size2: int) -> ConsistencyProof:
        body = self._remote.get("/v1/consistency", {"first": int(size1), "second": int(size2)}, auth=True)
        return _consistency_proof(body)


class RemoteService:
    """A provider's service at ``urls`` (one URL or several replicas), for one account (see module docstring)."""

    def __init__(
        self,
        urls: str | Iterable[str],
        *,
        account: str | None = None,
        key: _Signer | None = None,
        attempts: int = 8,
        timeout: float = 120.0,
    ):
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        if not self.urls or not all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in self.urls):
            raise InvalidParameterError("url", "must be one or more http(s):// URLs", urls)
        self.urls = [u.rstrip("/") for u in self.urls]
        self.account, self.key = account, key
        self.attempts, self.timeout = int(attempts), float(timeout)
        self._next = 0
        #: one pool of kept-alive connections for every call (proxies from the environment, as urllib took them; no
        #: redirect followed: a request is signed for its path)
        self._http = httpx.Client(timeout=self.timeout, follow_redirects=False)
        self.ledger = _RemoteLedger(self)
        #: ``serve(req, since=N)`` brings the consistency proof from size N with the answer (one round trip)
        self.serves_consistency = True
        #: how many sends were retries (503 or unreachable): for the fault tests and benchmarks
        self.retries = 0

    def close(self) -> None:
        """Close the kept-alive connections (also on garbage collection, and at the end of a ``with`` block)."""
        self._http.close()

    def __enter__(self) -> RemoteService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------------------------------
    def _url(self) -> str:
        u = self.urls[self._next % len(self.urls)]
        return u

    @overload
    def call(
        self, method: str, path: str, body: bytes = b"", auth_as: _Auth | None = None, raw: Literal[False] = False
    ) -> tuple[int, JSON]: ...

    @overload
    def call(
        self, method: str, path: str, body: bytes = b"", auth_as: _Auth | None = None, *, raw: Literal[True]
    ) -> tuple[int, JSON | bytes]: ...

    def call(
        self, method: str, path: str, body: bytes = b"", auth_as: _Auth | None = None, raw: bool = False
    ) -> tuple[int, JSON | bytes]:
        """(status, parsed JSON body or, with ``raw``, the bytes of a 200), retried on 503 and on connection
        failures. An error's body is parsed (None if it is not JSON), ``raw`` or not."""
        pause = 0.05
        last: Exception | None = None
        for attempt in range(self.attempts):
            url = self._url()
            headers = {"Content-Type": "application/json"} if body else {}
            if auth_as is not None:
                key_id, sign = auth_as
                headers["Authorization"] = auth_header(key_id, sign, method, path, body)
            try:
                r = self._http.request(method, url + path, content=body or None, headers=headers)
                data, status = r.content, r.status_code
                if 200 <= status < 300:
                    if raw:
                        return status, data
                    try:
                        parsed: JSON = loads_bounded(data, what="response")
                        return status, parsed
                    except EncodingError as e:  # not JSON, or nested too deep: the service's defect, not resent
                        raise _malformed(status, f"a {status} response that is not JSON ({e})"[:300], url) from None
                try:
                    error: JSON = loads_bounded(data, what="response")
                except EncodingError:
                    error = None
                if status != 503:
                    return status, error
                last = _unavailable(error, url)
            except (httpx.ConnectError, httpx.TimeoutException, httpx.NetworkError, OSError) as e:
                last = StoreUnavailableError(f"{url}: unreachable ({type(e).__name__}: {e})")
            except (httpx.RemoteProtocolError, httpx.DecodingError) as e:
                # a response cut off by a replica that died while sending it (an incomplete body, a bad status
                # line): whether or not the request was served, resending the same signed bytes is idempotent
                last = StoreUnavailableError(f"{url}: the response was cut off ({e!r})")
            if attempt < self.attempts - 1:
                self.retries += 1
                self._next += 1  # the next replica, if there are several
                time.sleep(pause)
                pause = min(2 * pause, 2.0)
        assert last is not None
        raise last

    def _account_auth(self) -> _Auth:
        if self.account is None or self.key is None:
            raise InvalidParameterError("key", "an account and its key are needed for this call")
        return (self.account, self.key.sign)

    def get(self, path: str, params: dict[str, int] | None = None, *, auth: bool = False) -> JSON:
        target = path + (f"?{urlencode(params)}" if params else "")
        status, body = self.call("GET", target, auth_as=self._account_auth() if auth else None)
        if status != 200:
            raise RemoteError(status, body, self._url())
        return body

    # -- what AccountClient uses -------------------------------------------------------------------------------
    def serve(self, req: Request, since: int | None = None) -> _Served:
        payload = json.dumps(req.to_json(), sort_keys=True, separators=(",", ":")).encode()
        path = "/v1/requests" + (f"?since={int(since)}" if since else "")
        status, body = self.call("POST", path, payload)
        if status == 200:
            proof = body.pop("consistency", None) if isinstance(body, dict) else None
            served = _served(body, self._url())
            if proof is not None:
                try:
                    served.consistency = _consistency_proof(proof)
                except Exception:  # noqa: BLE001 - a malformed proof: the client asks for one itself
                    served.consistency = None
            return served
        err = _error_of(body)
        refusal = err.get("refusal")
        if status == 429:
            e: RateLimitError | RequestError = RateLimitError(_text(err.get("rule"), "rate limited"))
            e.refusal = refusal if isinstance(refusal, dict) else None
            raise e
        if status == 400 and err.get("type") == "refused":
            e = RequestError(_text(err.get("field"), "request"), _text(err.get("rule"), "refused"))
            e.refusal = refusal if isinstance(refusal, dict) else None
            raise e
        raise RemoteError(status, body, self._url())

    def info(self) -> JSON:
        return self.get("/v1/info")

    def key_history(self) -> JSON:
        """``GET /v1/keys``: the provider's keys along the log, each rotation with the proof that follows it
        (unchecked here: ``AccountClient.follow_rotations`` checks every proof from the key it trusts)."""
        return self.get("/v1/keys")

    def answer_unchecked(self, counter: int) -> _Served:
        """The raw transport call ``GET /v1/answers/{counter}``: the stored answer of this account's request
        ``counter`` exactly as the service sent it, NOT checked (RemoteError 404 until it is stored). Never show it:
        ``AccountClient.fetch(remote, counter)`` fetches it and checks it as a served answer is checked."""
        return _served(self.get(f"/v1/answers/{int(counter)}", auth=True), self._url())

    def checkpoint(self, size: int | None = None) -> JSON:
        params = None if size is None else {"size": int(size)}
        return self.get("/v1/checkpoint", params, auth=True)


def _unavailable(parsed: JSON, url: str) -> Exception:
    err = _error_of(parsed)
    if err.get("type") == "answer_pending":
        pos = err.get("pos", 0)
        return AnswerPendingError(int(pos) if isinstance(pos, (int, str)) else 0)
    return StoreUnavailableError(f"{url}: {err.get('type', 'unavailable')}: {err.get('rule', '')}")


def _served(body: JSON | bytes, url: str) -> _Served:
    """A 200 body of the wire form ``{answer, citations, receipt, pos}`` (its content is checked by the account)."""
    if not isinstance(body, dict) or set(body) != set(_Served.__slots__) - {"consistency"}:
        raise _malformed(200, "a 200 response that is not {answer, citations, receipt, pos}", url)
    return _Served(body["answer"], body["citations"], body["receipt"], body["pos"])


def _consistency_proof(body: JSON) -> ConsistencyProof:
    """The consistency proof a JSON body holds (``MalformedProofError`` if it holds none)."""
    fields: dict[str, object] = {**body} if isinstance(body, dict) else {}
    return ConsistencyProof.from_json_dict(fields)


def _malformed(status: int, rule: str, url: str) -> RemoteError:
    """A response the client cannot take (its body is not JSON, or not of the expected form): not resent."""
    return RemoteError(status, {"error": {"type": "malformed", "field": "response", "rule": rule}}, url)


class _Served:
    """What a served request looks like to the account (the fields of ``ServedQuery``), as the service sent it: only
    ``AccountClient.accept`` checks it."""

    __slots__ = ("answer", "citations", "receipt", "pos", "consistency")

    def __init__(self, answer: JSON, citations: JSON, receipt: JSON, pos: JSON):
        self.answer, self.citations, self.receipt, self.pos = answer, citations, receipt, pos
        self.consistency: ConsistencyProof | None = None

    def to_dict(self) -> dict[str, JSON]:
        return {"answer": self.answer, "citations": self.citations, "receipt": self.receipt, "pos": self.pos}


def fetch_bundle(
    url: str,
    out: Path,
    *,
    auditor_key: _Signer | None = None,
    max_bytes: int = 8 << 30,
    public_only: bool = False,
    since: int = 0,
) -> Path:
    """Download the bundle (cut at a freshly signed checkpoint) into the new directory ``out``. ``auditor_key`` (an
    ``AccountKey``-like signer) authenticates the confidential part; ``public_only`` fetches ``public/`` alone;
    ``since``: only the log from that size on (the auditor's state holds the rest, spec/protocol.md §8.14)."""
    remote = RemoteService(url)
    part = "public" if public_only else "all"
    auth = None if public_only else (AUDITOR, cast("_Signer", auditor_key).sign)  # needed unless public_only
    query = urlencode({"part": part, **({"since": int(since)} if since else {})})
    status, data = remote.call("GET", f"/v1/bundle?{query}", auth_as=auth, raw=True)
    if status != 200 or not isinstance(data, bytes):
        body: JSON = None
        if isinstance(data, bytes):
            try:
                body = loads_bounded(data, what="response")
            except EncodingError:
                body = None
        else:
            body = data  # an error's body, parsed by ``call``
        raise RemoteError(status, body, url)
    return untar_bundle(data, Path(out), max_bytes)


def collect_rotations(url: str, bundle_size: int) -> list[bytes]:
    """The provider key rotations at or beyond ``bundle_size`` (``GET /v1/keys``, public), as the lines of a
    bundle's ``auditor/rotations.jsonl`` (``{"rotation": proof}``, spec/protocol.md §3.3): a receipt signed beyond
    the bundle by a key rotated in after the cut is checked under the key the verifier follows with them. The
    proofs are self-verifying; one that does not follow is the verdict's rejected evidence."""
    status, body = RemoteService(url).call("GET", "/v1/keys")
    rotations = body.get("rotations") if isinstance(body, dict) else None
    if status != 200 or not isinstance(rotations, list):
        raise RemoteError(status, body, url)
    out = []
    for proof in rotations:
        pos = proof.get("pos") if isinstance(proof, dict) else None
        if isinstance(pos, int) and not isinstance(pos, bool) and pos >= bundle_size:
            out.append(json.dumps({"rotation": proof}, sort_keys=True, separators=(",", ":")).encode())
    return out


def collect_consistency(url: str, bundle_size: int, receipt_sizes: list[int], *, auditor_key: _Signer) -> list[bytes]:
    """The consistency proofs from ``bundle_size`` to each receipt size beyond it (``GET /v1/consistency``, as the
    auditor), as the lines of a bundle's ``auditor/consistency.jsonl`` (spec/protocol.md §8.6): a receipt signed
    beyond the bundle is checked with one, and without one the verdict is INCOMPLETE. A size the provider cannot
    prove (its log does not extend the bundle's to it) gets no line: the verdict then names it."""
    remote = RemoteService(url)
    out = []
    for size in sorted({s for s in receipt_sizes if s > bundle_size}):
        target = f"/v1/consistency?{urlencode({'first': int(bundle_size), 'second': int(size)})}"
        status, body = remote.call("GET", target, auth_as=(AUDITOR, auditor_key.sign))
        if status != 200 or not isinstance(body, dict):
            continue
        try:
            proof = _consistency_proof(body)
        except Exception:  # noqa: BLE001 - not a proof: the verdict names the unproven size
            continue
        out.append(json.dumps(proof.to_json_dict(), sort_keys=True, separators=(",", ":")).encode())
    return out
