"""Privacy accountants over ``accounting.events``: events are data, accountants count them (as in dp_accounting).

- :class:`RdpAccountant` — Rényi-DP accounting over a grid of orders (Mironov 2017), with δ-approximate RDP
  (additive δ, Bun–Steinke 2016 §8 / Zhu–Wang; 004 Def. A.5 and Thm A.6) and sampler total-variation terms.
- :class:`PureDpAccountant` — basic composition of pure ε-DP events (Dwork et al. 2006).
- :class:`MixedAccountant` — accepts every event the RDP accountant accepts and reports the smallest of the
  valid ε's it knows: the RDP one; when every event has an (ε_i, δ_i) description, the exact optimal
  composition of Kairouz–Oh–Viswanath / Murtagh–Vadhan (or KOV's closed form past the enumeration cap); when
  every event is a continuous Gaussian, the exact Gaussian-DP ε (``accounting.gdp``, helper C's module).

(ε, δ)-only events (``ApproxDpEvent``) enter RDP accounting as *δ-approximate ε-DP*. By Kairouz–Oh–Viswanath
2015 (§2–3, the dominance argument behind their Thm 3.3) every (ε, δ)-DP pair of output distributions is a
post-processing of the canonical (ε, δ) mechanism's pair, which is the mixture (1 − δ)·RR(ε) + δ·(an output
that reveals the input), with the same weights on both neighbours. Revealing which component fired only helps
the adversary, and conditioned on "no reveal" (probability exactly 1 − δ on both sides) the pair is randomized
response, whose Rényi divergence is the sinh curve of 004 Thm A.9. So the mechanism is δ-approximately RDP with
that curve; δ-approximate RDP composes adaptively by adding curves and δ's and converts to
(ε_conv(δ'), δ' + Σδ_i)-DP (004 Def. A.5 / Thm A.6; Bun–Steinke 2016 §8). A Poisson-sampled event with no
registered RDP amplification but an (ε, δ) description is first amplified with Balle–Barthe–Gaboardi 2018 Thm 8.

Neighbouring relation: the accountants add guarantees that are each stated for the relation of the mechanism
that emitted the event; composing them is only meaningful if it is the same relation for all (the caller's
responsibility — every mechanism in dprag documents its relation). ``PoissonSampledEvent`` assumes add/remove-one.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import cast

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError, UnsupportedEventError

from ..errors import check_delta, check_positive_int
from ..events import (
    ApproxDpEvent,
    ApproxRdpEvent,
    ComposedEvent,
    DiscreteLaplaceEvent,
    ExponentialMechanismEvent,
    LaplaceEvent,
    NoOpEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    PureDpEvent,
    SelfComposedEvent,
    as_privacy_event,
)
from ..rdp import (
    DEFAULT_ORDERS,
    additive_delta,
    as_orders,
    pure_dp_rdp,
    rdp_curve,
    rdp_to_delta,
    rdp_to_epsilon,
    sampler_tv,
)
from ..rounding import bound_up_array, exp_up, mul_up, sub_down, sum_products_up, sum_up, up
from .advanced import (
    DEFAULT_MAX_STATES,
    kov_composition,
    optimal_composition_delta,
    optimal_composition_epsilon,
    optimal_composition_states,
    poisson_amplify,
)

__all__ = ["RdpAccountant", "PureDpAccountant", "MixedAccountant", "dp_terms", "epsilon_with_tv"]


# ---------------------------------------------------------------------------------------------------------
# decomposing an event
# ---------------------------------------------------------------------------------------------------------


def leaf_dp_term(event: PrivacyEvent) -> tuple[float, float] | None:
    """(ε, δ) of a single mechanism whose guarantee is a fixed (ε, δ)-DP pair, else None."""
    if isinstance(event, (PureDpEvent, ExponentialMechanismEvent)):
        return float(event.epsilon), 0.0
    if isinstance(event, (LaplaceEvent, DiscreteLaplaceEvent)):
        return float(event.epsilon), 0.0  # Δ/b-DP (Dwork et al. 2006; discrete: Ghosh et al. 2009)
    if isinstance(event, ApproxDpEvent):
        return float(event.epsilon), float(event.delta)
    if isinstance(event, ApproxRdpEvent):
        inner = leaf_dp_term(event.event)
        return None if inner is None else (inner[0], min(1.0, sum_up(inner[1], float(event.delta))))
    if isinstance(event, PoissonSampledEvent):
        inner = leaf_dp_term(event.event)
        return None if inner is None else poisson_amplify(inner[0], inner[1], event.sampling_probability)
    return None


def dp_terms(event: PrivacyEvent) -> Counter[tuple[float, float]] | None:
    """The composition as a multiset {(ε_i, δ_i): count} of fixed (ε, δ)-DP mechanisms, or None if some part
    of it (e.g. a Gaussian) has no such description without choosing a δ."""
    out: Counter[tuple[float, float]] = Counter()

    def walk(e: PrivacyEvent, mult: int) -> bool:
        if mult == 0 or isinstance(e, NoOpEvent):
            return True
        if isinstance(e, ComposedEvent):
            return all(walk(x, mult) for x in e.events)
        if isinstance(e, SelfComposedEvent):
            return walk(e.event, mult * e.count)
        term = leaf_dp_term(e)
        if term is None:
            return False
        if term[0] > 0 or term[1] > 0:
            out[term] += mult
        return True

    return out if walk(event, 1) else None


@dataclass
class _Charge:
    """What one event adds to an RDP accountant."""

    rdp: npt.NDArray[np.float64]
    deltas: list[float] = field(default_factory=list)  # additive δ's (summed exactly, rounded up)
    tvs: list[float] = field(default_factory=list)  # sampler total-variation distances


def _charge(event: PrivacyEvent, orders: npt.NDArray[np.float64]) -> _Charge:
    """RDP curve, additive δ and sampler TV of ``event``; raises UnsupportedEventError, never mutates."""
    if not isinstance(event, PrivacyEvent):
        raise InvalidParameterError("event", "must be a PrivacyEvent", event)
    if isinstance(event, NoOpEvent):
        return _Charge(np.zeros(orders.shape))
    if isinstance(event, ComposedEvent):
        total = _Charge(np.zeros(orders.shape))
        for e in event.events:
            c = _charge(e, orders)
            total.rdp = total.rdp + c.rdp
            total.deltas += c.deltas
            total.tvs += c.tvs
        return total
    if isinstance(event, SelfComposedEvent):
        if event.count == 0:
            return _Charge(np.zeros(orders.shape))
        c = _charge(event.event, orders)
        n = event.count
        return _Charge(n * c.rdp, [mul_up(d, n) for d in c.deltas], [mul_up(t, n) for t in c.tvs])
    if isinstance(event, ApproxDpEvent):
        # δ-approximate ε-DP (module docstring): randomized response's curve plus an additive δ
        return _Charge(pure_dp_rdp(event.epsilon, orders), [float(event.delta)] if event.delta else [])
    if isinstance(event, ApproxRdpEvent):
        c = _charge(event.event, orders)
        c.deltas.append(float(event.delta))
        return c
    if isinstance(event, PoissonSampledEvent):
        try:
            curve = np.asarray(rdp_curve(event, orders), dtype=np.float64)
        except UnsupportedEventError:
            term = leaf_dp_term(event)
            if term is None:
                raise
            # Balle–Barthe–Gaboardi 2018 Thm 8, then δ-approximate ε'-DP as for ApproxDpEvent
            return _Charge(pure_dp_rdp(term[0], orders), [term[1]] if term[1] else [])
        tv = sampler_tv(event)
        return _Charge(curve, [], [tv] if tv else [])
    curve = np.asarray(rdp_curve(event, orders), dtype=np.float64)
    d = additive_delta(event)
    tv = sampler_tv(event)
    return _Charge(curve, [d] if d else [], [tv] if tv else [])


# ---------------------------------------------------------------------------------------------------------
# conversion with a sampler-TV term
# ---------------------------------------------------------------------------------------------------------


def epsilon_with_tv(
    rdp: np.ndarray, orders: np.ndarray, delta: float, tv: float, method: str = "improved"
) -> tuple[float, float]:
    """Smallest ε (over the orders) with δ_conv(ε) + (1 + e^ε)·tv ≤ delta; returns (ε, order).

    A sampler within total variation η of the exact one turns an (ε, δ)-DP guarantee into
    (ε, δ + (1 + e^ε)η) (coupling argument; Canonne–Kamath–Steinke 2020 §5). For each order the left-hand
    side is convex in ε (a decaying exponential plus a growing one), so its sub-level set is an interval whose
    left end is found by bisection (to 1e-12 relative); with tv = 0 this is exactly :func:`rdp_to_epsilon`.
    Returns (inf, nan) if no order achieves ``delta``. Rounded outward: every comparison with ``delta`` uses an
    upper bound on the exact left-hand side (log δ_conv moved up as in ``rdp_to_delta``, the exponentials and
    the sums inflated by 2^-47 relative), so the returned ε is valid in exact arithmetic.
    """
    rdp = np.asarray(rdp, dtype=np.float64)
    a = np.asarray(orders, dtype=np.float64)
    if not (delta > 0):
        return math.inf, math.nan
    if tv <= 0:
        return rdp_to_epsilon(rdp, a, min(delta, 1.0 - 1e-16), method)
    log_c: npt.NDArray[np.float64]
    c_mag: npt.NDArray[np.float64]  # the error bound's magnitude of log_c (accounting.rdp, "Rounding")
    if method == "improved":
        l1, la = np.log1p(-1.0 / a), np.log(a)
        log_c = (a - 1) * (rdp + l1) - la  # δ_conv(ε) = exp(log_c − (α−1)ε)
        c_mag = (a - 1) * (np.abs(rdp) + np.abs(l1)) + la + 2.0
    elif method == "standard":
        log_c = (a - 1) * rdp
        c_mag = (a - 1) * np.abs(rdp)
    else:
        raise InvalidParameterError("method", "must be 'standard' or 'improved'", method)
    up47 = 1.0 + 2.0**-47  # covers exp's K = 2^-49 (twice) and a few roundings to nearest
    with np.errstate(over="ignore", invalid="ignore"):

        def total(eps: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
            # upper bound on exp(log_c − (α−1)ε) + (1 + e^ε)·tv: the exponent moved up by its error bound
            # (20u·(c_mag + (α−1)ε), rdp_to_delta's), each exp and the final sum inflated by 2^-47 relative
            x = bound_up_array(log_c - (a - 1) * eps, c_mag + (a - 1) * eps)
            return (np.exp(x) * up47 + (1.0 + np.exp(eps) * up47) * tv) * up47

        # minimiser of total: (α−1)·δ_conv(ε) = e^ε·tv
        e_min = np.maximum(0.0, (log_c + np.log(a - 1) - math.log(tv)) / a)
        e_min = np.where(np.isfinite(e_min), e_min, np.inf)
        feasible = total(np.where(np.isfinite(e_min), e_min, 0.0)) <= delta
        feasible &= np.isfinite(e_min)
        lo = np.zeros_like(a)
        hi = np.where(feasible, e_min, 0.0)
        at_zero = feasible & (total(lo) <= delta)
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            ok = total(mid) <= delta
            hi = np.where(ok, mid, hi)
            lo = np.where(ok, lo, mid)
            if np.all(hi - lo <= 1e-12 * np.maximum(1.0, hi)):
                break
        eps = np.where(at_zero, 0.0, hi)
        eps = np.where(feasible, eps, np.inf)
        if method == "improved":  # the KL bound (0, sqrt(1 − e^{−R})) plus the TV term at ε = 0
            kl = np.where(rdp > 0, np.sqrt(-np.expm1(-rdp)) * up47, 0.0)  # sqrt halves expm1's error, adds u
            eps = np.where((kl + 2.0 * tv) * up47 <= delta, 0.0, eps)
    i = int(np.argmin(eps))
    return float(eps[i]), float(a[i])


def _check_method(method: str) -> str:
    if method not in ("improved", "standard"):
        raise InvalidParameterError("method", "must be 'standard' or 'improved'", method)
    return method


def _check_count(count: int) -> int:
    return check_positive_int("count", count)


def _check_target_epsilon(epsilon: float) -> float:
    try:
        e = float(epsilon)
    except (TypeError, ValueError):
        raise InvalidParameterError("epsilon", "must be a real number", epsilon) from None
    if not (e >= 0 and math.isfinite(e)):
        raise InvalidParameterError("epsilon", "must be finite and >= 0", epsilon)
    return e


# ---------------------------------------------------------------------------------------------------------
# accountants
# ---------------------------------------------------------------------------------------------------------


class RdpAccountant:
    """Rényi-DP accountant (Mironov 2017): composes events' RDP curves on a fixed grid of orders.

    ``compose(event, count)`` adds ``count`` × the event's curve (Prop. 1: adaptive composition adds RDP),
    its additive δ (δ-approximate RDP) and its sampler TV. ``get_epsilon(delta)`` returns the smallest ε over
    the orders such that the whole composition is (ε, delta)-DP, where ``delta`` is the *total* δ:
    delta = δ_conv + Σδ_i + (1 + e^ε)·ΣTV_i. Returns ``math.inf`` if Σδ_i ≥ delta.
    """

    def __init__(self, orders: Sequence[float] | None = None) -> None:
        self._orders = as_orders(DEFAULT_ORDERS if orders is None else orders)
        self._rdp = np.zeros(self._orders.shape)
        self._deltas: list[float] = []
        self._tvs: list[float] = []

    # -- state --------------------------------------------------------------------------------------------
    @property
    def orders(self) -> npt.NDArray[np.float64]:
        return self._orders.copy()

    @property
    def rdp(self) -> npt.NDArray[np.float64]:
        """Current RDP value at each order (a copy)."""
        return self._rdp.copy()

    @property
    def additive_delta(self) -> float:
        """Σ of the δ's of δ-approximate events composed so far."""
        return min(1.0, sum_up(*self._deltas))

    @property
    def sampler_tv(self) -> float:
        """Σ of the samplers' total-variation distances composed so far."""
        return sum_up(*self._tvs)

    def supports(self, event: PrivacyEvent) -> bool:
        try:
            _charge(event, self._orders)
        except (UnsupportedEventError, InvalidParameterError):
            return False
        return True

    def compose(self, event: PrivacyEvent, count: int = 1) -> RdpAccountant:
        """Add ``count`` adaptive repetitions of ``event`` (a dprag event, or a dp_accounting DpEvent converted by
        ``events.from_dp_event``). Raises (without changing state) on bad input."""
        count = _check_count(count)
        event = as_privacy_event(event)
        ch = _charge(event, self._orders)
        self._apply(ch, count)
        return self

    def _apply(self, ch: _Charge, count: int) -> None:
        self._rdp = self._rdp + count * ch.rdp
        self._deltas.extend(mul_up(d, count) for d in ch.deltas)
        self._tvs.extend(mul_up(t, count) for t in ch.tvs)

    # -- queries ------------------------------------------------------------------------------------------
    def get_epsilon_and_order(self, delta: float, method: str = "improved") -> tuple[float, float]:
        """(ε, optimal order) such that the composition is (ε, delta)-DP; ``delta`` is the total δ."""
        delta = check_delta("delta", delta)
        method = _check_method(method)
        rem = sub_down(delta, *self._deltas)  # what is left for the conversion, rounded down
        if rem <= 0:
            return math.inf, math.nan
        return epsilon_with_tv(self._rdp, self._orders, rem, self.sampler_tv, method)

    def get_epsilon(self, delta: float, method: str = "improved") -> float:
        return self.get_epsilon_and_order(delta, method)[0]

    def get_delta_and_order(self, epsilon: float, method: str = "improved") -> tuple[float, float]:
        """(δ, optimal order) such that the composition is (epsilon, δ)-DP (δ capped at 1)."""
        eps = _check_target_epsilon(epsilon)
        method = _check_method(method)
        d_conv, order = rdp_to_delta(self._rdp, self._orders, eps, method)
        tv = self.sampler_tv
        extra = 0.0
        if tv:
            e = exp_up(eps)
            extra = up((1 + Fraction(e)) * Fraction(tv)) if math.isfinite(e) else math.inf
        return min(1.0, sum_up(d_conv, *self._deltas, extra)), order

    def get_delta(self, epsilon: float, method: str = "improved") -> float:
        return self.get_delta_and_order(epsilon, method)[0]


