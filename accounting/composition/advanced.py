"""(ε, δ)-DP composition theorems: basic, advanced (Dwork–Rothblum–Vadhan), and Kairouz–Oh–Viswanath.

Every function here takes the per-mechanism guarantees of a k-fold *adaptive* composition as
``epsilons`` (and optionally ``deltas`` and ``counts``: entry i stands for ``counts[i]`` mechanisms that are
each (epsilons[i], deltas[i])-DP) and returns a guarantee for the whole composition. Sources:

- Basic composition: Dwork, McSherry, Nissim, Smith 2006; Dwork–Roth 2014, Thm 3.16: (Σε_i, Σδ_i).
- Advanced composition: Dwork, Rothblum, Vadhan 2010, Thm III.3 (Dwork–Roth Thm 3.20): k-fold adaptive
  composition of (ε, δ)-DP mechanisms is (ε', kδ + δ')-DP for ε' = ε·sqrt(2k ln(1/δ')) + kε(e^ε − 1).
- Optimal homogeneous composition: Kairouz, Oh, Viswanath 2015 ("The Composition Theorem for Differential
  Privacy"), Thm 3.3: the k-fold composition of (ε, δ)-DP mechanisms is ((k−2i)ε, 1 − (1−δ)^k (1−δ_i))-DP with
  δ_i = Σ_{l=0}^{i−1} C(k,l) (e^{(k−l)ε} − e^{(k−2i+l)ε}) / (1+e^ε)^k, and no better guarantee holds. Its proof
  shows the composition is dominated by the k-fold product of the canonical (ε, δ) mechanism (randomized
  response plus a δ-mass that reveals the input), whose hockey-stick divergence at *every* ε_g ≥ 0 is
  1 − (1−δ)^k (1 − Σ_{j : (k−2j)ε > ε_g} C(k,j) (e^{(k−j)ε} − e^{ε_g + jε}) / (1+e^ε)^k); at ε_g = (k−2i)ε this is
  exactly Thm 3.3. We compute it at arbitrary ε_g.
- Optimal heterogeneous composition: Murtagh & Vadhan 2016 ("The Complexity of Computing the Optimal
  Composition of Differential Privacy"), Thm 1.5: ε_g is optimal for target δ_g iff
  (1/Π(1+e^{ε_i})) Σ_{S⊆[k]} max(e^{Σ_{i∈S} ε_i} − e^{ε_g} e^{Σ_{i∉S} ε_i}, 0) ≤ 1 − (1−δ_g)/Π(1−δ_i).
  Computing it is #P-complete in general (their Thm 1.6); we compute it exactly by grouping mechanisms with
  equal ε (the sum over subsets becomes a sum over Π(k_r + 1) count vectors with multinomial weights), which
  is fast when there are few distinct ε values, and refuse past ``max_states`` states.
- Closed-form heterogeneous bound: Kairouz, Oh, Viswanath 2015, Thm 3.5 (Thm 3.4 is its homogeneous case):
  for any δ̃ ∈ (0, 1], (ε̃, 1 − (1−δ̃) Π(1−δ_i))-DP with ε̃ = min{ Σε_i,
  Σ ε_i (e^{ε_i}−1)/(e^{ε_i}+1) + sqrt(2 Σε_i² · log(e + sqrt(Σε_i²)/δ̃)),
  Σ ε_i (e^{ε_i}−1)/(e^{ε_i}+1) + sqrt(2 Σε_i² · log(1/δ̃)) }.
- Amplification by Poisson subsampling of an (ε, δ)-DP mechanism: Balle, Barthe, Gaboardi 2018, Thm 8 (add /
  remove-one relation): (log(1 + q(e^ε − 1)), qδ)-DP.

Neighbouring relation: every theorem here holds for whatever relation the per-mechanism guarantees are
stated for (the same one for all of them); the amplification bound needs add/remove-one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln

from dprag.errors import InvalidParameterError

from ..amplification import amplified_pure_epsilon
from ..errors import check_delta, check_epsilon, check_positive_int
from ..rounding import outward, sum_products_up, up

#: Default cap on the number of loss states the exact optimal composition enumerates (memory ~ 40 B/state).
DEFAULT_MAX_STATES = 2_000_000

__all__ = [
    "DEFAULT_MAX_STATES",
    "basic_composition",
    "drv_composition",
    "kov_composition",
    "optimal_composition_delta",
    "optimal_composition_epsilon",
    "optimal_composition_states",
    "optimal_homogeneous_delta",
    "optimal_homogeneous_epsilon",
    "poisson_amplify",
]


# ---------------------------------------------------------------------------------------------------------
# input validation
# ---------------------------------------------------------------------------------------------------------


def _terms(
    epsilons: Iterable[float], deltas: Iterable[float] | None = None, counts: Iterable[int] | None = None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Validate (ε_i, δ_i, c_i) triples; returns three numpy arrays (float, float, int64)."""
    try:
        eps_list = list(epsilons)
    except TypeError:
        raise InvalidParameterError("epsilons", "must be a sequence of epsilons", epsilons) from None
    if not eps_list:
        raise InvalidParameterError("epsilons", "must be non-empty")
    n = len(eps_list)
    eps = np.array([check_epsilon("epsilons", e, allow_zero=True) for e in eps_list], dtype=np.float64)
    if deltas is None:
        dels = np.zeros(n)
    else:
        d_list = list(deltas)
        if len(d_list) != n:
            raise InvalidParameterError("deltas", f"must have the same length as epsilons ({n})", len(d_list))
        dels = np.array([check_delta("deltas", d, allow_zero=True) for d in d_list], dtype=np.float64)
    if counts is None:
        cnt = np.ones(n, dtype=np.int64)
    else:
        c_list = list(counts)
        if len(c_list) != n:
            raise InvalidParameterError("counts", f"must have the same length as epsilons ({n})", len(c_list))
        cnt = np.array([check_positive_int("counts", c, minimum=0) for c in c_list], dtype=np.int64)
        if not cnt.any():
            raise InvalidParameterError("counts", "must not all be zero (nothing was composed)")
    return eps, dels, cnt


