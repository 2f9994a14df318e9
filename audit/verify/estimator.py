"""Coalition-size estimator (R5; 002 §5.5 "Phase C: coalition-size estimation"; spec/protocol.md §6,
spec/estimator.md).

Definition (what the auditor recomputes from the opened query embeddings, in ledger order):

* two queries i < j are **linked** when ``pos_j - pos_i <= window`` (ledger positions; by default the row
  numbers 0..n-1) and ``cos(x_i, x_j) >= θ``, the cosine being evaluated **exactly** on the given values
  (int16 quantised embeddings in the protocol; any float array in experiments) -- a zero row links to
  nothing;
* clusters are the connected components of the link graph;
* a cluster's size is its number of *distinct accounts*; ĉ = the largest size, 1 when no cluster spans two
  accounts (0 for no queries). The pass condition is ĉ <= k_max; ε is computed from k_max, never from ĉ.

"Exactly" means: for rows x, y (as exact rationals: an int16 is an integer, a float64 a dyadic rational)
and θ = num/den (the exact binary64 value), linked iff ``x·y > 0`` and ``(x·y)^2 · den^2 >= num^2 ·
|x|^2 · |y|^2``. So every implementation, whatever its BLAS, threads or summation order, gets the same
links, and the verdict is reproducible bit for bit.

The auditor's parameters (protocol version 2): θ and the window are the auditor's, not the provider's --
``DEFAULT_THETA`` and ``DEFAULT_WINDOW`` (None = the whole audit window, shrunk by ``default_window`` only
past ``DEFAULT_PAIR_DIM_BUDGET``); spec/estimator.md §8 gives the measured detection table behind them.

Default path (streamed). Without an injected search, the band is scanned in float32 tiles at θ minus the
proven float32 bound (``float32_margin``), each tile's candidates joining two different components are
decided exactly and merged into one label per query at once, and nothing else is kept: memory is bounded
for any θ (``stream_components``); at large d the tiles compare each row's sketch first (``sketch``: a proven upper
bound of the cosine in k + 1 coordinates, spec/estimator.md §10), so no link is lost. The rest of this docstring
describes the exact decision it shares with the injected-search path.

Injected searches. Pairs are found by a *neighbour search* -- any callable of the ``NeighbourSearch`` protocol that
returns a **superset** of the pairs whose unit-row inner product is >= a lowered threshold (the default is
``exact_window_search``, blocked float64 numpy; ``rag_adapters.ann_links.FaissWindowSearch`` is a FAISS
one). Each candidate's cosine is then taken in float64, whose error is far below ``MARGIN = 2^-32``:
candidates clearly above θ + MARGIN are links, those below θ - MARGIN are not, and the rare ones in between
are decided by the exact integer rule above. A search that returns only pairs can cause *missed* links (if
it is not the superset it promises), never false ones: the estimator recomputes every cosine and re-checks
the window. A search may also return its own similarity values with a declared error bound (FAISS's
float32 values); those are trusted within the bound and recomputed in float64 only when too close to θ
to call. The verifier uses the numpy default, which trusts nothing but numpy's float64 BLAS.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from fractions import Fraction
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from dprag.accounting.errors import check_positive_int
from dprag.errors import InvalidParameterError

from .sketch import SLACK, sketch_rows, unit_rows, worth_it

#: float64 slack: |computed cosine - exact cosine| <= ~(2d + 10)·2^-53 for unit-normalised float64 rows
#: (normalisation + dot product, any summation order; < 2^-42 for d = 384, < 2^-36 for d <= MAX_DIM);
#: 2^-32 leaves a wide safety factor and is still far below any θ step of interest.
MARGIN = 2.0**-32
MAX_DIM = 1 << 16

#: a tile of the exact search holds at most this many float64 similarities (16 MiB)
_TILE_ELEMS = 1 << 21

_H = TypeVar("_H", bound=Hashable)


@runtime_checkable
class NeighbourSearch(Protocol):
    """Candidate-pair search injected into the estimator.

    ``search(unit, theta, window, positions)`` receives unit-normalised float64 rows (n, d), a threshold,
    the window and the strictly increasing int64 positions, and must return an (m, 2) integer array holding
    **every** pair (i, j), i < j, ``positions[j] - positions[i] <= window``, whose exact inner product
    ``unit[i]·unit[j]`` is >= ``theta``. Extra pairs are allowed (they are filtered); duplicates too.
    It may instead return ``(pairs, values, error_bound)``: ``values[k]`` within ``error_bound`` of the
    exact inner product of pair k (then the estimator does not recompute clear-cut pairs).
    """

    def __call__(
        self, unit: np.ndarray, theta: float, window: int, positions: np.ndarray
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray, float]: ...


# ---------------------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------------------


def _check_embeddings(embeddings: npt.ArrayLike, n_expected: int | None = None) -> np.ndarray:
    e = np.asarray(embeddings)
    if e.dtype == bool or not (np.issubdtype(e.dtype, np.integer) or np.issubdtype(e.dtype, np.floating)):
        raise InvalidParameterError("embeddings", "must be an integer or floating-point array", str(e.dtype))
    if e.dtype == np.uint64:
        raise InvalidParameterError("embeddings", "integer entries must fit in int64 (uint64 is refused)")
    if e.ndim != 2 or e.shape[1] == 0:
        raise InvalidParameterError("embeddings", "must be an (n, d) array with d >= 1", e.shape)
    if e.shape[1] > MAX_DIM:
        raise InvalidParameterError("embeddings", f"must have d <= {MAX_DIM} (the float64 margin's range)", e.shape)
    if n_expected is not None and e.shape[0] != n_expected:
        raise InvalidParameterError(
            "embeddings", "must be an (n, d) array with one row per account entry", (e.shape, n_expected)
        )
    if np.issubdtype(e.dtype, np.floating):
        if e.dtype.itemsize > 8:
            raise InvalidParameterError("embeddings", "must be at most float64", str(e.dtype))
        if not np.isfinite(e).all():
            raise InvalidParameterError("embeddings", "must be finite (no NaN / inf)")
    return e


def check_theta(theta: Any, field: str = "theta") -> float:
    if isinstance(theta, bool):
        raise InvalidParameterError(field, "must be a real number in (0, 1]", theta)
    try:
        t = float(theta)
    except (TypeError, ValueError):
        raise InvalidParameterError(field, "must be a real number in (0, 1]", theta) from None
    if not (0.0 < t <= 1.0):  # also refuses NaN
        raise InvalidParameterError(field, "must lie in (0, 1]", theta)
    return t


def check_positions(positions: npt.ArrayLike | None, n: int) -> np.ndarray:
    if positions is None:
        return np.arange(n, dtype=np.int64)
    p = np.asarray(positions)
    if p.ndim != 1 or p.shape[0] != n:
        raise InvalidParameterError("positions", "must be a 1-D array with one position per query", p.shape)
    if n and (p.dtype == bool or not np.issubdtype(p.dtype, np.integer)):
        raise InvalidParameterError("positions", "must be integers (ledger indices)", str(p.dtype))
    p = p.astype(np.int64)
    if n > 1 and not (np.diff(p) > 0).all():
        raise InvalidParameterError("positions", "must be strictly increasing (ledger order)")
    return p


def _account_codes(accounts: Sequence[_H], n: int) -> tuple[np.ndarray, list[_H]]:
    if isinstance(accounts, (str, bytes)):
        raise InvalidParameterError("accounts", "must be a sequence of account ids, not a single string")
    try:
        accts = list(accounts)
    except TypeError:
        raise InvalidParameterError("accounts", "must be a sequence of account ids", type(accounts).__name__) from None
    if len(accts) != n:
        raise InvalidParameterError("accounts", "must have one account id per embedding row", (len(accts), n))
    index: dict[_H, int] = {}
    try:
        codes = np.fromiter((index.setdefault(a, len(index)) for a in accts), dtype=np.int64, count=n)
    except TypeError:
        raise InvalidParameterError("accounts", "account ids must be hashable") from None
    names = list(index)
    return codes, names


# ---------------------------------------------------------------------------------------------------------
# geometry: unit rows, the exact predicate
# ---------------------------------------------------------------------------------------------------------


def _int_rows(raw: np.ndarray, rows: np.ndarray) -> dict[int, list[int]]:
    """Exact integer vectors proportional to the given rows (Python ints; cosine is scale-invariant)."""
    out: dict[int, list[int]] = {}
    if np.issubdtype(raw.dtype, np.integer):
        for r in rows.tolist():
            out[r] = [int(v) for v in raw[r].tolist()]
        return out
    x = raw.astype(np.float64)
    for r in rows.tolist():
        m, e = np.frexp(x[r])  # x = m · 2^e, m in [0.5, 1) (or 0)
        mi = (m * 2.0**53).astype(np.int64)  # exact: 53-bit integer mantissas
        ex = e.astype(np.int64) - 53
        nz = mi != 0
        emin = int(ex[nz].min()) if nz.any() else 0
        out[r] = [int(a) << int(b - emin) if a else 0 for a, b in zip(mi.tolist(), ex.tolist(), strict=False)]
    return out


def _same_rows(raw: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """For each pair: are both rows identical and non-zero (cosine exactly 1)?"""
    rows, where = np.unique(pairs, return_inverse=True)
    where = where.reshape(pairs.shape)
    sub = raw[rows]
    _, row_class = np.unique(sub, axis=0, return_inverse=True)  # equal rows <-> equal class
    row_class = row_class.reshape(-1)
    nonzero = (sub != 0).any(axis=1)
    same: np.ndarray = (row_class[where[:, 0]] == row_class[where[:, 1]]) & nonzero[where[:, 0]]
    return same


def exact_links(raw: np.ndarray, pairs: np.ndarray, theta: float) -> np.ndarray:
    """The exact predicate (module docstring) for each pair, as a bool array; exact rational arithmetic."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if pairs.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    out = np.zeros(pairs.shape[0], dtype=bool)
    # identical non-zero rows have cosine exactly 1 >= θ: decided without big-integer arithmetic
    same = _same_rows(raw, pairs)
    if same.any():
        out[same] = True
        rest = np.flatnonzero(~same)
        if rest.size:
            out[rest] = exact_links(raw, pairs[rest], theta)
        return out
    num, den = Fraction(theta).as_integer_ratio()
    num2, den2 = num * num, den * den
    small_int = (
        np.issubdtype(raw.dtype, np.integer)
        and raw.shape[1] * float(np.abs(raw.astype(np.int64)).max(initial=0)) ** 2 < 2.0**62
    )
    if small_int:  # int16 protocol material: dot products are exact in int64
        a = raw[pairs[:, 0]].astype(np.int64)
        b = raw[pairs[:, 1]].astype(np.int64)
        dots = np.einsum("ij,ij->i", a, b).tolist()
        na = np.einsum("ij,ij->i", a, a).tolist()
        nb = np.einsum("ij,ij->i", b, b).tolist()
        for k, (d, x, y) in enumerate(zip(dots, na, nb, strict=False)):
            out[k] = x > 0 and y > 0 and d > 0 and d * d * den2 >= num2 * x * y
        return out
    vecs = _int_rows(raw, np.unique(pairs))
    norms = {r: sum(v * v for v in vec) for r, vec in vecs.items()}
    for k, (i, j) in enumerate(pairs.tolist()):
        x, y = norms[i], norms[j]
        if x == 0 or y == 0:
            continue
        d = sum(p * q for p, q in zip(vecs[i], vecs[j], strict=False))
        out[k] = d > 0 and d * d * den2 >= num2 * x * y
    return out


