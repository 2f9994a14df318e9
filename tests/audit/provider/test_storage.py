"""The window's store (audit/provider/storage): one interface, the same tests on SQLite and on a real PostgreSQL server.

What a party trying to break it would try: two writers interleaving their appends (threads, processes), a charge whose
enclosing transaction fails after it ran (the charge must vanish with the leaf), an UPDATE or DELETE of a ledger row,
a second window created over the first one's schema, a replica pointed at another window's schema."""

from __future__ import annotations

import json
import multiprocessing as mp
import secrets
import threading
from pathlib import Path

import numpy as np
import pytest

from dprag.accounting.stores import MemoryBudgetStore
from dprag.accounting.stores.session import SessionBudgetStore
from dprag.audit.protocol.errors import StoreError
from dprag.audit.protocol.ledger import MemoryLog
from dprag.audit.provider.storage import StoreLog, create_store, open_store
from dprag.audit.testing import window as fx
from dprag.errors import InvalidParameterError


def _fresh(tmp_path: Path, url: str | None, name: str = "w"):
    d = tmp_path / name
    (d / "config").mkdir(parents=True)
    return d, create_store(d, url, window=name)


def test_ledger_matches_the_reference_log(tmp_path, store_url):
    d, store = _fresh(tmp_path, store_url)
    log, ref = StoreLog(store), MemoryLog()
    rng = np.random.default_rng(3)
    for _ in range(12):
        leaves = [rng.bytes(int(rng.integers(0, 40))) for _ in range(int(rng.integers(1, 6)))]
        assert log.append_many(leaves) == ref.size
        ref.append_many(leaves)
    assert log.size == ref.size
    for size in range(1, ref.size + 1):
        assert log.root(size) == ref.root(size)
    assert log.inclusion_proof(7, 30).hashes == ref.inclusion_proof(7, 30).hashes
    assert log.consistency_proof(5, ref.size).hashes == ref.consistency_proof(5, ref.size).hashes
    assert log.verify_integrity() == ref.size
    store.close()


def test_the_ledgers_node_cache_never_holds_a_rolled_back_hash(tmp_path, store_url):
    """The StoreLog keeps committed perfect-subtree hashes in memory for its proofs. A party racing it: nodes read
    inside a write transaction that then rolls back (and are rewritten differently by the next append) must not be
    served later, when another replica then appends there; every proof and root stays equal to the reference log's,
    and a repeated proof reads no node."""
    d, store = _fresh(tmp_path, store_url)
    log, ref = StoreLog(store), MemoryLog()
    log.append_many([b"l%d" % i for i in range(9)])
    ref.append_many([b"l%d" % i for i in range(9)])
    with pytest.raises(RuntimeError):
        with store.write():
            log.append_many([b"doomed-a", b"doomed-b", b"doomed-c"])
            assert log.consistency_proof(3, 12).hashes  # reads the doomed nodes inside the transaction
            assert log.root(12)
            raise RuntimeError("rolled back")
    StoreLog(store).append_many([b"kept-a", b"kept-b", b"kept-c", b"kept-d"])  # another replica's append
    ref.append_many([b"kept-a", b"kept-b", b"kept-c", b"kept-d"])
    fresh = StoreLog(store)  # no cache
    for size1 in range(1, 14):
        want = ref.consistency_proof(size1, 13).hashes
        assert log.consistency_proof(size1, 13).hashes == want == fresh.consistency_proof(size1, 13).hashes
    assert log.root(12) == ref.root(12) and log.root(13) == ref.root(13)
    if store.dialect == "sqlite":
        seen: list[str] = []
        with store.traced(seen.append):
            log.consistency_proof(5, 13)
        assert not any("ledger_node" in q for q in seen), seen
    store.close()


def test_ledger_rows_are_append_only(tmp_path, store_url):
    d, store = _fresh(tmp_path, store_url)
    StoreLog(store).append_many([b"a", b"b"])
    for sql in ("UPDATE ledger_leaf SET data = ? WHERE idx = 0", "DELETE FROM ledger_node WHERE pos = ?"):
        with pytest.raises(StoreError, match="append-only"):
            with store.write() as s:
                s.execute(sql, (b"x",) if "UPDATE" in sql else (0,))
    assert StoreLog(store).leaf(0) == b"a"
    store.close()


