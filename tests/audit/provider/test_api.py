"""dprag serve's HTTP API (spec/api.md) on a real uvicorn server on loopback: accounts over HTTP, retries, signed
refusals, authentication of fetches, the auditor's bundle export, typed error bodies — and what an attacker sends:
another account's fetch, a stale or replayed Authorization, a header signed for another path or body, oversized and
malformed bodies, a lone surrogate, an archive with links or escaping names."""

from __future__ import annotations

import io
import json
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from dprag.audit.client.account import AccountClient
from dprag.audit.client.remote import RemoteError, RemoteService, fetch_bundle
from dprag.audit.protocol.errors import RateLimitError, RequestError
from dprag.audit.protocol.ledger import NoteVerifier
from dprag.audit.protocol.receipts import verify_refusal
from dprag.audit.protocol.request import AccountKey, Request
from dprag.audit.protocol.wire import AUDITOR, auth_header, untar_bundle
from dprag.audit.provider.http.app import create_app
from dprag.audit.testing.toy import HashEmbedder, make_toy_directory
from dprag.audit.verify import verify
from tests.support.live import LiveServer

pytestmark = pytest.mark.integration  # starts servers or processes (CONTRIBUTING.md)

pytest.importorskip("fastapi")


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    d = tmp_path_factory.mktemp("toy")
    svc = make_toy_directory(d, n=12, accounts=5, seed=b"\x07" * 32)
    auditor = (d / "auditor.vkey").read_text().strip()
    with LiveServer(create_app(svc, auditor_key=auditor)) as url:
        yield d, svc, url
    svc.close()


def _key(d: Path, who: str) -> AccountKey:
    path = d / "auditor.key" if who == AUDITOR else d / "accounts" / who / "account.key"
    return AccountKey.from_hex(path.read_text().strip())


def _client(d: Path, svc, account: str) -> AccountClient:
    return AccountClient(
        account,
        svc.policy.window,
        _key(d, account),
        provider_vkey=svc.signer.vkey(),
        origin=svc.origin,
        embedder=HashEmbedder(32),
        embedding_scale=svc.embedder_descriptor["embedding_scale"],
    )


