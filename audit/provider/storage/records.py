"""The auditor's confidential records inside a window's store: openings by ledger position, signed checkpoints by
size, the served table by (account, counter) with each request's position, receipt body and stored answer, and the
zk proofs (spec/provider.md §6). Every method runs in the calling thread's open transaction if there is one; the
writes whose result no caller needs are ``Session.defer``red (sent with the transaction's next round trip).
"""

from __future__ import annotations

from collections.abc import Callable

from .base import ServiceStore, sql_bytes, sql_int
from .ledger import tail_of

__all__ = ["Records"]


class Records:
    def __init__(self, store: ServiceStore):
        self.store = store

    # -- served table: one row per recorded request, written in the request's transaction -------------------
    def put_served(self, account: str, counter: int, pos: int, body: bytes) -> None:
        with self.store.write() as s:
            s.defer(
                "INSERT INTO served (account, counter, pos, body) VALUES (?, ?, ?, ?)", (account, counter, pos, body)
            )

    def store_answer(
        self,
        account: str,
        counter: int,
        body: bytes,
        *,
        unless_stored: Callable[[bytes], bool],
        expect: bytes | None = None,
    ) -> bytes:
        """Replace the row's body by ``body`` unless ``unless_stored(current_body)`` says an answer is already
        stored; returns the body that is stored afterwards (the first stored answer wins). ``expect``: the body the
        caller knows the row holds without an answer (``unless_stored(expect)`` is false); while the row still holds
        exactly those bytes it is replaced in one statement, else the row is read and judged as above."""
        lock = " FOR UPDATE" if self.store.dialect == "postgresql" else ""  # SQLite: the write lock is the database's
        with self.store.write(tail=False) as s:
            if expect is not None and s.write_returning(
                "UPDATE served SET body = ? WHERE account = ? AND counter = ? AND body = ? RETURNING pos",
                (body, account, counter, expect),
            ):
                return body
            row = s.one(f"SELECT body FROM served WHERE account = ? AND counter = ?{lock}", (account, counter))
            if row is None:
                raise KeyError((account, counter))
            current = sql_bytes(row[0])
            if unless_stored(current):
                return current
            s.execute("UPDATE served SET body = ? WHERE account = ? AND counter = ?", (body, account, counter))
            return body

    def served(self, account: str, counter: int) -> bytes | None:
        with self.store.read() as s:
            row = s.one("SELECT body FROM served WHERE account = ? AND counter = ?", (account, counter))
        return None if row is None else sql_bytes(row[0])

    def served_at(self, pos: int) -> bytes | None:
        with self.store.read() as s:
            row = s.one("SELECT body FROM served WHERE pos = ?", (pos,))
        return None if row is None else sql_bytes(row[0])

    def admission(self, account: str, counter: int) -> tuple[int, bytes | None, bytes | None, int, int]:
        """What admitting a request reads, in ONE statement: the ledger's size and last leaf (None if empty; is the
        window closed?), ``served(account, counter)``, ``last_counter(account)`` and the position of the last state
        leaf (0: none; a replica that loaded less re-reads the registry). Under the tail lock the size is kept for
        the rest of the transaction (``Session.tail_size``), as ``StoreLog`` does."""
        with self.store.read() as s:
            row = s.one(
                "SELECT t.size, l.data, (SELECT body FROM served WHERE account = ? AND counter = ?), "
                "(SELECT max(counter) FROM served WHERE account = ?), (SELECT max(pos) FROM state_leaf) "
                "FROM ledger_tail t LEFT JOIN ledger_leaf l ON l.idx = t.size - 1 WHERE t.one = 1",
                (account, counter, account),
            )
            size, last = tail_of(row, s)
        assert row is not None  # tail_of refuses a missing row
        return (
            size,
            last,
            None if row[2] is None else sql_bytes(row[2]),
            0 if row[3] is None else sql_int(row[3]),
            0 if row[4] is None else sql_int(row[4]),
        )

    # -- state leaves (the registry's, spec/protocol.md §3.2) -------------------------------------------------
    def put_state_leaf(self, pos: int, kind: str) -> None:
        with self.store.write() as s:
            s.defer("INSERT INTO state_leaf (pos, kind) VALUES (?, ?)", (pos, kind))

    def state_leaves(self, after: int) -> list[tuple[int, bytes]]:
        """The state leaves at positions above ``after``, in log order, with their bytes (one statement)."""
        with self.store.read() as s:
            rows = s.execute(
                "SELECT l.idx, l.data FROM state_leaf t JOIN ledger_leaf l ON l.idx = t.pos WHERE t.pos > ? "
                "ORDER BY t.pos",
                (after,),
            )
        return [(sql_int(p), sql_bytes(b)) for p, b in rows]

    def last_counter(self, account: str) -> int:
        """The account's highest recorded counter in this window (0 if none)."""
        with self.store.read() as s:
            row = s.one("SELECT max(counter) FROM served WHERE account = ?", (account,))
        return 0 if row is None or row[0] is None else sql_int(row[0])

    def served_count(self) -> int:
        with self.store.read() as s:
            row = s.one("SELECT count(*) FROM served")
        return 0 if row is None else sql_int(row[0])

    def pending_count(self) -> int:
        """The recorded requests whose outcome is not stored: no answer (canonical JSON ``"served":null``) and no
        void (``"void":{``); the question is a JSON string, so neither pattern can occur inside it unescaped."""
        has = "position(? in body)" if self.store.dialect == "postgresql" else "instr(body, ?)"  # bytes in bytes
        with self.store.read() as s:
            row = s.one(f"SELECT count(*) FROM served WHERE {has} > 0 AND {has} = 0", (b'"served":null', b'"void":{'))
        return 0 if row is None else sql_int(row[0])

    # -- openings, checkpoints, proofs ------------------------------------------------------------------------
    def put_opening(self, pos: int, body: bytes) -> None:
        with self.store.write() as s:
            s.defer("INSERT INTO opening (pos, body) VALUES (?, ?)", (pos, body))

    def opening(self, pos: int) -> bytes | None:
        with self.store.read() as s:
            row = s.one("SELECT body FROM opening WHERE pos = ?", (pos,))
        return None if row is None else sql_bytes(row[0])

    def openings(self, below: int, since: int = 0) -> list[tuple[int, bytes]]:
        with self.store.read() as s:
            rows = s.execute("SELECT pos, body FROM opening WHERE pos < ? AND pos >= ? ORDER BY pos", (below, since))
        return [(sql_int(p), sql_bytes(b)) for p, b in rows]

    def put_checkpoint(self, size: int, note: bytes, *, replace: bool = False) -> None:
        """Keep a signed checkpoint note; an existing note of that size is kept unless ``replace`` (a witness's
        cosigned copy replaces the provider's own)."""
        on_conflict = "DO UPDATE SET note = excluded.note" if replace else "DO NOTHING"
        with self.store.write(tail=False) as s:
            s.defer(f"INSERT INTO checkpoint (size, note) VALUES (?, ?) ON CONFLICT (size) {on_conflict}", (size, note))

    def checkpoints(self, upto: int) -> list[tuple[int, bytes]]:
        with self.store.read() as s:
            rows = s.execute("SELECT size, note FROM checkpoint WHERE size <= ? ORDER BY size", (upto,))
        return [(sql_int(z), sql_bytes(n)) for z, n in rows]

    def put_proof(self, pos: int, body: bytes) -> None:
        with self.store.write(tail=False) as s:
            s.execute(
                "INSERT INTO zk_proof (pos, body) VALUES (?, ?) ON CONFLICT (pos) DO UPDATE SET body = excluded.body",
                (pos, body),
            )

    def proofs(self) -> list[tuple[int, bytes]]:
        with self.store.read() as s:
            rows = s.execute("SELECT pos, body FROM zk_proof ORDER BY pos")
        return [(sql_int(p), sql_bytes(b)) for p, b in rows]
