"""(ε, δ)-DP selection of one key among the keys the voters wrote: the exponential mechanism over the *seen*
keys and a fallback ⊥ of fixed score (spec/accounting/rag.md §5.2).

Why. ``string_selection`` releases a key from the universal domain {⊥} ∪ Σ* at δ = 0, but its public base
measure prices a key by its length: a 9-character key needs ε·h/2 ≳ 37 nats (h ≥ 8 votes at ε = 10). Here the
domain is the set S of keys some voter wrote, plus ⊥:

    P(s) ∝ exp(ε·h(s)/2)  (s ∈ S),         P(⊥) ∝ exp(ε·T/2),   T = 1 + 2·ln(1/δ)/ε,

so a key beats ⊥ once h(s) > T: T ≈ 3.8 votes at ε = 10, δ = 10^-6, whatever its length. A key no voter wrote
has probability 0 on one input and may have positive probability on its neighbour; that is the δ.

Claim. With h' = h − 1_a + 1_b (one voter's key moves from a to b; either may be "no key"), and
δ ≤ 1 − e^{−ε/2}, the release is (ε, δ)-DP in both directions. Proof (exact weights w = e^{εh/2}, w(⊥) =
e^{εT/2}, Z = Σ w ≥ w(⊥)):
(i) a key seen on one side only has h = 1 there, so its probability is ≤ e^{ε/2}/w(⊥) = e^{−ε(T−1)/2} = δ;
(ii) Z' = Z + Δ_a + Δ_b with Δ_b ≥ 0 ≥ Δ_a. Δ_b ≤ max(Z(e^{ε/2} − 1), e^{ε/2}) ≤ Z·max(e^{ε/2} − 1, δ) and
|Δ_a| ≤ max(Z(1 − e^{−ε/2}), e^{ε/2}) ≤ Z·max(1 − e^{−ε/2}, δ); with δ ≤ 1 − e^{−ε/2} ≤ e^{ε/2} − 1 this gives
e^{−ε/2} ≤ Z'/Z ≤ e^{ε/2}; every outcome seen on both sides (and ⊥) has w'/w ∈ [e^{−ε/2}, e^{ε/2}], so its
probability ratio lies in [e^{−ε}, e^{ε}];
(iii) for any set O: P'(O) ≤ e^ε·P(O ∖ {b}) + P'(b)·1[b unseen in h] ≤ e^ε·P(O) + δ, and symmetrically with a.

Sampling is exact for the float weights (``string_selection.exact_index``: exact rationals, exactly uniform
integers), every weight a normal float (guards below), so no outcome has probability 0 on one side by
underflow. Guards: ε·h/2 ≤ 600 and δ ≥ e^-100, so the log-weights lie within 700 of their maximum (every weight a normal
float) and are at most 1,300 in size; the float error in a log-weight is then ≤ 2^-41; the
mechanism runs at ε_run = ε·(1 − 2^-20) and puts ⊥ at log-weight ε_run/2 + ln(1/δ) + 2^-30, so the realised
ratios stay within ε_run + 2^-38 ≤ ε and every one-sided probability within δ·e^{−2^-30 + 2^-40} < δ.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from dprag.errors import InvalidParameterError

from ..errors import check_delta, check_epsilon
from ..events import ApproxDpEvent
from ..noise.source import RandomSource
from .string_selection import BOTTOM, MARGIN, MAX_EXPONENT, MIN_EPSILON, check_key, exact_index

_DELTA_SLACK = 2.0**-30
#: with ε·h/2 ≤ 600 and ln(1/δ) ≤ 100, every log-weight lies within 700 of the largest: e^-700 is a normal float
MIN_DELTA = math.exp(-100.0)


def check_parameters(epsilon: float, delta: float) -> tuple[float, float]:
    """(ε, δ) as floats, or ``InvalidParameterError`` naming the field: ε ≥ 2^-10, δ in [e^-100, 1), and
    δ ≤ (1 − e^{−ε/2})/2 (the proof needs δ ≤ 1 − e^{−ε/2}; half of it leaves room for float error)."""
    eps = check_epsilon("epsilon", epsilon)
    if eps < MIN_EPSILON:
        raise InvalidParameterError("epsilon", "must be at least 2^-10 (float margin, see module doc)", epsilon)
    d = check_delta("delta", delta)
    if d < MIN_DELTA:
        raise InvalidParameterError("delta", "must be at least e^-100 (float range)", delta)
    if d > -math.expm1(-eps / 2) / 2:
        raise InvalidParameterError(
            "delta",
            f"must be at most (1 - e^(-ε/2))/2 = {-math.expm1(-eps / 2) / 2:.6g} "
            "for this ε (spec/accounting/rag.md §5.2)",
            delta,
        )
    return eps, d


def vote_threshold(epsilon: float, delta: float) -> float:
    """T = 1 + 2·ln(1/δ)/ε: ⊥'s score in votes (a key with h votes has odds e^{ε(h − T)/2} against ⊥)."""
    eps, d = check_parameters(epsilon, delta)
    return 1.0 + 2.0 * (-math.log(d)) / eps


def _log_weights(hist: Counter[str], eps_run: float, delta: float) -> tuple[list[str], list[float], float]:
    seen = sorted(hist)  # a fixed order (the order does not change the law)
    logs = [eps_run * hist[s] / 2.0 for s in seen]
    log_bottom = eps_run / 2.0 + (-math.log(delta)) + _DELTA_SLACK
    return seen, logs, log_bottom


def select_seen_key(
    keys: Iterable[str], epsilon: float, delta: float, source: RandomSource
) -> tuple[str | None, ApproxDpEvent]:
    """Draw ω ∈ {⊥} ∪ {keys} from P(s) ∝ exp(ε·h(s)/2), P(⊥) ∝ exp(ε·T/2) (module doc). Returns (ω, event):
    ω a key or ``BOTTOM``; the event ``ApproxDpEvent(ε, δ)`` (one voter's key changed)."""
    eps, d = check_parameters(epsilon, delta)
    hist = Counter(check_key(k) for k in keys)
    if hist and eps * max(hist.values()) / 2 > MAX_EXPONENT:
        raise InvalidParameterError(
            "epsilon", f"ε·votes/2 must be at most {MAX_EXPONENT:g} (float range)", eps * max(hist.values()) / 2
        )
    seen, logs, log_bottom = _log_weights(hist, eps * (1.0 - MARGIN), d)
    top = max([log_bottom, *logs])
    weights = [math.exp(log_bottom - top)] + [math.exp(x - top) for x in logs]  # each in [e^-700, 1]: a normal float
    i = exact_index(weights, source)
    return (BOTTOM if i == 0 else seen[i - 1]), ApproxDpEvent(eps, d)


def seen_key_probabilities(keys: Iterable[str], epsilon: float, delta: float) -> dict[str | None, float]:
    """The law of ``select_seen_key`` in float64 (for tests and reports): {key: P, None: P(⊥)}."""
    eps, d = check_parameters(epsilon, delta)
    hist = Counter(check_key(k) for k in keys)
    seen, logs, log_bottom = _log_weights(hist, eps * (1.0 - MARGIN), d)
    top = max([log_bottom, *logs])
    w = [math.exp(x - top) for x in logs]
    wb = math.exp(log_bottom - top)
    z = wb + sum(w)
    out: dict[str | None, float] = {s: v / z for s, v in zip(seen, w, strict=False)}
    out[BOTTOM] = wb / z
    return out


__all__ = ["select_seen_key", "seen_key_probabilities", "vote_threshold", "check_parameters", "MIN_DELTA"]
