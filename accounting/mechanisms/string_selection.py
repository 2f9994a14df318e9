"""Pure ε-DP selection of a string from a data-dependent set of candidates: the exponential mechanism over
the *universal* domain Ω = {⊥} ∪ Σ* with a public base measure (spec/accounting/rag.md §5.1).

Why. A histogram of voters' answers has a domain that depends on the private documents: a key that no voter
wrote has count 0 on one input and may have count 1 on its neighbour. LimitedDomain (003) and thresholded
sparse histograms release only seen keys and pay a δ for it. Here the mechanism is defined on every string
at once, so no key is ever "unseen" to the mechanism, and it is pure ε-DP:

    P(ω) = μ(ω) · exp(ε·h(ω)/2) / Z,       ω ∈ Ω,

with h(ω) the number of voters whose key is ω (h(⊥) = 0, h(s) = 0 for every string no voter wrote) and μ a
public probability measure on Ω:

    μ(⊥) = 1 − η,      μ(s) = η · (A + 1)^−(|s| + 1)      for s ∈ Σ*, |Σ| = A,

i.e. with probability η a string of i.i.d. uniform symbols of Σ ∪ {stop}, read up to the first stop
(Σ_s (A+1)^−(|s|+1) = 1 exactly). One voter changing its key moves h by −1 at one string and +1 at another
and 0 elsewhere, so |h − h'| ≤ 1 pointwise: McSherry–Talwar with sensitivity 1 gives ε-DP, and the log
ratio of P and P' lies in an interval of width ε (ε-bounded range, Durfee–Rogers 2019), for every ω,
including strings that appear on one side only. η = e^−t is public; t (``threshold``, in nats) is the
price a key pays besides its length: a key s beats ⊥ once ε·h(s)/2 > t + (|s|+1)·ln(A+1) + ln(1 − η).

Sampling. Only finitely many strings have h > 0, so P is the mixture

    P = [ μ + Σ_{s: h(s) > 0} μ(s)·(e^{εh(s)/2} − 1)·δ_s ] / Z,   Z = 1 + Σ_{s: h(s)>0} μ(s)(e^{εh(s)/2} − 1):

pick the component "base" with weight 1 or the seen string s with weight w_s = μ(s)(e^{εh(s)/2} − 1); on
"base" draw ⊥ with probability 1 − η, else a string from the geometric-length uniform law. Exactness: the
weights are floats, converted *exactly* to rationals and drawn with exact uniform integers; ⊥-vs-string is an
exact Bernoulli(η̂) for the float η̂ that also defines μ; the random string uses exact uniform symbols. The
only inexact step is computing w_s in float64. Guards keep every log-weight in [−570, 600] (keys of at most
128 characters, t ≤ 100, ε·h/2 ≤ 600), so every weight is a normal float and its log carries an absolute
error ≤ 2^-40 (a few operations on magnitudes ≤ 2^10, each within 2^-53 relative, exp/log1p within 1 ulp).
The mechanism runs at ε_run = ε·(1 − 2^-20): the float error moves each log-ratio by ≤ 4·2^-40, far inside the
margin ε·2^-20 for every ε ≥ 2^-10 (smaller ε are refused). So the released law is ε-DP as
claimed, with every outcome of positive μ having positive probability on both inputs.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from dprag.errors import InvalidParameterError

from ..errors import check_epsilon
from ..events import ExponentialMechanismEvent
from ..noise.source import RandomSource

#: The key alphabet Σ (A = 37): the public normalisation maps every answer into Σ*.
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 "
BOTTOM = None  # ⊥: nothing selected (the caller falls back to a public answer)

MARGIN = 2.0**-20
MIN_EPSILON = 2.0**-10
#: range guards keeping every weight a normal float64 with log in [-570, 600] (module doc, "Sampling")
MAX_KEY_LENGTH = 128
MAX_THRESHOLD = 100.0
MAX_EXPONENT = 600.0


def check_key(s: object) -> str:
    if not isinstance(s, str) or not s or any(c not in ALPHABET for c in s):
        raise InvalidParameterError("keys", f"every key must be a non-empty string over {ALPHABET!r}", s)
    if len(s) > MAX_KEY_LENGTH:
        raise InvalidParameterError("keys", f"every key must have at most {MAX_KEY_LENGTH} characters", len(s))
    return s


def log_base_measure(key: str, threshold: float) -> float:
    """ln μ(key) = −t − (|key| + 1)·ln(A + 1) (exactly the measure the sampler draws from, up to float)."""
    return -float(threshold) - (len(key) + 1) * math.log(len(ALPHABET) + 1)


def exact_index(weights: list[float], source: RandomSource) -> int:
    """Index i with probability weights[i] / Σ weights, exactly for the given floats (integer arithmetic)."""
    if any(not (w >= 0 and math.isfinite(w)) for w in weights) or not any(weights):
        raise InvalidParameterError("weights", "must be finite, >= 0 and not all 0", weights)
    fr = [w.as_integer_ratio() for w in weights]  # exact: every finite float is n / 2^j
    den = max(d for _, d in fr)  # a power of two, divisible by every other denominator
    ints = [n * (den // d) for n, d in fr]
    total = sum(ints)
    u = _uniform_big(total, source)
    acc = 0
    for i, w in enumerate(ints):
        acc += w
        if u < acc:
            return i
    raise AssertionError("unreachable: u < total")


def _uniform_big(bound: int, source: RandomSource) -> int:
    """An exactly uniform integer in [0, bound) (rejection sampling on whole bytes)."""
    nbits = max(1, (bound - 1).bit_length())
    nbytes = (nbits + 7) // 8
    mask = (1 << nbits) - 1
    while True:
        u = int.from_bytes(source.bytes(nbytes), "little") & mask
        if u < bound:
            return u


def _random_string(source: RandomSource) -> str:
    """A string of the geometric-length uniform law: i.i.d. uniform over Σ ∪ {stop}, up to the first stop."""
    A = len(ALPHABET)
    out: list[str] = []
    while True:  # symbols drawn 64 at a time; the ones after the first stop are discarded (i.i.d.)
        for c in source.uniform_below(A + 1, 64).tolist():
            if c == A:
                return "".join(out)
            out.append(ALPHABET[c])


def select_string(
    keys: Iterable[str], epsilon: float, threshold: float, source: RandomSource, *, exact_probabilities: bool = False
) -> tuple[str | None, ExponentialMechanismEvent]:
    """Draw ω ∈ {⊥} ∪ Σ* from P(ω) ∝ μ(ω)·exp(ε·h(ω)/2), h = the multiset ``keys`` (one per voter; an
    abstaining voter contributes no key). Returns (ω, event): ω is a string or ``BOTTOM``; the event is
    ``ExponentialMechanismEvent(ε)`` (ε-DP, ε-bounded range). ``threshold`` t ≥ 0 sets η = e^−t."""
    eps = check_epsilon("epsilon", epsilon)
    if eps < MIN_EPSILON:
        raise InvalidParameterError("epsilon", "must be at least 2^-10 (float margin, see module doc)", epsilon)
    t = float(threshold)
    if not math.isfinite(t) or not 0 <= t <= MAX_THRESHOLD:
        raise InvalidParameterError(
            "threshold", f"must be a number in [0, {MAX_THRESHOLD:g}] (η = e^-threshold)", threshold
        )
    hist = Counter(check_key(k) for k in keys)
    if hist and eps * max(hist.values()) / 2 > MAX_EXPONENT:
        raise InvalidParameterError(
            "epsilon", f"ε·votes/2 must be at most {MAX_EXPONENT:g} (float range)", eps * max(hist.values()) / 2
        )
    eps_run = eps * (1.0 - MARGIN)
    eta = math.exp(-t)
    seen = sorted(hist)  # a fixed order of the seen keys (the order does not change the law)
    weights = [1.0]
    for s in seen:
        x = eps_run * hist[s] / 2.0
        # μ(s)·(e^x − 1) = exp(ln μ(s) + x + ln(1 − e^−x))
        weights.append(math.exp(log_base_measure(s, t) + x + math.log(-math.expm1(-x))))
    i = exact_index(weights, source)
    event = ExponentialMechanismEvent(eps)
    if i > 0:
        return seen[i - 1], event
    # the base component: ⊥ with probability 1 − η̂, else a uniform-geometric string (η̂ = the float eta)
    if eta < 1.0 and exact_index([1.0 - eta, eta], source) == 0:
        return BOTTOM, event
    return _random_string(source), event  # may be "" (a string of the domain; callers may treat it like ⊥)


def selection_probabilities(keys: Iterable[str], epsilon: float, threshold: float) -> dict[str | None, float]:
    """The exact law of ``select_string`` on the seen keys and ⊥ (float64, for tests): {key: P, None: P(⊥),
    "other": P(an unseen string)}. Uses ε_run like the sampler."""
    eps = check_epsilon("epsilon", epsilon) * (1.0 - MARGIN)
    hist = Counter(check_key(k) for k in keys)
    t = float(threshold)
    eta = math.exp(-t)
    w = {s: math.exp(log_base_measure(s, t) + eps * c / 2) for s, c in hist.items()}
    seen_mu = sum(math.exp(log_base_measure(s, t)) for s in hist)
    z = (1 - eta) + sum(w.values()) + (eta - seen_mu)
    out: dict[str | None, float] = {s: v / z for s, v in w.items()}
    out[None] = (1 - eta) / z
    out["other"] = (eta - seen_mu) / z
    return out
