"""Budget stores: interface rules, binding, durability settings, fault injection at every step of a charge,
fork and pickle safety, corrupt and busy databases, bad input."""

from __future__ import annotations

import multiprocessing
import pickle
import sqlite3
import threading

import numpy as np
import pytest

from dprag.accounting.events import GaussianEvent
from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.stores import MAX_LIMIT_UNITS, BudgetStoreError, MemoryBudgetStore, SqliteBudgetStore
from dprag.errors import InvalidParameterError, UnknownDocumentError

LIMITS = np.array([10, 20, 30], dtype=np.int64)
DESC = {"test": "store"}


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    s = MemoryBudgetStore(8) if request.param == "memory" else SqliteBudgetStore(tmp_path / "s.db", 8)
    yield s
    s.close()


def test_conditional_charge_semantics(store):
    store.bind(LIMITS, DESC)
    assert store.width == 3 and store.n_docs == 8
    m = store.charge([1, 2], np.array([5, 10, 15]))
    assert m.tolist() == [True, True]
    m = store.charge([2, 3], np.array([6, 0, 0]))  # doc 2 would reach 11 > 10 at counter 0
    assert m.tolist() == [False, True]
    masks = store.charge_many(
        [([1], np.array([5, 10, 15])), ([1, 4], np.array([0, 0, 1])), ([4], np.array([10, 20, 29]))]
    )
    assert [x.tolist() for x in masks] == [[True], [False, True], [True]]
    np.testing.assert_array_equal(
        store.load([1, 2, 3, 4, 4, 0]),
        [[10, 20, 30], [5, 10, 15], [6, 0, 0], [10, 20, 30], [10, 20, 30], [0, 0, 0]],
    )


def test_binding_rules(store):
    with pytest.raises(BudgetStoreError):
        store.load([0])  # not bound yet
    with pytest.raises(InvalidParameterError):
        store.bind(np.array([1.5, 2.0]), DESC)
    with pytest.raises(InvalidParameterError):
        store.bind(np.array([MAX_LIMIT_UNITS + 1]), DESC)
    with pytest.raises(InvalidParameterError):
        store.bind(np.array([-1]), DESC)
    store.bind(LIMITS, DESC)
    store.bind(LIMITS, DESC)  # same binding again: no-op
    with pytest.raises(InvalidParameterError):
        store.bind(LIMITS + 1, DESC)
    with pytest.raises(InvalidParameterError):
        store.bind(LIMITS, {"test": "other"})


@pytest.mark.parametrize(
    "req,err",
    [
        (([0], np.array([1.0, 1.0, 1.0])), InvalidParameterError),
        (([0], np.array([1, 1])), InvalidParameterError),
        (([0], np.array([1, -1, 1])), InvalidParameterError),
        (([8], np.array([1, 1, 1])), UnknownDocumentError),
        (([0, 0], np.array([1, 1, 1])), InvalidParameterError),
        (([], np.array([1, 1, 1])), InvalidParameterError),
    ],
)
def test_bad_requests_change_nothing(store, req, err):
    store.bind(LIMITS, DESC)
    store.charge([5], np.array([1, 2, 3]))
    with pytest.raises(err):
        store.charge_many([([5], np.array([1, 1, 1])), req])
    np.testing.assert_array_equal(store.load(range(8)).sum(axis=0), [1, 2, 3])


def test_sqlite_reopen_keeps_spend_and_binding(tmp_path):
    p = tmp_path / "b.db"
    budget = FilterBudget.for_queries(3, GaussianEvent(2.0))
    with SqliteBudgetStore(p, 100) as s:
        f = IndividualRenyiFilter(s, budget)
        f.try_charge([1, 2], GaussianEvent(2.0))
        before = f.spent_units([1, 2, 3])
    with SqliteBudgetStore(p) as s2:  # n_docs read from the file
        assert s2.n_docs == 100 and s2.width == len(budget.units)
        g = IndividualRenyiFilter(s2, budget)
        np.testing.assert_array_equal(g.spent_units([1, 2, 3]), before)
        assert g.try_charge([1, 3], GaussianEvent(2.0)).n_admitted == 2
    with pytest.raises(InvalidParameterError):
        IndividualRenyiFilter(SqliteBudgetStore(p), FilterBudget.for_queries(4, GaussianEvent(2.0)))
    with pytest.raises(InvalidParameterError):
        IndividualRenyiFilter(SqliteBudgetStore(p), 1.0)  # pure mode on an RDP store
    with pytest.raises(InvalidParameterError):
        SqliteBudgetStore(p, 99)


