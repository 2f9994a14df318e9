"""The shared store: PostgreSQL, for replicas on many hosts that share only the database URL.

Driver: pg8000 (pure Python, BSD-3-Clause; psycopg is LGPL, and the runtime stays clear of the GPL family). Each
window lives in its own PostgreSQL schema of the database the URL names, so one server holds many windows. A
write transaction's first statement locks the ledger's tail row (``SELECT size FROM ledger_tail WHERE one = 1 FOR
UPDATE``): every writer of the window queues on that one row, so the charge, the opening, the leaf and the served
row of one request commit together and in ledger order; READ COMMITTED then lets every later statement of the
transaction see everything committed before the lock was granted. Reads run in ``REPEATABLE READ READ ONLY``
snapshots.

Round trips (each statement is one): BEGIN is sent with the lock's SELECT in one simple query; a statement with
parameters runs as a statement the connection prepared the first time it saw that SQL (one round trip to bind and
execute, where the driver's unnamed statements take three); the writes a transaction ``defer``s go as one statement
(``base.Session.defer``).

URL: ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?schema=NAME][&host=/socket/dir][&pool=N]``. The password,
if any, is never written to the service directory; it is taken from, in order: the URL, ``DPRAG_DATABASE_PASSWORD``,
the file ``DPRAG_DATABASE_PASSWORD_FILE`` names (its trailing newline dropped), ``PGPASSWORD`` — so it need never be
on a command line. A server that asks for a password when none was given is a one-line error naming those
variables. ``pool``: the connections this process keeps open at most (default ``POOL_SIZE``; threads borrow one per
transaction and wait for one when all are lent), a setting of the process, never recorded.

Pre-ping: a pooled connection that sat idle for ``PING_AFTER_IDLE`` seconds or more is checked with ``SELECT 1``
before it is lent; a dead one (the server restarted meanwhile) is closed with every idle connection and a new one is
made, so the first request after a database restart does not fail on a connection the restart closed.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, TypedDict
from urllib.parse import parse_qs, unquote, urlsplit

from dprag.errors import DpragError, InvalidParameterError

from ...protocol.errors import StoreUnavailableError
from .base import DriverStore, Params, Row, sql_int
from .schema import migrate

__all__ = ["PostgresServiceStore", "parse_url"]

_SCHEMA_RULE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: SQLSTATE classes a retry may cure: connection exceptions, transaction rollbacks (serialisation, deadlock),
#: insufficient resources, operator intervention (admin shutdown, crash shutdown, cannot connect now)
_TRANSIENT = ("08", "40", "53", "57P")
#: prepared statements a connection keeps (the least recently used beyond this are closed)
PREPARED_PER_CONNECTION = 128
#: connections a store object (one process's) keeps open at most, unless the URL says ``pool=N``
POOL_SIZE = 8
MAX_POOL_SIZE = 1024
#: an idle connection is pinged before it is lent once it has been idle this long (seconds; module docstring)
PING_AFTER_IDLE = 1.0
#: where the password is read from when the URL has none, in this order (the file variable names a file)
PASSWORD_ENV = "DPRAG_DATABASE_PASSWORD"
PASSWORD_FILE_ENV = "DPRAG_DATABASE_PASSWORD_FILE"
MISSING_PASSWORD = (
    f"the PostgreSQL server asks for a password and none was given: set {PASSWORD_ENV} or {PASSWORD_FILE_ENV} "
    "(a file holding it), or PGPASSWORD; never put it on the command line"
)


def _asks_for_password(exc: BaseException) -> bool:
    """Whether a failure to connect is the server asking for a password the driver did not have (pg8000 raises an
    InterfaceError for password and MD5 authentication, and fails on ``None.decode`` for SCRAM)."""
    return "password" in str(exc).lower() or (isinstance(exc, AttributeError) and "decode" in str(exc))


def _numbered(sql: str) -> str:
    """``?`` placeholders as PostgreSQL's ``$1, $2, ...`` (the store's SQL has no ``?`` inside a literal)."""
    parts = sql.split("?")
    return "".join(p + (f"${i}" if i < len(parts) else "") for i, p in enumerate(parts, start=1))


class UrlParams(TypedDict):
    """A ``postgresql://`` URL's connection parameters (``parse_url``)."""

    user: str
    password: str | None
    host: str
    port: int
    database: str
    unix_sock: str | None
    schema: str | None
    pool: int | None


# -- pg8000 as the store uses it (the driver has no type information: these Protocols are the part it relies on) ----
class _Cursor(Protocol):
    @property
    def description(self) -> object: ...

    def execute(self, operation: str, /) -> object: ...

    def fetchall(self) -> Sequence[Sequence[object]]: ...


