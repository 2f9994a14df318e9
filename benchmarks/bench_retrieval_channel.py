"""Retrieval channel per query: committed-seed discrete Gaussian noise + noise-then-select top-K.

Baseline (the floor named in the issue): numpy float Gaussian noise + top-K over the same scores (not a
secure sampler; shown only for the ratio). Both run side by side in one process; the ratio is printed.

    python benchmarks/bench_retrieval_channel.py [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from dprag.audit.retrieval import noise_table, noisy_top_k, request_label, retrieval_noise


def _time(fn, repeats):
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--sigma", type=float, default=5000.0)
    args = ap.parse_args()
    table = noise_table(args.sigma, 9.5, 64)
    seed = bytes(range(32))
    rng = np.random.default_rng(0)
    print(f"sigma={args.sigma} table entries={2 * table.support_bound + 1} tv<={table.tv_distance:.2e}")
    print(f"{'N':>9} {'ours ms':>9} {'float floor ms':>15} {'ratio':>6}")
    for n in (10**5, 10**6):
        scores = rng.integers(0, 1024, n)
        label = request_label("retrieval", bytes(32))

        def ours():
            noisy_top_k(scores, retrieval_noise(seed, label, n, table), 10)

        def floor():
            x = scores + rng.normal(0.0, args.sigma, n)
            np.argpartition(-x, 9)[:10]

        a, b = _time(ours, args.repeats), _time(floor, args.repeats)
        print(f"{n:>9} {a * 1e3:>9.1f} {b * 1e3:>15.1f} {a / b:>6.1f}")


if __name__ == "__main__":
    main()