def test_sqlite_bad_arguments(tmp_path):
    for path in (":memory:", "", "file:x?mode=memory", 3):
        with pytest.raises(InvalidParameterError):
            SqliteBudgetStore(path, 5)
    with pytest.raises(InvalidParameterError):
        SqliteBudgetStore(tmp_path / "new.db")  # creating needs n_docs
    for kw in ({"synchronous": "OFF"}, {"timeout": 0}, {"timeout": float("nan")}):
        with pytest.raises(InvalidParameterError):
            SqliteBudgetStore(tmp_path / "x.db", 5, **kw)
    for n in (0, -3, 2.5, True):
        with pytest.raises(InvalidParameterError):
            SqliteBudgetStore(tmp_path / "y.db", n)


def test_sqlite_pragmas(tmp_path):
    s = SqliteBudgetStore(tmp_path / "p.db", 3)
    conn = s._connection()  # noqa: SLF001
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    s2 = SqliteBudgetStore(tmp_path / "p.db", 3, synchronous="normal")
    assert s2._connection().execute("PRAGMA synchronous").fetchone()[0] == 1  # noqa: SLF001


def test_sqlite_detects_corrupt_rows(tmp_path):
    p = tmp_path / "c.db"
    s = SqliteBudgetStore(p, 5)
    s.bind(LIMITS, DESC)
    raw = sqlite3.connect(p)
    raw.execute("INSERT INTO dprag_spend VALUES (1, ?)", (np.array([1, 2], "<i8").tobytes(),))
    raw.execute("INSERT INTO dprag_spend VALUES (2, ?)", (np.array([11, 0, 0], "<i8").tobytes(),))
    raw.commit()
    raw.close()
    with pytest.raises(BudgetStoreError):
        s.load([1])
    with pytest.raises(BudgetStoreError):
        s.load([2])
    with pytest.raises(BudgetStoreError):
        s.charge([2], np.array([0, 0, 1]))
    np.testing.assert_array_equal(s.load([0, 3]), np.zeros((2, 3)))


