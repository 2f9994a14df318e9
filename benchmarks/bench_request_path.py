"""Benchmark: the audited request path's cost, serially and in process — before and after a change, side by side.

    python benchmarks/bench_request_path.py --before /tmp/beforevenv/bin/python [--engines sqlite,postgresql]
                                            [--rounds 6] [--per-round 96] [--out FILE]
    python benchmarks/bench_request_path.py --profile [--engines sqlite] [--per-round 200]

Each arm is a worker process (this file with ``--worker``) importing ``dprag`` from its own interpreter: ``--before``
names the interpreter of a "before" install (a venv with ``pip install --no-deps -e`` of a clone of an earlier
commit), the other arm is this interpreter (the working tree). Per round, each worker makes a fresh toy window
(``make_toy_directory``: 32 accounts, hash embedder, toy generator; SQLite file or a schema of a PostgreSQL server
this benchmark starts), signs ``--per-round`` requests round-robin over the accounts (outside the timing), then times
``ProviderService.serve`` of each, one after another. Rounds alternate which arm goes first; only one worker runs at
a time. Reported per engine and arm, each the median over rounds: the round's median and mean ms/request (wall) and
its CPU ms/request (the worker process's own CPU time: dprag's work, not the database server's), and after/before;
and what a request costs the database, counted on COUNTED untimed requests before the timed ones: SQLite statements
(BEGIN and COMMIT included) or PostgreSQL round trips.
The ratios after/before are the medians over rounds of each round's own ratio (its two arms ran back to back).
A commit's fsync can dominate the wall time (on a disk whose flushes complete on timer ticks, the median is a whole
number of ticks in both arms); the mean and the CPU time still show the work the change removed.

``--profile``: cProfile one worker's round of the working tree instead (top functions by cumulative and own time).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ("asthma protocol inhaler patient", "inhaler drug protocol", "garden weather rain", "contract court case")
ACCOUNTS = 32
#: requests per round served before the timed ones, untimed, counting what each costs the database
COUNTED = 8


def _counted(svc, reqs: list) -> float:
    """Serve ``reqs`` (untimed); return per request the SQLite statements run (BEGIN and COMMIT included) or the
    PostgreSQL round trips (the driver's waits for the server)."""
    n = [0]
    if svc.store.dialect == "sqlite":  # this thread's connection and the process's writer connection
        with svc.store.traced(lambda _sql: n.__setitem__(0, n[0] + 1)):
            for r in reqs:
                svc.serve(r)
        return n[0] / len(reqs)
    import pg8000.core

    cls = pg8000.core.CoreConnection
    real = cls.handle_messages

    def counting(self, context):
        n[0] += 1
        return real(self, context)

    cls.handle_messages = counting
    try:
        for r in reqs:
            svc.serve(r)
    finally:
        cls.handle_messages = real
    return n[0] / len(reqs)


# -- worker: one arm ------------------------------------------------------------------------------------------------
def _round(
    work: Path, k: int, store: str | None, per_round: int, profile: bool = False, dump: Path | None = None
) -> dict:
    import json as _json

    from dprag.audit.client.account import AccountClient
    from dprag.audit.protocol.request import AccountKey
    from dprag.audit.testing.toy import HashEmbedder, make_toy_directory

    d = work / f"r{k}"
    svc = make_toy_directory(d, store=store, accounts=ACCOUNTS, n=(per_round + COUNTED) // ACCOUNTS + 2)
    try:
        names = sorted(p.name for p in (d / "accounts").iterdir())
        clients = []
        for a in names:
            cfg = _json.loads((d / "accounts" / a / "config.json").read_text())
            key = AccountKey.from_hex((d / "accounts" / a / "account.key").read_text().strip())
            clients.append(
                AccountClient(
                    a,
                    cfg["window"],
                    key,
                    provider_vkey=cfg["provider_key"],
                    embedder=HashEmbedder(32),
                    embedding_scale=int(cfg["embedding_scale"]),
                )
            )
        reqs = [
            clients[i % len(clients)].request(f"{QUESTIONS[i % len(QUESTIONS)]} q{i}")
            for i in range(per_round + COUNTED)
        ]
        db_ops = _counted(svc, reqs[:COUNTED])
        reqs = reqs[COUNTED:]
        times = []
        prof = None
        if profile:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        c0 = time.process_time()
        for r in reqs:
            t0 = time.perf_counter()
            svc.serve(r)
            times.append(time.perf_counter() - t0)
        cpu = time.process_time() - c0
        if prof is not None:
            prof.disable()
            if dump is not None:
                prof.dump_stats(str(dump))
            import io
            import pstats

            for key in ("cumulative", "tottime"):
                buf = io.StringIO()
                pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(45)
                print(buf.getvalue(), file=sys.stderr)
        if getattr(svc.store, "dialect", "") == "postgresql":
            svc.store.drop()
    finally:
        svc.close()
        shutil.rmtree(d, ignore_errors=True)
    times.sort()
    return {
        "n": len(times),
        "median_ms": 1e3 * times[len(times) // 2],
        "mean_ms": 1e3 * sum(times) / len(times),
        "cpu_ms": 1e3 * cpu / len(times),
        "db_ops": db_ops,
    }


def worker(store: str | None, per_round: int) -> int:
    """Serve rounds on command: each stdin line ``round K`` answers one JSON line."""
    import dprag.audit.provider.service as svc_mod

    work = Path(tempfile.mkdtemp(prefix="dprag-bench-rp-"))
    print(json.dumps({"ready": True, "service": svc_mod.__file__}), flush=True)
    try:
        for line in sys.stdin:
            cmd = line.split()
            if not cmd or cmd[0] == "quit":
                break
            print(json.dumps(_round(work, int(cmd[1]), store, per_round)), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


# -- parent ---------------------------------------------------------------------------------------------------------
class Arm:
    def __init__(self, name: str, python: str, store: str | None, per_round: int, pythonpath: str | None = None):
        self.name = name
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        cmd = [python, str(Path(__file__).resolve()), "--worker", "--per-round", str(per_round)]
        if store:
            cmd += ["--store", store]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tempfile.gettempdir()
        )
        self.info = self._read()
        self.rounds: list[dict] = []

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} died")
        return json.loads(line)

    def round(self, k: int) -> dict:
        self.proc.stdin.write(f"round {k}\n")
        self.proc.stdin.flush()
        r = self._read()
        self.rounds.append(r)
        return r

    def close(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        except Exception:  # noqa: BLE001
            self.proc.kill()


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def _head(tree: Path) -> str:
    """The commit checked out at ``tree`` (read only)."""
    p = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return p.stdout.strip() or "unknown"


def compare(engine: str, store: str | None, before: str, rounds: int, per_round: int) -> dict:
    arms = [Arm("before", before, store, per_round), Arm("after", sys.executable, store, per_round)]
    try:
        for k in range(rounds):
            for arm in arms if k % 2 == 0 else arms[::-1]:
                r = arm.round(k)
                print(
                    f"{engine} round {k} {arm.name}: median {r['median_ms']:.2f}, mean {r['mean_ms']:.2f}, "
                    f"cpu {r['cpu_ms']:.2f} ms/request, {r['db_ops']:.1f} statements or round trips",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        for arm in arms:
            arm.close()
    out: dict = {"engine": engine, "rounds": rounds, "requests_per_round": per_round}
    for arm in arms:
        out[arm.name] = {
            "service_module": arm.info["service"],
            "commit": _head(Path(arm.info["service"]).parents[1]) + (" + working tree" if arm.name == "after" else ""),
            "median_ms_per_request": round(_median([r["median_ms"] for r in arm.rounds]), 3),
            "mean_ms_per_request": round(_median([r["mean_ms"] for r in arm.rounds]), 3),
            "cpu_ms_per_request": round(_median([r["cpu_ms"] for r in arm.rounds]), 3),
            ("statements" if engine == "sqlite" else "round_trips") + "_per_request": round(
                _median([r["db_ops"] for r in arm.rounds]), 2
            ),
            "round_medians_ms": [round(r["median_ms"], 3) for r in arm.rounds],
        }
    # after/before: the median over rounds of the round's own ratio (both arms ran back to back in it, so a change in
    # the machine's load between rounds cancels out)
    before, after = arms
    for key, field in (("median_ms", "median"), ("mean_ms", "mean"), ("cpu_ms", "cpu")):
        ratios = [a[key] / b[key] for a, b in zip(after.rounds, before.rounds, strict=True)]
        out[f"ratio_{field}"] = round(_median(ratios), 3)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--store", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--before", default=None, help="the interpreter of the 'before' install")
    ap.add_argument("--engines", default="sqlite,postgresql")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--per-round", type=int, default=96)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--pstats", type=Path, default=None, help="with --profile: dump the raw stats to FILE.<engine>.pstats"
    )
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.store, a.per_round)
    engines = a.engines.split(",")
    load = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="dprag-bench-rp-"))
    pg = None
    try:
        if "postgresql" in engines:
            from tests.support.postgres import TempCluster

            pg = TempCluster(work / "pg")
            os.chmod(work, 0o755)
            pg.start()
        stores = {"sqlite": None, "postgresql": pg.url if pg else None}
        if a.profile:
            for e in engines:
                print(f"== profile: {e}", file=sys.stderr)
                dump = None if a.pstats is None else a.pstats.with_suffix(f".{e}.pstats")
                r = _round(work, 0, stores[e], a.per_round, profile=True, dump=dump)
                print(json.dumps({"engine": e, **r}))
            return 0
        if a.before is None:
            ap.error("--before PYTHON is required (or --profile)")
        rows = [compare(e, stores[e], a.before, a.rounds, a.per_round) for e in engines]
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "benchmark": "benchmarks/bench_request_path.py",
        "what": "ProviderService.serve, serial, in process, toy window (32 accounts, hash embedder, toy generator)",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_start": [round(x, 2) for x in load],
        },
        "results": rows,
    }
    print(json.dumps(result, indent=2))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