class PureDpAccountant:
    """Basic composition of pure-DP events (Dwork, McSherry, Nissim, Smith 2006): ε adds up.

    Accepts every event whose guarantee is a fixed ε-DP (``PureDpEvent``, ``LaplaceEvent``,
    ``DiscreteLaplaceEvent``, ``ExponentialMechanismEvent``, ``ApproxDpEvent`` with δ = 0, Poisson-sampled
    versions of these amplified by Balle–Barthe–Gaboardi 2018 Thm 8, and compositions of them); anything that
    carries a δ raises ``UnsupportedEventError``.
    """

    def __init__(self) -> None:
        self._terms: list[tuple[float, int]] = []

    def compose(self, event: PrivacyEvent, count: int = 1) -> PureDpAccountant:
        count = _check_count(count)
        event = as_privacy_event(event)  # a dp_accounting DpEvent is converted (events.from_dp_event)
        if not isinstance(event, PrivacyEvent):
            raise InvalidParameterError("event", "must be a PrivacyEvent", event)
        terms = dp_terms(event)
        if terms is None or any(d > 0 for (_, d) in terms):
            raise UnsupportedEventError(f"{type(event).__name__} is not a pure ε-DP event (or composition of them)")
        self._terms.extend((e, c * count) for (e, _), c in terms.items())  # exact ε·count at read-out
        return self

    @property
    def epsilon(self) -> float:
        return sum_products_up((e for e, _ in self._terms), (c for _, c in self._terms))

    def get_epsilon(self) -> float:
        return self.epsilon


