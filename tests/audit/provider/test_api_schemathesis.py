"""schemathesis against the published OpenAPI document (spec/openapi.json), in process over ASGI, with a hook that
signs what it generates with the toy accounts' keys — the request's signature and h_q for submissions, the
Authorization header for fetches — so the fuzz reaches past the signature checks into admission, the counter rules,
serving and the fetches. Every response must be documented, conform to its schema, and none may be a 5xx; schemathesis'
checks all run except positive_data_acceptance (a schema-valid request may be refused on protocol grounds, below).

CI runs ``EXAMPLES`` examples per operation and generation mode (positive: what the schema allows; negative: what it
does not), derandomized by hypothesis' ci profile; ``DPRAG_SCHEMATHESIS_EXAMPLES`` raises it for a long run.

The cases come from schemathesis' documented Hypothesis strategies (``operation.as_strategy``), one pytest case per
operation and mode listed in spec/openapi.json, not from its pytest plugin's lazy loader (``pytest.from_fixture``),
which reads a private attribute of pytest's nodes that pytest 9.2 removed."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from urllib.parse import urlencode

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import positive_data_acceptance  # noqa: E402

from dprag.audit.protocol.encoding import encode  # noqa: E402
from dprag.audit.protocol.request import REQUEST_DOMAIN, AccountKey, qemb_commitment, question_commitment  # noqa: E402
from dprag.audit.protocol.wire import AUDITOR, auth_header  # noqa: E402

EXAMPLES = int(os.environ.get("DPRAG_SCHEMATHESIS_EXAMPLES", "25"))
_HEX = re.compile(r"^[0-9a-f]*$")
STATE: dict = {}
#: every (method, path) of the published document with each generation mode it has data for: one test case each
#: (an operation with no parameter and no body has no negative case)
_SPEC = json.loads((Path(__file__).parents[3] / "spec" / "openapi.json").read_text())
CASES = sorted(
    (method.upper(), path, mode)
    for path, item in _SPEC["paths"].items()
    for method, op in item.items()
    if method in ("get", "post", "put", "patch", "delete")
    for mode in ("positive", "negative")
    if mode == "positive" or op.get("parameters") or op.get("requestBody")
)


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory):
    from dprag.audit.provider.http.app import create_app
    from dprag.audit.testing.toy import make_toy_directory

    d = tmp_path_factory.mktemp("fuzz")
    svc = make_toy_directory(d, n=40, accounts=4, seed=b"\x09" * 32)
    keys = {a: AccountKey.from_hex((d / "accounts" / a / "account.key").read_text().strip()) for a in svc.registry}
    keys[AUDITOR] = AccountKey.from_hex((d / "auditor.key").read_text().strip())
    STATE.update(svc=svc, keys=keys, window=svc.policy.window, stats={"calls": 0, "by_status": {}})
    app = create_app(svc, auditor_key=keys[AUDITOR].vkey)
    yield schemathesis.openapi.from_asgi("/v1/openapi.json", app)
    svc.close()


def _pick(seed: str, names: list[str]) -> str:
    return names[int.from_bytes(hashlib.sha256(seed.encode()).digest()[:4], "big") % len(names)]


def sign_case(case) -> None:
    """The signing hook: make what schemathesis generated carry valid signatures by a toy account."""
    keys, window = STATE["keys"], STATE["window"]
    accounts = sorted(k for k in keys if k != AUDITOR)
    if case.method.upper() == "POST" and isinstance(case.body, dict):
        req, question = case.body.get("request"), case.body.get("question")
        if isinstance(req, dict) and isinstance(question, str):
            account = _pick(question, accounts)
            req = dict(req, account=account)
            if _pick(question + "w", ["keep", "ours", "ours"]) == "ours":
                req["window"] = window  # most generated requests name this window, some another
            if _pick(question + "c", ["keep", "next", "next"]) == "next":  # most take the account's next counter
                req["counter"] = STATE["svc"].aud.last_counter(account) + 1
            if _pick(question + "q", ["keep", "none"]) == "none":  # Q on trust: no qemb, no h_qemb
                case.body = dict(case.body, qemb=None)
                req["h_qemb"] = None
            nonce = req.get("nonce")
            if isinstance(nonce, str) and len(nonce) == 32 and _HEX.match(nonce):
                try:
                    req["h_q"] = question_commitment(bytes.fromhex(nonce), question)
                    qemb = case.body.get("qemb")
                    if isinstance(qemb, str) and len(qemb) % 4 == 0 and _HEX.match(qemb):
                        req["h_qemb"] = qemb_commitment(bytes.fromhex(nonce), bytes.fromhex(qemb))
                except Exception:  # noqa: BLE001 - an unencodable question keeps its generated h_q
                    pass
            body = {k: v for k, v in req.items() if k != "sig"}
            try:
                req["sig"] = keys[account].sign(REQUEST_DOMAIN + encode(body)).hex()
            except Exception:  # noqa: BLE001 - a body the canonical encoding refuses keeps its generated signature
                pass
            case.body = dict(case.body, request=req)
    elif case.method.upper() == "GET" and case.path != "/v1/info":
        who = AUDITOR if case.path == "/v1/bundle" else _pick(repr(case.path_parameters) + repr(case.query), accounts)
        path = case.formatted_path
        query = urlencode(case.query or {}, doseq=True)
        target = path + (f"?{query}" if query else "")
        case.headers = dict(case.headers or {}, Authorization=auth_header(who, keys[who].sign, "GET", target))


def check_case(case) -> None:
    """One generated call: signed by the hook, answered without a 5xx, documented and conforming to its schema."""
    sign_case(case)
    response = case.call()
    STATE["stats"]["calls"] += 1
    by = STATE["stats"]["by_status"]
    by[response.status_code] = by.get(response.status_code, 0) + 1
    assert response.status_code < 500, (response.status_code, response.text[:300])
    # every check but positive_data_acceptance: a request valid by the schema may still be refused on protocol
    # grounds (a counter that is not the next, another window) — that refusal is the documented, signed 400
    case.validate_response(response, excluded_checks=[positive_data_acceptance])
    if response.status_code >= 400:
        body = response.json()
        assert set(body) == {"error"} and {"type", "field", "rule"} <= set(body["error"]), body


@pytest.mark.parametrize("method,path,mode", CASES, ids=[f"{m} {p} {g}" for m, p, g in CASES])
def test_api_conforms_and_never_fails_on_the_server(api_schema, method, path, mode):
    operation = api_schema[path][method]

    @given(case=operation.as_strategy(generation_mode=GenerationMode(mode)))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    def fuzz(case):
        check_case(case)

    fuzz()


def test_the_fuzz_reached_past_the_signature_checks():
    """Runs after the fuzz (file order): some generated submissions were served (200) and some fetches authenticated,
    so the signing hook did its work — a fuzz that only ever met 400 and 401 would test nothing deep."""
    stats = STATE.get("stats")
    if not stats or not stats["calls"]:
        pytest.skip("the schemathesis test did not run in this session")
    svc = STATE["svc"]
    print(f"schemathesis: {stats['calls']} calls, by status {dict(sorted(stats['by_status'].items()))}")
    assert svc.ledger.size > 1, "no generated request was served"
    assert stats["by_status"].get(200, 0) > 0 and not any(code >= 500 for code in stats["by_status"])
