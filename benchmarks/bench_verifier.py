"""Verifier scale (issue 9): a window of N queries over a 10^3-document tenant, with N receipts, verified
in full mode; per check the wall seconds (the verdict's ``seconds``) and the CPU seconds (this process and
its forked workers), total wall and CPU time, peak memory: the verifier's own peak RSS (VmHWM) and its
largest worker's (which shares the verifier's pages copy-on-write), and the load average before and after.

There is no second verifier to run side by side; the goal is absolute on this machine (≤ 90 s and ≤ 2 GiB
at N = 10^5), so this script prints the figures and the goal beside them, and asserts nothing. On a shared
machine the wall time follows the load; the CPU time does not (much): read both.

    python benchmarks/bench_verifier.py [--queries 10000,100000] [--docs 1000] [--dim 384]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import json, os, resource, sys, time
from dprag.audit.verifier import verify
load0 = os.getloadavg()
t, c = time.perf_counter(), time.process_time()
v = verify(sys.argv[1], receipts=sys.argv[2])
wall, cpu = time.perf_counter() - t, time.process_time() - c
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
hwm = [int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM")][0] / 1024
print(json.dumps({"verdict": v.verdict, "reasons": v.reasons[:3], "wall": wall, "cpu": cpu + ch.ru_utime + ch.ru_stime,
                  "seconds": v.to_json()["seconds"], "cpu_seconds": v.cpu_seconds, "rss_mib": hwm,
                  "worker_rss_mib": ch.ru_maxrss / 1024, "load": [load0, os.getloadavg()]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", default="10000,100000")
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--keep", type=Path, default=None, help="directory to write the bundles in (default: temp)")
    ap.add_argument("--reuse", action="store_true", help="verify the bundles already in --keep (same N, docs, dim)")
    args = ap.parse_args()
    from dprag.audit.testing.bulk import bulk_window

    root = args.keep or Path(tempfile.mkdtemp(prefix="dprag-bench-verifier-"))
    for n in (int(x) for x in args.queries.split(",")):
        t = time.perf_counter()
        bundle, receipts = root / f"n{n}" / "bundle", root / f"n{n}" / "receipts.jsonl"
        if not (args.reuse and bundle.is_dir() and receipts.is_file()):
            bundle, receipts = bulk_window(root / f"n{n}", n_queries=n, n_docs=args.docs, dim=args.dim,
                                           accounts=max(1, n // 100))
        gen = time.perf_counter() - t
        out = subprocess.run([sys.executable, "-c", CHILD, str(bundle), str(receipts)], capture_output=True,
                             text=True, check=True)
        r = json.loads(out.stdout)
        print(f"N = {n:>7} queries, {args.docs} documents, d = {args.dim}, {n} receipts "
              f"(window written in {gen:.0f} s)")
        la, lb = r["load"]
        print(f"  verdict {r['verdict']} {r['reasons']}; wall {r['wall']:.1f} s (goal ≤ 90 s at 10^5), CPU "
              f"{r['cpu']:.1f} s; peak RSS {r['rss_mib']:.0f} MiB (goal ≤ 2048), largest worker {r['worker_rss_mib']:.0f} "
              f"MiB (shared pages included); load average {la[0]:.1f} before, {lb[0]:.1f} after, on "
              f"{os.cpu_count()} cores")
        print(f"    {'step':<12} {'wall s':>8} {'µs/query':>9} {'CPU s':>8} {'µs/query':>9}")
        for k, v in sorted(r["seconds"].items(), key=lambda kv: -kv[1]):
            c = r["cpu_seconds"].get(k)
            cs = f"{c:8.2f} {1e6 * c / n:9.1f}" if c is not None else f"{'-':>8} {'-':>9}"
            print(f"    {k:<12} {v:8.2f} {1e6 * v / n:9.1f} {cs}")


if __name__ == "__main__":
    main()
