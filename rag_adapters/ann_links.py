"""FAISS-backed neighbour search for the coalition-size estimator (R5; 002 §5.5 "approximate-nearest-neighbor
proximity"; spec/estimator.md §3).

``FaissWindowSearch`` implements ``audit.verify.estimator.NeighbourSearch``: every pair of queries at most
``window`` ledger positions apart whose cosine is >= θ, found with ``faiss.IndexFlatIP.range_search`` over
sliding blocks, in float32.

**Exact, not approximate.** A flat index compares every pair of the band (no quantisation, no graph), and
the float32 rounding is covered by a proven margin: for unit float64 rows u, w rounded to float32 and any
summation order, ``|fl32(u·w) - u·w| <= (d + 2)·2^-24·(1 + O(d·2^-24))`` (Higham, *Accuracy and Stability
of Numerical Algorithms*, §3.1: |fl(x·y) - x·y| <= γ_d Σ|x_k y_k| <= γ_d |x||y|, plus one rounding per
component on conversion). The range search runs at ``θ - 2·(d + 2)·2^-24`` (twice the bound), so it returns
a superset of the true links, with their float32 values and that bound; the estimator (audit/verify/estimator.py)
recomputes in float64 only the values within the bound of θ, and decides the last near-ties in exact
integer arithmetic. The result is therefore identical to the numpy default
(tested), only faster: float32 BLAS, and the threshold is applied inside FAISS's result handler instead of
materialising every similarity. The auditor's verifier keeps the numpy default, so ``audit`` never needs
faiss; this class is injected where scale matters (``coalition_size(..., search=FaissWindowSearch())``).

Work: for n queries and window W the band has about n·W pairs; each block of ``block`` query rows is
compared with the rows up to ``window`` positions after its last one, so a fraction ``block / (W + block)``
of the products is spent outside the band.
"""

from __future__ import annotations

import numpy as np

from dprag.accounting.errors import check_positive_int
from dprag.errors import InvalidParameterError

from .common import require, torch_threads


def float32_margin(dim: int) -> float:
    """Slack covering float32 conversion + any-order float32 dot products of unit vectors of dimension ``dim``
    (twice the bound of the module docstring)."""
    dim = check_positive_int("dim", dim)
    return 2.0 * (dim + 2) * 2.0**-24


class FaissWindowSearch:
    """Exact windowed range search with FAISS flat inner-product indexes (see the module docstring).

    ``block``: query rows per range search (``None``: ``min(4096, max(1024, window // 2))``, measured best
    on 2 cores for W = 10^3..10^4; the work outside the band is block / (W + block)). ``threads``: OpenMP
    threads for FAISS (default ``rag_adapters.common.torch_threads()``).
    """

    exact = True

    def __init__(self, *, block: int | None = None, threads: int | None = None):
        self._faiss = require("faiss", "the FAISS neighbour search")
        self.block = None if block is None else check_positive_int("block", block)
        self.threads = torch_threads() if threads is None else check_positive_int("threads", threads)

    def __call__(
        self, unit: np.ndarray, theta: float, window: int, positions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """(pairs, float32 inner products, their error bound ``float32_margin(d)``); see the protocol
        ``audit.verify.estimator.NeighbourSearch``."""
        faiss = self._faiss
        u = np.asarray(unit)
        if u.ndim != 2 or u.shape[1] == 0:
            raise InvalidParameterError("unit", "must be an (n, d) array with d >= 1", u.shape)
        window = check_positive_int("window", window)
        pos = np.asarray(positions, dtype=np.int64)
        if pos.shape != (u.shape[0],):
            raise InvalidParameterError("positions", "must have one entry per row", pos.shape)
        n, d = u.shape
        if n < 2:
            return np.zeros((0, 2), dtype=np.int64), np.zeros(0), float32_margin(d)
        x = np.ascontiguousarray(u, dtype=np.float32)
        margin = float32_margin(d)
        radius = float(theta) - margin
        block = self.block or min(4096, max(1024, window // 2))
        faiss.omp_set_num_threads(self.threads)
        out, vals = [], []
        for s in range(0, n, block):
            t = min(n, s + block)
            hi = int(np.searchsorted(pos, pos[t - 1] + window, side="right"))
            if hi <= s + 1:
                continue
            index = faiss.IndexFlatIP(d)
            index.add(x[s:hi])
            lims, sims, ids = index.range_search(x[s:t], radius)
            if ids.size == 0:
                continue
            ii = np.repeat(np.arange(s, t, dtype=np.int64), np.diff(lims.astype(np.int64)))
            jj = ids.astype(np.int64) + s
            keep = (jj > ii) & (pos[jj] - pos[ii] <= window)
            if keep.any():
                out.append(np.stack([ii[keep], jj[keep]], axis=1))
                vals.append(sims[keep].astype(np.float64))
        if not out:
            return np.zeros((0, 2), dtype=np.int64), np.zeros(0), margin
        return np.concatenate(out), np.concatenate(vals), margin
