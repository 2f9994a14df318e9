"""pytest plugin for privacy test suites written with ``dprag.accounting.testing``.

Enable it in your ``conftest.py``::

    pytest_plugins = ["dprag.accounting.testing.pytest_plugin"]

What it does (the hypothesis settings dprag's strategies need):

- registers the hypothesis profile ``"dprag"`` — ``deadline=None`` (exact samplers and accountants take
  milliseconds to seconds on large inputs, so per-example deadlines flake), ``derandomize=True`` (a privacy
  test that fails must fail again on re-run; the examples are a fixed function of the test), and the
  ``too_slow`` / ``data_too_large`` health checks suppressed (event strategies build nested compositions) —
  and loads it unless ``HYPOTHESIS_PROFILE`` names another registered profile;
- adds a fixture ``dp_source``: a deterministic ``RandomSource`` seeded by the test's node id, so every
  statistical test is seeded and its false-failure rate is the one it states.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from ..noise.source import RandomSource
from . import seeded_source

if TYPE_CHECKING:
    from hypothesis import settings as Settings

PROFILE = "dprag"


def _register() -> type[Settings]:
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        PROFILE,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    return settings


def pytest_configure(config: pytest.Config) -> None:
    settings = _register()
    wanted = os.environ.get("HYPOTHESIS_PROFILE")
    if not wanted:
        settings.load_profile(PROFILE)


@pytest.fixture
def dp_source(request: pytest.FixtureRequest) -> RandomSource:
    """A deterministic RandomSource seeded by the test's node id."""
    return seeded_source(b"dprag-test", request.node.nodeid)