def test_budget_rows_charge_like_the_reference_store(tmp_path, store_url):
    d, store = _fresh(tmp_path, store_url)
    n = 40
    got = SessionBudgetStore(store.sessions, "t", n)
    ref = MemoryBudgetStore(n)
    desc = {"mode": "pure", "test": 1}
    got.bind(np.array([10, 7]), desc)
    ref.bind(np.array([10, 7]), desc)
    rng = np.random.default_rng(5)
    for _ in range(60):
        reqs = [
            (rng.choice(n, size=int(rng.integers(1, 8)), replace=False), rng.integers(0, 4, size=2))
            for _ in range(int(rng.integers(1, 4)))
        ]
        for a, b in zip(got.charge_many(reqs), ref.charge_many(reqs), strict=True):
            assert np.array_equal(a, b)
    assert np.array_equal(got.load(np.arange(n)), ref.load(np.arange(n)))
    assert np.array_equal(got.spend_table(), ref.load(np.arange(n)))
    # reopened: the same rows, the same binding; another budget is refused
    again = SessionBudgetStore(store.sessions, "t")
    assert again.n_docs == n and np.array_equal(again.load(np.arange(n)), ref.load(np.arange(n)))
    with pytest.raises(InvalidParameterError, match="different budget"):
        again.bind(np.array([11, 7]), desc)
    store.close()


def test_a_charge_rolls_back_with_its_transaction(tmp_path, store_url):
    """A charge made inside a write transaction that then fails is not recorded: nothing was released for it."""
    d, store = _fresh(tmp_path, store_url)
    b = SessionBudgetStore(store.sessions, "t", 10)
    b.bind(np.array([5]), {"mode": "pure"})
    with pytest.raises(RuntimeError):
        with store.write():
            assert b.charge([1, 2, 3], np.array([2])).all()
            StoreLog(store).append(b"leaf")
            raise RuntimeError("crash before commit")
    assert b.load([1, 2, 3]).sum() == 0 and StoreLog(store).size == 0
    store.close()


def test_writers_in_threads_serialise_on_the_tail(tmp_path, store_url):
    """16 threads each append 10 leaves one at a time, reading the size first inside their transaction: with one
    lock on the ledger's tail, every leaf lands where its writer read the size (no two writers interleave)."""
    d, store = _fresh(tmp_path, store_url)
    log = StoreLog(store)
    bad: list = []

    def work(t: int) -> None:
        for i in range(10):
            with store.write():
                pos = log.size
                got = log.append(json.dumps([t, i, pos]).encode())
                if got != pos:
                    bad.append((t, i, pos, got))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not bad and log.size == 160
    assert [json.loads(x)[2] for x in log.leaves(0, 160)] == list(range(160))
    store.close()


def _append_in_process(d: str, url: str | None, k: int, out) -> None:
    store = open_store(Path(d), url)
    log = StoreLog(store)
    for i in range(25):
        with store.write():
            pos = log.size
            log.append(json.dumps([k, i, pos]).encode())
    store.close()
    out.put(k)


@pytest.mark.integration
def test_writers_in_processes_serialise_on_the_tail(tmp_path, store_url):
    d, store = _fresh(tmp_path, store_url)
    q = mp.get_context("spawn").Queue()
    procs = [
        mp.get_context("spawn").Process(target=_append_in_process, args=(str(d), store_url, k, q)) for k in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs)
    log = StoreLog(store)
    assert log.size == 100 and [json.loads(x)[2] for x in log.leaves(0, 100)] == list(range(100))
    assert log.verify_integrity() == 100
    store.close()


