"""Append-only logs (audit/protocol/ledger/store.py): in-memory and SQLite stores against the RFC oracle, persistence,
typed errors without state change, corruption detection, thread group commit, several processes appending to
one database, and crash safety under SIGKILL at random times.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dprag.audit.protocol.ledger import (
    LedgerCorruptError,
    LedgerError,
    LedgerRangeError,
    MemoryLog,
    NoteSigner,
    SqliteLog,
    open_checkpoint,
    verify_consistency,
    verify_inclusion,
)
from dprag.audit.protocol.ledger.rfc6962 import hash_leaf, root_from_leaves
from dprag.errors import DpragError, InvalidParameterError

REPO = Path(__file__).resolve().parents[3]


def oracle_mth(d):
    n = len(d)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + d[0]).digest()
    k = 1
    while 2 * k < n:
        k *= 2
    return hashlib.sha256(b"\x01" + oracle_mth(d[:k]) + oracle_mth(d[k:])).digest()


@pytest.fixture(params=["memory", "sqlite"])
def make_log(request, tmp_path):
    logs = []

    def make():
        log = MemoryLog() if request.param == "memory" else SqliteLog(tmp_path / f"log{len(logs)}.db")
        logs.append(log)
        return log

    yield make
    for log in logs:
        log.close()


def test_random_appends_match_oracle(make_log):
    rng = random.Random(11)
    log = make_log()
    leaves: list[bytes] = []
    while len(leaves) < 300:
        if rng.random() < 0.5:
            x = rng.randbytes(rng.randrange(0, 30))
            assert log.append(x) == len(leaves)
            leaves.append(x)
        else:
            batch = [rng.randbytes(rng.randrange(0, 30)) for _ in range(rng.randrange(1, 20))]
            assert log.append_many(batch) == len(leaves)
            leaves.extend(batch)
        n = len(leaves)
        assert log.size == len(log) == n
        assert log.root() == oracle_mth(leaves)
    assert list(log.leaves()) == leaves
    assert list(log.leaves(5, 17)) == leaves[5:17]
    for n in range(0, len(leaves) + 1, 7):
        assert log.root(n) == oracle_mth(leaves[:n])
    for _ in range(200):
        n = rng.randrange(1, len(leaves) + 1)
        i = rng.randrange(n)
        assert log.leaf(i) == leaves[i] and log.leaf_hash(i) == hash_leaf(leaves[i])
        verify_inclusion(i, n, hash_leaf(leaves[i]), log.inclusion_proof(i, n).hashes, oracle_mth(leaves[:n]))
        m = rng.randrange(1, n + 1)
        verify_consistency(m, n, log.consistency_proof(m, n).hashes, oracle_mth(leaves[:m]), oracle_mth(leaves[:n]))
    assert log.verify_integrity() == len(leaves)


def test_bad_input_raises_typed_errors_and_changes_nothing(make_log):
    log = make_log()
    log.append_many([b"a", b"b", b"c"])
    root = log.root()
    bad_calls = [
        (lambda: log.append("text"), InvalidParameterError, "leaf"),
        (lambda: log.append(None), InvalidParameterError, "leaf"),
        (lambda: log.append_many([]), InvalidParameterError, "leaves"),
        (lambda: log.append_many(b"abc"), InvalidParameterError, "leaves"),
        (lambda: log.append_many([b"ok", 5]), InvalidParameterError, "leaves[1]"),
        (lambda: log.leaf(3), LedgerRangeError, "index"),
        (lambda: log.leaf(-1), LedgerRangeError, "index"),
        (lambda: log.leaf_hash(3), LedgerRangeError, "index"),
        (lambda: log.root(4), LedgerRangeError, "size"),
        (lambda: log.root(-1), LedgerRangeError, "size"),
        (lambda: log.inclusion_proof(3), LedgerRangeError, "index"),
        (lambda: log.inclusion_proof(0, 4), LedgerRangeError, "size"),
        (lambda: log.inclusion_proof(0, 0), LedgerRangeError, "index"),
        (lambda: log.inclusion_proof(1.0), LedgerRangeError, "index"),
        (lambda: log.consistency_proof(0, 3), LedgerRangeError, "size1"),
        (lambda: log.consistency_proof(3, 2), LedgerRangeError, "size1"),
        (lambda: log.consistency_proof(1, 4), LedgerRangeError, "size2"),
        (lambda: log.leaves(2, 5), LedgerRangeError, "stop"),  # checked at call time, not first next()
        (lambda: log.leaves(3, 2), LedgerRangeError, "start"),
        (lambda: log.leaves(0, 2, chunk=0), InvalidParameterError, "chunk"),
    ]
    for fn, err, field in bad_calls:
        with pytest.raises(err) as e:
            fn()
        assert e.value.field == field and isinstance(e.value, DpragError)
        assert log.size == 3 and log.root() == root
    assert log.root(0) == hashlib.sha256(b"").digest()
    assert list(log.leaves(3)) == []


def test_accepts_bytes_like_leaves(make_log):
    log = make_log()
    log.append_many([bytearray(b"x"), memoryview(b"y"), b""])
    assert list(log.leaves()) == [b"x", b"y", b""]
    assert log.root() == oracle_mth([b"x", b"y", b""])


def test_checkpoint_from_store(make_log):
    log = make_log()
    log.append_many([b"r%d" % i for i in range(10)])
    signer = NoteSigner.generate("example.org/ledger")
    cp, _ = open_checkpoint(log.checkpoint(signer, "example.org/ledger"), "example.org/ledger", signer.verifier())
    assert (cp.size, cp.root) == (10, log.root())
    cp4, _ = open_checkpoint(
        log.checkpoint(signer, "example.org/ledger", size=4), "example.org/ledger", signer.verifier()
    )
    assert (cp4.size, cp4.root) == (4, oracle_mth([b"r%d" % i for i in range(4)]))


def test_sqlite_reopen_resumes_exactly(tmp_path):
    path = tmp_path / "l.db"
    rng = random.Random(2)
    leaves = [rng.randbytes(20) for _ in range(1000)]
    with SqliteLog(path) as log:
        log.append_many(leaves[:777])
        root777 = log.root()
        proof = log.inclusion_proof(123, 700)
    with SqliteLog(path, verify="full") as log:
        assert log.size == 777 and log.root() == root777 == oracle_mth(leaves[:777])
        assert log.inclusion_proof(123, 700) == proof
        for x in leaves[777:800]:
            log.append(x)
        log.append_many(leaves[800:])
        assert log.root() == root_from_leaves(leaves)
    with SqliteLog(path, readonly=True) as ro:
        assert ro.size == 1000 and ro.root() == root_from_leaves(leaves)
        assert list(ro.leaves(990)) == leaves[990:]
        with pytest.raises(LedgerError):
            ro.append(b"nope")
        assert ro.size == 1000


def test_sqlite_schema_and_pragmas(tmp_path):
    path = tmp_path / "l.db"
    with SqliteLog(path) as log:
        log.append_many([b"a", b"b", b"c"])
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("PRAGMA application_id").fetchone()[0] == 0x4450524C
    assert con.execute("PRAGMA user_version").fetchone()[0] == 1
    # stored hashes are in append order: leaf 0, leaf 1, node(1,0), leaf 2
    rows = con.execute("SELECT pos, hash FROM node ORDER BY pos").fetchall()
    ha, hb, hc = (hash_leaf(x) for x in (b"a", b"b", b"c"))
    assert [h for _, h in rows] == [ha, hb, hashlib.sha256(b"\x01" + ha + hb).digest(), hc]
    # append-only triggers
    with pytest.raises(sqlite3.DatabaseError):
        con.execute("UPDATE leaf SET data = x'00' WHERE idx = 0")
    with pytest.raises(sqlite3.DatabaseError):
        con.execute("DELETE FROM node WHERE pos = 3")
    con.close()


def test_sqlite_refuses_foreign_databases(tmp_path):
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    with pytest.raises(InvalidParameterError) as e:
        SqliteLog(path)
    assert e.value.field == "path"
    with pytest.raises(InvalidParameterError):
        SqliteLog(tmp_path / "missing.db", readonly=True)
    with pytest.raises(InvalidParameterError):
        SqliteLog(tmp_path / "x.db", synchronous="OFF")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(InvalidParameterError):
        SqliteLog(junk)
    with pytest.raises(InvalidParameterError):
        SqliteLog(tmp_path)  # a directory
    with pytest.raises(InvalidParameterError):
        MemoryLog(b"abc")


def _tamper(path, sql, params=()):
    con = sqlite3.connect(path)
    for name in ("leaf_append_only_u", "leaf_append_only_d", "node_append_only_u", "node_append_only_d"):
        con.execute(f"DROP TRIGGER IF EXISTS {name}")
    con.execute(sql, params)
    con.commit()
    con.close()


@pytest.mark.parametrize(
    "sql,params,quick_detects",
    [
        ("DELETE FROM node WHERE pos = (SELECT max(pos) FROM node)", (), True),  # torn tail
        ("DELETE FROM leaf WHERE idx = (SELECT max(idx) FROM leaf)", (), True),
        ("UPDATE leaf SET data = x'ff' WHERE idx = (SELECT max(idx) FROM leaf)", (), True),
        ("UPDATE node SET hash = zeroblob(32) WHERE pos = (SELECT max(pos) FROM node)", (), True),
        ("DELETE FROM leaf WHERE idx = 0", (), True),
        ("UPDATE leaf SET data = x'ff' WHERE idx = 10", (), False),  # deep change: only a full check sees it
        ("UPDATE node SET hash = zeroblob(32) WHERE pos = 5", (), False),
    ],
)
def test_corruption_is_detected_on_open(tmp_path, sql, params, quick_detects):
    path = tmp_path / "l.db"
    with SqliteLog(path) as log:
        log.append_many([b"leaf-%d" % i for i in range(100)])
    _tamper(path, sql, params)
    if quick_detects:
        with pytest.raises(LedgerCorruptError):
            SqliteLog(path)
    else:
        SqliteLog(path).close()  # the O(log n) check on open does not read deep history
    with pytest.raises(LedgerCorruptError):
        SqliteLog(path, verify="full")


def test_memory_log_integrity_check_detects_tampering():
    log = MemoryLog([b"x%d" % i for i in range(50)])
    assert log.verify_integrity() == 50
    log._levels[2][3] = bytes(32)
    with pytest.raises(LedgerCorruptError):
        log.verify_integrity()


def test_thread_group_commit(tmp_path):
    """8 threads x 150 single appends: every call gets a distinct index whose leaf is its own record, and
    concurrent calls share transactions (fewer commits than appends)."""
    log = SqliteLog(tmp_path / "g.db")
    commits = []
    orig = log._commit

    def counting_commit(leaves):
        commits.append(len(leaves))
        return orig(leaves)

    log._commit = counting_commit
    got: dict[int, bytes] = {}
    lock = threading.Lock()
    start = threading.Barrier(8)

    def worker(t):
        start.wait()
        for j in range(150):
            rec = b"thread-%d-%d" % (t, j)
            i = log.append(rec)
            with lock:
                assert i not in got
                got[i] = rec

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(got) == list(range(1200))
    assert all(log.leaf(i) == rec for i, rec in got.items())
    # Fewer commits than appends: while one thread fsyncs, the 7 others queue behind it, so sharing is
    # systematic, not a timing accident (it would take 1200 consecutive uncontended appends to fail).
    assert sum(commits) == 1200 and len(commits) < 1200
    assert log.verify_integrity() == 1200
    log.close()


WORKER = r"""
import sys
from dprag.audit.protocol.ledger import SqliteLog
path, wid, count, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
log = SqliteLog(path, timeout=120)
print("ready", flush=True)
j = 0
while j < count:
    if batch == 1 or j % 3 == 0:
        first = log.append(b"w%s-%06d" % (wid.encode(), j))
        print(first, j, 1, flush=True)
        j += 1
    else:
        k = min(batch, count - j)
        first = log.append_many([b"w%s-%06d" % (wid.encode(), j + t) for t in range(k)])
        print(first, j, k, flush=True)
        j += k
