"""Monte Carlo runner: trials of many cells, in local processes by default or on a Dask cluster.

The unit of work is a *chunk* (cell, trials [start, stop)); a trial function ``fn(cell, seed, start, stop)``
returns an array of shape (stop − start, ...) whose row t depends only on (seed, ``cell.key``, start + t): every
trial seeds its own random stream ``trial_source(seed, cell.key, t)`` (SHAKE-256, ``RandomSource.from_seed``),
never anything tied to a worker, a process or the chunking. Hence the concatenated result of a cell is the same
for any chunk size, any number of local processes and any Dask cluster (tests/lab/test_leakage_montecarlo.py).

Engines (existing ones, no home-made pool): ``concurrent.futures.ProcessPoolExecutor`` for ``workers > 1``,
the calling process for ``workers <= 1``, and ``dask.distributed.Client`` when ``scheduler`` is given (an
address such as "tcp://10.0.0.5:8786", or a Client). Progress: ``progress(n_trials_done)`` after each chunk.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dprag.accounting.errors import check_positive_int
from dprag.accounting.noise.source import RandomSource
from dprag.errors import InvalidParameterError

LABEL = b"dprag/leakage/v1\x00"


def trial_label(cell_key: str, trial: int, stream: str = "") -> bytes:
    """The label of trial ``trial`` of cell ``cell_key`` (and an optional sub-stream name)."""
    if not isinstance(cell_key, str) or not cell_key:
        raise InvalidParameterError("cell.key", "must be a non-empty string", cell_key)
    return LABEL + cell_key.encode() + b"\x00" + int(trial).to_bytes(8, "big") + b"\x00" + stream.encode()


def trial_source(seed: bytes, cell_key: str, trial: int, stream: str = "") -> RandomSource:
    """The random stream of one trial: RandomSource.from_seed(seed, trial_label(cell_key, trial, stream))."""
    return RandomSource.from_seed(bytes(seed), trial_label(cell_key, trial, stream))


def trial_rng(seed: bytes, cell_key: str, trial: int, stream: str) -> np.random.Generator:
    """A numpy Generator for a trial's non-private randomness (geometry), seeded from 32 bytes of its stream."""
    return np.random.default_rng(int.from_bytes(trial_source(seed, cell_key, trial, stream).bytes(32), "little"))


def _chunks(n_cells: int, trials: int, chunk: int) -> list[tuple[int, int, int]]:
    return [(c, s, min(s + chunk, trials)) for c in range(n_cells) for s in range(0, trials, chunk)]


def _run_chunk(fn, cell, seed, start, stop):
    out = np.asarray(fn(cell, seed, start, stop))
    if out.shape[0] != stop - start:
        raise RuntimeError(f"trial function returned {out.shape[0]} rows for {stop - start} trials")
    return out


def run_cells(
    fn: Callable[[Any, bytes, int, int], np.ndarray],
    cells: Sequence[Any],
    trials: int,
    seed: bytes,
    *,
    scheduler=None,
    workers: int | None = None,
    chunk: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[np.ndarray]:
    """Run ``trials`` trials of every cell; returns one array per cell (rows in trial order).

    ``fn`` must be picklable (a module-level function) for processes and Dask; cells carry a ``key`` (str).
    ``workers``: local processes (default: os.cpu_count(); 1 = in this process). ``chunk``: trials per task
    (default: about 4 tasks per worker per cell, at most 500).
    """
    trials = check_positive_int("trials", trials)
    if not isinstance(seed, (bytes, bytearray)):
        raise InvalidParameterError("seed", "must be bytes", type(seed).__name__)
    keys = [getattr(c, "key", None) for c in cells]
    if len(set(keys)) != len(keys) or not all(isinstance(k, str) and k for k in keys):
        raise InvalidParameterError("cells", "every cell needs a distinct non-empty string key")
    if workers is None:
        workers = os.cpu_count() or 1
    workers = max(1, int(workers))
    if chunk is None:
        chunk = max(1, min(500, -(-trials // (4 * workers))))
    chunk = check_positive_int("chunk", chunk)
    tasks = _chunks(len(cells), trials, chunk)
    parts: dict[tuple[int, int], np.ndarray] = {}
    tick = progress or (lambda n: None)
    if scheduler is not None:
        from distributed import Client, as_completed

        client = scheduler if isinstance(scheduler, Client) else Client(scheduler, timeout="30s")
        try:
            futs = {
                client.submit(_run_chunk, fn, cells[c], bytes(seed), s, e, pure=False): (c, s, e) for c, s, e in tasks
            }
            for fut in as_completed(futs):
                c, s, e = futs[fut]
                parts[(c, s)] = fut.result()
                tick(e - s)
        finally:
            if client is not scheduler:
                client.close()
    elif workers == 1:
        for c, s, e in tasks:
            parts[(c, s)] = _run_chunk(fn, cells[c], bytes(seed), s, e)
            tick(e - s)
    else:
        with cf.ProcessPoolExecutor(max_workers=workers) as ex:
            futs = {ex.submit(_run_chunk, fn, cells[c], bytes(seed), s, e): (c, s, e) for c, s, e in tasks}
            for fut in cf.as_completed(futs):
                c, s, e = futs[fut]
                parts[(c, s)] = fut.result()
                tick(e - s)
    return [np.concatenate([parts[(c, s)] for s in range(0, trials, chunk)]) for c in range(len(cells))]
