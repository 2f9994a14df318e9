"""Shared pytest configuration.

Hypothesis: the ``ci`` profile (selected when CI is set) is derandomized, so a CI run is repeatable
and cannot flake; locally the default profile explores new examples each run.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


import shutil  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory):
    """A real PostgreSQL server's URL (database ``dprag``): ``$DPRAG_TEST_PG`` if set, else a throwaway cluster of
    Debian's package started for this session (audit/testing/postgres.py). Without PostgreSQL installed the tests that
    need it skip locally and FAIL under CI (the README's test command installs it)."""
    url = os.environ.get("DPRAG_TEST_PG")
    if url:
        yield url
        return
    from dprag.audit.testing.postgres import TempCluster, pg_bin

    if pg_bin("initdb") is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed (apt-get install -y postgresql): the store tests need it")
        pytest.skip("PostgreSQL is not installed (apt-get install -y postgresql)")
    cluster = TempCluster(_pg_dir())
    yield cluster.start()
    cluster.stop()
    shutil.rmtree(cluster.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_cluster(tmp_path_factory):
    """A throwaway cluster of this session's own (the fault tests restart it)."""
    from dprag.audit.testing.postgres import TempCluster, pg_bin

    if pg_bin("initdb") is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed (apt-get install -y postgresql)")
        pytest.skip("PostgreSQL is not installed (apt-get install -y postgresql)")
    cluster = TempCluster(_pg_dir())
    cluster.start()
    yield cluster
    cluster.stop()
    shutil.rmtree(cluster.dir, ignore_errors=True)


def _pg_dir():
    """A directory the postgres user can reach (pytest's tmp_path lies under a root-only 0700 directory)."""
    import tempfile
    from pathlib import Path

    return Path(tempfile.mkdtemp(prefix="dprag-pg-"))
