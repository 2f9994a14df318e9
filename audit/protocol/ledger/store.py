"""Append-only Merkle logs: in memory (:class:`MemoryLog`) and SQLite-backed (:class:`SqliteLog`).

Audit primitive G2 of "Auditing Privacy in Multi-Tenant RAG under Account Collusion" (§5.2-5.4): the
provider appends one record per served query, publishes the root C_ledger,t, and later proves inclusion
of any past record (O(log n)) and that the final root extends every published one.

Both stores keep the leaves and every *perfect-subtree* hash (leaf hashes and complete interior nodes,
``2n - popcount(n)`` hashes for ``n`` leaves), so that the root at any past size, inclusion proofs and
consistency proofs are computed from O(log n) stored hashes (:mod:`audit.protocol.ledger.proof` plans). Hashes
are addressed by their *stored index* (:func:`audit.protocol.ledger.rfc6962.stored_hash_index`): the order in which
appends create them, so the hash table only ever grows at its end.

SQLite layout, durability and crash-safety arguments: spec/ledger.md §6-7. In short: one append batch is
one SQLite transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``) that reads the tree size and right frontier
*inside* the write lock, so concurrent writers (threads or processes) serialise into one append-only
sequence; WAL journaling makes a batch all-or-nothing across crashes; with ``synchronous=FULL`` (default)
``append`` returns only after the WAL is fsynced. Concurrent ``append`` calls from threads of one process
are group-committed: whoever finds no commit in flight commits everything queued so far in one transaction.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import Self

from dprag.accounting.stores.sqlite import is_busy, switch_to_wal
from dprag.errors import InvalidParameterError

from .checkpoint import Checkpoint, Signer, sign_checkpoint
from .errors import LedgerCorruptError, LedgerError, LedgerRangeError
from .proof import ConsistencyProof, InclusionProof, consistency_plan, inclusion_plan, materialize
from .rfc6962 import (
    HASH_SIZE,
    LEAF_PREFIX,
    NODE_PREFIX,
    TREE_HASH,
    CompactRange,
    NodeID,
    fold,
    hash_children,
    hash_leaf,
    peaks,
    stored_hash_count,
    stored_hash_index,
)

#: ``PRAGMA application_id`` of a dprag ledger database ("DPRL").
APPLICATION_ID = 0x4450524C
#: ``PRAGMA user_version``: the schema version described in spec/ledger.md.
SCHEMA_VERSION = 1


def _as_leaves(leaves: Iterable[bytes]) -> list[bytes]:
    if isinstance(leaves, (bytes, bytearray, memoryview, str)):
        raise InvalidParameterError("leaves", "must be an iterable of bytes leaves, not a single bytes/str")
    out = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, bytes):
            out.append(leaf)
        elif isinstance(leaf, (bytearray, memoryview)):
            out.append(bytes(leaf))
        else:
            raise InvalidParameterError(f"leaves[{i}]", "must be bytes", type(leaf).__name__)
    if not out:
        raise InvalidParameterError("leaves", "must contain at least one leaf (empty batch)")
    return out


def _check_index(field: str, value: object, upper: int, rule: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LedgerRangeError(field, "must be an integer", value)
    if value < 0 or value >= upper:
        raise LedgerRangeError(field, rule, value)
    return int(value)


class MerkleLog(ABC):
    """Common API of an append-only RFC 6962 log with 0-based leaf indices.

    Subclasses provide four primitives: the current size, an atomic batch append, and batch reads of
    leaves and of perfect-subtree hashes. Everything else (roots at past sizes, proofs, checkpoints,
    integrity checks) is built here from O(log n) hash reads.
    """

    # -- primitives --------------------------------------------------------------------------------

    @property
    @abstractmethod
    def size(self) -> int:
        """Number of leaves currently in the log."""

    @abstractmethod
    def _append_leaves(self, leaves: list[bytes]) -> int:
        """Atomically append validated leaves; return the index of the first one."""

    @abstractmethod
    def _get_nodes(self, nodes: list[NodeID]) -> list[bytes]:
        """Hashes of the given perfect subtrees (all must exist)."""

    @abstractmethod
    def _get_leaves(self, start: int, stop: int) -> list[bytes]:
        """Leaves ``[start, stop)`` (all must exist)."""

    def _cached_root(self, size: int) -> bytes | None:
        return None

    # -- appends -----------------------------------------------------------------------------------

    def append(self, leaf: bytes) -> int:
        """Append one leaf (arbitrary bytes); return its 0-based index once it is durable."""
        if not isinstance(leaf, (bytes, bytearray, memoryview)):
            raise InvalidParameterError("leaf", "must be bytes", type(leaf).__name__)
        return self._append_leaves([bytes(leaf)])

    def append_many(self, leaves: Iterable[bytes]) -> int:
        """Append a non-empty batch atomically (all or nothing); return the index of its first leaf."""
        return self._append_leaves(_as_leaves(leaves))

    # -- reads -------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.size

    def _size_arg(self, size: int | None, field: str = "size") -> int:
        current = self.size
        if size is None:
            return current
        return _check_index(field, size, current + 1, f"must lie in [0, {current}] (the current log size)")

    def leaf(self, index: int) -> bytes:
        """The leaf bytes stored at ``index``."""
        index = _check_index("index", index, self.size, "must be < the log size")
        return self._get_leaves(index, index + 1)[0]

    def leaf_hash(self, index: int) -> bytes:
        """The RFC 6962 leaf hash ``SHA-256(0x00 || leaf)`` stored for ``index``."""
        index = _check_index("index", index, self.size, "must be < the log size")
        return self._get_nodes([(0, index)])[0]

    def leaves(self, start: int = 0, stop: int | None = None, *, chunk: int = 4096) -> Iterator[bytes]:
        """Iterate over leaves ``[start, stop)`` (default: everything present when the call is made).

        Arguments are checked at call time; leaves are then read lazily, ``chunk`` rows per query.
        """
        stop = self._size_arg(stop, "stop")
        start = _check_index("start", start, stop + 1, f"must lie in [0, {stop}]")
        chunk = int(chunk) if isinstance(chunk, int) and not isinstance(chunk, bool) and chunk > 0 else 0
        if not chunk:
            raise InvalidParameterError("chunk", "must be an integer >= 1")

        def gen() -> Iterator[bytes]:
            for lo in range(start, stop, chunk):
                yield from self._get_leaves(lo, min(lo + chunk, stop))

        return gen()

    def root(self, size: int | None = None) -> bytes:
        """MTH of the first ``size`` leaves (default: the current log), from <= log2(size) stored hashes."""
        size = self._size_arg(size)
        cached = self._cached_root(size)
        if cached is not None:
            return cached
        return fold(self._get_nodes(peaks(size))) if size else fold([])

    def inclusion_proof(self, index: int, size: int | None = None) -> InclusionProof:
        """RFC 9162 §2.1.3.1 inclusion proof of leaf ``index`` in the tree of ``size`` leaves."""
        size = self._size_arg(size)
        index = _check_index("index", index, size, f"must be < size ({size})")
        return InclusionProof(index, size, tuple(materialize(inclusion_plan(index, size), self._get_nodes)))

    def consistency_proof(self, size1: int, size2: int | None = None) -> ConsistencyProof:
        """RFC 9162 §2.1.4.1 consistency proof between sizes ``0 < size1 <= size2``."""
        size2 = self._size_arg(size2, "size2")
        size1 = _check_index("size1", size1, size2 + 1, f"must lie in [1, {size2}] (size2)")
        if size1 == 0:
            raise LedgerRangeError("size1", "must be > 0 (a consistency proof from the empty tree is meaningless)", 0)
        return ConsistencyProof(size1, size2, tuple(materialize(consistency_plan(size1, size2), self._get_nodes)))

    def checkpoint(
        self, signer: Signer, origin: str, *, size: int | None = None, extensions: Sequence[str] = ()
    ) -> bytes:
        """A signed transparency-dev checkpoint (signed note bytes) of the tree at ``size`` (default: now)."""
        size = self._size_arg(size)
        return sign_checkpoint(Checkpoint(origin, size, self.root(size), tuple(extensions)), signer)

    def verify_integrity(self, *, chunk: int = 65536) -> int:
        """Recompute every stored hash from the leaves (O(n)); return the size checked.

        Raises :class:`LedgerCorruptError` at the first stored hash that differs from the recomputation.
        """
        size = self.size
        cr = CompactRange()
        for lo in range(0, size, chunk):
            hi = min(lo + chunk, size)
            leaves = self._get_leaves(lo, hi)
            if len(leaves) != hi - lo:
                raise LedgerCorruptError(f"leaves [{lo}, {hi}) are not all present")
            expected: list[bytes] = []
            cr.extend(leaves, expected)
            self._check_stored_run(stored_hash_count(lo), expected)
        return size

    def _check_stored_run(self, first_pos: int, expected: list[bytes]) -> None:
        raise NotImplementedError

    def close(self) -> None:  # noqa: B027 - a no-op default, not abstract
        """Release resources (no-op for in-memory logs)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MemoryLog(MerkleLog):
    """An in-memory log: leaves in a list, perfect-subtree hashes in one list per level. Thread-safe."""

    def __init__(self, leaves: Iterable[bytes] = ()):
        self._lock = threading.RLock()
        self._leaves: list[bytes] = []
        self._levels: list[list[bytes]] = [[]]
        if isinstance(leaves, (bytes, bytearray, memoryview, str)):
            raise InvalidParameterError("leaves", "must be an iterable of bytes leaves, not a single bytes/str")
        leaves = list(leaves)
        if leaves:
            self.append_many(leaves)

    @property
    def size(self) -> int:
        return len(self._leaves)

    @property
    def levels(self) -> list[list[bytes]]:
        """The perfect-subtree hashes, one list per level (leaf hashes first): what ``verify_integrity`` compares."""
        return self._levels

    def _append_leaves(self, leaves: list[bytes]) -> int:
        sha = TREE_HASH
        with self._lock:
            levels = self._levels
            first = len(self._leaves)
            level0 = levels[0]
            for leaf in leaves:
                h = sha(LEAF_PREFIX + leaf).digest()
                i = len(level0)
                level0.append(h)
                lv = 0
                while i & 1:
                    h = sha(NODE_PREFIX + levels[lv][i - 1] + h).digest()
                    lv += 1
                    i >>= 1
                    if len(levels) == lv:
                        levels.append([])
                    levels[lv].append(h)
            self._leaves.extend(leaves)
            return first

    def _get_nodes(self, nodes: list[NodeID]) -> list[bytes]:
        levels = self._levels
        return [levels[lv][i] for lv, i in nodes]

    def _get_leaves(self, start: int, stop: int) -> list[bytes]:
        return self._leaves[start:stop]

    def verify_integrity(self, *, chunk: int = 65536) -> int:
        """Recompute every stored hash from the leaves (O(n)); return the size checked."""
        with self._lock:
            fresh = MemoryLog(self._leaves)
            if len(fresh.levels) != len(self._levels):
                raise LedgerCorruptError("stored tree height does not match the leaves")
            for lv, (want, got) in enumerate(zip(fresh.levels, self._levels, strict=False)):
                if want != got:
                    i = next(
                        (j for j, (x, y) in enumerate(zip(want, got, strict=False)) if x != y), min(len(want), len(got))
                    )
                    raise LedgerCorruptError(f"stored hash of node {(lv, i)} does not match its leaves")
            return len(self._leaves)


