"""Budget store interface: per-document spend rows in exact integer units, charged conditionally.

A budget store holds, for every document ``z`` in ``0..n_docs-1``, a row of ``width`` non-negative
int64 counters ``spent[z, j]`` (one per Rényi order of the filter, or a single counter in pure-ε mode),
and a row of limits ``limits[j]`` shared by all documents. It knows nothing about privacy: the
individual Rényi filter (``accounting.filters``) converts costs and budgets to integer units and binds
the store to its budget; the store only applies *conditional* charges atomically:

    a request (ids, cost) admits document z  iff  spent[z, j] + cost[j] <= limits[j] for every j,
    and then (and only then) adds cost to spent[z].

``charge_many`` applies a list of requests in order, each document of each request admitted or refused
independently, all of them in one atomic step (one transaction for a durable store): either every
admitted document's spend is recorded, or — on any error — nothing is. A durable store returns only
once that step is durable, so a caller may release output that depends on the admitted documents as
soon as ``charge_many`` returns, and never before.

Invariant kept by every store: ``0 <= spent[z, j] <= limits[j]`` (charges only ever apply when the
result stays within the limit). With limits <= 2**62 - 1 and costs capped at limit + 1 by the filter,
``spent + cost <= 2**63 - 1``: the int64 arithmetic cannot overflow (see spec/accounting/filters.md).

Validation (``validate_doc_ids``, ``validate_cost_units``) happens before any state is touched; a bad
request anywhere in a batch rejects the whole batch with a typed error and changes nothing.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Self, cast

import numpy as np
import numpy.typing as npt

from dprag.errors import DpragError, InvalidParameterError, UnknownDocumentError

from ..errors import check_positive_int

#: Largest admissible limit in units; with costs capped at limit + 1 the sum stays <= 2**63 - 1.
MAX_LIMIT_UNITS = 2**62 - 1


class BudgetStoreError(DpragError):
    """The store could not complete an operation (busy beyond its timeout, corrupt, closed, I/O error).

    Raised after the operation was rolled back: nothing was charged.
    """


def validate_doc_ids(
    doc_ids: npt.ArrayLike, n_docs: int, *, field: str = "doc_ids", allow_duplicates: bool = False
) -> npt.NDArray[np.int64]:
    """Return ``doc_ids`` as a 1-d int64 array after checking every rule, else raise a typed error.

    Rules: a non-empty 1-d sequence of integers (bools and floats are refused, even integral floats);
    every id in ``0..n_docs-1`` (``UnknownDocumentError`` otherwise); no id twice unless
    ``allow_duplicates`` (a document is charged at most once per request — pass it once with the
    request's total cost).
    """
    try:
        arr = np.asarray(doc_ids)
    except (OverflowError, ValueError, TypeError):
        raise InvalidParameterError(field, "must be a 1-d sequence of integer document ids") from None
    if arr.dtype == object:
        # Python ints too large for int64 land here; anything else non-integer is refused below.
        items = arr.ravel().tolist() if arr.ndim else [arr.item()]
        if not (arr.ndim == 1 and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items)):
            raise InvalidParameterError(field, "must be a 1-d sequence of integer document ids")
        bad = [int(v) for v in items if v < 0 or v >= n_docs]
        if bad:
            raise UnknownDocumentError(bad[:20], n_docs)
        arr = np.asarray(items, dtype=np.int64)
    if arr.ndim != 1:  # scalars and strings arrive here as 0-d arrays
        raise InvalidParameterError(
            field, "must be a 1-d sequence of integer document ids", doc_ids if arr.ndim == 0 else f"shape {arr.shape}"
        )
    if arr.size == 0:
        raise InvalidParameterError(field, "must not be empty")
    if arr.dtype.kind not in "iu":
        raise InvalidParameterError(field, f"must contain integers only (got dtype {arr.dtype})")
    lo, hi = arr.min(), arr.max()
    if lo < 0 or hi >= n_docs:
        bad_ids = arr[(arr < 0) | (arr >= n_docs)]
        raise UnknownDocumentError([int(v) for v in bad_ids[:20]], n_docs)
    ids = arr.astype(np.int64, copy=False)
    if not allow_duplicates and ids.size > 1:
        s = np.sort(ids)
        dup = s[1:][s[1:] == s[:-1]]
        if dup.size:
            raise InvalidParameterError(
                field,
                "must not contain duplicates (a document is charged at most once per request; "
                "pass it once with the request's total cost)",
                sorted(set(int(v) for v in dup[:10])),
            )
    return ids


def validate_cost_units(cost: npt.ArrayLike, width: int, *, field: str = "cost") -> npt.NDArray[np.int64]:
    """Return a cost row as int64 of shape (width,), every entry >= 0, else raise InvalidParameterError."""
    arr = np.asarray(cost)
    if arr.dtype.kind not in "iu":
        raise InvalidParameterError(field, "store costs must be integer units (int64)", f"dtype {arr.dtype}")
    if arr.shape != (width,):
        raise InvalidParameterError(field, f"must have shape ({width},)", f"shape {arr.shape}")
    if np.any(arr < 0):
        raise InvalidParameterError(field, "every unit count must be >= 0")
    if arr.dtype.kind == "u" and np.any(arr > np.uint64(2**63 - 1)):
        raise InvalidParameterError(field, "every unit count must fit in int64")
    return arr.astype(np.int64, copy=False)


def validate_limits(limits: npt.ArrayLike) -> npt.NDArray[np.int64]:
    arr = np.asarray(limits)
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu":
        raise InvalidParameterError("limits", "must be a non-empty 1-d array of integer units")
    if np.any(arr < 0) or np.any(arr > MAX_LIMIT_UNITS):
        raise InvalidParameterError("limits", f"every limit must lie in [0, {MAX_LIMIT_UNITS}] units")
    return arr.astype(np.int64)


def canonical_descriptor(descriptor: Mapping[str, Any]) -> str:
    """Canonical JSON of a binding descriptor (sorted keys, no spaces), compared byte for byte."""
    try:
        return json.dumps(descriptor, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError("descriptor", f"must be JSON-serialisable without NaN/inf ({exc})") from None


class PreparedBatch:
    """A validated batch: the union of its ids (distinct, in no particular order) and, per request,
    the positions of that request's ids in the union."""

    __slots__ = ("union", "positions", "costs")
    union: npt.NDArray[np.int64]
    positions: list[npt.NDArray[np.intp]]
    costs: list[npt.NDArray[np.int64]]

    def __init__(
        self,
        requests: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]],
        n_docs: int,
        width: int,
        *,
        validated: bool = False,
    ) -> None:
        if validated:  # built by a caller that already validated every id list and cost row (int64 arrays)
            self._build(
                [cast(npt.NDArray[np.int64], ids) for ids, _ in requests],
                [cast(npt.NDArray[np.int64], c) for _, c in requests],
            )
            return
        if not isinstance(requests, (list, tuple)):
            raise InvalidParameterError("requests", "must be a list of (doc_ids, cost) pairs")
        if len(requests) == 0:
            raise InvalidParameterError("requests", "must not be empty")
        ids_list: list[npt.NDArray[np.int64]] = []
        costs: list[npt.NDArray[np.int64]] = []
        for i, req in enumerate(requests):
            try:
                ids, cost = req
            except (TypeError, ValueError):
                raise InvalidParameterError(f"requests[{i}]", "must be a (doc_ids, cost) pair") from None
            ids_list.append(validate_doc_ids(ids, n_docs, field=f"requests[{i}].doc_ids"))
            costs.append(validate_cost_units(cost, width, field=f"requests[{i}].cost"))
        self._build(ids_list, costs)

    def _build(self, ids_list: list[npt.NDArray[np.int64]], costs: list[npt.NDArray[np.int64]]) -> None:
        self.costs = costs
        if len(ids_list) == 1:  # fast path: the ids of one request are already distinct
            self.union = ids_list[0]
            self.positions = [np.arange(ids_list[0].size)]
            return
        allids = np.concatenate(ids_list)
        union, inverse = np.unique(allids, return_inverse=True)
        bounds = np.cumsum([0] + [len(a) for a in ids_list])
        self.union = union
        self.positions = [inverse[bounds[k] : bounds[k + 1]] for k in range(len(ids_list))]


