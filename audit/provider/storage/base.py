"""One database per audit window: the store interface every backend implements (spec/provider.md §6).

A ``ServiceStore`` holds everything durable a window's serving writes — the ledger (leaves and perfect-subtree
hashes), the auditor's records (openings, signed checkpoints, the served table with stored answers, zk proofs) and
every tenant's per-document spend — in one database, so that one request's charge, opening, leaf and served row
commit in ONE transaction. Two backends: SQLite (``sqlite.py``, one file, the embedded default; processes of one
host) and PostgreSQL (``postgres.py``; processes on many hosts that share only the database URL).

Concurrency model:

- **Connections.** Per process (a connection inherited through ``fork`` is abandoned, never used or closed, and the
  child connects afresh). A store object is safe to share between threads; a transaction, or a one-statement read,
  runs on one connection, which no other thread uses meanwhile. SQLite: each thread reads on its own connection, and
  every write transaction runs on one connection of the process, used only by the holder of the process's writer
  lock (its page cache stays warm, where thread connections would each reread the pages another's commit
  invalidated). PostgreSQL: a bounded pool per process — a block borrows a connection and gives it back when it
  ends, so a few warm server backends serve every thread (``postgres.py``).
- **Writes.** ``write()`` opens a write transaction that is serialised with every other writer of the database, in
  this process or any other, on any host: SQLite takes its RESERVED lock at ``BEGIN IMMEDIATE``; PostgreSQL locks
  the ledger's tail row (``SELECT ... FROM ledger_tail FOR UPDATE``) as the transaction's first statement. Every
  write transaction takes that one lock first, so two writers never interleave, and ledger order is the order in
  which the filters saw the charges (never row locks on documents alone). ``write()`` is re-entrant within a
  thread: a nested block joins the open transaction and only the outermost block commits.
- **Reads.** ``read()`` (one statement) and ``snapshot()`` (several) yield the thread's open transaction if there is
  one; otherwise ``read()`` runs its statement in autocommit and ``snapshot()`` opens a read-only snapshot (SQLite: a
  deferred read transaction; PostgreSQL: ``REPEATABLE READ READ ONLY``), so a multi-statement read is consistent.
- **Durability.** A write transaction's commit is durable when it returns (SQLite ``synchronous=FULL``: the WAL
  is synced; PostgreSQL ``synchronous_commit`` on: the WAL is flushed) — except a ``write(durable=False)`` block,
  whose commit is visible to every later transaction at once but reaches the disk only with the next durable commit
  of the database (both engines write one sequential log: syncing a later commit syncs every earlier one). A power
  loss may take such a transaction back, together with everything after it and before the next durable commit,
  never alone. The service uses it for the record transaction only: nothing that depends on it is released before
  the answer's durable commit (spec/provider.md §6).
- **Failures.** Any exception inside a block rolls the transaction back and is re-raised; a driver error becomes
  ``StoreUnavailableError`` (a lost connection, a restarted server, a lock held past the timeout): nothing of the
  block was committed — except when the connection was lost during COMMIT itself, which the caller cannot tell
  apart, so a caller retries only operations whose retry is idempotent (the service's is: a retry of a recorded
  request finds its served row).
"""

from __future__ import annotations

import os
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from typing import Generic, NoReturn, TypeVar

from dprag.errors import DpragError

from ...protocol.errors import StoreError, StoreUnavailableError

__all__ = ["DriverStore", "Params", "Row", "Session", "ServiceStore", "sql_bytes", "sql_int"]

#: a row as a driver returns it: what each column holds is the caller's to narrow (``sql_int``, ``sql_bytes``)
Row = tuple[object, ...]
#: a statement's parameters (``?`` placeholders, in order)
Params = Sequence[object]
#: a backend's connection
C = TypeVar("C")


def sql_int(value: object) -> int:
    """An integer column's value; StoreError if the store returned anything else."""
    if isinstance(value, int):
        return int(value)
    raise StoreError(f"the store returned {type(value).__name__} where an integer belongs")


