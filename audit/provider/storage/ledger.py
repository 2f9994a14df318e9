"""The ledger inside a window's store (``ledger_leaf``, ``ledger_node``, ``ledger_tail``): an RFC 6962 log whose
appends join the caller's write transaction, so a query's leaf commits with its charge and its opening.

Same layout as ``audit.protocol.ledger.SqliteLog`` (spec/ledger.md §6: leaves by index, perfect-subtree hashes by stored
index), plus the tail row holding the size, which every write transaction locks first (``base.py``). The size is
read from the tail inside the transaction, so the frontier and the new hashes are computed from committed state
under the lock; an append outside any transaction opens (and commits) its own.

Round trips saved without trusting anything uncommitted: under the tail lock the size is read once per transaction
(``Session.tail_size``); and the right frontier (peak hashes and root) of the size this process last committed is
kept in memory, set only after that commit — a committed prefix of an append-only log never changes, so the
frontier of size N is the frontier of size N forever; for any other size the hashes are read from the store. For
the same reason the perfect-subtree hashes this process has read outside a write transaction, or committed itself,
are kept (``NODE_CACHE`` at most): a consistency proof for an account's receipt then reads only nodes it has not
seen. A hash read inside a write transaction is never kept — the transaction may roll back and another writer put a
different hash there.
"""

from __future__ import annotations

from functools import partial

from ...protocol.ledger.errors import LedgerCorruptError
from ...protocol.ledger.rfc6962 import CompactRange, NodeID, fold, peaks, stored_hash_count, stored_hash_index
from ...protocol.ledger.store import MerkleLog
from .base import Row, ServiceStore, Session, sql_bytes, sql_int

__all__ = ["StoreLog"]

#: perfect-subtree hashes a StoreLog keeps in memory (``StoreLog._nodes``)
NODE_CACHE = 1 << 16


def tail_of(row: Row | None, session: Session) -> tuple[int, bytes | None]:
    """(size, last leaf) from a row whose first two columns are ``ledger_tail.size`` and the last leaf's data (the
    ``ledger_tail LEFT JOIN ledger_leaf`` of ``StoreLog.tail`` and the admission read); a tail-locked ``session``
    remembers the size. Raises ``LedgerCorruptError`` for a missing tail row or last leaf."""
    if row is None:
        raise LedgerCorruptError("the store has no ledger tail row")
    size = sql_int(row[0])
    if session.tail:
        session.tail_size = size
    if size and row[1] is None:
        raise LedgerCorruptError(f"leaf {size - 1} is not present")
    return size, None if row[1] is None else sql_bytes(row[1])


