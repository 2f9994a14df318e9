"""Wall time per DP-KSA answer on a hosted (text-only) LLM: the voters' calls one after another vs concurrent.

A hosted LLM answers one prompt per call and each call waits a network + inference latency. DP-KSA makes
m + 1 calls per answer (``DpKsaPureParameters.calls_per_answer``: m voters, then the final answer from the released
keywords); the m voters' calls are independent, so ``TextOnlyGenerator`` runs them at most ``max_concurrency`` at
once and an answer waits about ⌈m / max_concurrency⌉ + 1 latencies (``latency_rounds``) instead of m + 1.

Two stand-ins for the hosted API, each answering deterministically from its prompt (the first context's
``ANSWER:`` words, or the released keywords) after a fixed latency:

  simulated  a callable that sleeps ``--latency`` seconds per call (no I/O)
  http       a stdlib ``ThreadingHTTPServer`` on 127.0.0.1 in a thread that sleeps ``--latency`` per request; the
             generator POSTs every prompt with ``urllib`` (a real socket round trip per call, one connection each)

Arms: ``max_concurrency`` 1 (the sequential behaviour before), the default (8) and m, run interleaved question by
question (machine load drifts); every arm must give the same answers (asserted). Reported: the median wall time per
answer of each arm, the ratio sequential / default, calls per answer.

Run:  python benchmarks/bench_hosted.py [--latency 0.5] [--m 20] [--questions 3] [--out results/hosted/bench.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import statistics
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from dprag.accounting.noise.source import RandomSource  # noqa: E402
from dprag.accounting.rag.ksa import DEFAULT_MAX_CONCURRENCY, DpKsaPureParameters, TextOnlyGenerator  # noqa: E402

QUESTIONS = [
    "which drug treats asthma?",
    "what does the inhaler protocol prescribe?",
    "which medication is given for wheezing?",
    "what is the asthma rescue drug?",
    "which treatment does the clinic use?",
]


class Docs:
    """A fixed corpus: 32 records that name the answer, 4 that name another, read by id."""

    def __init__(self) -> None:
        self.docs = [f"record {i} inhaler protocol ANSWER: zorvatin dosage" for i in range(32)]
        self.docs += [f"note {i} garden weather ANSWER: rain umbrella" for i in range(4)]

    def __len__(self) -> int:
        return len(self.docs)

    def document(self, i: int) -> str:
        return self.docs[int(i)]


def answer_of(text: str) -> str:
    """What the stand-in LLM says: the released keywords, else the first context's ANSWER words, else 'unknown'."""
    kw = re.search(r"Keywords: ([^\n]+)", text)
    if kw:
        return kw.group(1).replace(",", " ") + " is the answer"
    found = re.findall(r"ANSWER:\s*([^\n]+)", text)
    return found[0] if found else "unknown"


class SleepingLLM:
    """``prompt_text -> str`` after ``latency`` seconds; counts its calls (thread-safe)."""

    def __init__(self, latency: float) -> None:
        self.latency, self.calls, self._lock = latency, 0, threading.Lock()

    def __call__(self, text: str) -> str:
        with self._lock:
            self.calls += 1
        time.sleep(self.latency)
        return answer_of(text)


def start_server(latency: float) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            body = self.rfile.read(int(self.headers["Content-Length"])).decode("utf-8")
            time.sleep(latency)
            out = json.dumps({"text": answer_of(json.loads(body)["prompt"])}).encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="bench-hosted-http", daemon=True).start()
    host, port = server.server_address[:2]
    return server, f"http://{host}:{port}/complete"


