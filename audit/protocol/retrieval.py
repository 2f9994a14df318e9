"""The retrieval channel: committed-seed noise (G4) and noise-then-select over the tenant index (R3).

z = DGS_table(RandomSource.from_seed(s_W, label); σ), one sample per document in index order, with
``label = "dprag/v3/retrieval\\0" || H(u32be(len(tenant)) || UTF-8(tenant) || Q bytes)`` (spec/protocol.md §5.2):
the noise is keyed by the tenant and the query embedding Q only, under the epoch's seed s_W (one seed per committed
index). Identical questions against the same committed index get identical citations, so a repeat is
post-processing of the first release (FAQ traffic costs nothing and the coalition estimator may skip exact
repeats); nothing in the label is drawn or chosen by the provider (no ledger position, no provider nonce, no
request nonce), so re-signing a request does not redraw the noise. Then top-K of s + z (ties to the smaller id).
Noise first, select second: never the other way round. The selection step of MuRAG-Ada and the answer's
mechanism draw from the same seed under their own labels, keyed by the signed request h_req.

The seed and the noise are auditor-only material (spec/protocol.md §7).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from dprag.accounting.errors import check_positive_int
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.noise.table import DiscreteGaussianTable
from dprag.errors import InvalidParameterError

from .encoding import hexbytes

LABELS = {
    "select": b"dprag/v3/select\x00",
    "generate": b"dprag/v3/generate\x00",
}
RETRIEVAL_LABEL = b"dprag/v3/retrieval\x00"


def request_label(purpose: str, h_req: bytes) -> bytes:
    """The label of one request's stream for ``purpose`` ("select": MuRAG-Ada's noise, "generate": the answer)."""
    if purpose not in LABELS:
        raise InvalidParameterError("purpose", f"must be one of {sorted(LABELS)} (retrieval noise: retrieval_label)")
    if len(h_req) != 32:
        raise InvalidParameterError("h_req", "must be 32 bytes")
    return LABELS[purpose] + bytes(h_req)


def request_source(seed: bytes, purpose: str, h_req: bytes) -> RandomSource:
    return RandomSource.from_seed(bytes(seed), request_label(purpose, h_req))


def retrieval_label(tenant: str, qemb: bytes) -> bytes:
    """The retrieval noise's label: keyed by the tenant and Q's int16 bytes only (see the module docstring)."""
    t = tenant.encode("utf-8")
    return RETRIEVAL_LABEL + hashlib.sha256(len(t).to_bytes(4, "big") + t + bytes(qemb)).digest()


def retrieval_source(seed: bytes, tenant: str, qemb: bytes) -> RandomSource:
    return RandomSource.from_seed(bytes(seed), retrieval_label(tenant, qemb))


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


def noisy_top_k_excluding(scores: np.ndarray, noise: np.ndarray, k: int, excluded: Sequence[int]) -> np.ndarray:
    """``noisy_top_k`` over the records not ``excluded`` (spec/protocol.md §5.3 step 5): the noise is still one
    sample per document in index order; the excluded ids are never selected, and where fewer than K records are
    left every one of them is, in that order (none left: the empty list)."""
    if not len(excluded):
        return noisy_top_k(scores, noise, k)
    s, z = np.asarray(scores, dtype=np.int64), np.asarray(noise, dtype=np.int64)
    keep = np.ones(s.size, dtype=bool)
    keep[np.asarray(excluded, dtype=np.int64)] = False
    ids = np.flatnonzero(keep)
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    out: np.ndarray = ids[noisy_top_k(s[ids], z[ids], min(check_positive_int("K", k), ids.size))].astype(np.int64)
    return out


# ------------------------------------------------------------------------------------------------------------
# The same selection, fast (bit-identical outputs; tests/audit/protocol/test_retrieval_fast.py checks them against
# the above)
# ------------------------------------------------------------------------------------------------------------
def words_source(words: np.ndarray) -> RandomSource:
    """A RandomSource that yields exactly the given 64-bit words (little-endian), once: so that
    ``table.sample(words.size, words_source(words))`` maps already-drawn words through the table's own
    sampler (it reads one word per sample, in order), e.g. the concatenated streams of many requests."""
    data = np.ascontiguousarray(words, dtype="<u8").tobytes()
    state = {"pos": 0}

    def read(n: int) -> bytes:
        out = data[state["pos"] : state["pos"] + n]
        if len(out) != n:
            raise InvalidParameterError("words", "fewer words than the sampler reads")
        state["pos"] += n
        return out

    return RandomSource(read, deterministic=True)


def sample_words(table: DiscreteGaussianTable, words: np.ndarray) -> np.ndarray:
    """``table``'s samples for the given words (one per word, in order), via the table's own sampler."""
    w = np.asarray(words, dtype=np.uint64).reshape(-1)
    return table.sample(w.size, words_source(w)).reshape(np.shape(words))


_CDF: dict[str, tuple[list[int], int, int]] = {}


def word_threshold(table: DiscreteGaussianTable, c: int) -> int | None:
    """The smallest 64-bit word whose sample is >= c (0 if every word's is; None if none is).

    The table's sample of word w is x = -T + #{i : C_i <= w >> (64 - B)} with C the cumulative weights
    (spec/accounting/noise.md §6: the plain inverse CDF), so x >= c iff (w >> (64 - B)) >= C_{c + T - 1}
    iff w >= C_{c + T - 1} << (64 - B)."""
    got = _CDF.get(table.digest)
    if got is None:
        acc, cum = 0, []
        for q in table.weights[:-1]:
            acc += int(q)
            cum.append(acc)
        got = _CDF[table.digest] = (cum, int(table.support_bound), 64 - int(table.precision_bits))
    cum, bound, shift = got
    j = int(c) + bound
    if j <= 0:
        return 0
    if j > len(cum):
        return None
    return cum[j - 1] << shift


def noisy_top_k_words(
    scores: np.ndarray,
    words: np.ndarray,
    table: DiscreteGaussianTable,
    k: int,
    score_range: tuple[int, int] | None = None,
) -> np.ndarray:
    """``noisy_top_k(scores, sample_words(table, words), k)``, bit for bit, without mapping every word.

    All words are drawn (noise first); only the selection is lazy: since a sample grows with its word,
    (1) the words above a high cut W0 give, once mapped, a value L0 <= the k-th largest s + z (they are
    >= k documents); (2) every document with s_i + z_i >= L0 has z_i >= L0 - max(s), i.e. a word >=
    ``word_threshold(L0 - max s)``; only those are mapped and ranked. The k largest (ties to the smaller
    id) lie among them, so the result is the full computation's. ``score_range``: bounds (lo, hi) on the
    scores if the caller knows them (else min / max are taken)."""
    k = check_positive_int("K", k)
    s = np.asarray(scores, dtype=np.int64).reshape(-1)
    w = np.asarray(words, dtype=np.uint64).reshape(-1)
    n = s.size
    if w.size != n:
        raise InvalidParameterError("words", f"must hold one word per score ({n})", w.size)
    if n < (1 << 14) or 64 * k > n or table.support_bound == 0:
        return noisy_top_k(s, sample_words(table, w), k)
    m0 = max(4 * k, 256)
    cut = np.uint64((1 << 64) - -(-(m0 << 64) // n))
    first = np.flatnonzero(w >= cut)
    if first.size < k:
        return noisy_top_k(s, sample_words(table, w), k)
    v0 = s[first] + sample_words(table, w[first])
    l0 = int(np.partition(v0, v0.size - k)[v0.size - k])  # k-th largest of a subset <= the k-th largest
    s_hi = int(s.max()) if score_range is None else int(score_range[1])
    thr = word_threshold(table, l0 - s_hi)
    if thr is None:  # cannot happen (the subset's k-th value is attained); stay exact regardless
        return noisy_top_k(s, sample_words(table, w), k)
    cand = np.flatnonzero(w >= np.uint64(thr)) if thr else np.arange(n)
    if cand.size > n // 4:
        return noisy_top_k(s, sample_words(table, w), k)
    v: np.ndarray = s[cand] + sample_words(table, w[cand])
    keep = v >= l0
    cand, v = cand[keep], v[keep]
    order = np.lexsort((cand, -v))[:k]
    return cand[order].astype(np.int64)


def noisy_top_k_rows(scores: np.ndarray, noise: np.ndarray, k: int) -> np.ndarray:
    """Row-wise ``noisy_top_k`` of (rows, n) integer matrices, as a (rows, k) int64 matrix, bit for bit:
    vectorised over rows, with the rows that hold a tie across the k-th place redone one by one."""
    k = check_positive_int("K", k)
    v = np.asarray(scores, dtype=np.int64) + np.asarray(noise, dtype=np.int64)
    rows, n = v.shape
    if k > n:
        raise InvalidParameterError("K", f"must be <= the tenant's n_docs {n}", k)
    if rows == 0:
        return np.zeros((0, k), dtype=np.int64)
    if k < n:
        part = np.argpartition(-v, k - 1, axis=1)[:, :k]
    else:
        part = np.broadcast_to(np.arange(n), (rows, n)).copy()
    vals = np.take_along_axis(v, part, axis=1)
    kth = vals.min(axis=1)
    # exactly k values >= the k-th: the selected set is the top-k set, with no tie to break at its edge
    clean = (v >= kth[:, None]).sum(axis=1) == k
    order = np.lexsort((part, -vals), axis=1)
    out = np.take_along_axis(part, order, axis=1).astype(np.int64)
    for r in np.flatnonzero(~clean):
        out[r] = noisy_top_k(v[r], np.zeros(n, dtype=np.int64), k)
    return out


def top_commitment(ids: np.ndarray | Sequence[int], nonce: bytes) -> str:
    """h_top = H(u32be(K) || nonce || ids as u32be), hex (§5 step 4)."""
    if len(nonce) != 16:
        raise InvalidParameterError("nonce_top", "must be 16 bytes")
    if type(ids) is list and all(type(x) is int and 0 <= x < 1 << 32 for x in ids):  # the common case, fast
        return hashlib.sha256(struct.pack(f">I16s{len(ids)}I", len(ids), bytes(nonce), *ids)).hexdigest()
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= 1 << 32):
        raise InvalidParameterError("top", "ids must lie in [0, 2^32)")
    return hashlib.sha256(len(ids).to_bytes(4, "big") + bytes(nonce) + ids.astype(">u4").tobytes()).hexdigest()


def float_exact_scores(q_docs_f64: np.ndarray, q_query: np.ndarray, clip: tuple[int, int], shift: int) -> np.ndarray:
    """Integer scores via a float64 matrix product — exact, because |Σ E·Q| <= d·2^30 < 2^53 for int16 inputs
    and d < 2^23 — so serving gets BLAS speed and the same bits as ``commitments.integer_scores``."""
    lo, hi = clip
    dots = q_docs_f64 @ np.asarray(q_query, dtype=np.float64).reshape(-1)
    return np.right_shift(np.clip(dots.astype(np.int64), lo, hi), shift)


def parse_nonce(s: Any, field: str) -> bytes:
    return hexbytes(s, field, 16)
