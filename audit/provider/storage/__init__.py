"""Where a window keeps what serving writes: one database, one transaction per request (spec/provider.md §6).

``create_store(directory, store)`` makes the store of a new service directory and records how to reopen it in
``config/store.json``; ``open_store(directory, store=None)`` reopens it. ``store`` is ``None`` (the embedded SQLite
file ``state/service.sqlite``) or a ``postgresql://`` URL (``postgres.py``; the window gets a schema of its own,
named by ``?schema=`` or derived from the window id and a random suffix).
"""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

from dprag.errors import InvalidParameterError

from ...protocol.encoding import loads_bounded
from .base import ServiceStore, Session, sql_bytes, sql_int
from .ledger import StoreLog
from .records import Records

__all__ = [
    "Records",
    "ServiceStore",
    "Session",
    "StoreLog",
    "create_store",
    "materialize",
    "open_store",
    "publish_files",
    "sql_bytes",
    "sql_int",
]

#: what a window's directory holds that serving reads (written once, at create; ``state/`` is the store itself)
WINDOW_FILES = ("config", "docs", "index", "secret")


def _sqlite_path(d: Path) -> Path:
    return d / "state" / "service.sqlite"


def create_store(directory: Path, store: str | None, *, window: str) -> ServiceStore:
    """The store of a new window (see module docstring); writes ``config/store.json``."""
    from ..atomic_files import write_atomically

    d = Path(directory)
    if store is None or store == "sqlite":
        s: ServiceStore = _sqlite(d, create=True)
    elif isinstance(store, str) and store.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresServiceStore, parse_url

        params = parse_url(store)
        if params["schema"] is None:
            base = re.sub(r"[^a-z0-9_]", "_", window.lower())[:40].strip("_") or "window"
            store += ("&" if "?" in store else "?") + f"schema=w_{base}_{secrets.token_hex(4)}"
        s = PostgresServiceStore(store, create=True)
        if s.records_exist():
            s.close()
            raise InvalidParameterError("store", "schema already holds a window's ledger; name another ?schema=")
    else:
        raise InvalidParameterError("store", "must be None (SQLite in the directory) or a postgresql:// URL", store)
    write_atomically(d / "config" / "store.json", json.dumps(s.describe(), sort_keys=True).encode())
    return s


def open_store(directory: Path, store: str | None = None) -> ServiceStore:
    """Reopen a window's store. ``store``: the PostgreSQL URL with credentials, if ``config/store.json`` names one
    and the password is not in ``PGPASSWORD`` (its host, database and schema must match what was recorded)."""
    d = Path(directory)
    path = d / "config" / "store.json"
    desc = loads_bounded(path.read_bytes(), what=str(path)) if path.is_file() else {"kind": "sqlite"}
    if desc.get("kind") == "sqlite":
        if store not in (None, "sqlite"):
            raise InvalidParameterError("store", "this window's store is its SQLite file, not a URL", store)
        return _sqlite(d, create=False)
    if desc.get("kind") != "postgresql":
        raise InvalidParameterError("config/store.json", "kind must be sqlite or postgresql", desc.get("kind"))
    from .postgres import PostgresServiceStore, parse_url, public_url

    url = store or desc["url"]
    given = parse_url(url)
    if given["schema"] is None:  # credentials only: the window's own schema
        url += ("&" if "?" in url else "?") + f"schema={parse_url(desc['url'])['schema']}"
        given = parse_url(url)
    if public_url(given) != desc["url"]:
        raise InvalidParameterError("store", f"names another database or schema than this window's ({desc['url']})")
    return PostgresServiceStore(url)


def _sqlite(d: Path, *, create: bool) -> ServiceStore:
    from .sqlite import SqliteServiceStore

    (d / "state").mkdir(parents=True, exist_ok=True)
    return SqliteServiceStore(_sqlite_path(d), create=create)


def publish_files(store: ServiceStore, directory: Path) -> int:
    """Copy the window's files (``WINDOW_FILES``) into the store, so a replica that shares only the database URL can
    materialise its directory (``materialize``). They are provider-private, as the directory is: the database is in
    the provider's trust domain (spec/provider.md §6). Returns the number of files."""
    d = Path(directory)
    rows = []
    for sub in WINDOW_FILES:
        for p in sorted((d / sub).rglob("*")):
            if p.is_file() and not p.is_symlink() and p.relative_to(d) != Path("config/store.json"):
                rows.append((str(p.relative_to(d)), p.read_bytes()))
    with store.write() as s:
        s.executemany(
            "INSERT INTO window_file (path, data) VALUES (?, ?) ON CONFLICT (path) DO UPDATE SET data = excluded.data",
            rows,
        )
    return len(rows)


def materialize(store_url: str, directory: Path) -> Path:
    """Write the window's directory at ``directory`` (new or empty) from the PostgreSQL store at ``store_url`` (which
    must name the window's schema): a replica on another host. Secrets are written 0600, the directory 0700."""
    import os

    from .postgres import PostgresServiceStore, parse_url, public_url

    d = Path(directory)
    if d.exists() and any(d.iterdir()):
        raise InvalidParameterError("dir", "must be new or empty to materialise a replica's directory", str(d))
    if parse_url(store_url)["schema"] is None:
        raise InvalidParameterError("store", "must name the window's schema (?schema=NAME) to start a replica")
    store = PostgresServiceStore(store_url)
    try:
        with store.snapshot() as s:
            rows = s.execute("SELECT path, data FROM window_file ORDER BY path")
    finally:
        store.close()
    if not rows:
        raise InvalidParameterError("store", "holds no window files (made by an older dprag, or not a window)")
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    for path, data in rows:
        parts = Path(str(path)).parts
        if not isinstance(path, str) or Path(path).is_absolute() or ".." in parts or parts[0] not in WINDOW_FILES:
            raise InvalidParameterError("store", "holds a window file outside the window's folders", path)
        target = d / path
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if parts[0] == "secret" else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(sql_bytes(data))
    desc = {"kind": "postgresql", "url": public_url(parse_url(store_url))}
    (d / "config" / "store.json").write_text(json.dumps(desc, sort_keys=True))
    (d / "state").mkdir(exist_ok=True, mode=0o700)
    return d
