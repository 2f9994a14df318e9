"""Ledger benchmark: durable appends and proof latency, ours vs pymerkle, side by side in one run.

Baseline: pymerkle 7 ``SqliteTree`` (GPLv3+; imported here only as a baseline, never by dprag), default
settings, i.e. SQLite rollback journal, ``synchronous=FULL``, one transaction per ``append_entry``.

Part 1 (durable appends/s, same directory, same disk, 64-byte records; rounds interleave the contenders so
that disk noise from other processes hits all of them alike; medians over rounds):
    pymerkle.append_entry            one durable transaction per record                     (the baseline)
    pymerkle.append_entries(1000)    one transaction per 1000 records (pymerkle's own bulk API)
    ours.append                      one durable WAL transaction per record, one thread
    ours.append x 8 / 32 threads     single appends from 8 / 32 threads, group-committed
    ours.append_many(1000)           one durable transaction per 1000 records
Durable = the call returns after the commit is fsynced (synchronous=FULL for both).

Part 2 (latency at 10^5 and 10^6 leaves): ours ``inclusion_proof`` / ``consistency_proof`` / ``root(size)``
from the SQLite store, pure ``verify_inclusion``, and pymerkle ``SqliteTree.prove_inclusion`` as baseline.

Usage: python benchmarks/bench_ledger.py [--dir DIR] [--rounds 3] [--seconds 1.5] [--max-leaves 1000000]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pymerkle  # noqa: E402  (baseline only)

from dprag.audit.protocol.ledger import SqliteLog, verify_inclusion  # noqa: E402

RECORD = 64


def records(n: int, rng: random.Random) -> list[bytes]:
    return [rng.randbytes(RECORD) for _ in range(n)]


def timed_loop(seconds: float, step) -> float:
    """Run ``step()`` (returns #records appended) until ``seconds`` elapse; return records/s."""
    done = 0
    t0 = time.perf_counter()
    while True:
        done += step()
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return done / dt


def bench_appends(base: Path, rounds: int, seconds: float) -> dict[str, float]:
    rng = random.Random(1)
    pool = records(20000, rng)
    results: dict[str, list[float]] = {}

    def run(name, fn):
        d = Path(tempfile.mkdtemp(dir=base))
        try:
            results.setdefault(name, []).append(fn(d))
        finally:
            shutil.rmtree(d)

    def pm_single(d):
        tree = pymerkle.SqliteTree(str(d / "p.db"))
        it = iter(pool * 1000)
        rate = timed_loop(seconds, lambda: (tree.append_entry(next(it)), 1)[1])
        tree.close()
        return rate

    def pm_batch(d):
        tree = pymerkle.SqliteTree(str(d / "p.db"))
        rate = timed_loop(seconds, lambda: (tree.append_entries(pool[:1000]), 1000)[1])
        tree.close()
        return rate

    def ours_single(d):
        with SqliteLog(d / "o.db") as log:
            it = iter(pool * 1000)
            return timed_loop(seconds, lambda: (log.append(next(it)), 1)[1])

    def ours_threads(nthreads):
        def run_threads(d):
            with SqliteLog(d / "o.db") as log:
                stop = time.perf_counter() + seconds
                counts = [0] * nthreads

                def worker(t):
                    i = t
                    while time.perf_counter() < stop:
                        log.append(pool[i % len(pool)])
                        counts[t] += 1
                        i += nthreads

                t0 = time.perf_counter()
                ths = [threading.Thread(target=worker, args=(t,)) for t in range(nthreads)]
                for th in ths:
                    th.start()
                for th in ths:
                    th.join()
                return sum(counts) / (time.perf_counter() - t0)

        return run_threads

    def ours_batch(d):
        with SqliteLog(d / "o.db") as log:
            return timed_loop(seconds, lambda: (log.append_many(pool[:1000]), 1000)[1])

    contenders = [
        ("pymerkle.append_entry", pm_single),
        ("ours.append", ours_single),
        ("ours.append x 8 threads", ours_threads(8)),
        ("ours.append x 32 threads", ours_threads(32)),
        ("ours.append_many(1000)", ours_batch),
        ("pymerkle.append_entries(1000)", pm_batch),
    ]
    for r in range(rounds):
        order = contenders if r % 2 == 0 else contenders[::-1]
        for name, fn in order:
            run(name, fn)
    return {name: statistics.median(v) for name, v in results.items()}


def quantiles(ts: list[float]) -> tuple[float, float, float]:
    ts = sorted(ts)
    return statistics.fmean(ts) * 1e6, ts[len(ts) // 2] * 1e6, ts[min(len(ts) - 1, int(0.99 * len(ts)))] * 1e6


def bench_proofs(base: Path, max_leaves: int) -> list[tuple]:
    rng = random.Random(2)
    d = Path(tempfile.mkdtemp(dir=base))
    rows = []
    try:
        ours = SqliteLog(d / "o.db")
        ref = pymerkle.SqliteTree(str(d / "p.db"))
        sizes = [s for s in (10**5, 10**6) if s <= max_leaves]
        chunk = 100_000
        t0 = time.perf_counter()
        for _lo in range(0, sizes[-1], chunk):
            batch = records(chunk, rng)
            ours.append_many(batch)
            ref.append_entries(batch)
        print(f"  built both logs with {sizes[-1]:,} leaves in {time.perf_counter() - t0:.1f}s", flush=True)
        for size in sizes:
            k = 3000
            idx = [rng.randrange(size) for _ in range(k)]
            ts, proofs = [], []
            for i in idx:
                t = time.perf_counter()
                proofs.append(ours.inclusion_proof(i, size))
                ts.append(time.perf_counter() - t)
            rows.append(("ours.inclusion_proof", size, *quantiles(ts)))
            root = ours.root(size)
            lh = [ours.leaf_hash(i) for i in idx]
            ts = []
            for p, h in zip(proofs, lh, strict=False):
                t = time.perf_counter()
                verify_inclusion(p.leaf_index, p.tree_size, h, p.hashes, root)
                ts.append(time.perf_counter() - t)
            rows.append(("verify_inclusion (pure)", size, *quantiles(ts)))
            ts = []
            for _ in range(k):
                m = rng.randrange(1, size)
                t = time.perf_counter()
                ours.consistency_proof(m, size)
                ts.append(time.perf_counter() - t)
            rows.append(("ours.consistency_proof", size, *quantiles(ts)))
            ts = []
            for _ in range(k):
                m = rng.randrange(1, size)
                t = time.perf_counter()
                ours.root(m)
                ts.append(time.perf_counter() - t)
            rows.append(("ours.root(past size)", size, *quantiles(ts)))
            ref.prove_inclusion(1, size)  # let pymerkle warm its subroot cache first (not timed)
            ts = []
            for _ in range(200):
                i = rng.randrange(size)
                t = time.perf_counter()
                ref.prove_inclusion(i + 1, size)
                ts.append(time.perf_counter() - t)
            rows.append(("pymerkle.prove_inclusion", size, *quantiles(ts)))
        ours.close()
        ref.close()
    finally:
        shutil.rmtree(d)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="directory on the disk to measure (default: system temp dir)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.5, help="seconds per contender per round")
    ap.add_argument("--max-leaves", type=int, default=10**6)
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="bench_ledger_", dir=args.dir))
    try:
        print(f"disk: {base} | pymerkle {pymerkle.__version__} | python {sys.version.split()[0]}")
        print(f"\nPart 1: durable appends of {RECORD}-byte records, median of {args.rounds} interleaved rounds")
        rates = bench_appends(base, args.rounds, args.seconds)
        baseline = rates["pymerkle.append_entry"]
        print(f"  {'contender':34s} {'records/s':>12s} {'x pymerkle.append_entry':>24s}")
        for name, rate in rates.items():
            print(f"  {name:34s} {rate:12,.0f} {rate / baseline:23.1f}x")
        best = max(rates["ours.append_many(1000)"], rates["ours.append x 32 threads"])
        print(
            f"  goal >= 20x pymerkle.append_entry: {'MET' if best >= 20 * baseline else 'NOT MET'} "
            f"(best group-committed path {best / baseline:.1f}x; single-record path "
            f"{rates['ours.append'] / baseline:.1f}x)"
        )
        print("\nPart 2: proof latency (microseconds: mean / median / p99)")
        for name, size, mean, med, p99 in bench_proofs(base, args.max_leaves):
            print(f"  {name:28s} n={size:>9,}  {mean:9.1f} {med:9.1f} {p99:9.1f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
