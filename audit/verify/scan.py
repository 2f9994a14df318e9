"""The coalition scan extended and spread (spec/estimator.md §9; spec/protocol.md §8 items 13-14): the exact link
search of ``estimator.stream_components`` continued from an auditor's state (only the pairs with a new row), and
run in bands of rows on a Dask cluster. Both give the labels of one pass over all rows."""

from __future__ import annotations

from typing import Any

import numpy as np

from dprag.accounting.errors import check_positive_int

from .estimator import check_positions, check_theta, max_accounts, merge_components, stream_components
from .sketch import sketch_rows, worth_it


def extend_components(
    raw: np.ndarray,
    codes: np.ndarray,
    n_acc: int,
    theta: float,
    window: int | None,
    pos: np.ndarray,
    start: int,
    labels0: np.ndarray | None,
    client: Any = None,
) -> tuple[np.ndarray, int]:
    """The component labels and ĉ of all rows, given ``labels0``, those of rows ``[0, start)`` from an earlier
    call (the auditor's state, spec/protocol.md §8.14): only pairs with a row from ``start`` on are compared, and
    the result equals one call over all rows. ``window`` None: every pair (the whole log). ``client``: a Dask
    ``distributed.Client`` that scans bands of rows on its workers (the same labels)."""
    theta = check_theta(theta)
    pos = check_positions(pos, raw.shape[0])
    if raw.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), 0
    w = max(1, int(pos[-1] - pos[0])) if window is None else check_positive_int("window", window)
    prior = None if labels0 is None else [labels0]
    n_acc = max(n_acc, 2)
    sketch = sketch_rows(raw) if worth_it(raw.shape[1]) else False  # once for every band (spec/estimator.md §10)
    if client is None:
        labels, _ = stream_components(
            raw, codes, n_acc, np.asarray([theta]), w, pos, saturate=False, start=start, labels0=prior, sketch=sketch
        )
        lab = labels[0]
    else:
        lab = _bands_on_dask(client, raw, codes, n_acc, theta, w, pos, start, labels0, sketch)
    return lab, max(1, max_accounts(lab, codes, n_acc))


#: rows per band of the distributed scan (each band: its rows against every later row in the window)
BAND_ROWS = 4096


def _band_forest(
    raw: np.ndarray,
    codes: np.ndarray,
    pos: np.ndarray,
    n_acc: int,
    theta: float,
    w: int,
    start: int,
    band: tuple[int, int],
    sketch: np.ndarray | bool = False,
) -> np.ndarray:
    """One band of ``_bands_on_dask`` (on a worker): the links of the pairs whose first row is in ``band`` (and
    second from ``start`` on), as a spanning forest — (row, the smallest row of its component) for every row the
    band joined to a smaller one: at most one edge per row, however dense the links."""
    labels, _ = stream_components(
        raw, codes, n_acc, np.asarray([theta]), w, pos, saturate=False, start=start, band=band, sketch=sketch
    )
    lab = labels[0]
    moved = np.flatnonzero(lab != np.arange(lab.size))
    return np.stack([moved, lab[moved]], axis=1)


def _bands_on_dask(
    client: Any,
    raw: np.ndarray,
    codes: np.ndarray,
    n_acc: int,
    theta: float,
    w: int,
    pos: np.ndarray,
    start: int,
    labels0: np.ndarray | None,
    sketch: np.ndarray | bool = False,
) -> np.ndarray:
    """The exact scan of ``stream_components`` spread over a Dask cluster in bands of rows (the matrix scattered to
    every worker once); the bands' forests are merged here into labels identical to one pass (connected components
    do not depend on the order their edges are found in): spec/estimator.md §9."""
    n = raw.shape[0]
    labels = np.arange(n, dtype=np.int64)
    if labels0 is not None and start:
        labels[:start] = labels0[:start]
    first = 0 if start == 0 else int(np.searchsorted(pos, pos[start] - w, side="left"))  # rows that can reach start
    bands = [(b, min(n, b + BAND_ROWS)) for b in range(first, n, BAND_ROWS)]
    data = client.scatter([raw, codes, pos], broadcast=True, hash=False)
    sk = client.scatter(sketch, broadcast=True, hash=False) if isinstance(sketch, np.ndarray) else sketch
    futs = [client.submit(_band_forest, *data, n_acc, theta, w, start, band, sk, pure=False) for band in bands]
    for forest in client.gather(futs):
        if forest.size:
            merge_components(labels, forest[:, 0], forest[:, 1])
    return labels