# ---------------------------------------------------------------------------------------------------------
# the default neighbour search: exact, blocked numpy over the band |pos_j - pos_i| <= window
# ---------------------------------------------------------------------------------------------------------


def exact_window_search(
    unit: np.ndarray, theta: float, window: int, positions: np.ndarray, block: int = 1024
) -> np.ndarray:
    """Every pair i < j with ``positions[j] - positions[i] <= window`` and ``unit[i]·unit[j] >= theta``
    (float64 BLAS tiles; the caller's margin absorbs rounding). Implements ``NeighbourSearch``."""
    return _window_search(unit, theta, window, positions, block)[0]


def _window_search(
    unit: np.ndarray, theta: float, window: int, positions: np.ndarray, block: int = 1024
) -> tuple[np.ndarray, np.ndarray]:
    """``exact_window_search`` plus the float64 inner products of the pairs it returns."""
    n = unit.shape[0]
    out, vals = [], []
    for s in range(0, n, block):
        t = min(n, s + block)
        hi = int(np.searchsorted(positions, positions[t - 1] + window, side="right"))
        if hi <= s + 1:
            continue
        col_block = max(256, _TILE_ELEMS // (t - s))
        for c0 in range(s, hi, col_block):
            c1 = min(hi, c0 + col_block)
            sims = unit[s:t] @ unit[c0:c1].T
            ii, jj = np.nonzero(sims >= theta)
            v = sims[ii, jj]
            ii += s
            jj += c0
            keep = (jj > ii) & (positions[jj] - positions[ii] <= window)
            if keep.any():
                out.append(np.stack([ii[keep], jj[keep]], axis=1))
                vals.append(v[keep])
    if not out:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0)
    return np.concatenate(out).astype(np.int64), np.concatenate(vals)


