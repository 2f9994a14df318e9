"""RDP amplification by Poisson subsampling, for any inner mechanism (the bounds behind ``rdp.poisson_subsampled_rdp``).

Sources:
- Zhu & Wang, "Poisson Subsampled Rényi Differential Privacy", ICML 2019, Theorem 6 (general upper bound):
  if M is (ℓ, ε(ℓ))-RDP for the integer orders ℓ = 2 … α, then M ∘ PoissonSample_γ satisfies, for integer
  α ≥ 2, under add/remove,

      ε'(α) ≤ 1/(α−1) · log{ (1−γ)^{α−1}(αγ − γ + 1) + C(α,2) γ² (1−γ)^{α−2} e^{ε(2)}
                              + 3 Σ_{ℓ=3}^{α} C(α,ℓ) γ^ℓ (1−γ)^{α−ℓ} e^{(ℓ−1) ε(ℓ)} },

  which is within log(3)/(α−1) of their exact formula for the Gaussian (Theorem 5, the same sum with factor 1
  everywhere — ``zhu_wang_tight_log_moment``, what dp_accounting computes for the subsampled Gaussian).
  Evaluated in log space (logsumexp of log-binomials). Non-integer orders use the next integer order above,
  which is valid because D_α is non-decreasing in α; orders in (1, 2) use α = 2.
- Pure ε-DP amplification (Balle, Barthe & Gaboardi 2018, Thm 8 for Poisson sampling under add/remove;
  Li, Qardaji & Su 2012): ε' = log(1 + γ(e^ε − 1)); its RDP curve (``rdp.pure_dp_rdp``) is a second valid bound.
- Subsampling never hurts: D_α of the subsampled pair ≤ D_α of the inner pair (joint convexity of
  (P, Q) ↦ E_Q[(P/Q)^α]), so the inner curve is a third valid bound.
The curve ``rdp.rdp_curve`` registers for ``PoissonSampledEvent`` (when dp_accounting has no exact formula)
is the pointwise minimum of the three (``rdp.poisson_subsampled_rdp``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

import numpy as np
import numpy.typing as npt
from scipy import special

from dprag.errors import InvalidParameterError

from .errors import check_epsilon
from .events import (
    ComposedEvent,
    DiscreteLaplaceEvent,
    ExponentialMechanismEvent,
    LaplaceEvent,
    NoOpEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    PureDpEvent,
    SelfComposedEvent,
)
from .rounding import bound_up, mul_up, sum_up

__all__ = [
    "check_probability",
    "amplified_pure_epsilon",
    "zhu_wang_general_rdp",
    "zhu_wang_tight_log_moment",
    "pure_epsilon",
]


def check_probability(p: float) -> float:
    try:
        v = float(p)
    except (TypeError, ValueError):
        raise InvalidParameterError("probability", "must be a real number in [0, 1]", p) from None
    if not (0.0 <= v <= 1.0):  # also refuses NaN
        raise InvalidParameterError("probability", "must lie in [0, 1]", p)
    return v


def amplified_pure_epsilon(epsilon: float, probability: float) -> float:
    """log(1 + γ(e^ε − 1)): Poisson-subsampled ε-DP under add/remove (Balle et al. 2018, Thm 8)."""
    eps = check_epsilon("epsilon", epsilon, allow_zero=True)
    p = check_probability(probability)
    if eps == 0 or p == 0:
        return 0.0
    # Rounded outward (rounding.bound_up; K = 2^-49 the accuracy of log/log1p/exp/expm1, u = 2^-53): an argument
    # y of log1p within relative r moves it by <= r·y/(1 + y) <= r·min(1, y); log1p, log add K relative each.
    if eps > 700:  # log(p·e^ε + 1 − p) without overflow
        e_neg = math.exp(-eps)
        if e_neg < 2.0**-1000:  # subnormal range, where exp's error is absolute: use an upper bound instead
            e_neg = 2.0**-999
        z = (1 - p) * e_neg / p  # within K + 3u relative
        tail = math.log1p(z)
        lp = math.log(p)
        return min(eps, bound_up(eps + lp + tail, eps + abs(lp) + tail + min(1.0, z)))
    y = p * math.expm1(eps)  # within K + u relative
    amplified = math.log1p(y)
    return min(eps, bound_up(amplified, amplified + min(1.0, y)))


def _log_comb(n: npt.NDArray[np.float64] | np.float64, k: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return cast("npt.NDArray[np.float64]", special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1))


def _log_moments(
    gamma: float, inner_int_rdp: npt.NDArray[np.float64], alphas: npt.NDArray[np.int64], factor3: bool
) -> npt.NDArray[np.float64]:
    """log of the bracket in Zhu–Wang Thm 6 (factor3) / Thm 5 (no factor) at each integer α in ``alphas``.

    ``inner_int_rdp[ℓ]`` = ε(ℓ) for ℓ = 0 … max(alphas) (entries 0, 1 unused).
    """
    lg, l1g = math.log(gamma), math.log1p(-gamma)
    out = np.empty(alphas.size)
    for i, a in enumerate(alphas):
        a = int(a)
        ell = np.arange(2, a + 1, dtype=np.float64)
        eps_l = inner_int_rdp[2 : a + 1]
        with np.errstate(invalid="ignore"):
            terms = _log_comb(np.float64(a), ell) + ell * lg + (a - ell) * l1g + (ell - 1.0) * eps_l
        if factor3 and a >= 3:
            terms[1:] += math.log(3.0)
        terms = np.where(np.isnan(terms), np.inf, terms)  # (ℓ−1)·inf
        head = (a - 1) * l1g + math.log1p((a - 1) * gamma)
        out[i] = special.logsumexp(np.concatenate(([head], terms)))
    return out


def _integer_orders(orders: npt.ArrayLike) -> npt.NDArray[np.int64]:
    return np.maximum(2, np.ceil(np.asarray(orders, dtype=np.float64) - 1e-12)).astype(np.int64)


def zhu_wang_general_rdp(
    inner_rdp_at: Callable[[npt.NDArray[np.float64]], npt.ArrayLike], probability: float, orders: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """Zhu & Wang 2019 Thm 6 at ``orders`` (next integer order above each), for any inner mechanism.

    ``inner_rdp_at(int_orders: np.ndarray) -> np.ndarray`` gives the inner mechanism's RDP at integer orders.
    """
    g = check_probability(probability)
    orders = np.asarray(orders, dtype=np.float64)
    if g == 0:
        return np.zeros(orders.shape)
    ia = _integer_orders(orders)
    amax = int(ia.max())
    inner = np.full(amax + 1, np.inf)
    inner[2:] = np.asarray(inner_rdp_at(np.arange(2, amax + 1, dtype=np.float64)), dtype=np.float64)
    if g == 1:
        return inner[ia]
    uniq = np.unique(ia)
    vals = _log_moments(g, inner, uniq, factor3=True) / (uniq - 1.0)
    return np.maximum(vals[np.searchsorted(uniq, ia)], 0.0)


def zhu_wang_tight_log_moment(
    inner_rdp_at: Callable[[npt.NDArray[np.float64]], npt.ArrayLike], probability: float, orders: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """Zhu & Wang 2019 Thm 5 (exact for the subsampled Gaussian and Laplace): same sum, factor 1, integer α.

    Not a valid bound for every mechanism (Thm 5 needs their condition of Thm 8); exposed for cross-checks.
    """
    g = check_probability(probability)
    orders = np.asarray(orders, dtype=np.float64)
    ia = _integer_orders(orders)
    if np.any(np.abs(ia - orders) > 1e-9):
        raise InvalidParameterError("orders", "the tight formula is for integer orders >= 2")
    amax = int(ia.max())
    inner = np.full(amax + 1, np.inf)
    inner[2:] = np.asarray(inner_rdp_at(np.arange(2, amax + 1, dtype=np.float64)), dtype=np.float64)
    if g == 0:
        return np.zeros(orders.shape)
    if g == 1:
        return inner[ia]
    uniq = np.unique(ia)
    vals = _log_moments(g, inner, uniq, factor3=False) / (uniq - 1.0)
    return vals[np.searchsorted(uniq, ia)]


def pure_epsilon(event: PrivacyEvent) -> float | None:
    """The pure-DP ε an event is known to satisfy, or None."""
    if isinstance(event, NoOpEvent):
        return 0.0
    if isinstance(event, (PureDpEvent, ExponentialMechanismEvent)):
        return float(event.epsilon)
    if isinstance(event, (LaplaceEvent, DiscreteLaplaceEvent)):
        return float(event.epsilon)
    if isinstance(event, ComposedEvent):  # basic composition: the exact sum, rounded up
        parts = [pure_epsilon(e) for e in event.events]
        return None if any(p is None for p in parts) else sum_up(*cast(list[float], parts))
    if isinstance(event, SelfComposedEvent):  # count·ε exactly, rounded up
        inner = pure_epsilon(event.event)
        return None if inner is None else (0.0 if event.count == 0 else mul_up(inner, event.count))
    if isinstance(event, PoissonSampledEvent):
        inner = pure_epsilon(event.event)
        return None if inner is None else amplified_pure_epsilon(inner, event.sampling_probability)
    return None
