"""Benchmark: what one `dprag account ask` costs beyond the answer's own time, with and without the account's agent.

    python benchmarks/bench_account_agent.py [--asks 5] [--out FILE]

A window with MiniLM (`all-MiniLM-L6-v2`, the account computes Q itself) and a text-only generator is served over
HTTP in this process (uvicorn on loopback). Three arms, each `--asks` questions, timed on the wall clock:

- ``library`` (the answer's own time): `AccountClient.ask(RemoteService)` in this process, MiniLM already loaded —
  what an ask costs with nothing to load or start;
- ``cli`` (the named baseline, today's path): `dprag account ask DIR Q --url` as a fresh process, which loads MiniLM;
- ``cli+agent``: the same command with `dprag account agent DIR` running (MiniLM loaded once in the agent).

Reported: each arm's median and max in seconds, and each CLI arm's median minus the library's (the overhead) and
its ratio to the baseline's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dprag.audit.client.account import AccountClient  # noqa: E402
from dprag.audit.client.remote import RemoteService  # noqa: E402
from dprag.audit.protocol.policy import Policy  # noqa: E402
from dprag.audit.provider.http.app import create_app  # noqa: E402
from dprag.audit.provider.models import load_embedder  # noqa: E402
from dprag.audit.provider.service import ProviderService  # noqa: E402
from tests.support.live import LiveServer  # noqa: E402

DPRAG = str(Path(sys.executable).parent / "dprag")


def answer(prompt_text: str) -> str:
    return "zorvatin" if "zorvatin" in prompt_text else "no idea"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--asks", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(tempfile.mkdtemp(prefix="dprag-agent-"))
    emb = load_embedder("all-MiniLM-L6-v2")
    docs = {f"rx-{i}": f"record {i}: asthma patients receive zorvatin" for i in range(40)}
    docs |= {f"gt-{i}": f"record {i}: gout patients receive pellumab" for i in range(40)}
    svc = ProviderService.create(
        work / "w",
        policy=Policy.recommended("agent-1", mechanism="dp-ksa", voters=20, tau_cosine=0.3),
        embedder=emb,
        generator=answer,
        tenants={"clinic": docs},
        accounts={},
    )
    accts = {}
    for name in ("cli", "agent"):
        d = work / name
        subprocess.run(
            [DPRAG, "account", "new", str(d), "--account", name, "--window", "agent-1", "--embedder",
             "all-MiniLM-L6-v2", "--provider-key", str(work / "w" / "pins" / "provider.vkey"), "--origin", svc.origin],
            check=True, capture_output=True,
        )  # fmt: skip
        svc.add_account(name, "clinic", (d / "account.vkey").read_text().strip())
        accts[name] = d
    lib = AccountClient.load(accts["cli"], embedder=emb)  # the library arm: same window, memory only afterwards
    lib.dir = None
    times: dict[str, list[float]] = {"library": [], "cli": [], "cli+agent": []}
    questions = [f"which drug do asthma patients receive ({i})" for i in range(args.asks)]
    with LiveServer(create_app(svc)) as url:
        for q in questions:
            t = time.perf_counter()
            ask = [DPRAG, "account", "ask", str(accts["cli"]), q, "--url", url]
            subprocess.run(ask, check=True, capture_output=True)
            times["cli"].append(time.perf_counter() - t)
        remote = RemoteService(url, account=lib.account, key=lib.key)
        lib.counter = int((accts["cli"] / "counter").read_text())
        lib.receipts = []
        for q in questions:
            t = time.perf_counter()
            lib.ask(remote, q)
            times["library"].append(time.perf_counter() - t)
        agent = subprocess.Popen([DPRAG, "account", "agent", str(accts["agent"])], stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while not (accts["agent"] / "agent.sock").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            for q in questions:
                t = time.perf_counter()
                subprocess.run(
                    [DPRAG, "account", "ask", str(accts["agent"]), q, "--url", url], check=True, capture_output=True
                )
                times["cli+agent"].append(time.perf_counter() - t)
        finally:
            agent.terminate()
            agent.wait(30)
    svc.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    report = {
        "asks": args.asks,
        "embedder": "all-MiniLM-L6-v2",
        "seconds": {k: {"median": round(med[k], 3), "max": round(max(v), 3)} for k, v in times.items()},
        "overhead_beyond_library_s": {k: round(med[k] - med["library"], 3) for k in ("cli", "cli+agent")},
        "ratio_to_baseline_cli": round(med["cli+agent"] / med["cli"], 3),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