# ---------------------------------------------------------------------------------------------------------
# links, clusters, ĉ
# ---------------------------------------------------------------------------------------------------------


class _Candidates:
    """Candidate pairs (unique, i < j, inside the window) with cosine estimates ``cos`` and per-pair error
    bounds ``err`` (0 for float64 values computed here; a search's declared bound for its own values)."""

    def __init__(
        self, raw: np.ndarray, unit: np.ndarray | _RowUnit, pairs: np.ndarray, cos: np.ndarray | None, err: float = 0.0
    ):
        self.raw, self.unit, self.pairs = raw, unit, pairs
        if cos is None:
            cos = _pair_dots(unit, pairs)
            err = 0.0
        self.cos = np.asarray(cos, dtype=np.float64)
        self.err = np.full(self.cos.shape, float(err))

    def linked(self, theta: float) -> np.ndarray:
        """Exact link decision at θ for every candidate."""
        cos, err = self.cos, self.err
        linked = cos >= theta + err + MARGIN
        unsure = np.flatnonzero((cos > theta - err - MARGIN) & ~linked)
        if unsure.size:  # identical non-zero rows: cosine exactly 1 >= θ
            same = _same_rows(self.raw, self.pairs[unsure])
            linked[unsure[same]] = True
            unsure = unsure[~same]
        if unsure.size:
            rough = unsure[err[unsure] > 0]
            if rough.size:  # a search's estimate is too close to call: recompute it in float64 once
                cos[rough] = _pair_dots(self.unit, self.pairs[rough])
                err[rough] = 0.0
                linked[unsure] = cos[unsure] >= theta + MARGIN
                unsure = unsure[(cos[unsure] > theta - MARGIN) & ~linked[unsure]]
            if unsure.size:
                linked[unsure] = exact_links(self.raw, self.pairs[unsure], theta)
        return linked


