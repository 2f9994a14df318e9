"""Reliability of the provider: SIGKILL at random points, concurrent serving processes, fuzzed bundles.

Each test is sized to about a minute or less on 2 cores; larger sweeps are slow-marked.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dprag.audit.protocol.bundle import BundleError
from dprag.audit.protocol.encoding import decode
from dprag.audit.testing.window import open_service, reopen_service
from dprag.audit.verify import verify

pytestmark = pytest.mark.integration  # starts servers or processes (CONTRIBUTING.md)

ROOT = Path(__file__).resolve().parents[2]


def _spawn(directory, account, count, released, start=0):
    code = (
        "import sys; from dprag.audit.testing.window import serve_loop; "
        f"serve_loop({str(directory)!r}, {account!r}, {count}, {str(released)!r}, {start})"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _released_units(svc, released: Path) -> dict[str, np.ndarray]:
    """Per-tenant spend implied by the queries whose receipts were released."""
    tenants = {t: np.zeros(len(v.retriever), dtype=np.int64) for t, v in svc.tenants.items()}
    openings = {p: json.loads(b) for p, b in svc.aud.openings(svc.ledger.size)}
    for line in released.read_bytes().splitlines():
        rc = decode(line)["receipt"]
        for ch in openings[rc["pos"]]["charge"]["charges"]:
            tenants[rc["tenant"]][np.asarray(ch["ids"], dtype=np.int64)] += ch["cost"]["epsilon_units"]
    return tenants


def _check_spend_covers_releases(directory: Path, released: Path):
    svc = reopen_service(directory)
    rel = _released_units(svc, released)
    for t, units in rel.items():
        stored = svc.tenants[t].filter.spent_units(np.arange(units.size))[:, 0]
        assert np.all(stored >= units), f"tenant {t}: recorded spend below what was released"
    return svc


def test_sigkill_at_random_points_then_finish_and_pass(tmp_path):
    rng = random.Random(20261122)
    d = tmp_path / "svc"
    accounts = {f"u{i}": "clinic" for i in range(12)}
    # the 9 accounts used ask alike (one cluster of 9): k_max = 9 keeps δ_policy = 1e-5 > k_max·δ_acc
    open_service(d, accounts=accounts, n=400, max_queries_per_doc=500, k_max=9).close()
    released = tmp_path / "released.jsonl"
    released.touch()
    kills = 0
    for cycle in range(6):  # each cycle pays a process start (~3 s): 6 random kill points
        before = released.stat().st_size
        p = _spawn(d, f"u{cycle}", 300, released)
        # wait until the child is serving (its first release), then kill it at a random point
        deadline = time.monotonic() + 120
        while released.stat().st_size == before and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        # a request takes a few ms, so any window of a few dozen requests puts the kill at a uniformly random point of
        # the request path; a shorter window only means fewer requests to verify afterwards
        time.sleep(rng.uniform(0.0, 0.3))
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.wait()
    assert kills >= 4  # most cycles really were killed mid-serving
    # restart (recovery), finish a few more queries, verify
    p = _spawn(d, "u11", 5, released)
    assert p.wait() == 0, p.stderr.read().decode()
    svc = _check_spend_covers_releases(d, released)
    svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(tmp_path / "bundle", receipts=released)
    assert v.verdict == "PASS", v.reasons[:5]
    assert v.checked["receipts"] == len(released.read_bytes().splitlines())


def test_eight_processes_serving_overlapping_documents(tmp_path):
    d = tmp_path / "svc"
    accounts = {f"p{i}": "clinic" for i in range(8)}
    # M = 3: the 30 relevant documents are contended; any overspend or mis-ordered charge fails the replay
    # 8 accounts asking alike: the coalition estimator sees one cluster of 8, so the cap is k_max = 8
    open_service(d, accounts=accounts, n=12, max_queries_per_doc=3, k_max=8).close()
    released = tmp_path / "released.jsonl"
    released.touch()
    procs = [_spawn(d, f"p{i}", 10, released) for i in range(8)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read().decode()
    svc = _check_spend_covers_releases(d, released)
    assert svc.ledger.size == 1 + 80
    limit = int(svc.budget.limits[0])
    spent = svc.tenants["clinic"].filter.spent_units(np.arange(100))[:, 0]
    assert spent.max() <= limit and spent.max() > 0
    svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(tmp_path / "bundle", receipts=released)
    assert v.verdict == "PASS", v.reasons[:5]


def test_fuzzed_bundles_never_crash_the_verifier(tmp_path):
    # random multi-byte corruption, truncation and garbage files: the verifier returns FAIL or raises
    # BundleError (exit 2), never another exception
    from dprag.audit.testing.window import build_window

    w = build_window(tmp_path / "w", rounds=2)
    rng = random.Random(7)
    files = [p for p in w.bundle.rglob("*") if p.is_file()]
    originals = {p: p.read_bytes() for p in files}
    for _trial in range(60):
        victims = rng.sample(files, rng.randint(1, 3))
        for f in victims:
            data = bytearray(originals[f])
            action = rng.choice(["flip", "truncate", "garbage", "empty"])
            if action == "flip" and data:
                for _ in range(rng.randint(1, 8)):
                    data[rng.randrange(len(data))] = rng.randrange(256)
            elif action == "truncate":
                data = data[: rng.randrange(len(data) + 1)]
            elif action == "garbage":
                data = bytearray(rng.randbytes(rng.randint(0, 300)))
            else:
                data = bytearray()
            f.write_bytes(bytes(data))
        try:
            v = verify(w.bundle, receipts=w.receipts, mode=rng.choice(["full", "sampled"]), samples=2)
            assert v.verdict == "FAIL"
            assert v.reasons
        except BundleError:
            pass
        for f in victims:
            f.write_bytes(originals[f])
    assert verify(w.bundle, receipts=w.receipts).verdict == "PASS"