class MixedAccountant:
    """Accepts any event the :class:`RdpAccountant` accepts (including ``ApproxDpEvent``) and reports the best
    of the valid rules it knows.

    Rule (``get_epsilon(delta)``, ``delta`` the total δ):

    1. ``rdp``: the RDP accountant's ε (every event through RDP; (ε, δ)-only events as δ-approximate ε-DP).
    2. ``optimal``: available while every composed event has a fixed (ε_i, δ_i) description (pure-DP events,
       Laplace, exponential mechanism, ``ApproxDpEvent``, Poisson-sampled versions via BBG18 Thm 8, and their
       compositions; *not* Gaussians or RDP curves). Then ε is the exact optimal composition (KOV 2015
       Thm 3.3 when homogeneous, Murtagh–Vadhan 2016 Thm 1.5 otherwise) when it has at most ``max_states`` loss
       states, else the closed-form bound of KOV 2015 Thm 3.5 with δ̃ = 1 − (1 − delta)/Π(1 − δ_i) (which is
       ≤ basic composition Σε_i).
    3. ``gdp``: available while every composed event is a (composition of) continuous Gaussian mechanism(s):
       the composition is exactly μ-GDP with μ = sqrt(Σ (Δ_i/σ_i)²) (Dong–Roth–Su 2022 Cor. 3.3) and ε is its
       exact ε at ``delta`` (Balle–Wang 2018 Thm 8), certified with outward rounding (``accounting.gdp``).

    Every rule is valid for the whole adaptive composition, so their minimum is. ``get_delta(epsilon)`` is
    the minimum of the rules' δ's likewise. ``candidates(delta)`` reports each rule's ε.
    """

    def __init__(self, orders: Sequence[float] | None = None, max_states: int = DEFAULT_MAX_STATES) -> None:
        self._rdp = RdpAccountant(orders)
        self._terms: Counter[tuple[float, float]] | None = Counter()
        self._mu_sq: list[float] | None = []  # Σ μ_i² of a pure continuous-Gaussian composition, else None
        self._max_states = check_positive_int("max_states", max_states)

    @property
    def rdp_accountant(self) -> RdpAccountant:
        return self._rdp

    @property
    def dp_terms(self) -> dict[tuple[float, float], int] | None:
        """{(ε_i, δ_i): count} of the composition, or None once an event without one was composed."""
        return None if self._terms is None else dict(self._terms)

    def compose(self, event: PrivacyEvent, count: int = 1) -> MixedAccountant:
        count = _check_count(count)
        event = as_privacy_event(event)  # a dp_accounting DpEvent is converted (events.from_dp_event)
        ch = _charge(event, self._rdp._orders)  # raises UnsupportedEventError before any state change
        terms = dp_terms(event) if self._terms is not None else None
        mu = None
        if self._mu_sq is not None:
            from ..gdp import gdp_mu_of_event

            try:
                mu = gdp_mu_of_event(event)
            except UnsupportedEventError:
                mu = None
        self._rdp._apply(ch, count)
        if mu is None:
            self._mu_sq = None
        else:  # mu was computed because self._mu_sq is not None
            cast(list[float], self._mu_sq).append(count * mu * mu)
        if terms is None:
            self._terms = None
        else:  # terms were computed because self._terms is not None
            acc_terms = cast("Counter[tuple[float, float]]", self._terms)
            for key, c in terms.items():
                acc_terms[key] += c * count
        return self

    def _term_arrays(self) -> tuple[list[float], list[float], list[int]]:
        terms = cast("Counter[tuple[float, float]]", self._terms)  # callers check that self._terms is not None
        keys = list(terms)
        return [k[0] for k in keys], [k[1] for k in keys], [terms[k] for k in keys]

    def _optimal_epsilon(self, delta: float) -> tuple[float, str]:
        if not self._terms:
            return 0.0, "optimal"
        eps, dels, cnt = self._term_arrays()
        if optimal_composition_states(eps, cnt) <= self._max_states:
            return optimal_composition_epsilon(delta, eps, dels, cnt, max_states=self._max_states), "optimal"
        log_surv = math.fsum(c * math.log1p(-d) for d, c in zip(dels, cnt, strict=False))
        dt = -math.expm1(math.log1p(-delta) - log_surv)
        if dt <= 0:
            return math.inf, "kov"
        return kov_composition(eps, min(dt, 1.0), dels, cnt)[0], "kov"

    def _optimal_delta(self, epsilon: float) -> float:
        if not self._terms:
            return 0.0
        eps, dels, cnt = self._term_arrays()
        if optimal_composition_states(eps, cnt) <= self._max_states:
            return optimal_composition_delta(epsilon, eps, dels, cnt, max_states=self._max_states)
        # invert KOV Thm 3.5 in δ̃ by bisection on log δ̃ (ε̃ is non-increasing in δ̃)
        if kov_composition(eps, 1.0, dels, cnt)[0] > epsilon:
            return 1.0
        lo, hi = -745.0, 0.0  # log δ̃: ε̃(e^hi) ≤ epsilon
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if kov_composition(eps, math.exp(mid), dels, cnt)[0] <= epsilon:
                hi = mid
            else:
                lo = mid
            if hi - lo < 1e-12:
                break
        return kov_composition(eps, math.exp(hi), dels, cnt)[1]

    @property
    def gdp_mu(self) -> float | None:
        """μ of the composition if it is a pure continuous-Gaussian one (else None)."""
        return None if self._mu_sq is None else math.sqrt(math.fsum(self._mu_sq))

    def _mu_upper(self, mu: float) -> float:
        mu_sq = cast(list[float], self._mu_sq)  # callers pass mu = self.gdp_mu, not None
        return mu * (1.0 + (len(mu_sq) + 16) * 2.0**-52)  # fsum + sqrt + per-term rounding, outward

    def candidates(self, delta: float, method: str = "improved") -> dict[str, float]:
        """ε of each applicable rule at total δ = ``delta``: keys ``rdp``, ``gdp``, ``optimal`` or ``kov``."""
        delta = check_delta("delta", delta)
        out = {"rdp": self._rdp.get_epsilon(delta, method)}
        if self._terms is not None:
            e, name = self._optimal_epsilon(delta)
            out[name] = e
        mu = self.gdp_mu
        if mu is not None:
            from ..gdp import certified_epsilon_for_delta

            out["gdp"] = certified_epsilon_for_delta(mu, delta, mu_upper=self._mu_upper(mu)) if mu > 0 else 0.0
        return out

    def get_epsilon(self, delta: float, method: str = "improved") -> float:
        return min(self.candidates(delta, method).values())

    def get_epsilon_and_rule(self, delta: float, method: str = "improved") -> tuple[float, str]:
        c = self.candidates(delta, method)
        name = min(c, key=c.__getitem__)
        return c[name], name

    def get_delta(self, epsilon: float, method: str = "improved") -> float:
        eps = _check_target_epsilon(epsilon)
        d = self._rdp.get_delta(eps, method)
        if self._terms is not None:
            d = min(d, self._optimal_delta(eps))
        mu = self.gdp_mu
        if mu is not None:
            from ..gdp import certified_delta_for_epsilon

            d = min(d, certified_delta_for_epsilon(self._mu_upper(mu), eps) if mu > 0 else 0.0)
        return d
