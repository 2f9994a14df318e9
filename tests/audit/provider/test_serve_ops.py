"""``dprag serve`` run as an operator deploys it (a compose file's settings): PostgreSQL through the database URL with
the password in a file, every setting from a TOML file and the environment, the admin listener on loopback. Health
and readiness through a PostgreSQL restart (503 with Retry-After while it is down, 200 once it is back, without a
failed first request: the pool pre-pings), a scrape of the admin ``/metrics``, ``dprag serve status`` naming an
unreachable replica, and the JSON access log and the spans — none of which holds a question, an answer, a document
id or an account. And a missing password: one line naming the variables, never a driver's traceback."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from click.testing import CliRunner

from dprag.audit.cli import main
from dprag.audit.client.account import AccountClient
from dprag.audit.client.remote import RemoteService
from dprag.audit.commands.serve import serve
from dprag.audit.protocol.request import AccountKey
from dprag.audit.testing.toy import HashEmbedder
from tests.support.live import launch, stop_replicas
from tests.support.postgres import free_port

pytestmark = pytest.mark.integration  # starts servers, processes and a PostgreSQL cluster (CONTRIBUTING.md)

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")

QUESTION = "asthma inhaler protocol for the patient called wombat-5519"
PASSWORD = "s3cret-Pass-of-the-app"
ACCESS_KEYS = {"ts", "kind", "request_id", "method", "route", "status", "error", "duration_ms", "bytes_out"}


@pytest.fixture(scope="module")
def app_role(pg_cluster):
    """The cluster's ``dprag_app`` role, which must give its password (SCRAM); its URL without the password."""
    return pg_cluster.add_password_role("dprag_app", PASSWORD)


def _get(url: str, headers: dict | None = None, timeout: float = 10) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
    except OSError as e:
        return 0, {}, str(e).encode()


