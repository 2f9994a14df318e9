"""Membership-inference metrics: ROC AUC with a DeLong 95% interval, TPR at a fixed FPR, sample sizing.

Convention: a higher score means "member". Ties between a member and a non-member score count one half
(the Mann–Whitney U statistic), so an attack whose scores carry no information has AUC 1/2 exactly.

* ``auc(members, nonmembers)`` = U / (n₁ n₀), U = #{(i, j): s⁺ᵢ > s⁻ⱼ} + ½ #{(i, j): s⁺ᵢ = s⁻ⱼ}.
* ``auc_ci`` : DeLong, DeLong & Clarke-Pearson (1988) variance from the structural components
  V₁₀(i) = mean_j ψ(s⁺ᵢ, s⁻ⱼ), V₀₁(j) = mean_i ψ(s⁺ᵢ, s⁻ⱼ) (ψ = 1, ½, 0 for >, =, <):
  Var = S₁₀/n₁ + S₀₁/n₀ with S the sample variances (ddof = 1); interval AUC ± z₀.₉₇₅·√Var clipped to
  [0, 1]. When every score pair is tied or the sample is perfectly separated the variance estimate is 0;
  the interval then falls back to the Hanley–McNeil (1982) variance at the observed AUC so that a tiny
  pilot never reports a zero-width interval.
* ``tpr_at_fpr(members, nonmembers, 0.01)``: the largest TPR over the deterministic threshold rules
  "member iff score ≥ t" whose FPR ≤ 0.01 (no randomised rule, no interpolation). With fewer than 100
  non-members FPR ≤ 1% means no false positive at all.
* ``hanley_mcneil_se(auc, n1, n0)`` and ``members_for_halfwidth(auc, halfwidth)``: the standard error of an
  AUC under Hanley & McNeil's exponential approximation (Q₁ = A/(2 − A), Q₂ = 2A²/(1 + A)) and the smallest
  balanced sample whose 95% interval half-width is at most ``halfwidth`` (≈ 260 + 260 at A = ½, h = 0.05).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
from scipy.special import ndtri

from dprag.accounting.errors import InvalidParameterError

Z975 = float(ndtri(0.975))


def _arr(field: str, xs) -> np.ndarray:
    a = np.asarray(list(xs) if not isinstance(xs, np.ndarray) else xs, dtype=np.float64).ravel()
    if a.size == 0:
        raise InvalidParameterError(field, "needs at least one score")
    if not np.all(np.isfinite(a)):
        raise InvalidParameterError(field, "scores must be finite")
    return a


def _psi(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """ψ matrix (n₁ × n₀): 1 if member score > non-member score, ½ if equal, 0 if below."""
    d = pos[:, None] - neg[None, :]
    return (d > 0).astype(np.float64) + 0.5 * (d == 0)


def auc(members: Sequence[float], nonmembers: Sequence[float]) -> float:
    """Mann–Whitney AUC (ties ½)."""
    return float(_psi(_arr("members", members), _arr("nonmembers", nonmembers)).mean())


def hanley_mcneil_se(a: float, n1: int, n0: int) -> float:
    """Hanley–McNeil (1982) standard error of an AUC ``a`` from n1 positives and n0 negatives."""
    if not (0.0 <= a <= 1.0):
        raise InvalidParameterError("auc", "must lie in [0, 1]", a)
    if n1 < 1 or n0 < 1:
        raise InvalidParameterError("n", "n1 and n0 must be >= 1", (n1, n0))
    q1, q2 = a / (2.0 - a), 2.0 * a * a / (1.0 + a)
    var = (a * (1 - a) + (n1 - 1) * (q1 - a * a) + (n0 - 1) * (q2 - a * a)) / (n1 * n0)
    return math.sqrt(max(var, 0.0))


def members_for_halfwidth(a: float = 0.5, halfwidth: float = 0.05) -> int:
    """Smallest n (members = non-members = n) with 1.96·SE_HM(a, n, n) <= halfwidth."""
    if not (0 < halfwidth < 1):
        raise InvalidParameterError("halfwidth", "must lie in (0, 1)", halfwidth)
    n = 1
    while Z975 * hanley_mcneil_se(a, n, n) > halfwidth:
        n *= 2
    lo, hi = n // 2, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if Z975 * hanley_mcneil_se(a, mid, mid) > halfwidth:
            lo = mid
        else:
            hi = mid
    return max(hi, 1)


@dataclass(frozen=True)
class AucCI:
    auc: float
    se: float
    lo: float
    hi: float
    n_members: int
    n_nonmembers: int
    se_method: str  # "delong" | "hanley-mcneil" (fallback when the DeLong estimate is 0)

    @property
    def halfwidth(self) -> float:
        return Z975 * self.se

    def to_dict(self) -> dict:
        return {**asdict(self), "halfwidth": self.halfwidth}


def delong_se(members: Sequence[float], nonmembers: Sequence[float]) -> float:
    """DeLong standard error of the Mann–Whitney AUC (needs >= 2 of each for the sample variances)."""
    pos, neg = _arr("members", members), _arr("nonmembers", nonmembers)
    if pos.size < 2 or neg.size < 2:
        raise InvalidParameterError("members", "DeLong needs at least 2 members and 2 non-members",
                                    (pos.size, neg.size))
    psi = _psi(pos, neg)
    v10, v01 = psi.mean(axis=1), psi.mean(axis=0)
    return math.sqrt(v10.var(ddof=1) / pos.size + v01.var(ddof=1) / neg.size)


def auc_ci(members: Sequence[float], nonmembers: Sequence[float]) -> AucCI:
    """AUC with its 95% normal interval (DeLong; Hanley–McNeil when DeLong's estimate is 0)."""
    pos, neg = _arr("members", members), _arr("nonmembers", nonmembers)
    a = auc(pos, neg)
    method = "delong"
    se = delong_se(pos, neg) if pos.size >= 2 and neg.size >= 2 else 0.0
    if se == 0.0:
        method = "hanley-mcneil"
        se = hanley_mcneil_se(a, pos.size, neg.size)
    return AucCI(a, se, max(0.0, a - Z975 * se), min(1.0, a + Z975 * se), int(pos.size), int(neg.size), method)


def tpr_at_fpr(members: Sequence[float], nonmembers: Sequence[float], fpr: float = 0.01) -> float:
    """Largest TPR of a rule "member iff score >= t" with FPR <= ``fpr`` (t ranges over all scores and +inf)."""
    if not (0.0 <= fpr <= 1.0):
        raise InvalidParameterError("fpr", "must lie in [0, 1]", fpr)
    pos, neg = _arr("members", members), _arr("nonmembers", nonmembers)
    best = 0.0
    for t in np.unique(np.concatenate([pos, neg])):
        if np.mean(neg >= t) <= fpr:
            best = max(best, float(np.mean(pos >= t)))
    return best
