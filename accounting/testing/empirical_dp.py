"""Empirical differential-privacy checker: a statistical test that a mechanism is NOT (ε, δ)-DP.

``check_dp`` runs a mechanism many times on two neighbouring inputs d0 and d1 and, for a family of output
events S, bounds p0 = P[M(d0) ∈ S] and p1 = P[M(d1) ∈ S] with one-sided Clopper–Pearson intervals
(Clopper & Pearson 1934). It reports a violation of

        p_a ≤ e^ε · p_b + δ          for (a, b) = (0, 1) and (1, 0)

only when even the conservative ends of the intervals violate it: lower(p_a) − δ > e^ε · upper(p_b).
Every one-sided bound it uses holds with probability ≥ 1 − α' and α' = α / (number of bounds)
(Bonferroni), so **if the mechanism is (ε, δ)-DP on (d0, d1), a violation is reported with probability
≤ α** — whatever the mechanism, the output space or the number of trials. On the same event the report
certifies a lower bound on the mechanism's privacy loss: with probability ≥ 1 − α,

        ε_true(δ) ≥ epsilon_lower_bound = max over tested (S, a, b) of log((lower(p_a) − δ) / upper(p_b)).

The design follows the black-box DP testers StatDP (Ding, Wang, Wang, Zhang & Kifer, "Detecting Violations
of Differential Privacy", CCS 2018: pick an event on one run, test it on fresh runs) and DP-Sniper
(Bichsel, Steffen, Bogunovic & Vechev, "DP-Sniper: Black-Box Discovery of Differential Privacy Violations
using Classifiers", IEEE S&P 2021: likelihood-ratio-threshold attack sets, Clopper–Pearson lower bounds
on ε). It is a *falsifier*: passing means "no violation was detected with this many trials", never a proof
of privacy; its power depends on the trials and on the neighbouring pair chosen.

A pass says what it could see (``DpCheckReport.power``): the smallest ε' that the same decision rule, at the
same trials and Bonferroni level, would flag with probability ≥ 1 − β (default β = 0.05) on a tested event S,
the event's measured mass p_b = P̂[M(d_b) ∈ S] held fixed and P[M(d_a) ∈ S] = e^ε'·p_b + δ
(``detectable_epsilon``, computed from the two binomial laws). A violation needs mass to be seen: the figure is
about events of (at least roughly) that mass, not about arbitrarily rare ones.

Events tested:

- ``events=None`` (automatic). The runs are split: ``selection_trials`` runs per input propose candidate
  events, ``trials`` fresh runs per input test the best ``max_events`` of them (so selection cannot bias the
  test). Candidates: every observed output value ("atom") when the outputs are discrete, the unions of atoms
  ranked by their estimated likelihood ratio (the Neyman–Pearson-optimal sets, as DP-Sniper's threshold
  attacks), and, for real-valued scalar outputs, the tails {x ≤ t} and {x > t} at quantiles t.
- ``events=[...]`` (user-given, fixed before the runs): each is tested in both directions on all runs.

Example for a user's pytest suite (paste and adapt)::

    import numpy as np
    from dprag.accounting.testing import assert_dp, check_dp, seeded

    def randomized_response(epsilon):
        def mechanism(bit, source, n):  # vectorised: n independent runs in one call
            flip = source.uniform01(n) < 1.0 / (1.0 + np.exp(epsilon))
            return np.where(flip, 1 - bit, bit)
        return mechanism

    def test_randomized_response_is_1_dp():
        # AssertionError (with a readable report) only if a violation is certified: for a mechanism
        # that really is 1-DP this happens with probability <= alpha = 1e-6
        assert_dp(randomized_response(1.0), 0, 1, epsilon=1.0, trials=100_000, vectorized=True,
                  source_factory=seeded(b"rr-test"), alpha=1e-6)

    def test_checker_catches_a_2_eps_mechanism():
        report = check_dp(randomized_response(2.0), 0, 1, epsilon=1.0, trials=100_000, vectorized=True,
                          source_factory=seeded(b"rr-broken"), alpha=1e-6)
        assert not report.passed and report.epsilon_lower_bound > 1.0

A mechanism is called as ``mechanism(data, source)`` → one output (``vectorized=False``), or as
``mechanism(data, source, n)`` → ``n`` independent outputs along the first axis (``vectorized=True``).
Outputs may be numbers, tuples, arrays (compared row-wise), ``None`` or any hashable value.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol, Required, TypedDict, Unpack

import numpy as np
import numpy.typing as npt
from scipy import stats

from dprag.errors import InvalidParameterError

from ..errors import check_delta, check_epsilon, check_positive_int
from ..noise.source import RandomSource

__all__ = [
    "OutputEvent",
    "EventResult",
    "DpCheckReport",
    "check_dp",
    "assert_dp",
    "seeded",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "detection_probability",
    "detectable_epsilon",
    "DetectionPower",
]


# ---------------------------------------------------------------------------------------------------
# Clopper–Pearson bounds
# ---------------------------------------------------------------------------------------------------
def clopper_pearson_lower(successes: npt.ArrayLike, trials: npt.ArrayLike, alpha: float) -> npt.NDArray[np.float64]:
    """One-sided (1 − α) Clopper–Pearson lower bound on a binomial p: P[bound > p] ≤ α (vectorised)."""
    x = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        lb = stats.beta.ppf(alpha, x, n - x + 1.0)
    return np.where(x <= 0, 0.0, np.nan_to_num(lb, nan=0.0))


def clopper_pearson_upper(successes: npt.ArrayLike, trials: npt.ArrayLike, alpha: float) -> npt.NDArray[np.float64]:
    """One-sided (1 − α) Clopper–Pearson upper bound on a binomial p: P[bound < p] ≤ α (vectorised)."""
    x = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        ub = stats.beta.ppf(1.0 - alpha, x + 1.0, n - x)
    return np.where(x >= n, 1.0, np.nan_to_num(ub, nan=1.0))


def _eps_lower(lo_a: npt.ArrayLike, up_b: npt.ArrayLike, delta: float) -> npt.NDArray[np.float64]:
    """log((lo_a − δ) / up_b), −inf where lo_a ≤ δ (vectorised)."""
    lo_a = np.asarray(lo_a, dtype=np.float64)
    up_b = np.asarray(up_b, dtype=np.float64)
    num = lo_a - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(num) - np.log(up_b)
    return np.where(num > 0, out, -np.inf)


def detection_probability(
    p_a: float, p_b: float, epsilon: float, delta: float = 0.0, *, trials: int, alpha: float, n_bounds: int = 2
) -> float:
    """Exact probability that ``check_dp`` certifies a violation on ONE fixed event.

    The event has true probabilities ``p_a`` under the input that should be the smaller side's bound
    (P[M(d_a) ∈ S]) and ``p_b`` under the other, both estimated from ``trials`` independent runs; the
    bounds are taken at level α / ``n_bounds`` (``n_bounds`` = 2 × the number of (event, direction) pairs
    tested; for ``k`` user-given events that is 4k). Computed exactly from the two binomial laws, so a
    test can state its miss probability (1 − this) instead of guessing it.
    """
    n = check_positive_int("trials", trials)
    a = alpha / n_bounds
    xs = np.arange(n + 1)
    lo = clopper_pearson_lower(xs, n, a)  # increasing in x
    up = clopper_pearson_upper(xs, n, a)
    need = math.exp(epsilon) * up + delta  # violation iff lo[x_a] > need[x_b]
    pmf_b = stats.binom.pmf(xs, n, p_b)
    first = np.searchsorted(lo, need, side="right")  # smallest x_a with lo[x_a] > need
    tail_a = np.where(first <= n, stats.binom.sf(first - 1, n, p_a), 0.0)
    return float(np.clip(np.sum(pmf_b * tail_a), 0.0, 1.0))


_POWER_TAIL = 1e-12  # X_b's support is cut where Binomial(n, p_b) has less mass than this on each side
_POWER_TOL = 1e-4  # bisection width in ε' (the result is the upper end: it errs large)


def _first_exceeding(need: npt.NDArray[np.float64], n: int, level: float) -> npt.NDArray[np.intp]:
    """For ascending thresholds c: the smallest x in [0, n] with clopper_pearson_lower(x, n, level) > c (n + 1 if
    none), evaluating the bound only on the x range the thresholds span."""

    def smallest(c: float) -> int:
        lo, hi = 0, n + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if float(clopper_pearson_lower(mid, n, level)) > c:
                hi = mid
            else:
                lo = mid + 1
        return lo

    f0, f1 = smallest(float(need[0])), smallest(float(need[-1]))
    bounds = clopper_pearson_lower(np.arange(f0, min(f1, n) + 1), n, level)
    return f0 + np.searchsorted(bounds, need, side="right")


def detectable_epsilon(
    p_b: float,
    epsilon: float,
    delta: float = 0.0,
    *,
    trials: int,
    alpha: float,
    n_bounds: int = 2,
    beta: float = 0.05,
) -> float:
    """The power of ``check_dp`` on one fixed event: the smallest ε' ≥ ε such that an event with
    P[M(d_b) ∈ S] = ``p_b`` and P[M(d_a) ∈ S] = e^ε'·p_b + δ is flagged with probability ≥ 1 − β.

    The test's own rule (one-sided Clopper–Pearson bounds at α / ``n_bounds``, violation iff
    lower(p_a) − δ > e^ε·upper(p_b)) summed over the two binomial laws, as ``detection_probability``; X_b's
    support is cut where its mass is below 1e-12 (counted as a miss) and ε' is bisected to 1e-4 and rounded up,
    so the figure errs large. +inf when even P[M(d_a) ∈ S] = 1 is flagged with probability < 1 − β.
    """
    n = check_positive_int("trials", trials)
    eps = check_epsilon("epsilon", epsilon, allow_zero=True)
    dlt = check_delta("delta", delta, allow_zero=True)
    q = float(p_b)
    if not (0.0 <= q <= 1.0):
        raise InvalidParameterError("p_b", "must lie in [0, 1]", p_b)
    b = float(beta)
    if not (0.0 < b < 1.0):
        raise InvalidParameterError("beta", "must lie in (0, 1)", beta)
    if not (0.0 < float(alpha) < 1.0):
        raise InvalidParameterError("alpha", "must lie in (0, 1)", alpha)
    level = float(alpha) / check_positive_int("n_bounds", n_bounds)
    if q <= 0.0 or math.exp(eps) * q + dlt >= 1.0:
        return math.inf  # no event of this mass can violate the claim
    xb = np.arange(int(stats.binom.ppf(_POWER_TAIL, n, q)), int(stats.binom.isf(_POWER_TAIL, n, q)) + 1)
    pmf = stats.binom.pmf(xb, n, q)
    first = _first_exceeding(math.exp(eps) * clopper_pearson_upper(xb, n, level) + dlt, n, level)
    pmf, first = pmf[first <= n], first[first <= n]

    def caught(t: float) -> bool:  # P[flagged] ≥ 1 − β when P[M(d_a) ∈ S] = e^t·p_b + δ
        p_a = min(1.0, math.exp(t) * q + dlt)
        return float(np.sum(pmf * stats.binom.sf(first - 1, n, p_a))) >= 1.0 - b

    lo, hi = eps, math.log((1.0 - dlt) / q)
    if not caught(hi):
        return math.inf
    if caught(lo):
        return eps
    while hi - lo > _POWER_TOL:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if caught(mid) else (mid, hi)
    return hi


def _approx_detectable(q: float, n: int, level: float, eps: float, delta: float, beta: float) -> float:
    """A normal approximation of ``detectable_epsilon``, only to rank events before the exact computation."""
    if q <= 0.0:
        return math.inf
    z_lvl, z_b = float(stats.norm.isf(level)), float(stats.norm.isf(beta))
    c = math.exp(eps) * (q + z_lvl * math.sqrt(q * (1 - q) / n)) + delta
    p_a = c + (z_lvl + z_b) * math.sqrt(max(c * (1 - c), 0.0) / n)
    return math.log((p_a - delta) / q) if c < 1.0 and p_a < 1.0 else math.inf


# ---------------------------------------------------------------------------------------------------
# Events
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OutputEvent:
    """A set S of outputs, given by a predicate over a *batch* of outputs returning a boolean mask.

    The batch is a numpy array whose first axis runs over the trials (an object array when outputs are not
    numeric). Use ``OutputEvent.elementwise`` to lift a predicate on a single output.
    """

    name: str
    predicate: Callable[[Any], Any]

    @classmethod
    def elementwise(cls, name: str, predicate: Callable[[Any], bool]) -> OutputEvent:
        def batch(outputs: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
            return np.fromiter((bool(predicate(o)) for o in outputs), dtype=bool, count=len(outputs))

        return cls(name, batch)

    @classmethod
    def equals(cls, value: object, name: str | None = None) -> OutputEvent:
        key = _canon(value)
        return cls.elementwise(name or f"output == {value!r}", lambda o: _canon(o) == key)

    @classmethod
    def at_most(cls, threshold: float) -> OutputEvent:
        return cls(f"output <= {threshold!r}", lambda outs: np.asarray(outs, dtype=np.float64) <= threshold)

    @classmethod
    def greater_than(cls, threshold: float) -> OutputEvent:
        return cls(f"output > {threshold!r}", lambda outs: np.asarray(outs, dtype=np.float64) > threshold)

    def count(self, batch: _Batch) -> int:
        mask = np.asarray(self.predicate(batch.outputs))
        if mask.shape != (batch.n,):
            raise InvalidParameterError(
                "events", f"predicate {self.name!r} must return a boolean mask of shape ({batch.n},)", mask.shape
            )
        return int(np.count_nonzero(mask))


def _canon(o: object) -> object:
    """A hashable, type-normalised key for one output (arrays and lists become tuples)."""
    if o is None or isinstance(o, (str, bytes, bool)):
        return o
    if isinstance(o, np.ndarray):
        return tuple(_canon(x) for x in o.tolist()) if o.ndim else _canon(o.item())
    if isinstance(o, np.generic):
        return _canon(o.item())
    if isinstance(o, (list, tuple)):
        return tuple(_canon(x) for x in o)
    if isinstance(o, (set, frozenset)):
        return frozenset(_canon(x) for x in o)
    if isinstance(o, float) and o.is_integer():
        return int(o)  # 3.0 and 3 are the same output
    return o


class _Batch:
    """The outputs of one phase on one input, with what the candidate events need precomputed lazily."""

    def __init__(self, outputs: npt.NDArray[Any], n: int) -> None:
        self.n = n
        self.outputs = outputs
        self._keys: list[object] | None = None
        self._counter: Counter[object] | None = None
        self._sorted: npt.NDArray[np.float64] | None = None

    @property
    def scalar(self) -> bool:
        o = self.outputs
        return isinstance(o, np.ndarray) and o.ndim == 1 and o.dtype.kind in "iufb"

    @property
    def keys(self) -> list[object]:
        if self._keys is None:
            o = self.outputs
            if isinstance(o, np.ndarray) and o.dtype.kind in "iufb":
                if o.ndim == 1:
                    self._keys = [_canon(x) for x in o.tolist()]
                else:
                    self._keys = [tuple(_canon(x) for x in row) for row in o.reshape(self.n, -1).tolist()]
            else:
                self._keys = [_canon(x) for x in o]
        return self._keys

    @property
    def counter(self) -> Counter[object]:
        if self._counter is None:
            self._counter = Counter(self.keys)
        return self._counter

    @property
    def sorted_values(self) -> npt.NDArray[np.float64]:
        if self._sorted is None:
            self._sorted = np.sort(np.asarray(self.outputs, dtype=np.float64))
        return self._sorted


class _EventLike(Protocol):
    """What the checker needs of an event: ``OutputEvent`` and the automatic candidates."""

    @property
    def name(self) -> str: ...

    def count(self, batch: _Batch) -> int: ...


def _collect(mechanism: Callable[..., Any], data: object, source: RandomSource, n: int, vectorized: bool) -> _Batch:
    if vectorized:
        out = mechanism(data, source, n)
        if not isinstance(out, np.ndarray):
            out = _to_array(list(out))
        if len(out) != n:
            raise InvalidParameterError("mechanism", f"a vectorized mechanism must return {n} outputs", len(out))
        return _Batch(out, n)
    return _Batch(_to_array([mechanism(data, source) for _ in range(n)]), n)


def _to_array(items: list[Any]) -> npt.NDArray[Any]:
    if items and all(isinstance(x, (int, float, bool, np.number, np.bool_)) for x in items):
        return np.asarray(items)
    if items and all(isinstance(x, np.ndarray) and x.dtype.kind in "iufb" for x in items):
        if len({x.shape for x in items}) == 1:
            return np.stack(items)
    arr = np.empty(len(items), dtype=object)
    for i, x in enumerate(items):
        arr[i] = x
    return arr


# Internal candidate events (automatic mode) -------------------------------------------------------------
@dataclass(frozen=True)
class _AtomSet:
    keys: frozenset[object]
    label: str

    @property
    def name(self) -> str:
        return self.label

    def count(self, batch: _Batch) -> int:
        c = batch.counter
        return int(sum(c.get(k, 0) for k in self.keys))


@dataclass(frozen=True)
class _Tail:
    threshold: float
    upper: bool  # True: {x > t}; False: {x <= t}

    @property
    def name(self) -> str:
        return f"output {'>' if self.upper else '<='} {self.threshold!r}"

    def count(self, batch: _Batch) -> int:
        s = batch.sorted_values
        below = int(np.searchsorted(s, self.threshold, side="right"))
        return batch.n - below if self.upper else below


# ---------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EventResult:
    """One tested (event, direction): checks P[M(d_a) ∈ S] ≤ e^ε P[M(d_b) ∈ S] + δ."""

    name: str
    direction: str  # "d0 vs d1" (a=0, b=1) or "d1 vs d0"
    count_a: int
    count_b: int
    trials: int
    lower_a: float  # Clopper–Pearson lower bound on p_a
    upper_b: float  # Clopper–Pearson upper bound on p_b
    epsilon_lower_bound: float  # log((lower_a − δ)/upper_b), −inf if lower_a ≤ δ
    violated: bool

    @property
    def p_a(self) -> float:
        return self.count_a / self.trials

    @property
    def p_b(self) -> float:
        return self.count_b / self.trials

    @property
    def epsilon_estimate(self) -> float:
        """Plug-in estimate log(p̂_a / p̂_b) (not a bound; δ ignored)."""
        if self.count_a == 0:
            return -math.inf
        if self.count_b == 0:
            return math.inf
        return math.log(self.count_a / self.count_b)


@dataclass(frozen=True)
class DetectionPower:
    """What a check could see: ε' ≥ ``epsilon`` on the event ``event`` (``direction``), whose measured mass
    P̂[M(d_b) ∈ S] is ``mass``, is flagged with probability ≥ 1 − ``beta`` at ``trials`` runs per input
    (``detectable_epsilon``). ``epsilon`` is +inf when no tested event gives that power."""

    epsilon: float
    beta: float
    trials: int
    event: str | None
    direction: str | None
    mass: float | None

    def sentence(self) -> str:
        if not math.isfinite(self.epsilon):
            return (
                f"PASS at {self.trials} trials per input; no tested event has power {1 - self.beta:g} "
                "against any violation (too few trials, or events too rare)"
            )
        return (
            f"PASS at {self.trials} trials per input; would detect ε >= {self.epsilon:.4g} with probability "
            f">= {1 - self.beta:g} (on {self.event} ({self.direction}), at its measured P[M(d_b) in S] = "
            f"{self.mass:.4g})"
        )


_POWER_EXACT = 3  # events whose power is computed exactly (the best by a normal approximation)


@dataclass(frozen=True)
class DpCheckReport:
    """What ``check_dp`` found. ``passed`` is False iff some tested event certifies a violation."""

    epsilon: float
    delta: float
    alpha: float
    trials: int
    selection_trials: int
    candidates: int  # candidate (event, direction) pairs considered before testing (automatic mode)
    results: tuple[EventResult, ...] = field(default_factory=tuple)  # sorted, worst first
    beta: float = 0.05  # miss probability at which ``power`` is stated

    @cached_property
    def power(self) -> DetectionPower:
        """The smallest ε' the test flags with probability ≥ 1 − β on a tested event at its measured mass
        (computed on first access: exact for the ``_POWER_EXACT`` events ranked best by a normal
        approximation, the smallest of those reported — a true statement about that event, if not
        necessarily the best one)."""
        n, nb = self.trials, 2 * max(1, len(self.results))
        level = self.alpha / nb
        ranked: dict[int, tuple[float, EventResult]] = {}
        for r in self.results:
            if r.count_b not in ranked:
                approx = _approx_detectable(r.count_b / n, n, level, self.epsilon, self.delta, self.beta)
                ranked[r.count_b] = (approx, r)
        best: tuple[float, EventResult | None] = (math.inf, None)
        for _, r in sorted(ranked.values(), key=lambda t: t[0])[:_POWER_EXACT]:
            e = detectable_epsilon(
                r.count_b / n, self.epsilon, self.delta, trials=n, alpha=self.alpha, n_bounds=nb, beta=self.beta
            )
            if e < best[0] or best[1] is None:
                best = (e, r)
        e, top = best
        return DetectionPower(
            epsilon=e,
            beta=self.beta,
            trials=n,
            event=None if top is None else top.name,
            direction=None if top is None else top.direction,
            mass=None if top is None else top.p_b,
        )

    @property
    def detectable_epsilon(self) -> float:
        """``power.epsilon``: violations ε' at or above this are flagged with probability ≥ 1 − β (on
        ``power.event`` at its measured mass)."""
        return self.power.epsilon

    @property
    def violations(self) -> tuple[EventResult, ...]:
        return tuple(r for r in self.results if r.violated)

    @property
    def passed(self) -> bool:
        return not self.violations

    @property
    def epsilon_lower_bound(self) -> float:
        """Holds with probability ≥ 1 − α: the mechanism's ε at this δ on (d0, d1) is at least this (≥ 0)."""
        best = max((r.epsilon_lower_bound for r in self.results), default=-math.inf)
        return max(0.0, best)

    def summary(self, top: int = 5) -> str:
        head = (
            f"empirical DP check of (ε={self.epsilon:g}, δ={self.delta:g}): "
            f"{'no violation found' if self.passed else f'{len(self.violations)} VIOLATION(S)'}; "
            f"certified ε lower bound {self.epsilon_lower_bound:.4g} (confidence 1-{self.alpha:g}); "
            f"{len(self.results)} (event, direction) pairs tested on {self.trials} runs per input"
        )
        lines = [head]
        if self.passed:
            lines.append(self.power.sentence())
        for r in self.results[:top]:
            lines.append(
                f"  [{'VIOLATION' if r.violated else 'ok'}] {r.name} ({r.direction}): "
                f"p_a={r.p_a:.4g} (>= {r.lower_a:.4g}), p_b={r.p_b:.4g} (<= {r.upper_b:.4g}), "
                f"ε >= {r.epsilon_lower_bound:.4g}"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


# ---------------------------------------------------------------------------------------------------
# The checker
# ---------------------------------------------------------------------------------------------------
def seeded(seed: bytes | str) -> Callable[[str], RandomSource]:
    """A ``source_factory`` giving independent deterministic streams: label ↦ RandomSource.from_seed(seed, label)."""
    if isinstance(seed, str):
        seed = seed.encode()
    return lambda label: RandomSource.from_seed(seed, label.encode())  # from_seed encodes a str label alike


def check_dp(
    mechanism: Callable[..., Any],
    d0: object,
    d1: object,
    epsilon: float,
    delta: float = 0.0,
    *,
    trials: int,
    source_factory: Callable[[str], RandomSource],
    events: Iterable[OutputEvent | Callable[[Any], Any]] | None = None,
    alpha: float = 1e-3,
    vectorized: bool = False,
    selection_trials: int | None = None,
    max_events: int = 20,
    quantiles: int = 64,
    beta: float = 0.05,
) -> DpCheckReport:
    """Test whether ``mechanism`` violates (ε, δ)-DP on the neighbouring inputs ``d0``, ``d1``.

    Parameters
    ----------
    mechanism: ``mechanism(data, source)`` → one output, or with ``vectorized=True``
        ``mechanism(data, source, n)`` → ``n`` outputs (first axis).
    d0, d1: the neighbouring inputs (the caller vouches that they are neighbours).
    epsilon, delta: the claimed guarantee.
    trials: runs per input used for testing.
    source_factory: label ↦ RandomSource; must return independent streams for distinct labels (the
        checker asks for "select/d0", "select/d1", "test/d0", "test/d1"). ``seeded(b"...")`` does.
    events: user-given output events (``OutputEvent`` or batch predicates); None for automatic selection.
    alpha: bound on the probability of reporting a violation when the mechanism is (ε, δ)-DP on (d0, d1).
    selection_trials: runs per input used to propose events in automatic mode (default ``trials // 4``,
        at least 1000).
    max_events: (event, direction) pairs tested in automatic mode.
    quantiles: tail thresholds proposed for real-valued scalar outputs in automatic mode.
    beta: the report's ``power`` is the smallest violation flagged with probability ≥ 1 − β.

    Returns a ``DpCheckReport``; bad parameters raise ``InvalidParameterError`` before any run.
    """
    eps = check_epsilon("epsilon", epsilon, allow_zero=True)
    dlt = check_delta("delta", delta, allow_zero=True)
    n = check_positive_int("trials", trials)
    if not callable(mechanism):
        raise InvalidParameterError("mechanism", "must be callable", mechanism)
    if not callable(source_factory):
        raise InvalidParameterError("source_factory", "must be callable (label -> RandomSource)", source_factory)
    a = float(alpha)
    if not (0.0 < a < 1.0):
        raise InvalidParameterError("alpha", "must lie in (0, 1)", alpha)
    b = float(beta)
    if not (0.0 < b < 1.0):
        raise InvalidParameterError("beta", "must lie in (0, 1)", beta)
    max_events = check_positive_int("max_events", max_events)
    quantiles = check_positive_int("quantiles", quantiles)

    pairs: list[tuple[_EventLike, int]]
    if events is not None:
        user: list[_EventLike] = []
        for i, given in enumerate(events):
            if isinstance(given, OutputEvent):
                user.append(given)
            elif callable(given):
                user.append(OutputEvent(getattr(given, "__name__", f"event[{i}]"), given))
            else:
                raise InvalidParameterError("events", "every element must be an OutputEvent or a callable", given)
        if not user:
            raise InvalidParameterError("events", "must not be empty (pass None for automatic events)")
        pairs = [(ev, 0) for ev in user] + [(ev, 1) for ev in user]
        n_sel, n_candidates = 0, len(pairs)
    else:
        n_sel = check_positive_int(
            "selection_trials", selection_trials if selection_trials is not None else max(1000, n // 4)
        )
        s0 = _collect(mechanism, d0, source_factory("select/d0"), n_sel, vectorized)
        s1 = _collect(mechanism, d1, source_factory("select/d1"), n_sel, vectorized)
        candidates = _candidates(s0, s1, quantiles)
        n_candidates = len(candidates)
        pairs = _select(candidates, s0, s1, n_sel, n, eps, dlt, a, max_events)

    t0 = _collect(mechanism, d0, source_factory("test/d0"), n, vectorized)
    t1 = _collect(mechanism, d1, source_factory("test/d1"), n, vectorized)
    level = a / (2 * len(pairs))  # two one-sided bounds per (event, direction) pair: Bonferroni
    counts: dict[int, tuple[int, int]] = {}
    results: list[EventResult] = []
    for ev, direction in pairs:
        if id(ev) not in counts:
            counts[id(ev)] = (ev.count(t0), ev.count(t1))
        c0, c1 = counts[id(ev)]
        ca, cb = (c0, c1) if direction == 0 else (c1, c0)
        lo = float(clopper_pearson_lower(ca, n, level))
        up = float(clopper_pearson_upper(cb, n, level))
        elb = float(_eps_lower(lo, up, dlt))
        results.append(
            EventResult(
                name=ev.name,
                direction="d0 vs d1" if direction == 0 else "d1 vs d0",
                count_a=ca,
                count_b=cb,
                trials=n,
                lower_a=lo,
                upper_b=up,
                epsilon_lower_bound=elb,
                violated=bool(lo - dlt > math.exp(eps) * up),
            )
        )
    results.sort(key=lambda r: r.epsilon_lower_bound, reverse=True)
    return DpCheckReport(
        epsilon=eps,
        delta=dlt,
        alpha=a,
        trials=n,
        selection_trials=n_sel,
        candidates=n_candidates,
        results=tuple(results),
        beta=b,
    )


class _CheckOptions(TypedDict, total=False):
    """``check_dp``'s keyword-only parameters (``assert_dp`` passes them on)."""

    trials: Required[int]
    source_factory: Required[Callable[[str], RandomSource]]
    events: Iterable[OutputEvent | Callable[[Any], Any]] | None
    alpha: float
    vectorized: bool
    selection_trials: int | None
    max_events: int
    quantiles: int
    beta: float


def assert_dp(
    mechanism: Callable[..., Any],
    d0: object,
    d1: object,
    epsilon: float,
    delta: float = 0.0,
    **kwargs: Unpack[_CheckOptions],
) -> DpCheckReport:
    """``check_dp`` that raises ``AssertionError`` (message: the report) when a violation is certified; on a
    pass the returned report's ``summary()`` says what the check could see (``power``)."""
    report = check_dp(mechanism, d0, d1, epsilon, delta, **kwargs)
    if not report.passed:
        raise AssertionError(report.summary())
    return report


_MAX_ATOMS = 5000  # more distinct outputs than this in the selection runs: treat outputs as continuous
_MAX_PREFIXES = 200


def _candidates(s0: _Batch, s1: _Batch, quantiles: int) -> list[_EventLike]:
    """Candidate events proposed from the selection runs (see module docstring)."""
    cands: list[_EventLike] = []
    c0, c1 = s0.counter, s1.counter
    atoms = list(set(c0) | set(c1))
    if len(atoms) <= _MAX_ATOMS:
        for k in atoms:
            cands.append(_AtomSet(frozenset([k]), f"output == {k!r}"))
        if len(atoms) > 2:
            a0 = np.array([c0.get(k, 0) for k in atoms], dtype=np.float64)
            a1 = np.array([c1.get(k, 0) for k in atoms], dtype=np.float64)
            ratio = np.log(a0 + 0.5) - np.log(a1 + 0.5)
            for sign, tag in ((1.0, "d0"), (-1.0, "d1")):
                order = np.argsort(-sign * ratio, kind="stable")
                sizes = np.unique(np.linspace(2, len(atoms) - 1, num=min(_MAX_PREFIXES, len(atoms) - 2)).astype(int))
                for m in sizes:
                    keys = frozenset(atoms[i] for i in order[:m])
                    cands.append(_AtomSet(keys, f"union of the {m} outputs most likely under {tag} (relative)"))
    if s0.scalar and s1.scalar:
        pooled = np.concatenate([s0.sorted_values, s1.sorted_values])
        pooled = pooled[np.isfinite(pooled)]
        if pooled.size:
            qs = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, quantiles + 2)[1:-1], method="inverted_cdf"))
            for t in qs.tolist():
                cands.append(_Tail(float(t), upper=False))
                cands.append(_Tail(float(t), upper=True))
    if not cands:
        raise InvalidParameterError(
            "events",
            "outputs are neither discrete (few distinct values) nor real scalars: pass events=[OutputEvent(...)]",
        )
    return cands


