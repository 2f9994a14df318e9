"""``accounting.testing``: tools for users' own privacy test suites.

- ``check_dp`` / ``assert_dp`` (``empirical_dp``): a statistical falsifier of (ε, δ)-DP on a pair of
  neighbouring inputs with a bounded false-failure rate α (Clopper–Pearson + Bonferroni; in the spirit of
  StatDP, Ding et al. CCS 2018, and DP-Sniper, Bichsel et al. S&P 2021). See its module docstring for an
  example to paste into a pytest suite.
- ``strategies``: hypothesis strategies for privacy parameters, privacy events and neighbouring inputs
  (imported lazily: it needs ``hypothesis``, a test-time dependency).
- ``seeded_source(seed, label)`` / ``seeded(seed)``: deterministic ``RandomSource``s for tests (the only place
  test code should get seeded sources; serving code uses ``RandomSource.system()``). A source has samplers
  for test writers: ``uniform01()``, ``integers(b)``, ``laplace(b)``, ``gaussian(σ)``, ``discrete_laplace(b)``,
  ``discrete_gaussian(σ)`` (one value without ``size``, an array with it).
- ``pytest_plugin``: ``pytest_plugins = ["dprag.accounting.testing.pytest_plugin"]`` in a conftest registers and
  loads the hypothesis profile these tools need (``deadline=None``, ``derandomize=True``, ``too_slow`` /
  ``data_too_large`` health checks off) and a ``dp_source`` fixture seeded by the test's id.
"""

from __future__ import annotations

from types import ModuleType

from ..noise.source import RandomSource
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
    "seeded_source",
    "strategies",
]


def seeded_source(seed: bytes | str = b"dprag-test", label: bytes | str = b"") -> RandomSource:
    """A deterministic RandomSource for tests: the SHAKE-256 stream of (seed, label) (``RandomSource.from_seed``)."""
    if isinstance(seed, str):
        seed = seed.encode()
    return RandomSource.from_seed(seed, label.encode() if isinstance(label, str) else label)


def __getattr__(name: str) -> ModuleType:
    if name == "strategies":
        import importlib

        return importlib.import_module(".strategies", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