class _Request:
    __slots__ = ("leaves", "first", "error", "done")

    def __init__(self, leaves: list[bytes]):
        self.leaves = leaves
        self.first = -1
        self.error: BaseException | None = None
        self.done = False


_SCHEMA = (
    "CREATE TABLE leaf (idx INTEGER PRIMARY KEY, data BLOB NOT NULL)",
    f"CREATE TABLE node (pos INTEGER PRIMARY KEY, hash BLOB NOT NULL CHECK (length(hash) = {HASH_SIZE}))",
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TRIGGER leaf_append_only_u BEFORE UPDATE ON leaf BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END",
    "CREATE TRIGGER leaf_append_only_d BEFORE DELETE ON leaf BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END",
    "CREATE TRIGGER node_append_only_u BEFORE UPDATE ON node BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END",
    "CREATE TRIGGER node_append_only_d BEFORE DELETE ON node BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END",
    "INSERT INTO meta (key, value) VALUES ('format', 'dprag-ledger'), ('hash', 'rfc6962-sha256'),"
    " ('node_order', 'stored_hash_index')",
    f"PRAGMA application_id = {APPLICATION_ID}",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)


class SqliteLog(MerkleLog):
    """A durable log in one SQLite database file (stdlib ``sqlite3``, WAL journal).

    Parameters
    ----------
    path:
        Database file; created (with the schema of spec/ledger.md §6) if missing or empty.
    synchronous:
        ``"FULL"`` (default): every commit fsyncs the WAL, so a returned ``append`` survives power loss.
        ``"NORMAL"``: commits are not fsynced until a WAL checkpoint; a returned append survives a process
        crash but the last transactions may be lost on power loss/OS crash (never torn). See spec §7.
    readonly:
        Open without write access (``mode=ro``); appends raise.
    verify:
        ``"quick"`` (default) checks on open, in O(log n), that the hash count matches the leaf count, that
        the last leaf's stored hash is its leaf hash and that the nodes it completed hash their children;
        ``"full"`` additionally recomputes every stored hash (O(n)); ``"none"`` skips both.
    timeout:
        Seconds to wait for another writer's lock (SQLite busy timeout).

    One ``SqliteLog`` may be shared by threads; do not share one across ``fork``: open one per process.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        readonly: bool = False,
        verify: str = "quick",
        timeout: float = 60.0,
    ):
        sync = str(synchronous).upper()
        if sync not in ("FULL", "NORMAL", "EXTRA"):
            raise InvalidParameterError("synchronous", "must be 'FULL', 'EXTRA' or 'NORMAL'", synchronous)
        if verify not in ("quick", "full", "none"):
            raise InvalidParameterError("verify", "must be 'quick', 'full' or 'none'", verify)
        self.path = os.fspath(path)
        self.readonly = bool(readonly)
        self.synchronous = sync
        if self.readonly and not os.path.exists(self.path):
            raise InvalidParameterError("path", "must name an existing ledger database when readonly", self.path)
        try:
            if self.readonly:
                uri = "file:" + _uri_path(self.path) + "?mode=ro"
                con = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False)
            else:
                con = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise InvalidParameterError("path", f"cannot open as a SQLite database ({e})", self.path) from None
        self._con = con
        self._db_lock = threading.RLock()
        self._gc = threading.Condition(threading.Lock())
        self._pending: list[_Request] = []
        self._leader = False
        self._frontier = CompactRange()
        try:
            self._setup(sync, timeout)
            self._load(verify)
        except sqlite3.DatabaseError as e:
            con.close()
            if is_busy(e):  # the file is not at fault: another connection kept it locked
                raise LedgerError(
                    f"{self.path}: another connection held the database locked for more than "
                    f"timeout = {timeout:g} s ({e})"
                ) from None
            raise InvalidParameterError("path", f"is not a usable ledger database ({e})", self.path) from None
        except BaseException:
            con.close()
            raise

    # -- opening ---------------------------------------------------------------------------------

    def _setup(self, sync: str, timeout: float) -> None:
        con = self._con
        if not self.readonly:
            mode = switch_to_wal(con, timeout)  # a new file: retried past SQLite's deadlock-avoiding BUSY
            if str(mode).lower() != "wal":
                raise LedgerError(f"{self.path}: SQLite could not switch to WAL journaling (got {mode!r})")
            con.execute(f"PRAGMA synchronous = {sync}")
            con.execute("BEGIN IMMEDIATE")
            try:
                self._check_or_create_schema(create=True)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        else:
            self._check_or_create_schema(create=False)

    def _check_or_create_schema(self, create: bool) -> None:
        con = self._con
        app_id = con.execute("PRAGMA application_id").fetchone()[0]
        if app_id == 0:
            n_objects = con.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if n_objects or not create:
                raise InvalidParameterError(
                    "path", "is not a dprag ledger database (application_id mismatch)", self.path
                )
            for stmt in _SCHEMA:
                con.execute(stmt)
        elif app_id != APPLICATION_ID:
            raise InvalidParameterError("path", "is not a dprag ledger database (application_id mismatch)", self.path)
        version = con.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise LedgerCorruptError(f"{self.path}: unsupported ledger schema version {version}")

    def _load(self, verify: str) -> None:
        with self._db_lock:
            con = self._con
            con.execute("BEGIN")  # one read snapshot for the whole check
            try:
                size = self._read_size()
                top = con.execute("SELECT max(pos) FROM node").fetchone()[0]
                n_hashes = 0 if top is None else top + 1
                if n_hashes != stored_hash_count(size):
                    raise LedgerCorruptError(
                        f"{self.path}: {size} leaves need {stored_hash_count(size)} stored hashes, found {n_hashes}"
                    )
                if size:
                    first = con.execute("SELECT min(idx) FROM leaf").fetchone()[0]
                    if first != 0:
                        raise LedgerCorruptError(f"{self.path}: leaf indices do not start at 0")
                if verify != "none" and size:
                    self._quick_check(size)
                self._frontier = self._read_frontier(size)
            finally:
                con.execute("COMMIT")
        if verify == "full":
            self.verify_integrity()

    def _quick_check(self, size: int) -> None:
        m = size - 1
        leaf = self._get_leaves(m, m + 1)[0]
        ids = [(0, m)]
        lv = 0
        while (m >> lv) & 1:
            ids.append((lv + 1, m >> (lv + 1)))
            ids.append((lv, (m >> lv) - 1))
            lv += 1
        got = dict(zip(ids, self._get_nodes(ids), strict=False))
        if got[(0, m)] != hash_leaf(leaf):
            raise LedgerCorruptError(f"{self.path}: stored hash of the last leaf does not match its data")
        top = lv
        for lv in range(1, top + 1):
            node = (lv, m >> lv)
            left, right = (lv - 1, 2 * node[1]), (lv - 1, 2 * node[1] + 1)
            if got[node] != hash_children(got[left], got[right]):
                raise LedgerCorruptError(f"{self.path}: stored hash of node {node} does not match its children")

    # -- primitives ------------------------------------------------------------------------------

    def _read_size(self) -> int:
        top = self._con.execute("SELECT max(idx) FROM leaf").fetchone()[0]
        return 0 if top is None else top + 1

    @property
    def size(self) -> int:
        with self._db_lock:
            return self._read_size()

    def _read_frontier(self, size: int) -> CompactRange:
        return CompactRange(size, self._get_nodes(peaks(size)) if size else [])

    def _get_nodes(self, nodes: list[NodeID]) -> list[bytes]:
        if not nodes:
            return []
        pos = [stored_hash_index(lv, i) for lv, i in nodes]
        uniq = sorted(set(pos))
        sql = f"SELECT pos, hash FROM node WHERE pos IN ({','.join('?' * len(uniq))})"
        with self._db_lock:
            rows = dict(self._con.execute(sql, uniq).fetchall())
        if len(rows) != len(uniq):
            missing = [p for p in uniq if p not in rows][:5]
            raise LedgerCorruptError(f"{self.path}: stored hashes missing at positions {missing}")
        return [rows[p] for p in pos]

    def _get_leaves(self, start: int, stop: int) -> list[bytes]:
        with self._db_lock:
            rows = self._con.execute(
                "SELECT idx, data FROM leaf WHERE idx >= ? AND idx < ? ORDER BY idx", (start, stop)
            ).fetchall()
        if len(rows) != stop - start or (rows and (rows[0][0] != start or rows[-1][0] != stop - 1)):
            raise LedgerCorruptError(f"{self.path}: leaves [{start}, {stop}) are not all present")
        return [r[1] for r in rows]

    def _cached_root(self, size: int) -> bytes | None:
        fr = self._frontier
        return fr.root() if fr.size == size else None

    def _check_stored_run(self, first_pos: int, expected: list[bytes]) -> None:
        with self._db_lock:
            rows = self._con.execute(
                "SELECT pos, hash FROM node WHERE pos >= ? AND pos < ? ORDER BY pos",
                (first_pos, first_pos + len(expected)),
            ).fetchall()
        if len(rows) != len(expected):
            raise LedgerCorruptError(f"{self.path}: stored hashes missing after position {first_pos}")
        for (pos, h), e in zip(rows, expected, strict=False):
            if h != e:
                raise LedgerCorruptError(f"{self.path}: stored hash at position {pos} does not match the leaves")

    # -- appends: group commit -------------------------------------------------------------------

    def _append_leaves(self, leaves: list[bytes]) -> int:
        if self.readonly:
            raise LedgerError(f"{self.path}: opened readonly")
        req = _Request(leaves)
        gc = self._gc
        with gc:
            self._pending.append(req)
            while self._leader and not req.done:
                gc.wait()
            if not req.done:
                self._leader = True
                group, self._pending = self._pending, []
        if not req.done:
            try:
                first = self._commit([leaf for r in group for leaf in r.leaves])
                for r in group:
                    r.first = first
                    first += len(r.leaves)
            except BaseException as e:  # every request of the failed group sees the failure
                for r in group:
                    r.error = e
            finally:
                with gc:
                    for r in group:
                        r.done = True
                    self._leader = False
                    gc.notify_all()
        if req.error is not None:
            raise req.error
        return req.first

    def _commit(self, leaves: list[bytes]) -> int:
        """One write transaction: read size and frontier under the write lock, insert, commit."""
        with self._db_lock:
            con = self._con
            con.execute("BEGIN IMMEDIATE")
            try:
                size = self._read_size()
                frontier = self._frontier if self._frontier.size == size else self._read_frontier(size)
                frontier = frontier.copy()
                hashes: list[bytes] = []
                frontier.extend(leaves, hashes)
                first_pos = stored_hash_count(size)
                con.executemany(
                    "INSERT INTO leaf (idx, data) VALUES (?, ?)",
                    zip(range(size, size + len(leaves)), leaves, strict=False),
                )
                con.executemany(
                    "INSERT INTO node (pos, hash) VALUES (?, ?)",
                    zip(range(first_pos, first_pos + len(hashes)), hashes, strict=False),
                )
                con.execute("COMMIT")
            except BaseException:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                raise
            self._frontier = frontier
            return size

    def close(self) -> None:
        with self._db_lock:
            self._con.close()


def _uri_path(path: str) -> str:
    from urllib.parse import quote

    return quote(os.path.abspath(path))


__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "MemoryLog", "MerkleLog", "SqliteLog"]
