"""The verifier under a mutation fuzzer (dprag.audit.testing.fuzz): every mutated bundle or receipts file gets
a verdict (or exit-2 refusal of a non-bundle), never a traceback, never a hang past 10 s, never an
exception a check did not anticipate, and no bundle mutation PASSes. The default run is a fixed slice
(seed 7, 150 cases); the full campaign (10^5 cases, seeds 100-109) is the slow test and is recorded in
spec/protocol.md §8.12."""

import pytest

from dprag.audit.testing.fuzz import run_campaign


def _check(st):
    assert st.tracebacks == [], st.tracebacks[:3]
    assert st.slow == [], st.slow[:3]
    assert st.unanticipated == [], st.unanticipated[:3]
    assert st.passed_bundle_mutations == [], st.passed_bundle_mutations[:3]
    assert st.peak_rss_mib < 2048


def test_fuzz_slice(tmp_path):
    # a hang bound of 60 s here: a loaded 2-core CI machine can take 10+ s on a case the idle one does in 3
    st = run_campaign(150, 7, tmp_path, timeout=60.0)
    assert st.cases == 150 and st.verdicts.get("FAIL", 0) > 100
    _check(st)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 110))
def test_fuzz_campaign(tmp_path, seed):
    st = run_campaign(10_000, seed, tmp_path)
    _check(st)
