"""Privacy events: what a mechanism spent, as plain data.

Modelled on dp_accounting's ``dp_event.py``: a mechanism returns the event it spent; an accountant
(``accounting.rdp``, ``accounting.composition``) or a filter (``accounting.filters``) counts it. Events
carry the mechanism's actual parameters (noise scale, sensitivity), never a pre-computed epsilon where
the parameters determine it, so every accountant can compute the tightest bound it knows.

Neighbouring relation: every event's guarantee is stated for the relation given by the mechanism that
emitted it (the mechanism's docstring says which); ``sensitivity`` is the sensitivity under that relation.

``to_dp_event()`` converts to a ``dp_accounting.DpEvent`` where dp_accounting has an equivalent, and
raises ``UnsupportedEventError`` where it has none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, cast

from dprag.errors import InvalidParameterError, UnsupportedEventError

from .errors import check_delta, check_epsilon, check_positive_int

if TYPE_CHECKING:
    import dp_accounting


def _dpe() -> ModuleType:
    import dp_accounting  # imported lazily: the accounting hot path does not need it

    return cast(ModuleType, dp_accounting)


@dataclass(frozen=True)
class PrivacyEvent:
    """Base class. Subclasses are frozen dataclasses and hashable."""

    def to_dp_event(self) -> dp_accounting.DpEvent:
        raise UnsupportedEventError(f"{type(self).__name__} has no dp_accounting equivalent")


@dataclass(frozen=True)
class NoOpEvent(PrivacyEvent):
    """Nothing was spent (e.g. a non-private baseline step, or post-processing)."""

    def to_dp_event(self) -> dp_accounting.DpEvent:
        return _dpe().NoOpDpEvent()


@dataclass(frozen=True)
class PureDpEvent(PrivacyEvent):
    """An ``epsilon``-DP mechanism about which nothing more is known."""

    epsilon: float

    def __post_init__(self) -> None:
        check_epsilon("epsilon", self.epsilon, allow_zero=True)

    def to_dp_event(self) -> dp_accounting.DpEvent:
        # dp_accounting has no generic pure-DP event; a Laplace event with the same epsilon
        # has a *smaller* RDP curve than a generic eps-DP mechanism, so it would be unsound.
        raise UnsupportedEventError("PureDpEvent: dp_accounting has no generic pure-DP event")


@dataclass(frozen=True)
class LaplaceEvent(PrivacyEvent):
    """Laplace noise of ``scale`` b on a query of L1 ``sensitivity`` Δ: (Δ/b)-DP."""

    scale: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        check_epsilon("scale", self.scale)
        check_epsilon("sensitivity", self.sensitivity)

    @property
    def epsilon(self) -> float:
        return self.sensitivity / self.scale

    def to_dp_event(self) -> dp_accounting.DpEvent:
        return _dpe().LaplaceDpEvent(noise_multiplier=self.scale / self.sensitivity)


@dataclass(frozen=True)
class GaussianEvent(PrivacyEvent):
    """Gaussian noise N(0, sigma²) on a query of L2 ``sensitivity`` Δ."""

    sigma: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        check_epsilon("sigma", self.sigma)
        check_epsilon("sensitivity", self.sensitivity)

    @property
    def noise_multiplier(self) -> float:
        return self.sigma / self.sensitivity

    def to_dp_event(self) -> dp_accounting.DpEvent:
        return _dpe().GaussianDpEvent(noise_multiplier=self.noise_multiplier)


@dataclass(frozen=True)
class DiscreteGaussianEvent(PrivacyEvent):
    """Discrete Gaussian N_Z(0, sigma²) on an integer query of L2 sensitivity Δ (Canonne–Kamath–Steinke).

    Satisfies (Δ²/(2σ²))-zCDP, i.e. the same RDP curve as the continuous Gaussian.
    ``sampler_tv`` is the total-variation distance of the sampler actually used from the exact
    discrete Gaussian (0 for an exact sampler); accountants add it to δ.
    """

    sigma: float
    sensitivity: int = 1
    sampler_tv: float = 0.0

    def __post_init__(self) -> None:
        check_epsilon("sigma", self.sigma)
        check_positive_int("sensitivity", self.sensitivity)
        check_delta("sampler_tv", self.sampler_tv, allow_zero=True)

    @property
    def rho(self) -> float:
        """zCDP parameter Δ²/(2σ²) (CKS 2020 Thm 4)."""
        return self.sensitivity**2 / (2.0 * self.sigma**2)

    def to_dp_event(self) -> dp_accounting.DpEvent:
        """dp_accounting's ``ZCDpEvent(Δ²/(2σ²))`` (CKS 2020 Thm 4): its RDP accountant counts it (α·ρ, the
        same curve as ours); its PLD accountant refuses it. Not a ``GaussianDpEvent``: the continuous Gaussian's
        PLD does not dominate the discrete one (spec/accounting/composition.md), so a PLD accountant given that event
        would under-state ε. ``PldAccountant`` composes the lattice PLD itself."""
        if self.sampler_tv:
            raise UnsupportedEventError("DiscreteGaussianEvent with sampler_tv > 0 carries an additive delta")
        return _dpe().ZCDpEvent(rho=self.rho)


@dataclass(frozen=True)
class ZCDpEvent(PrivacyEvent):
    """A (ξ, ρ)-zCDP mechanism known only by its zCDP parameters: D_α ≤ ξ + ρα for every α > 1 (Bun–Steinke
    2016 Def. 1.1). RDP accountants and filters count it; a PLD accountant refuses it (zCDP implies no PLD);
    pure-DP accounting refuses it. dp_accounting's ``ZCDpEvent`` converts to it (``from_dp_event``)."""

    rho: float
    xi: float = 0.0

    def __post_init__(self) -> None:
        check_epsilon("rho", self.rho, allow_zero=True)
        check_epsilon("xi", self.xi, allow_zero=True)

    def to_dp_event(self) -> dp_accounting.DpEvent:
        return _dpe().ZCDpEvent(rho=self.rho, xi=self.xi)