def sql_bytes(value: object) -> bytes:
    """A BLOB / BYTEA column's value as bytes; StoreError if the store returned anything else."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise StoreError(f"the store returned {type(value).__name__} where bytes belong")


class Session:
    """A connection inside a transaction (or a read snapshot): ``?`` placeholders, rows as tuples.

    ``tail_size``: inside a write transaction holding the tail lock, the ledger's size once read (or taken with the
    lock); only this transaction can change it, and the ledger's appends keep it current, so it is read once.
    ``begin_size``: in a write transaction without the tail lock, the ledger's size if the store read it with BEGIN
    (in the same round trip): a committed size, which other writers may have grown since.
    ``after_commit``: callables run once the transaction has committed (never after a rollback), e.g. a cache of
    committed state. ``run`` and ``run_many`` are the store's ``run_sql`` and ``run_sql_many`` on the session's
    connection ``conn`` (which the session holds only to name it: tests, diagnostics)."""

    __slots__ = (
        "_conn",
        "_run",
        "_run_many",
        "dialect",
        "_batches",
        "write",
        "tail",
        "tail_size",
        "begin_size",
        "after_commit",
        "_pending",
    )

    def __init__(
        self,
        conn: object,
        run: Callable[[str, Params], list[Row]],
        run_many: Callable[[str, Sequence[Params]], None],
        *,
        dialect: str,
        batches_writes: bool,
        write: bool,
        tail: bool = False,
    ):
        self._conn, self._run, self._run_many = conn, run, run_many
        self.dialect, self._batches = dialect, batches_writes
        self.write, self.tail = write, tail
        self.tail_size: int | None = None
        self.begin_size: int | None = None
        self.after_commit: list[Callable[[], None]] = []
        self._pending: list[tuple[str, str, Params]] = []  # deferred writes: (table, sql, params)

    @property
    def has_pending(self) -> bool:
        """Whether deferred writes wait for ``flush`` (the commit flushes them first)."""
        return bool(self._pending)

    def execute(self, sql: str, params: Params = ()) -> list[Row]:
        if self._pending:
            self.flush()
        return self._run(sql, params)

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        if self._pending:
            self.flush()
        self._run_many(sql, rows)

    def defer(self, sql: str, params: Params = ()) -> None:
        """A write (``INSERT INTO t`` / ``UPDATE t``) whose result the caller does not need. Where the store batches
        writes (PostgreSQL, inside a write transaction) it is held and sent with the others as ONE statement (``WITH``
        data-modifying sub-statements) before the transaction's next statement or its COMMIT, whichever comes first:
        every later statement of the transaction sees it, and it commits or rolls back with the transaction. A
        batch never holds two writes to one table (a second one sends the batch first), so no row is written twice
        in one statement and no write needs another's effect. Elsewhere, and for any other statement: run now."""
        table = _write_target(sql) if self.write and self._batches else None
        if table is None:
            self.execute(sql, params)
            return
        if any(t == table for t, _, _ in self._pending):
            self.flush()
        self._pending.append((table, sql, tuple(params)))

    def flush(self) -> None:
        """Send the deferred writes now (one statement)."""
        pending, self._pending = self._pending, []
        if pending:
            self._run_batch(pending)

    def write_returning(self, sql: str, params: Params = ()) -> list[Row]:
        """A write (``INSERT INTO t`` / ``UPDATE t``, with RETURNING) that reads no table but its own ``t``: sent in
        the same statement as the deferred writes if none of them names ``t`` (it does not see them, and needs not),
        else after them like ``execute``. Returns its rows."""
        table = _write_target(sql)
        if not self._pending or table is None or any(t == table for t, _, _ in self._pending):
            return self.execute(sql, params)
        pending, self._pending = self._pending, []
        return self._run_batch([*pending, (table, sql, tuple(params))])

    def _run_batch(self, batch: list[tuple[str, str, Params]]) -> list[Row]:
        """One statement: every write but the last as a ``WITH`` sub-statement, the last as the main one."""
        if len(batch) == 1:
            return self._run(batch[0][1], batch[0][2])
        *first, (_, last, _) = batch
        sql = "WITH " + ", ".join(f"w{i} AS ({q})" for i, (_, q, _) in enumerate(first)) + " " + last
        return self._run(sql, [x for _, _, p in batch for x in p])

    def one(self, sql: str, params: Params = ()) -> Row | None:
        rows = self.execute(sql, params)
        return rows[0] if rows else None


