"""Predictions and upper bounds beside every measured AUC (002 §3.8, with the library's exact forms).

* ``pooled_mean_auc`` (``accounting.collusion``): Φ(Δ√(kn)/(√2σ)), the exact AUC of the pooled-mean test on M*.
  002's (3.11) has no constants and its Fig. 2 caption formula ½ + ½Φ(·) is ¾ at zero signal: neither is used.
* ``certified_auc_bound``: the largest AUC any test can reach against an (ε, δ)-DP release,
  ``collusion.auc_upper_bound`` = 1 − (1 − δ)²/(1 + e^ε), at the certified joint ε of the kn releases
  (``collusion.certified_joint_epsilon``), minimised over δ ∈ {10^-2, ..., 10^-12} (each is a valid bound, so
  their minimum is). ``noise="discrete"`` (the top-K harness's table sampler) uses the discrete Gaussian's
  certified ε and adds kn·tv of the table sampler to δ.
* ``gdp_auc_bound``: Φ(μ/√2), μ = Δ_sens√(kn)/σ: the area under the trade-off curve of μ-GDP (Dong, Roth & Su),
  the largest AUC of any test on kn continuous Gaussian releases of sensitivity Δ_sens (equals the prediction
  when the realised gap is the sensitivity).
"""

from __future__ import annotations

import math

from dprag.accounting import collusion

DELTAS = tuple(10.0**-j for j in range(2, 13))


def certified_auc_bound(
    k: int, n: int, sigma: float, sensitivity: float, noise: str = "gaussian", sampler_tv: float = 0.0
) -> dict:
    best = None
    for d in DELTAS:
        eps = collusion.certified_joint_epsilon(k, n, sigma, d, sensitivity, noise)
        dd = d + k * n * sampler_tv
        if dd >= 1:
            continue
        b = collusion.auc_upper_bound(eps, dd)
        if best is None or b < best["upper_bound"]:
            best = {"upper_bound": b, "upper_bound_epsilon": eps, "upper_bound_delta": dd}
    return best


def gdp_auc_bound(k: int, n: int, sigma: float, sensitivity: float) -> float:
    return collusion.pooled_mean_auc(k, n, sigma, sensitivity)


def leading_epsilon(k: int, eps_acc: float, delta_acc: float) -> float:
    """002's printed leading term √k·ε_acc (3.2) at δ = δ_acc, for the "AUC vs √k·ε_acc" axis only."""
    return math.sqrt(k) * eps_acc