def test_a_missing_password_is_one_line_naming_the_variables(tmp_path, app_role, monkeypatch, capsys):
    """The server asks for a password (SCRAM) and none was given: exit 2 with one line naming where it is read
    from (before: pg8000's ``'NoneType' object has no attribute 'decode'``)."""
    for var in ("PGPASSWORD", "DPRAG_DATABASE_PASSWORD", "DPRAG_DATABASE_PASSWORD_FILE"):
        monkeypatch.delenv(var, raising=False)
    code = main(["serve", "--toy", "--dir", str(tmp_path / "d"), "--store", app_role])
    out, err = capsys.readouterr()
    assert code == 2 and out == "", (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "asks for a password" in lines[0] and "DPRAG_DATABASE_PASSWORD_FILE" in lines[0], err
    assert "NoneType" not in err


def test_the_pool_serves_the_first_request_after_a_database_restart(pg_cluster):
    """Three idle connections, then PostgreSQL restarts (a fast shutdown closes every connection): the next
    operation, once they have been idle PING_AFTER_IDLE, runs — the pool pinged the dead connection, dropped it and
    the other idle ones, and connected afresh — where it failed as retryable before."""
    from dprag.audit.provider.storage import StoreLog
    from dprag.audit.provider.storage.postgres import PING_AFTER_IDLE, PostgresServiceStore

    store = PostgresServiceStore(f"{pg_cluster.url}?schema=ping_w_{os.getpid()}&pool=3", create=True, timeout=10)
    log = StoreLog(store)
    log.append(b"genesis")
    barrier = threading.Barrier(3)
    pids = set()

    def hold() -> None:
        with store.snapshot() as s:
            pids.add(int(s.one("SELECT pg_backend_pid()")[0]))
            barrier.wait(30)

    threads = [threading.Thread(target=hold) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(pids) == 3  # three idle connections in the pool
    t0 = time.monotonic()
    pg_cluster.restart()
    time.sleep(max(0.0, PING_AFTER_IDLE - (time.monotonic() - t0)) + 0.05)
    log.append(b"after the restart")  # no StoreUnavailableError
    with store.read() as s:
        assert int(s.one("SELECT pg_backend_pid()")[0]) not in pids
    assert [log.leaf(i) for i in range(log.size)] == [b"genesis", b"after the restart"]
    store.drop()


def test_serve_as_a_compose_deployment_through_a_postgresql_restart(tmp_path, pg_cluster, app_role):
    d = tmp_path / "toy"
    port, admin = free_port(), free_port()
    access = tmp_path / "access.jsonl"
    secret = tmp_path / "db-password"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o600)
    config = tmp_path / "dprag.toml"
    config.write_text(
        "[serve]\n"
        f"dir = '{d}'\ntoy = true\nport = {port}\nadmin_port = {admin}\n"
        f"access_log = '{access}'\notel_exporter = 'console'\nstore = '{app_role}'\n"
    )
    env = {"DPRAG_CONFIG": str(config), "DPRAG_DATABASE_PASSWORD_FILE": str(secret), "PGPASSWORD": ""}
    server_log = tmp_path / "server.log"
    with open(server_log, "wb") as out:
        proc, url = launch([sys.executable, "-m", "dprag", "serve"], port, env=env, log=out)
    admin_url = f"http://127.0.0.1:{admin}"
    secrets_seen = [QUESTION, "wombat-5519", "alice", PASSWORD]
    try:
        assert "--store" not in " ".join(proc.args) and PASSWORD not in " ".join(proc.args)  # nothing in ps
        assert _get(url + "/healthz")[:1] == (200,) and _get(url + "/readyz")[0] == 200
        for path in ("/metrics", "/status"):
            assert _get(url + path)[0] == 404, path  # the public port serves neither
        info = json.loads(_get(url + "/v1/info")[2])  # what the account pins (its operator would hand it over)
        vkey, window = info["provider_key"], info["window"]
        scale = json.loads((d / "service" / "config" / "embedder.json").read_text())["descriptor"]["embedding_scale"]
        key = AccountKey.from_hex((d / "accounts" / "alice" / "account.key").read_text().strip())
        alice = AccountClient(
            "alice",
            window,
            key,
            provider_vkey=vkey,
            origin=info["origin"],
            embedder=HashEmbedder(32),
            embedding_scale=scale,
        )
        remote = RemoteService(url, account="alice", key=key)
        for i in range(3):
            served = alice.ask(remote, f"{QUESTION} {i}")
            secrets_seen += [f"{QUESTION} {i}", served.answer, json.dumps(served.citations)]
            secrets_seen += [alice.receipts[-1]["receipt"]["h_req"]]

        # PostgreSQL restarts (fast shutdown, down 3 s): /readyz answers 503 with Retry-After, then 200
        seen: list[tuple[float, int, str | None]] = []
        restart = threading.Thread(target=pg_cluster.restart, kwargs={"down_seconds": 3.0})
        t0 = time.monotonic()
        restart.start()
        while restart.is_alive() or not seen or seen[-1][1] != 200:
            status, headers, _ = _get(url + "/readyz", timeout=15)
            seen.append((time.monotonic() - t0, status, headers.get("retry-after") or headers.get("Retry-After")))
            if time.monotonic() - t0 > 90:
                break
            time.sleep(0.1)
        restart.join()
        codes = [s for _, s, _ in seen]
        assert 503 in codes and codes[-1] == 200, seen
        first_503 = next(t for t, s, _ in seen if s == 503)
        back = next(t for t, s, _ in seen if s == 200 and t > first_503)
        assert all(r == "1" for _, s, r in seen if s == 503), seen
        down = _run_status(admin_url, free_port())  # after the restart: the store is up again
        served = alice.ask(remote, f"{QUESTION} after")  # the first request after the restart
        secrets_seen += [f"{QUESTION} after", served.answer]
        status, _, metrics = _get(admin_url + "/metrics")
        assert status == 200
        text = metrics.decode()
    finally:
        stop_replicas(proc)
    ready_503 = re.search(r'dprag_http_requests_total\{method="GET",route="/readyz",status="503"\} (\S+)', text)
    assert ready_503 and float(ready_503.group(1)) == codes.count(503), text
    assert re.search(r'dprag_http_requests_total\{method="POST",route="/v1/requests",status="200"\} 4\.0', text)
    assert "dprag_store_up 1.0" in text and re.search(r"dprag_store_schema_version 1\.0", text)
    records = [json.loads(line) for line in access.read_text().splitlines()]
    assert records and all(set(r) == ACCESS_KEYS for r in records)
    assert sum(1 for r in records if r["route"] == "/readyz" and r["status"] == 503) == codes.count(503)
    logged = server_log.read_text()
    spans = [json.loads(line) for line in logged.splitlines() if line.startswith('{"name"')]
    assert any(s["name"] == "HTTP POST" and s["attributes"]["http.route"] == "/v1/requests" for s in spans), logged
    said = json.dumps([(s["name"], s["attributes"]) for s in spans])  # what the spans say of the requests
    other = "\n".join(line for line in logged.splitlines() if not line.startswith('{"name"'))
    for seen_text in secrets_seen:
        outputs = (("metrics", text), ("access log", access.read_text()), ("spans", said), ("server log", other))
        for where, out in outputs:
            assert seen_text not in out, (where, seen_text)
    assert down[0] == 1 and "UNREACHABLE" in down[1] and " ok " in down[1], down
    print(
        f"\nreadyz through the restart: first 503 at {first_503:.2f} s, 200 again at {back:.2f} s, "
        f"{codes.count(503)} answers 503 (Retry-After 1), {len(codes)} polls\n"
        f"status:\n{down[1]}"
        "metrics (excerpt):\n"
        + "\n".join(line for line in text.splitlines() if line.startswith(("dprag_http_requests_total", "dprag_store")))
        + "\naccess log (excerpt):\n"
        + "\n".join(
            json.dumps(r, separators=(",", ":"))
            for r in records[:2] + [r for r in records if r["status"] == 503][:1] + records[-1:]
        )
    )
    assert proc.returncode in (0, -signal.SIGTERM)


def _run_status(admin_url: str, dead_port: int) -> tuple[int, str]:
    r = CliRunner().invoke(
        serve, ["status", "--admin", admin_url, "--admin", f"http://127.0.0.1:{dead_port}", "--timeout", "5"]
    )
    return r.exit_code, r.output
