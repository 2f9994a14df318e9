"""Vector indexes: exact numpy inner-product search (the default, and the only one private paths may use),
FAISS Flat and FAISS HNSW (non-private baselines and attack experiments).

Why private paths need ``ExactIndex`` (001 §3.2, "whether a document exceeds the constant threshold depends
only on its own score"; Feldman & Zrnic individual filters): the per-document privacy argument needs the
score of document i to be a function of (document i, query) alone. ``ExactIndex.scores`` computes every
score as ``sum_j fl(e_ij * q_j)`` with numpy's pairwise summation over that row only, in float64, so it is
*bit-for-bit* independent of the other documents, their number and their order (tested). FAISS Flat
computes the same top-k but in float32 through blocked BLAS; HNSW is approximate and its graph is built
from all documents, so whether one document is found depends on the others. Both are flagged
``private_ok = False`` and ``DenseRetriever`` refuses them for ``scores``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from dprag.accounting.errors import check_positive_int
from dprag.errors import InvalidParameterError

from .common import require, torch_threads


@runtime_checkable
class Index(Protocol):
    """Inner-product search over unit vectors."""

    dim: int
    exact_topk: bool  # search() returns the true top-k (up to the index's arithmetic)
    private_ok: bool  # scores() are float64 and depend on (document, query) only

    def __len__(self) -> int: ...

    def add(self, vectors: np.ndarray) -> None: ...

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k per query: (scores (q, k) float64, ids (q, k) int64), best first."""
        ...


def _as_matrix(field: str, x, dim: int | None) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[0] == 0:
        raise InvalidParameterError(field, "must be a non-empty 2-D array (n, dim)", a.shape)
    if not np.issubdtype(a.dtype, np.floating):
        raise InvalidParameterError(field, "must be a floating-point array", str(a.dtype))
    if dim is not None and a.shape[1] != dim:
        raise InvalidParameterError(field, f"must have {dim} columns", a.shape)
    if not np.isfinite(a).all():
        raise InvalidParameterError(field, "must be finite (no NaN / inf)")
    return a


def check_k(k, n: int) -> int:
    k = check_positive_int("k", k)
    if n == 0:
        raise InvalidParameterError("index", "is empty: add documents before searching")
    if k > n:
        raise InvalidParameterError("k", f"must be <= the number of indexed documents ({n})", k)
    return k


