"""The tables of a window's store, for both engines (spec/provider.md §6).

Everything a window writes while serving lives here: the ledger (``ledger_leaf``, ``ledger_node``, and the one-row
``ledger_tail`` that every write transaction locks first), the auditor's records (``opening``, ``checkpoint``,
``served``, ``zk_proof``; ``state_leaf``, the positions of the registry's leaves), the window's files
(``window_file``: its configuration, corpus, index and secrets, from which a replica on another host materialises
its directory) and the per-document spend (``budget_meta``, ``budget_spend``; written by
``accounting.stores.session.SessionBudgetStore``). The ledger tables are append-only: a trigger refuses UPDATE and
DELETE on both engines.

Versions: the schema is versioned (``schema_version``: one row per migration applied, with when and what). Opening a
store applies, in order and each in the opening's write transaction, every migration of ``MIGRATIONS`` the store has
not had yet, and refuses a store whose version is newer than this code's ``LATEST`` (a newer dprag migrated it: an
older one must not write to it). A store made before versioning (its tables are version 1's, it has no
``schema_version``) is recorded as version 1, then migrated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import NamedTuple

from dprag.errors import InvalidParameterError

from ...protocol.ledger.rfc6962 import HASH_SIZE
from .base import Session, sql_int

FORMAT = "dprag-service-store/1"

_TABLES = [
    "CREATE TABLE IF NOT EXISTS store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS ledger_tail (one INTEGER PRIMARY KEY CHECK (one = 1), size BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS ledger_leaf (idx BIGINT PRIMARY KEY, data {blob} NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS ledger_node (pos BIGINT PRIMARY KEY, hash {{blob}} NOT NULL "
    f"CHECK ({{length}}(hash) = {HASH_SIZE}))",
    "CREATE TABLE IF NOT EXISTS opening (pos BIGINT PRIMARY KEY, body {blob} NOT NULL)",
    "CREATE TABLE IF NOT EXISTS checkpoint (size BIGINT PRIMARY KEY, note {blob} NOT NULL)",
    "CREATE TABLE IF NOT EXISTS served (account TEXT NOT NULL, counter BIGINT NOT NULL, pos BIGINT NOT NULL UNIQUE, "
    "body {blob} NOT NULL, PRIMARY KEY (account, counter))",
    "CREATE TABLE IF NOT EXISTS zk_proof (pos BIGINT PRIMARY KEY, body {blob} NOT NULL)",
    # the positions of the log's state leaves (the registry's, spec/protocol.md §3.2): what a replica re-reads
    "CREATE TABLE IF NOT EXISTS state_leaf (pos BIGINT PRIMARY KEY, kind TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS window_file (path TEXT PRIMARY KEY, data {blob} NOT NULL)",
    "CREATE TABLE IF NOT EXISTS budget_meta (tenant TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, "
    "PRIMARY KEY (tenant, key))",
    "CREATE TABLE IF NOT EXISTS budget_spend (tenant TEXT NOT NULL, doc BIGINT NOT NULL, spent {blob} NOT NULL, "
    "PRIMARY KEY (tenant, doc))",
]

_SQLITE_GUARDS = [
    f"CREATE TRIGGER IF NOT EXISTS {t}_append_only_{op[0].lower()} BEFORE {op} ON {t} "
    "BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END"
    for t in ("ledger_leaf", "ledger_node")
    for op in ("UPDATE", "DELETE")
]

_PG_GUARDS = [
    "CREATE OR REPLACE FUNCTION dprag_append_only() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'ledger is append-only'; END $$",
    *(
        f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
        f"WHERE t.tgname = '{t}_append_only' AND c.relnamespace = current_schema()::regnamespace) THEN "
        f"CREATE TRIGGER {t}_append_only BEFORE UPDATE OR DELETE ON {t} "
        f"FOR EACH ROW EXECUTE FUNCTION dprag_append_only(); END IF; END $$"
        for t in ("ledger_leaf", "ledger_node")
    ),
]


def statements(dialect: str) -> list[str]:
    """The DDL of version 1, which creates (idempotently) every table of a store, in order."""
    if dialect == "sqlite":
        blob, length, guards = "BLOB", "length", _SQLITE_GUARDS
    else:
        blob, length, guards = "BYTEA", "octet_length", _PG_GUARDS
    return (
        [s.format(blob=blob, length=length) for s in _TABLES]
        + guards
        + [
            "INSERT INTO ledger_tail (one, size) VALUES (1, 0) ON CONFLICT (one) DO NOTHING",
            f"INSERT INTO store_meta (key, value) VALUES ('format', '{FORMAT}') ON CONFLICT (key) DO NOTHING",
        ]
    )


class Migration(NamedTuple):
    """One step of the schema: ``version`` (the step brings the store from ``version - 1`` to it), what it does in
    words, and its statements for a dialect (``"sqlite"`` or ``"postgresql"``)."""

    version: int
    description: str
    ddl: Callable[[str], list[str]]


#: the schema's migrations, in order: ``MIGRATIONS[i]`` brings a store from version ``i`` to ``i + 1``
MIGRATIONS: tuple[Migration, ...] = (Migration(1, "the window's tables (dprag-service-store/1)", statements),)
#: the version this code writes and reads
LATEST = len(MIGRATIONS)

_VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, description TEXT NOT NULL, "
    "applied_at TEXT NOT NULL)"
)


def _has_table(s: Session, name: str) -> bool:
    if s.dialect == "sqlite":
        return bool(s.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))
    return bool(
        s.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ?", (name,)
        )
    )


def schema_version(s: Session) -> int | None:
    """The store's schema version (``None``: no dprag store; 1: one made before versioning)."""
    if _has_table(s, "schema_version"):
        row = s.one("SELECT MAX(version) FROM schema_version")
        if row is not None and row[0] is not None:
            return sql_int(row[0])
    if _has_table(s, "store_meta"):
        row = s.one("SELECT value FROM store_meta WHERE key = 'format'")
        return 1 if row is not None and row[0] == FORMAT else None
    return None


def migrate(s: Session, *, create: bool, migrations: Sequence[Migration] | None = None) -> tuple[int, int]:
    """Bring the store of write transaction ``s`` to the last of ``migrations`` (default: ``MIGRATIONS``; see module
    docstring); ``create``: a new store (version 0). Returns the versions (before, after). A store that is no dprag
    store, or whose version is newer than the last of ``migrations``, is refused (``InvalidParameterError`` naming
    ``store``) before any write."""
    if migrations is None:
        migrations = MIGRATIONS
    latest = len(migrations)
    if [m.version for m in migrations] != list(range(1, latest + 1)):
        raise InvalidParameterError(
            "migrations", "must be numbered 1, 2, ... in order", [m.version for m in migrations]
        )
    found = schema_version(s)
    if found is None and not create:
        raise InvalidParameterError("store", f"is not a dprag service store ({FORMAT})")
    before = found or 0
    if before > latest:
        raise InvalidParameterError(
            "store",
            f"its schema is version {before}, newer than this dprag's ({latest}): a newer dprag migrated it; "
            "run that version (or newer), never an older one, on this store",
        )
    if before == latest and _has_table(s, "schema_version"):
        return before, before
    s.execute(_VERSION_TABLE)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    if found is not None and not s.execute("SELECT 1 FROM schema_version"):  # made before versioning
        s.execute(
            "INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
            (1, migrations[0].description + " (found)", now),
        )
    for m in migrations[before:]:
        for stmt in m.ddl(s.dialect):
            s.execute(stmt)
        s.execute(
            "INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
            (m.version, m.description, now),
        )
    return before, latest
