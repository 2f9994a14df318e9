"""ROC AUC of a membership test: the Mann–Whitney statistic, its DeLong and Hanley–McNeil standard errors,
the 95% interval, and the TPR at a fixed FPR. The one AUC of dprag.lab (the collusion-leakage harness of 002
and the membership-inference attacks of 001 / 003 both use it).

Convention: a higher score means "member" (``pos``: scores in the world where the target is in the index,
b = 0 of 002 §3.5; ``neg``: where it is not). Ties between a positive and a negative count one half, so an
uninformative test has AUC 1/2 exactly:

    Â = U / (m·n),   U = Σ_i Σ_j [x_i > y_j] + ½ [x_i = y_j]     (from mid-ranks, O((m+n) log(m+n))).

Standard errors:

* DeLong, DeLong & Clarke-Pearson (1988): structural components V10_i = (1/n) Σ_j ψ(x_i, y_j),
  V01_j = (1/m) Σ_i ψ(x_i, y_j), SE² = Var(V10)/m + Var(V01)/n (sample variances, ddof = 1). Ties count ½.
  Used as ``stderr`` everywhere (it does not assume a distribution).
* Hanley & McNeil (1982): SE² = [A(1−A) + (m−1)(Q1 − A²) + (n−1)(Q2 − A²)] / (m·n), Q1 = A/(2−A),
  Q2 = 2A²/(1+A) (exact for exponential scores, an approximation otherwise).

``auc_ci``: AUC ± z₀.₉₇₅·SE clipped to [0, 1], DeLong's SE; when every score pair is tied or the sample is
perfectly separated DeLong's estimate is 0 and the interval falls back to Hanley–McNeil at the observed AUC,
so that a tiny pilot never reports a zero-width interval. ``tpr_at_fpr(members, nonmembers, 0.01)``: the
largest TPR over the deterministic rules "member iff score ≥ t" whose FPR ≤ 0.01 (scikit-learn's ROC points
at every threshold; no randomised rule, no interpolation). ``members_for_halfwidth(auc, h)``: the smallest
balanced sample whose 95% interval half-width is at most h under Hanley–McNeil (≈ 260 + 260 at A = ½, h = 0.05).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy.special import ndtri
from scipy.stats import rankdata

from dprag.errors import InvalidParameterError

Z975 = float(ndtri(0.975))


def _scores(field: str, x, minimum: int = 2, finite: bool = False) -> np.ndarray:
    """``x`` as a flat float64 array of at least ``minimum`` scores; NaN refused (±inf too when ``finite``)."""
    try:
        a = np.asarray(list(x) if not isinstance(x, np.ndarray) else x, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise InvalidParameterError(field, "must be an array of real numbers") from None
    if a.size < minimum:
        raise InvalidParameterError(field, f"needs at least {minimum} score{'s' if minimum > 1 else ''}", a.size)
    if finite and not np.all(np.isfinite(a)):
        raise InvalidParameterError(field, "scores must be finite")
    if np.isnan(a).any():
        raise InvalidParameterError(field, "must not contain NaN (±inf is allowed: it ranks first/last)")
    return a


@dataclass(frozen=True)
class AucEstimate:
    auc: float
    stderr: float  # DeLong
    stderr_hanley_mcneil: float
    n_pos: int
    n_neg: int

    def to_dict(self) -> dict:
        return {
            "auc": self.auc,
            "stderr": self.stderr,
            "stderr_hanley_mcneil": self.stderr_hanley_mcneil,
            "n_pos": self.n_pos,
            "n_neg": self.n_neg,
        }


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


def _placements(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """V10_i = P̂(Y < x_i) + ½P̂(Y = x_i) and V01_j = P̂(X > y_j) + ½P̂(X = y_j), via mid-ranks."""
    m, n = pos.size, neg.size
    r_all = rankdata(np.concatenate([pos, neg]))  # mid-ranks
    r_pos, r_neg = rankdata(pos), rankdata(neg)
    v10 = (r_all[:m] - r_pos) / n  # number of neg below x_i (ties ½)
    v01 = 1.0 - (r_all[m:] - r_neg) / m  # fraction of pos above y_j (ties ½)
    return v10, v01


def _delong(v10: np.ndarray, v01: np.ndarray) -> float:
    return math.sqrt(v10.var(ddof=1) / v10.size + v01.var(ddof=1) / v01.size)


def hanley_mcneil_se(auc: float, n_pos: int, n_neg: int) -> float:
    """Hanley–McNeil (1982) standard error of an AUC estimate (module docstring)."""
    a = float(auc)
    if not 0.0 <= a <= 1.0:
        raise InvalidParameterError("auc", "must lie in [0, 1]", auc)
    m, n = int(n_pos), int(n_neg)
    if m < 1 or n < 1:
        raise InvalidParameterError("n_pos/n_neg", "must be >= 1", (n_pos, n_neg))
    q1, q2 = a / (2.0 - a), 2.0 * a * a / (1.0 + a)
    var = (a * (1 - a) + (m - 1) * (q1 - a * a) + (n - 1) * (q2 - a * a)) / (m * n)
    return math.sqrt(max(var, 0.0))


def delong_se(pos, neg) -> float:
    """DeLong (1988) standard error of the Mann–Whitney AUC of ``pos`` against ``neg`` (>= 2 of each)."""
    x, y = _scores("pos", pos), _scores("neg", neg)
    return _delong(*_placements(x, y))


def mann_whitney_auc(pos, neg) -> AucEstimate:
    """AUC = P(pos > neg) + ½P(pos = neg) by the Mann–Whitney U statistic, with DeLong and Hanley–McNeil SEs."""
    x, y = _scores("pos", pos), _scores("neg", neg)
    v10, v01 = _placements(x, y)
    auc = float(v10.mean())
    return AucEstimate(
        auc, _delong(v10, v01), hanley_mcneil_se(min(max(auc, 0.0), 1.0), x.size, y.size), x.size, y.size
    )


def auc(members: Sequence[float], nonmembers: Sequence[float]) -> float:
    """Mann–Whitney AUC (ties ½) of finite scores, at least one of each."""
    pos = _scores("members", members, minimum=1, finite=True)
    neg = _scores("nonmembers", nonmembers, minimum=1, finite=True)
    return float(_placements(pos, neg)[0].mean())


def auc_ci(members: Sequence[float], nonmembers: Sequence[float]) -> AucCI:
    """AUC with its 95% normal interval (DeLong; Hanley–McNeil when DeLong's estimate is 0)."""
    pos = _scores("members", members, minimum=1, finite=True)
    neg = _scores("nonmembers", nonmembers, minimum=1, finite=True)
    v10, v01 = _placements(pos, neg)
    a = float(v10.mean())
    method = "delong"
    se = _delong(v10, v01) if pos.size >= 2 and neg.size >= 2 else 0.0
    if se == 0.0:
        method = "hanley-mcneil"
        se = hanley_mcneil_se(a, pos.size, neg.size)
    return AucCI(a, se, max(0.0, a - Z975 * se), min(1.0, a + Z975 * se), int(pos.size), int(neg.size), method)


def tpr_at_fpr(members: Sequence[float], nonmembers: Sequence[float], fpr: float = 0.01) -> float:
    """Largest TPR of a rule "member iff score >= t" with FPR <= ``fpr`` (t over all scores and +inf)."""
    from sklearn.metrics import roc_curve  # the lab's ROC (scikit-learn, extra "rag")

    if not (0.0 <= fpr <= 1.0):
        raise InvalidParameterError("fpr", "must lie in [0, 1]", fpr)
    pos = _scores("members", members, minimum=1, finite=True)
    neg = _scores("nonmembers", nonmembers, minimum=1, finite=True)
    labels = np.concatenate([np.ones(pos.size), np.zeros(neg.size)])
    f, t, _ = roc_curve(labels, np.concatenate([pos, neg]), drop_intermediate=False)
    return float(t[f <= fpr].max())


def members_for_halfwidth(a: float = 0.5, halfwidth: float = 0.05) -> int:
    """Smallest n (members = non-members = n) with z₀.₉₇₅·SE_HM(a, n, n) <= halfwidth."""
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
