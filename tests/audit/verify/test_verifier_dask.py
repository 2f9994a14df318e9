"""The verifier on Dask (spec/protocol.md §8 item 13, issue 41 item 3): the replay's maps and the coalition scan on a
LocalCluster give the verdict the local run gives — honest, tampered and coalition-FAIL windows — and the scan in
bands of rows gives the labels of one pass."""

from __future__ import annotations

import random

import numpy as np
import pytest

from dprag.audit.testing import forge as fg
from dprag.audit.verify import pool, scan, verify
from dprag.audit.verify.state import StateError

pytestmark = pytest.mark.integration  # starts a Dask LocalCluster (worker processes)
distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
    ) as c:
        yield c.scheduler_address


def _json(v) -> dict:
    out = v.to_json()
    out.pop("seconds")
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return fg.base_window(tmp_path_factory.mktemp("dask") / "base", "murag")


@pytest.mark.parametrize("kind", ["identity", "charge_units", "top_swap", "qemb_flip", "refusal_fork"])
def test_the_verdict_on_a_local_cluster_is_the_local_verdict(cluster, base, kind, tmp_path, monkeypatch):
    bundle, receipts = fg.forge(base, kind, random.Random(7), tmp_path / "case")
    monkeypatch.setattr(scan, "BAND_ROWS", 3)  # several bands even on a toy window
    local = verify(bundle, receipts=receipts)
    before = dict(pool.DASK_STATS)
    on_dask = verify(bundle, receipts=receipts, dask=cluster)
    assert _json(on_dask) == _json(local)
    assert pool.DASK_STATS["maps"] >= before["maps"] + 3  # canonical, receipts, requests, retrieval ran there
    assert pool.DASK_STATS["fallbacks"] == before["fallbacks"]
    assert local.verdict == ("PASS" if kind == "identity" else "FAIL")


def test_a_coalition_fail_is_the_same_on_dask(cluster, base, monkeypatch):
    """An auditor's low θ links the queries of every account: ĉ > k_max alike, whole log or a window."""
    monkeypatch.setattr(scan, "BAND_ROWS", 4)
    for window in (None, 4):
        local = verify(base.bundle, theta=0.05, coalition_window=window)
        on_dask = verify(base.bundle, theta=0.05, coalition_window=window, dask=cluster)
        assert _json(on_dask) == _json(local)
        assert local.checked["coalition_estimate"] >= 3, local.checked


@pytest.mark.parametrize("seed", range(6))
def test_the_scan_in_bands_gives_the_labels_of_one_pass(cluster, seed, monkeypatch):
    from tests.audit.verify.test_incremental import _rows

    rng = np.random.default_rng(100 + seed)
    n, d = int(rng.integers(40, 200)), int(rng.integers(3, 10))
    rows, codes = _rows(rng, n, d), rng.integers(0, 6, size=n).astype(np.int64)
    pos = np.cumsum(rng.integers(1, 3, size=n)).astype(np.int64)
    monkeypatch.setattr(scan, "BAND_ROWS", int(rng.integers(3, 30)))
    with distributed.Client(cluster) as client:
        for window, start in ((None, 0), (int(rng.integers(3, 50)), int(rng.integers(1, n)))):
            labels0, _ = scan.extend_components(rows[:start], codes[:start], 6, 0.95, window, pos[:start], 0, None)
            want = scan.extend_components(rows, codes, 6, 0.95, window, pos, start, labels0 if start else None)
            got = scan.extend_components(rows, codes, 6, 0.95, window, pos, start, labels0, client)
            assert np.array_equal(got[0], want[0]) and got[1] == want[1]


def test_an_unreachable_scheduler_is_the_auditors_exit_2(base):
    with pytest.raises(StateError.__mro__[1], match="--scheduler"):
        verify(base.bundle, dask="tcp://127.0.0.1:9")


def test_the_cli_runs_on_a_local_cluster_of_its_own(base, capsys):
    """`dprag audit verify --workers 2` starts (and stops) its own LocalCluster: the same verdict JSON; a scheduler
    that cannot be reached is one line on stderr and exit 2."""
    import json

    from dprag.audit.cli import main

    args = ["audit", "verify", str(base.bundle), "--max-epsilon", "50", "--json"]
    assert main(args) == 0
    local = json.loads(capsys.readouterr().out)
    assert main([*args, "--workers", "2"]) == 0
    on_dask = json.loads(capsys.readouterr().out)
    local.pop("seconds"), on_dask.pop("seconds")
    assert on_dask == local
    assert main([*args, "--scheduler", "tcp://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--scheduler" in err[0], err


def test_a_dask_map_reads_its_items_a_few_chunks_ahead(cluster, monkeypatch):
    """The maps stream on Dask as in the local pool: a chunk is read from its (lazy) items only when one before it
    has come back, and results come back in order, every item read once. Submitting every chunk up front (the old
    map) read all 200,000 items before the first chunk's failure was seen; here at most 16 chunks of 2,048, or 200
    items when the caller asks for chunks of 1."""
    import time

    monkeypatch.setenv("DPRAG_VERIFY_WORKERS", "1")  # the fallback after a failure: this process, serial=None
    reads = [0]

    def make(k: int) -> int:
        reads[0] += 1
        return k

    def square(x: int) -> int:
        return x * x

    with pool.dask_engine(cluster, None):
        got = pool.fork_map(square, pool.Lazy(20_000, make))
        assert got == [k * k for k in range(20_000)] and reads[0] == 20_000

        def fails_first(x: int) -> int:
            if x == 0:
                raise ValueError("the first chunk fails at once")
            time.sleep(1e-5)  # every other chunk takes ~20 ms
            return x

        reads[0] = 0
        before = pool.DASK_STATS["fallbacks"]
        assert pool.fork_map(fails_first, pool.Lazy(200_000, make), serial=None) is None
        assert pool.DASK_STATS["fallbacks"] == before + 1
        assert reads[0] <= 16 * pool.DASK_CHUNK_MAX, reads[0]

        reads[0] = 0  # a caller's own chunk size holds there too (retrieval jobs: 1 job, ~256 queries, a task)
        assert pool.fork_map(fails_first, pool.Lazy(200_000, make), serial=None, chunk=1) is None
        assert reads[0] <= 200, reads[0]
