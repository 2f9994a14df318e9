"""Durable budget store on SQLite (stdlib ``sqlite3``), WAL mode, safe across processes and crashes.

Layout (one database file; any other tables in it are left alone)::

    dprag_store_meta(key TEXT PRIMARY KEY, value TEXT)   -- 'format', 'n_docs', 'descriptor'
    dprag_spend(doc INTEGER PRIMARY KEY, spent BLOB)      -- width little-endian int64 units; no row = zero

Protocol of one ``charge_many`` (spec/accounting/filters.md, "Durability" and "Concurrency"):

1. validate every request (nothing touched on bad input);
2. ``BEGIN IMMEDIATE`` — takes SQLite's RESERVED (write) lock at once, so no other connection, in this or
   any other process, can commit between our read and our write (WAL readers are never blocked);
3. read the spend rows of the union of the batch's ids, decide every request in order (``apply_batch``),
   upsert the rows that changed;
4. ``COMMIT``. With ``synchronous=FULL`` (the default) SQLite fsyncs the WAL before COMMIT returns: the
   charge survives a power loss or OS crash. With ``synchronous=NORMAL`` the WAL is not fsynced at
   commit: the charge survives the *process* being killed (the write is in the OS page cache) but may be
   lost on power loss — choose it only where that is acceptable.
5. only then return the admission masks. The caller releases output only after the return.

Any exception anywhere in 2–4 (including KeyboardInterrupt) rolls the transaction back and re-raises
(``sqlite3.Error`` wrapped as ``BudgetStoreError``): nothing is charged. A process killed with SIGKILL
mid-transaction leaves an uncommitted WAL tail that SQLite discards on the next open. Either way the
recorded spend is never below what was released; it can only be above (a charge committed whose output
was never released), which is the safe direction.

Processes: open one store object per process (a connection inherited through ``fork`` is never used —
the store notices the pid change, abandons the inherited handle without closing it, and reconnects).
The store pickles by path, so it can be handed to ``multiprocessing`` workers under any start method.
WAL needs shared memory between the processes: keep the file on a local filesystem, not NFS.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TypeVar, cast

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

from ..errors import check_positive_int, check_positive_real
from .base import BudgetStore, BudgetStoreError, PreparedBatch, apply_batch, validate_limits

FORMAT = "dprag-budget-store/1"
_SYNC_MODES = ("FULL", "EXTRA", "NORMAL")
_UPSERT = "INSERT INTO dprag_spend(doc, spent) VALUES (?, ?) ON CONFLICT(doc) DO UPDATE SET spent = excluded.spent"
_SELECT = "SELECT doc, spent FROM dprag_spend WHERE doc IN (SELECT value FROM json_each(?))"
_COUNT_CHARGE = (
    "INSERT INTO dprag_store_meta(key, value) VALUES ('charges', '1') "
    "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1"
)

# Connections inherited through fork: never closed by the child (closing could checkpoint or delete the
# parent's WAL). Kept referenced so the garbage collector does not close them either.
_ABANDONED: list[sqlite3.Connection] = []

_T = TypeVar("_T")


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether SQLite's error is a lock another connection holds (SQLITE_BUSY / SQLITE_LOCKED, any extended code)."""
    return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def switch_to_wal(conn: sqlite3.Connection, timeout: float) -> str:
    """``PRAGMA journal_mode = WAL`` on ``conn``, retried while another connection holds the lock.

    Switching a new (rollback-journal) file to WAL needs an exclusive lock, and SQLite returns SQLITE_BUSY
    at once, without calling the busy handler, when two connections that hold shared locks both ask for it
    (its deadlock avoidance). Processes racing to create one database hit exactly that, so the busy timeout
    does not cover it: retry with backoff (1 ms doubling to 50 ms) until ``timeout`` seconds have passed,
    then re-raise SQLite's error. Returns the journal mode SQLite reports. Once the file is in WAL mode
    (the mode is persistent) the pragma takes no exclusive lock and returns at once.
    """
    deadline = time.monotonic() + max(float(timeout), 0.0)
    pause = 0.001
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(2 * pause, 0.05)


