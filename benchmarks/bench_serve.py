"""Benchmark: dprag serve under load — throughput and p50/p99 latency, side by side with the named baseline.

    python benchmarks/bench_serve.py [--accounts 32] [--per-account 8] [--replicas 1,2] [--engines sqlite,postgresql]
                                     [--pin] [--out FILE]
    python benchmarks/bench_serve.py --reservation toy,smollm2 [--accounts 4] [--rounds 4] [--out FILE]

Arms, measured in one run on loopback (replicas are ``dprag serve`` processes; M accounts are M client threads of
this process, each sending its requests one after another):

- ``baseline`` (``benchmarks/serve_baseline.py``): the same stack (FastAPI, uvicorn, JSON over HTTP) serving the same
  toy pipeline — the toy corpus and the policy's MuRAG generation (m toy voters) — without the audit;
- ``dprag-sqlite``: ``dprag serve --toy`` on the window's SQLite file (replicas share the directory);
- ``dprag-postgresql``: the same on a PostgreSQL server this benchmark starts (Debian's package, a temporary
  cluster; the second replica starts from the database URL alone).

The dprag client is the full account side: it computes and commits to Q, signs the request, checks the receipt and
the consistency proof from its previous receipt. Reported: requests, seconds, throughput, p50/p99 (and the p50 of
the accounts' first requests, which all reach the server at once, and the p99 of the rest), and each dprag
arm's p50 and throughput as ratios to the baseline with the same replicas. The machine's cores are recorded.

After the arms, ``signature_floor``: what this design costs with every line of Python gone, measured in the same
run — the protocol's Ed25519 work per request (``ed25519_floor``) and the store's SQL statements per request run by
SQLite itself (``sqlite_floor``) — and the ratio to the baseline that those alone give (``floor_ratio_v3_sqlite``).

``--reservation toy,smollm2``: instead of the arms above, the reservation of spec/provider.md §3.6 on and off, in
process (``ProviderService.serve`` from one thread per account, ``--accounts`` concurrent requests a round), on one
window per model (``toy``: the toy window; ``smollm2``: bench_serve_real.py's clinic window, MiniLM + SmolLM2-135M,
answer-vote with m = 4, 16 tokens). Arms, alternated round by round (ABC, CBA, ...) on the same window:

- ``off``: no reservation (``svc.reservations.set(None)``): the baseline;
- ``on``: the default pool (the generator's device memory: half the memory available at open on a CPU);
- ``serial``: a pool of exactly one request's worst case, i.e. a serialised voter pool.

Reported per model and arm: requests, seconds (the sum of the arm's rounds), throughput, p50/p99, and each arm's
throughput as a ratio to ``off``; the worst case one request reserves.

``--reservation hosted``: the hosted slot of §3.6 (one request at a time through a generator without a worst case)
off and on, on a toy DP-KSA window (``replayable: false``) whose generator is a stand-in hosted API answering each
call after ``--latency`` seconds (a network and inference wait; the voters of one request call it concurrently).
Arms ``off`` (``svc.hosted_slot.set(None)``: the baseline) and ``on`` (the default), alternated round by round.

``--pin``: the servers (every replica's threads, and PostgreSQL's processes) on CPU 0 and this process (the load
generator: the accounts' signing and checking) on CPU 1, in every arm — so the ratio measures what the audit costs
the provider's CPU, not the accounts' work competing with it for the same two cores. Latency is still the
account's: from its request to the checked receipt.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dprag.audit.testing.toy import make_toy_directory  # noqa: E402
from tests.support.live import start_replica, stop_replicas, wait_ready  # noqa: E402
from tests.support.load import QUESTIONS, audit_window, first_and_rest, run_accounts, toy_client  # noqa: E402
from tests.support.postgres import TempCluster, free_port  # noqa: E402

#: --pin: the CPUs of the servers and of the load generator
SERVER_CPUS, CLIENT_CPUS = {0}, {1}


def process_tree(roots) -> dict[int, list[str]]:
    """The live processes ``roots`` and all their descendants (PostgreSQL's backends under its postmaster): pid ->
    the fields of /proc/pid/stat after the command name (a process that exited in between is skipped)."""
    kids: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for st in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = st.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(st.parent.name)] = fields
        kids.setdefault(int(fields[1]), []).append(int(st.parent.name))
    out, todo = {}, list(roots)
    while todo:
        p = todo.pop()
        if p in out or p not in stats:
            continue
        out[p] = stats[p]
        todo.extend(kids.get(p, []))
    return out


def pin_tree(pid: int, cpus: set[int]) -> int:
    """Pin every thread of ``pid`` and of its descendants to ``cpus``; threads and processes they start later
    inherit the mask. Returns how many threads were pinned."""
    n = 0
    for p in process_tree([pid]):
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                os.sched_setaffinity(int(task.name), cpus)
                n += 1
            except OSError:
                pass  # the thread exited between being listed and being pinned
    return n


def tree_cpu_seconds(pids) -> float:
    """User + system CPU seconds of the processes ``pids`` and all their live descendants."""
    # utime, stime: fields 14 and 15 of stat (11 and 12 after the command name)
    total = sum(int(f[11]) + int(f[12]) for f in process_tree(pids).values())
    return total / os.sysconf("SC_CLK_TCK")


def ed25519_floor(n: int = 4000) -> dict:
    """What protocol v3 makes every request cost in signatures alone (spec/protocol.md §5.1 and step 8): one
    Ed25519 verify (the account's request) and two signs (the checkpoint and the receipt), timed here with the
    library the service uses (cryptography / OpenSSL), median of 5 batches of ``n``, in ms per operation."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    pub = key.public_key()
    msg = os.urandom(256)
    sig = key.sign(msg)

    def per_op(fn) -> float:
        out = []
        for _ in range(5):
            t0 = time.process_time()
            for _ in range(n):
                fn()
            out.append((time.process_time() - t0) / n * 1e3)
        return float(np.median(out))

    verify, sign = per_op(lambda: pub.verify(sig, msg)), per_op(lambda: key.sign(msg))
    return {"verify_ms": round(verify, 4), "sign_ms": round(sign, 4), "v3_per_request_ms": round(verify + 2 * sign, 4)}


#: statements a group-commit batch runs once however many requests it holds (``sqlite_floor`` leaves them out)
BATCH_ONCE = ("UPDATE ledger_tail", "INSERT INTO checkpoint", "SELECT size FROM ledger_tail")


def sqlite_floor(requests: int = 280, replays: int = 5) -> dict:
    """What one request's store work costs SQLite itself, with no Python around it: the statements ``requests``
    toy requests ran (one thread, in process, traced on every connection they used: ``SqliteServiceStore.traced``),
    without their transaction control (BEGIN, COMMIT, PRAGMA) and without what a batch of requests runs once (the
    tail's size read and update, the checkpoint: ``BATCH_ONCE``) — as if every request shared one batch — replayed in C
    (``executescript``: one call for all of them, in ONE transaction, unsynced: a sync is the disk's time, not the
    CPU's) on a copy of the store as it was before them. Median of ``replays``, in ms CPU per request. A lower bound:
    no implementation of this store layout, in any language, runs these statements for less."""
    import sqlite3
    import statistics

    from dprag.audit.testing.toy import open_toy_directory
    from tests.support.load import toy_client

    work = Path(tempfile.mkdtemp(prefix="dprag-bench-floor-"))
    try:
        d = work / "w"
        svc = make_toy_directory(d, accounts=8, n=requests // 7 + 2)
        names = ["alice", "bob", "dave", "a05", "a06", "a07", "a08"]  # carol is on the other tenant
        clients = [toy_client(d, a) for a in names]
        for c in clients:
            c.ask(svc, "a first request: connections, caches")
        svc.close()
        db, snap = d / "service" / "state" / "service.sqlite", work / "snap.sqlite"
        with sqlite3.connect(db) as src, sqlite3.connect(snap) as dst:
            src.backup(dst)
        svc = open_toy_directory(d)
        trace: list[str] = []
        n = 0
        with svc.store.traced(trace.append):
            while n < requests:
                for c in clients[: requests - n]:
                    c.ask(svc, f"{QUESTIONS[n % len(QUESTIONS)]} {n}")
                    n += 1
        svc.close()
        control = ("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA")
        body = [x for x in trace if not x.lstrip().upper().startswith(control) and not x.startswith(BATCH_ONCE)]
        script = "BEGIN;\n" + ";\n".join(body) + ";\nCOMMIT;"
        per = []
        for k in range(replays):
            copy = work / f"replay{k}.sqlite"
            shutil.copy(snap, copy)
            conn = sqlite3.connect(copy, isolation_level=None)
            conn.execute("PRAGMA synchronous=OFF")
            t0 = time.thread_time()
            conn.executescript(script)
            per.append((time.thread_time() - t0) / n * 1e3)
            conn.close()
        return {
            "sqlite_statements_per_request": round(len(body) / n, 2),
            "sqlite_ms": round(statistics.median(per), 4),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _pin(procs, pin: bool) -> None:
    if pin:
        for p in procs:
            pin_tree(p.pid, SERVER_CPUS)


def baseline_arm(replicas: int, accounts: int, per_account: int, pin: bool = False, threads: int | None = None) -> dict:
    procs, urls = [], []
    for _ in range(replicas):
        port = free_port()
        procs.append(
            subprocess.Popen(
                [sys.executable, str(ROOT / "benchmarks" / "serve_baseline.py"), "--port", str(port)]
                + (["--threads", str(threads)] if threads else []),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        urls.append(f"http://127.0.0.1:{port}")
    try:
        for u in urls:
            wait_ready(u, 90)
        _pin(procs, pin)
        lat, first, lock = [], [], threading.Lock()

        def one(i: int) -> None:
            url = urls[i % len(urls)]
            for k in range(per_account):
                body = json.dumps({"question": f"{QUESTIONS[(i + k) % len(QUESTIONS)]} a{i} {k}"}).encode()
                req = urllib.request.Request(
                    url + "/v1/requests", data=body, method="POST", headers={"Content-Type": "application/json"}
                )
                t0 = time.perf_counter()
                with urllib.request.urlopen(req, timeout=120) as r:
                    r.read()
                with lock:
                    lat.append(time.perf_counter() - t0)
                    if k == 0:
                        first.append(lat[-1])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(accounts)]
        cpu0 = tree_cpu_seconds([p.pid for p in procs])
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        secs = time.perf_counter() - t0
        cpu = tree_cpu_seconds([p.pid for p in procs]) - cpu0
    finally:
        stop_replicas(*procs)
    if len(lat) != accounts * per_account:
        raise RuntimeError(f"baseline answered {len(lat)} of {accounts * per_account} requests")
    a = np.array(lat)
    return {
        "arm": "baseline",
        "replicas": replicas,
        "answered": len(lat),
        "seconds": round(secs, 3),
        "throughput_rps": round(len(lat) / secs, 2),
        "p50_ms": round(1e3 * float(np.percentile(a, 50)), 2),
        "p99_ms": round(1e3 * float(np.percentile(a, 99)), 2),
        **first_and_rest(lat, first),
        "server_cpu_ms_per_request": round(1e3 * cpu / len(lat), 3),
    }


def dprag_arm(
    engine: str,
    replicas: int,
    accounts: int,
    per_account: int,
    work: Path,
    pg: TempCluster | None,
    pin: bool = False,
    threads: int | None = None,
) -> dict:
    d = work / f"{engine}-{replicas}"
    svc = make_toy_directory(d, store=pg.url if pg else None, accounts=accounts, n=per_account + 1)
    schema_url = svc.store.describe().get("url")
    svc.close()
    procs, urls = [], []
    extra = ("--threads", str(threads)) if threads else ()
    try:
        for r in range(replicas):
            if engine == "postgresql" and r > 0:
                p, u = start_replica(work / f"{engine}-{replicas}-host{r}", toy=False, store=schema_url, extra=extra)
            else:
                p, u = start_replica(d, extra=extra)
            procs.append(p)
            urls.append(u)
        _pin(procs, pin)
        names = ["alice", "bob", "carol", "dave"][:accounts] + [f"a{i:02d}" for i in range(5, accounts + 1)]
        server_pids = [p.pid for p in procs] + ([pg.pid] if pg else [])
        cpu0 = tree_cpu_seconds(server_pids)
        res = run_accounts(d, names, lambda i: urls[i % len(urls) :] + urls[: i % len(urls)], per_account)
        cpu = tree_cpu_seconds(server_pids) - cpu0
    finally:
        stop_replicas(*procs)
    out = {"arm": f"dprag-{engine}", "replicas": replicas, **res.summary()}
    out["server_cpu_ms_per_request"] = round(1e3 * cpu / max(1, accounts * per_account), 3)
    from dprag.audit.testing.toy import open_toy_directory

    svc = open_toy_directory(d, store=pg.url if pg else None)
    try:
        check = audit_window(svc, res, d)
    finally:
        svc.close()
    out.update(
        verdict=check["verdict"], query_leaves=check["query_leaves"], recorded_twice=check["requests_recorded_twice"]
    )
    return out


RESERVATION_ARMS = ("off", "on", "serial")
HOSTED_ARMS = ("off", "on")


class LatencyAPI:
    """The stand-in hosted API of ``--reservation hosted``: ``prompt_text -> str``, the first ANSWER word of its
    prompt after ``latency`` seconds (deterministic; thread-safe)."""

    def __init__(self, latency: float):
        self.latency = latency

    def __call__(self, text: str) -> str:
        import re

        time.sleep(self.latency)
        found = re.findall(r"(?:ANSWER|Keywords):\s*([^\n.]+)", text)
        return found[0].replace(",", " ").strip() if found else "unknown"


def _reservation_clients(model: str, work: Path, accounts: int, n: int, latency: float = 0.2):
    """(service, questions, {account: AccountClient}) of the window ``model`` serves (see the module doc)."""
    from dprag.audit.client.account import AccountClient
    from dprag.audit.protocol.request import AccountKey

    if model == "toy":
        svc = make_toy_directory(work / "toy", accounts=accounts, n=n)
        names = sorted(p.name for p in (work / "toy" / "accounts").iterdir())
        return svc, list(QUESTIONS), {a: toy_client(work / "toy", a) for a in names}
    from dprag.audit.protocol.policy import Policy
    from dprag.audit.provider.service import ProviderService

    if model == "hosted":
        from dprag.audit.testing.toy import CLINIC, LEGAL, HashEmbedder, toy_policy

        keys = {f"a{i:02d}": AccountKey.generate() for i in range(accounts)}
        svc = ProviderService.create(
            work / "hosted",
            policy=toy_policy(mechanism="dp-ksa", replayable=False, n=n, max_queries_per_doc=accounts * n),
            embedder=HashEmbedder(32),
            generator=LatencyAPI(latency),
            tenants={"clinic": CLINIC, "legal": LEGAL},
            accounts={a: ("clinic", k.vkey) for a, k in keys.items()},
            allow_weak=True,
        )
        vkey, scale = svc.signer.vkey(), int(svc.embedder_descriptor["embedding_scale"])
        clients = {
            a: AccountClient(
                a, svc.policy.window, k, provider_vkey=vkey, embedder=HashEmbedder(32), embedding_scale=scale
            )
            for a, k in keys.items()
        }
        return svc, list(QUESTIONS), clients
    from dprag.rag_adapters.datasets.clinic import generate_clinic_corpus
    from dprag.rag_adapters.generator import load_smollm2

    corpus = generate_clinic_corpus(3, n_conditions=8, support_min=10, support_max=20, n_distractors=150)
    keys = {f"a{i:02d}": AccountKey.generate() for i in range(accounts)}
    policy = Policy.recommended(
        "reserve-1",
        citations_for=("clinic",),
        voters=4,
        private_tokens=2,
        queries_per_account=n,
        max_tokens=16,
        max_queries_per_doc=accounts * n,
    )
    svc = ProviderService.create(
        work / "smollm2",
        policy=policy,
        embedder="all-MiniLM-L6-v2",
        generator=load_smollm2(),
        tenants={"clinic": list(corpus.documents)},
        accounts={a: ("clinic", k.vkey) for a, k in keys.items()},
        allow_weak=True,
    )
    scale, vkey = int(svc.embedder_descriptor["embedding_scale"]), svc.signer.vkey()
    clients = {
        a: AccountClient(a, svc.policy.window, k, provider_vkey=vkey, embedder=None, embedding_scale=scale)
        for a, k in keys.items()
    }  # the provider embeds each question (embedder=None): the server's work, as in dprag serve
    return svc, [q.question for q in corpus.questions], clients


def reservation_arms(model: str, accounts: int, rounds: int, work: Path, latency: float = 0.2) -> list[dict]:
    """The reservation on and off on ``model``'s window (module doc)."""
    from dprag.audit.provider.reservation import worst_case_bytes

    arms = HOSTED_ARMS if model == "hosted" else RESERVATION_ARMS
    n = rounds * len(arms) + 1
    svc, qs, clients = _reservation_clients(model, work, accounts, n, latency)
    # the serial pool holds exactly the largest worst case of the questions sent: never two requests at once
    need = max(worst_case_bytes(svc.committed_generator, svc.policy, q) for q in qs)
    default = svc.reservations.capacity
    capacity = {"off": None, "on": default, "serial": need}
    lat: dict[str, list[float]] = {a: [] for a in arms}
    secs = dict.fromkeys(arms, 0.0)
    errors: dict[str, list[str]] = {a: [] for a in arms}
    names = sorted(clients)
    k = 0
    try:
        for r in range(rounds):
            order = arms if r % 2 == 0 else arms[::-1]
            for arm in order:
                if model == "hosted":
                    svc.hosted_slot.set(None if arm == "off" else 1, wait_seconds=600)
                else:
                    svc.reservations.set(capacity[arm], wait_seconds=600)
                k += 1

                def one(i: int, name: str, arm: str = arm, k: int = k) -> None:
                    t0 = time.perf_counter()
                    try:
                        clients[name].ask(svc, f"{qs[(i + k) % len(qs)]}")
                    except Exception as e:  # noqa: BLE001 - counted and reported
                        errors[arm].append(f"{type(e).__name__}: {str(e)[:120]}")
                        return
                    lat[arm].append(time.perf_counter() - t0)

                threads = [threading.Thread(target=one, args=(i, nm)) for i, nm in enumerate(names)]
                t0 = time.perf_counter()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                secs[arm] += time.perf_counter() - t0
    finally:
        svc.close()
    rows = []
    for arm in arms:
        done = len(lat[arm])
        ms = sorted(1e3 * x for x in lat[arm]) or [float("nan")]
        rows.append(
            {
                "arm": f"reservation-{arm}",
                "model": model,
                "requests": done,
                "errors": errors[arm][:3],
                "seconds": round(secs[arm], 3),
                "throughput_rps": round(done / secs[arm], 3) if secs[arm] else None,
                "p50_ms": round(float(np.percentile(ms, 50)), 1),
                "p99_ms": round(float(np.percentile(ms, 99)), 1),
                "capacity_bytes": capacity[arm] if model != "hosted" else None,
                "worst_case_bytes": need,
                **({"hosted_slot": arm == "on", "latency_s": latency} if model == "hosted" else {}),
            }
        )
    off = rows[0]["throughput_rps"]
    for row in rows:
        row["throughput_ratio_to_off"] = (
            round(row["throughput_rps"] / off, 3) if off and row["throughput_rps"] else None
        )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--accounts", type=int, default=32)
    ap.add_argument("--per-account", type=int, default=8)
    ap.add_argument("--replicas", default="1,2")
    ap.add_argument("--engines", default="sqlite,postgresql")
    ap.add_argument("--threads", type=int, default=None, help="each server's worker threads (both arms; default 40)")
    ap.add_argument("--pin", action="store_true", help="servers on CPU 0, the load generator on CPU 1 (see above)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--reservation", default=None, help="toy,smollm2,hosted: the reservation arms only (module doc)")
    ap.add_argument("--latency", type=float, default=0.2, help="--reservation hosted: the API's seconds per call")
    ap.add_argument("--rounds", type=int, default=4, help="--reservation: rounds per arm")
    a = ap.parse_args(argv)
    if a.reservation:
        return reservation_main(a)
    if a.pin:
        if len(os.sched_getaffinity(0)) < 2:
            ap.error("--pin needs 2 CPUs")
        os.sched_setaffinity(0, CLIENT_CPUS)  # before any thread starts: the accounts' threads inherit it
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="dprag-bench-serve-"))
    pg = None
    if "postgresql" in a.engines:
        pg = TempCluster(work / "pg")
        os.chmod(work, 0o755)
        pg.start()
        if a.pin:
            pin_tree(pg.pid, SERVER_CPUS)
    rows = []
    try:
        for replicas in [int(x) for x in a.replicas.split(",")]:
            base = baseline_arm(replicas, a.accounts, a.per_account, a.pin, a.threads)
            rows.append(base)
            print(json.dumps(base), flush=True)
            for engine in a.engines.split(","):
                pg_of = pg if engine == "postgresql" else None
                row = dprag_arm(engine, replicas, a.accounts, a.per_account, work, pg_of, a.pin, a.threads)
                row["p50_ratio_to_baseline"] = round(row["p50_ms"] / base["p50_ms"], 3)
                row["throughput_ratio_to_baseline"] = round(row["throughput_rps"] / base["throughput_rps"], 3)
                row["server_cpu_ratio_to_baseline"] = round(
                    row["server_cpu_ms_per_request"] / base["server_cpu_ms_per_request"], 3
                )
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        if pg:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)
    floor = {**ed25519_floor(), **sqlite_floor()}
    bases = [r for r in rows if r["arm"] == "baseline"]
    b_cpu = float(np.median([r["server_cpu_ms_per_request"] for r in bases]))
    floor["baseline_server_cpu_ms_per_request"] = b_cpu
    floor["budget_at_1_2x_ms"] = round(0.2 * b_cpu, 4)
    floor["floor_ratio_v3"] = round((b_cpu + floor["v3_per_request_ms"]) / b_cpu, 3)
    floor["floor_ratio_one_sign"] = round((b_cpu + floor["verify_ms"] + floor["sign_ms"]) / b_cpu, 3)
    # the signatures and the SQLite statements alone: what the audit costs with every line of Python gone
    floor["floor_ratio_v3_sqlite"] = round((b_cpu + floor["v3_per_request_ms"] + floor["sqlite_ms"]) / b_cpu, 3)
    print(json.dumps({"signature_floor": floor}), flush=True)
    report = {
        "signature_floor": floor,
        "cores": os.cpu_count(),
        "load_before": load_before,
        "accounts": a.accounts,
        "per_account": a.per_account,
        "threads": a.threads,
        "pinned": {"servers": sorted(SERVER_CPUS), "load_generator": sorted(CLIENT_CPUS)} if a.pin else None,
        "rows": rows,
    }
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


def reservation_main(a) -> int:
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="dprag-bench-reserve-"))
    rows = []
    try:
        for model in a.reservation.split(","):
            for row in reservation_arms(model, a.accounts, a.rounds, work, a.latency):
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "cores": os.cpu_count(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "accounts": a.accounts,
        "rounds": a.rounds,
        "latency_s": a.latency if "hosted" in a.reservation else None,
        "rows": rows,
    }
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
