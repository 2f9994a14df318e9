"""The Monte Carlo runner (lab/leakage/montecarlo.py): the same seed gives the same result in this process,
in local processes, with any chunking, and on a Dask cluster (distributed.LocalCluster)."""

from __future__ import annotations

import numpy as np
import pytest

from dprag.errors import InvalidParameterError
from dprag.lab.leakage.montecarlo import run_cells
from dprag.lab.leakage.scalar import ScalarCell, scalar_trials
from dprag.lab.leakage.topk import TopKCell, topk_trials

pytestmark = pytest.mark.integration  # starts servers or processes (CONTRIBUTING.md)

CELLS = [ScalarCell(k, 20, 2.0, 1e-6, 10.0, rhos=(0.5,)) for k in (1, 3)]


def test_local_chunking_and_processes_do_not_change_results():
    a = run_cells(scalar_trials, CELLS, 23, b"s", workers=1, chunk=23)
    b = run_cells(scalar_trials, CELLS, 23, b"s", workers=1, chunk=4)
    c = run_cells(scalar_trials, CELLS, 23, b"s", workers=2, chunk=5)
    for x, y, z in zip(a, b, c, strict=False):
        assert x.shape == (23, 4)
        assert np.array_equal(x, y) and np.array_equal(x, z)
    d = run_cells(scalar_trials, CELLS, 23, b"t", workers=1)
    assert not np.array_equal(a[0], d[0])


def test_dask_local_cluster_equals_local():
    distributed = pytest.importorskip("distributed")
    topk = [TopKCell(1, 3, 4.0, 1e-6, 2000.0, n_background=10, K=2)]
    want_s = run_cells(scalar_trials, CELLS, 12, b"s", workers=1)
    want_t = run_cells(topk_trials, topk, 6, b"s", workers=1)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cl:
        ticks = []
        got_s = run_cells(
            scalar_trials, CELLS, 12, b"s", scheduler=cl.scheduler_address, chunk=5, progress=ticks.append
        )
        with distributed.Client(cl) as client:
            got_t = run_cells(topk_trials, topk, 6, b"s", scheduler=client, chunk=2)
    assert sum(ticks) == 24
    for x, y in zip(want_s + want_t, got_s + got_t, strict=False):
        assert np.array_equal(x, y)


def test_bad_input():
    with pytest.raises(InvalidParameterError, match="cells"):
        run_cells(scalar_trials, [CELLS[0], CELLS[0]], 3, b"s", workers=1)
    with pytest.raises(InvalidParameterError, match="trials"):
        run_cells(scalar_trials, CELLS, 0, b"s", workers=1)
    with pytest.raises(InvalidParameterError, match="seed"):
        run_cells(scalar_trials, CELLS, 3, "s", workers=1)
