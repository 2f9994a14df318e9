"""Privacy-loss-distribution accounting, delegated to dp_accounting's ``PLDAccountant``.

Sources: Koskela, Jälkö, Honkela 2020 and Meiser & Mohammadi 2018 (PLD accounting by FFT); Doroshenko et al.
2022 ("Connect the dots"); dp_accounting's implementation with ``pessimistic_estimate=True`` (the default),
whose ε / δ are upper bounds on the true ones up to floating point.

Events that convert with ``to_dp_event()`` go to dp_accounting's ``PLDAccountant`` (Gaussian, Laplace,
Poisson-sampled Gaussian / Laplace, compositions). In addition:

- ``DiscreteGaussianEvent(σ, Δ)`` (and its Poisson-sampled version) is composed with dp_accounting's
  ``from_discrete_gaussian_mechanism`` (pessimistic estimate, connect-the-dots), the PLD of the lattice
  mechanism itself. It is *not* sent through ``to_dp_event()``: that gives a ``ZCDpEvent`` (same RDP curve),
  and a continuous Gaussian PLD does not dominate the discrete one (spec/accounting/composition.md: σ = 1, 10-fold,
  δ = 1e-6: exact ε 19.4916, continuous-Gaussian PLD 19.4237). dp_accounting truncates the noise to [−T, T];
  T = ⌈15.3σ⌉ + Δ keeps the mass outside below τ = 2·e^{−T²/(2σ²)} < 1e-50, and the truncation and the
  event's ``sampler_tv`` enter as a total-variation term: (ε, δ_PLD(ε) + (1 + e^ε)·Σ count·(τ + sampler_tv))
  (coupling; CKS 2020 §5), as in ``accounting.gdp.discrete_gaussian_epsilon``;
- ``DiscreteLaplaceEvent(scale, Δ)`` goes through dp_accounting's ``DiscreteLaplaceDpEvent(1/scale, Δ)``
  (same distribution P(x) ∝ exp(−|x|/scale); events.py defines no ``to_dp_event`` for it);
- events with only a fixed (ε, δ) guarantee (``PureDpEvent``, ``ExponentialMechanismEvent``, ``ApproxDpEvent``,
  Poisson-sampled ones via Balle–Barthe–Gaboardi 2018 Thm 8) use ``from_privacy_parameters(ε, δ)``: the PLD
  of the canonical (ε, δ) mechanism, which dominates every (ε, δ)-DP mechanism (Kairouz–Oh–Viswanath 2015),
  so composing it is sound for any such event (and exact for randomized response).

Everything else (``ApproxRdpEvent``, ``RdpCurveEvent``, ``ZCDpEvent`` (zCDP alone implies no PLD), mechanism
events without a dp_accounting equivalent) raises ``UnsupportedEventError``. Neighbouring relation:
dp_accounting's ADD_OR_REMOVE_ONE; event sensitivities are taken as given (the relation of the mechanism that
emitted them); the (ε, δ) parts are symmetric and valid for any relation.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

from dprag.errors import InvalidParameterError, UnsupportedEventError

from ..errors import check_delta, check_positive_int
from ..events import (
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    NoOpEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    SelfComposedEvent,
    as_privacy_event,
)
from .accountant import leaf_dp_term

if TYPE_CHECKING:
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

__all__ = ["PldAccountant", "discrete_gaussian_truncation"]

#: dp_accounting's discrete-Gaussian pmf is truncated at T = ⌈_TRUNC_SIGMAS·σ⌉ + Δ (mass outside < 1e-50)
_TRUNC_SIGMAS = 15.3

#: one step of ``PldAccountant.compose``'s plan: (kind, what, count) with what a dp_accounting ``DpEvent``
#: (kind "dp"), a (DiscreteGaussianEvent, sampling probability) pair ("dgauss") or an (ε, δ) pair ("eps_delta")
_Op = tuple[str, object, int]


def discrete_gaussian_truncation(sigma: float, sensitivity: int) -> tuple[int, float]:
    """(T, τ): the truncation bound given to dp_accounting and an upper bound τ = 2·e^{−T²/(2σ²)} on
    N_Z(0, σ²)'s mass outside [−T, T].

    Proof: with g(x) = e^{−x²/(2σ²)} decreasing on x ≥ 0, Σ_{x>T} g(x) ≤ ∫_T^∞ g ≤ σ√(π/2)·e^{−T²/(2σ²)}
    (erfc z ≤ e^{−z²}), and the normaliser Z = Σ_x g(x) ≥ max(1, σ√(2π) − 1) (a unimodal sum is at least its
    integral minus its maximum); 2σ√(π/2)/max(1, σ√(2π) − 1) ≤ 2 for every σ > 0."""
    t = int(math.ceil(_TRUNC_SIGMAS * sigma)) + int(sensitivity)
    return t, 2.0 * math.exp(-0.5 * (t / sigma) ** 2)


class PldAccountant:
    """PLD accountant: ``compose(event, count)``, ``get_epsilon(delta)``, ``get_delta(epsilon)``.

    ``value_discretization_interval`` is dp_accounting's privacy-loss grid step (default 1e-4); smaller is
    tighter and slower.
    """

    def __init__(self, value_discretization_interval: float = 1e-4) -> None:
        v = float(value_discretization_interval)
        if not (v > 0 and math.isfinite(v)):
            raise InvalidParameterError(
                "value_discretization_interval", "must be finite and > 0", value_discretization_interval
            )
        import dp_accounting

        self._dpa = dp_accounting
        self._interval = v
        self._acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=v)
        # composed PLD of the (ε, δ)-only and discrete-Gaussian parts
        self._extra: PrivacyLossDistribution | None = None
        self._tvs: list[float] = []  # count·(truncation mass + sampler TV) of each discrete-Gaussian part

    @property
    def value_discretization_interval(self) -> float:
        return self._interval

    def _plan(self, event: PrivacyEvent, mult: int, ops: list[_Op]) -> None:
        dpa = self._dpa
        if not isinstance(event, PrivacyEvent):
            raise InvalidParameterError("event", "must be a PrivacyEvent", event)
        if mult == 0 or isinstance(event, NoOpEvent):
            return
        if isinstance(event, ComposedEvent):
            for e in event.events:
                self._plan(e, mult, ops)
            return
        if isinstance(event, SelfComposedEvent):
            self._plan(event.event, mult * event.count, ops)
            return
        if isinstance(event, DiscreteGaussianEvent):
            ops.append(("dgauss", (event, 1.0), mult))
            return
        if isinstance(event, PoissonSampledEvent) and isinstance(event.event, DiscreteGaussianEvent):
            if event.sampling_probability > 0:
                ops.append(("dgauss", (event.event, float(event.sampling_probability)), mult))
            return
        if isinstance(event, DiscreteLaplaceEvent):
            ops.append(("dp", dpa.dp_event.DiscreteLaplaceDpEvent(1.0 / event.scale, int(event.sensitivity)), mult))
            return
        try:
            dpe = event.to_dp_event()
        except UnsupportedEventError:
            dpe = None
        if dpe is not None and self._acc.supports(dpe):
            ops.append(("dp", dpe, mult))
            return
        term = leaf_dp_term(event)
        if term is None:
            raise UnsupportedEventError(
                f"PldAccountant cannot account for {type(event).__name__}: no dp_accounting "
                "PLD equivalent and no fixed (ε, δ) guarantee"
            )
        if term[0] > 0 or term[1] > 0:
            ops.append(("eps_delta", term, mult))

    def compose(self, event: PrivacyEvent, count: int = 1) -> PldAccountant:
        """Add ``count`` repetitions of ``event``; raises (without changing state) if any part is unsupported."""
        count = check_positive_int("count", count)
        event = as_privacy_event(event)  # a dp_accounting DpEvent is converted (events.from_dp_event)
        ops: list[_Op] = []
        self._plan(event, count, ops)
        pld_mod = self._dpa.pld.privacy_loss_distribution
        for kind, what, mult in ops:
            if kind == "dp":
                self._acc.compose(what, mult)
            elif kind == "dgauss":
                ev, q = cast(tuple[DiscreteGaussianEvent, float], what)
                trunc, tau = discrete_gaussian_truncation(ev.sigma, ev.sensitivity)
                pld = pld_mod.from_discrete_gaussian_mechanism(
                    float(ev.sigma),
                    sensitivity=int(ev.sensitivity),
                    truncation_bound=trunc,
                    pessimistic_estimate=True,
                    value_discretization_interval=self._interval,
                    sampling_prob=q,
                    use_connect_dots=True,
                )
                if mult > 1:
                    pld = pld.self_compose(mult)
                self._extra = pld if self._extra is None else self._extra.compose(pld)
                self._tvs.append(mult * (tau + float(ev.sampler_tv)))
            else:
                eps, dlt = cast(tuple[float, float], what)
                params = self._dpa.pld.common.DifferentialPrivacyParameters(epsilon=eps, delta=dlt)
                pld = pld_mod.from_privacy_parameters(params, value_discretization_interval=self._interval)
                if mult > 1:
                    pld = pld.self_compose(mult)
                self._extra = pld if self._extra is None else self._extra.compose(pld)
        return self

    def _pld(self) -> PrivacyLossDistribution:
        base = self._acc._pld  # noqa: SLF001 (dp_accounting exposes no getter for the composed PLD)
        return base if self._extra is None else base.compose(self._extra)

    @property
    def sampler_tv(self) -> float:
        """Σ count·(truncation mass + sampler TV) of the discrete-Gaussian parts (0 without any)."""
        return math.fsum(self._tvs)

    def _tv_term(self, eps: float) -> float:
        tv = self.sampler_tv
        return (1.0 + math.exp(min(eps, 709.0))) * tv if tv else 0.0

    def get_epsilon(self, delta: float) -> float:
        """Pessimistic ε at total δ = ``delta`` (an upper bound on the true ε up to floating point): the
        smallest ε found with δ_PLD(ε) + (1 + e^ε)·TV ≤ delta (``inf`` if none)."""
        delta = check_delta("delta", delta)
        pld = self._pld()
        eps = float(pld.get_epsilon_for_delta(delta))
        if not self._tvs:
            return eps
        shrink = 1e-9
        for _ in range(200):
            extra = self._tv_term(eps)
            if not math.isfinite(eps) or extra >= delta:
                return math.inf
            if float(pld.get_delta_for_epsilon(eps)) + extra <= delta:
                return eps
            eps = max(eps, float(pld.get_epsilon_for_delta((delta - extra) * (1.0 - shrink))))
            shrink *= 2.0
        return math.inf  # pragma: no cover

    def get_delta(self, epsilon: float) -> float:
        try:
            eps = float(epsilon)
        except (TypeError, ValueError):
            raise InvalidParameterError("epsilon", "must be a real number", epsilon) from None
        if not (eps >= 0 and math.isfinite(eps)):
            raise InvalidParameterError("epsilon", "must be finite and >= 0", epsilon)
        return float(min(1.0, self._pld().get_delta_for_epsilon(eps) + self._tv_term(eps)))
