"""Certified ε for k·n = 10^6 Gaussian releases: accounting.gdp vs dp_accounting (PLD and RDP accountants).

The composition: 10^6 adaptive releases of N(0, σ²), sensitivity 1, σ from 002's (3.4) at ε_acc = 1,
δ_acc = 10⁻⁶, n = 10⁴ (so k = 100), reported at δ = 10⁻⁶.  Baseline: dp_accounting's PLDAccountant on
``SelfComposedDpEvent(GaussianDpEvent(σ), 10^6)`` (pessimistic, default discretisation).  Also timed: the
RdpAccountant on the same event (a looser bound), ours on an explicit array of 10^6 per-release σ's, and the
discrete Gaussian (σ in units of 1/1000 of a score, sensitivity 1000) by its lattice PLD.

Run:  python benchmarks/bench_certified.py            (plain script, prints a table of times, ratios, ε)
      python -m pytest benchmarks/bench_certified.py    (pytest-benchmark, if installed)
"""

from __future__ import annotations

import math
import statistics
import time

import numpy as np

RELEASES = 10**6
DELTA = 1e-6
SIGMA = math.sqrt(2 * 1e4 * math.log(1e6) * 2 * math.log(1.25e10))  # (3.4), ≈ 3584.39


def ours_certified():
    from dprag.accounting.gdp import certified_gaussian_epsilon

    return certified_gaussian_epsilon(SIGMA, DELTA, 1.0, RELEASES)


_ARRAY = None


def ours_certified_array():
    global _ARRAY
    from dprag.accounting.gdp import certified_gaussian_epsilon

    if _ARRAY is None:
        _ARRAY = np.full(RELEASES, SIGMA)
    return certified_gaussian_epsilon(_ARRAY, DELTA)


def ours_discrete():
    from dprag.accounting.gdp import discrete_gaussian_epsilon

    return discrete_gaussian_epsilon(SIGMA * 1000, 1000, RELEASES, DELTA).epsilon


def dp_accounting_pld():
    import dp_accounting

    acc = dp_accounting.pld.PLDAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(SIGMA), RELEASES))
    return acc.get_epsilon(DELTA)


def dp_accounting_rdp():
    import dp_accounting

    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(SIGMA), RELEASES))
    return acc.get_epsilon(DELTA)


CANDIDATES = [
    ("gdp certified (ours, scalar)", ours_certified),
    ("gdp certified (ours, 10^6-array)", ours_certified_array),
    ("discrete Gaussian lattice (ours)", ours_discrete),
    ("dp_accounting PLDAccountant [baseline]", dp_accounting_pld),
    ("dp_accounting RdpAccountant", dp_accounting_rdp),
]
BASELINE = "dp_accounting PLDAccountant [baseline]"


def _time(fn, repeats: int) -> tuple[float, float]:
    fn()  # warm-up (imports, caches)
    times = []
    value = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), value


def main(repeats: int = 7) -> dict:
    from dprag.accounting.gdp import epsilon_for_delta

    exact = epsilon_for_delta(math.sqrt(RELEASES) / SIGMA, DELTA)
    rows = {name: _time(fn, repeats) for name, fn in CANDIDATES}
    base_t = rows[BASELINE][0]
    print(
        f"certified epsilon of {RELEASES:,} Gaussian releases, sigma={SIGMA:.2f}, delta={DELTA:g}; "
        f"exact eps = {exact:.12f}"
    )
    print(f"{'method':<42}{'median time':>14}{'baseline/this':>15}{'epsilon':>20}{'eps - exact':>14}")
    for name, (t, eps) in rows.items():
        print(f"{name:<42}{t * 1e3:>11.3f} ms{base_t / t:>14.1f}x{eps:>20.12f}{eps - exact:>14.2e}")
    return {name: {"seconds": t, "epsilon": eps} for name, (t, eps) in rows.items()}


# pytest-benchmark entry points (side by side in one run; no absolute-time assertions)
def test_bench_gdp_certified(benchmark):
    eps = benchmark(ours_certified)
    assert eps >= 1.19


def test_bench_gdp_certified_array(benchmark):
    benchmark(ours_certified_array)


def test_bench_discrete_lattice(benchmark):
    benchmark(ours_discrete)


def test_bench_dp_accounting_pld(benchmark):
    benchmark(dp_accounting_pld)


def test_bench_dp_accounting_rdp(benchmark):
    benchmark(dp_accounting_rdp)


if __name__ == "__main__":
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
