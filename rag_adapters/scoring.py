"""How relevance scores map onto MuRAG-Ada's bins (001 Algorithm 2, Appendix E, Remark 1).

MuRAG-Ada discretises relevance scores into B disjoint bins [a_i, b_i] and releases noisy prefix sums of
bin counts from the most relevant bin downwards until the noisy count exceeds K. Remark 1: the bins (like
the threshold) must be fixed, data-independent configuration -- never derived from the private scores.

``ScoreBins(low, high, width)``: B = (high - low) / width bins (must be an integer), bin 0 the most
relevant: bin i = [high - (i+1)·width, high - i·width), except bin 0 which also holds every score >= high.
Scores below ``low`` fall in no bin (index -1): those documents are never counted nor charged.
Edges are computed as ``high - width * i`` in float64 (deterministic, published with the configuration).

``PAPER_BINS`` = 001 Appendix E (DPR inner products, 70..100 step 0.2). Our retriever's scale is
100·cosine (MiniLM); ``MINILM_BINS`` = 30..90 step 0.2 (300 bins; scores >= 90, i.e. near-duplicates,
land in bin 0) covers the range where relevant and top-50 documents score. It was chosen on *public*
data only (wiki-fanout: relevant documents score 50-75 (5th-95th percentile), the 50th-best document
23-44), never on a private corpus; see spec/adapters.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accounting.errors import InvalidParameterError


@dataclass(frozen=True)
class ScoreBins:
    low: float
    high: float
    width: float

    def __post_init__(self):
        for f in ("low", "high", "width"):
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not np.isfinite(v):
                raise InvalidParameterError(f, "must be a finite number", v)
        if self.width <= 0:
            raise InvalidParameterError("width", "must be > 0", self.width)
        if self.high <= self.low:
            raise InvalidParameterError("high", "must be > low", self.high)
        b = (self.high - self.low) / self.width
        if abs(b - round(b)) > 1e-9 * max(1.0, b):
            raise InvalidParameterError("width", "must divide high - low into a whole number of bins", self.width)

    @property
    def count(self) -> int:
        return int(round((self.high - self.low) / self.width))

    def edges(self) -> np.ndarray:
        """B+1 descending edges: edges[i] is the upper end of bin i, edges[B] == low (up to rounding)."""
        e = self.high - self.width * np.arange(self.count + 1, dtype=np.float64)
        e[-1] = self.low
        return e

    def assign(self, scores: np.ndarray) -> np.ndarray:
        """Bin index of every score (0 = most relevant), -1 below ``low``; int64."""
        s = np.asarray(scores, dtype=np.float64)
        if not np.isfinite(s).all():
            raise InvalidParameterError("scores", "must be finite")
        asc = self.edges()[::-1]  # ascending: low .. high
        # position j in ascending edges with asc[j] <= s < asc[j+1]  ->  bin B-1-j
        j = np.searchsorted(asc, s, side="right") - 1
        out = (self.count - 1 - j).astype(np.int64)
        out[s >= self.high] = 0
        out[s < self.low] = -1
        return out

    def counts(self, scores: np.ndarray) -> np.ndarray:
        """Number of scores in each bin, shape (B,), bin 0 first."""
        b = self.assign(scores)
        return np.bincount(b[b >= 0], minlength=self.count)


PAPER_BINS = ScoreBins(70.0, 100.0, 0.2)
MINILM_BINS = ScoreBins(30.0, 90.0, 0.2)
