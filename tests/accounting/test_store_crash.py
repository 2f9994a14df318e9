"""Crash safety: a charging process killed with SIGKILL at arbitrary times never leaves a document with less
recorded spend than was released.

A child process charges random documents of a SqliteBudgetStore (synchronous=FULL) in a loop and, only
after ``try_charge`` / ``try_charge_many`` has returned, appends what it admitted ("released") to a file
with a single ``write`` (complete lines only are counted). The parent kills it with SIGKILL after a random
delay — during start-up, mid-transaction, mid-fsync or between charges — and starts a new child on the same
files, several times. Afterwards, per document and order: released <= recorded <= budget, and recorded
exceeds released by at most the charges that were in flight at the kills.

Not a statistical test: the invariant must hold for every kill time, so it has no false-failure rate; the
kill times are seeded (the OS scheduling, not the seed, decides where each kill lands).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dprag.accounting.events import GaussianEvent
from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.stores import SqliteBudgetStore

pytestmark = pytest.mark.integration  # starts servers or processes (CONTRIBUTING.md)

ROOT = Path(__file__).resolve().parents[2]
N_DOCS, M, K_PER_CHARGE, BATCH = 300, 40, 6, 3
SIGMAS = (2.0, 3.0, 5.0)

CHILD = rf"""
import os, sys
import numpy as np
from dprag.accounting.events import GaussianEvent
from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.stores import SqliteBudgetStore

path, released, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
N_DOCS, M, K, BATCH = {N_DOCS}, {M}, {K_PER_CHARGE}, {BATCH}
SIGMAS = {SIGMAS}
f = IndividualRenyiFilter(SqliteBudgetStore(path, N_DOCS, synchronous="FULL"),
                          FilterBudget.for_queries(M, GaussianEvent(SIGMAS[0])))
fd = os.open(released, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
rng = np.random.default_rng(seed)
while True:
    n = BATCH if rng.random() < 0.3 else 1
    reqs = [(rng.choice(N_DOCS, size=K, replace=False), int(rng.integers(len(SIGMAS)))) for _ in range(n)]
    results = f.try_charge_many([(ids, GaussianEvent(SIGMAS[c])) for ids, c in reqs])
    # released only now, after the charge is durable: one write() per batch, complete lines only
    lines = "".join(f"{{c}}:{{','.join(map(str, r.admitted.tolist()))}}\n" for (_, c), r in zip(reqs, results))
    os.write(fd, lines.encode())
"""


def _released_units(path: Path, unit_costs: list[np.ndarray], width: int) -> tuple[np.ndarray, int]:
    released = np.zeros((N_DOCS, width), dtype=np.int64)
    n = 0
    text = path.read_text() if path.exists() else ""
    for line in text.split("\n")[:-1]:  # the last piece is "" or an incomplete line
        c, ids = line.split(":")
        n += 1
        if ids:
            idx = np.array([int(x) for x in ids.split(",")])
            released[idx] += unit_costs[int(c)]
    return released, n


def test_sigkill_at_random_times_never_loses_released_spend(tmp_path):
    _kill_and_check(tmp_path, rounds=10, seed=20240611)


@pytest.mark.slow
def test_sigkill_many_rounds(tmp_path):
    _kill_and_check(tmp_path, rounds=60, seed=7)


def _kill_and_check(tmp_path, rounds: int, seed: int):
    db, rel = tmp_path / "budget.db", tmp_path / "released.log"
    rng = np.random.default_rng(seed)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for r in range(rounds):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(db), str(rel), str(r)], env=env, cwd=ROOT)
        # the last round lets the child run long enough that charges certainly happened
        time.sleep(2.5 if r == rounds - 1 else float(rng.uniform(0.3, 1.5)))
        if proc.poll() is not None:
            raise AssertionError(f"child exited early with {proc.returncode}")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)

    budget = FilterBudget.for_queries(M, GaussianEvent(SIGMAS[0]))
    with SqliteBudgetStore(db) as store:
        f = IndividualRenyiFilter(store, budget)
        unit_costs = [f.cost_units(GaussianEvent(s)) for s in SIGMAS]
        recorded = f.spent_units(range(N_DOCS))
    released, n_lines = _released_units(rel, unit_costs, budget.width)
    assert n_lines > 50, "the children released too little for the test to mean anything"
    assert np.all(released <= recorded), "a released charge is missing from the durable store"
    assert np.all(recorded <= budget.limits)
    # in flight at each kill: at most one batch, i.e. BATCH charges of the costliest event per document
    slack = rounds * BATCH * unit_costs[0]
    assert np.all(recorded - released <= slack)
