"""Deeply nested JSON from outside the process (issue 36, item 3): an HTTP body, a hostile server's response, an
account's or an auditor's file, a bundle's genesis leaf or embedder file. Each is refused by name before the parser
recurses (``encoding.loads_bounded``): a 400 ``malformed`` on the API, the client's typed error, exit 2 with one
line on stderr from the CLI, a FAIL from the verifier -- never a RecursionError, a 500 or a traceback."""

from __future__ import annotations

import http.server
import json
import shutil
import threading
import time

import pytest

from dprag.audit.cli import main
from dprag.audit.client.remote import RemoteError, RemoteService
from dprag.audit.protocol import encoding
from dprag.audit.protocol.encoding import MAX_DEPTH, EncodingError
from dprag.audit.testing.window import client, open_service
from dprag.audit.verify import verify

DEEP_LIST = b"[" * 200_000
DEEP_OBJECT = b'{"a":' * 40_000
DEEP = {"list": DEEP_LIST, "object": DEEP_OBJECT}


# -- the parser ---------------------------------------------------------------------------------------------------


def test_loads_bounded_refuses_one_level_past_max_depth_by_name():
    loads = getattr(encoding, "loads_bounded", None)
    assert loads is not None, "encoding.loads_bounded is missing"
    at_limit = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert loads(at_limit, what="w") == json.loads(at_limit)
    assert loads(b'{"a":' * (MAX_DEPTH - 1) + b"{}" + b"}" * (MAX_DEPTH - 1), what="w") is not None
    for deeper in (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), DEEP_LIST, DEEP_OBJECT, DEEP_LIST.decode()):
        with pytest.raises(EncodingError, match=r"^the thing: nesting deeper than"):
            loads(deeper, what="the thing")
    # brackets inside strings are not nesting, escaped quotes do not end a string
    inside = json.dumps({"s": "[" * 500 + '\\"{' * 300, "t": ["{" * 100]}).encode()
    assert loads(inside, what="w") == json.loads(inside)
    # otherwise as lenient as json.loads: floats, duplicate keys, whitespace, a UTF-8 BOM
    assert loads(b'\xef\xbb\xbf {"x": 1.5, "x": [2e3, -0.0]} ', what="w") == {"x": [2000.0, -0.0]}
    for bad, rule in ((b"\xff[]", "invalid UTF-8"), (b"[1,", "not valid JSON"), (b"[] x", "not valid JSON")):
        with pytest.raises(EncodingError, match=f"^w: {rule}"):
            loads(bad, what="w")


def test_the_nesting_check_is_linear_on_an_unterminated_string_of_escaped_quotes():
    """The depth pre-check strips string literals first; a backtracking pattern retried from each quote of
    ``"\\"\\"\\"...`` (never terminated) took quadratic time: seconds for 48 KB, minutes for the API's 256 KB.
    No absolute time is asserted: the cost of 8x the input is compared with the cost of the input, best of 5 each,
    side by side. Linear gives ~8x, quadratic ~64x (the parent: 4 s at 32 KB, minutes at 256 KB); the bound 24x
    leaves a 3x margin either way for a loaded machine."""

    def cost(n: int) -> float:
        hostile = b"[" * (MAX_DEPTH + 1) + b'"' + b'\\"' * n
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            with pytest.raises(EncodingError):
                encoding.decode(hostile, what="w")
            best = min(best, time.perf_counter() - t)
        return best

    small, large = cost(16_000), cost(128_000)
    assert large / small < 24, (small, large)


# -- the API ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from dprag.audit.provider.http.app import create_app
    from dprag.audit.testing.toy import make_toy_directory

    d = tmp_path_factory.mktemp("toy")
    svc = make_toy_directory(d, n=4, accounts=2, seed=b"\x07" * 32)
    with TestClient(create_app(svc), raise_server_exceptions=False) as tc:
        yield d, svc, tc
    svc.close()


