"""Replicas of ``dprag serve`` (real processes on loopback) over one store, under load and under faults: no overspend,
no lost or duplicated record, a gapless ledger, every request answered exactly once after retries, verify PASS.

Bounded: every run is M accounts x a fixed number of requests; every wait has a timeout."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from dprag.audit.protocol.errors import StoreUnavailableError
from dprag.audit.protocol.request import request_hash
from dprag.audit.testing.toy import HOLD_ENV, make_toy_directory, open_toy_directory
from tests.support.live import start_replica, stop_replicas
from tests.support.load import audit_window, first_and_rest, run_accounts

pytestmark = pytest.mark.integration  # starts servers or processes (CONTRIBUTING.md)

pytest.importorskip("fastapi")


def _check(d: Path, store: str | None, res, out: Path, requests: int, then=None) -> dict:
    """What the run left behind (``audit_window``), asserted; ``then(svc)``, if given, runs on the same service and
    its result is ``got["then"]``."""
    assert not res.errors, res.errors[:3]
    assert res.answered == requests
    svc = open_toy_directory(d, store=store)
    try:
        got = audit_window(svc, res, out)
        if then is not None:
            got["then"] = then(svc)
    finally:
        svc.close()
    assert got["query_leaves"] == requests and got["requests_recorded_twice"] == 0, got
    assert got["receipts"] == requests and got["receipts_accepted"] == requests, got
    assert got["verdict"] == "PASS", got["reasons"]
    return got


@pytest.mark.parametrize("engine", ["postgresql", "sqlite"])
def test_two_replicas_sixteen_accounts(tmp_path, engine, request):
    """PostgreSQL: the second replica shares only the database URL (its directory materialised from the store).
    SQLite: two processes of one host share the directory."""
    url = request.getfixturevalue("pg_url") if engine == "postgresql" else None
    d = tmp_path / "toy"
    svc = make_toy_directory(d, store=url, accounts=16, n=50)
    schema_url = svc.store.describe().get("url")
    svc.close()
    a, url_a = start_replica(d, store=None)
    if engine == "postgresql":
        b, url_b = start_replica(tmp_path / "other-host", toy=False, store=schema_url)
    else:
        b, url_b = start_replica(d)
    try:
        accounts = [f"a{i:02d}" if i >= 5 else ["alice", "bob", "carol", "dave"][i - 1] for i in range(1, 17)]
        res = run_accounts(d, accounts, lambda i: [url_a, url_b] if i % 2 else [url_b, url_a], 4)
    finally:
        stop_replicas(a, b)
    _check(d, url, res, tmp_path, 64)
    assert len(res.first) == len(accounts) and set(res.first) <= set(res.latencies)


def test_a_replica_on_another_host_shares_only_the_database_url(tmp_path):
    """Replica B runs on another host — a network namespace of its own (``tests.support.hosts``): its loopback is not
    A's, and it reaches only the database server, over a veth link at the server's address there. It starts from the
    database URL alone. Half the accounts ask only A, half only B: all 8 x 4 answered, one gapless ledger, none
    recorded twice, PASS."""
    from tests.support.hosts import HostUnavailable, TestHost
    from tests.support.postgres import TempCluster, pg_bin

    if pg_bin("initdb") is None:
        pytest.fail("PostgreSQL is not installed (apt-get install -y postgresql)")
    try:
        host = TestHost.create()
    except HostUnavailable as e:  # needs CAP_NET_ADMIN; the loopback replica tests above cover the rest
        pytest.skip(f"no network namespace on this machine: {e}")
    pg_dir = Path(tempfile.mkdtemp(prefix="dprag-pg-"))  # pytest's tmp_path is under a root-only directory
    cluster = TempCluster(pg_dir, listen=(host.gateway,), trust=(host.network,))
    procs = []
    try:
        cluster.start()
        d = tmp_path / "toy"
        svc = make_toy_directory(d, store=cluster.url, accounts=8, n=10)
        schema_url = svc.store.describe()["url"]
        svc.close()
        a, url_a = start_replica(d)
        procs.append(a)
        # B cannot see A's loopback: the port A listens on is closed there
        port_a = url_a.rsplit(":", 1)[1]
        probe = f"import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', {port_a})) == 0)"
        assert subprocess.run([sys.executable, "-c", probe], timeout=60).returncode == 1  # here it is open
        assert host.run([sys.executable, "-c", probe]).returncode == 0
        b, url_b = host.start_replica(tmp_path / "host-b", schema_url.replace("127.0.0.1", host.gateway))
        procs.append(b)
        assert url_b.startswith(f"http://{host.address}:")
        accounts = ["alice", "bob", "carol", "dave"] + [f"a{i:02d}" for i in range(5, 9)]
        res = run_accounts(d, accounts, lambda i: [url_b] if i % 2 else [url_a], 4)
    finally:
        stop_replicas(*procs)
        host.remove()
    try:
        _check(d, cluster.url, res, tmp_path, 32)
    finally:
        cluster.stop()
        shutil.rmtree(pg_dir, ignore_errors=True)


def test_a_runs_tail_splits_into_first_requests_and_the_rest():
    """``first_and_rest``: the p50 of the first requests and the p99 of the others (numpy's linear percentiles, by
    hand: the rest [0.1, 0.2, 0.3] has p99 0.2 + 0.98 * 0.1 = 0.298 s; the firsts [0.9, 0.7] have p50 0.8 s); a
    latency equal to a first request's counts once in each list."""
    got = first_and_rest([0.9, 0.1, 0.3, 0.7, 0.2], [0.9, 0.7])
    assert got == {"first_p50_ms": 800.0, "rest_p99_ms": 298.0}
    assert first_and_rest([0.5, 0.5, 0.1], [0.5]) == {"first_p50_ms": 500.0, "rest_p99_ms": 496.0}
    assert first_and_rest([], []) == {}