def top_k_desc(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores, best first; ties broken by the lower index (deterministic)."""
    n = scores.shape[0]
    if k >= n:
        return np.lexsort((np.arange(n), -scores))
    part = np.argpartition(-scores, k - 1)[:k]
    kth = scores[part].min()
    greater = np.flatnonzero(scores > kth)
    equal = np.flatnonzero(scores == kth)[: k - len(greater)]
    sel = np.concatenate([greater, equal])
    return sel[np.lexsort((sel, -scores[sel]))]


def quantize(vectors: np.ndarray, scale: int) -> np.ndarray:
    """``round_half_even(scale * v)`` clipped to int16 (spec/protocol.md §3, the C_idx leaves), as int16."""
    q = np.rint(np.asarray(vectors, dtype=np.float64) * float(scale))
    return np.clip(q, -32768, 32767).astype(np.int16)


class ExactIndex:
    """Brute-force inner product; the embedded default and the only index private paths accept.

    ``quantization=None``: float64 products of the stored (float32) vectors. ``quantization=S`` (e.g. 2**10,
    the audit protocol's default): vectors and queries are stored as ``quantize(v, S)`` (int16) and the score
    is the *exact* integer dot product divided by S² -- reproducible bit for bit by any verifier holding the
    committed int16 leaves (|sum| <= dim · 2^30 < 2^53, so the conversion to float64 is exact).
    """

    exact_topk = True
    private_ok = True

    def __init__(self, dim: int, *, chunk_rows: int = 4096, quantization: int | None = None):
        self.dim = check_positive_int("dim", dim)
        self._chunk = check_positive_int("chunk_rows", chunk_rows)
        self.quantization = None if quantization is None else check_positive_int("quantization", quantization)
        if self.quantization is not None and self.quantization > 2**14:
            raise InvalidParameterError("quantization", "must be <= 2^14 (unit vectors must fit int16)", quantization)
        dtype = np.float64 if self.quantization is None else np.int64
        self._vecs = np.empty((0, self.dim), dtype=dtype)

    def __len__(self) -> int:
        return self._vecs.shape[0]

    def add(self, vectors: np.ndarray) -> None:
        v = _as_matrix("vectors", vectors, self.dim)
        v = v.astype(np.float64) if self.quantization is None else quantize(v, self.quantization).astype(np.int64)
        self._vecs = np.ascontiguousarray(np.concatenate([self._vecs, v]))

    def int16_rows(self) -> np.ndarray:
        """The stored int16 vectors (quantised indexes only): row i little-endian is the C_idx leaf E_i."""
        if self.quantization is None:
            raise InvalidParameterError("quantization", "index is not quantised")
        return self._vecs.astype("<i2")

    def scores(self, query: np.ndarray) -> np.ndarray:
        """Inner product of ``query`` with every indexed vector, shape (n,), float64.

        Float mode: row i is ``np.add.reduce(fl(v_i * q))`` over that row alone. Quantised mode: the exact
        integer dot product / S². Either way bit-identical whatever the other rows are.
        """
        q = _as_matrix("query", query, self.dim)
        if q.shape[0] != 1:
            raise InvalidParameterError("query", "must be a single vector", q.shape)
        q = q[0].astype(np.float64) if self.quantization is None else quantize(q[0], self.quantization).astype(np.int64)
        n = len(self)
        out = np.empty(n, dtype=np.float64)
        for s in range(0, n, self._chunk):
            block = self._vecs[s : s + self._chunk]
            tmp = np.empty_like(block)
            np.multiply(block, q, out=tmp)
            out[s : s + len(block)] = tmp.sum(axis=1)
        if self.quantization is not None:
            out /= float(self.quantization) ** 2
        return out

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = _as_matrix("queries", queries, self.dim)
        k = check_k(k, len(self))
        ids = np.empty((q.shape[0], k), dtype=np.int64)
        sc = np.empty((q.shape[0], k), dtype=np.float64)
        for r in range(q.shape[0]):
            s = self.scores(q[r])
            top = top_k_desc(s, k)
            ids[r], sc[r] = top, s[top]
        return sc, ids


class _FaissBase:
    private_ok = False

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def add(self, vectors: np.ndarray) -> None:
        v = _as_matrix("vectors", vectors, self.dim)
        self._index.add(np.ascontiguousarray(v, dtype=np.float32))

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = _as_matrix("queries", queries, self.dim)
        k = check_k(k, len(self))
        d, i = self._index.search(np.ascontiguousarray(q, dtype=np.float32), k)
        return d.astype(np.float64), i.astype(np.int64)


class FaissFlatIndex(_FaissBase):
    """``faiss.IndexFlatIP``: exact top-k in float32 (BLAS). Baselines only (not ``private_ok``)."""

    exact_topk = True

    def __init__(self, dim: int):
        faiss = require("faiss", "the FAISS Flat index")
        faiss.omp_set_num_threads(torch_threads())
        self.dim = check_positive_int("dim", dim)
        self._index = faiss.IndexFlatIP(self.dim)


class FaissHNSWIndex(_FaissBase):
    """``faiss.IndexHNSWFlat`` with inner-product metric: approximate. Non-private baselines and attacks only.

    ``m``: graph degree; ``ef_construction`` / ``ef_search``: beam widths at build / query time.
    """

    exact_topk = False

    def __init__(self, dim: int, *, m: int = 32, ef_construction: int = 80, ef_search: int = 64):
        faiss = require("faiss", "the FAISS HNSW index")
        faiss.omp_set_num_threads(torch_threads())
        self.dim = check_positive_int("dim", dim)
        self._index = faiss.IndexHNSWFlat(self.dim, check_positive_int("m", m), faiss.METRIC_INNER_PRODUCT)
        self._index.hnsw.efConstruction = check_positive_int("ef_construction", ef_construction)
        self.ef_search = ef_search

    @property
    def ef_search(self) -> int:
        return int(self._index.hnsw.efSearch)

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        self._index.hnsw.efSearch = check_positive_int("ef_search", value)
