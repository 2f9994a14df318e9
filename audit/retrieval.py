"""The retrieval channel: committed-seed noise (G4) and noise-then-select over the tenant index (R3).

z = DGS_table(RandomSource.from_seed(s_W, label = "dprag/v2/retrieval\\0" || h_req); σ), one sample per
document in index order, where h_req names the account-signed request (spec/protocol.md §5.2): nothing in
the label is drawn or chosen by the provider (no ledger position, no provider nonce), so it has nothing to
grind. Then top-K of s + z (ties to the smaller id). Noise first, select second: never the other way round.
The selection step of MuRAG-Ada and the answer's mechanism draw from the same seed under their own labels.

The seed and the noise are auditor-only material (spec/protocol.md §7).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np

from dprag.accounting.errors import InvalidParameterError, check_positive_int
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.noise.table import DiscreteGaussianTable

from .encoding import hexbytes


LABELS = {"retrieval": b"dprag/v2/retrieval\x00", "select": b"dprag/v2/select\x00",
          "generate": b"dprag/v2/generate\x00"}


def request_label(purpose: str, h_req: bytes) -> bytes:
    """The label of one request's stream for ``purpose`` (retrieval noise, selection noise, generation)."""
    if len(h_req) != 32:
        raise InvalidParameterError("h_req", "must be 32 bytes")
    return LABELS[purpose] + bytes(h_req)


def request_source(seed: bytes, purpose: str, h_req: bytes) -> RandomSource:
    return RandomSource.from_seed(bytes(seed), request_label(purpose, h_req))


@lru_cache(maxsize=16)
def noise_table(sigma: float, tail: float, precision_bits: int) -> DiscreteGaussianTable:
    """The (cached) table sampler fixed by the policy."""
    return DiscreteGaussianTable(sigma, tail_bound=tail, precision_bits=precision_bits)


def retrieval_noise(seed: bytes, label: bytes, n_docs: int, table: DiscreteGaussianTable) -> np.ndarray:
    """The n_docs noise values of one query, derived from the committed seed (int64)."""
    check_positive_int("n_docs", n_docs)
    return table.sample(n_docs, RandomSource.from_seed(bytes(seed), label))


def noisy_top_k(scores: np.ndarray, noise: np.ndarray, k: int) -> np.ndarray:
    """Ids of the k largest s_i + z_i, in decreasing order, ties broken by the smaller id."""
    k = check_positive_int("K", k)
    s = np.asarray(scores, dtype=np.int64) + np.asarray(noise, dtype=np.int64)
    n = s.size
    if k > n:
        raise InvalidParameterError("K", f"must be <= the tenant's n_docs {n}", k)
    if k < n:
        cand = np.argpartition(-s, k - 1)[:k]
        kth = s[cand].min()
        cand = np.flatnonzero(s >= kth)  # include every tie at the boundary
    else:
        cand = np.arange(n)
    order = np.lexsort((cand, -s[cand]))[:k]
    return cand[order].astype(np.int64)


def top_commitment(ids: np.ndarray, nonce: bytes) -> str:
    """h_top = H(u32be(K) || nonce || ids as u32be), hex (§5 step 4)."""
    ids = np.asarray(ids, dtype=np.int64)
    if len(nonce) != 16:
        raise InvalidParameterError("nonce_top", "must be 16 bytes")
    if ids.size and (ids.min() < 0 or ids.max() >= 1 << 32):
        raise InvalidParameterError("top", "ids must lie in [0, 2^32)")
    return hashlib.sha256(len(ids).to_bytes(4, "big") + bytes(nonce) + ids.astype(">u4").tobytes()).hexdigest()


def float_exact_scores(q_docs_f64: np.ndarray, q_query: np.ndarray, clip: tuple[int, int], shift: int) -> np.ndarray:
    """Integer scores via a float64 matrix product — exact, because |Σ E·Q| <= d·2^30 < 2^53 for int16 inputs
    and d < 2^23 — so serving gets BLAS speed and the same bits as ``commitments.integer_scores``."""
    lo, hi = clip
    dots = q_docs_f64 @ np.asarray(q_query, dtype=np.float64).reshape(-1)
    return np.right_shift(np.clip(dots.astype(np.int64), lo, hi), shift)


def parse_nonce(s, field: str) -> bytes:
    return hexbytes(s, field, 16)