class _Context(Protocol):
    @property
    def rows(self) -> Sequence[Sequence[object]] | None: ...


#: a statement the connection prepared: (its name, its columns, its input functions), as pg8000 returns it
_Prepared = tuple[bytes, object, object]


class _Driver(Protocol):
    """A ``pg8000.dbapi.Connection``."""

    autocommit: bool

    @property
    def py_types(self) -> object: ...

    def cursor(self) -> _Cursor: ...

    def prepare_statement(self, statement: str, oids: tuple[int, ...], /) -> _Prepared: ...

    def execute_named(
        self, name: bytes, params: object, columns: object, input_funcs: object, statement: str, /
    ) -> _Context: ...

    def close_prepared_statement(self, name: bytes, /) -> None: ...

    def close(self) -> None: ...


class PgConnection:
    """One pooled connection: the driver's, the statements it prepared (SQL -> ``_Prepared``, least recently used
    first; ``run_sql``) and whether it was dropped after a driver error (``_drop``)."""

    __slots__ = ("driver", "prepared", "dropped", "idle_since")

    def __init__(self, driver: _Driver):
        self.driver = driver
        self.prepared: OrderedDict[str, _Prepared] = OrderedDict()
        self.dropped = False
        self.idle_since = time.monotonic()  # when it was last returned to the pool (``_checkin``)


def password_from_env() -> str | None:
    """The database password from the environment (module docstring), or None; a typed error naming the variable if
    ``DPRAG_DATABASE_PASSWORD_FILE`` names a file that cannot be read or is empty."""
    if os.environ.get(PASSWORD_ENV):
        return os.environ[PASSWORD_ENV]
    path = os.environ.get(PASSWORD_FILE_ENV)
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                secret = f.read().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as e:
            rule = f"cannot read the file it names ({type(e).__name__})"
            raise InvalidParameterError(PASSWORD_FILE_ENV, rule, path) from None
        if not secret:
            raise InvalidParameterError(PASSWORD_FILE_ENV, "names an empty file", path)
        return secret
    return os.environ.get("PGPASSWORD") or None


def parse_url(url: str) -> UrlParams:
    """The connection parameters of a ``postgresql://`` URL (see module docstring); a typed error otherwise."""
    if not isinstance(url, str):
        raise InvalidParameterError("store", "must be a postgresql:// URL", url)
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise InvalidParameterError("store", "must be a postgresql:// URL", url.split("@")[-1][:100])
    q = parse_qs(parts.query)
    database = unquote(parts.path.lstrip("/"))
    if not database:
        raise InvalidParameterError("store", "the URL must name a database (postgresql://user@host/DATABASE)")
    schema = q.get("schema", [None])[0]
    if schema is not None and not _SCHEMA_RULE.match(schema):
        raise InvalidParameterError("store", "schema must be a lower-case SQL identifier ([a-z_][a-z0-9_]*)", schema)
    sock_dir = q.get("host", [None])[0]
    pool = q.get("pool", [None])[0]
    if pool is not None and not (pool.isascii() and pool.isdigit() and 1 <= int(pool) <= MAX_POOL_SIZE):
        raise InvalidParameterError("store", f"pool must be an integer in [1, {MAX_POOL_SIZE}]", pool[:20])
    return {
        "user": unquote(parts.username or "") or os.environ.get("PGUSER") or "postgres",
        "password": unquote(parts.password) if parts.password else password_from_env(),
        "host": parts.hostname or "localhost",
        "port": parts.port or 5432,
        "database": database,
        "unix_sock": f"{sock_dir.rstrip('/')}/.s.PGSQL.{parts.port or 5432}" if sock_dir else None,
        "schema": schema,
        "pool": int(pool) if pool is not None else None,
    }


def public_url(params: UrlParams) -> str:
    """The URL without its password (what the service directory records)."""
    tail = [f"schema={params['schema']}"] if params["schema"] else []
    sock = params["unix_sock"]
    if sock:
        tail.append("host=" + sock.rsplit("/", 1)[0])
    return f"postgresql://{params['user']}@{params['host']}:{params['port']}/{params['database']}" + (
        "?" + "&".join(tail) if tail else ""
    )


