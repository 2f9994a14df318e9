"""The audited request path's shortcuts (benchmarks/bench_request_path.py) keep every guarantee of the store.

What a party trying to break them would try: a frontier cached from a transaction that then rolled back (the next
append would hash onto a leaf that does not exist), a second process appending meanwhile (a stale frontier), a
deferred write whose transaction fails after it (it must vanish with the rest), a deferred write a later statement
of the same transaction must see, two deferred writes to one table, an answer stored by someone else between the
read and the compare-and-swap. Each runs on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dprag.accounting.stores.session import SessionBudgetStore
from dprag.audit.protocol.encoding import decode
from dprag.audit.protocol.errors import StoreError
from dprag.audit.protocol.ledger import MemoryLog
from dprag.audit.provider.storage import Records, StoreLog, create_store, open_store
from dprag.audit.testing.toy import SERVE_TOY, make_toy_directory, toy_policy
from tests.support.load import toy_clients


def _fresh(tmp_path: Path, url: str | None, name: str = "w"):
    d = tmp_path / name
    (d / "config").mkdir(parents=True)
    return d, create_store(d, url, window=name)


def test_a_rolled_back_append_leaves_no_frontier_behind(tmp_path, store_url):
    d, store = _fresh(tmp_path, store_url)
    log, ref = StoreLog(store), MemoryLog()
    log.append(b"a")
    ref.append(b"a")
    with pytest.raises(RuntimeError):
        with store.write():
            log.append(b"ghost")
            assert log.size == 2  # the transaction sees its own append
            raise RuntimeError("crash before commit")
    assert log.size == 1 and log.root() == ref.root()
    for leaf in (b"b", b"c", b"d"):
        assert log.append(leaf) == ref.size
        ref.append(leaf)
    assert log.root() == ref.root() and log.verify_integrity() == ref.size
    store.close()


def test_appends_of_another_process_are_read_not_assumed(tmp_path, store_url):
    """Two store objects over one database (two replicas): each one's cached frontier goes stale when the other
    appends, and every root and hash stays the reference log's."""
    d, a = _fresh(tmp_path, store_url)
    b = open_store(d, store_url)
    logs, ref = [StoreLog(a), StoreLog(b)], MemoryLog()
    for i in range(23):
        log = logs[(i * 7 // 3) % 2]
        leaves = [f"{i}-{k}".encode() for k in range(1 + i % 3)]
        with a.write() if log is logs[0] else b.write():
            assert log.size == ref.size
            assert log.append_many(leaves) == ref.size
        ref.append_many(leaves)
        for other in logs:
            assert other.head() == (ref.size, ref.root())
    assert logs[1].verify_integrity() == ref.size
    for size in range(1, ref.size + 1):
        assert logs[0].root(size) == ref.root(size)
    a.close()
    b.close()


def test_two_appends_and_a_charge_in_one_transaction(tmp_path, store_url):
    """Several writes to one table in one transaction (the deferred ones are sent before a second write to their
    table): everything lands, and a later read of the transaction sees it."""
    d, store = _fresh(tmp_path, store_url)
    log, ref = StoreLog(store), MemoryLog()
    budget = SessionBudgetStore(store.sessions, "t", 10)
    budget.bind(np.array([5]), {"mode": "pure"})
    with store.write() as s:
        log.append(b"one")
        budget.charge([1, 2], np.array([2]))
        log.append_many([b"two", b"three"])
        budget.charge([2, 3], np.array([1]))
        assert s.one("SELECT count(*) FROM ledger_leaf")[0] == 3
        assert budget.load([1, 2, 3]).ravel().tolist() == [2, 3, 1]
    ref.append_many([b"one", b"two", b"three"])
    assert log.root() == ref.root() and log.verify_integrity() == 3
    assert budget.load([1, 2, 3]).ravel().tolist() == [2, 3, 1]
    with store.read() as s:
        assert s.one("SELECT value FROM budget_meta WHERE tenant = 't' AND key = 'charges'")[0] == "2"
    store.close()


def test_a_failing_deferred_write_rolls_back_the_whole_transaction(tmp_path, store_url):
    d, store = _fresh(tmp_path, store_url)
    log, aud = StoreLog(store), Records(store)
    budget = SessionBudgetStore(store.sessions, "t", 10)
    budget.bind(np.array([5]), {"mode": "pure"})
    aud.put_served("alice", 1, 0, b"first")
    with pytest.raises(StoreError):
        with store.write():
            budget.charge([4], np.array([3]))
            log.append(b"leaf")
            aud.put_opening(1, b"opening")
            aud.put_served(
                "alice", 1, 1, b"second"
            )  # (alice, 1) is taken: the transaction fails, at the latest at COMMIT
    assert log.size == 0 and aud.opening(1) is None and aud.served("alice", 1) == b"first"
    assert budget.load([4]).sum() == 0
    ref = MemoryLog()
    for leaf in (b"after", b"more"):
        log.append(leaf)
        ref.append(leaf)
    assert log.root() == ref.root() and log.verify_integrity() == 2
    store.close()


def test_admission_reads_what_the_separate_reads_read(tmp_path, store_url):
    d, store = _fresh(tmp_path, store_url)
    log, aud = StoreLog(store), Records(store)
    assert aud.admission("alice", 1) == (0, None, None, 0, 0)
    log.append_many([b"genesis", b'{"type":"query"}'])
    aud.put_served("alice", 1, 1, b"row")
    assert aud.admission("alice", 1) == (2, b'{"type":"query"}', b"row", 1, 0)
    assert aud.admission("alice", 2) == (2, b'{"type":"query"}', None, aud.last_counter("alice"), 0)
    assert aud.admission("bob", 1) == (2, b'{"type":"query"}', None, 0, 0)
    assert log.tail() == (2, b'{"type":"query"}')
    store.close()


def test_the_answer_compare_and_swap_keeps_the_first_stored_answer(tmp_path, store_url):
    d, store = _fresh(tmp_path, store_url)
    aud = Records(store)
    aud.put_served("alice", 1, 0, b'{"served":null}')

    def stored(b: bytes) -> bool:
        return bool(json.loads(b)["served"])

    mine = b'{"served":"mine"}'
    assert aud.store_answer("alice", 1, mine, unless_stored=stored, expect=b'{"served":null}') is mine
    # a retry that still expects the unanswered row finds an answer stored: the first one is kept
    later = b'{"served":"later"}'
    assert aud.store_answer("alice", 1, later, unless_stored=stored, expect=b'{"served":null}') == mine
    assert aud.served("alice", 1) == mine
    with store.write(tail=False) as s:  # the compare-and-swap and a deferred write in one statement (PostgreSQL)
        aud.put_checkpoint(7, b"note")
        assert s.write_returning("UPDATE served SET body = ? WHERE account = ? RETURNING pos", (later, "alice"))
    assert aud.checkpoints(7) == [(7, b"note")] and aud.served("alice", 1) == later
    store.close()


def test_a_served_answer_is_the_stored_one_and_checks_out(tmp_path, store_url):
    """What serve() returns without reading its row back is exactly what the served table holds, and the account's
    own checks (receipt, consistency from its previous receipt) pass; a retry returns the same."""
    svc = make_toy_directory(tmp_path / "toy", store=store_url, accounts=4, n=10)
    try:
        clients = toy_clients(tmp_path / "toy", 4)
        for i in range(12):
            c = clients[i % 4]
            served = c.ask(svc, f"asthma inhaler protocol {i}")
            row = decode(svc.aud.served(c.account, c.counter), what="served")
            assert row["served"] == served.to_dict()
            assert c.retry(svc).to_dict() == served.to_dict()
        assert svc.ledger.verify_integrity() == svc.ledger.size
    finally:
        if store_url:
            svc.store.drop()
        svc.close()


def test_a_fresh_request_costs_few_statements(tmp_path):
    """SQLite: the statements one new request runs (a regression guard on the request path's round trips)."""
    svc = make_toy_directory(tmp_path / "toy", accounts=2, n=10)
    try:
        c = toy_clients(tmp_path / "toy", 1)[0]
        c.ask(svc, "asthma inhaler protocol warm-up")
        req = c.request("asthma inhaler protocol")
        statements: list[str] = []
        with svc.store.traced(statements.append):  # this thread's reads and the process's write transactions
            served = svc.serve(req)
        # admission | PRAGMA (not durable), BEGIN, admission, spend read, spend write, batch counter, opening, leaf,
        # node, tail, served row, COMMIT | PRAGMA (durable), BEGIN, size, checkpoint, answer, COMMIT
        assert len(statements) <= 19, statements
        assert sum(s.startswith("COMMIT") for s in statements) == 2
        assert sum("FROM served WHERE account" in s for s in statements) == 2  # once before, once under the lock
        assert any("budget_meta" in s and "charges" in s for s in statements)  # constant work: the batch counter
        assert not any(s.startswith("SELECT body FROM opening") for s in statements)  # not read back
        assert served.pos == svc.ledger.size - 1 and served.receipt["size"] == svc.ledger.size
    finally:
        svc.close()


def _commits(statements: list[str]) -> list[dict]:
    """Each write transaction of a SQLite statement trace: its statements and the ``synchronous`` mode it committed
    under (the connection starts FULL; a PRAGMA changes it for what follows)."""
    mode, out, cur = "FULL", [], None
    for st in statements:
        if st.startswith("PRAGMA synchronous="):
            assert cur is None, "the sync mode changed inside a transaction"
            mode = st.split("=", 1)[1]
        elif st.startswith("BEGIN IMMEDIATE"):
            cur = {"statements": []}
        elif st.startswith("COMMIT") and cur is not None:
            out.append({**cur, "mode": mode})
            cur = None
        elif cur is not None:
            cur["statements"].append(st)
    return out


def test_only_the_record_commit_skips_the_sync_and_the_answer_commit_after_it_syncs(tmp_path):
    """SQLite (WAL): the record transaction (charge, opening, leaf, served row) commits under synchronous=NORMAL;
    the answer's transaction, which every release waits for, commits under FULL after it, and its sync of the one
    write-ahead log makes the record durable too. What breaks the guarantee: the answer committed without a sync,
    the order reversed, or the lax mode leaking into a later transaction of the same connection (a retry's stored
    answer, a checkpoint, a new epoch's policy leaf). The trace is of the real statements SQLite ran."""
    svc = make_toy_directory(tmp_path / "toy", accounts=2, n=10)
    try:
        c = toy_clients(tmp_path / "toy", 1)[0]
        statements: list[str] = []
        with svc.store.traced(statements.append):  # every write transaction runs on the writer connection
            for i in range(3):
                served = c.ask(svc, f"asthma inhaler protocol {i}")
                assert c.retry(svc).to_dict() == served.to_dict()
            svc.checkpoint_now()
            svc.set_policy(toy_policy(**{**SERVE_TOY, "n": 10}), allow_weak=True)
        txns = _commits(statements)
        leaf = [t for t in txns if any(st.startswith("INSERT INTO ledger_leaf") for st in t["statements"])]
        answers = [t for t in txns if any("UPDATE served" in st for st in t["statements"])]
        assert len(answers) == 3 and all(t["mode"] == "FULL" for t in answers)
        lax = [t for t in txns if t["mode"] != "FULL"]
        assert len(lax) == 3 and all(t["mode"] == "NORMAL" for t in lax)
        assert all(any("INSERT INTO served" in st for st in t["statements"]) for t in lax)  # the record, nothing else
        assert len(leaf) == 4 and leaf[-1]["mode"] == "FULL"  # 3 query leaves, then the policy leaf: synced
        for t in lax:  # every lax commit is followed by a synced one before anything depending on it is returned
            assert txns[txns.index(t) + 1] in answers
    finally:
        svc.close()


@pytest.mark.integration
def test_postgresql_lets_only_the_record_transaction_commit_without_the_flush(tmp_path, pg_url):
    """PostgreSQL: the server's own ``synchronous_commit`` inside each transaction of the request path — off in the
    record transaction only (its commit returns before the WAL flush), on in the answer's, which commits after it
    (flushing the WAL up to its own commit flushes the record's) — and on again in the next transaction of the same
    connection (SET LOCAL ends with its transaction)."""
    svc = make_toy_directory(tmp_path / "toy", store=pg_url, accounts=2, n=10)
    try:
        c = toy_clients(tmp_path / "toy", 1)[0]
        seen: list[tuple[str, str]] = []

        def show(what: str) -> None:
            with svc.store.read() as s:
                seen.append((what, s.execute("SHOW synchronous_commit")[0][0]))

        record, store_answer = svc._record, svc.aud.store_answer
        svc._record = lambda *a, **k: (show("record"), record(*a, **k))[1]
        svc.aud.store_answer = lambda *a, **k: (show("answer"), store_answer(*a, **k))[1]
        for i in range(2):
            c.ask(svc, f"asthma inhaler protocol {i}")
        with svc.store.write():
            show("next write")
        assert seen == [("record", "off"), ("answer", "on")] * 2 + [("next write", "on")]
    finally:
        svc.store.drop()
        svc.close()
