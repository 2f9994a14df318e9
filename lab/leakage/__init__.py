"""dprag.lab.leakage: attacks that measure leakage the way paper 002 §4 does (spec/experiments-collusion.md).

* ``auc``: Mann–Whitney AUC with its standard error (DeLong; Hanley–McNeil).
* ``adversaries``: the pooled-mean lower-bound adversary of 002 (3.3)/(3.4), the Bayes likelihood-ratio
  statistic and the multi-target split ρ of 002 §4.6, with their closed-form AUCs.
* ``montecarlo``: a Monte Carlo runner, local processes by default or a Dask cluster; every trial is seeded by
  (seed, cell, trial index), so the result never depends on where a trial ran.
* ``scalar`` / ``topk``: the trial functions of the scalar mechanism M* and the multi-tenant top-K harness,
  drawing noise with the library's own mechanisms (``accounting.mechanisms.additive``, ``audit.protocol.retrieval``).

Specification: spec/experiments-collusion.md.
"""

if __name__ != "dprag.lab.leakage":  # one folder, one module: never loaded twice under two names
    raise ImportError(f"the folder lab/leakage/ is the package dprag.lab.leakage, not {__name__}")

from dprag.lab.auc import AucEstimate, delong_se, hanley_mcneil_se, mann_whitney_auc  # noqa: E402
from dprag.lab.leakage.adversaries import (  # noqa: E402
    bayes_llr,
    midpoint_decision,
    pooled_mean,
    split_accounts,
    split_auc,
)

__all__ = [
    "AucEstimate",
    "mann_whitney_auc",
    "delong_se",
    "hanley_mcneil_se",
    "pooled_mean",
    "midpoint_decision",
    "bayes_llr",
    "split_accounts",
    "split_auc",
]
