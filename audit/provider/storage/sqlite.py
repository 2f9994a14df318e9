"""The embedded store: one SQLite file (``state/service.sqlite``), WAL, ``synchronous=FULL``.

Processes of one host share it (WAL needs shared memory: a local filesystem, not NFS). A write transaction is
``BEGIN IMMEDIATE`` (SQLite's RESERVED lock: one writer in the database at a time, readers never blocked) and its
COMMIT fsyncs the WAL before it returns. Writers queue first on a lock of their own — a process-wide mutex, then an
exclusive ``flock`` on ``service.sqlite.lock`` — so that a waiting writer is woken when the lock is free instead of
polling in SQLite's busy handler, whose growing sleeps starved some requests for seconds under load (p99 2.4 s with
32 accounts, ``benchmarks/bench_serve.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO

from dprag.accounting.stores.sqlite import switch_to_wal
from dprag.errors import InvalidParameterError

from ...protocol.errors import StoreUnavailableError
from .base import DriverStore, Params, Row
from .schema import migrate

__all__ = ["SqliteServiceStore"]


class _Connection(sqlite3.Connection):
    """A connection that remembers its ``PRAGMA synchronous`` (FULL or NORMAL), so a durable commit after a
    non-durable one costs one PRAGMA, and a run of durable ones none."""

    synced = True


class SqliteServiceStore(DriverStore[_Connection]):
    """``SqliteServiceStore(path, create=False)``: the store in the SQLite file ``path``."""

    dialect = "sqlite"

    def __init__(self, path: str | os.PathLike[str], *, create: bool = False, timeout: float = 60.0):
        super().__init__()
        self.path = os.path.abspath(os.fspath(path))
        self.timeout = float(timeout)
        self._writer = threading.Lock()
        self._holds = threading.local()  # whether this thread holds the writer locks
        self._lockfile: IO[bytes] | None = None
        self._lock_pid = 0
        self._wconn: _Connection | None = None  # the writer connection (``_writer_connection``)
        self._wstale = False
        if not create and not os.path.isfile(self.path):
            raise InvalidParameterError("store", "no SQLite store at this path", self.path)
        conn = self._connection()
        try:
            switch_to_wal(conn, self.timeout)
        except sqlite3.Error as e:
            raise StoreUnavailableError(f"cannot open the SQLite store {self.path}: {e}") from None
        try:
            with self.write() as s:
                #: the store's schema versions before and after this opening (``schema.migrate``)
                self.migrated = migrate(s, create=create)
        except InvalidParameterError as e:
            self.close()
            raise InvalidParameterError("store", f"{e.rule} ({self.path})") from None
        self.schema_version = self.migrated[1]

    def describe(self) -> dict[str, str]:
        return {"kind": "sqlite"}

    def _connect(self) -> _Connection:
        conn = sqlite3.connect(
            self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False, factory=_Connection
        )
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    def _writer_connection(self) -> _Connection:
        """Take the writer locks, then return the process's writer connection (made, or remade after a driver
        error or a fork, under the locks): every write transaction of the process runs on it, one at a time, so its
        page cache stays warm — thread connections would each reread what another's commit invalidated (measured:
        33 page reads per request with 32 threads, none with one)."""
        if self._closed:
            raise StoreUnavailableError("the store is closed")
        if os.getpid() != self._pid:
            self._forked()
        self._acquire()
        try:
            if self._wstale and self._wconn is not None:
                old, self._wconn, self._wstale = self._wconn, None, False
                with self._conns_lock:
                    if old in self._conns:
                        self._conns.remove(old)
                with contextlib.suppress(sqlite3.Error):
                    old.close()
            if self._wconn is None:
                try:
                    conn = self._connect()
                except sqlite3.Error as e:
                    raise StoreUnavailableError(f"cannot connect to the sqlite store: {e}") from None
                with self._conns_lock:
                    self._conns.append(conn)
                self._wconn = conn
            return self._wconn
        except BaseException:
            self._release()
            raise

    @contextmanager
    def traced(self, callback: Callable[[str], object]) -> Iterator[None]:
        """Tests and benchmarks: pass ``callback`` every statement run meanwhile on this thread's connection and on
        the process's writer connection (every write transaction's), as SQLite expands it."""
        conns = [self._connection()]
        if self._wconn is None:
            self._writer_connection()
            self._release()
        if self._wconn is not None:
            conns.append(self._wconn)
        for c in conns:
            c.set_trace_callback(callback)
        try:
            yield
        finally:
            for c in conns:
                c.set_trace_callback(None)

    def _forked(self) -> None:
        # the writer connection and the writer locks' state are the parent's (a lock another thread held at the
        # fork would stay held here forever): abandoned, made afresh
        super()._forked()
        self._writer, self._holds = threading.Lock(), threading.local()
        self._wconn, self._wstale = None, False

    def _drop(self, failed: _Connection | None = None) -> None:
        if failed is not None and failed is self._wconn:
            self._wstale = True  # remade by the next writer, under the locks (another writer may hold them now)
            return
        super()._drop(failed)

    def _begin(self, conn: _Connection, write: bool, tail: bool, durable: bool = True) -> int | None:
        if not write:
            conn.execute("BEGIN")
            return None
        if not getattr(self._holds, "v", False):
            self._acquire()
        if conn.synced != durable:  # in WAL mode FULL syncs the log at COMMIT; NORMAL leaves it to the next FULL commit
            conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            conn.synced = durable
        conn.execute("BEGIN IMMEDIATE")
        return None

    def _acquire(self) -> None:
        if not self._writer.acquire(timeout=self.timeout):
            raise sqlite3.OperationalError("database is locked (writer queue timeout)")
        try:
            lockfile = self._lockfile
            if lockfile is None or self._lock_pid != os.getpid():
                lockfile = self._lockfile = open(self.path + ".lock", "a+b")  # noqa: SIM115
                self._lock_pid = os.getpid()
            fcntl.flock(lockfile.fileno(), fcntl.LOCK_EX)
        except BaseException:
            self._writer.release()
            raise
        self._holds.v = True

    def _release(self) -> None:
        if getattr(self._holds, "v", False):
            self._holds.v = False
            try:
                if self._lockfile is not None:  # taken with the lock (``_acquire``)
                    fcntl.flock(self._lockfile.fileno(), fcntl.LOCK_UN)
            finally:
                self._writer.release()

    def _commit(self, conn: _Connection) -> None:
        try:
            conn.execute("COMMIT")
        finally:
            if not conn.in_transaction:
                self._release()

    def _rollback(self, conn: _Connection) -> None:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        finally:
            self._release()

    def run_sql(self, conn: _Connection, sql: str, params: Params) -> list[Row]:
        return conn.execute(sql, tuple(params)).fetchall()

    def run_sql_many(self, conn: _Connection, sql: str, rows: Sequence[Params]) -> None:
        conn.executemany(sql, [tuple(r) for r in rows])

    def _driver_error(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.Error)

    def _transient(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError)  # busy past the timeout, I/O; not a constraint

    def _close_conn(self, conn: _Connection) -> None:
        conn.close()
