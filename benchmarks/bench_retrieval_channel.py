"""Retrieval channel per query: committed-seed discrete Gaussian noise + noise-then-select top-K.

Baseline (the floor named in the issue): numpy float Gaussian noise + top-K over the same scores (not a
secure sampler; shown only for the ratio). Side by side in one process, interleaved repeat by repeat (so
load changes hit both alike); medians and their ratio are printed, with the load average.

- ``ours``: what the verifier runs (``noisy_top_k_words``): every word of the committed-seed stream drawn
  (SHAKE-256), the selection mapping only the words that can reach the top K; bit-identical to ``plain``;
- ``plain``: ``table.sample`` over every word, then ``noisy_top_k`` (the reference path);
- ``shake``: drawing the words alone (the part no implementation of the protocol can skip).

    python benchmarks/bench_retrieval_channel.py [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from dprag.accounting.noise.source import RandomSource
from dprag.audit.protocol.retrieval import noise_table, noisy_top_k, noisy_top_k_words, retrieval_label, retrieval_noise


def _times(fns, repeats):
    out = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            out[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--sigma", type=float, default=5000.0)
    args = ap.parse_args()
    table = noise_table(args.sigma, 9.5, 64)
    seed = bytes(range(32))
    rng = np.random.default_rng(0)
    print(f"sigma={args.sigma} table entries={2 * table.support_bound + 1} tv<={table.tv_distance:.2e}")
    print(f"load average {open('/proc/loadavg').read().split()[0]} on {os.cpu_count()} cores")
    print(
        f"{'N':>9} {'ours ms':>9} {'plain ms':>9} {'shake ms':>9} {'float floor ms':>15} {'ours/floor':>10} "
        f"{'plain/floor':>11}"
    )
    for n in (10**5, 10**6):
        scores = rng.integers(0, 1024, n)
        label = retrieval_label("t", bytes(32))
        check = noisy_top_k(scores, retrieval_noise(seed, label, n, table), 10)
        if not np.array_equal(
            check,
            noisy_top_k_words(scores, RandomSource.from_seed(seed, label).uint64(n), table, 10, score_range=(0, 1023)),
        ):
            raise SystemExit("MISMATCH: the fast selection differs from the plain one")

        def ours(scores=scores, label=label, n=n):
            noisy_top_k_words(scores, RandomSource.from_seed(seed, label).uint64(n), table, 10, score_range=(0, 1023))

        def plain(scores=scores, label=label, n=n):
            noisy_top_k(scores, retrieval_noise(seed, label, n, table), 10)

        def shake(label=label, n=n):
            RandomSource.from_seed(seed, label).uint64(n)

        def floor(scores=scores, n=n):
            x = scores + rng.normal(0.0, args.sigma, n)
            np.argpartition(-x, 9)[:10]

        t = _times({"ours": ours, "plain": plain, "shake": shake, "floor": floor}, args.repeats)
        print(
            f"{n:>9} {t['ours'] * 1e3:>9.1f} {t['plain'] * 1e3:>9.1f} {t['shake'] * 1e3:>9.1f} "
            f"{t['floor'] * 1e3:>15.1f} {t['ours'] / t['floor']:>10.2f} {t['plain'] / t['floor']:>11.2f}"
            f"   (load {open('/proc/loadavg').read().split()[0]})"
        )


if __name__ == "__main__":
    main()
