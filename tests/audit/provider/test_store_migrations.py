"""The store's versioned schema (audit/provider/storage/schema.py), on SQLite and on a real PostgreSQL server: a new
store records every migration; a store made before versioning is taken as version 1; migrations run in order, each
once, in one transaction (a failing one leaves the store as it was); a store migrated by a newer dprag is refused with
a one-line error naming its version and ours, before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprag.audit.provider.storage import create_store, open_store
from dprag.audit.provider.storage import schema as sch
from dprag.errors import InvalidParameterError


def _fresh(tmp_path: Path, url: str | None, name: str = "w"):
    d = tmp_path / name
    (d / "config").mkdir(parents=True)
    return d, create_store(d, url, window=name)


def _versions(store) -> list[int]:
    with store.snapshot() as s:
        return [int(r[0]) for r in s.execute("SELECT version FROM schema_version ORDER BY version")]


def _tables(store) -> set[str]:
    with store.snapshot() as s:
        if store.dialect == "sqlite":
            rows = s.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        else:
            rows = s.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")
    return {str(r[0]) for r in rows}


def test_a_new_store_records_every_migration(tmp_path, store_url):
    d, store = _fresh(tmp_path, store_url)
    assert store.schema_version == sch.LATEST and store.migrated == (0, sch.LATEST)
    assert _versions(store) == list(range(1, sch.LATEST + 1))
    store.close()
    again = open_store(d, store_url)
    assert again.migrated == (sch.LATEST, sch.LATEST) and _versions(again) == list(range(1, sch.LATEST + 1))
    again.close()


def test_a_store_made_before_versioning_is_version_one(tmp_path, store_url):
    """What an older dprag made: version 1's tables and no ``schema_version``; reopening records version 1 (found),
    keeps every row, and applies what follows."""
    d, store = _fresh(tmp_path, store_url)
    with store.write() as s:
        s.execute("INSERT INTO window_file (path, data) VALUES (?, ?)", ("config/x", b"kept"))
        s.execute("DROP TABLE schema_version")
    assert "schema_version" not in _tables(store)
    store.close()
    again = open_store(d, store_url)
    assert again.migrated == (1, sch.LATEST) and _versions(again) == list(range(1, sch.LATEST + 1))
    with again.snapshot() as s:
        assert s.one("SELECT description FROM schema_version WHERE version = 1")[0].endswith("(found)")
        assert bytes(s.one("SELECT data FROM window_file WHERE path = 'config/x'")[0]) == b"kept"
    again.close()


def _steps():
    """Two extra migrations where the second needs the first (run out of order, it fails)."""
    v2 = sch.Migration(2, "a table", lambda dialect: ["CREATE TABLE extra_v2 (k TEXT PRIMARY KEY)"])
    v3 = sch.Migration(3, "a column of that table", lambda dialect: ["ALTER TABLE extra_v2 ADD COLUMN v TEXT"])
    return (*sch.MIGRATIONS, v2, v3)


def test_migrations_run_in_order_and_once(tmp_path, store_url, monkeypatch):
    d, store = _fresh(tmp_path, store_url)
    store.close()
    monkeypatch.setattr(sch, "MIGRATIONS", _steps())
    monkeypatch.setattr(sch, "LATEST", 3)  # what a newer dprag ships
    first = open_store(d, store_url)
    assert first.migrated == (1, 3) and _versions(first) == [1, 2, 3]
    with first.write() as s:
        s.execute("INSERT INTO extra_v2 (k, v) VALUES ('a', 'b')")
    first.close()
    second = open_store(d, store_url)  # nothing left to apply: ALTER TABLE again would fail
    assert second.migrated == (3, 3) and _versions(second) == [1, 2, 3]
    second.close()


def test_a_failing_migration_leaves_the_store_as_it_was(tmp_path, store_url, monkeypatch):
    d, store = _fresh(tmp_path, store_url)
    store.close()
    v2, _ = _steps()[-2:]
    broken = sch.Migration(3, "a statement the engine refuses", lambda dialect: ["ALTER TABLE no_such_table ADD x"])
    monkeypatch.setattr(sch, "MIGRATIONS", (*sch.MIGRATIONS, v2, broken))
    with pytest.raises(Exception):  # noqa: B017 - the engine's own error (a driver error): what matters is below
        open_store(d, store_url)
    monkeypatch.undo()
    back = open_store(d, store_url)
    assert _versions(back) == [1] and "extra_v2" not in _tables(back)  # v2 rolled back with v3
    back.close()


def test_a_store_newer_than_this_dprag_is_refused_before_any_write(tmp_path, store_url):
    d, store = _fresh(tmp_path, store_url)
    with store.write() as s:
        s.execute(
            "INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
            (sch.LATEST + 1, "from a newer dprag", "2030-01-01T00:00:00+00:00"),
        )
    store.close()
    with pytest.raises(InvalidParameterError) as e:
        open_store(d, store_url)
    assert e.value.field == "store"
    msg = str(e.value)
    assert f"version {sch.LATEST + 1}, newer than this dprag's ({sch.LATEST})" in msg and "\n" not in msg, msg
    with pytest.raises(InvalidParameterError):  # refused again: nothing was changed by the refusal
        open_store(d, store_url)


def test_migrations_must_be_numbered_in_order(tmp_path):
    d, store = _fresh(tmp_path, None)
    v2, v3 = _steps()[-2:]
    with pytest.raises(InvalidParameterError) as e, store.write() as s:
        sch.migrate(s, create=False, migrations=(*sch.MIGRATIONS, v3, v2))
    assert e.value.field == "migrations"
    assert _versions(store) == [1]
    store.close()
