"""A history served by a replica on another host (spec/provider.md §6, protocol §3.1): the successor window's
replica started from the database URL alone has no path to the predecessor's directory, yet its bundle must nest
the whole history under ``previous/``. What an adversary or a mistake would try: a predecessor directory gone from
this host, a link planted where the predecessor is materialised, a SQLite predecessor no replica elsewhere can
reach, and credentials that must reach only the database they came from."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from dprag.audit.protocol.errors import ServiceStateError
from dprag.audit.provider.service import ProviderService
from dprag.audit.provider.storage import materialize
from dprag.audit.provider.storage.postgres import parse_url, url_with_credentials
from dprag.audit.testing.toy import SERVE_TOY, HashEmbedder, ToyGenerator, make_toy_directory, toy_policy
from dprag.audit.verify import verify
from tests.support.load import toy_clients

pytestmark = pytest.mark.integration  # starts servers or processes (CONTRIBUTING.md)


def _two_windows(root: Path, store: str | None, successor_store: str | None = None):
    """Window toy-1 (2 requests per account), closed into toy-2 (1 more each); returns the clients and toy-2."""
    w1 = make_toy_directory(root / "host1", store=store, accounts=2, n=10)
    clients = toy_clients(root / "host1")
    for i in range(2):
        for c in clients:
            c.ask(w1, f"asthma inhaler protocol {c.account} {i}")
    w2 = w1.next_window(
        root / "host1" / "w2", policy=toy_policy(**{**SERVE_TOY, "window": "toy-2", "n": 10}), store=successor_store
    )
    w1.close()
    for c in clients:
        c.next_window("toy-2", w2.signer.vkey())
        c.ask(w2, f"inhaler drug protocol {c.account}")
    return clients, w2


def _on_host2(tmp_path: Path, w2) -> tuple[Path, str]:
    """Host 2: the successor's directory materialised from its database URL alone; the first host's directories
    moved away (``previous_dir`` names a path that is gone)."""
    url2 = w2.store.describe()["url"]
    w2.close()
    host2 = materialize(url2, tmp_path / "host2" / "w2")
    shutil.move(tmp_path / "host1", tmp_path / "elsewhere")
    return host2, url2


def _open(d: Path, url: str | None) -> ProviderService:
    return ProviderService(d, embedder=HashEmbedder(32), generator=ToyGenerator(), store=url)


def _receipts(path: Path, clients) -> Path:
    path.write_bytes(b"".join(json.dumps(e).encode() + b"\n" for c in clients for e in c.receipts))
    return path


def test_a_replica_on_another_host_exports_the_whole_history_from_the_database(tmp_path, pg_url):
    clients, w2 = _two_windows(tmp_path, pg_url)
    host2, url2 = _on_host2(tmp_path, w2)
    svc = _open(host2, url2)
    try:
        bundle = svc.export_bundle(tmp_path / "bundle")
        assert (bundle / "previous" / "public" / "genesis.json").is_file()
        prev = host2 / "state" / "previous"
        assert stat.S_IMODE(os.stat(prev / "secret" / "seed.hex").st_mode) == 0o600
        again = svc.export_bundle(tmp_path / "bundle-2")  # the materialised predecessor is reused
        assert (again / "previous" / "public" / "leaves.bin").read_bytes() == (
            bundle / "previous" / "public" / "leaves.bin"
        ).read_bytes()
    finally:
        svc.close()
    v = verify(bundle, receipts=_receipts(tmp_path / "receipts.jsonl", clients))
    assert v.verdict == "PASS", v.reasons
    assert v.checked["receipts_accepted"] == 6  # 2 accounts x (2 in toy-1 + 1 in toy-2), over both windows


def test_a_link_planted_where_the_predecessor_is_materialised_is_refused(tmp_path, pg_url):
    clients, w2 = _two_windows(tmp_path, pg_url)
    host2, url2 = _on_host2(tmp_path, w2)
    decoy = make_toy_directory(tmp_path / "decoy", accounts=2, n=10)  # another window named toy-1 would pass a
    decoy.close()  # name check, but a link is never followed
    (host2 / "state" / "previous").symlink_to(tmp_path / "decoy" / "service")
    svc = _open(host2, url2)
    try:
        with pytest.raises(ServiceStateError, match="link"):
            svc.export_bundle(tmp_path / "bundle")
    finally:
        svc.close()


def test_a_sqlite_predecessor_not_on_this_host_is_named_not_guessed(tmp_path, pg_url):
    clients, w2 = _two_windows(tmp_path, None, successor_store=pg_url)
    host2, url2 = _on_host2(tmp_path, w2)
    svc = _open(host2, url2)
    try:
        with pytest.raises(ServiceStateError, match="toy-1 is not on this host"):
            svc.export_bundle(tmp_path / "bundle")
    finally:
        svc.close()


def test_credentials_go_only_to_the_database_they_came_from():
    mine = parse_url("postgresql://prov:s3cr%40t@db.example:5433/dprag?schema=w_two")
    same = "postgresql://prov@db.example:5433/dprag?schema=w_one"
    got = parse_url(url_with_credentials(same, mine))
    assert got["password"] == "s3cr@t" and got["schema"] == "w_one" and got["host"] == "db.example"
    for other in (
        "postgresql://prov@evil.example:5433/dprag?schema=w_one",
        "postgresql://prov@db.example:5432/dprag?schema=w_one",
        "postgresql://prov@db.example:5433/other?schema=w_one",
        "postgresql://admin@db.example:5433/dprag?schema=w_one",
    ):
        assert url_with_credentials(other, mine) == other
    nopw = {**mine, "password": None}
    assert url_with_credentials(same, nopw) == same