def test_sqlite_busy_beyond_timeout_charges_nothing(tmp_path):
    p = tmp_path / "busy.db"
    s = SqliteBudgetStore(p, 5, timeout=0.2)
    s.bind(LIMITS, DESC)
    blocker = sqlite3.connect(p, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    with pytest.raises(BudgetStoreError):
        s.charge([1], np.array([1, 1, 1]))
    np.testing.assert_array_equal(s.load([1]), [[0, 0, 0]])  # WAL: readers are not blocked
    blocker.execute("ROLLBACK")
    blocker.close()
    assert s.charge([1], np.array([1, 1, 1])).tolist() == [True]


# ----------------------------------------------------------------------------------------------
# fault injection at every statement of a charge
# ----------------------------------------------------------------------------------------------
class Boom(Exception):
    pass


class FaultyConnection(sqlite3.Connection):
    """Raises at the plan's call index, before or after the statement runs (class-level plan)."""

    plan: tuple | None = None
    calls = 0

    def _step(self, run):
        p = FaultyConnection.plan
        if p is None:
            return run()
        i = FaultyConnection.calls
        FaultyConnection.calls += 1
        idx, when, make_exc = p
        if i == idx and when == "before":
            raise make_exc()
        out = run()
        if i == idx and when == "after":
            out.close()  # the statement ran; a real fault would not keep its cursor alive in a traceback
            raise make_exc()
        return out

    def execute(self, sql, params=()):
        return self._step(lambda: super(FaultyConnection, self).execute(sql, params))

    def executemany(self, sql, seq):
        return self._step(lambda: super(FaultyConnection, self).executemany(sql, seq))


class FaultyStore(SqliteBudgetStore):
    connection_factory = FaultyConnection


def _snapshot(path, n):
    s = SqliteBudgetStore(path, timeout=5)
    try:
        return s.load(range(n))
    finally:
        s.close()


@pytest.mark.parametrize(
    "exc",
    [lambda: sqlite3.OperationalError("injected I/O error"), lambda: Boom("injected"), KeyboardInterrupt],
    ids=["sqlite-error", "exception", "keyboard-interrupt"],
)
def test_fault_at_every_step_is_all_or_nothing(tmp_path, exc):
    n = 6
    p = tmp_path / "f.db"
    store = FaultyStore(p, n, synchronous="FULL")
    f = IndividualRenyiFilter(store, 1.0)
    f.try_charge([0, 1, 2], 0.5)
    batch = [([0, 3], 0.25), ([1, 4], 0.75), ([2, 0], 0.25)]
    # The reference outcome, computed on a memory store replica of the same state.
    ref = IndividualRenyiFilter(MemoryBudgetStore(n), 1.0)
    ref.try_charge([0, 1, 2], 0.5)
    ref_res = ref.try_charge_many(batch)
    after = ref.spent_units(range(n))
    before = _snapshot(p, n)
    seen_outcomes = set()
    for idx in range(12):
        for when in ("before", "after"):
            FaultyConnection.calls, FaultyConnection.plan = 0, (idx, when, exc)
            try:
                res = f.try_charge_many(batch)
            except (BudgetStoreError, Boom, KeyboardInterrupt):
                raised = True
            else:
                raised = False
            finally:
                FaultyConnection.plan = None
            state = _snapshot(p, n)
            if raised:
                # all or nothing; the only way to end up charged is a fault after COMMIT itself
                assert np.array_equal(state, before) or np.array_equal(state, after)
                if when == "before":
                    assert np.array_equal(state, before)
                seen_outcomes.add("after" if np.array_equal(state, after) else "before")
            else:
                assert np.array_equal(state, after)
                assert [r.mask.tolist() for r in res] == [r.mask.tolist() for r in ref_res]
                seen_outcomes.add("clean")
            if not np.array_equal(state, before):  # restore the pre-batch state for the next trial
                raw = sqlite3.connect(p)
                raw.execute("DELETE FROM dprag_spend")
                raw.executemany(
                    "INSERT INTO dprag_spend VALUES (?, ?)",
                    [(i, before[i].astype("<i8").tobytes()) for i in range(n) if before[i].any()],
                )
                raw.commit()
                raw.close()
    assert seen_outcomes == {"before", "after", "clean"}  # every branch was exercised
    # the store is still usable and consistent after all the faults
    assert f.try_charge([5], 1.0).n_admitted == 1


# ----------------------------------------------------------------------------------------------
# processes and threads
# ----------------------------------------------------------------------------------------------
_FORKED = {}


def _child_charge():
    f = _FORKED["filter"]
    r = f.try_charge([5, 6], 0.5)
    raise SystemExit(0 if r.n_admitted == 2 else 3)


@pytest.mark.integration
def test_forked_child_reconnects_and_parent_keeps_working(tmp_path):
    s = SqliteBudgetStore(tmp_path / "fork.db", 10)
    f = IndividualRenyiFilter(s, 1.0)
    f.try_charge([5], 0.25)
    _FORKED["filter"] = f
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_child_charge)
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert f.spent([5, 6]).tolist() == [0.75, 0.5]  # parent sees the child's committed charge
    assert f.try_charge([5, 6], 0.5).admitted.tolist() == [6]


def test_sqlite_store_pickles_by_path(tmp_path):
    s = SqliteBudgetStore(tmp_path / "pk.db", 10, synchronous="NORMAL")
    f = IndividualRenyiFilter(s, 2.0)
    f.try_charge([1], 1.5)
    s2 = pickle.loads(pickle.dumps(s))
    assert s2.path == s.path and s2.synchronous == "NORMAL" and s2.descriptor == s.descriptor
    g = pickle.loads(pickle.dumps(f))
    assert g.try_charge([1], 1.0).n_admitted == 0
    assert g.try_charge([1], 0.5).n_admitted == 1
    assert f.spent([1]).tolist() == [2.0]


def test_memory_store_threads_never_overspend():
    n, threads, per = 20, 8, 200
    f = IndividualRenyiFilter(MemoryBudgetStore(n), 1.0)
    admitted = np.zeros(n, dtype=np.int64)
    lock = threading.Lock()

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(per):
            r = f.try_charge(rng.choice(n, size=5, replace=False), 0.0625)
            with lock:
                np.add.at(admitted, r.admitted, 1)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert admitted.tolist() == [16] * n  # 8·200·5 = 8000 requests over 20 docs: every doc fills exactly 16/16
    assert f.spent_units(range(n))[:, 0].tolist() == [2**32] * n
