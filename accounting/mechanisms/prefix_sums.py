"""Noisy prefix sums over relevance-score bins: the query-specific threshold of MuRAG-Ada.

Source: 000 Algorithm 2 (MuRAG-Ada) lines 1–10 and Appendix C.2 (Lemma 2); 001 Algorithm 2, Theorem 2 and
Appendix D (the same, bins of width 0.2 between scores 70 and 100, ε_thr = 1).

The release. Bins [a_i, b_i) are fixed in configuration (data-independent), ordered from the most relevant
down. For bin i = 1, 2, … the running sum s̃ ← s̃ + |A^{(i)}| + Lap(1/ε_thr) is released, where A^{(i)} are
the documents whose score falls in bin i and whose filter still holds ≥ ε_thr; the release stops after the
first bin at which s̃ > K (or when the bins run out). The query-specific threshold τ_t is the lower edge of
the last released bin; the candidate set A_t is the union of the released bins.

Noise: bin counts are integers, so the noise is helper A's exact discrete Laplace with P(x) ∝ e^{−ε_thr|x|}
(ε_thr-DP for a count of sensitivity 1, with no floating-point Laplace, Mironov 2012); s̃ is an integer.

Privacy (000 App. C.2, checked): neighbours differ in one document z (add/remove); z lies in at most one
bin j (bins are disjoint — we make them half-open so that a score on an edge is in exactly one bin). For any
output (b_1, …, b_q): if j > q the two output laws coincide; if j ≤ q, the bins before j do not involve z,
b_j − b_{j−1} = |A^{(j)}| + noise is a Laplace release of a count that z moves by 1 (loss ≤ ε_thr), and given
b_j the later increments do not involve z. So z loses at most ε_thr, and only if its bin was released.
Which documents to charge: the decision to release bin i is made from b_1 … b_{i−1} only (the stop rule looks
at the sums already released), so "z is charged ε_thr iff z's bin is released" is a charge fixed before the
sub-step that touches z — the predictable charge that the individual filter of Feldman & Zrnic 2021
(Cor. 3.3) needs, at the granularity of one bin release. The charged documents are every document counted in
a released bin — all of A_t, not only the top-k later passed to the generator (as for the RAG step, where
every document of A'_t pays ε_RAG).
Each charged document's event is ``DiscreteLaplaceEvent(scale=1/ε_thr, sensitivity=1)`` (ε_thr-DP).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

from ..errors import check_epsilon, check_positive_int
from ..events import DiscreteLaplaceEvent
from ..noise.source import RandomSource
from .exponential import as_histogram

__all__ = ["PrefixSumRelease", "noisy_prefix_sums", "score_bins", "assign_bins", "bin_counts"]


@dataclass(frozen=True)
class PrefixSumRelease:
    """What one prefix-sum release published and whom it touched.

    ``bins_released`` q: bins 0 … q−1 (most relevant first) were released; ``noisy_prefix_sums`` the q released
    integers s̃_1 … s̃_q; ``exceeded`` whether the stop was s̃_q > K (else the bins ran out);
    ``event`` the event of every document counted in a released bin.
    """

    bins_released: int
    noisy_prefix_sums: tuple[int, ...]
    exceeded: bool
    k: int
    epsilon_thr: float
    num_bins: int

    @property
    def event(self) -> DiscreteLaplaceEvent:
        return DiscreteLaplaceEvent(scale=1.0 / self.epsilon_thr, sensitivity=1)

    @property
    def charged_bins(self) -> range:
        return range(self.bins_released)

    def threshold(self, edges: npt.ArrayLike) -> float:
        """τ_t: the lower edge of the last released bin (``edges`` as returned by :func:`score_bins`)."""
        e = np.asarray(edges, dtype=np.float64)
        if e.ndim != 1 or e.size != self.num_bins + 1:
            raise InvalidParameterError("edges", f"must hold num_bins + 1 = {self.num_bins + 1} edges")
        return float(e[self.bins_released])

    def charged_documents(self, doc_bins: npt.ArrayLike, active: npt.ArrayLike | None = None) -> npt.NDArray[np.intp]:
        """Indices of the documents to charge ε_thr: those counted in a released bin.

        ``doc_bins[i]``: bin of document i (−1 if in no bin, see :func:`assign_bins`); ``active``: optional
        boolean mask of the documents that were counted (filter still ≥ ε_thr) — the same mask that produced
        the bin counts.
        """
        b = np.asarray(doc_bins)
        if b.ndim != 1 or not np.issubdtype(b.dtype, np.integer):
            raise InvalidParameterError("doc_bins", "must be a 1-d integer array")
        mask = (b >= 0) & (b < self.bins_released)
        if active is not None:
            a = np.asarray(active, dtype=bool)
            if a.shape != b.shape:
                raise InvalidParameterError("active", "must have the same shape as doc_bins")
            mask &= a
        return np.flatnonzero(mask)


def score_bins(low: float, high: float, width: float) -> npt.NDArray[np.float64]:
    """Bin edges from ``high`` down to ``low`` in steps of ``width`` (001 App. E: 100 → 70, width 0.2).

    Returns descending edges e_0 = high > e_1 > … > e_B = low; bin i is [e_{i+1}, e_i) except bin 0, which is
    [e_1, e_0] (closed at the top, so the maximum score is in a bin). Edges are computed as high − i·width.
    """
    low = float(low)
    high = float(high)
    if not (math.isfinite(low) and math.isfinite(high)) or not high > low:
        raise InvalidParameterError("high", "must be finite and > low", (low, high))
    width = check_epsilon("width", width)
    nb = int(round((high - low) / width))
    if nb < 1 or abs(nb * width - (high - low)) > 1e-9 * max(1.0, high - low):
        raise InvalidParameterError("width", "must divide high − low into a whole number of bins", width)
    edges = high - np.arange(nb + 1) * width
    edges[-1] = low
    return cast(npt.NDArray[np.float64], edges)  # float64 at run time (a float minus int64 · float)


def assign_bins(scores: npt.ArrayLike, edges: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Bin index of each score (0 = most relevant), −1 if below the lowest edge or above the top edge."""
    s = np.asarray(scores, dtype=np.float64)
    e = np.asarray(edges, dtype=np.float64)
    if e.ndim != 1 or e.size < 2 or not np.all(np.diff(e) < 0):
        raise InvalidParameterError("edges", "must be a strictly decreasing 1-d array of at least 2 edges")
    if s.ndim != 1 or not np.all(np.isfinite(s)):
        raise InvalidParameterError("scores", "must be a 1-d array of finite scores")
    asc = e[::-1]  # ascending edges
    # position among ascending edges: bin (ascending index) k holds [asc[k], asc[k+1])
    k = np.searchsorted(asc, s, side="right") - 1
    nb = e.size - 1
    k = np.where(s == asc[-1], nb - 1, k)  # the top edge belongs to the top bin
    out = np.where((k >= 0) & (k < nb), nb - 1 - k, -1)
    return out.astype(np.int64)