@pytest.mark.integration
def test_a_second_window_cannot_take_over_a_schema(tmp_path, pg_url):
    taken = f"taken_w_{secrets.token_hex(4)}"  # fresh even on a reused server ($DPRAG_TEST_PG)
    d1 = tmp_path / "a"
    (d1 / "config").mkdir(parents=True)
    s1 = create_store(d1, pg_url + f"?schema={taken}", window="a")
    StoreLog(s1).append(b"genesis")
    d2 = tmp_path / "b"
    (d2 / "config").mkdir(parents=True)
    with pytest.raises(InvalidParameterError, match="already holds"):
        create_store(d2, pg_url + f"?schema={taken}", window="b")
    with pytest.raises(InvalidParameterError, match="another database or schema"):
        open_store(d1, pg_url + "?schema=other_w")
    s1.close()


def test_bad_store_urls_name_the_field(tmp_path):
    d = tmp_path / "w"
    (d / "config").mkdir(parents=True)
    for url, rule in (
        ("mysql://x/y", "postgresql://"),
        ("postgresql://u@h/", "name a database"),
        ("postgresql://u@h/db?schema=Bad-Name", "lower-case SQL identifier"),
        ("postgresql://u@h/db?schema=w&pool=0", "pool must be an integer in"),
        ("postgresql://u@h/db?schema=w&pool=1025", "pool must be an integer in"),
        ("postgresql://u@h/db?schema=w&pool=eight", "pool must be an integer in"),
        ("postgresql://u@h/db?schema=w&pool=\u00b2", "pool must be an integer in"),  # isdigit() but not int()
    ):
        with pytest.raises(InvalidParameterError, match=rule) as e:
            create_store(d, url, window="w")
        assert e.value.field == "store"


# -- the service on each engine ---------------------------------------------------------------------------------
def test_one_service_object_serves_many_threads(tmp_path, store_url):
    """8 accounts' clients in 8 threads share one ProviderService: every request answered, the ledger gapless, each
    account's counters gapless, spend equal to what the openings charged, and the bundle PASSes."""
    accounts = {f"acct{i}": "clinic" for i in range(8)}
    svc = fx.open_service(tmp_path / "svc", accounts=accounts, store=store_url)
    clients = {a: fx.client(svc, a) for a in accounts}
    errors: list = []

    def run(a: str) -> None:
        try:
            for i in range(5):
                clients[a].ask(svc, f"asthma protocol inhaler patient {a} {i}")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(a,)) for a in accounts]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    assert svc.ledger.size == 1 + 40
    from dprag.audit.provider.recovery import check_spend

    check_spend(svc)  # stored spend == the openings' charges, exactly
    v = fx.export_and_verify(svc, tmp_path, clients)
    assert v.verdict == "PASS", v.reasons[:3]
    assert v.checked["receipts_accepted"] == 40


def test_a_new_epoch_and_new_documents_stay_in_the_one_store(tmp_path, store_url):
    """One log per corpus (spec/protocol.md §3.1): a policy leaf and a documents leaf are appended to the same
    store (the same PostgreSQL schema, or the same SQLite file), and spend simply continues: the new epoch starts
    from the old epoch's spend, the new document from zero."""
    svc = fx.open_service(tmp_path / "w1", store=store_url, n=4)
    try:
        fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient 0")
        spent = svc.spent_units("clinic").copy()
        schema = getattr(svc.store, "schema", None)
        svc.set_policy(fx.toy_policy(n=4), allow_weak=True)
        svc.add_documents("clinic", {"new-doc": "a note added after the first epoch"})
        assert getattr(svc.store, "schema", None) == schema
        after = svc.spent_units("clinic")
        assert spent.sum() > 0 and (after[: len(spent)] == spent).all() and after[len(spent) :].sum() == 0
        assert [ep.number for ep in svc.epochs] == [0, 1]
    finally:
        svc.close()