def _http(method: str, url: str, body: bytes = b"", headers: dict | None = None) -> tuple[int, dict | bytes]:
    req = urllib.request.Request(url, data=body or None, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            data = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        data, status = e.read(), e.code
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data


def _is_error(body, kind: str) -> bool:
    return isinstance(body, dict) and set(body) == {"error"} and body["error"]["type"] == kind


def test_an_account_over_http_then_the_auditor_fetches_and_verifies(toy, tmp_path):
    d, svc, url = toy
    alice = _client(d, svc, "alice")
    remote = RemoteService(url, account="alice", key=_key(d, "alice"))
    for i in range(3):
        served = alice.ask(remote, f"asthma protocol inhaler patient {i}")  # receipt and consistency checked
        assert isinstance(served.answer, str) and len(served.citations) == 5  # a DP answer: its text may vary
    again = alice.fetch(remote, alice.counter)  # the stored answer, fetched by its owner and checked
    assert again.receipt == alice.receipts[-1]["receipt"] and len(alice.receipts) == 3  # the same one: kept once
    out = fetch_bundle(url, tmp_path / "bundle", auditor_key=_key(d, AUDITOR))
    receipts = tmp_path / "r.jsonl"
    alice.export_receipts(receipts)
    v = verify(out, receipts=receipts, key=None)
    assert v.verdict == "PASS", v.reasons[:3]
    assert v.checked["receipts_accepted"] >= 3


def test_a_retry_returns_the_same_bytes_and_a_reused_counter_is_refused_with_a_signature(toy):
    d, svc, url = toy
    bob = _client(d, svc, "bob")
    remote = RemoteService(url, account="bob", key=_key(d, "bob"))
    req = bob.request("garden weather rain note 1")
    first = remote.serve(req)
    second = remote.serve(req)  # the same signed bytes again
    assert first.to_dict() == second.to_dict()
    bob._set_counter(bob.counter - 1)  # a client that signs a second request for the same counter
    other = bob.request("another question entirely")
    with pytest.raises(RequestError) as e:
        remote.serve(other)
    assert e.value.field == "request.counter"
    body = verify_refusal(e.value.refusal, NoteVerifier.from_vkey(svc.signer.vkey()))
    assert body["h_req"] == other.h_req.hex()


def test_rate_limit_is_a_429_with_a_signed_refusal(tmp_path):
    d = tmp_path / "t"
    svc = make_toy_directory(d, n=2, accounts=1)
    with LiveServer(create_app(svc)) as url:
        alice = _client(d, svc, "alice")
        remote = RemoteService(url, account="alice", key=_key(d, "alice"))
        alice.ask(remote, "asthma 1")
        alice.ask(remote, "asthma 2")
        with pytest.raises(RateLimitError) as e:
            alice.ask(remote, "asthma 3")
        assert verify_refusal(e.value.refusal, NoteVerifier.from_vkey(svc.signer.vkey()))
        assert alice.counter == 2  # not consumed
    svc.close()


def test_fetches_need_the_owners_fresh_signature_over_this_exact_request(toy):
    d, svc, url = toy
    carol = _client(d, svc, "carol")
    RemoteService(url, account="carol", key=_key(d, "carol"))
    carol.ask(RemoteService(url, account="carol", key=_key(d, "carol")), "contract dispute court case")
    path = f"/v1/answers/{carol.counter}"
    ok = auth_header("carol", _key(d, "carol").sign, "GET", path)
    assert _http("GET", url + path, headers={"Authorization": ok})[0] == 200
    cases = {
        "none": {},
        "garbage": {"Authorization": "Bearer x"},
        "stale": {"Authorization": auth_header("carol", _key(d, "carol").sign, "GET", path, now=time.time() - 3600)},
        "other path": {"Authorization": auth_header("carol", _key(d, "carol").sign, "GET", "/v1/answers/99")},
        "other method": {"Authorization": auth_header("carol", _key(d, "carol").sign, "POST", path)},
        "other body": {"Authorization": auth_header("carol", _key(d, "carol").sign, "GET", path, b"x")},
        "wrong key": {"Authorization": auth_header("carol", _key(d, "dave").sign, "GET", path)},
        "unknown id": {"Authorization": auth_header("mallory", _key(d, "dave").sign, "GET", path)},
    }
    for name, h in cases.items():
        status, body = _http("GET", url + path, headers=h)
        assert status == 401 and _is_error(body, "unauthenticated"), name
    # another account, authenticated as itself, sees only its own counters: carol's answer is not dave's to fetch
    as_dave = {"Authorization": auth_header("dave", _key(d, "dave").sign, "GET", path)}
    status, body = _http("GET", url + path, headers=as_dave)
    assert status == 404 and _is_error(body, "not_found")


def test_the_confidential_bundle_is_the_auditors_alone(toy, tmp_path):
    d, svc, url = toy
    path = "/v1/bundle?part=all"
    for who in ("alice", None):
        h = {"Authorization": auth_header(who, _key(d, who).sign, "GET", path)} if who else {}
        status, body = _http("GET", url + path, headers=h)
        assert status == 401 and _is_error(body, "unauthenticated")
    status, data = _http("GET", url + "/v1/bundle?part=public")  # the public part needs no key
    names = tarfile.open(fileobj=io.BytesIO(data)).getnames()
    assert status == 200 and names and all(n.startswith("public/") for n in names)
    out = fetch_bundle(url, tmp_path / "b", auditor_key=_key(d, AUDITOR))
    assert (out / "auditor" / "seed.hex").is_file() and (out / "public" / "leaves.bin").is_file()


@pytest.mark.parametrize(
    "body,status,kind",
    [
        (b"not json", 400, "malformed"),
        (b"{}", 400, "malformed"),
        (b'{"request": 1, "question": "q", "qemb": null}', 400, "refused"),
        (b'{"request": {}, "question": 5, "qemb": null}', 400, "malformed"),
        (b"x" * (300 * 1024), 413, "too_large"),
    ],
)
def test_malformed_submissions_get_typed_errors(toy, body, status, kind):
    d, svc, url = toy
    got, parsed = _http("POST", url + "/v1/requests", body, {"Content-Type": "application/json"})
    assert got == status and _is_error(parsed, kind), parsed


def test_a_lone_surrogate_question_is_refused_not_a_500(toy):
    d, svc, url = toy
    dave = _client(d, svc, "dave")
    req = dave.request("asthma inhaler")
    wire = json.dumps({"request": req.signed, "question": "asthma \ud800", "qemb": None})  # JSON escapes \ud800
    status, body = _http("POST", url + "/v1/requests", wire.encode(), {"Content-Type": "application/json"})
    assert status == 400 and _is_error(body, "refused") and body["error"]["field"] == "question"


def test_untar_refuses_links_escapes_and_oversize(tmp_path):
    def archive(*members) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for m, data in members:
                tar.addfile(m, io.BytesIO(data) if data is not None else None)
        return buf.getvalue()

    link = tarfile.TarInfo("public/leaves.bin")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    up = tarfile.TarInfo("../escape.txt")
    up.size = 1
    absolute = tarfile.TarInfo("/tmp/abs.txt")
    absolute.size = 1
    big = tarfile.TarInfo("public/big")
    big.size = 2048
    for i, (member, data) in enumerate([(link, None), (up, b"x"), (absolute, b"x"), (big, b"\0" * 2048)]):
        with pytest.raises((ValueError, tarfile.TarError)):
            untar_bundle(archive((member, data)), tmp_path / f"o{i}", max_bytes=1024)
    assert not (tmp_path / "escape.txt").exists() and not Path("/tmp/abs.txt").exists()


def test_the_published_openapi_document_is_the_committed_one(toy):
    """spec/openapi.json is the API's contract: a change to the API shows up as a change to that file."""
    d, svc, url = toy
    status, live = _http("GET", url + "/v1/openapi.json")
    committed = json.loads((Path(__file__).parents[3] / "spec" / "openapi.json").read_text())
    assert status == 200 and live == committed
    assert set(live["paths"]) == {
        "/healthz",
        "/readyz",
        "/v1/info",
        "/v1/requests",
        "/v1/answers/{counter}",
        "/v1/checkpoint",
        "/v1/consistency",
        "/v1/keys",
        "/v1/bundle",
    }


def test_remote_errors_that_are_not_refusals_are_typed(toy):
    d, svc, url = toy
    remote = RemoteService(url, account="alice", key=_key(d, "alice"))
    with pytest.raises(RemoteError) as e:
        remote.answer_unchecked(10**6)
    assert e.value.status == 404
    with pytest.raises(Exception, match="http"):
        RemoteService("ftp://x")


def test_request_from_json_round_trip_is_what_the_client_sends(toy):
    d, svc, url = toy
    alice = _client(d, svc, "alice")
    req = alice.request("asthma")
    wire = {"request": req.signed, "question": req.question, "qemb": req.qemb.hex()}
    assert Request.from_json(json.loads(json.dumps(wire))).h_req == req.h_req


@pytest.mark.parametrize("threads", [1, 3])
def test_threads_bounds_the_blocking_calls_running_at_once(tmp_path, threads):
    """``create_app(threads=N)`` (``dprag serve --threads N``): however many requests arrive together, at most N of
    the service's blocking calls run at once and every request is still answered and checks out; with N > 1 they do
    overlap (the bound is not a lock). Six accounts send one request each at the same moment; each serve() holds
    0.3 s, so under the default pool all six would run together."""
    import threading

    svc = make_toy_directory(tmp_path / "toy", n=4, accounts=6)
    running, peak, lock = [0], [0], threading.Lock()
    serve = svc.serve

    def held(req):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            time.sleep(0.3)
            return serve(req)
        finally:
            with lock:
                running[0] -= 1

    svc.serve = held
    try:
        with LiveServer(create_app(svc, threads=threads)) as url:
            accounts = sorted(p.name for p in (tmp_path / "toy" / "accounts").iterdir())
            clients = [_client(tmp_path / "toy", svc, a) for a in accounts]
            out: list = []
            go = threading.Barrier(len(clients))

            def ask(c):
                remote = RemoteService([url], account=c.account, key=c.key)
                go.wait()
                out.append(c.ask(remote, f"asthma inhaler protocol {c.account}"))

            ts = [threading.Thread(target=ask, args=(c,)) for c in clients]
            for t in ts:
                t.start()
            for t in ts:
                t.join(60)
        assert len(out) == len(clients)  # every request answered, each receipt accepted by its client
        assert peak[0] == threads  # never more than N; N reached: the six overlap
    finally:
        svc.close()


def test_threads_out_of_range_is_refused_by_name(toy):
    from dprag.errors import InvalidParameterError

    _, svc, _ = toy
    for bad in (0, -1, 1025, 2.5):
        with pytest.raises(InvalidParameterError, match="threads"):
            create_app(svc, threads=bad)


def test_a_response_cut_off_by_a_dying_replica_is_resent(toy):
    """A replica killed while it writes a response leaves the client with a status line and part of a body (the fault
    run saw ``IncompleteRead(0 bytes read, 721 more expected)`` once in CI). The client resends the same signed
    bytes to the next replica, as for one it cannot reach: here the first URL is a server that sends the headers of
    a 721-byte answer and closes, and the request is answered by the real one, once, with a checked receipt."""
    import socket
    import threading

    d, svc, url = toy
    cut = socket.socket()
    cut.bind(("127.0.0.1", 0))
    cut.listen(8)
    hits = []

    def serve_cut() -> None:
        while True:
            try:
                conn, _ = cut.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                hits.append(1)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 721\r\n\r\n")

    threading.Thread(target=serve_cut, daemon=True).start()
    bad = f"http://127.0.0.1:{cut.getsockname()[1]}"
    client = _client(d, svc, "a05")
    remote = RemoteService([bad, url], account="a05", key=_key(d, "a05"))
    served = client.ask(remote, "asthma protocol inhaler patient cut")
    cut.close()
    assert hits == [1] and remote.retries == 1
    assert served.receipt["counter"] == client.counter == 1


def test_the_auditors_fetch_collects_consistency_proofs_for_receipts_beyond_the_bundle(tmp_path, capsys):
    """An auditor fetches a bundle; the account keeps asking. Its later receipts are beyond the bundle: without a
    consistency proof the verdict is INCOMPLETE (exit 3, naming both sizes); `dprag audit fetch --receipts` collects
    one from the bundle's size to each receipt's over HTTP (GET /v1/consistency, as the auditor), and the same
    verdict is then a PASS with every receipt checked."""
    d = tmp_path / "toy"
    svc = make_toy_directory(d, n=12, accounts=4, seed=b"\x08" * 32)
    with LiveServer(create_app(svc, auditor_key=(d / "auditor.vkey").read_text().strip())) as url:
        _fetch_with_receipts(d, svc, url, tmp_path, capsys)
    svc.close()


def _fetch_with_receipts(d, svc, url, tmp_path, capsys) -> None:
    from dprag.audit.cli import main
    from dprag.audit.protocol.encoding import encode

    carol = _client(d, svc, "carol")
    remote = RemoteService(url, account="carol", key=_key(d, "carol"))
    carol.ask(remote, "contract dispute court case 0")
    early = fetch_bundle(url, tmp_path / "early", auditor_key=_key(d, AUDITOR))
    later = [carol.ask(remote, f"contract dispute court case {i}") for i in (1, 2)]
    receipts = tmp_path / "r.jsonl"
    carol.export_receipts(receipts)
    assert main(["audit", "verify", str(early), "--receipts", str(receipts)]) == 3
    out = capsys.readouterr().out
    assert out.startswith("INCOMPLETE — receipt") and "beyond the bundle's size" in out, out
    key_file = tmp_path / "auditor.key"
    key_file.write_text((d / "auditor.key").read_text())
    out_dir = tmp_path / "fetched"
    args = ["audit", "fetch", "--url", url, "--key", str(key_file), "--out", str(out_dir), "--receipts", str(receipts)]
    assert main(args) == 0
    said = capsys.readouterr().out
    assert "consistency proofs: 0 of 0 receipt sizes" in said  # a fresh bundle already holds them
    # the early bundle with the proofs the fetch collects for it (the later receipts' sizes from its size)
    from dprag.audit.client.remote import collect_consistency
    from dprag.audit.protocol.bundle import load_bundle

    n = len(load_bundle(early).leaves)
    lines = collect_consistency(url, n, [r.receipt["size"] for r in later], auditor_key=_key(d, AUDITOR))
    assert len(lines) == 2
    (early / "auditor" / "consistency.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
    assert main(["audit", "verify", "--max-epsilon", "1000", str(early), "--receipts", str(receipts)]) == 0, (
        capsys.readouterr().out
    )
    capsys.readouterr()
    forged = encode({"size1": n, "size2": later[-1].receipt["size"], "hashes": []})
    (early / "auditor" / "consistency.jsonl").write_bytes(forged + b"\n")
    assert main(["audit", "verify", str(early), "--receipts", str(receipts)]) == 3


def test_an_account_follows_a_key_rotation_over_http(tmp_path):
    """The provider rotates its key (spec/protocol.md §3.3); the account's client, which pinned the old key, gets a
    receipt signed by the new one over HTTP, follows the rotation through ``GET /v1/keys`` (the dual-signed
    checkpoint and the leaf's inclusion under it) and accepts; an auditor who pinned the old key gets PASS."""

    d = tmp_path / "toy"
    svc = make_toy_directory(d, n=12, accounts=2, seed=b"\x07" * 32)
    name = sorted(svc.registry)[0]
    old = svc.signer.vkey()
    with LiveServer(create_app(svc)) as url:
        alice = _client(d, svc, name)
        remote = RemoteService(url, account=name, key=_key(d, name))
        alice.send(remote, alice.request("asthma protocol inhaler patient"))
        pos = svc.rotate_key()
        keys = remote.key_history()
        assert [r["pos"] for r in keys["rotations"]] == [pos] and keys["genesis_key"] == old
        alice.send(remote, alice.request("garden weather rain"))
        assert alice.provider_vkey == svc.signer.vkey() != old
    receipts = tmp_path / "r.jsonl"
    alice.export_receipts(receipts)
    (tmp_path / "old.vkey").write_text(old)
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle, receipts=receipts, key=tmp_path / "old.vkey")
    assert v.verdict == "PASS" and v.checked["receipts_accepted"] == 2, v.reasons


def test_every_replica_serves_the_auditors_export(tmp_path):
    """v3: only the replica started with --auditor-key served the confidential bundle; `audit fetch` from another
    answered 404. The key is kept in the log's store (``set_auditor_key``), so a replica started without it serves
    the auditor too, and still refuses an account."""
    from dprag.audit.testing.toy import open_toy_directory

    d = tmp_path / "toy"
    svc = make_toy_directory(d, n=12, accounts=2, seed=b"\x08" * 32)
    create_app(svc, auditor_key=(d / "auditor.vkey").read_text().strip())  # the first replica's start
    replica = open_toy_directory(d)
    assert replica.auditor_key() == (d / "auditor.vkey").read_text().strip()
    with LiveServer(create_app(replica)) as url:
        out = fetch_bundle(url, tmp_path / "fetched", auditor_key=_key(d, AUDITOR))
        assert (out / "auditor" / "seed.hex").is_file()
        name = sorted(replica.registry)[0]
        with pytest.raises(RemoteError) as e:
            fetch_bundle(url, tmp_path / "as-account", auditor_key=_key(d, name))
        assert e.value.status == 401
    replica.close()
    svc.close()


def test_audit_fetch_prints_the_servers_reason(tmp_path, capsys):
    """v3's `audit fetch` printed "HTTP 404 :" without the server's reason; it names it (one line, exit 2)."""
    from dprag.audit.cli import main

    d = tmp_path / "toy"
    svc = make_toy_directory(d, n=12, accounts=2, seed=b"\x08" * 32)
    with LiveServer(create_app(svc)) as url:  # no auditor key configured anywhere
        capsys.readouterr()
        argv = ["audit", "fetch", "--url", url, "--key", str(d / "auditor.key"), "--out", str(tmp_path / "b")]
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert "HTTP 404 not_found: this service has no auditor key configured" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "b").exists()
    svc.close()


