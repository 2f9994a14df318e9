"""Verifier scale (issue 9): a window of N queries over a 10^3-document tenant, with N receipts, verified
in full mode; seconds per check (the verdict's ``seconds``), total wall time and peak memory (RSS).

There is no second verifier to run side by side; the goal is absolute on this machine (≤ 90 s and ≤ 2 GiB
at N = 10^5), so this script prints the figures and the goal beside them, and asserts nothing.

    python benchmarks/bench_verifier.py [--queries 10000,100000] [--docs 1000] [--dim 384]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import json, resource, sys, time
from dprag.audit.verifier import verify
t = time.perf_counter()
v = verify(sys.argv[1], receipts=sys.argv[2])
wall = time.perf_counter() - t
print(json.dumps({"verdict": v.verdict, "reasons": v.reasons[:3], "wall": wall, "seconds": v.to_json()["seconds"],
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", default="10000,100000")
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--keep", type=Path, default=None, help="directory to write the bundles in (default: temp)")
    args = ap.parse_args()
    from dprag.audit.testing.bulk import bulk_window

    root = args.keep or Path(tempfile.mkdtemp(prefix="dprag-bench-verifier-"))
    for n in (int(x) for x in args.queries.split(",")):
        t = time.perf_counter()
        bundle, receipts = bulk_window(root / f"n{n}", n_queries=n, n_docs=args.docs, dim=args.dim,
                                       accounts=max(1, n // 100))
        gen = time.perf_counter() - t
        out = subprocess.run([sys.executable, "-c", CHILD, str(bundle), str(receipts)], capture_output=True,
                             text=True, check=True)
        r = json.loads(out.stdout)
        print(f"N = {n:>7} queries, {args.docs} documents, d = {args.dim}, {n} receipts "
              f"(window written in {gen:.0f} s)")
        print(f"  verdict {r['verdict']} {r['reasons']}; wall {r['wall']:.1f} s (goal ≤ 90 s at 10^5); "
              f"peak RSS {r['rss_mib']:.0f} MiB (goal ≤ 2048)")
        for k, v in sorted(r["seconds"].items(), key=lambda kv: -kv[1]):
            print(f"    {k:<12} {v:8.2f} s   {1e6 * v / n:8.1f} µs/query")


if __name__ == "__main__":
    main()
