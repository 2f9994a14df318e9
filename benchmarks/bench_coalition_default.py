"""The coalition estimator at the auditor's defaults: time and peak memory (spec/estimator.md §8).

    python benchmarks/bench_coalition_default.py [--sizes 10000 100000] [--thetas 0.9 0.01] [--dim 384]

Each (n, θ) runs in a fresh subprocess and reports wall time of ``coalition_size`` (θ, window =
``DEFAULT_WINDOW``, i.e. every pair of the audit window when it fits the budget) and the subprocess's peak
RSS (``ru_maxrss``, including the synthetic input's generation) and the CPU seconds of all its threads
(``process_time``; on a loaded machine CPU-seconds / cores estimates the idle wall time). Input: int16-quantised 384-d
embeddings as the verifier sees them (synthetic traffic of ``bench_estimator.synthetic``: n/20 intents, sibling cosine ≈
0.84, one account per 100 queries), gapped ledger positions (every 10th entry a recovery leaf).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def one(n: int, theta: float, dim: int) -> dict:
    from bench_estimator import synthetic

    from dprag.audit.verify.estimator import DEFAULT_WINDOW, coalition_size, resolve_window

    x, accounts = synthetic(n, dim)
    q = np.rint(x * 16384).astype(np.int16)
    del x
    pos = np.arange(n) + np.arange(n) // 10
    w = resolve_window(DEFAULT_WINDOW, pos, dim)
    t0, c0 = time.perf_counter(), time.process_time()
    c = coalition_size(q, accounts, theta, DEFAULT_WINDOW, positions=pos)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "n": n,
        "theta": theta,
        "window": w,
        "c_hat": c,
        "seconds": round(dt, 2),
        "cpu_seconds": round(cpu, 1),
        "peak_rss_mib": round(rss1 / 1024),
        "accounts": len(set(accounts)),
        "load": round(os.getloadavg()[0], 1),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--thetas", type=float, nargs="*", default=[0.9, 0.01])
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(one(int(a.one[0]), float(a.one[1]), int(a.one[2]))))
        return
    print("| n | θ | window | ĉ | wall s | CPU s (all threads) | peak RSS (MiB) | load |")
    print("|---|---|---|---|---|---|---|---|")
    for n in a.sizes:
        for th in a.thetas:
            out = subprocess.run(
                [sys.executable, __file__, "--one", str(n), str(th), str(a.dim)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(
                f"| {r['n']} | {r['theta']} | {r['window']} (all) | {r['c_hat']} | {r['seconds']} | "
                f"{r['cpu_seconds']} | {r['peak_rss_mib']} | {r['load']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