HELD = ("alice", "bob", "a05")  # their first requests: replica A holds each one's answer after its record committed
HOLD_SECONDS = 60.0  # far longer than the test takes to see the hold and kill A


def _poll(fn, what: str, timeout: float = 60.0):
    """``fn()`` until it returns something truthy (a StoreUnavailableError counts as not yet); TimeoutError after
    ``timeout`` s. Waits on observable state, never on a guess of how long something takes."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = fn()
        except StoreUnavailableError:
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(0.02)


def _held_by_a(observer, hold_dir: Path) -> dict | None:
    """{account: {"pos", "pid", "held_at"}} once every HELD request is between its record commit and its stored
    answer on the replica that holds it: its ``.held`` file written (by that process, when it began generating the
    answer) and the store showing the request recorded (its served row, its ledger position) with no answer stored."""
    files = {}
    for f in hold_dir.glob("*.held"):
        h = json.loads(f.read_text())
        files[h["question"].split()[-2]] = h  # run_accounts' questions end in "<account> <k>"
    if set(files) != set(HELD):
        return None
    out = {}
    for account in HELD:
        row = observer.aud.served(account, 1)
        if row is None:
            return None
        rec = json.loads(row)
        assert rec["served"] is None, f"{account}'s answer was stored while its replica held it"
        out[account] = {"pos": rec["pos"], "pid": files[account]["pid"], "held_at": files[account]["time"]}
    return out


def _recorded_by_a_finished_by_b(svc, res, held: dict, a_pid: int, killed_at: float) -> dict:
    """For each HELD request: replica A recorded it and was still holding its answer when it was killed (so A never
    stored one), and the answer the client accepted — from replica B, the only replica alive — is for the SAME ledger
    position A appended; the request has one query leaf and one opening, so its charge was made once (the spend
    equals the openings' charges: ``audit_window`` checks it)."""
    leaves: dict[str, list[int]] = {}
    for pos in range(1, svc.ledger.size):
        leaf = json.loads(svc.ledger.leaf(pos))
        if leaf.get("type") == "query":
            leaves.setdefault(leaf["h_req"], []).append(pos)
    named: dict[tuple, int] = {}
    for _, body in svc.aud.openings(svc.ledger.size):
        op = json.loads(body)
        if op.get("kind") == "query":
            key = (op["request"]["account"], op["request"]["counter"])
            named[key] = named.get(key, 0) + 1
    out = {"finished_by_b": 0, "documents_charged": {}}
    for account, h in held.items():
        assert h["pid"] == a_pid, "the hold was not replica A's"
        assert h["held_at"] <= killed_at < h["held_at"] + HOLD_SECONDS, "A was not holding it when it was killed"
        entry = next(e for e in res.clients[account].receipts if e["receipt"]["counter"] == 1)
        h_req = request_hash(entry["request"]).hex()
        assert entry["receipt"]["h_req"] == h_req
        assert entry["receipt"]["pos"] == h["pos"], "B answered at another position than the leaf A appended"
        assert leaves.get(h_req) == [h["pos"]], "not exactly one query leaf for the request"
        assert named.get((account, 1)) == 1, "not exactly one opening (one charge) for the request"
        op = json.loads(svc.aud.opening(h["pos"]))
        assert op["request"] == entry["request"]
        ids = [i for ch in op["charge"]["charges"] for i in ch["ids"]]
        assert len(ids) == len(set(ids))
        out["documents_charged"][account] = len(ids)
        out["finished_by_b"] += 1
    return out


def test_sigkill_a_replica_mid_request_and_restart_postgres_mid_load(tmp_path, pg_cluster):
    """Replica A is SIGKILLed while it holds requests between their record commit (charged, query leaf appended) and
    their stored answer, then PostgreSQL restarts (fast shutdown: every connection dropped) mid-load; each client
    resends the same signed request to replica B until it is answered. The held requests are finished by B from A's
    record, at the ledger positions A appended, charged once; every request is answered exactly once, none is
    charged twice, and the bundle PASSes.

    A holds them with the toy generator's test-only hold (``DPRAG_TEST_TOY_HOLD``, audit/testing/toy.py): it writes a
    file and waits before generating the answers of HELD's first requests. The test waits (with a deadline) until
    the store shows those requests recorded without an answer, kills A, and restarts PostgreSQL at once."""
    d = tmp_path / "toy"
    observer = make_toy_directory(d, store=pg_cluster.url, accounts=12, n=50)  # reads the store during the run
    schema_url = observer.store.describe()["url"]
    hold_dir = tmp_path / "held"
    hold = {"match": rf" ({'|'.join(HELD)}) 0$", "seconds": HOLD_SECONDS, "dir": str(hold_dir)}
    a, url_a = start_replica(d, env={HOLD_ENV: json.dumps(hold)})
    b, url_b = start_replica(tmp_path / "host-b", toy=False, store=schema_url)
    events, state = [], {}

    def faults() -> None:
        t0 = time.monotonic()
        try:
            state["held"] = _poll(lambda: _held_by_a(observer, hold_dir), "replica A holding the HELD requests")
            state["kill_after"] = time.monotonic() - t0
            state["killed_at"] = time.time()
            a.send_signal(signal.SIGKILL)
            a.wait(30)
            events.append("sigkill replica a")
            state["rows_before_restart"] = _poll(observer.aud.served_count, "the served rows")
            pg_cluster.restart(down_seconds=0.5)
            state["restarted_after"] = time.monotonic() - t0
            events.append("postgres restarted")
        except BaseException as e:  # noqa: BLE001 - reported by the test below
            state["error"] = e
        finally:
            if a.poll() is None:  # whatever happened, the held requests must not wait for the hold to end
                a.kill()

    try:
        accounts = ["alice", "bob", "carol", "dave"] + [f"a{i:02d}" for i in range(5, 13)]
        res = run_accounts(d, accounts, lambda i: [url_a, url_b], 6, attempts=40, during=faults)
    finally:
        stop_replicas(a, b)
        observer.close()
    assert "error" not in state, repr(state.get("error"))
    assert events == ["sigkill replica a", "postgres restarted"]
    assert a.returncode == -signal.SIGKILL
    assert state["rows_before_restart"] < 72  # the restart came mid-load: HELD's later requests were not yet sent
    got = _check(
        d,
        pg_cluster.url,
        res,
        tmp_path,
        72,
        then=lambda svc: _recorded_by_a_finished_by_b(svc, res, state["held"], a.pid, state["killed_at"]),
    )
    assert res.retries >= len(HELD)  # each held request's client resent it at least once (to B)
    assert got["then"]["finished_by_b"] == len(HELD) >= 1
    print(
        f"fault run: sent {res.sent}, answered {res.answered}, retries {res.retries}, recorded by A and finished by B "
        f"{got['then']['finished_by_b']} (documents charged each: {got['then']['documents_charged']}), "
        f"A killed at {state['kill_after']:.2f} s, PostgreSQL back at {state['restarted_after']:.2f} s (served rows "
        f"then {state['rows_before_restart']}), load {res.seconds:.2f} s, "
        f"{ {k: v for k, v in got.items() if k != 'then'} }"
    )