@pytest.mark.parametrize("kind", sorted(DEEP))
def test_a_deeply_nested_submission_is_a_400_malformed_and_records_nothing(api, kind, caplog):
    from dprag.audit.client.account import AccountClient
    from dprag.audit.protocol.request import AccountKey
    from dprag.audit.testing.toy import HashEmbedder

    d, svc, tc = api
    size = svc.ledger.size
    r = tc.post("/v1/requests", content=DEEP[kind], headers={"Content-Type": "application/json"})
    assert r.status_code == 400, (r.status_code, r.text[:300])
    err = r.json()["error"]
    assert err["type"] == "malformed" and err["field"] == "body" and "nesting" in err["rule"], err
    assert svc.ledger.size == size
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text
    # the app still serves a normal request afterwards
    account = sorted(svc.registry)[sorted(DEEP).index(kind)]  # one account per case: each signs counter 1
    c = AccountClient(
        account,
        svc.policy.window,
        AccountKey.from_hex((d / "accounts" / account / "account.key").read_text().strip()),
        provider_vkey=svc.signer.vkey(),
        embedder=HashEmbedder(32),
        embedding_scale=svc.embedder_descriptor["embedding_scale"],
    )
    req = c.request(f"asthma protocol inhaler after {kind}")
    wire = req.to_json()
    ok = tc.post("/v1/requests", content=json.dumps(wire).encode(), headers={"Content-Type": "application/json"})
    assert ok.status_code == 200, ok.text[:300]
    assert svc.ledger.size > size


# -- the client against a hostile server --------------------------------------------------------------------------


@pytest.fixture()
def hostile():
    """A server on loopback answering every request with ``state["status"]`` and the body ``state["body"]``."""
    state = {"status": 200, "body": DEEP_LIST}

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n)
            self.send_response(state["status"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(state["body"])))
            self.end_headers()
            self.wfile.write(state["body"])

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", state
    server.shutdown()
    server.server_close()


@pytest.mark.integration
@pytest.mark.parametrize("status", [200, 404])
@pytest.mark.parametrize("kind", sorted(DEEP))
def test_a_hostile_servers_deep_json_is_the_clients_typed_error(hostile, status, kind):
    url, state = hostile
    state["status"], state["body"] = status, DEEP[kind]
    remote = RemoteService(url, attempts=1)
    try:
        remote.info()
        got: BaseException | None = None
    except Exception as e:  # noqa: BLE001 - what it raises is the point
        got = e
    assert isinstance(got, RemoteError), repr(got)[:300]
    assert got.status == status
    if status == 200:
        assert got.body["error"]["type"] == "malformed" and got.body["error"]["field"] == "response"


# -- the CLI ------------------------------------------------------------------------------------------------------


def _cli(argv: list[str], capsys) -> tuple[object, str]:
    """(exit code, stderr) of ``dprag ARGV`` in-process; an exception that escapes main is what a user would see
    as a traceback, returned as such so the assertion names it."""
    try:
        code: object = main(argv)
    except BaseException as e:  # noqa: BLE001
        code = f"uncaught {type(e).__name__}"
    return code, capsys.readouterr().err


def _one_line(err: str, *names: str) -> bool:
    return err.count("\n") == 1 and err.startswith("error: ") and all(n in err for n in names)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    d = tmp_path_factory.mktemp("window")
    svc = open_service(d / "svc")
    c = client(svc, "alice")
    c.ask(svc, "asthma protocol inhaler patient")
    receipts = d / "receipts.jsonl"
    c.export_receipts(receipts)
    out = svc.export_bundle(d / "bundle")
    svc.close()
    return out, receipts


def test_verify_with_a_deeply_nested_receipts_file_rejects_that_evidence(bundle, tmp_path, capsys):
    """Unchanged behaviour (the receipts were already read by ``decode``): the line is rejected evidence, named in
    the verdict, and the window still PASSes on what the bundle holds; no traceback."""
    b, _ = bundle
    deep = tmp_path / "deep.jsonl"
    deep.write_bytes(DEEP_LIST + b"\n")
    code, err = _cli(["audit", "verify", "--max-epsilon", "50", str(b), "--receipts", str(deep), "--json"], capsys)
    assert code == 0, (code, err)
    v = verify(b, receipts=deep)
    assert v.verdict == "PASS" and v.checked["receipts_accepted"] == 0
    assert any(r.startswith("receipt 0:") and "nesting deeper" in r for r in v.rejected_evidence), v.rejected_evidence