@dataclass(frozen=True)
class DiscreteLaplaceEvent(PrivacyEvent):
    """Discrete Laplace with P(x) ∝ exp(-|x|/scale) on an integer query of L1 sensitivity Δ: (Δ/scale)-DP."""

    scale: float
    sensitivity: int = 1

    def __post_init__(self) -> None:
        check_epsilon("scale", self.scale)
        check_positive_int("sensitivity", self.sensitivity)

    @property
    def epsilon(self) -> float:
        return self.sensitivity / self.scale


@dataclass(frozen=True)
class ExponentialMechanismEvent(PrivacyEvent):
    """Exponential mechanism (or Gumbel-max / report-noisy-max with Gumbel noise) that is ``epsilon``-DP.

    With ``bounded_range=True`` (the usual exponential mechanism, McSherry–Talwar, whose utility
    sensitivity is Δ and whose sampling weights are exp(ε u / (2Δ))) the mechanism is ε-bounded-range
    (Durfee–Rogers 2019), which gives the tighter RDP bound of Cesar & Rogers 2021.
    """

    epsilon: float
    bounded_range: bool = True

    def __post_init__(self) -> None:
        check_epsilon("epsilon", self.epsilon, allow_zero=True)


@dataclass(frozen=True)
class ApproxDpEvent(PrivacyEvent):
    """A mechanism known only to be (epsilon, delta)-DP (e.g. LimitedDomain)."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        check_epsilon("epsilon", self.epsilon, allow_zero=True)
        check_delta("delta", self.delta, allow_zero=True)


@dataclass(frozen=True)
class ApproxRdpEvent(PrivacyEvent):
    """δ-approximate RDP: with probability ≥ 1-delta the inner event's RDP guarantee holds (e.g. PTR)."""

    event: PrivacyEvent
    delta: float

    def __post_init__(self) -> None:
        if not isinstance(self.event, PrivacyEvent):
            raise InvalidParameterError("event", "must be a PrivacyEvent", self.event)
        check_delta("delta", self.delta, allow_zero=True)


@dataclass(frozen=True)
class RdpCurveEvent(PrivacyEvent):
    """An event given directly by its RDP curve: ``rdp[i]`` at order ``orders[i]``.

    Used where a mechanism's RDP is computed numerically (e.g. a subsampled mechanism).
    """

    orders: tuple[float, ...]
    rdp: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.orders) != len(self.rdp) or not self.orders:
            raise InvalidParameterError("rdp", "must be a non-empty tuple as long as orders")
        for a in self.orders:
            if not (a > 1 and math.isfinite(a)):
                raise InvalidParameterError("orders", "every order must be finite and > 1", a)
        for r in self.rdp:
            if r != r or r < 0:
                raise InvalidParameterError("rdp", "every value must be >= 0 and not NaN", r)


@dataclass(frozen=True)
class ComposedEvent(PrivacyEvent):
    """Sequential (possibly adaptive) composition of ``events``."""

    events: tuple[PrivacyEvent, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "events", tuple(self.events))
        for e in self.events:
            if not isinstance(e, PrivacyEvent):
                raise InvalidParameterError("events", "every element must be a PrivacyEvent", e)

    def to_dp_event(self) -> dp_accounting.DpEvent:
        return _dpe().ComposedDpEvent([e.to_dp_event() for e in self.events])


@dataclass(frozen=True)
class SelfComposedEvent(PrivacyEvent):
    """``count`` sequential repetitions of ``event``."""

    event: PrivacyEvent
    count: int

    def __post_init__(self) -> None:
        if not isinstance(self.event, PrivacyEvent):
            raise InvalidParameterError("event", "must be a PrivacyEvent", self.event)
        check_positive_int("count", self.count, minimum=0)

    def to_dp_event(self) -> dp_accounting.DpEvent:
        if self.count == 0:
            return _dpe().NoOpDpEvent()
        return _dpe().SelfComposedDpEvent(self.event.to_dp_event(), self.count)


