"""Rényi-DP curves of privacy events, over a fixed grid of orders.

``rdp_curve(event, orders)`` returns, for each order α, an upper bound on the event's Rényi
divergence D_α (the tightest this module knows), as a numpy array. It is a ``functools.singledispatch``
function: a mechanism module that introduces a new event type registers its curve with
``@rdp_curve.register``. ``additive_delta(event)`` is the δ an event carries outside its RDP curve
(δ-approximate RDP, a sampler's statistical distance); ``rdp_curve`` of an event that has no RDP
guarantee at all (``ApproxDpEvent``) raises ``UnsupportedEventError``.

Sources (see spec/accounting.md):
- Gaussian: Mironov 2017, Prop. 7: α Δ²/(2σ²). Discrete Gaussian: Canonne–Kamath–Steinke 2020, the same.
- Laplace: Mironov 2017, Prop. 6 (exact).
- ε-DP → RDP: Bun–Steinke 2016 Prop. 3.3 (αε²/2), the trivial ε, and the tight bound quoted in
  004 Thm A.9, (1/(α-1)) log[(sinh(αε) - sinh((α-1)ε)) / sinh ε] = (1/(α-1)) log[cosh((α-½)ε) / cosh(ε/2)].
- ε-bounded-range (exponential mechanism): Cesar & Rogers 2021, (ε²/8)-zCDP, i.e. αε²/8.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError, UnsupportedEventError

from .amplification import amplified_pure_epsilon, check_probability, pure_epsilon, zhu_wang_general_rdp
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
    ZCDpEvent,
)
from .rounding import MARGIN, bound_up_array, exp_up, mul_up, sum_up, up

#: dp_accounting's default grid of orders (RdpAccountant), so cross-checks compare like with like.
DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024]
)


def as_orders(orders: Iterable[float] | None) -> npt.NDArray[np.float64]:
    """Validate and return orders as a float64 array (every order finite and > 1)."""
    arr = np.asarray(DEFAULT_ORDERS if orders is None else tuple(orders), dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidParameterError("orders", "must be a non-empty 1-d sequence")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 1):
        raise InvalidParameterError("orders", "every order must be finite and > 1")
    return arr


def _log_cosh(x: npt.ArrayLike) -> npt.NDArray[np.float64]:
    # log cosh x = log1p(2 sinh²(x/2)) is accurate for small |x| (the form |x| + log1p(e^{-2|x|}) - log 2
    # cancels to ~1e-16 absolute, i.e. relative error ~1e-16/x² — 2% at x = 1e-7); it is used for |x| ≥ 20.
    ax = np.abs(np.asarray(x, dtype=np.float64))
    small = ax < 20.0
    with np.errstate(over="ignore"):
        s = np.sinh(np.where(small, ax, 0.0) / 2.0)
    return np.where(small, np.log1p(2.0 * s * s), ax + np.log1p(np.exp(-2.0 * ax)) - math.log(2.0))


def pure_dp_rdp(epsilon: float, orders: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Tightest RDP curve implied by ε-DP alone: min(ε, αε²/2, sinh bound).

    The sinh bound is attained by randomized response, so no better bound holds for every ε-DP mechanism.
    """
    orders = np.asarray(orders, dtype=np.float64)
    eps = float(epsilon)
    if eps == 0.0:
        return np.zeros_like(orders)
    sinh_bound = (_log_cosh((orders - 0.5) * eps) - _log_cosh(np.float64(eps / 2.0))) / (orders - 1.0)
    return np.minimum(np.minimum(sinh_bound, orders * eps * eps / 2.0), eps)


