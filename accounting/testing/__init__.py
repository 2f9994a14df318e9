"""``accounting.testing``: tools for users' own privacy test suites.

- ``check_dp`` / ``assert_dp`` (``empirical_dp``): a statistical falsifier of (ε, δ)-DP on a pair of
  neighbouring inputs with a bounded false-failure rate α (Clopper–Pearson + Bonferroni; in the spirit of
  StatDP, Ding et al. CCS 2018, and DP-Sniper, Bichsel et al. S&P 2021). See its module docstring for an
  example to paste into a pytest suite.
- ``strategies``: hypothesis strategies for privacy parameters, privacy events and neighbouring inputs
  (imported lazily: it needs ``hypothesis``, a test-time dependency).
"""

from __future__ import annotations

from .empirical_dp import (
    DpCheckReport,
    EventResult,
    OutputEvent,
    assert_dp,
    check_dp,
    clopper_pearson_lower,
    clopper_pearson_upper,
    detection_probability,
    seeded,
)

__all__ = [
    "DpCheckReport",
    "EventResult",
    "OutputEvent",
    "assert_dp",
    "check_dp",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "detection_probability",
    "seeded",
    "strategies",
]


def __getattr__(name):
    if name == "strategies":
        import importlib

        return importlib.import_module(".strategies", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