"""


def _spawn(args):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-c", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    )


@pytest.mark.integration
def test_several_processes_append_to_one_log(tmp_path):
    """4 processes append concurrently (single appends and batches) while this process keeps publishing
    (size, root) pairs; afterwards the log is one consistent append-only sequence: every record exactly
    once at the index its writer was told, each writer's records in its own order, and every root seen
    during the run is a consistent prefix of the final tree."""
    path = tmp_path / "mp.db"
    reader = SqliteLog(path)  # creates the schema; the writers open an existing log
    workers = [_spawn([WORKER, str(path), str(w), "240", "7"]) for w in range(4)]
    observed = []
    while any(p.poll() is None for p in workers):
        n = reader.size
        if n:
            observed.append((n, reader.root(n)))
        time.sleep(0.002)
    outs = [p.communicate() for p in workers]
    for p, (_out, err) in zip(workers, outs, strict=False):
        assert p.returncode == 0, err
    log = SqliteLog(path, verify="full")
    assert log.size == 4 * 240
    leaves = list(log.leaves())
    assert len(set(leaves)) == 960
    for w, (out, _) in enumerate(outs):
        lines = out.split("\n")[1:]
        for line in filter(None, lines):
            first, j, k = map(int, line.split())
            for t in range(k):
                assert leaves[first + t] == b"w%d-%06d" % (w, j + t)
        mine = [i for i, x in enumerate(leaves) if x.startswith(b"w%d-" % w)]
        assert [leaves[i] for i in mine] == sorted(leaves[i] for i in mine)  # own order preserved
    final = log.root()
    assert observed, "the reader saw the log grow"  # the writers need >= 0.3 s to start up
    for n, r in observed:
        assert r == log.root(n)
        if n < log.size:
            verify_consistency(n, log.size, log.consistency_proof(n).hashes, r, final)
    reader.close()
    log.close()


@pytest.mark.integration
def test_processes_race_to_create_a_new_log(tmp_path):
    """Several processes opening a not-yet-existing path at once: exactly one creates the schema, all
    append, nothing is lost."""
    for trial in range(3):
        path = tmp_path / f"new{trial}.db"
        workers = [_spawn([WORKER, str(path), str(w), "20", "5"]) for w in range(4)]
        for p in workers:
            _, err = p.communicate()
            assert p.returncode == 0, err
        with SqliteLog(path, verify="full") as log:
            assert log.size == 80 and len(set(log.leaves())) == 80


OPEN_AT_ONCE = r"""
import sys
from dprag.audit.protocol.ledger import SqliteLog
print("ready", flush=True)
sys.stdin.readline()
log = SqliteLog(sys.argv[1], timeout=120)
log.append(b"w" + sys.argv[2].encode())
"""


@pytest.mark.integration
def test_processes_released_together_all_open_a_new_log(tmp_path):
    """The same race made likely: 6 processes import first, then are released together onto one new path.

    Switching a new file to WAL takes an exclusive lock and SQLite answers SQLITE_BUSY at once, without the
    busy handler, when two shared-lock holders both ask for it. Before the open retried that, 16 of 40 such
    trials failed here with "database is locked" (so these 10 trials miss the defect with probability about
    0.6^10 = 0.6%); with the retry, 0 of 40. Deterministic when the log is correct: no false-failure rate.
    """
    for trial in range(10):
        path = tmp_path / f"together{trial}.db"
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", OPEN_AT_ONCE, str(path), str(w)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")),
            )
            for w in range(6)
        ]
        for p in workers:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        for p in workers:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in workers:
            _, err = p.communicate()
            assert p.returncode == 0, err
        with SqliteLog(path, verify="full") as log:
            assert sorted(log.leaves()) == sorted(b"w%d" % w for w in range(6))


CRASH_WORKER = r"""
import sys
from dprag.audit.protocol.ledger import SqliteLog
path, batch = sys.argv[1], int(sys.argv[2])
log = SqliteLog(path)
n = log.size
print("ready", n, flush=True)
while True:
    first = log.append_many([b"rec-%08d" % (n + t) for t in range(batch)])
    assert first == n
    n += batch
    print(n, flush=True)  # acknowledged: durable before this line is written