def bounded_range_rdp(epsilon: float, orders: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """RDP of an ε-bounded-range mechanism (Cesar & Rogers 2021): min(αε²/8, bound of ε-DP)."""
    orders = np.asarray(orders, dtype=np.float64)
    return np.minimum(orders * epsilon * epsilon / 8.0, pure_dp_rdp(epsilon, orders))


def laplace_rdp(scale_over_sensitivity: float, orders: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Exact RDP of the Laplace mechanism with b/Δ = λ (Mironov 2017, Prop. 6)."""
    lam = float(scale_over_sensitivity)
    a = np.asarray(orders, dtype=np.float64)
    eps = 1.0 / lam
    # (1/(α-1)) log[α/(2α-1) e^{(α-1)ε} + (α-1)/(2α-1) e^{-αε}], rewritten as
    # ε + log1p((α-1)/(2α-1) · expm1(-(2α-1)ε)) / (α-1): no cancellation for large λ (small ε),
    # where the direct form loses ~λ²·1e-16 relative accuracy.
    exact = eps + np.log1p((a - 1) / (2 * a - 1) * np.expm1(-(2 * a - 1) * eps)) / (a - 1)
    return np.minimum(exact, eps)  # never above the pure-DP value ε = 1/λ


def gaussian_rdp(noise_multiplier: float, orders: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """α / (2 z²) with z = σ/Δ (Mironov 2017, Prop. 7)."""
    a = np.asarray(orders, dtype=np.float64)
    return a / (2.0 * noise_multiplier * noise_multiplier)


@functools.singledispatch
def rdp_curve(event: PrivacyEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Upper bound on the RDP of ``event`` at each order (see module docstring)."""
    raise UnsupportedEventError(f"no RDP curve is known for {type(event).__name__}")


@rdp_curve.register
def _(event: NoOpEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return np.zeros(len(orders))


@rdp_curve.register
def _(event: PureDpEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return pure_dp_rdp(event.epsilon, orders)


@rdp_curve.register
def _(event: DiscreteLaplaceEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return pure_dp_rdp(event.epsilon, orders)


@rdp_curve.register
def _(event: ExponentialMechanismEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    if event.bounded_range:
        return bounded_range_rdp(event.epsilon, orders)
    return pure_dp_rdp(event.epsilon, orders)


@rdp_curve.register
def _(event: LaplaceEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return laplace_rdp(event.scale / event.sensitivity, orders)


@rdp_curve.register
def _(event: GaussianEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return gaussian_rdp(event.noise_multiplier, orders)


@rdp_curve.register
def _(event: DiscreteGaussianEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return gaussian_rdp(event.sigma / event.sensitivity, orders)


@rdp_curve.register
def _(event: ZCDpEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return event.xi + event.rho * np.asarray(orders, dtype=np.float64)  # Bun–Steinke 2016 Def. 1.1


@rdp_curve.register
def _(event: ApproxRdpEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return rdp_curve(event.event, orders)


@rdp_curve.register
def _(event: ApproxDpEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    raise UnsupportedEventError(
        "ApproxDpEvent is only (ε,δ)-DP and has no RDP curve; compose it with basic/advanced composition"
    )


@rdp_curve.register
def _(event: RdpCurveEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    src = np.asarray(event.orders, dtype=np.float64)
    val = np.asarray(event.rdp, dtype=np.float64)
    orders = np.asarray(orders, dtype=np.float64)
    out = np.full(orders.shape, np.inf)
    # RDP is non-decreasing in α, so the value at the next grid order above is a valid bound.
    idx = np.searchsorted(src, orders, side="left") if np.all(np.diff(src) > 0) else None
    if idx is None:
        order_sort = np.argsort(src)
        src, val = src[order_sort], val[order_sort]
        idx = np.searchsorted(src, orders, side="left")
    ok = idx < len(src)
    out[ok] = val[idx[ok]]
    return out


@rdp_curve.register
def _(event: ComposedEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    total = np.zeros(len(orders))
    for e in event.events:
        total = total + rdp_curve(e, orders)
    return total


@rdp_curve.register
def _(event: SelfComposedEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    if event.count == 0:
        return np.zeros(len(orders))
    return event.count * rdp_curve(event.event, orders)


@rdp_curve.register
def _(event: PoissonSampledEvent, orders: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    if event.sampling_probability == 0:
        return np.zeros(len(orders))
    if event.sampling_probability == 1:
        return rdp_curve(event.event, orders)
    # Inner events dp_accounting cannot amplify exactly (anything but nested compositions of Gaussians:
    # pure DP, Laplace, exponential mechanism, ...) get the general bound of Zhu & Wang 2019 Thm 6, min'd
    # with pure-DP amplification and the unamplified curve (poisson_subsampled_rdp). It raises
    # UnsupportedEventError itself for inner events with no RDP curve or with an additive δ.

    try:
        dpe = event.to_dp_event()
    except UnsupportedEventError:
        return poisson_subsampled_rdp(event.event, event.sampling_probability, orders)
    import dp_accounting

    acc = dp_accounting.rdp.RdpAccountant(orders=[float(a) for a in orders])
    if not acc.supports(dpe):
        return poisson_subsampled_rdp(event.event, event.sampling_probability, orders)
    acc.compose(dpe)
    curve = np.asarray(acc._rdp, dtype=np.float64)  # noqa: SLF001 (dp_accounting exposes no getter)
    # dp_accounting's series is +inf where it does not converge and can dip to -1e-190 at tiny q: there the
    # unsampled curve (subsampling never increases RDP) and 0 are the valid values. Elsewhere its values are
    # kept as they are (where they are not monotone in α they over-estimate, which is conservative), so our
    # accountant agrees with dp_accounting's.
    bad = ~np.isfinite(curve)
    if bad.any():
        curve = np.where(bad, rdp_curve(event.event, orders), curve)
    return np.maximum(curve, 0.0)


@functools.singledispatch
def additive_delta(event: PrivacyEvent) -> float:
    """δ an event carries outside its RDP curve (summed under composition)."""
    return 0.0


# δ's add up under composition: exact sums and products, rounded up (rounding.sum_up / mul_up)
@additive_delta.register
def _(event: ApproxRdpEvent) -> float:
    return _sum_up(event.delta, additive_delta(event.event))


@additive_delta.register
def _(event: ComposedEvent) -> float:
    return _sum_up(*(additive_delta(e) for e in event.events))


@additive_delta.register
def _(event: SelfComposedEvent) -> float:
    return _mul_up(additive_delta(event.event), event.count)


def _sum_up(*values: float) -> float:
    nonzero = [float(v) for v in values if v != 0]  # the common all-zero case without rationals
    return 0.0 if not nonzero else nonzero[0] if len(nonzero) == 1 else sum_up(*nonzero)


def _mul_up(value: float, count: int) -> float:
    return 0.0 if value == 0 or count == 0 else mul_up(value, count)


def poisson_subsampled_rdp(
    inner: PrivacyEvent, probability: float, orders: Iterable[float] | None
) -> npt.NDArray[np.float64]:
    """RDP of ``inner`` run on a Poisson subsample (add/remove): min of Zhu–Wang Thm 6, pure-DP amplification
    and the unamplified curve (``accounting.amplification``)."""
    if not isinstance(inner, PrivacyEvent):
        raise InvalidParameterError("inner", "must be a PrivacyEvent", inner)
    g = check_probability(probability)
    a = as_orders(orders)
    if g == 0:
        return np.zeros(a.shape)
    if additive_delta(inner) > 0:
        raise UnsupportedEventError(
            "Poisson subsampling of a δ-approximate RDP event: no amplification bound is registered"
        )
    unamplified = np.asarray(rdp_curve(inner, a), dtype=np.float64)
    if g == 1:
        return unamplified
    best = np.minimum(unamplified, zhu_wang_general_rdp(lambda x: rdp_curve(inner, x), g, a))
    eps = pure_epsilon(inner)
    if eps is not None:
        best = np.minimum(best, pure_dp_rdp(amplified_pure_epsilon(eps, g), a))
    return best


def sampler_tv(event: PrivacyEvent) -> float:
    """Total variation of the samplers used from the exact ones, summed over the composition."""
    if isinstance(event, DiscreteGaussianEvent):
        return event.sampler_tv
    if isinstance(event, ComposedEvent):
        return _sum_up(*(sampler_tv(e) for e in event.events))
    if isinstance(event, SelfComposedEvent):
        return _mul_up(sampler_tv(event.event), event.count)
    if isinstance(event, (ApproxRdpEvent, PoissonSampledEvent)):
        return sampler_tv(event.event)
    return 0.0


# Rounding (spec/accounting/composition.md §1): every conversion below returns a certified bound — ε and δ never
# below the exact formula evaluated on the float curve. Per order α (exact float), with u = 2^-53 and
# K = LIBM_REL = 2^-49 = 16u the accuracy of log/log1p/exp/expm1:
# * α − 1 is exact for 1 < α < 2^53 (same binade or Sterbenz), else within u relative;
# * log1p(fl(−1/α)): fl(−1/α) is within u/α of −1/α and log1p's slope on that interval is <= α/(α−1−u), so the
#   argument error moves the result by <= u/(α−1−u) <= 2u/(α−1) (α − 1 >= 2u for every float α > 1); log1p adds K;
# * each other elementary function adds K relative, each + − × / adds u relative to its result.
# Summing these, a formula of terms t_i (in the order the code evaluates it) errs by at most (K + 4u)·Σ|t_i| plus
# the 2u/(α−1) above (times α − 1 where the formula multiplies by it), i.e. by <= 20u·M with M = Σ|t_i| + 2/(α−1)
# (or + 2), the ``magnitude`` passed to bound_up_array; its margin 2^-48·M = 32u·M leaves slack for the rounding of
# M itself. The KL test is made one-sided the same way.


def rdp_to_epsilon(rdp: np.ndarray, orders: np.ndarray, delta: float, method: str = "improved") -> tuple[float, float]:
    """Convert an RDP curve to ε at ``delta``; returns (ε, optimal order).

    ``standard``: Mironov 2017 Prop. 3, ε = R(α) + log(1/δ)/(α-1).
    ``improved``: Canonne–Kamath–Steinke 2020 Prop. 12 / Balle et al. 2020 Thm 21,
    ε = R(α) + log((α-1)/α) - (log δ + log α)/(α-1) — the conversion dp_accounting uses — together
    with the KL bound dp_accounting also applies: D_α ≥ KL for α > 1 and TV ≤ sqrt(1 - e^{-KL})
    (Bretagnolle–Huber), so a pair with δ ≥ sqrt(1 - e^{-R(α)}) is (0, δ)-DP.

    Rounded outward: each order's ε is moved up by a proven bound on its floating-point error (2^-48 times
    the sum of the magnitudes of its terms, plus one ulp), and the KL rule applies only where it holds with
    that margin, so the result is never below the exact conversion of the float curve ``rdp``.
    """
    rdp = np.asarray(rdp, dtype=np.float64)
    a = np.asarray(orders, dtype=np.float64)
    if rdp.shape != a.shape:
        raise InvalidParameterError("rdp", "must have the same length as orders", rdp.shape)
    if not (0 < delta < 1):
        raise InvalidParameterError("delta", "must lie in (0, 1)", delta)
    log_d = math.log(delta)
    a1 = a - 1.0
    with np.errstate(over="ignore", invalid="ignore"):
        if method == "standard":
            eps = bound_up_array(rdp - log_d / a1, np.abs(rdp) + (abs(log_d) + 2.0) / a1)
        elif method == "improved":
            l1, la = np.log1p(-1.0 / a), np.log(a)
            eps = bound_up_array(rdp + l1 - (log_d + la) / a1, np.abs(rdp) + np.abs(l1) + (abs(log_d) + la + 2.0) / a1)
            # KL rule δ² + expm1(−R) >= 0, one-sided: δ² (u) and expm1 (K) err by <= (K + 2u)(δ² + |expm1|) < 2^-48·
            # (δ² + |expm1|); a δ² in the subnormal range (δ < 2^-500) is replaced by 0, a lower bound.
            d2 = delta * delta if delta * delta >= 2.0**-1000 else 0.0
            em = np.expm1(-rdp)
            kl_ok = d2 + em >= MARGIN * (d2 - em)
            eps = np.where(kl_ok, 0.0, eps)
        else:
            raise InvalidParameterError("method", "must be 'standard' or 'improved'", method)
    eps = np.where(np.isnan(eps), np.inf, eps)
    i = int(np.argmin(eps))
    return max(0.0, float(eps[i])), float(a[i])


def rdp_to_delta(rdp: np.ndarray, orders: np.ndarray, epsilon: float, method: str = "improved") -> tuple[float, float]:
    """The δ(ε) direction of :func:`rdp_to_epsilon`; returns (δ, optimal order), δ capped at 1.

    ``standard``: Mironov 2017 Prop. 3 solved for δ, δ = exp((α-1)(R(α) - ε)).
    ``improved``: Canonne–Kamath–Steinke 2020 Prop. 12, δ = exp((α-1)(R(α) - ε + log(1-1/α)) - log α),
    and the KL bound δ = sqrt(1 - e^{-R(α)}) (valid at every ε ≥ 0), as in dp_accounting.

    Rounded outward like :func:`rdp_to_epsilon`: log δ at each order is moved up by a proven bound on its
    floating-point error, and the exponential by ``rounding.exp_up``.
    """
    rdp = np.asarray(rdp, dtype=np.float64)
    a = np.asarray(orders, dtype=np.float64)
    if rdp.shape != a.shape:
        raise InvalidParameterError("rdp", "must have the same length as orders", rdp.shape)
    try:
        eps = float(epsilon)
    except (TypeError, ValueError):
        raise InvalidParameterError("epsilon", "must be a real number", epsilon) from None
    if not (eps >= 0 and math.isfinite(eps)):
        raise InvalidParameterError("epsilon", "must be finite and >= 0", epsilon)
    a1 = a - 1.0
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if method == "standard":
            log_delta = bound_up_array(a1 * (rdp - eps), a1 * (np.abs(rdp) + eps))
        elif method == "improved":
            l1, la = np.log1p(-1.0 / a), np.log(a)
            log_delta = bound_up_array(a1 * (rdp - eps + l1) - la, a1 * (np.abs(rdp) + eps + np.abs(l1)) + la + 2.0)
            # KL: 0.5·log(−expm1(−R)) errs by <= (K + 2u)(1 + |result|) (the argument's relative error becomes an
            # absolute one through log); expm1 keeps full relative accuracy for tiny R
            log_kl = np.where(rdp > 0, 0.5 * np.log(-np.expm1(-rdp)), -np.inf)
            log_delta = np.minimum(log_delta, bound_up_array(log_kl, 1.0 + np.abs(log_kl)))
        else:
            raise InvalidParameterError("method", "must be 'standard' or 'improved'", method)
    log_delta = np.where(np.isnan(log_delta), np.inf, log_delta)
    i = int(np.argmin(log_delta))
    return min(1.0, exp_up(min(float(log_delta[i]), 0.0))), float(a[i])


def epsilon_of(
    event: PrivacyEvent, delta: float, orders: Sequence[float] | None = None, method: str = "improved"
) -> tuple[float, float]:
    """(ε, δ_total) of one event (or composition) through its RDP curve.

    ``delta`` is the conversion δ; δ_total adds the event's own additive δ and the sampler TV term
    (1 + e^ε)·TV (a sampler within TV η of the exact one turns (ε, δ) into (ε, δ + (1+e^ε)η)).
    """
    a = as_orders(orders)
    eps, _ = rdp_to_epsilon(rdp_curve(event, a), a, delta, method)
    tv = sampler_tv(event)
    extra = _tv_term_up(eps, tv)
    return eps, sum_up(delta, additive_delta(event), extra)  # every δ rounded up, summed exactly and rounded up


def _tv_term_up(eps: float, tv: float) -> float:
    """(1 + e^ε)·tv rounded up (exact product of the rounded-up factors)."""
    if tv == 0:
        return 0.0
    e = exp_up(eps)
    if not math.isfinite(e):
        return math.inf
    return up((1 + Fraction(e)) * Fraction(tv))
