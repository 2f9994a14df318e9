"""The auditor's confidential store of a service directory (``state/auditor.sqlite``): the openings by ledger
position, the signed checkpoints by size, the answers served by (account, counter), the pending request and the
zk proofs (spec/provider.md).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from dprag.accounting.stores.sqlite import switch_to_wal


class AuditorStore:
    """state/auditor.sqlite: openings (by ledger position) and signed checkpoints (by size)."""

    def __init__(self, path: Path):
        self.con = sqlite3.connect(str(path), timeout=60.0, isolation_level=None)
        switch_to_wal(self.con, 60.0)
        self.con.execute("PRAGMA synchronous=FULL")
        self.con.execute("CREATE TABLE IF NOT EXISTS opening (pos INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        self.con.execute("CREATE TABLE IF NOT EXISTS checkpoint (size INTEGER PRIMARY KEY, note BLOB NOT NULL)")
        self.con.execute(
            "CREATE TABLE IF NOT EXISTS served (account TEXT NOT NULL, counter INTEGER NOT NULL, "
            "body BLOB NOT NULL, PRIMARY KEY (account, counter))"
        )
        self.con.execute("CREATE TABLE IF NOT EXISTS pending (one INTEGER PRIMARY KEY CHECK (one = 1), body BLOB)")
        self.con.execute("CREATE TABLE IF NOT EXISTS zk_proof (pos INTEGER PRIMARY KEY, body BLOB NOT NULL)")

    def put_served(self, account: str, counter: int, body: bytes) -> None:
        """The served-table row of one request: its ledger position and receipt body, then (once generated) the
        stored answer, which every retry returns byte for byte."""
        self.con.execute(
            "INSERT OR REPLACE INTO served (account, counter, body) VALUES (?, ?, ?)", (account, counter, body)
        )

    def served(self, account: str, counter: int) -> bytes | None:
        row = self.con.execute(
            "SELECT body FROM served WHERE account = ? AND counter = ?", (account, counter)
        ).fetchone()
        return None if row is None else row[0]

    def put_proof(self, pos: int, body: bytes) -> None:
        self.con.execute("INSERT OR REPLACE INTO zk_proof (pos, body) VALUES (?, ?)", (pos, body))

    def proofs(self):
        return self.con.execute("SELECT pos, body FROM zk_proof ORDER BY pos")

    def set_pending(self, body: bytes | None) -> None:
        if body is None:
            self.con.execute("DELETE FROM pending")
        else:
            self.con.execute("INSERT OR REPLACE INTO pending (one, body) VALUES (1, ?)", (body,))

    def pending(self) -> bytes | None:
        row = self.con.execute("SELECT body FROM pending").fetchone()
        return None if row is None else row[0]

    def put_opening(self, pos: int, body: bytes) -> None:
        self.con.execute("INSERT OR REPLACE INTO opening (pos, body) VALUES (?, ?)", (pos, body))

    def put_checkpoint(self, size: int, note: bytes) -> None:
        self.con.execute("INSERT OR REPLACE INTO checkpoint (size, note) VALUES (?, ?)", (size, note))

    def openings(self, below: int):
        return self.con.execute("SELECT pos, body FROM opening WHERE pos < ? ORDER BY pos", (below,))

    def opening(self, pos: int) -> bytes | None:
        row = self.con.execute("SELECT body FROM opening WHERE pos = ?", (pos,)).fetchone()
        return None if row is None else row[0]

    def openings_between(self, lo: int, hi: int):
        return self.con.execute("SELECT pos, body FROM opening WHERE pos >= ? AND pos < ? ORDER BY pos", (lo, hi))

    def checkpoints(self, upto: int):
        return self.con.execute("SELECT size, note FROM checkpoint WHERE size <= ? ORDER BY size", (upto,))

    def close(self):
        self.con.close()