@pytest.mark.parametrize("kind", sorted(DEEP))
def test_verify_with_a_deeply_nested_zk_vkey_is_exit_2_naming_the_flag(bundle, tmp_path, capsys, kind):
    b, _ = bundle
    vkey = tmp_path / "vkey.json"
    vkey.write_bytes(DEEP[kind])
    code, err = _cli(["audit", "verify", str(b), "--zk-vkey", str(vkey)], capsys)
    assert code == 2 and _one_line(err, "--zk-vkey", "nesting deeper"), (code, err[-500:])


def test_verify_with_a_deeply_nested_corpus_file_is_exit_2_naming_it(bundle, tmp_path, capsys):
    b, _ = bundle
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "clinic.json").write_bytes(DEEP_LIST)
    code, err = _cli(["audit", "verify", str(b), "--corpus", str(corpus)], capsys)
    assert code == 2 and _one_line(err, "--corpus", "clinic.json", "nesting deeper"), (code, err[-500:])


def test_a_bundle_with_a_deeply_nested_embedder_file_fails_verification(bundle, tmp_path, capsys):
    """``--corpus`` makes the CLI read the bundle's embedder descriptor to find the committed model: a deep one is no
    model (the verifier's commitments check FAILs the file), not a traceback."""
    b, _ = bundle
    bad = tmp_path / "bundle"
    shutil.copytree(b, bad)
    (bad / "auditor" / "embedder.json").write_bytes(DEEP_OBJECT)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    code, err = _cli(["audit", "verify", str(bad), "--corpus", str(corpus)], capsys)
    assert code == 1, (code, err[-500:])
    v = verify(bad)
    assert v.verdict == "FAIL" and any("embedder" in r for r in v.reasons), v.reasons[:3]


def test_a_bundle_with_a_deeply_nested_genesis_leaf_fails_verification(bundle, tmp_path, capsys):
    b, _ = bundle
    bad = tmp_path / "bundle"
    shutil.copytree(b, bad)
    leaves = (bad / "public" / "leaves.bin").read_bytes()
    n = int.from_bytes(leaves[:4], "big")
    (bad / "public" / "leaves.bin").write_bytes(len(DEEP_LIST).to_bytes(4, "big") + DEEP_LIST + leaves[4 + n :])
    code, err = _cli(["audit", "verify", str(bad)], capsys)
    assert code == 1, (code, err[-500:])
    v = verify(bad)
    assert v.verdict == "FAIL" and any("nesting deeper" in r for r in v.reasons), v.reasons[:3]


@pytest.fixture()
def account_dir(tmp_path, capsys):
    vk = tmp_path / "provider.vkey"
    svc = open_service(tmp_path / "svc")
    vk.write_text(svc.signer.vkey())
    svc.close()
    a = tmp_path / "dave"
    argv = ["account", "new", str(a), "--account", "dave", "--window", "w1", "--provider-key", str(vk), "--q-on-trust"]
    assert main(argv) == 0
    capsys.readouterr()
    return a


@pytest.mark.parametrize("kind", sorted(DEEP))
def test_an_account_directory_with_a_deeply_nested_file_is_exit_2(account_dir, capsys, kind):
    config = account_dir / "config.json"
    good = config.read_bytes()
    config.write_bytes(DEEP[kind])
    code, err = _cli(["account", "request", str(account_dir), "asthma"], capsys)
    assert code == 2 and _one_line(err, "config.json", "nesting deeper"), (code, err[-500:])
    config.write_bytes(good)
    (account_dir / "receipts.jsonl").write_bytes(b'{"receipt": 1}\n' + DEEP[kind] + b"\n")
    code, err = _cli(["account", "request", str(account_dir), "asthma"], capsys)
    assert code == 2 and _one_line(err, "receipts.jsonl line 2", "nesting deeper"), (code, err[-500:])


@pytest.mark.parametrize("kind", sorted(DEEP))
def test_check_receipt_of_a_deeply_nested_response_is_exit_2(account_dir, tmp_path, capsys, kind):
    resp = tmp_path / "resp.json"
    resp.write_bytes(DEEP[kind])
    code, err = _cli(["account", "check-receipt", str(account_dir), str(resp)], capsys)
    assert code == 2 and _one_line(err, "RESPONSE", "nesting deeper"), (code, err[-500:])
