"""ROC AUC of a membership test by the Mann–Whitney U statistic, with its standard error.

Scores: ``pos`` = the statistic in the world where the target is in the index (b = 0 of 002 §3.5), ``neg`` = in
the world where it is replaced. AUC = P(X > Y) + ½ P(X = Y), X ~ pos, Y ~ neg, estimated without bias by

    Â = U / (m·n),   U = Σ_i Σ_j [x_i > y_j] + ½ [x_i = y_j]     (computed from mid-ranks, O((m+n) log(m+n))).

Standard errors:
* DeLong, DeLong & Clarke-Pearson (1988): structural components V10_i = (1/n) Σ_j ψ(x_i, y_j),
  V01_j = (1/m) Σ_i ψ(x_i, y_j), SE² = Var(V10)/m + Var(V01)/n (sample variances, ddof = 1). Ties count ½.
  Used as ``stderr`` everywhere (it does not assume a distribution).
* Hanley & McNeil (1982): SE² = [A(1−A) + (m−1)(Q1 − A²) + (n−1)(Q2 − A²)] / (m·n), Q1 = A/(2−A),
  Q2 = 2A²/(1+A) (exact for exponential scores, an approximation otherwise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from dprag.accounting.errors import InvalidParameterError


def _scores(field: str, x) -> np.ndarray:
    try:
        a = np.asarray(x, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise InvalidParameterError(field, "must be an array of real numbers") from None
    if a.size < 2:
        raise InvalidParameterError(field, "needs at least 2 scores", a.size)
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
        return {"auc": self.auc, "stderr": self.stderr, "stderr_hanley_mcneil": self.stderr_hanley_mcneil,
                "n_pos": self.n_pos, "n_neg": self.n_neg}


def _placements(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """V10_i = P̂(Y < x_i) + ½P̂(Y = x_i) and V01_j = P̂(X > y_j) + ½P̂(X = y_j), via mid-ranks."""
    m, n = pos.size, neg.size
    r_all = rankdata(np.concatenate([pos, neg]))  # mid-ranks
    r_pos, r_neg = rankdata(pos), rankdata(neg)
    v10 = (r_all[:m] - r_pos) / n  # number of neg below x_i (ties ½)
    v01 = 1.0 - (r_all[m:] - r_neg) / m  # fraction of pos above y_j (ties ½)
    return v10, v01


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
    """DeLong (1988) standard error of the Mann–Whitney AUC of ``pos`` against ``neg``."""
    x, y = _scores("pos", pos), _scores("neg", neg)
    v10, v01 = _placements(x, y)
    return math.sqrt(v10.var(ddof=1) / x.size + v01.var(ddof=1) / y.size)


def mann_whitney_auc(pos, neg) -> AucEstimate:
    """AUC = P(pos > neg) + ½P(pos = neg) by the Mann–Whitney U statistic, with DeLong and Hanley–McNeil SEs."""
    x, y = _scores("pos", pos), _scores("neg", neg)
    v10, v01 = _placements(x, y)
    auc = float(v10.mean())
    se = math.sqrt(v10.var(ddof=1) / x.size + v01.var(ddof=1) / y.size)
    return AucEstimate(auc, se, hanley_mcneil_se(min(max(auc, 0.0), 1.0), x.size, y.size), x.size, y.size)