class HttpLLM:
    """``prompt_text -> str`` by a POST to the local server (a new connection per call, as a simple client does)."""

    def __init__(self, url: str) -> None:
        self.url, self.calls, self._lock = url, 0, threading.Lock()

    def __call__(self, text: str) -> str:
        with self._lock:
            self.calls += 1
        req = urllib.request.Request(
            self.url, data=json.dumps({"prompt": text}).encode("utf-8"), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            return str(json.loads(r.read())["text"])


def one_answer(
    params: DpKsaPureParameters, llm: SleepingLLM | HttpLLM, question: str, i: int
) -> tuple[float, str, int]:
    gen = TextOnlyGenerator(llm, max_concurrency=params.max_concurrency)
    ids = np.array(list(range(36)) + [-1] * (2 * params.m - 36), dtype=np.int64)
    before = llm.calls
    t = time.perf_counter()
    ans = params.respond(question, ids, Docs(), gen, source=RandomSource.from_seed(b"h" * 32, b"%d" % i))
    return time.perf_counter() - t, ans.text, llm.calls - before


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.5, help="seconds per call (default 0.5)")
    ap.add_argument("--m", type=int, default=20, help="voters (default 20, the recommended dp-ksa policy's)")
    ap.add_argument("--questions", type=int, default=3, help="answers per arm and backend (default 3)")
    ap.add_argument("--backends", nargs="+", default=["simulated", "http"], choices=["simulated", "http"])
    ap.add_argument("--out", type=Path, default=Path("results/hosted/bench.json"))
    a = ap.parse_args(argv)
    if a.m < 18:
        ap.error("--m must be >= 18 (the 36 documents fill at most 2 per voter)")

    base = DpKsaPureParameters(m=a.m, epsilon_em=1.0, epsilon_ptr=2.5, ptr_delta=1e-8, max_keywords=5)
    limits = sorted({1, DEFAULT_MAX_CONCURRENCY, a.m})
    arms = {lim: dataclasses.replace(base, max_concurrency=lim) for lim in limits}
    server, url = start_server(a.latency) if "http" in a.backends else (None, "")
    report: dict[str, object] = {
        "benchmark": "benchmarks/bench_hosted.py",
        "command": " ".join(["python", "benchmarks/bench_hosted.py", *(sys.argv[1:] if argv is None else argv)]),
        "what": "wall time per DP-KSA answer, TextOnlyGenerator over a stand-in hosted LLM",
        "latency_s_per_call": a.latency,
        "m": a.m,
        "calls_per_answer": base.calls_per_answer,
        "default_max_concurrency": DEFAULT_MAX_CONCURRENCY,
        "questions": a.questions,
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cpus",
        "backends": {},
    }
    print(f"DP-KSA, m = {a.m}: {base.calls_per_answer} calls per answer; latency {a.latency} s per call")
    print(f"{'backend':<10} {'limit':>5} {'rounds':>6} {'median s/answer':>16} {'calls':>6} {'vs limit 1':>10}")
    try:
        for backend in a.backends:
            times: dict[int, list[float]] = {lim: [] for lim in limits}
            calls: dict[int, list[int]] = {lim: [] for lim in limits}
            texts: dict[int, list[str]] = {lim: [] for lim in limits}
            for i in range(a.questions):
                q = QUESTIONS[i % len(QUESTIONS)]
                for lim in limits:  # interleaved: every arm answers the same question in turn
                    llm = SleepingLLM(a.latency) if backend == "simulated" else HttpLLM(url)
                    dt, text, n = one_answer(arms[lim], llm, q, i)
                    times[lim].append(dt)
                    calls[lim].append(n)
                    texts[lim].append(text)
            assert all(texts[lim] == texts[1] for lim in limits), "the arms gave different answers"
            seq = statistics.median(times[1])
            rows = {}
            for lim in limits:
                med = statistics.median(times[lim])
                rows[str(lim)] = {
                    "max_concurrency": lim,
                    "latency_rounds": arms[lim].latency_rounds,
                    "expected_s_per_answer": arms[lim].latency_rounds * a.latency,
                    "median_s_per_answer": round(med, 4),
                    "s_per_answer": [round(t, 4) for t in times[lim]],
                    "calls_per_answer_counted": calls[lim],
                    "speedup_vs_sequential": round(seq / med, 3),
                }
                print(
                    f"{backend:<10} {lim:>5} {arms[lim].latency_rounds:>6} {med:>16.3f} "
                    f"{statistics.median(calls[lim]):>6.0f} {seq / med:>9.2f}x"
                )
            d = statistics.median(times[DEFAULT_MAX_CONCURRENCY])
            report["backends"][backend] = {  # type: ignore[index]
                "arms": rows,
                "sequential_s_per_answer": round(seq, 4),
                "default_s_per_answer": round(d, 4),
                "ratio_sequential_over_default": round(seq / d, 3),
                "answers_identical_across_arms": True,
                "answers": texts[1],
            }
            print(f"{backend}: sequential {seq:.2f} s vs default limit {d:.2f} s per answer: {seq / d:.2f}x faster")
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