def _log_survival(dels: np.ndarray, cnt: np.ndarray) -> float:
    """log Π(1 − δ_i)^{c_i}: the log-probability that no mechanism's δ-event fires."""
    return math.fsum(float(c) * math.log1p(-float(d)) for d, c in zip(dels, cnt, strict=False) if d > 0 and c > 0)


# ---------------------------------------------------------------------------------------------------------
# basic, DRV, KOV closed forms
# ---------------------------------------------------------------------------------------------------------


def basic_composition(
    epsilons: Sequence[float], deltas: Sequence[float] | None = None, counts: Sequence[int] | None = None
) -> tuple[float, float]:
    """Basic composition (Dwork–Roth 2014, Thm 3.16): (Σ c_i ε_i, Σ c_i δ_i), δ capped at 1."""
    eps, dels, cnt = _terms(epsilons, deltas, counts)
    return (
        sum_products_up(eps.tolist(), cnt.tolist()),  # exact sums, rounded up (spec/accounting/filters.md §5)
        min(1.0, sum_products_up(dels.tolist(), cnt.tolist())),
    )


def drv_composition(epsilon: float, delta: float, k: int, delta_prime: float) -> tuple[float, float]:
    """Advanced composition of Dwork, Rothblum, Vadhan 2010, Thm III.3 (k-fold, homogeneous, adaptive).

    Returns (ε', δ_total) = (ε·sqrt(2k ln(1/δ')) + kε(e^ε − 1), kδ + δ'), δ_total capped at 1. The theorem is
    stated as is; it can exceed the basic bound kε for large ε (take the minimum yourself, or use
    :func:`kov_composition`, which does).
    """
    eps = check_epsilon("epsilon", epsilon, allow_zero=True)
    dlt = check_delta("delta", delta, allow_zero=True)
    k = check_positive_int("k", k)
    dp = check_delta("delta_prime", delta_prime)
    eps_total = eps * math.sqrt(2.0 * k * math.log(1.0 / dp)) + k * eps * math.expm1(eps)
    # rounded outward (spec/accounting/filters.md §5): a handful of correctly rounded operations,
    # relative error << 2^-48
    return outward(eps_total, eps_total), min(1.0, sum_products_up([dlt, dp], [k, 1]))


