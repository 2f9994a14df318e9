"""The ledger inside a window's store (``ledger_leaf``, ``ledger_node``, ``ledger_tail``): an RFC 6962 log whose
appends join the caller's write transaction, so a query's leaf commits with its charge and its opening.

Same layout as ``audit.ledger.SqliteLog`` (spec/ledger.md §6: leaves by index, perfect-subtree hashes by stored
index), plus the tail row holding the size, which every write transaction locks first (``base.py``). The size is
read from the tail inside the transaction, so the frontier and the new hashes are computed from committed state
under the lock; an append outside any transaction opens (and commits) its own.
"""

from __future__ import annotations

from ..ledger.errors import LedgerCorruptError
from ..ledger.rfc6962 import CompactRange, NodeID, peaks, stored_hash_count, stored_hash_index
from ..ledger.store import MerkleLog
from .base import ServiceStore

__all__ = ["StoreLog"]


class StoreLog(MerkleLog):
    """The window's ledger (see module docstring)."""

    def __init__(self, store: ServiceStore):
        self.store = store

    @property
    def size(self) -> int:
        with self.store.read() as s:
            row = s.one("SELECT size FROM ledger_tail WHERE one = 1")
        if row is None:
            raise LedgerCorruptError("the store has no ledger tail row")
        return int(row[0])

    def _get_nodes(self, nodes: list[NodeID]) -> list[bytes]:
        if not nodes:
            return []
        pos = [stored_hash_index(lv, i) for lv, i in nodes]
        uniq = sorted(set(pos))
        with self.store.read() as s:
            rows = {
                int(p): bytes(h)
                for p, h in s.execute(
                    f"SELECT pos, hash FROM ledger_node WHERE pos IN ({','.join('?' * len(uniq))})", uniq
                )
            }
        if len(rows) != len(uniq):
            raise LedgerCorruptError(f"stored hashes missing at positions {[p for p in uniq if p not in rows][:5]}")
        return [rows[p] for p in pos]

    def _get_leaves(self, start: int, stop: int) -> list[bytes]:
        with self.store.read() as s:
            rows = s.execute("SELECT idx, data FROM ledger_leaf WHERE idx >= ? AND idx < ? ORDER BY idx", (start, stop))
        if len(rows) != stop - start or (rows and (rows[0][0] != start or rows[-1][0] != stop - 1)):
            raise LedgerCorruptError(f"leaves [{start}, {stop}) are not all present")
        return [bytes(r[1]) for r in rows]

    def _check_stored_run(self, first_pos: int, expected: list[bytes]) -> None:
        with self.store.read() as s:
            rows = s.execute(
                "SELECT pos, hash FROM ledger_node WHERE pos >= ? AND pos < ? ORDER BY pos",
                (first_pos, first_pos + len(expected)),
            )
        if len(rows) != len(expected):
            raise LedgerCorruptError(f"stored hashes missing after position {first_pos}")
        for (pos, h), e in zip(rows, expected, strict=False):
            if bytes(h) != e:
                raise LedgerCorruptError(f"stored hash at position {pos} does not match the leaves")

    def _append_leaves(self, leaves: list[bytes]) -> int:
        with self.store.write() as s:
            size = int(s.one("SELECT size FROM ledger_tail WHERE one = 1")[0])
            frontier = CompactRange(size, self._get_nodes(peaks(size)) if size else [])
            hashes: list[bytes] = []
            frontier.extend(leaves, hashes)
            first_pos = stored_hash_count(size)
            for table, cols, first, values in (
                ("ledger_leaf", "idx, data", size, leaves),
                ("ledger_node", "pos, hash", first_pos, hashes),
            ):
                for k in range(0, len(values), 250):  # one round trip per 250 rows (executemany: one per row)
                    part = values[k : k + 250]
                    params = [x for i, v in enumerate(part, start=first + k) for x in (i, v)]
                    s.execute(f"INSERT INTO {table} ({cols}) VALUES {','.join(['(?, ?)'] * len(part))}", params)
            s.execute("UPDATE ledger_tail SET size = ? WHERE one = 1", (size + len(leaves),))
            return size
