"""Individual Rényi filter over a corpus of documents (Feldman & Zrnic 2021), in exact integer units.

MuRAG and MuRAG-Ada (paper 000, Alg. 1–2; paper 001, Alg. 1–2) give every document z an individual
budget E(z) = M·ε_q and charge a document only when it is retrieved — every document that passes the
relevance threshold τ (or a released prefix-sum bin), not only the top-k that are then used. A document
whose budget cannot cover a charge is left out of that step and of every later step it cannot afford.
Their privacy proofs (000 App. C; 001 App. D) rest on Feldman & Zrnic 2021 (FZ), Thm 3.1/Cor. 3.3:
if, for a fixed order α, every individual's accumulated individual RDP of the steps it took part in never
exceeds B(α), the whole adaptive interaction is (α, B(α))-RDP for that individual.

This module implements that filter for documents 0..N-1 over a budget store (``accounting.stores``):

* **RDP mode** — the budget is a curve B(α) over a grid of orders; a cost is a privacy event (converted
  with ``accounting.rdp.rdp_curve``) or a pre-computed curve. **Admission rule: a document is admitted iff
  spent(α) + cost(α) <= B(α) for EVERY order α of the grid.** Then the FZ condition holds at every order
  simultaneously, the interaction is (α, B(α))-RDP for all α at once, and the ex-ante guarantee
  ``guarantee(δ)`` may convert at whichever order is best (spec/accounting/filters.md, "Validity").
* **pure-ε mode** — the budget is a single ε; costs are pure-DP ε's (α = ∞; the basic-composition filter
  of Rogers et al. 2016 / FZ at α = ∞): the literal E(z) = M·ε_q accounting of 000/001 Alg. 1–2, with
  guarantee (M·ε_q, 0).

``FilterBudget.for_queries(M, per_query)`` builds the "M retrievals of a per-query mechanism" budget:
B = M × (cost of one per-query charge, in units), so exactly M such charges are admitted (in RDP mode,
B(α) = M·ρ_q(α) with ρ_q the per-query RDP curve — the natural RDP reading of E(z) = M·ε_q).

Units: spend and budgets are int64 multiples of 2**-32 nats. A cost c becomes ceil(c·2^32) units (never
below c; costs already on the grid, like 1.0 or 0.25, are charged exactly); a budget becomes floor(B·2^32)
units. Admission is then exact integer arithmetic: no sequence of charges can overspend through rounding
(e.g. ten charges of 0.1 against a budget of 1.0: the tenth is refused, because 10 × float(0.1) > 1
exactly; ``FilterBudget.for_queries(10, 0.1)`` admits exactly ten). Events with only an (ε, δ) or a
δ-approximate RDP guarantee are refused with ``UnsupportedEventError`` (FZ's theorem is for exact RDP).

Caller's obligations (spec/accounting/filters.md §3): charge every document the step may touch — chosen by
public information and each document's own record only (e.g. a fixed threshold), never by other
documents' data; use exactly the admitted documents; release nothing that depends on them before
``try_charge`` returns (it returns after the charge is durable, for a durable store) or if it raised.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeGuard, cast

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError, UnsupportedEventError

from .errors import check_delta, check_epsilon, check_positive_int
from .events import (
    ApproxDpEvent,
    ApproxRdpEvent,
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    ExponentialMechanismEvent,
    GaussianEvent,
    LaplaceEvent,
    NoOpEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    PureDpEvent,
    RdpCurveEvent,
    SelfComposedEvent,
)
from .rdp import additive_delta, as_orders, pure_dp_rdp, rdp_curve, rdp_to_epsilon, sampler_tv
from .rounding import bound_up, mul_up, outward, sum_up
from .stores.base import MAX_LIMIT_UNITS, BudgetStore, validate_doc_ids

#: Spend unit: 2**-UNIT_BITS nats. Scaling a float by 2**32 is exact, so unit conversion adds no error.
UNIT_BITS = 32
UNIT = math.ldexp(1.0, -UNIT_BITS)
#: Largest budget (nats) at any order: MAX_LIMIT_UNITS units, just under 2**30 ≈ 1.07e9 nats.
MAX_BUDGET = math.nextafter(2.0**30, 0.0)  # largest float budget whose units stay <= MAX_LIMIT_UNITS
_UNITS_CEILING = float(2**62)  # costs at or above this many units are "never admissible" (capped)

PURE = "pure"
RDP = "rdp"
_FILTER_FORMAT = "individual-renyi-filter/1"

#: What a filter charges: a PrivacyEvent, a real ε (pure mode) or an RDP curve (one value per order).
Cost: TypeAlias = "PrivacyEvent | npt.ArrayLike"


# ---------------------------------------------------------------------------------------------------
# Units
# ---------------------------------------------------------------------------------------------------
def cost_to_units(values: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Round costs (nats, >= 0, may be +inf) UP to int64 units: ceil(c·2^32).

    The float cost is scaled by 2^32 exactly (a power of two) and rounded up, so the charged amount is
    never below the cost as given, and a cost that is already a multiple of 2^-32 (1.0, 0.25, …) is
    charged exactly. Every c > 0 costs at least one unit. Costs of 2**62 units or more (including +inf)
    map to 2**62; the filter caps every cost at limit + 1, which keeps every admission decision and
    bounds spent + cost by 2**63 - 1.
    """
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore"):
        scaled = np.ldexp(v, UNIT_BITS)  # exact, or +inf on overflow
    big = scaled >= _UNITS_CEILING
    units = np.ceil(np.where(big, 0.0, scaled)).astype(np.int64)  # integral floats < 2^62 convert exactly
    return np.where(big, np.int64(2**62), units).astype(np.int64)