def bin_counts(doc_bins: npt.ArrayLike, num_bins: int, active: npt.ArrayLike | None = None) -> npt.NDArray[np.int64]:
    """|A^{(i)}| for every bin: documents in bin i that are active (filter budget ≥ ε_thr)."""
    num_bins = check_positive_int("num_bins", num_bins)
    b = np.asarray(doc_bins)
    if b.ndim != 1 or not np.issubdtype(b.dtype, np.integer):
        raise InvalidParameterError("doc_bins", "must be a 1-d integer array")
    if np.any(b >= num_bins) or np.any(b < -1):
        raise InvalidParameterError("doc_bins", f"bins must lie in [-1, {num_bins - 1}]")
    mask = b >= 0
    if active is not None:
        a = np.asarray(active, dtype=bool)
        if a.shape != b.shape:
            raise InvalidParameterError("active", "must have the same shape as doc_bins")
        mask &= a
    return np.bincount(b[mask], minlength=num_bins).astype(np.int64)


def noisy_prefix_sums(
    bin_counts: npt.ArrayLike, k: int, epsilon_thr: float, source: RandomSource | None = None
) -> PrefixSumRelease:
    """000 Algorithm 2 lines 2–10: release s̃_i = Σ_{j≤i} (|A^{(j)}| + Lap_Z(1/ε_thr)) until s̃ > K.

    ``bin_counts[i]`` = |A^{(i)}| (most relevant bin first; only active documents counted). Returns a
    :class:`PrefixSumRelease`; charge ``release.event`` to every document of ``release.charged_bins``
    (``release.charged_documents(doc_bins, active)``). Neighbouring relation: add/remove one document
    (each document in at most one bin).
    """
    counts = as_histogram(bin_counts, "bin_counts")
    k = check_positive_int("k", k)
    epsilon_thr = check_epsilon("epsilon_thr", epsilon_thr)
    source = RandomSource.resolve(source)
    from ..noise import discrete_laplace  # helper A's exact sampler, P(x) ∝ exp(-|x|/scale)

    noise = np.asarray(discrete_laplace(1.0 / epsilon_thr, counts.size, source), dtype=np.int64).reshape(-1)
    sums = np.cumsum(counts + noise)
    over = np.flatnonzero(sums > k)
    q = int(over[0]) + 1 if over.size else counts.size
    return PrefixSumRelease(
        bins_released=q,
        noisy_prefix_sums=tuple(int(v) for v in sums[:q]),
        exceeded=bool(over.size),
        k=k,
        epsilon_thr=epsilon_thr,
        num_bins=int(counts.size),
    )