def kov_composition(
    epsilons: Sequence[float],
    delta_tilde: float,
    deltas: Sequence[float] | None = None,
    counts: Sequence[int] | None = None,
) -> tuple[float, float]:
    """Closed-form heterogeneous bound of Kairouz, Oh, Viswanath 2015, Thm 3.5 (Thm 3.4 when homogeneous).

    Returns (ε̃, 1 − (1 − δ̃)·Π(1 − δ_i)) with ε̃ the minimum of the three expressions in the module docstring.
    """
    eps, dels, cnt = _terms(epsilons, deltas, counts)
    dt = float(delta_tilde)
    if not (0.0 < dt <= 1.0) or dt != dt:
        raise InvalidParameterError("delta_tilde", "must lie in (0, 1]", delta_tilde)
    c = cnt.astype(np.float64)
    s1 = sum_products_up(eps.tolist(), cnt.tolist())  # basic composition, exact and rounded up
    s2 = math.fsum(c * eps * np.tanh(eps / 2.0))  # (e^ε − 1)/(e^ε + 1) = tanh(ε/2)
    s3 = math.fsum(c * eps * eps)
    # a few float operations on terms <= s1 + s3 + log terms: moved up by their rounding bound
    # (spec/accounting/filters.md §5); the fsums' own errors are relative 2^-52 per term, far inside outward's
    # 2^-48·(magnitude + 1)
    mag = s1 + s3 + abs(math.log(dt)) + 2.0
    e2 = outward(s2 + math.sqrt(2.0 * s3 * math.log(math.e + math.sqrt(s3) / dt)), mag)
    e3 = outward(s2 + math.sqrt(2.0 * s3 * math.log(1.0 / dt)), mag)
    delta_total = -math.expm1(math.log1p(-dt) + _log_survival(dels, cnt)) if dt < 1 else 1.0
    return min(s1, e2, e3), min(1.0, delta_total)


def poisson_amplify(epsilon: float, delta: float, sampling_probability: float) -> tuple[float, float]:
    """Balle, Barthe, Gaboardi 2018, Thm 8: an (ε, δ)-DP mechanism run on a Poisson(q) subsample is
    (log(1 + q(e^ε − 1)), qδ)-DP under the add/remove-one relation."""
    eps = check_epsilon("epsilon", epsilon, allow_zero=True)
    dlt = check_delta("delta", delta, allow_zero=True)
    q = float(sampling_probability)
    if not (0.0 <= q <= 1.0):
        raise InvalidParameterError("sampling_probability", "must lie in [0, 1]", sampling_probability)
    if q == 0.0:
        return 0.0, 0.0
    # rounded outward: the same evaluation and error bound as amplification.amplified_pure_epsilon; qδ exactly,
    # rounded up
    return amplified_pure_epsilon(eps, q), _mul_up_real(dlt, q)


def _mul_up_real(x: float, y: float) -> float:
    """x·y for two floats, exactly and rounded up."""
    return up(Fraction(x) * Fraction(y))


# ---------------------------------------------------------------------------------------------------------
# exact optimal composition (KOV Thm 3.3 / Murtagh–Vadhan Thm 1.5)
# ---------------------------------------------------------------------------------------------------------


def optimal_composition_states(epsilons: Sequence[float], counts: Sequence[int] | None = None) -> int:
    """Number of loss states the exact computation enumerates: Π over distinct ε_i > 0 of (k_r + 1)."""
    eps, _, cnt = _terms(epsilons, None, counts)
    return _state_count(*_group(eps, cnt))