def budget_to_units(values: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Round budgets (nats, finite, >= 0) DOWN to int64 units: floor(B·2^32)."""
    v = np.asarray(values, dtype=np.float64)
    if np.any(~np.isfinite(v)) or np.any(v < 0):
        raise InvalidParameterError("budget", "every value must be finite and >= 0")
    if np.any(v > MAX_BUDGET):
        raise InvalidParameterError("budget", f"every value must be <= {MAX_BUDGET:.6g} nats (int64 unit headroom)")
    return np.floor(np.ldexp(v, UNIT_BITS)).astype(np.int64)


def units_to_nats(units: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Units to float nats (exact below 2**53 units; nearest float above)."""
    return np.ldexp(np.asarray(units, dtype=np.int64).astype(np.float64), -UNIT_BITS)


def _units_to_nats_up(units: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Units to float nats, rounded up where the conversion is inexact (for certified guarantees)."""
    out = []
    for u in np.asarray(units, dtype=np.int64).tolist():
        f = float(u)
        if int(f) < u:
            f = math.nextafter(f, math.inf)
        out.append(math.ldexp(f, -UNIT_BITS))
    return np.asarray(out, dtype=np.float64)


def nats_up(units: int) -> float:
    """``units``·2^-32 as the smallest float >= it (the certified value of an integer number of units)."""
    return float(_units_to_nats_up([int(units)])[0])


# ---------------------------------------------------------------------------------------------------
# Pure-DP epsilon of an event (α = ∞)
# ---------------------------------------------------------------------------------------------------
@functools.singledispatch
def pure_epsilon(event: PrivacyEvent) -> float:
    """ε such that ``event`` is ε-DP (pure), or ``UnsupportedEventError`` if it has no pure guarantee.

    Mechanism modules that add event types may register theirs with ``@pure_epsilon.register``.
    """
    raise UnsupportedEventError(
        f"{type(event).__name__} has no pure-DP guarantee; a pure-ε filter cannot count it (use an RDP filter)"
    )


@pure_epsilon.register
def _(event: NoOpEvent) -> float:
    return 0.0


@pure_epsilon.register(PureDpEvent)
@pure_epsilon.register(LaplaceEvent)
@pure_epsilon.register(DiscreteLaplaceEvent)
@pure_epsilon.register(ExponentialMechanismEvent)
def _(event: PureDpEvent | LaplaceEvent | DiscreteLaplaceEvent | ExponentialMechanismEvent) -> float:
    return float(event.epsilon)


@pure_epsilon.register
def _(event: ApproxDpEvent) -> float:
    if event.delta > 0:
        raise UnsupportedEventError(
            "ApproxDpEvent with delta > 0 is only (ε,δ)-DP (e.g. LimitedDomain): neither a pure-ε nor an "
            "individual Rényi filter can count it — FZ's filter theorem needs an RDP curve, and a δ per "
            "charge is not an RDP bound. Use a mechanism with a pure or RDP guarantee."
        )
    return float(event.epsilon)


@pure_epsilon.register
def _(event: ApproxRdpEvent) -> float:
    raise UnsupportedEventError(
        "ApproxRdpEvent (δ-approximate RDP, e.g. propose-test-release) has no pure-DP guarantee"
    )


@pure_epsilon.register
def _(event: GaussianEvent) -> float:
    raise UnsupportedEventError("GaussianEvent is not pure DP; count Gaussian noise with an RDP filter")


@pure_epsilon.register
def _(event: DiscreteGaussianEvent) -> float:
    raise UnsupportedEventError("DiscreteGaussianEvent is not pure DP; count it with an RDP filter")


@pure_epsilon.register
def _(event: RdpCurveEvent) -> float:
    raise UnsupportedEventError("RdpCurveEvent carries an RDP curve only; count it with an RDP filter")


@pure_epsilon.register
def _(event: ComposedEvent) -> float:
    return sum_up(*(pure_epsilon(e) for e in event.events))  # basic composition, rounded up


@pure_epsilon.register
def _(event: SelfComposedEvent) -> float:
    # count·ε exactly, rounded up: the float product rounds to nearest and can be one ulp below it
    return 0.0 if event.count == 0 else mul_up(pure_epsilon(event.event), event.count)


@pure_epsilon.register
def _(event: PoissonSampledEvent) -> float:
    # Amplification by Poisson subsampling of an ε-DP mechanism, add/remove relation:
    # log(1 + p(e^ε − 1)) (Li–Qardaji–Su 2012; Balle–Barthe–Gaboardi 2018, Thm 8).
    eps = pure_epsilon(event.event)
    p = float(event.sampling_probability)
    if p == 0.0 or eps == 0.0:
        return 0.0
    if eps >= 700.0:  # e^ε overflows; ε itself is an upper bound (amplification never increases ε)
        return eps
    # rounded outward (rounding.bound_up): y = p·expm1(ε) is within (K + 2u) relative of p(e^ε − 1), which moves
    # log1p by <= (K + 2u)·y/(1 + y) <= (K + 2u)·min(1, y); log1p adds K·|result| (K = 2^-49, u = 2^-53)
    y = p * math.expm1(eps)
    amplified = math.log1p(y)
    return min(eps, bound_up(amplified, amplified + min(1.0, y)))


# ---------------------------------------------------------------------------------------------------
# RDP curve of a cost, refusing events outside the filter's theorem
# ---------------------------------------------------------------------------------------------------
def refuse_delta_events(event: PrivacyEvent) -> None:
    """Raise ``UnsupportedEventError`` if any part of ``event`` carries a δ (the filter counts exact costs).

    Walks compositions, self-compositions, Poisson subsampling and δ = 0 approximate-RDP wrappers.
    An ``ApproxDpEvent`` with δ > 0 (only (ε,δ)-DP, e.g. LimitedDomain) has no RDP curve; an
    ``ApproxRdpEvent`` with δ > 0 (δ-approximate RDP, e.g. propose-test-release) or a sampler with TV
    distance > 0 holds its curve only outside a failure event of probability δ. FZ's filter theorem composes
    exact RDP (or pure-DP) bounds, and dprag proves no per-individual filter that also adds such δs.
    """
    if isinstance(event, ApproxDpEvent):
        if event.delta > 0:
            raise UnsupportedEventError(
                "ApproxDpEvent with delta > 0 is only (ε,δ)-DP (e.g. LimitedDomain): the individual Rényi filter "
                "(Feldman–Zrnic) needs an RDP or pure-DP cost, and a per-charge δ is not one. Use a mechanism with "
                "a pure or RDP guarantee (e.g. the exponential mechanism instead of LimitedDomain)."
            )
        return
    if isinstance(event, ApproxRdpEvent):
        if event.delta > 0:
            raise UnsupportedEventError(
                "ApproxRdpEvent with delta > 0 (δ-approximate RDP, e.g. propose-test-release) is refused: the "
                "individual Rényi filter (Feldman–Zrnic) is proven for exact RDP costs only, and this event's "
                "curve fails with probability δ."
            )
        refuse_delta_events(event.event)
        return
    if isinstance(event, ComposedEvent):
        for e in event.events:
            refuse_delta_events(e)
        return
    if isinstance(event, (SelfComposedEvent, PoissonSampledEvent)):
        refuse_delta_events(event.event)
        return
    if additive_delta(event) > 0 or sampler_tv(event) > 0:
        raise UnsupportedEventError(
            f"{type(event).__name__} carries an additive δ (approximate RDP or an inexact sampler, TV > 0); "
            "the individual Rényi filter counts exact RDP costs only"
        )


def _curve(event: PrivacyEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    if isinstance(event, ApproxDpEvent):  # δ = 0 here: pure ε-DP
        return pure_dp_rdp(event.epsilon, orders)
    if isinstance(event, ApproxRdpEvent):  # δ = 0 here
        return _curve(event.event, orders)
    if isinstance(event, ComposedEvent):
        total = np.zeros(len(orders))
        for e in event.events:
            total = total + _curve(e, orders)
        return total
    if isinstance(event, SelfComposedEvent):
        return np.zeros(len(orders)) if event.count == 0 else event.count * _curve(event.event, orders)
    return np.asarray(rdp_curve(event, orders), dtype=np.float64)


def filter_rdp_curve(event: PrivacyEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """RDP curve of ``event`` for the filter: ``accounting.rdp.rdp_curve`` (sum over compositions), after
    ``refuse_delta_events``; ``ApproxDpEvent(ε, 0)`` gets the ε-DP curve."""
    refuse_delta_events(event)
    return _curve(event, orders)


def _check_values(field: str, vals: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    if np.any(np.isnan(vals)):
        raise InvalidParameterError(field, "must not be NaN")
    if np.any(vals < 0):
        raise InvalidParameterError(field, "must be >= 0 at every order")
    return vals


def _is_real(x: object) -> TypeGuard[float]:
    """A real number (``numbers.Real``: int, float, numpy scalars), bools excluded: usable as a float."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and not isinstance(x, np.bool_)


# ---------------------------------------------------------------------------------------------------
# Budget
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FilterBudget:
    """A per-document budget in integer units: ``mode`` "pure" (one ε) or "rdp" (a curve over ``orders``).

    Build with ``FilterBudget.pure(ε)``, ``FilterBudget.rdp(curve_or_event, orders)`` or
    ``FilterBudget.for_queries(M, per_query, ...)``.
    """

    mode: str
    orders: tuple[float, ...] | None
    units: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.mode not in (PURE, RDP):
            raise InvalidParameterError("mode", "must be 'pure' or 'rdp'", self.mode)
        units = tuple(int(u) for u in self.units)
        if not units or any(u < 0 or u > MAX_LIMIT_UNITS for u in units):
            raise InvalidParameterError("budget", f"every limit must lie in [0, {MAX_LIMIT_UNITS}] units")
        object.__setattr__(self, "units", units)
        if self.mode == PURE:
            if self.orders is not None or len(units) != 1:
                raise InvalidParameterError("budget", "a pure-ε budget is a single value and has no orders")
        else:
            orders = tuple(float(a) for a in as_orders(self.orders))
            if len(orders) != len(units):
                raise InvalidParameterError("budget", "an RDP budget needs one value per order")
            if len(set(orders)) != len(orders):
                raise InvalidParameterError("orders", "must not repeat an order")
            object.__setattr__(self, "orders", orders)

    # constructors ------------------------------------------------------------------------------------
    @classmethod
    def pure(cls, epsilon: float) -> FilterBudget:
        """Pure-ε budget: admits charges while the sum of pure-DP ε's stays <= ``epsilon``."""
        eps = check_epsilon("budget", epsilon)
        return cls(PURE, None, tuple(budget_to_units([eps]).tolist()))

    @classmethod
    def rdp(cls, curve: PrivacyEvent | npt.ArrayLike, orders: Iterable[float] | None = None) -> FilterBudget:
        """RDP budget B(α) over ``orders`` (default ``DEFAULT_ORDERS``): an array of values or a PrivacyEvent."""
        a = as_orders(orders)
        if isinstance(curve, PrivacyEvent):
            vals = filter_rdp_curve(curve, a)
        else:
            try:
                vals = np.asarray(curve, dtype=np.float64)
            except (TypeError, ValueError):
                raise InvalidParameterError("budget", "must be an RDP curve (numbers) or a PrivacyEvent") from None
            if vals.shape != a.shape:
                raise InvalidParameterError("budget", f"RDP curve must have one value per order ({a.size})", vals.shape)
        _check_values("budget", vals)
        return cls(RDP, tuple(a.tolist()), tuple(budget_to_units(vals).tolist()))

    @classmethod
    def for_queries(
        cls,
        max_queries: int,
        per_query: PrivacyEvent | float | Sequence[PrivacyEvent | float],
        *,
        orders: Iterable[float] | None = None,
        mode: str = RDP,
    ) -> FilterBudget:
        """Budget for ``max_queries`` = M retrievals of a per-query mechanism: E(z) = M·ε_q (000/001 Alg. 1–2).

        ``per_query`` is a PrivacyEvent, or a float ε_q meaning ``PureDpEvent(ε_q)`` (a generic ε_q-DP
        mechanism; pass ``ExponentialMechanismEvent(ε_q)`` for the tighter bounded-range curve of the
        exponential mechanism), or a sequence of events: the separate charges one query makes to a document
        (MuRAG-Ada: the threshold release, then the RAG cost), each rounded up to units on its own as the
        filter charges them. The budget is exactly M times the per-query cost *in units*, at every order,
        so exactly M queries are admitted (rounding cannot cost the M-th retrieval), and mixed smaller
        charges are admitted while they fit at every order.
        RDP mode: B(α) = M·ρ_q(α). Pure mode: B = M·ε_q, guarantee (M·ε_q, 0) as in 000 Lemma 1 / 001 Thm 1.
        """
        m = check_positive_int("max_queries", max_queries)
        charges = list(per_query) if isinstance(per_query, (list, tuple)) else [per_query]
        if not charges:
            raise InvalidParameterError("per_query", "must name at least one charge")
        unit_cost: npt.NDArray[np.int64] | None = None
        ords: tuple[float, ...] | None = None
        for _i, ev in enumerate(charges):
            if _is_real(ev):
                ev = PureDpEvent(check_epsilon("per_query", ev))
            if not isinstance(ev, PrivacyEvent):
                raise InvalidParameterError("per_query", "must be a PrivacyEvent, a real ε_q or a sequence of them", ev)
            if mode == PURE:
                if orders is not None:
                    raise InvalidParameterError("orders", "a pure-ε budget has no orders", orders)
                refuse_delta_events(ev)
                vals = np.array([pure_epsilon(ev)])
            elif mode == RDP:
                a = as_orders(orders)
                vals = filter_rdp_curve(ev, a)
                ords = tuple(a.tolist())
            else:
                raise InvalidParameterError("mode", "must be 'pure' or 'rdp'", mode)
            _check_values("per_query", vals)
            if np.any(~np.isfinite(vals)):
                raise InvalidParameterError("per_query", "cost must be finite at every order")
            u = cost_to_units(vals)
            unit_cost = u if unit_cost is None else unit_cost + u
        total = cast(npt.NDArray[np.int64], unit_cost)  # charges is non-empty: set by the loop
        if np.any(total > MAX_LIMIT_UNITS // m):
            raise InvalidParameterError("max_queries", f"M × per-query cost exceeds {MAX_BUDGET:.6g} nats", m)
        return cls(mode, ords, tuple((total * m).tolist()))

    # views -------------------------------------------------------------------------------------------
    @property
    def width(self) -> int:
        return len(self.units)

    @property
    def limits(self) -> npt.NDArray[np.int64]:
        return np.asarray(self.units, dtype=np.int64)

    @property
    def values(self) -> npt.NDArray[np.float64]:
        """Budget in nats (float), per order (RDP) or a single ε (pure); the certified values, rounded up."""
        return _units_to_nats_up(self.units)

    @property
    def orders_array(self) -> npt.NDArray[np.float64] | None:
        return None if self.orders is None else np.asarray(self.orders, dtype=np.float64)

    def _rdp_orders(self) -> npt.NDArray[np.float64]:
        """``orders_array`` in RDP mode, where ``__post_init__`` has set the orders."""
        return cast(npt.NDArray[np.float64], self.orders_array)

    def guarantee(self, delta: float | None = None, method: str = "improved") -> tuple[float, float]:
        """Certified ex-ante (ε, δ) of every document under a filter with this budget.

        Pure mode: (B, 0) — ``delta`` is ignored (may be None). RDP mode: the RDP→DP conversion of the
        curve B at the best order of the grid (``accounting.rdp.rdp_to_epsilon``; improved conversion by
        default), returned as (ε, delta). Both are rounded outward: B is read off the integer units rounded up
        to a float, and the conversion is moved up by a proven bound on its floating-point error
        (spec/accounting/filters.md §4), so ε is never below the exact value.
        """
        if self.mode == PURE:
            if delta is not None:
                check_delta("delta", delta, allow_zero=True)
            return float(self.values[0]), 0.0
        d = _conversion_delta(delta)
        eps, _ = rdp_to_epsilon(self.values, self._rdp_orders(), d, method)
        return eps, d

    def certified_epsilon(
        self, delta: float | None = None, *, replace_one: bool = False, method: str = "improved"
    ) -> float:
        """The ε this budget certifies, read off its integer units and rounded outward (spec/accounting/filters.md §5).

        The filter admits charges while the spent units (each charge rounded *up* to units) stay <= the limit,
        so every document's loss is at most limit·2^-32 — the value to report, not a float recomputation such
        as M·fsum(ε_q) (which can be up to M·2^-32 lower: 53.5 vs 53.50000000093). Pure mode: limit·2^-32 as
        the smallest float >= it (``delta`` ignored). RDP mode: the conversion of the (rounded-up) curve at
        ``delta``, rounded outward by ``rdp_to_epsilon`` itself — the ε of ``guarantee(delta, method)``.
        ``replace_one``: the guarantee for replacing a document, twice the add/remove one (group privacy of 2;
        exact in floats).
        """
        eps = self.guarantee(None if self.mode == PURE else delta, method)[0]
        return 2.0 * eps if replace_one else eps

    def descriptor(self) -> dict[str, Any]:
        """What a store is bound to (orders written as float.hex, so they round-trip exactly)."""
        return {
            "filter": _FILTER_FORMAT,
            "mode": self.mode,
            "unit_bits": UNIT_BITS,
            "orders": None if self.orders is None else [float(a).hex() for a in self.orders],
        }


# ---------------------------------------------------------------------------------------------------
# Filter
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChargeResult:
    """Outcome of one conditional charge: ``admitted`` / ``refused`` ids (input order kept), the mask
    aligned with the input ids, and the cost actually charged to each admitted document, in units."""

    admitted: npt.NDArray[np.int64]
    refused: npt.NDArray[np.int64]
    mask: npt.NDArray[np.bool_]
    cost_units: npt.NDArray[np.int64]

    @property
    def n_admitted(self) -> int:
        return int(self.admitted.size)


class IndividualRenyiFilter:
    """Per-document Rényi (or pure-ε) filter over documents ``0..store.n_docs-1``.

    ``IndividualRenyiFilter(store, budget, orders=None)``:

    * ``budget`` a real ε → pure-ε mode (``orders`` must be None);
    * ``budget`` a PrivacyEvent or an array of RDP values → RDP mode over ``orders`` (default
      ``accounting.rdp.DEFAULT_ORDERS``);
    * ``budget`` a ``FilterBudget`` → as built (``orders``, if given, must match).

    The store is bound to the budget (a durable store refuses a later filter with another budget).
    See the module docstring for the admission rule and units; spec/accounting/filters.md for the proofs.
    """

    _CACHE_MAX = 4096

    def __init__(
        self,
        store: BudgetStore,
        budget: FilterBudget | PrivacyEvent | npt.ArrayLike,
        orders: Iterable[float] | None = None,
    ) -> None:
        if not isinstance(store, BudgetStore):
            raise InvalidParameterError("store", "must be a BudgetStore (accounting.stores)", type(store).__name__)
        self._budget = _as_budget(budget, orders)
        store.bind(self._budget.limits, self._budget.descriptor())
        self._store = store
        self._limits = self._budget.limits
        self._cap = self._limits + 1
        self._orders = self._budget.orders_array
        self._cache: dict[tuple[type, object], npt.NDArray[np.int64]] = {}

    # properties ----------------------------------------------------------------------------------
    @property
    def store(self) -> BudgetStore:
        return self._store

    @property
    def budget(self) -> FilterBudget:
        return self._budget

    @property
    def mode(self) -> str:
        return self._budget.mode

    @property
    def orders(self) -> npt.NDArray[np.float64] | None:
        return None if self._orders is None else self._orders.copy()

    @property
    def n_docs(self) -> int:
        return self._store.n_docs

    # costs ---------------------------------------------------------------------------------------
    def cost_units(self, cost: Cost) -> npt.NDArray[np.int64]:
        """The int64 units a charge of ``cost`` takes from each admitted document (capped at limit + 1).

        Pure mode: ``cost`` is a real ε >= 0 or a PrivacyEvent with a pure-DP ε. RDP mode: a PrivacyEvent
        or an array of RDP values, one per order of the filter (a bare number is refused as ambiguous).
        """
        key: tuple[type, object] | None
        try:
            key = (type(cost), cost)
            hit = self._cache.get(key)
        except TypeError:  # unhashable (e.g. a numpy curve)
            key, hit = None, None
        if hit is not None:
            return hit
        units = np.minimum(cost_to_units(self._cost_values(cost)), self._cap)
        units.setflags(write=False)
        if key is not None:
            if len(self._cache) >= self._CACHE_MAX:
                self._cache.clear()
            self._cache[key] = units
        return units

    def _cost_values(self, cost: Cost) -> npt.NDArray[np.float64]:
        if self.mode == PURE:
            if isinstance(cost, PrivacyEvent):
                refuse_delta_events(cost)
                vals = np.array([pure_epsilon(cost)], dtype=np.float64)
            elif _is_real(cost):
                vals = np.array([float(cost)], dtype=np.float64)
            else:
                raise InvalidParameterError("cost", "must be a real ε >= 0 or a PrivacyEvent (pure-ε filter)", cost)
            return _check_values("cost", vals)
        orders = cast(npt.NDArray[np.float64], self._orders)  # RDP mode: the budget has orders
        if isinstance(cost, PrivacyEvent):
            vals = filter_rdp_curve(cost, orders)
        elif _is_real(cost):
            raise InvalidParameterError(
                "cost", "a bare number is ambiguous for an RDP filter: pass a PrivacyEvent or an RDP curve", cost
            )
        else:
            try:
                vals = np.asarray(cost, dtype=np.float64)
            except (TypeError, ValueError):
                raise InvalidParameterError("cost", "must be a PrivacyEvent or an RDP curve of numbers") from None
            if vals.shape != orders.shape:
                raise InvalidParameterError(
                    "cost",
                    f"an RDP curve must have one value per order of the filter ({orders.size})",
                    vals.shape,
                )
        return _check_values("cost", vals)

    # charging ------------------------------------------------------------------------------------
    def try_charge(self, doc_ids: npt.ArrayLike, cost: Cost) -> ChargeResult:
        """Admit and charge exactly the documents that can afford ``cost`` at every order; refuse the rest.

        Atomic: every admitted document is charged or (on an error) none is; for a durable store the
        charge is durable when this returns. Bad input (unknown/negative/non-integer/duplicate ids, an
        empty batch, NaN or negative costs, unsupported events) raises a typed error and charges nothing.
        """
        return self.try_charge_many([(doc_ids, cost)])[0]

    def try_charge_many(self, requests: Sequence[tuple[npt.ArrayLike, Cost]]) -> list[ChargeResult]:
        """Group commit: apply ``[(doc_ids, cost), ...]`` in order, in one atomic (durable) step.

        Each document of each request is admitted or refused independently, seeing every earlier
        admitted charge of the batch. All requests are validated before anything is charged.
        """
        if not isinstance(requests, (list, tuple)):
            raise InvalidParameterError("requests", "must be a list of (doc_ids, cost) pairs")
        if len(requests) == 0:
            raise InvalidParameterError("requests", "must not be empty")
        prepared: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = []
        for i, req in enumerate(requests):
            try:
                doc_ids, cost = req
            except (TypeError, ValueError):
                raise InvalidParameterError(f"requests[{i}]", "must be a (doc_ids, cost) pair") from None
            ids = validate_doc_ids(doc_ids, self.n_docs)
            prepared.append((ids, self.cost_units(cost)))
        masks = self._store.charge_validated(prepared)  # ids and unit costs validated just above
        return [
            ChargeResult(admitted=ids[m], refused=ids[~m], mask=m, cost_units=units)
            for (ids, units), m in zip(prepared, masks, strict=False)
        ]

    def charge_nothing(self, cost: Cost) -> ChargeResult:
        """The charge of an empty set of documents, with the same work as any other: one (durable) step of the
        store that charges no document (for a durable store: one transaction that writes and syncs). A caller
        whose set to charge may be empty calls this instead of skipping the store, so whether a request
        charged anything is not visible in how long serving it took (spec/accounting/filters.md)."""
        units = self.cost_units(cost)
        empty = np.zeros(0, dtype=np.int64)
        (mask,) = self._store.charge_validated([(empty, units)])
        return ChargeResult(admitted=empty, refused=empty, mask=mask, cost_units=units)

    def can_afford(self, doc_ids: npt.ArrayLike, cost: Cost) -> npt.NDArray[np.bool_]:
        """Mask of documents that could pay ``cost`` now (charges nothing; advisory under concurrency —
        only ``try_charge`` decides)."""
        ids = validate_doc_ids(doc_ids, self.n_docs, allow_duplicates=True)
        units = self.cost_units(cost)
        rows = self._store.load(ids)
        affordable: npt.NDArray[np.bool_] = np.all(rows + units <= self._limits, axis=1)
        return affordable

    # reading -------------------------------------------------------------------------------------
    def spent_units(self, doc_ids: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Exact recorded spend, int64 units, shape (m, width)."""
        ids = validate_doc_ids(doc_ids, self.n_docs, allow_duplicates=True)
        return self._store.load(ids)

    def spent(self, doc_ids: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Recorded spend in nats: shape (m,) in pure mode, (m, |orders|) in RDP mode."""
        out = units_to_nats(self.spent_units(doc_ids))
        return out[:, 0] if self.mode == PURE else out

    def remaining(self, doc_ids: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Budget left in nats (B − spent): shape (m,) in pure mode, (m, |orders|) in RDP mode."""
        out = units_to_nats(self._limits - self.spent_units(doc_ids))
        return out[:, 0] if self.mode == PURE else out

    def guarantee(self, delta: float | None = None, method: str = "improved") -> tuple[float, float]:
        """Certified ex-ante (ε, δ) of every document, from the budget alone (see ``FilterBudget.guarantee``)."""
        return self._budget.guarantee(delta, method)


def _conversion_delta(delta: float | None) -> float:
    """``check_delta("delta", delta)``, None refused as check_delta refuses any non-number (RDP mode needs a δ)."""
    if delta is None:
        raise InvalidParameterError("delta", "must be a real number", None)
    return check_delta("delta", delta)


def _as_budget(budget: FilterBudget | PrivacyEvent | npt.ArrayLike, orders: Iterable[float] | None) -> FilterBudget:
    if isinstance(budget, FilterBudget):
        if orders is not None:
            a = as_orders(orders)
            if budget.orders is None or tuple(a.tolist()) != budget.orders:
                raise InvalidParameterError("orders", "do not match the FilterBudget's orders")
        return budget
    if _is_real(budget):
        if orders is not None:
            raise InvalidParameterError(
                "budget", "a single ε makes a pure-ε filter (orders must be None); give an RDP curve or event", budget
            )
        return FilterBudget.pure(budget)
    return FilterBudget.rdp(budget, orders)


__all__ = [
    "UNIT",
    "UNIT_BITS",
    "nats_up",
    "outward",
    "sum_up",
    "MAX_BUDGET",
    "PURE",
    "RDP",
    "ChargeResult",
    "FilterBudget",
    "IndividualRenyiFilter",
    "budget_to_units",
    "cost_to_units",
    "filter_rdp_curve",
    "pure_epsilon",
    "refuse_delta_events",
    "units_to_nats",
]
