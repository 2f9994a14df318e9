"""The re-signing campaign (dprag.audit.testing.forge, spec/protocol.md §8.12): a provider edits its own window and
re-derives every hash, checkpoint and receipt it can with its own key, so each edit reaches the deep checks. Every
edit of the fixed must-FAIL list FAILs naming its check; re-signing an unchanged window PASSes (the forger is
faithful). The default run is a slice (seed 3, 10 cases per edit, a few seconds); the campaign of 10^5 cases is
the slow test and is recorded in the spec."""

from __future__ import annotations

import pytest

from dprag.audit.testing.forge import MUST_FAIL, MUST_PASS, run_campaign


def _check(st, cases: int) -> None:
    assert st.tracebacks == [], st.tracebacks[:3]
    assert st.escaped == [], st.escaped[:3]  # no must-FAIL edit passed or FAILed under another check only
    assert st.cases == cases and st.slow_over_10s == 0 and st.peak_rss_mib < 1024
    kinds = set(MUST_FAIL) | set(MUST_PASS)
    assert set(st.by_kind) == kinds, set(st.by_kind) ^ kinds  # every edit was exercised
    assert all(v["PASS"] == 0 for k, v in st.by_kind.items() if k in MUST_FAIL)
    assert all(v["FAIL"] == 0 and v["PASS"] > 0 for k, v in st.by_kind.items() if k in MUST_PASS)


def test_forge_slice(tmp_path):
    n = 10 * (len(MUST_FAIL) + len(MUST_PASS))
    _check(run_campaign(n, 3, tmp_path), n)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(200, 210))
def test_forge_campaign(tmp_path, seed):
    _check(run_campaign(10_000, seed, tmp_path), 10_000)