class StoreLog(MerkleLog):
    """The window's ledger (see module docstring)."""

    def __init__(self, store: ServiceStore):
        self.store = store
        #: (size, peak hashes, root) of a size this process committed (see module docstring)
        self._frontier: tuple[int, list[bytes], bytes] | None = None
        #: perfect-subtree hashes by stored index, read or written by committed transactions only (see module
        #: docstring: a committed node never changes), so a consistency proof reads the store only for nodes it has
        #: not seen; at most NODE_CACHE of them, then it starts over
        self._nodes: dict[int, bytes] = {}

    @property
    def size(self) -> int:
        with self.store.read() as s:
            if s.tail_size is not None:
                return s.tail_size
            row = s.one("SELECT size FROM ledger_tail WHERE one = 1")
            if row is None:
                raise LedgerCorruptError("the store has no ledger tail row")
            size = sql_int(row[0])
            if s.tail:
                s.tail_size = size
        return size

    def tail(self) -> tuple[int, bytes | None]:
        """The size and the last leaf (None for an empty ledger), in one statement."""
        with self.store.read() as s:
            row = s.one(
                "SELECT t.size, l.data FROM ledger_tail t LEFT JOIN ledger_leaf l ON l.idx = t.size - 1 WHERE t.one = 1"
            )
            size, last = tail_of(row, s)
        return size, last

    def head(self) -> tuple[int, bytes]:
        """The size and root of the committed ledger (one statement when this process appended last; none when the
        transaction's BEGIN read the size, ``Session.begin_size``)."""
        with self.store.read() as s:
            size = s.begin_size if s.begin_size is not None else self.size
        cached = self._cached_root(size)
        if cached is not None:
            return size, cached
        return size, fold(self._get_nodes(peaks(size))) if size else fold([])

    def _cached_root(self, size: int) -> bytes | None:
        f = self._frontier
        return f[2] if f is not None and f[0] == size else None

    def _remember(self, size: int, hashes: list[bytes]) -> None:
        self._frontier = (size, hashes, fold(hashes))

    def _get_nodes(self, nodes: list[NodeID]) -> list[bytes]:
        if not nodes:
            return []
        pos = [stored_hash_index(lv, i) for lv, i in nodes]
        rows: dict[int, bytes] = {}
        for p in set(pos):
            h = self._nodes.get(p)
            if h is not None:
                rows[p] = h
        uniq = sorted(set(pos) - set(rows))
        if uniq:
            with self.store.read() as s:
                got = {
                    sql_int(p): sql_bytes(h)
                    for p, h in s.execute(
                        f"SELECT pos, hash FROM ledger_node WHERE pos IN ({','.join('?' * len(uniq))})", uniq
                    )
                }
                committed = not s.write  # outside a write transaction: committed state only
            if len(got) != len(uniq):
                raise LedgerCorruptError(f"stored hashes missing at positions {[p for p in uniq if p not in got][:5]}")
            if committed:
                self._cache_nodes(got)
            rows.update(got)
        return [rows[p] for p in pos]

    def _cache_nodes(self, nodes: dict[int, bytes]) -> None:
        if len(self._nodes) + len(nodes) > NODE_CACHE:
            self._nodes = {}
        self._nodes.update(nodes)

    def _get_leaves(self, start: int, stop: int) -> list[bytes]:
        with self.store.read() as s:
            rows = s.execute("SELECT idx, data FROM ledger_leaf WHERE idx >= ? AND idx < ? ORDER BY idx", (start, stop))
        if len(rows) != stop - start or (rows and (rows[0][0] != start or rows[-1][0] != stop - 1)):
            raise LedgerCorruptError(f"leaves [{start}, {stop}) are not all present")
        return [sql_bytes(r[1]) for r in rows]

    def _check_stored_run(self, first_pos: int, expected: list[bytes]) -> None:
        with self.store.read() as s:
            rows = s.execute(
                "SELECT pos, hash FROM ledger_node WHERE pos >= ? AND pos < ? ORDER BY pos",
                (first_pos, first_pos + len(expected)),
            )
        if len(rows) != len(expected):
            raise LedgerCorruptError(f"stored hashes missing after position {first_pos}")
        for (pos, h), e in zip(rows, expected, strict=False):
            if sql_bytes(h) != e:
                raise LedgerCorruptError(f"stored hash at position {pos} does not match the leaves")

    def _append_leaves(self, leaves: list[bytes]) -> int:
        return self._append(leaves)[0]

    def append_with_root(self, leaf: bytes) -> tuple[int, bytes]:
        """Append one leaf; its position and the root of the log it makes (size position + 1), from the frontier
        the append computes anyway (no store read): what a receipt signs (spec/protocol.md §5.4)."""
        return self._append([bytes(leaf)])

    def root_after(self, leaf: bytes) -> tuple[int, bytes]:
        """(size, root of the log ``leaf`` would make appended at ``size``), from committed state and without
        writing: what a caller signs before its write transaction, which then appends only if the size is still
        ``size`` (``ProviderService.rotate_key``)."""
        with self.store.snapshot():
            size = self.size
            known = self._frontier
            if known is not None and known[0] == size:
                frontier = CompactRange(size, known[1])
            else:
                frontier = CompactRange(size, self._get_nodes(peaks(size)) if size else [])
        frontier.extend([bytes(leaf)], [])
        return size, frontier.root()

    def _append(self, leaves: list[bytes]) -> tuple[int, bytes]:
        with self.store.write() as s:
            size = self.size  # under the tail lock: read once per transaction
            known = self._frontier
            if known is not None and known[0] == size:
                frontier = CompactRange(size, known[1])
            else:
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
                    s.defer(f"INSERT INTO {table} ({cols}) VALUES {','.join(['(?, ?)'] * len(part))}", params)
            s.defer("UPDATE ledger_tail SET size = ? WHERE one = 1", (size + len(leaves),))
            s.tail_size = size + len(leaves)
            s.after_commit.append(partial(self._remember, frontier.size, frontier.hashes))
            s.after_commit.append(lambda: self._cache_nodes(dict(enumerate(hashes, start=first_pos))))
            return size, frontier.root()