def test_account_follow_from_the_command_line(tmp_path, capsys):
    """`dprag account follow DIR --url URL` follows the provider's rotations (GET /v1/keys) from the key the account
    pinned, keeps them, and prints the key now trusted (a proof that does not follow is refused by
    ``AccountClient.follow_rotations``: tests/e2e/test_registry_leaves.py)."""
    from dprag.audit.cli import main

    d = tmp_path / "toy"
    svc = make_toy_directory(d, n=12, accounts=2, seed=b"\x07" * 32)
    name = sorted(svc.registry)[0]
    acct = d / "accounts" / name
    with LiveServer(create_app(svc)) as url:
        svc.rotate_key()
        capsys.readouterr()
        assert main(["account", "follow", str(acct), "--url", url]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out == {"followed": 1, "provider_key": svc.signer.vkey()}
        assert json.loads((acct / "provider_keys.json").read_text())["eras"][-1][1] == svc.signer.vkey()
        assert main(["account", "follow", str(acct), "--url", url]) == 0  # nothing new to follow
        assert json.loads(capsys.readouterr().out)["followed"] == 0
    svc.close()


def test_the_auditors_fetch_collects_the_key_rotations_beyond_the_bundle(tmp_path, capsys):
    """An auditor fetched the bundle; the provider then rotated its key and served carol, whose receipts she hands
    in without the rotation her client followed. Under the bundle's key her later receipt is not evidence; with the
    rotations the fetch collects (GET /v1/keys, public) and the consistency proofs, the verifier follows the
    rotation from the bundle's key and checks the receipt: PASS. A rotation proof of a thief's key does not follow
    and leaves the receipt unchecked."""
    import json

    from dprag.audit.cli import main
    from dprag.audit.client.remote import collect_consistency, collect_rotations
    from dprag.audit.protocol.bundle import load_bundle
    from dprag.audit.protocol.encoding import encode

    d = tmp_path / "toy"
    svc = make_toy_directory(d, n=12, accounts=4, seed=b"\x08" * 32)
    with LiveServer(create_app(svc, auditor_key=(d / "auditor.vkey").read_text().strip())) as url:
        carol = _client(d, svc, "carol")
        remote = RemoteService(url, account="carol", key=_key(d, "carol"))
        carol.ask(remote, "contract dispute court case 0")
        early = fetch_bundle(url, tmp_path / "early", auditor_key=_key(d, AUDITOR))
        n = len(load_bundle(early).leaves)
        pos = svc.rotate_key()
        later = carol.ask(remote, "contract dispute court case 1")
        receipts = tmp_path / "r.jsonl"
        carol.export_receipts(receipts)
        only = [x for x in receipts.read_bytes().splitlines() if b'"rotation"' not in x]  # receipts alone
        receipts.write_bytes(b"".join(x + b"\n" for x in only))
        assert (
            main(["audit", "verify", "--max-epsilon", "1000", str(early), "--receipts", str(receipts)]) == 0
        )  # 1/2: the later one unchecked
        assert "1/2 receipts" in capsys.readouterr().out
        rotations = collect_rotations(url, n)
        assert [json.loads(x)["rotation"]["pos"] for x in rotations] == [pos]
        (early / "auditor" / "rotations.jsonl").write_bytes(b"".join(x + b"\n" for x in rotations))
        lines = collect_consistency(url, n, [later.receipt["size"]], auditor_key=_key(d, AUDITOR))
        (early / "auditor" / "consistency.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
        key_file = tmp_path / "auditor.key"
        key_file.write_text((d / "auditor.key").read_text())
        args = ["audit", "fetch", "--url", url, "--key", str(key_file), "--out", str(tmp_path / "fetched")]
        assert main(args) == 0
        assert f"key rotations beyond the bundle's size {svc.ledger.size}: 0" in capsys.readouterr().out
        assert (tmp_path / "fetched" / "auditor" / "rotations.jsonl").read_bytes() == b""
    svc.close()
    v = verify(early, receipts=receipts)
    assert v.verdict == "PASS" and v.checked["rotations_followed"] == 1, (v.reasons, v.rejected_evidence)
    assert v.checked["receipts_accepted"] == 1 and v.checked["receipts_newer_than_bundle"] == 1, v.checked
    proof = json.loads(rotations[0])["rotation"]
    leaf = json.loads(bytes.fromhex(proof["leaf"]))
    thief = encode({"rotation": {**proof, "leaf": encode({**leaf, "sig": "00" * 64}).hex()}})
    (early / "auditor" / "rotations.jsonl").write_bytes(thief + b"\n")
    v = verify(early, receipts=receipts)
    assert "rotations_followed" not in v.checked and v.checked["receipts_accepted"] == 1, v.checked
    assert any(
        r.startswith("auditor/rotations.jsonl line 0: a key rotation that does not follow") for r in v.rejected_evidence
    )


def test_health_readiness_and_docs_on_the_public_port_and_nothing_else(toy, monkeypatch):
    """/healthz (the process), /readyz (the store: 503 with Retry-After while it does not answer) and /docs beside
    /v1/*; nothing else is served there — /metrics is 404 (operator counts depend on the corpus)."""
    from dprag.audit.protocol.errors import StoreUnavailableError

    d, svc, url = toy
    assert _http("GET", url + "/healthz") == (200, {"status": "ok"})
    assert _http("GET", url + "/readyz") == (200, {"status": "ready"})
    with urllib.request.urlopen(url + "/docs", timeout=30) as r:
        assert r.status == 200 and b"swagger" in r.read().lower()
    for path in ("/metrics", "/admin", "/v1/metrics"):
        assert _http("GET", url + path)[0] == 404, path

    def down():
        raise StoreUnavailableError("the store is unreachable (test)")

    monkeypatch.setattr(svc.store, "read", down)
    req = urllib.request.Request(url + "/readyz")
    try:
        urllib.request.urlopen(req, timeout=30)
        raise AssertionError("/readyz answered 200 while the store was down")
    except urllib.error.HTTPError as e:
        assert e.code == 503 and e.headers.get("Retry-After"), (e.code, dict(e.headers))
    assert _http("GET", url + "/healthz") == (200, {"status": "ok"})  # alive, not ready


def test_an_unknown_query_parameter_is_refused_naming_it(toy):
    """A typo in a query parameter (``?sinse=``) is a 400 naming it, never silently ignored."""
    d, svc, url = toy
    status, body = _http("GET", url + "/v1/info?sinse=3")
    assert status == 400 and body["error"]["field"] == "sinse" and body["error"]["type"] == "malformed", body


def test_the_auditor_fetches_since_its_state_and_verifies_only_the_new_part(tmp_path, capsys):
    """spec/protocol.md §8 item 14 over HTTP with the CLI: `dprag audit fetch` then `verify --state` makes the
    auditor's state; after more traffic `fetch --since SIZE` downloads only the new leaves (``public/range.json``)
    and `verify --state` extends the state; the verdict equals a whole fetch verified without a state. A `since`
    beyond the log is a 400 naming it."""
    from dprag.audit.cli import main
    from dprag.audit.protocol.bundle import load_bundle

    d = tmp_path / "toy"
    svc = make_toy_directory(d, n=12, accounts=3, seed=b"\x09" * 32)
    key_file = tmp_path / "auditor.key"
    key_file.write_text((d / "auditor.key").read_text())
    state = ["--state", str(tmp_path / "state"), "--state-key", str(tmp_path / "state.key"), "--max-epsilon", "1000"]
    with LiveServer(create_app(svc, auditor_key=(d / "auditor.vkey").read_text().strip())) as url:
        alice = _client(d, svc, "alice")
        remote = RemoteService(url, account="alice", key=_key(d, "alice"))
        alice.ask(remote, "asthma protocol inhaler patient 0")
        assert main(["audit", "fetch", "--url", url, "--key", str(key_file), "--out", str(tmp_path / "b1")]) == 0
        assert main(["audit", "verify", str(tmp_path / "b1"), *state]) == 0
        size = len(load_bundle(tmp_path / "b1").leaves)
        for i in (1, 2, 3):
            alice.ask(remote, f"asthma protocol inhaler patient {i}")
        args = ["audit", "fetch", "--url", url, "--key", str(key_file), "--since", str(size)]
        assert main([*args, "--out", str(tmp_path / "b2")]) == 0
        cut = load_bundle(tmp_path / "b2")
        assert cut.first == size and len(cut.leaves) == 3  # only the new part travelled
        capsys.readouterr()
        receipts = tmp_path / "r.jsonl"
        alice.export_receipts(receipts)
        assert main(["audit", "verify", str(tmp_path / "b2"), "--receipts", str(receipts), *state, "--json"]) == 0
        inc = json.loads(capsys.readouterr().out)
        assert main(["audit", "fetch", "--url", url, "--key", str(key_file), "--out", str(tmp_path / "whole")]) == 0
        capsys.readouterr()
        args = ["audit", "verify", str(tmp_path / "whole"), "--receipts", str(receipts), "--max-epsilon", "1000"]
        assert main([*args, "--json"]) == 0
        whole = json.loads(capsys.readouterr().out)
        assert {k: inc[k] for k in ("verdict", "epsilon", "delta", "checked", "reasons")} == {
            k: whole[k] for k in ("verdict", "epsilon", "delta", "checked", "reasons")
        }
        assert inc["state"]["size"] == size + 3
        status, body = _http("GET", url + f"/v1/bundle?part=public&since={size + 100}")
        assert status == 400 and body["error"]["field"] == "since", body
    svc.close()
