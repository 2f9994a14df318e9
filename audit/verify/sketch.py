"""Unit rows, and the coalition scan's sketch filter (spec/estimator.md §10): a lossless pre-filter that lets the
exact link search compare every pair in ``k + 1`` dimensions instead of ``d``.

For unit rows x, y and any orthonormal basis U (d × k), write a = Uᵀx and r = |x - U a| (the residual's norm);
then x·y = a_x·a_y + (x - U a_x)·(y - U a_y) <= a_x·a_y + r_x·r_y = z_x·z_y with z = (a, r), a unit vector of
k + 1 coordinates (Cauchy-Schwarz on the residuals). So a pair with x·y >= θ has z_x·z_y >= θ, whatever U is:
a pair the sketch drops cannot be a link, and every pair it keeps is decided exactly as before. U only decides
how many pairs are kept (how fast the scan is), never which links are found: a provider who chooses its queries
so that the basis fits them badly makes the audit slower, not wrong. The basis is the auditor's own, computed
from the rows it has just read (their leading right singular vectors, uncentred: the directions that carry the
most of the rows' energy, so r is small and the bound tight).
"""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

#: coordinates of the basis (the sketch has one more: the residual's norm)
SKETCH_DIM = 64
#: rows of the sample the basis is computed from (evenly spaced over the matrix; deterministic)
SAMPLE_ROWS = 16384
#: float64 slack of the sketch's own arithmetic: a, r and U's orthonormality are computed in float64 with errors
#: below 2^-40 for d <= 2^16 (each is a sum of at most d products of numbers of modulus <= 1); 2^-26 covers them
#: with room
SLACK = 2.0**-26
#: added to each squared residual: it bounds |x|^2 - 1 and the rounding of 1 - |a|^2 and of U's orthonormality
#: (each below 2^-45); the sketch row's norm stays within 2^-40 of 1
RESIDUAL_PAD = 2.0**-40


def unit_rows(embeddings: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm in float64 (zero rows stay zero). Each row is first scaled by a power
    of two (exactly) so that its largest entry lies in [0.5, 1): no overflow or underflow of the squares."""
    x = np.asarray(embeddings, dtype=np.float64)
    _, e = np.frexp(np.abs(x).max(axis=1, initial=0.0))
    x = np.ldexp(x, -e[:, None])
    n = np.sqrt(np.einsum("ij,ij->i", x, x))
    n[n == 0] = 1.0
    unit: np.ndarray = x / n[:, None]
    return unit


def worth_it(dim: int, k: int = SKETCH_DIM) -> bool:
    """The sketch pays for itself only when it is much shorter than the rows."""
    return 0 < k and 2 * (k + 1) <= dim


def sketch_rows(raw: np.ndarray, k: int = SKETCH_DIM, chunk: int = 8192) -> np.ndarray:
    """(n, k + 1) float32: each row's ``z = (Uᵀx, |x - U Uᵀx|)`` for the unit float64 row x of ``raw``; zero rows
    give zero (they link to nothing)."""
    n, d = raw.shape
    if not 0 < k < d:
        raise ValueError(f"sketch dimension {k} must lie in (0, {d})")
    if n == 0:
        return np.zeros((0, k + 1), dtype=np.float32)
    take = np.unique(np.linspace(0, n - 1, min(n, SAMPLE_ROWS)).astype(np.int64))
    sample = unit_rows(raw[take])
    gram = sample.T @ sample
    # a d x d eigenproblem: one BLAS thread (threaded OpenBLAS takes ~80x longer on it while the other core is busy)
    with threadpool_limits(1, user_api="blas"):
        _, vecs = np.linalg.eigh(gram)  # ascending eigenvalues: the last k carry the most energy
        basis = np.linalg.qr(vecs[:, ::-1][:, :k])[0]  # (d, k), re-orthonormalised in float64
    out = np.empty((n, k + 1), dtype=np.float32)
    for s in range(0, n, chunk):
        a = unit_rows(raw[s : s + chunk]) @ basis
        out[s : s + chunk, :k] = a
        # |x - U a|^2 = |x|^2 - |a|^2 up to float64 rounding (|x| = 1 or 0): the residual's norm over-estimated
        # by RESIDUAL_PAD keeps the bound an upper bound however the subtraction rounds
        norm2 = np.einsum("ij,ij->i", a, a)
        nonzero = (raw[s : s + chunk] != 0).any(axis=1)  # from the row itself: a row may lie outside the basis
        res2 = np.where(nonzero, np.maximum(0.0, 1.0 - norm2) + RESIDUAL_PAD, 0.0)
        out[s : s + chunk, k] = np.sqrt(res2)
    return out
