"""Privacy-loss-distribution accounting, delegated to dp_accounting's ``PLDAccountant``.

Sources: Koskela, Jälkö, Honkela 2020 and Meiser & Mohammadi 2018 (PLD accounting by FFT); Doroshenko et al.
2022 ("Connect the dots"); dp_accounting's implementation with ``pessimistic_estimate=True`` (the default),
whose ε / δ are upper bounds on the true ones up to floating point.

Events that convert with ``to_dp_event()`` go to dp_accounting's ``PLDAccountant`` (Gaussian, Laplace,
discrete Gaussian with an exact sampler, Poisson-sampled Gaussian / Laplace, compositions). In addition:

- ``DiscreteLaplaceEvent(scale, Δ)`` goes through dp_accounting's ``DiscreteLaplaceDpEvent(1/scale, Δ)``
  (same distribution P(x) ∝ exp(−|x|/scale); events.py defines no ``to_dp_event`` for it);
- events with only a fixed (ε, δ) guarantee (``PureDpEvent``, ``ExponentialMechanismEvent``, ``ApproxDpEvent``,
  Poisson-sampled ones via Balle–Barthe–Gaboardi 2018 Thm 8) use ``from_privacy_parameters(ε, δ)``: the PLD
  of the canonical (ε, δ) mechanism, which dominates every (ε, δ)-DP mechanism (Kairouz–Oh–Viswanath 2015),
  so composing it is sound for any such event (and exact for randomized response).

Everything else (``ApproxRdpEvent``, ``RdpCurveEvent``, a discrete Gaussian with sampler TV > 0, mechanism
events without a dp_accounting equivalent) raises ``UnsupportedEventError``. Neighbouring relation:
dp_accounting's ADD_OR_REMOVE_ONE; event sensitivities are taken as given (the relation of the mechanism that
emitted them); the (ε, δ) parts are symmetric and valid for any relation.
"""

from __future__ import annotations

import math

from ..errors import InvalidParameterError, UnsupportedEventError, check_delta, check_positive_int
from ..events import (
    ComposedEvent,
    DiscreteLaplaceEvent,
    NoOpEvent,
    PrivacyEvent,
    SelfComposedEvent,
)
from .accountant import _leaf_dp_term

__all__ = ["PldAccountant"]


class PldAccountant:
    """PLD accountant: ``compose(event, count)``, ``get_epsilon(delta)``, ``get_delta(epsilon)``.

    ``value_discretization_interval`` is dp_accounting's privacy-loss grid step (default 1e-4); smaller is
    tighter and slower.
    """

    def __init__(self, value_discretization_interval: float = 1e-4):
        v = float(value_discretization_interval)
        if not (v > 0 and math.isfinite(v)):
            raise InvalidParameterError("value_discretization_interval", "must be finite and > 0",
                                        value_discretization_interval)
        import dp_accounting

        self._dpa = dp_accounting
        self._interval = v
        self._acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=v)
        self._extra = None  # composed PLD of the (ε, δ)-only parts

    @property
    def value_discretization_interval(self) -> float:
        return self._interval

    def _plan(self, event: PrivacyEvent, mult: int, ops: list) -> None:
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
        term = _leaf_dp_term(event)
        if term is None:
            raise UnsupportedEventError(f"PldAccountant cannot account for {type(event).__name__}: no dp_accounting "
                                        "PLD equivalent and no fixed (ε, δ) guarantee")
        if term[0] > 0 or term[1] > 0:
            ops.append(("eps_delta", term, mult))

    def compose(self, event: PrivacyEvent, count: int = 1) -> "PldAccountant":
        """Add ``count`` repetitions of ``event``; raises (without changing state) if any part is unsupported."""
        count = check_positive_int("count", count)
        ops: list = []
        self._plan(event, count, ops)
        pld_mod = self._dpa.pld.privacy_loss_distribution
        for kind, what, mult in ops:
            if kind == "dp":
                self._acc.compose(what, mult)
            else:
                eps, dlt = what
                params = self._dpa.pld.common.DifferentialPrivacyParameters(epsilon=eps, delta=dlt)
                pld = pld_mod.from_privacy_parameters(params, value_discretization_interval=self._interval)
                if mult > 1:
                    pld = pld.self_compose(mult)
                self._extra = pld if self._extra is None else self._extra.compose(pld)
        return self

    def _pld(self):
        base = self._acc._pld  # noqa: SLF001 (dp_accounting exposes no getter for the composed PLD)
        return base if self._extra is None else base.compose(self._extra)

    def get_epsilon(self, delta: float) -> float:
        """Pessimistic ε at total δ = ``delta`` (an upper bound on the true ε up to floating point)."""
        delta = check_delta("delta", delta)
        return float(self._pld().get_epsilon_for_delta(delta))

    def get_delta(self, epsilon: float) -> float:
        try:
            eps = float(epsilon)
        except (TypeError, ValueError):
            raise InvalidParameterError("epsilon", "must be a real number", epsilon) from None
        if not (eps >= 0 and math.isfinite(eps)):
            raise InvalidParameterError("epsilon", "must be finite and >= 0", epsilon)
        return float(min(1.0, self._pld().get_delta_for_epsilon(eps)))
