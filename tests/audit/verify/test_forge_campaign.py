"""The re-signing campaign (dprag.audit.testing.forge, spec/protocol.md §8.12): a provider edits its own window and
re-derives every hash, checkpoint and receipt it can with its own key, so each edit reaches the deep checks. Every
edit of the fixed must-FAIL list FAILs naming its check; re-signing an unchanged window PASSes (the forger is
faithful). The default run is a slice (seed 3, 10 cases per edit, a few seconds); the campaign of 10^5 cases is
the slow test and is recorded in the spec."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dprag.audit.testing.forge import ACCOUNT_KINDS, MUST_FAIL, MUST_PASS

pytestmark = pytest.mark.integration  # starts servers or processes (CONTRIBUTING.md)


def _campaign(tmp_path, cases: int, seed: int) -> None:
    # a fresh process, so the peak memory is the campaign's own (not that of a test session that loaded models)
    p = subprocess.run(
        [sys.executable, "-m", "dprag.audit.testing.forge", "--cases", str(cases), "--seed", str(seed)]
        + ["--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=7200,
    )
    st = json.loads(p.stdout)
    assert st["n_tracebacks"] == 0, st["tracebacks"][:3]
    assert st["n_escaped"] == 0, st["escaped"][:3]  # no must-FAIL edit passed or FAILed under another check only
    assert st["n_framed"] == 0, st["framed"][:3]  # no account-side kind FAILed the honest window
    assert st["cases"] == cases and st["slow_over_10s"] == 0 and st["peak_rss_mib"] < 1024
    kinds = set(MUST_FAIL) | set(MUST_PASS) | set(ACCOUNT_KINDS)
    assert set(st["by_kind"]) == kinds, set(st["by_kind"]) ^ kinds  # every edit was exercised
    assert all(v["PASS"] == 0 for k, v in st["by_kind"].items() if k in MUST_FAIL)
    assert all(v["FAIL"] == 0 and v["PASS"] > 0 for k, v in st["by_kind"].items() if k in MUST_PASS)
    assert all(v["FAIL"] == 0 for k, v in st["by_kind"].items() if k in ACCOUNT_KINDS)
    assert p.returncode == 0


def test_forge_slice(tmp_path):
    _campaign(tmp_path, 10 * (len(MUST_FAIL) + len(MUST_PASS) + len(ACCOUNT_KINDS)), 3)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(200, 210))
def test_forge_campaign(tmp_path, seed):
    _campaign(tmp_path, 10_000, seed)
