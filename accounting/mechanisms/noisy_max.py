"""Report-noisy-max of a vote histogram with discrete Gaussian noise (GNMax; Papernot et al. 2018, PATE).

``gaussian_vote_max(histogram, sigma)``: add an independent exact discrete Gaussian N_Z(0, σ²)
(Canonne–Kamath–Steinke 2020, ``accounting.noise.discrete``) to every count of the vote histogram — the
whole vocabulary, zeros included, so the output domain does not depend on the votes — and release the
argmax (ties: the smallest token id). The argmax is post-processing of the noisy histogram.

Neighbouring relation: one changed document changes one voter's vote, so two counts move by 1 (one −1,
one +1) and every other count is unchanged. Each changed coordinate is a discrete Gaussian of sensitivity
1, the others are identical, so one release costs two sensitivity-1 discrete Gaussians composed:
RDP α·2/(2σ²) = α/σ² (CKS 2020, Thm 4; the ``SelfComposedEvent`` below states exactly that). No δ: it
composes in an RDP filter, unlike LimitedDomain. This is the RDP single-query mechanism that plugs into
MuRAG / MuRAG-Ada next to 000 Algorithm 5 (``accounting.rag.mechanism``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

from ..errors import check_epsilon
from ..events import DiscreteGaussianEvent, SelfComposedEvent
from ..noise.discrete import discrete_gaussian
from ..noise.source import RandomSource


def gaussian_vote_max_event(sigma: float) -> SelfComposedEvent:
    """The cost of one ``gaussian_vote_max`` release: two sensitivity-1 discrete Gaussians of scale σ."""
    return SelfComposedEvent(DiscreteGaussianEvent(check_epsilon("sigma", sigma), 1), 2)


def gaussian_vote_max(
    histogram: npt.ArrayLike, sigma: float, source: RandomSource | None = None
) -> tuple[int, SelfComposedEvent]:
    """argmax_v (Hist[v] + N_Z(0, σ²)) over the whole vocabulary; returns (token id, event)."""
    h = np.asarray(histogram)
    if h.ndim != 1 or h.size == 0 or not np.issubdtype(h.dtype, np.integer) or np.any(h < 0):
        raise InvalidParameterError("histogram", "must be a non-empty 1-d array of non-negative integer counts")
    event = gaussian_vote_max_event(sigma)
    src = source if source is not None else RandomSource.system()
    noisy = h.astype(np.int64) + discrete_gaussian(sigma, h.size, src)
    return int(np.argmax(noisy)), event


__all__ = ["gaussian_vote_max", "gaussian_vote_max_event"]
