"""The coalition scan with and without its sketch filter (spec/estimator.md §10), side by side in one run.

    python benchmarks/bench_coalition_sketch.py [--sizes 20000 60000] [--data random intents] [--out FILE.json]

Baseline: the same exact scan (``stream_components``, whole log, θ = 0.95) comparing the float32 rows themselves
(``sketch=False``). Arms alternate per (size, data), each in a fresh subprocess (CPU seconds of all threads,
``process_time``, and ``ru_maxrss``); the sketch arm's time includes computing the sketch. Both arms' component
labels are compared (they must be equal). Data: int16-quantised 384-d rows as the verifier sees them —
``random`` (the rows of ``tests.support.bulk``: Gaussian directions) and ``intents`` (``bench_estimator.synthetic``:
n/20 intents, siblings at cosine ≈ 0.84, 2 % of the rows near-duplicates at cosine 0.95-0.99 of an earlier row).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def rows(n: int, data: str, dim: int = 384) -> np.ndarray:
    rng = np.random.default_rng(7)
    if data == "random":
        x = rng.standard_normal((n, dim))
    else:
        from bench_estimator import synthetic

        x = synthetic(n, dim)[0].astype(np.float64)
    for k in rng.choice(np.arange(1, n), n // 50, replace=False):  # planted near-duplicates: real links
        j = int(rng.integers(0, k))
        e = rng.standard_normal(dim)
        b = x[j] / np.linalg.norm(x[j])
        e -= (e @ b) * b
        t = rng.uniform(0.95, 0.99)
        x[k] = t * b + np.sqrt(1 - t * t) * e / np.linalg.norm(e)
    x /= np.abs(x).max(axis=1, keepdims=True)
    return np.rint(x * 32767).astype("<i2")


def one(n: int, data: str, sketch: bool) -> dict:
    from dprag.audit.verify.estimator import DEFAULT_THETA, stream_components

    raw = rows(n, data)
    codes = np.arange(n, dtype=np.int64) % max(2, n // 100)
    pos = np.arange(n, dtype=np.int64)
    c0, t0 = time.process_time(), time.perf_counter()
    labels, c_hat = stream_components(
        raw, codes, max(2, n // 100), np.asarray([DEFAULT_THETA]), n, pos, saturate=False, sketch=sketch
    )
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    lab = np.unique(labels[0], return_inverse=True)[1].astype(np.int64)
    return {
        "n": n,
        "data": data,
        "sketch": sketch,
        "cpu_seconds": round(cpu, 3),
        "wall_seconds": round(wall, 3),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "c_hat": int(c_hat[0]),
        "components": int(lab.max()) + 1,
        "labels_sha256": hashlib.sha256(lab.tobytes()).hexdigest(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[20000, 60000])
    ap.add_argument("--data", nargs="+", default=["random", "intents"], choices=["random", "intents"])
    ap.add_argument("--out", default=None)
    ap.add_argument("--one", nargs=3, metavar=("N", "DATA", "SKETCH"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(int(a.one[0]), a.one[1], a.one[2] == "on")))
        return
    out = []
    for n in a.sizes:
        for data in a.data:
            arms = {}
            for arm in ("off", "on"):
                p = subprocess.run(
                    [sys.executable, __file__, "--one", str(n), data, arm], capture_output=True, text=True, check=True
                )
                arms[arm] = json.loads(p.stdout.strip().splitlines()[-1])
            same = arms["on"]["labels_sha256"] == arms["off"]["labels_sha256"]
            ratio = arms["off"]["cpu_seconds"] / max(arms["on"]["cpu_seconds"], 1e-9)
            row = {
                "n": n,
                "data": data,
                "off": arms["off"],
                "on": arms["on"],
                "same_labels": same,
                "cpu_speedup": round(ratio, 2),
                "load": os.getloadavg()[0],
            }
            out.append(row)
            print(
                f"n={n} {data}: off {arms['off']['cpu_seconds']} CPU s, on {arms['on']['cpu_seconds']} CPU s "
                f"({ratio:.2f}x), RSS {arms['off']['peak_rss_mib']} / {arms['on']['peak_rss_mib']} MiB, "
                f"c_hat {arms['off']['c_hat']}/{arms['on']['c_hat']}, same labels: {same}",
                flush=True,
            )
            if not same:
                raise SystemExit("the sketch changed the components")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