def _group(
    eps: npt.NDArray[np.float64], cnt: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    values: dict[float, int] = {}
    for e, c in zip(eps.tolist(), cnt.tolist(), strict=False):
        if e > 0 and c > 0:
            values[e] = values.get(e, 0) + int(c)
    keys = sorted(values)
    return np.array(keys, dtype=np.float64), np.array([values[k] for k in keys], dtype=np.int64)


def _state_count(values: npt.NDArray[np.float64], counts: npt.NDArray[np.int64]) -> int:
    n = 1
    for c in counts.tolist():
        n *= c + 1
    return n


class _RrProduct:
    """Privacy-loss distribution of Π_r RR(ε_r)^{k_r} — the dominating pair of the composition.

    State j = (j_1..j_m), j_r = number of the k_r coordinates of group r on which the output disagrees with
    the input (the complement of Murtagh–Vadhan's S). Its privacy loss is L = Σ (k_r − 2 j_r) ε_r and its mass
    under P is Π C(k_r, j_r) e^{(k_r − j_r) ε_r} / (1 + e^{ε_r})^{k_r}; under Q the mass is P·e^{−L}.
    States are sorted by decreasing loss.
    """

    def __init__(self, values: np.ndarray, counts: np.ndarray, max_states: int):
        n = _state_count(values, counts)
        if n > max_states:
            raise InvalidParameterError(
                "epsilons",
                f"exact optimal composition needs {n} loss states (> max_states={max_states}); it is #P-hard in "
                "general (Murtagh–Vadhan 2016) — use kov_composition or fewer distinct epsilons",
            )
        loss = np.zeros(1)
        logp = np.zeros(1)
        # Rounding: each log-mass is a sum of terms of magnitude ≤ M = Σ_r [log k_r! + k_r(ε_r + log(1+e^{ε_r}))],
        # so its absolute error is ≤ ~8 ulp(M); δ is inflated by exp(16·2^-52·M) (≈ 1 + 3e-9 for k = 10^6) to
        # stay an upper bound, and inverses are certified against the inflated δ.
        mag = sum(
            float(gammaln(k + 1.0)) + k * (e + float(np.logaddexp(0.0, e)))
            for e, k in zip(values.tolist(), counts.tolist(), strict=False)
        )
        self.log_err = 16.0 * 2.0**-52 * mag + 1e-14
        for e, k in zip(values.tolist(), counts.tolist(), strict=False):
            j = np.arange(k + 1, dtype=np.float64)
            lp = gammaln(k + 1.0) - gammaln(j + 1.0) - gammaln(k - j + 1.0) + (k - j) * e - k * np.logaddexp(0.0, e)
            loss = (loss[:, None] + ((k - 2.0 * j) * e)[None, :]).ravel()
            logp = (logp[:, None] + lp[None, :]).ravel()
        order = np.argsort(-loss, kind="stable")
        self.loss = loss[order]
        self.logp = logp[order]
        self.logq = self.logp - self.loss
        # prefix log-sums: A[m] = log Σ_{s<m} P_s, B[m] = log Σ_{s<m} Q_s (A[0] = B[0] = −inf)
        self.cum_logp = np.concatenate([[-np.inf], np.logaddexp.accumulate(self.logp)])
        self.cum_logq = np.concatenate([[-np.inf], np.logaddexp.accumulate(self.logq)])

    @property
    def max_loss(self) -> float:
        return float(self.loss[0])

    def delta(self, eps_g: float) -> float:
        """Hockey-stick divergence H_{e^{ε_g}}(P‖Q) = Σ_{L_s > ε_g} P_s (1 − e^{ε_g − L_s}) (all terms ≥ 0),
        rounded up by the error bound ``log_err``."""
        m = int(np.searchsorted(-self.loss, -eps_g, side="left"))  # states with L > eps_g
        if m == 0:
            return 0.0
        lp = self.logp[:m] + np.log(-np.expm1(eps_g - self.loss[:m]))
        top = float(np.max(lp))
        return min(1.0, math.exp(top + self.log_err) * float(np.sum(np.exp(lp - top))))  # pairwise summation

    def epsilon(self, t: float) -> float:
        """Smallest ε_g ≥ 0 with delta(ε_g) ≤ t (t ≥ 0)."""
        if self.delta(0.0) <= t:
            return 0.0
        if t <= 0.0:
            return self.max_loss
        loss = self.loss
        # δ at each loss level v = L_m: A − e^v B over the states with loss strictly above v. Non-decreasing in m.
        n_gt = np.searchsorted(-loss, -loss, side="left")
        with np.errstate(invalid="ignore"):
            d_at = np.exp(self.cum_logp[n_gt]) - np.exp(loss + self.cum_logq[n_gt])
        above = np.nonzero(d_at > t)[0]
        m = int(above[0]) if above.size else loss.size  # ≥ 1, since d_at[0] = 0
        hi = float(loss[m - 1])  # δ(hi) ≤ t
        lo = max(0.0, float(loss[m])) if m < loss.size else 0.0
        # on (lo, hi) the active states are those with loss ≥ hi: δ(ε) = A − e^ε B
        n_ge = int(np.searchsorted(-loss, -hi, side="right"))
        a, b = float(self.cum_logp[n_ge]), float(self.cum_logq[n_ge])
        eps_g = None
        t_eff = t * math.exp(-self.log_err)  # delta() is inflated by exp(log_err): aim below t accordingly
        if math.exp(a) > t_eff:
            cand = math.log(math.exp(a) - t_eff) - b
            if lo <= cand <= hi:
                eps_g = cand
        if eps_g is None:  # rounding misplaced the interval: bisect on it (δ(lo) > t ≥ δ(hi) up to rounding)
            eps_g = lo
        # certify with the cancellation-free evaluation; if rounding bit, bisect between eps_g and a certified point
        if self.delta(eps_g) > t:
            for rel in (1e-14, 1e-12, 1e-10):  # the closed form is off by rounding only: try tiny nudges first
                nudged = min(hi, eps_g + rel * max(1.0, abs(eps_g)))
                if self.delta(nudged) <= t:
                    return max(0.0, nudged)
        if self.delta(eps_g) > t:
            lo_b, hi_b = eps_g, hi if self.delta(hi) <= t else self.max_loss
            for _ in range(200):
                mid = 0.5 * (lo_b + hi_b)
                if not (lo_b < mid < hi_b):
                    break
                if self.delta(mid) <= t:
                    hi_b = mid
                else:
                    lo_b = mid
            eps_g = hi_b
        return max(0.0, eps_g)


def optimal_composition_delta(
    epsilon_g: float,
    epsilons: Sequence[float],
    deltas: Sequence[float] | None = None,
    counts: Sequence[int] | None = None,
    max_states: int = DEFAULT_MAX_STATES,
) -> float:
    """Exact optimal δ of the adaptive composition at ε_g (KOV 2015 Thm 3.3 / Murtagh–Vadhan 2016 Thm 1.5).

    δ = 1 − Π(1 − δ_i)·(1 − H_{e^{ε_g}}(Π RR(ε_i))). No smaller δ is valid for every such composition.
    """
    eg = check_epsilon("epsilon_g", epsilon_g, allow_zero=True)
    eps, dels, cnt = _terms(epsilons, deltas, counts)
    values, group_counts = _group(eps, cnt)
    log_surv = _log_survival(dels, cnt)
    if values.size == 0:
        return min(1.0, -math.expm1(log_surv))
    rr = _RrProduct(values, group_counts, check_positive_int("max_states", max_states))
    d_rr = rr.delta(eg)
    return min(1.0, -math.expm1(math.log1p(-d_rr) + log_surv)) if d_rr < 1 else 1.0


def optimal_composition_epsilon(
    delta_g: float,
    epsilons: Sequence[float],
    deltas: Sequence[float] | None = None,
    counts: Sequence[int] | None = None,
    max_states: int = DEFAULT_MAX_STATES,
) -> float:
    """Exact optimal ε_g of the adaptive composition at total δ_g (inverse of :func:`optimal_composition_delta`).

    Returns ``math.inf`` when δ_g < 1 − Π(1 − δ_i) (no ε achieves it). On each interval between consecutive
    loss values δ(ε_g) = A − e^{ε_g} B, so ε_g is solved in closed form and then certified with the
    cancellation-free sum; the returned ε_g satisfies optimal_composition_delta(ε_g) ≤ δ_g.
    """
    dg = check_delta("delta_g", delta_g, allow_zero=True)
    eps, dels, cnt = _terms(epsilons, deltas, counts)
    values, group_counts = _group(eps, cnt)
    log_surv = _log_survival(dels, cnt)
    t = -math.expm1(math.log1p(-dg) - log_surv)  # target for the RR part: 1 − (1 − δ_g)/Π(1 − δ_i)
    if t < 0:
        return math.inf
    if values.size == 0:
        return 0.0
    rr = _RrProduct(values, group_counts, check_positive_int("max_states", max_states))
    return rr.epsilon(t)


def optimal_homogeneous_delta(epsilon: float, delta: float, k: int, epsilon_g: float) -> float:
    """KOV 2015 Thm 3.3: exact δ of the k-fold adaptive composition of (ε, δ)-DP mechanisms at ε_g."""
    k = check_positive_int("k", k)
    return optimal_composition_delta(epsilon_g, [epsilon], [delta], [k], max_states=max(k + 1, 2))


def optimal_homogeneous_epsilon(epsilon: float, delta: float, k: int, delta_g: float) -> float:
    """KOV 2015 Thm 3.3: exact ε_g of the k-fold adaptive composition of (ε, δ)-DP mechanisms at total δ_g."""
    k = check_positive_int("k", k)
    return optimal_composition_epsilon(delta_g, [epsilon], [delta], [k], max_states=max(k + 1, 2))
