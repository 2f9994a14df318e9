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

from dprag.accounting.mechanisms.prefix_sums import assign_bins, score_bins
from dprag.errors import InvalidParameterError


@dataclass(frozen=True)
class ScoreBins:
    """A named bin configuration; the arithmetic is ``accounting.mechanisms.prefix_sums``' (one implementation)."""

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
        score_bins(self.low, self.high, self.width)  # whole number of bins, else InvalidParameterError("width")

    @property
    def count(self) -> int:
        return int(round((self.high - self.low) / self.width))

    def edges(self) -> np.ndarray:
        """B+1 descending edges: edges[i] is the upper end of bin i, edges[B] == low."""
        return score_bins(self.low, self.high, self.width)

    def assign(self, scores: np.ndarray) -> np.ndarray:
        """Bin index of every score (0 = most relevant; scores >= ``high`` clipped into bin 0), -1 below ``low``."""
        s = np.asarray(scores, dtype=np.float64)
        if not np.isfinite(s).all():
            raise InvalidParameterError("scores", "must be finite")
        return assign_bins(np.minimum(s, self.high).ravel(), self.edges()).reshape(s.shape)

    def counts(self, scores: np.ndarray) -> np.ndarray:
        """Number of scores in each bin, shape (B,), bin 0 first."""
        b = self.assign(scores)
        return np.bincount(b[b >= 0], minlength=self.count)


PAPER_BINS = ScoreBins(70.0, 100.0, 0.2)
MINILM_BINS = ScoreBins(30.0, 90.0, 0.2)