_WRITE_TARGET = re.compile(r"\s*(?:INSERT\s+INTO|UPDATE)\s+([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)


def _write_target(sql: str) -> str | None:
    m = _WRITE_TARGET.match(sql)
    return m.group(1).lower() if m else None


class ServiceStore(ABC):
    """The store as the service uses it (see module docstring): transactions, one-statement reads and snapshots, each
    yielding a ``Session``. ``DriverStore`` implements it over a driver's connections."""

    #: "sqlite" or "postgresql"
    dialect: str = ""
    #: whether ``Session.defer`` holds writes to send them as one statement (where a statement is a round trip)
    batches_writes: bool = False

    @abstractmethod
    def _transaction(
        self, write: bool, snapshot: bool = True, tail: bool = True, durable: bool = True
    ) -> AbstractContextManager[Session]:
        """The thread's open transaction (a nested block joins it), or a new one (see module docstring)."""

    @property
    @abstractmethod
    def in_transaction(self) -> bool:
        """Whether this thread has a transaction open."""

    @abstractmethod
    def close(self) -> None:
        """Close every connection this process opened (other threads' included: call it when serving stops)."""

    @abstractmethod
    def describe(self) -> dict[str, str]:
        """What ``config/store.json`` records to reopen this store (never a password)."""

    def write(self, *, tail: bool = True, durable: bool = True) -> AbstractContextManager[Session]:
        """A write transaction serialised with every other writer (see module docstring). ``tail=False``: one that
        writes no ledger row and so need not queue on the tail lock (a checkpoint note, a stored answer); on SQLite
        every write transaction is serialised anyway. ``durable=False``: its commit need not wait for the disk (see
        "Durability" in the module docstring); a nested block joins the outer one's durability."""
        return self._transaction(True, tail=tail, durable=durable)

    def read(self) -> AbstractContextManager[Session]:
        """For ONE statement: the thread's open transaction, or autocommit (the statement sees one state)."""
        return self._transaction(False, snapshot=False)

    def snapshot(self) -> AbstractContextManager[Session]:
        """For several statements: the thread's open transaction, or a read-only snapshot."""
        return self._transaction(False)

    def sessions(self, write: bool) -> AbstractContextManager[Session]:
        """``accounting.stores.session.Sessions`` over this store (a read is one statement)."""
        return self._transaction(write, snapshot=False)

    def records_exist(self) -> bool:
        """Whether the ledger holds any leaf (a store a new window must not reuse)."""
        with self.read() as s:
            row = s.one("SELECT size FROM ledger_tail WHERE one = 1")
        return bool(row and row[0])


class _Local(threading.local, Generic[C]):
    """A thread's connection and open transaction."""

    def __init__(self) -> None:
        self.conn: C | None = None
        self.session: Session | None = None
        self.depth = 0


class DriverStore(ServiceStore, Generic[C]):
    """``ServiceStore`` over a driver whose connections are ``C``. Subclasses give the driver: connect, begin,
    commit, rollback, run."""

    def __init__(self) -> None:
        self._local: _Local[C] = _Local()
        self._pid = os.getpid()
        self._conns: list[C] = []
        self._conns_lock = threading.Lock()
        self._closed = False

    # -- driver ----------------------------------------------------------------------------------------------
    @abstractmethod
    def _connect(self) -> C: ...

    @abstractmethod
    def _begin(self, conn: C, write: bool, tail: bool, durable: bool = True) -> int | None:
        """Open a transaction: read-only, or write; a write with ``tail`` first takes the ledger's tail lock. Returns
        the ledger's size if the store read it with BEGIN (taking the lock, or in the same round trip), else None.
        ``durable=False`` (writes only): the commit need not wait for the disk (module docstring, "Durability")."""

    @abstractmethod
    def _commit(self, conn: C) -> None: ...

    @abstractmethod
    def _rollback(self, conn: C) -> None: ...

    @abstractmethod
    def run_sql(self, conn: C, sql: str, params: Params) -> list[Row]: ...

    @abstractmethod
    def run_sql_many(self, conn: C, sql: str, rows: Sequence[Params]) -> None: ...

    @abstractmethod
    def _driver_error(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the driver's (wrapped as a StoreError)."""

    @abstractmethod
    def _transient(self, exc: BaseException) -> bool:
        """Whether a driver error is one a retry may cure (wrapped as StoreUnavailableError, connection dropped)."""

    @abstractmethod
    def _close_conn(self, conn: C) -> None: ...

    # -- connections -----------------------------------------------------------------------------------------
    def _connection(self) -> C:
        if self._closed:
            raise StoreUnavailableError("the store is closed")
        if os.getpid() != self._pid:
            self._forked()
        loc = self._local
        if loc.conn is None:
            try:
                loc.conn = self._connect()
            except DpragError:
                raise
            except Exception as e:  # noqa: BLE001 - any driver failure to connect
                raise StoreUnavailableError(f"cannot connect to the {self.dialect} store: {e}") from None
            with self._conns_lock:
                self._conns.append(loc.conn)
        return loc.conn

    def _checkin(self, conn: C) -> None:
        """The outermost block on ``conn`` has ended (committed, rolled back, or its one statement read): a backend
        that lends connections from a pool takes it back here. By default the thread keeps its own."""
        return None

    def _forked(self) -> None:
        """In a child of ``fork``: abandon every inherited handle (never used or closed), connect afresh."""
        self._pid = os.getpid()
        self._local = _Local()
        self._conns = []
        self._conns_lock = threading.Lock()

    def _writer_connection(self) -> C:
        """The connection a write transaction runs on: by default the thread's own (a backend whose writers are
        serialised in this process may instead hand out one connection, with the writer lock already taken)."""
        return self._connection()

    def _drop(self, failed: C | None = None) -> None:
        """Forget this thread's connection after a driver error on ``failed`` (the next use reconnects)."""
        loc = self._local
        conn, loc.conn = loc.conn, None
        if conn is not None:
            with self._conns_lock:
                if conn in self._conns:
                    self._conns.remove(conn)
            try:
                self._close_conn(conn)
            except Exception:  # noqa: BLE001, S110 - already broken
                pass

    def _session(self, conn: C, write: bool, tail: bool = False) -> Session:
        return Session(
            conn,
            partial(self.run_sql, conn),
            partial(self.run_sql_many, conn),
            dialect=self.dialect,
            batches_writes=self.batches_writes,
            write=write,
            tail=tail,
        )

    @contextmanager
    def _transaction(
        self, write: bool, snapshot: bool = True, tail: bool = True, durable: bool = True
    ) -> Iterator[Session]:
        if os.getpid() != self._pid:  # forked: before ``loc`` is taken (a nested block must find this block's session)
            self._forked()
        loc = self._local
        if loc.session is not None:
            if write and not loc.session.write:
                raise DpragError("a write block inside a read block (take the write transaction first)")
            if write and tail and not loc.session.tail:
                raise DpragError("a ledger write inside a transaction without the tail lock (take it first)")
            loc.depth += 1
            try:
                yield loc.session
            finally:
                loc.depth -= 1
            return
        conn = self._writer_connection() if write else self._connection()
        try:
            if not (write or snapshot):  # one statement: autocommit reads it from one consistent state
                try:
                    yield self._session(conn, False)
                except BaseException as e:
                    self._fail(conn, e, rollback=False)
                return
            try:
                size = self._begin(conn, write, write and tail, durable or not write)
            except Exception as e:  # noqa: BLE001
                self._fail(conn, e)
            sess = self._session(conn, write, write and tail)
            if sess.tail:
                sess.tail_size = size
            else:
                sess.begin_size = size
            loc.session, loc.depth = sess, 1
            try:
                yield sess
                if sess.has_pending:
                    sess.flush()
                self._commit(conn)
            except BaseException as e:
                self._fail(conn, e)  # always raises: what follows runs after a commit only
            finally:
                loc.session, loc.depth = None, 0
        finally:
            self._checkin(conn)
        for fn in sess.after_commit:
            fn()

    def _fail(self, conn: C, exc: BaseException, *, rollback: bool = True) -> NoReturn:
        """Roll back and re-raise ``exc`` (a driver error as StoreUnavailableError, the connection dropped)."""
        transient = self._driver_error(exc) and self._transient(exc)
        try:
            if rollback:
                self._rollback(conn)
        except Exception:  # noqa: BLE001 - the connection is gone: the server rolls the transaction back
            transient = True
        if transient:
            self._drop(conn)
            raise StoreUnavailableError(
                f"the {self.dialect} store failed ({type(exc).__name__}: {str(exc)[:200]}); rolled back, retry"
            ) from exc
        if self._driver_error(exc):
            raise StoreError(f"the {self.dialect} store refused ({type(exc).__name__}: {str(exc)[:200]})") from exc
        raise exc

    @property
    def in_transaction(self) -> bool:
        return self._local.session is not None

    def close(self) -> None:
        """Close every connection this process opened (other threads' included: call it when serving stops)."""
        if os.getpid() != self._pid:
            return
        self._closed = True
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                self._close_conn(c)
            except Exception:  # noqa: BLE001, S110
                pass
        self._local = _Local()