class PostgresServiceStore(DriverStore[PgConnection]):
    """``PostgresServiceStore(url, create=False)``: the window's store in the schema the URL names."""

    dialect = "postgresql"
    batches_writes = True  # every statement is a round trip to the server

    def __init__(self, url: str, *, create: bool = False, timeout: float = 30.0):
        super().__init__()
        import pg8000.dbapi  # noqa: F401 - the driver, imported only when a PostgreSQL store is used

        self.params = parse_url(url)
        schema = self.params["schema"]
        if schema is None:
            raise InvalidParameterError("store", "the URL must name the window's schema (?schema=NAME)", url)
        self.schema: str = schema
        self.timeout = float(timeout)
        self.pool_size = self.params["pool"] or POOL_SIZE
        self._pool = threading.Condition()
        self._idle: list[PgConnection] = []  # connections not lent out, the most recently returned last
        self._open = 0  # connections of the pool: lent out, idle, or being made
        self._creating = create
        try:
            with self.write() as s:  # an existing store: under the tail lock, so replicas migrate one at a time
                #: the store's schema versions before and after this opening (``schema.migrate``)
                self.migrated = migrate(s, create=create)
        except InvalidParameterError as e:
            self.close()
            raise InvalidParameterError("store", f"schema {self.schema}: {e.rule}", public_url(self.params)) from None
        finally:
            self._creating = False
        self.schema_version = self.migrated[1]

    def describe(self) -> dict[str, str]:
        return {"kind": "postgresql", "url": public_url(self.params)}

    def _connect(self) -> PgConnection:
        import pg8000.dbapi

        p = self.params
        kw: dict[str, str | int | float] = {"user": p["user"], "database": p["database"], "timeout": self.timeout}
        if p["password"]:
            kw["password"] = p["password"]
        if p["unix_sock"]:
            kw["unix_sock"] = p["unix_sock"]
        else:
            kw.update(host=p["host"], port=p["port"])
        driver: _Driver = pg8000.dbapi.connect(**kw)
        driver.autocommit = True  # BEGIN / COMMIT are ours
        conn = PgConnection(driver)
        cur = driver.cursor()
        if self._creating:
            cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
        cur.execute(f'SET search_path TO "{self.schema}"')
        return conn

    # -- the pool: a block borrows a connection and gives it back when it ends (base.ServiceStore._transaction) ----
    def _connection(self) -> PgConnection:
        """A connection of the pool: the most recently returned idle one (its backend's caches and this process's
        prepared statements are warm), or a new one while fewer than ``pool_size`` are open; otherwise wait for one
        up to ``timeout`` seconds (then ``StoreUnavailableError``: retryable). Every thread of a serving process
        shares the few backends: 40 worker threads with a connection each opened 40 backends, and the first request
        each served paid for its backend's start and cold caches (measured, 32 accounts: the accounts' first
        requests took a median 820 ms, the others 171-240 ms)."""
        if self._closed:
            raise StoreUnavailableError("the store is closed")
        if os.getpid() != self._pid:
            self._forked()
        deadline = time.monotonic() + self.timeout
        while True:
            with self._pool:
                while not self._idle and self._open >= self.pool_size:
                    left = deadline - time.monotonic()
                    if left <= 0 or self._closed:
                        raise StoreUnavailableError(
                            f"all {self.pool_size} connections to the postgresql store stayed busy for {self.timeout} s"
                        )
                    self._pool.wait(left)
                idle = self._idle.pop() if self._idle else None
                if idle is None:
                    self._open += 1
            if idle is None:
                break
            if time.monotonic() - idle.idle_since < PING_AFTER_IDLE or self._alive(idle):
                return idle
            self._drop(idle)  # the server closed it (a restart): it and every idle one go; try again
        try:
            conn = self._connect()
        except BaseException as e:
            self._release_slot()
            if isinstance(e, DpragError) or not isinstance(e, Exception):
                raise
            if self.params["password"] is None and _asks_for_password(e):
                raise InvalidParameterError("store", MISSING_PASSWORD) from None
            raise StoreUnavailableError(f"cannot connect to the postgresql store: {e}") from None
        with self._conns_lock:
            self._conns.append(conn)
        return conn

    def _alive(self, conn: PgConnection) -> bool:
        """The pre-ping (module docstring): whether ``conn`` still answers a trivial query."""
        try:
            conn.driver.cursor().execute("SELECT 1")
        except Exception:  # noqa: BLE001 - any failure: the connection is not usable
            return False
        return True

    def _release_slot(self) -> None:
        with self._pool:
            self._open -= 1
            self._pool.notify()

    def _checkin(self, conn: PgConnection) -> None:
        if conn.dropped:
            return  # closed after a driver error; its slot is free already (``_drop``)
        conn.idle_since = time.monotonic()
        with self._pool:
            if not self._closed:
                self._idle.append(conn)
                self._pool.notify()
                return
        self._close_quietly(conn)  # the store was closed while it was lent out

    def _drop(self, failed: PgConnection | None = None) -> None:
        """After a driver error on ``failed``: close it (it never goes back to the pool) and every idle connection
        too — a lost connection most often means a restarted server, which took the idle ones with it, and each
        would cost the next borrower a failed try — and free their slots."""
        if failed is None or failed.dropped:
            return
        with self._pool:
            gone, self._idle = [failed, *self._idle], []
        for conn in gone:
            conn.dropped = True
            with self._conns_lock:
                if conn in self._conns:
                    self._conns.remove(conn)
            self._close_quietly(conn)
            self._release_slot()

    def _close_quietly(self, conn: PgConnection) -> None:
        with contextlib.suppress(Exception):  # already broken or closed
            conn.driver.close()

    def _forked(self) -> None:
        super()._forked()  # the parent's connections are abandoned, never used or closed
        self._pool, self._idle, self._open = threading.Condition(), [], 0

    def close(self) -> None:
        """Close every connection this process opened (lent-out ones too: call it when serving stops)."""
        if os.getpid() != self._pid:
            return
        with self._pool:
            self._closed = True
            self._idle = []
            self._pool.notify_all()
        super().close()

    def _begin(self, conn: PgConnection, write: bool, tail: bool, durable: bool = True) -> int | None:
        cur = conn.driver.cursor()
        # not durable: the commit does not wait for the WAL flush; the next synchronous commit flushes it with its own
        lax = "" if durable else "SET LOCAL synchronous_commit TO off; "
        if write:
            if tail and not self._creating:  # the window's one write lock, in the same round trip as BEGIN
                cur.execute(
                    f"BEGIN ISOLATION LEVEL READ COMMITTED; {lax}SELECT size FROM ledger_tail WHERE one = 1 FOR UPDATE"
                )
                rows = cur.fetchall()
                if not rows:
                    raise InvalidParameterError("store", f"schema {self.schema} has no ledger tail")
                return sql_int(rows[0][0])  # under the lock: the size no other writer can change until we commit
            if self._creating:
                cur.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
                return None
            # without the lock: a committed size, read in BEGIN's round trip (``Session.begin_size``)
            cur.execute(f"BEGIN ISOLATION LEVEL READ COMMITTED; {lax}SELECT size FROM ledger_tail WHERE one = 1")
            rows = cur.fetchall()
            return sql_int(rows[0][0]) if rows else None
        else:
            cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        return None

    def _commit(self, conn: PgConnection) -> None:
        conn.driver.cursor().execute("COMMIT")

    def _rollback(self, conn: PgConnection) -> None:
        conn.driver.cursor().execute("ROLLBACK")

    def run_sql(self, conn: PgConnection, sql: str, params: Params) -> list[Row]:
        """One statement. Without parameters: the simple query protocol (one round trip). With: a statement this
        connection prepared the first time it ran that SQL, then bound and executed in one round trip (the driver's
        unnamed statements cost three: parse, describe, bind and execute)."""
        driver = conn.driver
        if not params:
            cur = driver.cursor()
            cur.execute(sql)
            return [] if cur.description is None else [tuple(r) for r in cur.fetchall()]
        from pg8000.converters import make_params

        cache = conn.prepared
        prepared = cache.get(sql)
        if prepared is None:
            prepared = driver.prepare_statement(_numbered(sql), ())
            cache[sql] = prepared
            if len(cache) > PREPARED_PER_CONNECTION:
                driver.close_prepared_statement(cache.popitem(last=False)[1][0])
        else:
            cache.move_to_end(sql)
        name, columns, input_funcs = prepared
        ctx = driver.execute_named(name, make_params(driver.py_types, tuple(params)), columns, input_funcs, sql)
        return [] if ctx.rows is None else [tuple(r) for r in ctx.rows]

    def run_sql_many(self, conn: PgConnection, sql: str, rows: Sequence[Params]) -> None:
        for r in rows:  # one prepared statement, one round trip per row
            self.run_sql(conn, sql, r)

    def _driver_error(self, exc: BaseException) -> bool:
        import pg8000.dbapi

        return isinstance(exc, (pg8000.dbapi.Error, OSError, socket.timeout, EOFError))

    def _transient(self, exc: BaseException) -> bool:
        import pg8000.dbapi

        if isinstance(exc, (pg8000.dbapi.InterfaceError, OSError, socket.timeout, EOFError)):
            return True
        code = exc.args[0].get("C", "") if exc.args and isinstance(exc.args[0], dict) else ""
        return code.startswith(_TRANSIENT)

    def _close_conn(self, conn: PgConnection) -> None:
        conn.driver.close()

    def drop(self) -> None:
        """Drop this window's schema and everything in it (tests, and a provider retiring a window)."""
        with self.write() as s:
            s.execute(f'DROP SCHEMA "{self.schema}" CASCADE')
        self.close()