# -- SQLite: one writer connection per process ------------------------------------------------------------------------
def test_sqlite_writes_share_one_connection_and_survive_its_failure(tmp_path):
    """Every write transaction of a process runs on one connection (its page cache stays warm); a driver error inside
    one marks it for replacement, and the next writer — another thread, while the failed one has let go of the lock —
    gets a fresh connection, with nothing of the failed block committed and the old connection closed."""
    import sqlite3

    from dprag.audit.protocol.errors import StoreUnavailableError

    d, store = _fresh(tmp_path, None)
    log = StoreLog(store)
    seen: list = []

    def write_one(tag: str) -> None:
        with store.write() as s:
            seen.append(s._conn)
            log.append(tag.encode())

    threads = [threading.Thread(target=write_one, args=(f"t{i}",)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(seen) == 4 and len({id(c) for c in seen}) == 1 and log.size == 4
    first = seen[0]
    with pytest.raises(StoreUnavailableError):
        with store.write():
            log.append(b"lost")
            raise sqlite3.OperationalError("disk I/O error")  # a driver error: transient, the connection suspect
    assert log.size == 4  # rolled back
    th = threading.Thread(target=write_one, args=("after",))
    th.start()
    th.join(30)
    assert not th.is_alive(), "the writer lock was not released after the failure"
    assert seen[-1] is not first and log.size == 5 and log.leaf(4) == b"after"
    with pytest.raises(sqlite3.ProgrammingError):  # the suspect connection was closed, not leaked
        first.execute("SELECT 1")
    # a reader on its own connection sees every commit of the writer connection
    with store.snapshot() as s:
        assert s.one("SELECT size FROM ledger_tail WHERE one = 1")[0] == 5
    store.close()
    with pytest.raises(sqlite3.ProgrammingError):
        seen[-1].execute("SELECT 1")  # close() closes the writer connection too


@pytest.mark.integration
def test_a_forked_child_writes_on_its_own_connection(tmp_path, store_url):
    """A store object inherited through fork: the child's writes run on a connection of its own (SQLite forbids
    using one across fork; two processes on one PostgreSQL socket would interleave their protocol messages), and the
    parent's connections still work afterwards."""
    d, store = _fresh(tmp_path, store_url)
    log = StoreLog(store)
    log.append(b"parent-1")
    ctx = mp.get_context("fork")
    q = ctx.Queue()

    def child(out) -> None:
        with store.write():
            StoreLog(store).append(b"child")
        out.put(StoreLog(store).size)

    p = ctx.Process(target=child, args=(q,))
    p.start()
    p.join(60)
    assert p.exitcode == 0 and q.get(timeout=5) == 2
    log.append(b"parent-2")
    assert [log.leaf(i) for i in range(3)] == [b"parent-1", b"child", b"parent-2"]
    store.close()


# -- PostgreSQL: a bounded pool of connections per process ----------------------------------------------------------
def _pg_store(pg_url: str, schema: str, pool: int, timeout: float = 30.0):
    from dprag.audit.provider.storage.postgres import PostgresServiceStore

    schema = f"{schema}_{secrets.token_hex(4)}"  # a fresh schema even on a reused server ($DPRAG_TEST_PG)
    return PostgresServiceStore(f"{pg_url}?schema={schema}&pool={pool}", create=True, timeout=timeout)


def _admin(pg_url: str):
    import pg8000.dbapi

    from dprag.audit.provider.storage.postgres import parse_url

    p = parse_url(pg_url)
    conn = pg8000.dbapi.connect(user=p["user"], host=p["host"], port=p["port"], database=p["database"])
    conn.autocommit = True
    return conn


@pytest.mark.integration
def test_postgres_threads_share_a_bounded_pool(tmp_path, pg_url):
    """16 threads reading and appending at once through one store object with pool=3: every statement ran on one of
    at most 3 server backends (each named by the server: ``pg_backend_pid()``), more than one was used (the pool is
    not a single lock), those are the store's only live backends on the server afterwards, and every append landed
    exactly once in a gapless log."""
    store = _pg_store(pg_url, "pool_bound_w", 3)
    log = StoreLog(store)
    seen, lock, errors = set(), threading.Lock(), []
    barrier = threading.Barrier(16)

    def work(t: int) -> None:
        try:
            barrier.wait(10)
            for k in range(10):
                with store.snapshot() as s:  # held across a server-side sleep: the threads overlap
                    pid = int(s.one("SELECT pg_backend_pid()")[0])
                    s.one("SELECT pg_sleep(0.002)")
                with store.write() as s:
                    wpid = int(s.one("SELECT pg_backend_pid()")[0])
                    StoreLog(store).append(f"t{t}-{k}".encode())
                with lock:
                    seen.update((pid, wpid))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    assert 2 <= len(seen) <= 3, seen
    admin = _admin(pg_url)
    cur = admin.cursor()
    cur.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", (sorted(seen),))
    assert {int(r[0]) for r in cur.fetchall()} == seen  # still open: lent again, never reopened per block
    leaves = [log.leaf(i) for i in range(log.size)]
    assert sorted(x.decode() for x in leaves) == sorted(f"t{t}-{k}" for t in range(16) for k in range(10))
    store.close()
    admin.close()


@pytest.mark.integration
def test_postgres_pool_replaces_a_connection_the_server_killed(tmp_path, pg_url):
    """pool=1: the server terminates the store's backend three times over. Each time the next operation fails as
    retryable (StoreUnavailableError, nothing committed) and the one after it runs on a new backend — the dead
    connection's slot is freed, never leaked (a leaked slot would leave pool=1 with none: a timeout)."""
    from dprag.audit.protocol.errors import StoreUnavailableError

    store = _pg_store(pg_url, "pool_kill_w", 1, timeout=5.0)
    log = StoreLog(store)
    log.append(b"genesis")
    admin = _admin(pg_url)
    pids = []
    for round_ in range(3):
        with store.read() as s:
            pid = int(s.one("SELECT pg_backend_pid()")[0])
        pids.append(pid)
        admin.cursor().execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(StoreUnavailableError):
            log.append(f"lost-{round_}".encode())
        log.append(f"kept-{round_}".encode())
    assert len(set(pids)) == 3  # a new backend each round
    assert [log.leaf(i) for i in range(log.size)] == [b"genesis", b"kept-0", b"kept-1", b"kept-2"]
    store.close()
    admin.close()


@pytest.mark.integration
def test_postgres_pool_forgets_its_idle_connections_when_one_fails(tmp_path, pg_url):
    """pool=3, three idle connections, then the server terminates all three backends (what a restart does). The next
    operation fails as retryable; the one after it runs — the pool closed the other idle (dead) connections on the
    first failure instead of lending them, one failed try each, to the next borrowers (a service retries a store
    failure 5 times: 8 dead connections would exhaust them)."""
    from dprag.audit.protocol.errors import StoreUnavailableError

    store = _pg_store(pg_url, "pool_flush_w", 3, timeout=5.0)
    log = StoreLog(store)
    log.append(b"genesis")
    pids, lock, barrier = set(), threading.Lock(), threading.Barrier(3)

    def hold() -> None:
        with store.snapshot() as s:
            barrier.wait(30)  # all three lent at once: three backends
            with lock:
                pids.add(int(s.one("SELECT pg_backend_pid()")[0]))
            barrier.wait(30)

    threads = [threading.Thread(target=hold) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(pids) == 3
    admin = _admin(pg_url)
    for pid in pids:
        admin.cursor().execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(StoreUnavailableError):
        log.append(b"lost")
    log.append(b"kept")  # on a new backend at once
    with store.read() as s:
        assert int(s.one("SELECT pg_backend_pid()")[0]) not in pids
    assert [log.leaf(i) for i in range(log.size)] == [b"genesis", b"kept"]
    store.close()
    admin.close()


@pytest.mark.integration
def test_postgres_pool_exhausted_is_a_retryable_error(tmp_path, pg_url):
    """pool=1, timeout 0.5 s: while one thread holds the only connection in a write transaction, another thread's
    read waits, then fails as retryable (StoreUnavailableError naming the pool), having changed nothing; once the
    holder commits, the read runs and sees its write."""
    from dprag.audit.protocol.errors import StoreUnavailableError

    store = _pg_store(pg_url, "pool_full_w", 1, timeout=0.5)
    log = StoreLog(store)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store.write():
            log.append(b"held")
            holding.set()
            release.wait(30)

    th = threading.Thread(target=hold)
    th.start()
    assert holding.wait(30)
    with pytest.raises(StoreUnavailableError, match="1 connections .* stayed busy"):
        with store.read() as s:
            s.one("SELECT 1")
    release.set()
    th.join(30)
    assert log.size == 1 and log.leaf(0) == b"held"
    store.close()
