"""The test tiers (CONTRIBUTING.md): the hook in tests/conftest.py fails a test that starts a subprocess, a server,
a process or asks for a server fixture without the ``integration`` marker, and names what it started; a marked test
runs as usual; a test that fails on its own keeps its own error. Run on a small suite of its own with pytester, in a
subprocess (so this test itself is in the integration tier)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SUITE = """
import socket, subprocess, sys
import pytest

def test_unmarked_server():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); s.close()

def test_unmarked_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_unmarked_server_fixture(pg_url):
    pass

@pytest.fixture
def pg_url():
    return "postgresql://nowhere"

@pytest.mark.integration
def test_marked_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_unmarked_pure():
    assert sum(range(4)) == 6

def test_unmarked_that_fails_on_its_own():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert 1 == 2, "its own error"
"""


def test_the_hook_fails_unmarked_tests_that_start_something_and_names_it(pytester):
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    integration: starts things\n")
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2, failed=3, errors=1)  # the server fixture is caught at setup
    out = result.stdout.str()
    for name, what in (
        ("test_unmarked_server", "server (a listening socket)"),
        ("test_unmarked_subprocess", "subprocess"),
        ("test_unmarked_server_fixture", "the server fixture pg_url"),
    ):
        assert f"test_suite.py::{name} starts {what}" in out, out[-3000:]
    assert "without the integration marker" in out
    assert "its own error" in out  # a test failing on its own keeps its error