"""


@pytest.mark.integration
def test_sigkill_mid_append_never_tears_the_tree(tmp_path):
    """A writer appends 4999-leaf batches of a fixed sequence; it is SIGKILLed at seeded random moments and
    restarted 6 times. After every kill the log opens with a full integrity check, holds an exact prefix
    of the sequence made of whole batches, and holds at least every batch the writer acknowledged.
    A batch spends most of its time inside its write transaction (inserting ~10^4 rows), so most kills
    land mid-transaction; the others land between commit and acknowledgement."""
    path = tmp_path / "crash.db"
    SqliteLog(path).close()
    rng = random.Random(20240601)
    batch = 4999
    for _round in range(6):
        p = _spawn([CRASH_WORKER, str(path), str(batch)])
        line = p.stdout.readline()
        assert line.startswith("ready"), p.stderr.read()
        time.sleep(rng.uniform(0.03, 0.3))
        p.send_signal(signal.SIGKILL)
        out, _ = p.communicate()
        assert p.returncode == -signal.SIGKILL
        acked = [int(x) for x in out.split()] or [int(line.split()[1])]
        with SqliteLog(path, verify="full") as log:
            n = log.size
            assert n % batch == 0, "a partially written batch survived"
            assert n >= max(acked), "an acknowledged append was lost"
            assert n <= max(acked) + batch  # at most the one batch in flight
            leaves = list(log.leaves())
            assert leaves == [b"rec-%08d" % i for i in range(n)]
            assert log.root() == root_from_leaves(leaves)
    assert n > 0


def test_a_lock_held_past_the_timeout_is_a_ledger_error_not_a_bad_file(tmp_path):
    """Another connection holding a new file exclusively past ``timeout``: the open says so (LedgerError naming
    the timeout), not that the file is unusable, and leaves the file to its holder."""
    path = tmp_path / "held.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    t = time.monotonic()
    with pytest.raises(LedgerError, match="locked for more than timeout = 0.2 s") as e:
        SqliteLog(path, timeout=0.2)
    assert not isinstance(e.value, InvalidParameterError)
    assert 0.2 <= time.monotonic() - t < 30
    holder.execute("COMMIT")
    holder.close()
    with SqliteLog(path, timeout=5) as log:  # released: the same path opens and creates the schema
        assert log.append(b"x") == 0 and log.size == 1