class SqliteBudgetStore(BudgetStore):
    """Durable, multi-process budget store (see module docstring).

    ``SqliteBudgetStore(path, n_docs)`` creates or opens the store at ``path``; ``n_docs=None`` opens an
    existing store with the size it was created with. ``synchronous`` is "FULL" (default: durable against
    power loss), "EXTRA" or "NORMAL" (durable against process crashes only). ``timeout`` (seconds) is how
    long a charge waits for another process's write transaction before raising ``BudgetStoreError``.
    """

    #: sqlite3.Connection subclass used to connect (tests substitute one that injects faults).
    connection_factory: type[sqlite3.Connection] = sqlite3.Connection

    def __init__(
        self,
        path: str | bytes | os.PathLike[str],
        n_docs: int | None = None,
        *,
        synchronous: str = "FULL",
        timeout: float = 60.0,
    ) -> None:
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidParameterError("path", "must be a filesystem path", path)
        path = os.fspath(path)
        if path == "" or path == ":memory:" or path.startswith("file:"):
            raise InvalidParameterError("path", "must be a file path (an in-memory database is not durable)", path)
        sync = str(synchronous).upper()
        if sync not in _SYNC_MODES:
            raise InvalidParameterError("synchronous", f"must be one of {_SYNC_MODES}", synchronous)
        if n_docs is not None:
            check_positive_int("n_docs", n_docs)
        self._path = os.path.abspath(path)
        self._sync = sync
        self._timeout = check_positive_real("timeout", timeout)
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._conn: sqlite3.Connection | None = self._connect()
        try:
            stored_n, stored_desc = self._init_schema(n_docs)
        except BaseException:
            self._conn.close()
            self._conn = None
            raise
        super().__init__(stored_n)
        if stored_desc is not None:
            self._adopt(stored_desc)

    # -- connection management -------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self._path,
                timeout=self._timeout,
                isolation_level=None,  # we issue BEGIN / COMMIT ourselves
                check_same_thread=False,  # guarded by self._lock
                factory=self.connection_factory,
            )
        except sqlite3.Error as exc:
            raise BudgetStoreError(f"cannot open budget store {self._path}: {exc}") from exc
        try:
            mode = switch_to_wal(conn, self._timeout)
            if str(mode).lower() != "wal":
                raise BudgetStoreError(f"budget store {self._path}: cannot enable WAL (journal_mode={mode})")
            conn.execute(f"PRAGMA synchronous={self._sync}")
        except sqlite3.Error as exc:
            conn.close()
            raise BudgetStoreError(f"cannot configure budget store {self._path}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise BudgetStoreError(f"budget store {self._path} is closed")
        if os.getpid() != self._pid:  # forked: never touch the parent's handle
            _ABANDONED.append(self._conn)
            self._lock = threading.Lock()
            self._pid = os.getpid()
            self._conn = self._connect()
        return self._conn

    def close(self) -> None:
        if self._conn is not None and os.getpid() == self._pid:
            self._conn.close()
        self._conn = None

    def __reduce__(self) -> tuple[Callable[[str, int, str, float], SqliteBudgetStore], tuple[str, int, str, float]]:
        return (_reopen, (self._path, self.n_docs, self._sync, self._timeout))

    @property
    def path(self) -> str:
        return self._path

    @property
    def synchronous(self) -> str:
        return self._sync

    # -- transactions ------------------------------------------------------------------------------
    def _begin(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            self._rollback(conn)
            raise BudgetStoreError(f"budget store {self._path} busy or unavailable: {exc}") from exc

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the transaction is already gone (SQLite rolls back on some errors by itself)

    def _transaction(self, body: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``body(conn)`` inside BEGIN IMMEDIATE … COMMIT; roll back and re-raise on any exception."""
        conn = self._connection()
        with self._lock:
            try:
                self._begin(conn)
                result = body(conn)
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback(conn)
                raise BudgetStoreError(
                    f"budget store {self._path}: {exc} — not confirmed, release nothing (rolled back)"
                ) from exc
            except BaseException:
                self._rollback(conn)
                raise
        return result

    # -- schema and binding ------------------------------------------------------------------------
    def _init_schema(self, n_docs: int | None) -> tuple[int, str | None]:
        def body(conn: sqlite3.Connection) -> tuple[int, str | None]:
            conn.execute("CREATE TABLE IF NOT EXISTS dprag_store_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute("CREATE TABLE IF NOT EXISTS dprag_spend(doc INTEGER PRIMARY KEY, spent BLOB NOT NULL)")
            meta: dict[str, str] = dict(conn.execute("SELECT key, value FROM dprag_store_meta").fetchall())
            if "format" not in meta:
                if n_docs is None:
                    raise InvalidParameterError("n_docs", "is required to create a new budget store", None)
                conn.execute("INSERT INTO dprag_store_meta VALUES ('format', ?)", (FORMAT,))
                conn.execute("INSERT INTO dprag_store_meta VALUES ('n_docs', ?)", (str(int(n_docs)),))
                return int(n_docs), None
            if meta["format"] != FORMAT:
                raise BudgetStoreError(f"{self._path}: unknown store format {meta['format']!r}")
            stored = int(meta["n_docs"])
            if n_docs is not None and int(n_docs) != stored:
                raise InvalidParameterError(
                    "n_docs", f"store at {self._path} was created for {stored} documents", n_docs
                )
            return stored, meta.get("descriptor")

        return self._transaction(body)

    def _adopt(self, desc: str) -> None:
        try:
            limits = validate_limits(json.loads(desc)["limits"])
        except (ValueError, KeyError, TypeError, InvalidParameterError) as exc:
            raise BudgetStoreError(f"{self._path}: corrupt binding descriptor ({exc})") from None
        self._limits = limits
        self._descriptor = desc

    def _bind(self, limits: npt.NDArray[np.int64], descriptor: str) -> None:
        def body(conn: sqlite3.Connection) -> None:
            row = conn.execute("SELECT value FROM dprag_store_meta WHERE key = 'descriptor'").fetchone()
            if row is None:
                conn.execute("INSERT INTO dprag_store_meta VALUES ('descriptor', ?)", (descriptor,))
            elif row[0] != descriptor:
                raise InvalidParameterError(
                    "budget", f"store at {self._path} is bound to a different budget/orders; open it with those"
                )

        self._transaction(body)

    # -- reading -----------------------------------------------------------------------------------
    def _select(self, conn: sqlite3.Connection, union: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Rows for the distinct ids ``union`` (absent rows are zero), checked against the invariant."""
        limits = cast(npt.NDArray[np.int64], self._limits)  # bound: only _load / _charge call this
        width = int(limits.size)
        out = np.zeros((union.size, width), dtype=np.int64)
        fetched = conn.execute(_SELECT, (json.dumps(union.tolist()),)).fetchall()
        if fetched:
            docs = np.fromiter((d for d, _ in fetched), dtype=np.int64, count=len(fetched))
            blob = b"".join(b for _, b in fetched)
            if len(blob) != 8 * width * len(fetched):
                raise BudgetStoreError(f"{self._path}: corrupt spend row (width mismatch)")
            vals = np.frombuffer(blob, dtype="<i8").reshape(len(fetched), width)
            if np.any(vals < 0) or np.any(vals > limits):
                raise BudgetStoreError(f"{self._path}: corrupt spend row (outside [0, limit])")
            order = np.argsort(union, kind="stable")
            out[order[np.searchsorted(union[order], docs)]] = vals
        return out

    def _load(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        union, inverse = np.unique(ids, return_inverse=True)
        conn = self._connection()
        with self._lock:
            try:
                rows = self._select(conn, union)  # one statement: one consistent snapshot
            except sqlite3.Error as exc:
                raise BudgetStoreError(f"budget store {self._path}: {exc}") from exc
        return rows[inverse]

    def total_units(self) -> npt.NDArray[np.int64]:
        """Sum of recorded spend over all documents, per counter (reads the whole table; for tests/reports)."""
        limits = self._require_bound()
        conn = self._connection()
        width = int(limits.size)
        with self._lock:
            blobs = [b for (b,) in conn.execute("SELECT spent FROM dprag_spend").fetchall()]
        if not blobs:
            return np.zeros(width, dtype=np.int64)
        total: npt.NDArray[np.int64] = np.frombuffer(b"".join(blobs), dtype="<i8").reshape(-1, width).sum(axis=0)
        return total

    def recorded_docs(self) -> npt.NDArray[np.int64]:
        """Ids of documents with a spend row (charged at least once, or charged 0 units)."""
        conn = self._connection()
        with self._lock:
            return np.array([d for (d,) in conn.execute("SELECT doc FROM dprag_spend ORDER BY doc")], dtype=np.int64)

    # -- charging ----------------------------------------------------------------------------------
    def _charge(self, batch: PreparedBatch) -> list[npt.NDArray[np.bool_]]:
        def body(conn: sqlite3.Connection) -> list[npt.NDArray[np.bool_]]:
            current = self._select(conn, batch.union)
            rows, masks = apply_batch(current, batch, cast(npt.NDArray[np.int64], self._limits))
            changed = np.flatnonzero(np.any(rows != current, axis=1))
            if changed.size:
                le = rows.astype("<i8", copy=False)
                conn.executemany(_UPSERT, [(int(batch.union[i]), le[i].tobytes()) for i in changed])
            # constant work: every charge writes (the batch counter), so its COMMIT syncs the WAL whether or not a
            # document was charged — an empty or refused charge would otherwise commit nothing and return faster,
            # and a request's serve time would say whether the corpus held a document above τ that could pay
            conn.execute(_COUNT_CHARGE)
            return masks

        return self._transaction(body)


def _reopen(path: str, n_docs: int, synchronous: str, timeout: float) -> SqliteBudgetStore:
    return SqliteBudgetStore(path, n_docs, synchronous=synchronous, timeout=timeout)


__all__ = ["SqliteBudgetStore", "FORMAT"]