def _select(
    cands: list[_EventLike],
    s0: _Batch,
    s1: _Batch,
    n_sel: int,
    n_test: int,
    eps: float,
    delta: float,
    alpha: float,
    max_events: int,
) -> list[tuple[_EventLike, int]]:
    """Rank (candidate, direction) pairs by the ε lower bound the test phase would give if the selection
    estimates were exact, and keep the best ``max_events``."""
    k0 = np.array([c.count(s0) for c in cands], dtype=np.float64)
    k1 = np.array([c.count(s1) for c in cands], dtype=np.float64)
    level = alpha / (2 * max_events)
    scores: list[tuple[float, float, int, int]] = []
    for direction, (ka, kb) in enumerate(((k0, k1), (k1, k0))):
        xa = ka / n_sel * n_test
        xb = kb / n_sel * n_test
        lo = clopper_pearson_lower(xa, n_test, level)
        up = clopper_pearson_upper(xb, n_test, level)
        # tie-break by the plug-in ratio so that something sensible is tested even with no signal
        plug = np.log((ka + 0.5) / (kb + 0.5))
        s = _eps_lower(lo, up, delta)
        scores.extend((float(s[i]), float(plug[i]), i, direction) for i in range(len(cands)))
    scores.sort(key=lambda t: (t[0], t[1]), reverse=True)
    seen: set[tuple[float, float, int]] = set()
    chosen: list[tuple[_EventLike, int]] = []
    for _, _, i, direction in scores:
        # identical selection counts: almost surely the same set (e.g. {x == 0} and {x <= 0}); test one
        key = (k0[i], k1[i], direction)
        if key in seen:
            continue
        seen.add(key)
        chosen.append((cands[i], direction))
        if len(chosen) == max_events:
            break
    return chosen
