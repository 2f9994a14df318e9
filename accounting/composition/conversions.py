"""zCDP ↔ RDP and zCDP → (ε, δ) (Bun & Steinke 2016).

(ξ, ρ)-zCDP means D_α ≤ ξ + ρα for every α > 1 (Bun–Steinke Def. 1.1), i.e. the RDP curve α ↦ ξ + ρα
(:func:`zcdp_rdp`). A Gaussian with L2 sensitivity Δ and σ is (Δ²/(2σ²))-zCDP; k of them compose to Σρ_i.

:func:`zcdp_to_epsilon` converts with the order optimised over the *continuum* α > 1 (not a grid):

- ``standard``: Bun–Steinke Prop. 1.3, ε = ξ + ρ + 2 sqrt(ρ log(1/δ)) — the exact minimum over α of
  Mironov's conversion ξ + ρα + log(1/δ)/(α − 1) (attained at α = 1 + sqrt(log(1/δ)/ρ));
- ``improved``: min over α > 1 of ξ + ρα + log(1 − 1/α) − (log δ + log α)/(α − 1) (Canonne–Kamath–Steinke 2020
  Prop. 12), minimised numerically; every α gives a valid bound, so the result is valid whatever the optimiser
  returns. The KL rule of ``accounting.rdp.rdp_to_epsilon`` applies as α → 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize_scalar

from dprag.errors import InvalidParameterError

from ..errors import check_delta, check_epsilon
from ..rdp import as_orders

__all__ = ["zcdp_rdp", "zcdp_to_epsilon"]


def zcdp_rdp(rho: float, orders: Iterable[float] | None, xi: float = 0.0) -> npt.NDArray[np.float64]:
    """RDP curve ξ + ρα of (ξ, ρ)-zCDP at ``orders``."""
    r = check_epsilon("rho", rho, allow_zero=True)
    x = check_epsilon("xi", xi, allow_zero=True)
    return x + r * as_orders(orders)


def _improved(alpha: float, rho: float, xi: float, log_delta: float) -> float:
    return xi + rho * alpha + math.log1p(-1.0 / alpha) - (log_delta + math.log(alpha)) / (alpha - 1.0)


def zcdp_to_epsilon(rho: float, delta: float, xi: float = 0.0, method: str = "improved") -> float:
    """ε such that (ξ, ρ)-zCDP implies (ε, δ)-DP (see module docstring)."""
    r = check_epsilon("rho", rho, allow_zero=True)
    x = check_epsilon("xi", xi, allow_zero=True)
    d = check_delta("delta", delta)
    if method not in ("standard", "improved"):
        raise InvalidParameterError("method", "must be 'standard' or 'improved'", method)
    standard = x + r + 2.0 * math.sqrt(r * math.log(1.0 / d))
    if method == "standard":
        return standard
    if r == 0.0 and x == 0.0:
        return 0.0
    if d * d + math.expm1(-(x + r)) > 0:  # KL bound in the limit α → 1
        return 0.0
    log_d = math.log(d)
    # coarse scan over u = log(α − 1), then a bounded 1-d refinement around the best point
    us = np.linspace(-14.0, 14.0, 561)
    vals = [_improved(1.0 + math.exp(u), r, x, log_d) for u in us]
    i = int(np.argmin(vals))
    lo, hi = us[max(i - 1, 0)], us[min(i + 1, len(us) - 1)]
    res = minimize_scalar(
        lambda u: _improved(1.0 + math.exp(u), r, x, log_d), bounds=(lo, hi), method="bounded", options={"xatol": 1e-10}
    )
    best = min(vals[i], float(res.fun) if res.success else math.inf)
    return max(0.0, min(best, standard))
