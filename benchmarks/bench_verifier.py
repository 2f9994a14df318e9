"""Verifier scale (spec/protocol.md §8 item 13): a window of N queries over a 10^3-document tenant, with N
receipts, verified
in full mode; per check the wall seconds (the verdict's ``seconds``) and the CPU seconds (this process and
its workers), total wall and CPU time, peak memory: the verifier's own peak RSS (VmHWM) and its largest
child's (not additive: a forked child's RSS counts the pages it shares with the verifier, and Linux carries
a child's peak over exec), and the load average before and after.
``--pss``: also sample the proportional set size (PSS, /proc/<pid>/smaps_rollup: a page shared by k processes
counts 1/k in each) of the verifier and every descendant (forked workers, background processes) every
``--pss-interval`` seconds, and print the peak of the sum — the memory the whole verification holds, each
page once — with the verifier's and the other processes' shares at that peak; ``--pss-trace FILE`` writes
every sample (seconds, processes, verifier PSS, others' PSS, sum; MiB; the last step that reported progress
before the sample, i.e. roughly the step under way is the one after it) as CSV.

There is no second verifier to run side by side; the goal is absolute on this machine (≤ 90 s and ≤ 2 GiB
at N = 10^5), so this script prints the figures and the goal beside them, and asserts nothing. On a shared
machine the wall time follows the load; the CPU time does not (much): read both.

    python benchmarks/bench_verifier.py [--queries 10000,100000] [--docs 1000] [--dim 384] [--keep DIR --reuse]
        [--pss [--pss-interval 0.2] [--pss-trace FILE]] [--incremental NEW] [--dask 1,2]

``--incremental NEW`` (spec/protocol.md §8 item 14): a window of N + NEW queries; the auditor's state is made by a
run over the first N (a bundle cut at N), then the bundle cut since N (NEW queries, their receipts) is verified from
that state; printed beside the full run over all N + NEW, in the same invocation: the ratio of their wall and CPU
times (goal ≤ 5 %) and whether the two verdicts are the same (verdict, ε, δ, counts).

``--dask 1,2``: the same bundle also verified on a Dask LocalCluster of each number of worker processes (started
and stopped by the verifier, counted in its time), beside the local run: wall and CPU (this process and its
children; the cluster's workers are its children) and whether the verdict is the same.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CHILD = """
import json, os, resource, sys, time
from dprag.audit.verify import verify
load0 = os.getloadavg()
t, c = time.perf_counter(), time.process_time()
marks = [(time.monotonic(), "start")]
def progress(step, n):
    if marks[-1][1] != step:
        marks.append((time.monotonic(), step))
