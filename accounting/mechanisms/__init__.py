"""Selection and threshold mechanisms of the DP-RAG papers; each returns its output and the event it spent.

- ``exponential``: the exponential mechanism (exact sampler and Gumbel-max), and its vote-histogram form used
  per token by the pure-DP DP-RAG (000 Alg. 5 / 001 Alg. 7).
- ``limited_domain``: Durfee–Rogers LimitedDomain with k = 1, as DPVoteRAG / DPSparseVoteRAG use it (003).
- ``sparse_vector``: AboveThreshold / Sparse with c discoveries (003 Alg. 3, 000 Alg. 5).
- ``prefix_sums``: noisy prefix sums over score bins, the query-specific threshold of MuRAG-Ada (000 Alg. 2).
- ``subsampling``: exact Poisson subsampling (001 Alg. 9) and RDP amplification (Zhu & Wang 2019, Thm 6).
- ``additive`` (helper A) and ``ksa`` (DP-KSA, helper E2) live alongside; import them from their modules.

Privacy claims, neighbouring relations and paper-vs-proof notes: spec/accounting/mechanisms.md.
"""

from .exponential import (
    exponential_mechanism,
    exponential_mechanism_probabilities,
    sample_exponential,
    vote_exponential_mechanism,
    vote_exponential_probabilities,
)
from .limited_domain import BOTTOM, limited_domain, limited_domain_probabilities, limited_domain_threshold
from .prefix_sums import PrefixSumRelease, assign_bins, bin_counts, noisy_prefix_sums, score_bins
from .sparse_vector import SparseVector, sparse_vector
from .subsampling import bernoulli, poisson_subsample

__all__ = [
    "exponential_mechanism",
    "exponential_mechanism_probabilities",
    "sample_exponential",
    "vote_exponential_mechanism",
    "vote_exponential_probabilities",
    "BOTTOM",
    "limited_domain",
    "limited_domain_probabilities",
    "limited_domain_threshold",
    "PrefixSumRelease",
    "assign_bins",
    "bin_counts",
    "noisy_prefix_sums",
    "score_bins",
    "SparseVector",
    "sparse_vector",
    "bernoulli",
    "poisson_subsample",
]