@dataclass(frozen=True)
class PoissonSampledEvent(PrivacyEvent):
    """``event`` run on a Poisson subsample in which each record is kept with ``sampling_probability``.

    Guarantee under the add/remove-one relation (the relation subsampling amplification is proven for).
    """

    sampling_probability: float
    event: PrivacyEvent

    def __post_init__(self) -> None:
        p = float(self.sampling_probability)
        if not (0.0 <= p <= 1.0):
            raise InvalidParameterError("sampling_probability", "must lie in [0, 1]", self.sampling_probability)
        if not isinstance(self.event, PrivacyEvent):
            raise InvalidParameterError("event", "must be a PrivacyEvent", self.event)

    def to_dp_event(self) -> dp_accounting.DpEvent:
        return _dpe().PoissonSampledDpEvent(self.sampling_probability, self.event.to_dp_event())


def from_dp_event(dp_event: object) -> PrivacyEvent:
    """A dp_accounting ``DpEvent`` as the dprag event with the same guarantee; ``UnsupportedEventError`` naming
    the event where dprag has no sound equivalent.

    NoOp → ``NoOpEvent``; Gaussian(noise multiplier z) → ``GaussianEvent(z, 1)``; Laplace(z) → ``LaplaceEvent(z, 1)``;
    DiscreteLaplace(parameter a, Δ) → ``DiscreteLaplaceEvent(1/a, Δ)``; ZCDp(ρ, ξ) → ``ZCDpEvent(ρ, ξ)``;
    RandomizedResponse(p, k buckets) → ``PureDpEvent(ln(1 + k(1 − p)/p))`` (its exact ε, rounded up);
    Composed / SelfComposed / PoissonSampled → the same structure. dp_accounting's events are stated for its
    default ADD_OR_REMOVE_ONE relation with sensitivity 1 (noise multipliers), as these are.
    Refused: NonPrivate, Unsupported, sampling with / without replacement, tree aggregation, truncated
    subsampled Gaussian, mixtures — and anything unknown.
    """
    dpa = _dpe()
    de = dpa.dp_event
    if isinstance(dp_event, PrivacyEvent):
        return dp_event
    if isinstance(dp_event, de.NoOpDpEvent):
        return NoOpEvent()
    if isinstance(dp_event, de.GaussianDpEvent):
        if not dp_event.noise_multiplier > 0:
            raise UnsupportedEventError("GaussianDpEvent with noise_multiplier 0 is not private")
        return GaussianEvent(float(dp_event.noise_multiplier), 1.0)
    if isinstance(dp_event, de.LaplaceDpEvent):
        if not dp_event.noise_multiplier > 0:
            raise UnsupportedEventError("LaplaceDpEvent with noise_multiplier 0 is not private")
        return LaplaceEvent(float(dp_event.noise_multiplier), 1.0)
    if isinstance(dp_event, de.DiscreteLaplaceDpEvent):
        return DiscreteLaplaceEvent(1.0 / float(dp_event.noise_parameter), int(dp_event.sensitivity))
    if isinstance(dp_event, de.ZCDpEvent):
        return ZCDpEvent(float(dp_event.rho), float(dp_event.xi))
    if isinstance(dp_event, de.RandomizedResponseDpEvent):
        p, k = float(dp_event.noise_parameter), int(dp_event.num_buckets)
        if not (0 < p <= 1) or k < 2:
            raise UnsupportedEventError(f"RandomizedResponseDpEvent({p}, {k}) is not private")
        # P[out = truth] = 1 − p + p/k, P[out = other] = p/k: ε = ln(1 + k(1 − p)/p)
        return PureDpEvent(math.nextafter(math.log1p(k * (1.0 - p) / p), math.inf))
    if isinstance(dp_event, de.SelfComposedDpEvent):
        return SelfComposedEvent(from_dp_event(dp_event.event), int(dp_event.count))
    if isinstance(dp_event, de.ComposedDpEvent):
        return ComposedEvent(tuple(from_dp_event(e) for e in dp_event.events))
    if isinstance(dp_event, de.PoissonSampledDpEvent):
        return PoissonSampledEvent(float(dp_event.sampling_probability), from_dp_event(dp_event.event))
    raise UnsupportedEventError(
        f"{type(dp_event).__name__}: dprag has no sound equivalent of this dp_accounting "
        "event (supported: NoOp, Gaussian, Laplace, DiscreteLaplace, ZCDp, RandomizedResponse, "
        "Composed, SelfComposed, PoissonSampled)"
    )


def as_privacy_event(event: object) -> PrivacyEvent:
    """``event`` if it is a dprag event, its ``from_dp_event`` conversion if it is a dp_accounting DpEvent."""
    if isinstance(event, PrivacyEvent):
        return event
    mod = type(event).__module__ or ""
    if mod.startswith("dp_accounting"):
        return from_dp_event(event)
    # not an event at all: passed through unchanged (the cast is deliberately untrue) so that the accountant's own
    # validation names it
    return cast(PrivacyEvent, event)