state = {"state": sys.argv[3], "state_key": sys.argv[4]} if len(sys.argv) > 3 else {}
dask = int(os.environ["DPRAG_BENCH_DASK"]) if os.environ.get("DPRAG_BENCH_DASK") else None
v = verify(sys.argv[1], receipts=sys.argv[2], progress=progress, dask=dask, **state)
wall, cpu = time.perf_counter() - t, time.process_time() - c
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
hwm = [int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM")][0] / 1024
print(json.dumps({"verdict": v.verdict, "reasons": v.reasons[:3], "wall": wall, "epsilon": v.epsilon,
                  "delta": v.delta, "checked": {k: int(x) for k, x in v.checked.items()},
                  "cpu": cpu + ch.ru_utime + ch.ru_stime,
                  "seconds": v.to_json()["seconds"], "cpu_seconds": v.cpu_seconds, "rss_mib": hwm,
                  "worker_rss_mib": ch.ru_maxrss / 1024, "load": [load0, os.getloadavg()],
                  "marks": marks}))
"""


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
    except OSError:  # the process ended meanwhile
        pass
    return out


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _after(marks: list, t: float) -> str:
    return ([m[1] for m in marks if m[0] <= t] or ["-"])[-1]


class PssSampler:
    """Every ``interval`` s: the PSS of process ``root`` and of all its descendants (walked through
    /proc/<pid>/task/*/children); keeps every sample and the one with the largest sum."""

    def __init__(self, root: int, interval: float):
        self.root, self.interval = root, interval
        self.samples: list[tuple[float, int, int, int]] = []  # (monotonic s, processes, root KiB, others KiB)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.t0 = time.monotonic()
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            tree, todo = [], [self.root]
            while todo:
                p = todo.pop()
                tree.append(p)
                todo.extend(_children(p))
            root = _pss_kib(self.root)
            others = sum(_pss_kib(p) for p in tree[1:])
            self.samples.append((time.monotonic(), len(tree), root, others))
            self.stop.wait(self.interval)

    def finish(self) -> dict:
        self.stop.set()
        self.thread.join()
        if not self.samples:
            return {}
        t, n, root, others = max(self.samples, key=lambda x: x[2] + x[3])
        return {
            "peak_mib": (root + others) / 1024,
            "at_s": t - self.t0,
            "at": t,
            "processes": n,
            "verifier_mib": root / 1024,
            "others_mib": others / 1024,
            "verifier_peak_mib": max(x[2] for x in self.samples) / 1024,
            "samples": len(self.samples),
        }

    def write(self, path: Path, marks: list) -> None:
        """``marks``: (monotonic s, step) when the verifier first reported progress of a step."""
        with open(path, "w") as f:
            f.write("seconds,processes,verifier_mib,others_mib,sum_mib,after_step\n")
            for t, n, root, others in self.samples:
                step = ([m[1] for m in marks if m[0] <= t] or ["-"])[-1]
                f.write(
                    f"{t - self.t0:.2f},{n},{root / 1024:.1f},{others / 1024:.1f},{(root + others) / 1024:.1f},{step}\n"
                )


def _child(bundle: Path, receipts: Path, args, *state: Path) -> tuple[dict, dict | None, PssSampler | None]:
    """One verification in a fresh process: its figures, and the PSS peak and sampler with ``--pss``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(bundle), str(receipts), *map(str, state)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sampler = PssSampler(proc.pid, args.pss_interval) if args.pss else None
    stdout, stderr = proc.communicate()
    pss = sampler.finish() if sampler else None
    if proc.returncode != 0:
        sys.stderr.write(stderr)
        raise SystemExit(f"the verifier exited with {proc.returncode}")
    return json.loads(stdout), pss, sampler


def _incremental(d: Path, bundle: Path, receipts: Path, n: int, new: int, whole: dict, args) -> None:
    """The state made over the first N queries, then the NEW ones verified from it; printed against ``whole``."""
    from dprag.audit.protocol.encoding import decode
    from dprag.audit.testing.cut import cut_bundle

    cut = n + 1  # genesis, then N queries
    lines = [x for x in receipts.read_bytes().splitlines() if x]
    split = {True: [], False: []}
    for x in lines:
        split[decode(x)["receipt"]["size"] <= cut].append(x)
    for name, part in (("head", split[True]), ("tail", split[False])):
        (d / f"receipts-{name}.jsonl").write_bytes(b"".join(x + b"\n" for x in part))
    head = cut_bundle(bundle, d / "bundle-head", 0, cut, None)  # nothing to sign: the checkpoints are there
    tail = cut_bundle(bundle, d / "bundle-tail", cut, cut + new, None)
    state, key = d / "state", d / "state.key"
    for p in (state, key):
        p.unlink(missing_ok=True)
    t = time.perf_counter()
    made, _, _ = _child(head, d / "receipts-head.jsonl", args, state, key)
    t_made = time.perf_counter() - t
    inc, pss, _ = _child(tail, d / "receipts-tail.jsonl", args, state, key)
    same = all(inc[k] == whole[k] for k in ("verdict", "epsilon", "delta", "checked"))
    print(
        f"  incremental: state over N = {n} made in {t_made:.1f} s ({made['verdict']}); {new} new queries verified "
        f"from it: wall {inc['wall']:.2f} s, CPU {inc['cpu']:.2f} s = {100 * inc['wall'] / whole['wall']:.2f} % "
        f"(wall) and {100 * inc['cpu'] / whole['cpu']:.2f} % (CPU) of the full run over all {n + new} (goal ≤ 5 %); "
        f"state {state.stat().st_size / 2**20:.0f} MiB; verdict {inc['verdict']} "
        f"{'the same as' if same else 'DIFFERS from'} the full run's (verdict, ε, δ, counts)"
        + (f"; peak PSS {pss['peak_mib']:.0f} MiB" if pss else "")
    )
    if not same:
        diff = {
            k: (whole["checked"].get(k), inc["checked"].get(k)) for k in set(whole["checked"]) | set(inc["checked"])
        }
        print(f"    counts that differ (full, incremental): { {k: v for k, v in diff.items() if v[0] != v[1]} }")


def _on_dask(bundle: Path, receipts: Path, k: int, local: dict, args) -> None:
    os.environ["DPRAG_BENCH_DASK"] = str(k)
    try:
        r, pss, _ = _child(bundle, receipts, args)
    finally:
        del os.environ["DPRAG_BENCH_DASK"]
    same = all(r[x] == local[x] for x in ("verdict", "epsilon", "delta", "checked"))
    top = sorted(r["seconds"].items(), key=lambda kv: -kv[1])[:4]
    print(
        f"  Dask LocalCluster of {k} worker(s): wall {r['wall']:.1f} s ({r['wall'] / local['wall']:.2f}x the local "
        f"run), CPU {r['cpu']:.1f} s; verdict {'the same' if same else 'DIFFERS'}; slowest steps "
        + ", ".join(f"{a} {b:.1f} s" for a, b in top)
        + (
            f"; peak PSS {pss['peak_mib']:.0f} MiB at {pss['at_s']:.0f} s (verifier and its scheduler "
            f"{pss['verifier_mib']:.0f} + workers {pss['others_mib']:.0f}, after step {_after(r['marks'], pss['at'])})"
            if pss
            else ""
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", default="10000,100000")
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--keep", type=Path, default=None, help="directory to write the bundles in (default: temp)")
    ap.add_argument("--reuse", action="store_true", help="verify the bundles already in --keep (same N, docs, dim)")
    ap.add_argument("--pss", action="store_true", help="sample the summed PSS of the verifier and its descendants")
    ap.add_argument("--pss-interval", type=float, default=0.2, help="seconds between PSS samples (default 0.2)")
    ap.add_argument(
        "--pss-trace",
        type=Path,
        default=None,
        help="CSV of every PSS sample (with --pss; N appended to the name when several N are given)",
    )
    ap.add_argument("--incremental", type=int, default=0, metavar="NEW", help="verify NEW more queries from a state")
    ap.add_argument("--dask", default="", metavar="N,...", help="also verify on LocalClusters of these worker counts")
    args = ap.parse_args()
    if args.pss_interval <= 0:
        print("bench_verifier.py: --pss-interval must be > 0", file=sys.stderr)
        sys.exit(2)
    if args.pss and not os.path.exists(f"/proc/{os.getpid()}/smaps_rollup"):
        print("bench_verifier.py: --pss needs /proc/<pid>/smaps_rollup (Linux >= 4.14)", file=sys.stderr)
        sys.exit(2)
    from tests.support.bulk import bulk_window

    root = args.keep or Path(tempfile.mkdtemp(prefix="dprag-bench-verifier-"))
    for n in (int(x) for x in args.queries.split(",")):
        t = time.perf_counter()
        bundle, receipts = root / f"n{n}" / "bundle", root / f"n{n}" / "receipts.jsonl"
        new = args.incremental
        if not (args.reuse and bundle.is_dir() and receipts.is_file()):
            bundle, receipts = bulk_window(
                root / f"n{n}",
                n_queries=n + new,
                n_docs=args.docs,
                dim=args.dim,
                accounts=max(1, (n + new) // 100),
                checkpoints_at=(n + 1,) if new else (),  # leaf 0 is genesis: N queries end at size N + 1
            )
        gen = time.perf_counter() - t
        r, pss, sampler = _child(bundle, receipts, args)
        print(  # at once: the runs below (--incremental, --dask) may take as long again
            f"  full run over N + NEW = {n + new}: verdict {r['verdict']}, wall {r['wall']:.1f} s, CPU {r['cpu']:.1f} s"
            + (f", peak PSS {pss['peak_mib']:.0f} MiB" if pss else "")
            + f" (window written in {gen:.0f} s); CPU by step "
            + json.dumps({k: round(v, 1) for k, v in r["cpu_seconds"].items()}),
            flush=True,
        )
        if new:
            _incremental(root / f"n{n}", bundle, receipts, n, new, r, args)
        for k in (int(x) for x in args.dask.split(",") if x):
            _on_dask(bundle, receipts, k, r, args)
        print(
            f"N = {n:>7} queries, {args.docs} documents, d = {args.dim}, {n} receipts (window written in {gen:.0f} s)"
        )
        la, lb = r["load"]
        print(
            f"  verdict {r['verdict']} {r['reasons']}; wall {r['wall']:.1f} s (goal ≤ 90 s at 10^5), CPU "
            f"{r['cpu']:.1f} s; peak RSS {r['rss_mib']:.0f} MiB (goal ≤ 2048), largest child {r['worker_rss_mib']:.0f} "
            f"MiB (shared pages included, see --pss); load average {la[0]:.1f} before, {lb[0]:.1f} after, on "
            f"{os.cpu_count()} cores"
        )
        if pss:
            print(
                f"  peak PSS of the verifier and its descendants {pss['peak_mib']:.0f} MiB (goal ≤ 2048) at "
                f"{pss['at_s']:.1f} s, {pss['processes']} processes: verifier {pss['verifier_mib']:.0f} MiB + others "
                f"{pss['others_mib']:.0f} MiB, after step {_after(r['marks'], pss['at'])}; "
                f"verifier's own peak PSS {pss['verifier_peak_mib']:.0f} MiB "
                f"({pss['samples']} samples every {args.pss_interval} s)"
            )
            if args.pss_trace:
                path = (
                    args.pss_trace
                    if "," not in args.queries
                    else args.pss_trace.with_name(f"{args.pss_trace.stem}-{n}{args.pss_trace.suffix}")
                )
                sampler.write(path, r["marks"])
        print(f"    {'step':<12} {'wall s':>8} {'µs/query':>9} {'CPU s':>8} {'µs/query':>9}")
        for k, v in sorted(r["seconds"].items(), key=lambda kv: -kv[1]):
            c = r["cpu_seconds"].get(k)
            cs = f"{c:8.2f} {1e6 * c / n:9.1f}" if c is not None else f"{'-':>8} {'-':>9}"
            print(f"    {k:<12} {v:8.2f} {1e6 * v / n:9.1f} {cs}")


if __name__ == "__main__":
    main()
