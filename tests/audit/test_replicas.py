"""Replicas of ``dprag serve`` (real processes on loopback) over one store, under load and under faults: no overspend,
no lost or duplicated record, a gapless ledger, every request answered exactly once after retries, verify PASS.

Bounded: every run is M accounts x a fixed number of requests; every wait has a timeout."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from dprag.audit.api.toy import make_toy_directory, open_toy_directory
from dprag.audit.testing.live import start_replica, stop_replicas
from dprag.audit.testing.load import audit_window, run_accounts

pytest.importorskip("fastapi")


def _check(d: Path, store: str | None, res, out: Path, requests: int) -> dict:
    assert not res.errors, res.errors[:3]
    assert res.answered == requests
    svc = open_toy_directory(d, store=store)
    try:
        got = audit_window(svc, res, out)
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


def test_sigkill_a_replica_and_restart_postgres_mid_load(tmp_path, pg_cluster):
    """Replica A is killed with SIGKILL mid-load and PostgreSQL restarts (fast shutdown: every connection dropped)
    mid-load; each client resends the same signed request to the other replica until it is answered. Every request
    is answered exactly once, no request is charged twice, and the bundle PASSes."""
    d = tmp_path / "toy"
    svc = make_toy_directory(d, store=pg_cluster.url, accounts=12, n=50)
    schema_url = svc.store.describe()["url"]
    svc.close()
    a, url_a = start_replica(d)
    b, url_b = start_replica(tmp_path / "host-b", toy=False, store=schema_url)
    rng = random.Random(11)
    events = []

    def faults() -> None:
        time.sleep(rng.uniform(0.3, 0.8))
        a.send_signal(signal.SIGKILL)
        events.append(("sigkill replica a", time.monotonic()))
        time.sleep(rng.uniform(0.3, 0.8))
        pg_cluster.restart(down_seconds=0.5)
        events.append(("postgres restarted", time.monotonic()))

    try:
        accounts = ["alice", "bob", "carol", "dave"] + [f"a{i:02d}" for i in range(5, 13)]
        res = run_accounts(d, accounts, lambda i: [url_a, url_b], 6, attempts=40, during=faults)
    finally:
        stop_replicas(a, b)
    assert [e[0] for e in events] == ["sigkill replica a", "postgres restarted"]
    assert a.returncode == -signal.SIGKILL
    got = _check(d, pg_cluster.url, res, tmp_path, 72)
    assert res.retries > 0  # the faults were felt
    print(f"fault run: sent {res.sent}, answered {res.answered}, retries {res.retries}, {got}")
