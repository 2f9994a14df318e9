"""Shared pytest configuration.

Hypothesis: the ``ci`` profile (selected when CI is set) is derandomized, so a CI run is repeatable
and cannot flake; locally the default profile explores new examples each run.
"""

import contextlib
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from hypothesis import HealthCheck, settings  # noqa: E402

#: pytester: tests/test_tiers.py runs the tier hook below on a suite of its own
pytest_plugins = ["pytester"]

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
    Debian's package started for this session (tests/support/postgres.py). Without PostgreSQL installed the tests that
    need it skip locally and FAIL under CI (the README's test command installs it)."""
    url = os.environ.get("DPRAG_TEST_PG")
    if url:
        yield url
        return
    from tests.support.postgres import TempCluster, pg_bin

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
    from tests.support.postgres import TempCluster, pg_bin

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


# ------------------------------------------------------------------------------------------------------------
# Test tiers (CONTRIBUTING.md): a test that starts a subprocess, a server (a listening socket), a cluster or a browser
# must carry the ``integration`` marker, so the unit tier stays a fast inner loop. The hook below watches every test's
# setup and call and fails an unmarked one that starts any of them, naming what it started.
# ------------------------------------------------------------------------------------------------------------
import multiprocessing.process  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402

_STARTED: list[str] = []
_WATCHING = False


def _watch(kind: str, original):
    def wrapper(*args, **kwargs):
        if _WATCHING:
            what = args[1] if kind == "subprocess" and len(args) > 1 else kwargs.get("args", "")
            if isinstance(what, (list, tuple)):
                what = " ".join(str(x) for x in what[:3])
            _STARTED.append(f"{kind} {str(what)[:80]}".strip())
        return original(*args, **kwargs)

    return wrapper


subprocess.Popen.__init__ = _watch("subprocess", subprocess.Popen.__init__)
multiprocessing.process.BaseProcess.start = _watch("process", multiprocessing.process.BaseProcess.start)
socket.socket.listen = _watch("server (a listening socket)", socket.socket.listen)
if hasattr(os, "fork"):
    os.fork = _watch("fork", os.fork)


def pytest_sessionstart(session):
    """Before any test is watched: the run records' ``git describe`` (``lab.runinfo.source_commit``, asked once per
    process), so the unit tests that write a run record do not each count as starting a subprocess; and matplotlib's
    font list, which a fresh machine builds with ``fc-list`` on the first import of its font manager."""
    from dprag.lab.runinfo import source_commit

    source_commit()
    with contextlib.suppress(ImportError):  # (without the plotting extra nothing draws)
        import matplotlib.font_manager  # noqa: F401


def _unmarked(item) -> bool:
    return item.get_closest_marker("integration") is None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _watched(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _watched(item))


#: fixtures that stand for a server of the session (started once, by whichever test asks first)
SERVER_FIXTURES = frozenset({"pg_url", "pg_cluster"})


def _watched(item):
    """Run the phase; an unmarked test that started something (or asked for a server fixture) then fails. A phase
    that failed on its own keeps its own error."""
    global _WATCHING
    if not _unmarked(item):
        return (yield)
    _STARTED.clear()
    _STARTED.extend(f"the server fixture {f}" for f in sorted(SERVER_FIXTURES & set(item.fixturenames)))
    _WATCHING = True
    try:
        result = yield
    finally:
        _WATCHING = False
    if _STARTED:
        started = sorted(set(_STARTED))
        pytest.fail(
            f"{item.nodeid} starts {', '.join(started[:3])}{' ...' if len(started) > 3 else ''} without the "
            "integration marker (@pytest.mark.integration; see CONTRIBUTING.md)",
            pytrace=False,
        )
    return result
