"""The tables of a window's store, for both engines (spec/provider.md §6).

Everything a window writes while serving lives here: the ledger (``ledger_leaf``, ``ledger_node``, and the one-row
``ledger_tail`` that every write transaction locks first), the auditor's records (``opening``, ``checkpoint``,
``served``, ``zk_proof``; ``state_leaf``, the positions of the registry's leaves), the window's files
(``window_file``: its configuration, corpus, index and secrets, from which a replica on another host materialises
its directory) and the per-document spend (``budget_meta``, ``budget_spend``; written by
``accounting.stores.session.SessionBudgetStore``). The ledger tables are append-only: a trigger refuses UPDATE and
DELETE on both engines.
"""

from __future__ import annotations

from ...protocol.ledger.rfc6962 import HASH_SIZE

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
    """The DDL that creates (idempotently) every table of a store, in order."""
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
