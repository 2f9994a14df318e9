"""The shared store: PostgreSQL, for replicas on many hosts that share only the database URL.

Driver: pg8000 (pure Python, BSD-3-Clause; psycopg is LGPL, and the runtime stays clear of the GPL family). Each
window lives in its own PostgreSQL schema of the database the URL names, so one server holds many windows. A
write transaction's first statement locks the ledger's tail row (``SELECT size FROM ledger_tail WHERE one = 1 FOR
UPDATE``): every writer of the window queues on that one row, so the charge, the opening, the leaf and the served
row of one request commit together and in ledger order; READ COMMITTED then lets every later statement of the
transaction see everything committed before the lock was granted. Reads run in ``REPEATABLE READ READ ONLY``
snapshots.

URL: ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?schema=NAME][&host=/socket/dir]``. The password, if any,
is never written to the service directory: give it in the URL each time or in ``PGPASSWORD``.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from dprag.accounting.errors import InvalidParameterError

from .base import ServiceStore
from .schema import FORMAT, statements

__all__ = ["PostgresServiceStore", "parse_url"]

_SCHEMA_RULE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: SQLSTATE classes a retry may cure: connection exceptions, transaction rollbacks (serialisation, deadlock),
#: insufficient resources, operator intervention (admin shutdown, crash shutdown, cannot connect now)
_TRANSIENT = ("08", "40", "53", "57P")


def parse_url(url: str) -> dict:
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
    return {
        "user": unquote(parts.username or "") or os.environ.get("PGUSER") or "postgres",
        "password": unquote(parts.password) if parts.password else os.environ.get("PGPASSWORD"),
        "host": parts.hostname or "localhost",
        "port": parts.port or 5432,
        "database": database,
        "unix_sock": f"{sock_dir.rstrip('/')}/.s.PGSQL.{parts.port or 5432}" if sock_dir else None,
        "schema": schema,
    }


def public_url(params: dict) -> str:
    """The URL without its password (what the service directory records)."""
    tail = [f"schema={params['schema']}"] if params.get("schema") else []
    if params.get("unix_sock"):
        tail.append("host=" + params["unix_sock"].rsplit("/", 1)[0])
    return f"postgresql://{params['user']}@{params['host']}:{params['port']}/{params['database']}" + (
        "?" + "&".join(tail) if tail else ""
    )


class PostgresServiceStore(ServiceStore):
    """``PostgresServiceStore(url, create=False)``: the window's store in the schema the URL names."""

    dialect = "postgresql"

    def __init__(self, url: str, *, create: bool = False, timeout: float = 30.0):
        super().__init__()
        import pg8000.dbapi  # noqa: F401 - the driver, imported only when a PostgreSQL store is used

        self.params = parse_url(url)
        if self.params["schema"] is None:
            raise InvalidParameterError("store", "the URL must name the window's schema (?schema=NAME)", url)
        self.schema = self.params["schema"]
        self.timeout = float(timeout)
        self._creating = create
        with self.write() as s:
            if create:
                for stmt in statements("postgresql"):
                    s.execute(stmt)
            row = s.one("SELECT value FROM store_meta WHERE key = 'format'")
            if row is None or row[0] != FORMAT:
                raise InvalidParameterError("store", f"schema {self.schema} is not a dprag service store", url)
        self._creating = False

    def describe(self) -> dict:
        return {"kind": "postgresql", "url": public_url(self.params)}

    def _connect(self) -> Any:
        import pg8000.dbapi

        p = self.params
        kw: dict[str, Any] = {"user": p["user"], "database": p["database"], "timeout": self.timeout}
        if p["password"]:
            kw["password"] = p["password"]
        if p["unix_sock"]:
            kw["unix_sock"] = p["unix_sock"]
        else:
            kw.update(host=p["host"], port=p["port"])
        conn = pg8000.dbapi.connect(**kw)
        conn.autocommit = True  # BEGIN / COMMIT are ours
        cur = conn.cursor()
        if self._creating:
            cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
        cur.execute(f'SET search_path TO "{self.schema}"')
        return conn

    def _begin(self, conn: Any, write: bool, tail: bool) -> None:
        cur = conn.cursor()
        if write:
            cur.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            if tail and not self._creating:
                cur.execute("SELECT size FROM ledger_tail WHERE one = 1 FOR UPDATE")  # the window's one write lock
                if not cur.fetchall():
                    raise InvalidParameterError("store", f"schema {self.schema} has no ledger tail")
        else:
            cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def _commit(self, conn: Any) -> None:
        conn.cursor().execute("COMMIT")

    def _rollback(self, conn: Any) -> None:
        conn.cursor().execute("ROLLBACK")

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("?", "%s")

    def _run(self, conn: Any, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        cur = conn.cursor()
        cur.execute(self._sql(sql), tuple(params))
        if cur.description is None:
            return []
        return [tuple(r) for r in cur.fetchall()]

    def _run_many(self, conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            conn.cursor().executemany(self._sql(sql), [tuple(r) for r in rows])

    def _driver_error(self, exc: BaseException) -> bool:
        import pg8000.dbapi

        return isinstance(exc, (pg8000.dbapi.Error, OSError, socket.timeout, EOFError))

    def _transient(self, exc: BaseException) -> bool:
        import pg8000.dbapi

        if isinstance(exc, (pg8000.dbapi.InterfaceError, OSError, socket.timeout, EOFError)):
            return True
        code = exc.args[0].get("C", "") if exc.args and isinstance(exc.args[0], dict) else ""
        return code.startswith(_TRANSIENT)

    def _close_conn(self, conn: Any) -> None:
        conn.close()

    def drop(self) -> None:
        """Drop this window's schema and everything in it (tests, and a provider retiring a window)."""
        with self.write() as s:
            s.execute(f'DROP SCHEMA "{self.schema}" CASCADE')
        self.close()
