"""Budget store inside a shared SQL database: one tenant's spend rows, charged in the caller's transaction.

A provider that serves from several threads, processes or hosts keeps every durable record of a request — the
charge, the opening, the ledger leaf — in ONE database and commits them in ONE transaction (spec/provider.md §6).
``SessionBudgetStore`` is the budget store for that: it does not own a connection; it asks its ``sessions``
callable for one and runs its statements there. The callable (the service's store, ``audit.provider.storage``)
yields the
transaction the calling thread has open, so a charge made while serving joins the request's transaction and
commits (or rolls back) with its ledger leaf; called outside any transaction it opens, and commits, one of its own,
which serialises with every other writer of the database (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: the lock on the
ledger's tail row). Either way a charge is applied exactly as ``BudgetStore`` promises: atomically, each document
admitted iff its spend plus the cost stays within the limits, and durable once the enclosing transaction commits.

Layout (``?`` placeholders; the session translates them for its driver)::

    budget_meta(tenant TEXT, key TEXT, value TEXT, PRIMARY KEY (tenant, key))   -- 'format', 'n_docs', 'descriptor'
    budget_spend(tenant TEXT, doc BIGINT, spent BLOB, PRIMARY KEY (tenant, doc)) -- width little-endian int64 units

This module knows no driver: the tables are created by the store that provides the sessions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

from ..errors import check_positive_int
from .base import BudgetStore, BudgetStoreError, PreparedBatch, apply_batch, validate_limits

FORMAT = "dprag-budget-store/2"


class SqlSession(Protocol):
    """One connection inside a transaction (or in autocommit for a read): what the store needs of a driver. A session
    may also offer ``defer(sql, params)``: run a write whose rows are not needed, possibly with the transaction's next
    statement (``audit.provider.storage.Session.defer``); the spend writes use it where it exists."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement (``?`` placeholders); return its rows (empty for a statement without rows)."""
        ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement once per row of parameters."""
        ...


#: ``sessions(write)``: a context manager yielding a session; with ``write=True`` the session is inside a write
#: transaction (the caller's, or one opened and committed around the block).
Sessions = Callable[[bool], AbstractContextManager[SqlSession]]

_UPSERT = (
    "INSERT INTO budget_spend(tenant, doc, spent) VALUES {rows} "
    "ON CONFLICT (tenant, doc) DO UPDATE SET spent = excluded.spent"
)
#: rows per upsert statement (one round trip each: a driver's executemany is one per row)
_BATCH = 250
_COUNT_CHARGE = (
    "INSERT INTO budget_meta(tenant, key, value) VALUES (?, 'charges', '1') "
    "ON CONFLICT (tenant, key) DO UPDATE SET value = CAST(CAST(budget_meta.value AS BIGINT) + 1 AS TEXT)"
)


class SessionBudgetStore(BudgetStore):
    """Spend rows of tenant ``tenant`` in a shared SQL database (see module docstring).

    ``SessionBudgetStore(sessions, tenant, n_docs)`` creates the tenant's rows on first use and checks ``n_docs``
    against them afterwards (``n_docs=None`` adopts the recorded size).
    """

    def __init__(self, sessions: Sessions, tenant: str, n_docs: int | None = None) -> None:
        if not isinstance(tenant, str) or not tenant:
            raise InvalidParameterError("tenant", "must be a non-empty string", tenant)
        if n_docs is not None:
            check_positive_int("n_docs", n_docs)
        self._sessions = sessions
        self._tenant = tenant
        stored_n, stored_desc = self._init(n_docs)
        super().__init__(stored_n)
        if stored_desc is not None:
            try:
                self._limits = validate_limits(json.loads(stored_desc)["limits"])
            except (ValueError, KeyError, TypeError, InvalidParameterError) as exc:
                raise BudgetStoreError(f"tenant {tenant}: corrupt binding descriptor ({exc})") from None
            self._descriptor = stored_desc

    @property
    def tenant(self) -> str:
        return self._tenant

    def _init(self, n_docs: int | None) -> tuple[int, str | None]:
        t = self._tenant
        with self._sessions(True) as s:
            meta = dict(
                cast(list[tuple[str, str]], s.execute("SELECT key, value FROM budget_meta WHERE tenant = ?", (t,)))
            )
            if "format" not in meta:
                if n_docs is None:
                    raise InvalidParameterError("n_docs", "is required to create a new budget store", None)
                s.executemany(
                    "INSERT INTO budget_meta(tenant, key, value) VALUES (?, ?, ?)",
                    [(t, "format", FORMAT), (t, "n_docs", str(int(n_docs)))],
                )
                return int(n_docs), None
            if meta["format"] != FORMAT:
                raise BudgetStoreError(f"tenant {t}: unknown budget store format {meta['format']!r}")
            stored = int(meta["n_docs"])
            if n_docs is not None and int(n_docs) != stored:
                raise InvalidParameterError(
                    "n_docs", f"tenant {t}'s budget rows were made for {stored} documents", n_docs
                )
            return stored, meta.get("descriptor")

    def grow(self, n_docs: int) -> None:
        """Documents joined the corpus at the end of its index: the store covers ``n_docs`` documents from now on,
        each new one at zero spend (a corpus only grows: fewer than today raises ``InvalidParameterError``)."""
        n = check_positive_int("n_docs", n_docs)
        if n < self._n_docs:
            raise InvalidParameterError("n_docs", f"a corpus only grows (it has {self._n_docs} documents)", n)
        with self._sessions(True) as s:
            s.execute("UPDATE budget_meta SET value = ? WHERE tenant = ? AND key = 'n_docs'", (str(n), self._tenant))
        self._n_docs = n

    def _bind(self, limits: npt.NDArray[np.int64], descriptor: str) -> None:
        with self._sessions(True) as s:
            row = s.execute("SELECT value FROM budget_meta WHERE tenant = ? AND key = 'descriptor'", (self._tenant,))
            if not row:
                s.execute(
                    "INSERT INTO budget_meta(tenant, key, value) VALUES (?, 'descriptor', ?)",
                    (self._tenant, descriptor),
                )
            elif row[0][0] != descriptor:
                raise InvalidParameterError(
                    "budget", f"tenant {self._tenant}'s budget rows are bound to a different budget/orders"
                )

    def _select(self, s: SqlSession, union: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Rows for the distinct ids ``union`` (absent rows are zero), checked against the invariant."""
        limits = cast(npt.NDArray[np.int64], self._limits)
        width = int(limits.size)
        out = np.zeros((union.size, width), dtype=np.int64)
        fetched: list[tuple[Any, ...]] = []
        ids = [int(v) for v in union] or [-1]  # constant work: an empty charge reads too (no row has id -1)
        for k in range(0, len(ids), 500):  # bounded statement size on both engines
            part = ids[k : k + 500]
            # padded with -1 to a power of two: few distinct statements, so the drivers' prepared statements are reused
            part += [-1] * ((1 << (len(part) - 1).bit_length()) - len(part))
            fetched += s.execute(
                f"SELECT doc, spent FROM budget_spend WHERE tenant = ? AND doc IN ({','.join('?' * len(part))})",
                (self._tenant, *part),
            )
        if fetched:
            docs = np.fromiter((int(d) for d, _ in fetched), dtype=np.int64, count=len(fetched))
            blob = b"".join(bytes(b) for _, b in fetched)
            if len(blob) != 8 * width * len(fetched):
                raise BudgetStoreError(f"tenant {self._tenant}: corrupt spend row (width mismatch)")
            vals = np.frombuffer(blob, dtype="<i8").reshape(len(fetched), width)
            if np.any(vals < 0) or np.any(vals > limits):
                raise BudgetStoreError(f"tenant {self._tenant}: corrupt spend row (outside [0, limit])")
            order = np.argsort(union, kind="stable")
            out[order[np.searchsorted(union[order], docs)]] = vals
        return out

    def _load(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        union, inverse = np.unique(ids, return_inverse=True)
        with self._sessions(False) as s:
            rows = self._select(s, union)
        return rows[inverse]

    def spend_table(self) -> npt.NDArray[np.int64]:
        """Every document's spend row (shape (n_docs, width)), in one read."""
        width = int(self._require_bound().size)
        out = np.zeros((self.n_docs, width), dtype=np.int64)
        with self._sessions(False) as s:
            for d, b in s.execute("SELECT doc, spent FROM budget_spend WHERE tenant = ?", (self._tenant,)):
                out[int(d)] = np.frombuffer(bytes(b), dtype="<i8")
        return out

    def _charge(self, batch: PreparedBatch) -> list[npt.NDArray[np.bool_]]:
        with self._sessions(True) as s:
            current = self._select(s, batch.union)
            rows, masks = apply_batch(current, batch, cast(npt.NDArray[np.int64], self._limits))
            changed = np.flatnonzero(np.any(rows != current, axis=1))
            le = rows.astype("<i8", copy=False)
            write = getattr(s, "defer", s.execute)  # a session that can send writes with its next round trip
            for k in range(0, int(changed.size), _BATCH):
                part = changed[k : k + _BATCH]
                params = [x for i in part for x in (self._tenant, int(batch.union[i]), le[i].tobytes())]
                write(_UPSERT.format(rows=",".join(["(?, ?, ?)"] * len(part))), params)
            # constant work: every charge writes the tenant's batch counter, charged or not (spec/threat-model.md §2)
            write(_COUNT_CHARGE, (self._tenant,))
            return masks


__all__ = ["FORMAT", "SessionBudgetStore", "Sessions", "SqlSession"]
