"""Poisson subsampling (001 Alg. 9, Subsampling-Multi-RAG): exact Bernoulli trials and the subsample.

Sources:
- 001 Algorithm 4 (Poisson subsampling: each record kept independently with probability p) and Algorithm 9
  (Subsampling-Multi-RAG: for each query, Poisson-subsample the corpus with rate p, then run the pure-DP
  DP-RAG of Algorithm 7 on the subsample with budget ε_q; Lemma 3, add/remove relation). The per-query event
  is ``PoissonSampledEvent(p, PureDpEvent(ε_q))``; its RDP curve (the amplification bounds of
  ``accounting.amplification``) is ``accounting.rdp.poisson_subsampled_rdp``.

Sampling is exact: the probability p (a binary float) is the dyadic rational it denotes, and record i is kept
iff an exactly uniform real U_i < p, decided by comparing U_i's bits (drawn from the ``RandomSource``) with
p's — helper A's exact Bernoulli trial.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

from ..amplification import check_probability
from ..noise.bernoulli import bernoulli_shared
from ..noise.source import RandomSource

__all__ = ["poisson_subsample", "bernoulli"]


# --------------------------------------------------------------------------------------------
# exact Bernoulli(p) and Poisson subsampling
# --------------------------------------------------------------------------------------------
def bernoulli(probability: float, size: int, source: RandomSource | None = None) -> npt.NDArray[np.bool_]:
    """``size`` independent exact Bernoulli(p) draws, p a binary float (= M/2^E exactly).

    One bulk step of helper A's exact trial (``accounting.noise.bernoulli.bernoulli_shared``, spec/accounting/
    noise.md §2): keep iff the uniform real U = 0.w w' … (base 2^64) is < p, compared lazily word by word.
    """
    p = check_probability(probability)
    if isinstance(size, bool) or int(size) != size or size < 0:
        raise InvalidParameterError("size", "must be an integer >= 0", size)
    source = RandomSource.resolve(source)
    return np.asarray(bernoulli_shared(source, Fraction(p), int(size)), dtype=bool)


def poisson_subsample(
    ids: npt.ArrayLike, probability: float, source: RandomSource | None = None
) -> npt.NDArray[np.generic]:
    """001 Algorithm 4: keep each id independently with probability p (exact); order preserved.

    ``ids``: 1-d array-like of record ids. Amplification holds under the add/remove relation only.
    """
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise InvalidParameterError("ids", "must be a 1-d array of record ids", getattr(arr, "shape", None))
    p = check_probability(probability)
    keep = bernoulli(p, arr.size, source)
    kept: npt.NDArray[np.generic] = arr[keep]
    return kept