def apply_batch(
    current: npt.NDArray[np.int64], batch: PreparedBatch, limits: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], list[npt.NDArray[np.bool_]]]:
    """Apply a prepared batch, in order, to ``current`` rows (one per id of ``batch.union``).

    Returns ``(new_rows, masks)``: the rows after every admitted charge and, per request, a boolean
    admission mask aligned with that request's ids. Pure function: ``current`` is not modified, so a
    store can compute everything first and write the result in one step.
    """
    rows = current.copy()
    masks: list[npt.NDArray[np.bool_]] = []
    for pos, cost in zip(batch.positions, batch.costs, strict=False):
        cand = rows[pos] + cost  # ids within a request are distinct, so this gather/scatter is exact
        ok = np.all(cand <= limits, axis=1)
        if ok.any():
            rows[pos[ok]] = cand[ok]
        masks.append(ok)
    return rows, masks


class BudgetStore(abc.ABC):
    """Abstract budget store over documents ``0..n_docs-1`` (see module docstring)."""

    def __init__(self, n_docs: int):
        self._n_docs = check_positive_int("n_docs", n_docs)
        self._limits: npt.NDArray[np.int64] | None = None
        self._descriptor: str | None = None

    # -- binding ---------------------------------------------------------------------------------
    @property
    def n_docs(self) -> int:
        return self._n_docs

    @property
    def width(self) -> int | None:
        """Number of counters per document (None until bound)."""
        return None if self._limits is None else int(self._limits.size)

    @property
    def limits(self) -> npt.NDArray[np.int64]:
        return self._require_bound().copy()

    @property
    def descriptor(self) -> str | None:
        return self._descriptor

    def bind(self, limits: npt.ArrayLike, descriptor: Mapping[str, Any]) -> None:
        """Bind the store to ``limits`` (int units, one per counter) described by ``descriptor``.

        Binding is permanent for a durable store: reopening it with a different descriptor (another
        budget, grid of orders, unit or mode) raises ``InvalidParameterError`` — spend recorded under one
        budget must never be reinterpreted under another. Rebinding with the same descriptor is a no-op.
        """
        lim = validate_limits(limits)
        desc = canonical_descriptor(dict(descriptor, limits=[int(v) for v in lim]))
        if self._descriptor is not None:
            if desc != self._descriptor:
                raise InvalidParameterError("budget", "store is already bound to a different budget/orders")
            return
        self._bind(lim, desc)
        self._limits = lim
        self._descriptor = desc

    def _require_bound(self) -> npt.NDArray[np.int64]:
        """The limits, or ``BudgetStoreError`` if the store is not bound yet."""
        if self._limits is None:
            raise BudgetStoreError("store is not bound to a budget yet (construct a filter over it first)")
        return self._limits

    # -- operations ------------------------------------------------------------------------------
    def load(self, doc_ids: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Spend rows (int64 units, shape (len(doc_ids), width)) of the given documents; duplicates allowed."""
        self._require_bound()
        ids = validate_doc_ids(doc_ids, self._n_docs, allow_duplicates=True)
        return self._load(ids)

    def charge(self, doc_ids: npt.ArrayLike, cost_units: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Conditionally charge one request; returns the admission mask aligned with ``doc_ids``."""
        return self.charge_many([(doc_ids, cost_units)])[0]

    def charge_validated(
        self, requests: Sequence[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]
    ) -> list[npt.NDArray[np.bool_]]:
        """``charge_many`` for callers that have already validated the batch (the filter does): ids as
        distinct in-range int64 arrays, costs as non-negative int64 rows of the store's width."""
        limits = self._require_bound()
        return self._charge(PreparedBatch(requests, self._n_docs, int(limits.size), validated=True))

    def charge_many(self, requests: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]]) -> list[npt.NDArray[np.bool_]]:
        """Apply ``[(doc_ids, cost_units), ...]`` in order, atomically (and durably, for durable stores).

        Each document of each request is admitted iff its spend plus the cost stays within the limits
        at every counter, given every earlier admitted charge (including earlier requests of the batch).
        """
        limits = self._require_bound()
        batch = PreparedBatch(requests, self._n_docs, int(limits.size))
        return self._charge(batch)

    def close(self) -> None:  # noqa: B027 - a no-op default, not abstract
        """Release resources (no-op by default)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False

    # -- to implement ----------------------------------------------------------------------------
    @abc.abstractmethod
    def _bind(self, limits: npt.NDArray[np.int64], descriptor: str) -> None:
        """Record the binding (durably, for a durable store) or check it matches the recorded one."""

    @abc.abstractmethod
    def _load(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Rows for validated ids."""

    @abc.abstractmethod
    def _charge(self, batch: PreparedBatch) -> list[npt.NDArray[np.bool_]]:
        """Atomically apply a validated batch (use ``apply_batch``)."""


__all__ = [
    "MAX_LIMIT_UNITS",
    "BudgetStore",
    "BudgetStoreError",
    "PreparedBatch",
    "apply_batch",
    "canonical_descriptor",
    "validate_cost_units",
    "validate_doc_ids",
    "validate_limits",
]
