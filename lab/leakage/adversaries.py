"""The adversaries of paper 002 against the scalar mechanism M* (3.3), and their exact AUCs.

Setting (002 §3.5): k colluding accounts, n queries each, all with the probe q*; each release is
y = s_b + Z, Z ~ N(0, σ²) i.i.d. (assumption M1), s_0 = ⟨q*, x*⟩ (target in), s_1 = ⟨q*, x*'⟩ (replaced).
Neighbouring relation: replace-one (``accounting.collusion.NEIGHBOURING``); Δ = s_0 − s_1 is the realised score gap,
at most the score sensitivity (2 for raw cosine, ``accounting.collusion.SENSITIVITY_NOTE``).

* Pooled mean (the lower-bound adversary A*, 002 §3.5): ȳ = (1/kn) Σ y_ij ~ N(s_b, σ²/(kn)); decision
  b̂ = 1[ȳ < (s_0 + s_1)/2]. Its AUC is Φ(Δ√(kn)/(√2σ)) (``accounting.collusion.pooled_mean_auc``).
* Bayes LR (002 §4.6, Adversary B): log N(ȳ; s_0, σ_e²) − log N(ȳ; s_1, σ_e²) with σ_e² = σ²/(kn)
  = (Δ/σ_e²)(ȳ − (s_0 + s_1)/2); 002 writes it for s_1 = 0, s_0 = Δ: (Δ/σ_e²)ȳ − Δ²/(2σ_e²). A strictly
  increasing function of ȳ, so its AUC equals the pooled mean's trial by trial.
* Multi-target split (002 §4.6, Adversary C): of the k accounts, k_t = ⌈ρk⌉ probe the true target and the rest a
  direction orthogonal to it (zero signal in both worlds). The statistic for the true target is the pooled mean of
  the k_t target accounts' kn_t releases; its AUC is Φ(Δ√(k_t n)/(√2σ)), never above the baseline's.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr

from dprag.accounting.errors import check_epsilon, check_positive_int
from dprag.errors import InvalidParameterError


def pooled_mean(samples) -> np.ndarray:
    """ȳ over the last axis: one pooled mean per trial for an array (..., kn) of releases."""
    a = np.asarray(samples, dtype=np.float64)
    if a.ndim == 0 or a.shape[-1] == 0:
        raise InvalidParameterError("samples", "must have at least one release on the last axis")
    return a.mean(axis=-1)


def midpoint_decision(ybar, s_in: float, s_out: float) -> np.ndarray:
    """002's A*: guess "replaced" (1) iff ȳ < (s_in + s_out)/2 (s_in > s_out)."""
    if not s_in > s_out:
        raise InvalidParameterError("s_in", "must exceed s_out (the target raises the probe's score)", (s_in, s_out))
    return (np.asarray(ybar, dtype=np.float64) < 0.5 * (s_in + s_out)).astype(np.int64)


def bayes_llr(ybar, s_in: float, s_out: float, sigma: float, releases: int) -> np.ndarray:
    """Exact log-likelihood ratio log p(ȳ | in) − log p(ȳ | out) of the pooled mean of ``releases`` Gaussian
    releases with noise σ: (Δ/σ_e²)(ȳ − (s_in + s_out)/2), Δ = s_in − s_out, σ_e² = σ²/releases."""
    sigma = check_epsilon("sigma", sigma)
    m = check_positive_int("releases", releases)
    d = float(s_in) - float(s_out)
    if not math.isfinite(d):
        raise InvalidParameterError("s_in", "scores must be finite", (s_in, s_out))
    se2 = sigma * sigma / m
    return (d / se2) * (np.asarray(ybar, dtype=np.float64) - 0.5 * (float(s_in) + float(s_out)))


def split_accounts(k: int, rho: float) -> int:
    """k_t = ⌈ρk⌉ accounts of a coalition of k probe the true target (ρ ∈ (0, 1])."""
    k = check_positive_int("k", k)
    rho = float(rho)
    if not (0.0 < rho <= 1.0):
        raise InvalidParameterError("rho", "must lie in (0, 1]", rho)
    return max(1, min(k, math.ceil(rho * k - 1e-12)))


def split_auc(k: int, n: int, sigma: float, gap: float, rho: float) -> float:
    """Exact AUC of the split adversary's statistic: Φ(Δ√(k_t n)/(√2σ)), k_t = ``split_accounts(k, ρ)``."""
    kt = split_accounts(k, rho)
    n = check_positive_int("n", n)
    sigma = check_epsilon("sigma", sigma)
    gap = check_epsilon("gap", gap)
    return float(ndtr(gap * math.sqrt(kt * n) / (math.sqrt(2.0) * sigma)))