def _pair_dots(unit: np.ndarray | _RowUnit, pairs: np.ndarray, chunk: int = 1 << 13) -> np.ndarray:
    out = np.empty(pairs.shape[0])
    for s in range(0, pairs.shape[0], chunk):
        p = pairs[s : s + chunk]
        out[s : s + chunk] = np.einsum("ij,ij->i", unit[p[:, 0]], unit[p[:, 1]])
    return out


def _candidates(
    raw: np.ndarray,
    unit: np.ndarray,
    theta_lo: float,
    window: int,
    positions: np.ndarray,
    search: Callable[..., Any] | None,  # a NeighbourSearch: its answer is validated here
    block: int = 1024,
) -> _Candidates:
    """Run the neighbour search at ``theta_lo`` and normalise its answer (validated, deduplicated,
    restricted to i < j inside the window)."""
    if search is None:  # our own search: pairs already i < j, unique, inside the window, float64 values
        pairs, cos = _window_search(unit, theta_lo, window, positions, block)
        return _Candidates(raw, unit, pairs, cos)
    res = search(unit, theta_lo, window, positions)
    values, err = None, 0.0
    if isinstance(res, tuple):
        if len(res) != 3:
            raise InvalidParameterError("search", "must return pairs or a tuple (pairs, values, error_bound)")
        res, values, err = res
        try:
            err = float(err)
        except (TypeError, ValueError):
            raise InvalidParameterError("search", "error_bound must be a real number", err) from None
        if not (err >= 0 and np.isfinite(err)):
            raise InvalidParameterError("search", "error_bound must be finite and >= 0", err)
    pairs = np.asarray(res)
    if pairs.size == 0:
        return _Candidates(raw, unit, np.zeros((0, 2), dtype=np.int64), None)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or not np.issubdtype(pairs.dtype, np.integer):
        raise InvalidParameterError("search", "must return an (m, 2) integer array of pairs", pairs.shape)
    if values is not None:
        values = np.asarray(values, dtype=np.float64)
        if values.shape != (pairs.shape[0],) or not np.isfinite(values).all():
            raise InvalidParameterError("search", "values must be finite, one per pair", values.shape)
    pairs = pairs.astype(np.int64)
    n = unit.shape[0]
    if pairs.min() < 0 or pairs.max() >= n:
        raise InvalidParameterError("search", "returned a pair index outside 0..n-1")
    i, j = np.minimum(pairs[:, 0], pairs[:, 1]), np.maximum(pairs[:, 0], pairs[:, 1])
    keep = np.flatnonzero((i < j) & (positions[j] - positions[i] <= window))
    key, first = np.unique(i[keep] * n + j[keep], return_index=True)
    pairs = np.stack([key // n, key % n], axis=1)
    return _Candidates(raw, unit, pairs, None if values is None else values[keep[first]], err)


def link_pairs(
    embeddings: np.ndarray,
    theta: float,
    window: int,
    block: int = 1024,
    *,
    positions: Sequence[int] | np.ndarray | None = None,
    search: NeighbourSearch | None = None,
) -> np.ndarray:
    """All linked pairs (i, j), i < j, ``pos_j - pos_i <= window`` and cos(e_i, e_j) >= θ exactly, as an
    (m, 2) int64 array sorted by (i, j). ``positions`` defaults to the row numbers."""
    raw = _check_embeddings(embeddings)
    theta = check_theta(theta)
    window = check_positive_int("window", window)
    block = check_positive_int("block", block)
    pos = check_positions(positions, raw.shape[0])
    unit = unit_rows(raw)
    cand = _candidates(raw, unit, theta - MARGIN, window, pos, search, block)
    links = cand.pairs[cand.linked(theta)]
    ordered: np.ndarray = links[np.lexsort((links[:, 1], links[:, 0]))]
    return ordered


def _components(n: int, pairs: np.ndarray) -> np.ndarray:
    if pairs.shape[0] == 0:
        return np.arange(n)
    g = coo_matrix((np.ones(pairs.shape[0], dtype=np.int8), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    labels: np.ndarray = connected_components(g, directed=False)[1]
    return labels


def _distinct_accounts(labels: np.ndarray, codes: np.ndarray, n_accounts: int) -> np.ndarray:
    """Number of distinct accounts of every component label (labels compact 0..L-1)."""
    key = np.unique(labels.astype(np.int64) * n_accounts + codes)
    counts: np.ndarray = np.bincount(key // n_accounts, minlength=int(labels.max()) + 1 if labels.size else 0)
    return counts


def _prepare(
    embeddings: npt.ArrayLike, accounts: Sequence[str], window: int | None, positions: npt.ArrayLike | None
) -> tuple[np.ndarray, np.ndarray, list[str], int, np.ndarray]:
    n = len(accounts) if hasattr(accounts, "__len__") else None
    raw = _check_embeddings(embeddings, n)
    codes, names = _account_codes(accounts, raw.shape[0])
    pos = check_positions(positions, raw.shape[0])
    window = resolve_window(window, pos, raw.shape[1])
    return raw, codes, names, window, pos


# ---------------------------------------------------------------------------------------------------------
# the auditor's parameters and the streaming estimator (bounded memory for any θ)
# ---------------------------------------------------------------------------------------------------------

#: The auditor's default link threshold (spec/estimator.md §8, from the measured detection table): verbatim
#: and one-token-edited probes of 8 colluders link at it wherever they sit in the audit window, while honest
#: traffic of 1,000 real questions exceeds k_max = 5 in 6% of windows (30% at θ = 0.90, which also links
#: small-noise jitter and ~60% of paraphrase coalitions). The auditor lowers it where honest traffic allows.
DEFAULT_THETA = 0.95
#: The auditor's default window: ``None`` = the whole audit window (every pair of query leaves), reduced
#: by ``default_window`` only when the window holds more pairs than ``DEFAULT_PAIR_DIM_BUDGET`` allows.
DEFAULT_WINDOW: int | None = None
#: pairs × dimension the default window may compare: every pair of 10^5 queries of 384-d (the time goal,
#: ≤ 90 s on 2 cores, spec/estimator.md §8); beyond it the default window shrinks to fit.
DEFAULT_PAIR_DIM_BUDGET = 5 * 10**9 * 384
#: float32 tiles of the streaming search hold at most this many similarities (16 MiB)
_TILE32 = 1 << 22


def float32_margin(dim: int) -> float:
    """Slack covering float32 conversion of unit float64 rows plus an any-order float32 dot product of
    dimension ``dim``: twice (dim + 2)·2^-24 (spec/estimator.md §3; the bound FAISS's search also uses)."""
    return 2.0 * (check_positive_int("dim", dim) + 2) * 2.0**-24


def band_pairs(positions: Sequence[int] | np.ndarray, window: int) -> int:
    """Number of pairs i < j with ``positions[j] - positions[i] <= window`` (positions strictly increasing)."""
    pos = check_positions(positions, len(positions))
    window = check_positive_int("window", window)
    ends = np.searchsorted(pos, pos + window, side="right")
    return int((ends - np.arange(pos.size) - 1).sum())


def default_window(positions: Sequence[int] | np.ndarray, dim: int, budget: int = DEFAULT_PAIR_DIM_BUDGET) -> int:
    """The default window for queries at ``positions``: the whole audit window (the span of the positions,
    so every pair is compared) when ``band_pairs · dim <= budget``, else the largest window that fits."""
    pos = check_positions(positions, len(positions))
    dim = check_positive_int("dim", dim)
    span = max(1, int(pos[-1] - pos[0])) if pos.size else 1
    if band_pairs(pos, span) * dim <= budget:
        return span
    lo, hi = 1, span  # band_pairs is non-decreasing in the window
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if band_pairs(pos, mid) * dim <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def resolve_window(window: int | None, positions: Sequence[int] | np.ndarray, dim: int) -> int:
    """``window`` checked, or ``default_window`` when it is None (``DEFAULT_WINDOW``)."""
    if window is None:
        return default_window(positions, dim)
    return check_positive_int("window", window)


class _RowUnit:
    """float64 unit rows computed on demand (the candidates decided in float64). Integer rows (the protocol's int16)
    are scaled by their inverse norms, computed once for every row (their squares sum exactly in float64)."""

    def __init__(self, raw: np.ndarray):
        self.raw = raw
        self._inv: np.ndarray | None = None

    def __getitem__(self, idx: Any) -> np.ndarray:
        raw = self.raw
        if not (np.issubdtype(raw.dtype, np.integer) and raw.dtype.itemsize <= 2):
            return unit_rows(raw[idx])
        if self._inv is None:
            inv = np.empty(raw.shape[0])
            for s in range(0, raw.shape[0], 8192):
                x = raw[s : s + 8192].astype(np.float64)
                inv[s : s + 8192] = np.sqrt(np.einsum("ij,ij->i", x, x))
            inv[inv == 0] = np.inf  # zero rows stay zero
            self._inv = 1.0 / inv
        out: np.ndarray = raw[idx].astype(np.float64) * self._inv[idx, None]
        return out


def _unit32(raw: np.ndarray, chunk: int = 8192) -> np.ndarray:
    out = np.empty(raw.shape, dtype=np.float32)
    for s in range(0, raw.shape[0], chunk):
        out[s : s + chunk] = unit_rows(raw[s : s + chunk])
    return out


def merge_components(labels: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """Union the components of ``labels`` joined by edges (a_k, b_k) (node ids), in place; each component
    keeps its smallest label."""
    la, lb = labels[a], labels[b]
    nodes, inv = np.unique(np.concatenate([la, lb]), return_inverse=True)
    k = nodes.size
    g = coo_matrix((np.ones(la.size, dtype=np.int8), (inv[: la.size], inv[la.size :])), shape=(k, k))
    comp = connected_components(g, directed=False)[1]
    smallest = np.full(comp.max() + 1, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(smallest, comp, nodes)
    idx = np.searchsorted(nodes, labels)
    idx[idx == k] = 0
    hit = nodes[idx] == labels
    labels[hit] = smallest[comp[idx[hit]]]


def max_accounts(labels: np.ndarray, codes: np.ndarray, n_acc: int) -> int:
    key = np.unique(labels * n_acc + codes)
    return int(np.bincount(key // n_acc).max())


def stream_components(
    raw: np.ndarray,
    codes: np.ndarray,
    n_acc: int,
    thetas: np.ndarray,
    window: int,
    pos: np.ndarray,
    *,
    saturate: bool = True,
    block: int = 1024,
    tile: int = _TILE32,
    start: int = 0,
    labels0: list[np.ndarray] | None = None,
    band: tuple[int, int] | None = None,
    sketch: np.ndarray | bool = True,
) -> tuple[list[np.ndarray], np.ndarray]:
    """Component labels and ĉ for every θ, in bounded memory.

    The band ``0 < pos_j - pos_i <= window`` is scanned in float32 tiles (``block`` rows × at most
    ``tile / block`` columns) at min θ - ``float32_margin(d)``, a superset of every link; each tile's
    candidates joining two different components are decided exactly (``_Candidates``: float32 value
    trusted outside its bound, else float64, else the integer rule) and merged at once, so nothing is
    kept between tiles but one label per query and θ: memory O(n·d·4 + G·n + tile) for any θ.
    With ``saturate``, a θ stops as soon as one component spans every account (ĉ cannot grow), and so do
    the θ below it (their components contain its).

    Incremental (the auditor's state, spec/protocol.md §8.14): ``labels0`` are the labels of rows ``[0, start)``
    from an earlier pass over them (each row from ``start`` on starts alone); only the pairs with ``j >= start``
    are scanned, so the result equals one pass over all rows. The unit rows are made per tile from ``raw``
    (no float32 copy of the matrix: memory O(n·d·2 + G·n + tile)). ``band``: scan only the pairs whose first row
    lies in ``band`` = ``[r0, r1)`` (one band of a distributed scan, ``scan.extend_components``).

    ``sketch`` (spec/estimator.md §10): True, the tiles compare the rows' ``sketch.sketch_rows`` (k + 1
    coordinates, an upper bound of every cosine) when that pays (``sketch.worth_it``), and only the pairs it keeps
    get their cosine in float64 and the exact decision; an array, those sketches (computed once by a caller that
    scans in bands); False, the float32 rows themselves. The labels are the same either way."""
    n, d = raw.shape
    G = thetas.size
    labels = [np.arange(n, dtype=np.int64) for _ in range(G)]
    if labels0 is not None:
        for lab, old in zip(labels, labels0, strict=True):
            lab[:start] = old[:start]
    c_hat = np.ones(G, dtype=np.int64)
    if labels0 is not None and start:
        c_hat = np.asarray([max_accounts(lab, codes, n_acc) for lab in labels], dtype=np.int64)
    if n_acc <= 1 or n < 2:
        return labels, np.minimum(c_hat, n_acc)
    order = np.argsort(-thetas, kind="stable")
    active = [int(g) for g in order]
    err = float32_margin(d)
    lo = float(thetas.min()) - err - MARGIN
    sk = _sketch_of(raw, sketch)
    if sk is not None:  # the sketch's products bound the cosines from above (spec/estimator.md §10)
        lo = float(thetas.min()) - float32_margin(sk.shape[1]) - SLACK - MARGIN
    thr = np.nextafter(np.float32(lo), np.float32(-np.inf))  # a float32 threshold <= lo
    lazy = _RowUnit(raw)
    b0, b1 = band if band is not None else (0, n)
    for s in range(b0, b1, block):
        t = min(b1, s + block)
        hi = int(np.searchsorted(pos, pos[t - 1] + window, side="right"))
        first = max(s, start)
        if hi <= first + (first == s):
            continue
        cols = max(256, tile // (t - s))
        chunk_rows = max(1, (1 << 18) // cols)  # at most 2^18 candidates decided at once
        dirty = set()
        rows32 = _unit32(raw[s:t]) if sk is None else sk[s:t]
        for c0 in range(first, hi, cols):
            c1 = min(hi, c0 + cols)
            if sk is not None:
                sims = rows32 @ sk[c0:c1].T
            else:
                sims = rows32 @ (rows32[c0 - s : c1 - s] if c0 == s and c1 <= t else _unit32(raw[c0:c1])).T
            rows = np.flatnonzero(sims.max(axis=1) >= thr)  # a max-reduction is far cheaper than nonzero
            for r0 in range(0, rows.size, chunk_rows):  # dense tiles (tiny θ) in slices: bounded memory
                sel = rows[r0 : r0 + chunk_rows]
                ri, jj = np.nonzero(sims[sel] >= thr)
                v = sims[sel[ri], jj].astype(np.float64)
                ii = sel[ri] + s
                jj += c0
                keep = (jj > ii) & (pos[jj] - pos[ii] <= window)
                if not keep.all():
                    ii, jj, v = ii[keep], jj[keep], v[keep]
                for g in active:
                    lab = labels[g]
                    m = np.flatnonzero(lab[ii] != lab[jj])
                    if m.size == 0:
                        continue
                    pairs = np.stack([ii[m], jj[m]], axis=1)
                    cos = None if sk is not None else v[m]  # a sketch's value bounds, it does not estimate
                    linked = _Candidates(raw, lazy, pairs, cos, err).linked(float(thetas[g]))
                    if linked.any():
                        merge_components(lab, pairs[linked, 0], pairs[linked, 1])
                        dirty.add(g)
        for g in [g for g in active if g in dirty]:
            c_hat[g] = max(c_hat[g], max_accounts(labels[g], codes, n_acc))
        if saturate:
            full = [g for g in active if c_hat[g] == n_acc]
            if full:  # the highest saturated θ: every lower θ is saturated too
                first = min(active.index(g) for g in full)
                for g in active[first:]:
                    c_hat[g] = n_acc
                active = active[:first]
                if not active:
                    break
    return labels, c_hat


def _sketch_of(raw: np.ndarray, sketch: np.ndarray | bool) -> np.ndarray | None:
    if isinstance(sketch, np.ndarray):
        if sketch.shape[0] != raw.shape[0] or sketch.dtype != np.float32:
            raise InvalidParameterError("sketch", "must be float32 with one row per row of the matrix", sketch.shape)
        return sketch
    return sketch_rows(raw) if sketch and worth_it(raw.shape[1]) else None


def coalition_clusters(
    embeddings: np.ndarray,
    accounts: Sequence[str],
    theta: float = DEFAULT_THETA,
    window: int | None = DEFAULT_WINDOW,
    *,
    positions: Sequence[int] | None = None,
    search: NeighbourSearch | None = None,
) -> list[set[str]]:
    """The distinct-account sets of every cluster that spans >= 2 accounts, ordered by the cluster's
    earliest query."""
    raw, codes, names, window, pos = _prepare(embeddings, accounts, window, positions)
    theta = check_theta(theta)
    n = raw.shape[0]
    if n == 0:
        return []
    if search is None:
        labels = stream_components(raw, codes, len(names), np.asarray([theta]), window, pos, saturate=False)[0][0]
        labels = np.unique(labels, return_inverse=True)[1].reshape(-1)
    else:
        labels = _components(n, link_pairs(raw, theta, window, positions=pos, search=search))
    sizes = _distinct_accounts(labels, codes, len(names))
    big = np.flatnonzero(sizes >= 2)
    if big.size == 0:
        return []
    first = np.full(sizes.shape[0], n, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(n))
    out = []
    for lab in big[np.argsort(first[big], kind="stable")]:
        out.append({names[c] for c in np.unique(codes[labels == lab]).tolist()})
    return out


def component_labels(
    embeddings: np.ndarray,
    accounts: Sequence[str],
    thetas: Sequence[float],
    window: int | None = DEFAULT_WINDOW,
    *,
    positions: Sequence[int] | None = None,
) -> np.ndarray:
    """(G, n) int64: for every θ of ``thetas`` (same order), each query's cluster label (the smallest row
    index of its cluster), from one streamed pass (bounded memory; the default exact search)."""
    raw, codes, names, window, pos = _prepare(embeddings, accounts, window, positions)
    th = np.asarray(
        [check_theta(t, "thetas") for t in np.atleast_1d(np.asarray(thetas, dtype=object))], dtype=np.float64
    )
    if th.size == 0:
        raise InvalidParameterError("thetas", "must not be empty")
    if raw.shape[0] == 0:
        return np.zeros((th.size, 0), dtype=np.int64)
    labels = stream_components(raw, codes, max(len(names), 2), th, window, pos, saturate=False)[0]
    return np.stack(labels)


def coalition_size(
    embeddings: np.ndarray,
    accounts: Sequence[str],
    theta: float = DEFAULT_THETA,
    window: int | None = DEFAULT_WINDOW,
    *,
    positions: Sequence[int] | None = None,
    search: NeighbourSearch | None = None,
) -> int:
    """ĉ: the largest number of distinct accounts in one cluster (1 if no cluster spans two accounts,
    0 if there are no queries)."""
    theta = check_theta(theta)
    return int(coalition_size_curve(embeddings, accounts, [theta], window, positions=positions, search=search)[0])


def coalition_size_curve(
    embeddings: np.ndarray,
    accounts: Sequence[str],
    thetas: Sequence[float],
    window: int | None = DEFAULT_WINDOW,
    *,
    positions: Sequence[int] | None = None,
    search: NeighbourSearch | None = None,
) -> np.ndarray:
    """ĉ(θ) for every θ in ``thetas`` (same order), from at most four candidate searches.

    Equal, θ by θ, to ``coalition_size`` (tested). Clusters are nested in θ (a link at θ is a link at every
    θ' < θ), so θ is processed from high to low and each level only merges the components of the level
    above with the links that appear at it.
    """
    raw, codes, names, window, pos = _prepare(embeddings, accounts, window, positions)
    th = np.asarray(
        [check_theta(t, "thetas") for t in np.atleast_1d(np.asarray(thetas, dtype=object))], dtype=np.float64
    )
    if th.size == 0:
        raise InvalidParameterError("thetas", "must not be empty")
    n = raw.shape[0]
    out = np.zeros(th.size, dtype=np.int64)
    if n == 0:
        return out
    if search is None:  # the default: streamed, bounded memory for any θ
        return stream_components(raw, codes, len(names), th, window, pos)[1]
    unit = unit_rows(raw)
    n_acc = len(names)
    order = np.argsort(-th, kind="stable")
    # Up to four passes, from the highest θ down, each with candidates at its lowest θ; once the clusters
    # span every account, ĉ is n_acc at every lower θ too (monotonicity) and the (much larger) candidate
    # sets of the lower θ are never built.
    step = -(-order.size // 4)
    stages = [order[i : i + step] for i in range(0, order.size, step)]
    labels = np.arange(n)
    prev = None  # the lowest θ already applied; links are monotone in θ, so those at prev are applied
    for stage in stages:
        if stage.size == 0:
            continue
        cand = _candidates(raw, unit, float(th[stage].min()) - MARGIN, window, pos, search)
        pairs = cand.pairs
        done = cand.linked(prev) if prev is not None else np.zeros(pairs.shape[0], dtype=bool)
        for g in stage:
            linked = cand.linked(float(th[g]))
            new = linked & ~done
            if new.any():
                done |= new
                band = labels[pairs[new]]
                labels = _components(int(labels.max()) + 1, band)[labels]
            out[g] = max(int(_distinct_accounts(labels, codes, n_acc).max()), 1)
        prev = float(th[stage[-1]])
        if out[stage[-1]] == n_acc:  # saturated: every lower θ gives n_acc as well
            rest = order[np.flatnonzero(order == stage[-1])[0] + 1 :]
            out[rest] = n_acc
            break
    return out
