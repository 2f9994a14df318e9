"""Benchmark: dprag serve with the real models — MiniLM (all-MiniLM-L6-v2) and SmolLM2-135M — one replica, ~20 requests,
side by side with the named baseline (``benchmarks/serve_baseline.py --dir D --generator smollm2``).

    python benchmarks/bench_serve_real.py [--requests 20] [--accounts 4] [--queries-per-doc N] [--out FILE]

A window over the synthetic clinic corpus (rag_adapters.datasets.clinic, 8 conditions, ~300 records), policy
``Policy.recommended`` with m = 4 voters and 16-token answers (its default mechanism, answer-level voting, MuRAG at
τ = cosine 0.5), made by ``ProviderService.create``. Two servers, one process each, started together and both kept
up for the whole run:

- ``dprag``: ``dprag serve --dir D --generator smollm2``; ``--accounts`` accounts, each computing Q with MiniLM itself
  (in this process), signing its requests and checking every receipt and consistency proof (``AccountClient.ask``);
- ``baseline``: ``serve_baseline.py --dir D --generator smollm2`` — the same stack serving the same window's index,
  documents and policy pipeline (the same MiniLM, the same SmolLM2 wrapper, m voters, token limits and prompts)
  without the audit; ``--accounts`` plain HTTP clients, each sending the question as JSON (the server embeds it).

Both arms get the same questions (client i sends questions i, i + A, i + 2A, ... one after another). The run is in
rounds, one request per client per round, the two arms alternating A/B, B/A, ... (ABBA), so ambient load and warm-up
hit both alike; an arm's seconds are the sum of its rounds' wall times. Both servers get the same torch thread count
(``DPRAG_TORCH_THREADS``, else ``rag_adapters.common.torch_threads()`` taken once before they start).

``--queries-per-doc`` (the policy's M, default: the number of requests) is set so that no document's budget runs out
within the run: with M = 1 most of the 20 questions (all on one condition) would find their documents refused by the
filter and every voter would answer from the empty document, far less model work than the baseline does; with M ≥
requests the filter admits every document above τ, and both arms generate from the same documents (checked: the
``documents`` field compares the documents of each answer, dprag's from the bundle's openings, ``recorded_top``).
The generation ε of the verdict grows with M (2·M·ε_q): this run's ε is a benchmark's, not a policy to deploy.

Reported: per arm requests, seconds, throughput, p50/p99 latency; the dprag arm's p50 and throughput as ratios to the
baseline; the verdict over every receipt; the cores, the torch threads, the load average before and after, and the
run's wall time. The top-level fields are the dprag arm's (as before the baseline arm was added).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from dprag.audit.client.account import AccountClient  # noqa: E402
from dprag.audit.client.remote import RemoteService  # noqa: E402
from dprag.audit.protocol import commitments as cm  # noqa: E402
from dprag.audit.protocol.policy import Policy  # noqa: E402
from dprag.audit.protocol.replay import recorded_top  # noqa: E402
from dprag.audit.protocol.request import AccountKey  # noqa: E402
from dprag.audit.provider.service import ProviderService  # noqa: E402
from dprag.audit.verify import verify  # noqa: E402
from tests.support.live import launch, start_replica, stop_replicas  # noqa: E402
from tests.support.postgres import free_port  # noqa: E402


def _stats(lat: list[float], secs: float, n: int) -> dict:
    arr = np.array(lat) if lat else np.zeros(1)
    return {
        "requests": n,
        "answered": len(lat),
        "seconds": round(secs, 2),
        "throughput_rps": round(len(lat) / secs, 3) if secs else None,
        "p50_s": round(float(np.percentile(arr, 50)), 3),
        "p99_s": round(float(np.percentile(arr, 99)), 3),
    }


def _post(url: str, question: str) -> dict:
    req = urllib.request.Request(
        url + "/v1/requests",
        data=json.dumps({"question": question}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def _start_baseline(directory: Path, generator: str, embedder: str):
    port = free_port()
    cmd = [sys.executable, str(ROOT / "benchmarks" / "serve_baseline.py"), "--port", str(port), "--dir", str(directory)]
    cmd += ["--generator", generator, "--embedder", embedder]
    return launch(cmd, port)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--accounts", type=int, default=4)
    ap.add_argument("--queries-per-doc", type=int, default=None, help="the policy's M (default: --requests)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    from dprag.rag_adapters.common import torch_threads
    from dprag.rag_adapters.datasets.clinic import generate_clinic_corpus
    from dprag.rag_adapters.embedder import load_minilm
    from dprag.rag_adapters.generator import load_smollm2

    wall0, load_before = time.perf_counter(), _load()
    os.environ.setdefault("DPRAG_TORCH_THREADS", str(torch_threads()))  # one count for both servers
    threads_n = int(os.environ["DPRAG_TORCH_THREADS"])
    work = Path(tempfile.mkdtemp(prefix="dprag-bench-real-"))
    corpus = generate_clinic_corpus(3, n_conditions=8, support_min=10, support_max=20, n_distractors=150)
    questions = [q.question for q in corpus.questions][: a.requests]
    keys = {f"acct{i}": AccountKey.generate() for i in range(a.accounts)}
    names = list(keys)
    per = -(-len(questions) // a.accounts)
    m_docs = a.queries_per_doc or len(questions)
    policy = Policy.recommended(
        "real-1",
        citations_for=("clinic",),
        voters=4,
        private_tokens=2,
        queries_per_account=per,
        max_tokens=16,
        max_queries_per_doc=m_docs,
    )
    t = time.perf_counter()
    svc = ProviderService.create(
        work / "provider",
        policy=policy,
        embedder="all-MiniLM-L6-v2",
        generator=load_smollm2(),
        tenants={"clinic": list(corpus.documents)},
        accounts={n: ("clinic", k.vkey) for n, k in keys.items()},
        allow_weak=True,
    )
    create_s = time.perf_counter() - t
    window, vkey, scale = svc.policy.window, svc.signer.vkey(), int(svc.embedder_descriptor["embedding_scale"])
    svc.close()
    procs = []
    try:
        proc, url = start_replica(
            work / "provider", toy=False, generator="smollm2", extra=("--embedder", "all-MiniLM-L6-v2")
        )
        procs.append(proc)
        bproc, burl = _start_baseline(work / "provider", "smollm2", "all-MiniLM-L6-v2")
        procs.append(bproc)
        emb = load_minilm()
        clients = {
            n: AccountClient(n, window, k, provider_vkey=vkey, embedder=emb, embedding_scale=scale)
            for n, k in keys.items()
        }
        remotes = {n: RemoteService(url, account=n, key=keys[n], timeout=600) for n in names}
        lat = {"dprag": [], "baseline": []}
        secs = {"dprag": 0.0, "baseline": 0.0}
        errors = {"dprag": [], "baseline": []}
        base_docs: dict[int, list[int]] = {}
        lock = threading.Lock()

        def one(arm: str, i: int, qi: int) -> None:
            t0 = time.perf_counter()
            try:
                if arm == "dprag":
                    clients[names[i]].ask(remotes[names[i]], questions[qi])
                else:
                    out = _post(burl, questions[qi])
                    base_docs[qi] = out["documents"]
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors[arm].append(repr(e)[:200])
                return
            with lock:
                lat[arm].append(time.perf_counter() - t0)

        order = []
        for rnd in range(per):
            arms = ("dprag", "baseline") if rnd % 2 == 0 else ("baseline", "dprag")
            order.append("".join(x[0].upper() for x in arms))
            for arm in arms:
                idx = [(i, i + rnd * a.accounts) for i in range(a.accounts) if i + rnd * a.accounts < len(questions)]
                ths = [threading.Thread(target=one, args=(arm, i, qi)) for i, qi in idx]
                t0 = time.perf_counter()
                for th in ths:
                    th.start()
                for th in ths:
                    th.join()
                secs[arm] += time.perf_counter() - t0
    finally:
        stop_replicas(*procs)  # SIGTERM, then SIGKILL after 20 s
    load_after = _load()
    svc = ProviderService.open(work / "provider", embedder="all-MiniLM-L6-v2", generator=load_smollm2())
    bundle = svc.export_bundle(work / "bundle")
    svc.close()
    receipts = work / "receipts.jsonl"
    receipts.write_bytes(b"".join(json.dumps(e).encode() + b"\n" for c in clients.values() for e in c.receipts))
    v = verify(bundle, receipts=receipts)
    # the documents each dprag answer was generated from (the recorded selection), by question
    index = np.frombuffer((work / "provider" / "index" / "clinic.i16").read_bytes(), dtype="<i2").reshape(
        len(corpus.documents), -1
    )
    r = policy.retrieval
    dprag_docs: dict[int, list[int]] = {}
    for line in (bundle / "auditor" / "openings.jsonl").read_bytes().splitlines():
        op = json.loads(line)
        if op.get("kind") != "query":
            continue
        q = np.frombuffer(bytes.fromhex(op["qemb"]), dtype="<i2")
        top = recorded_top(policy, op, cm.integer_scores(index, q, r.score_clip, r.score_shift))
        qi = names.index(op["request"]["account"]) + (int(op["request"]["counter"]) - 1) * a.accounts
        dprag_docs[qi] = [int(i) for i in top if i >= 0]
    both = sorted(set(dprag_docs) & set(base_docs))
    arms = {arm: _stats(lat[arm], secs[arm], len(questions)) for arm in ("baseline", "dprag")}
    for arm in arms:
        arms[arm]["errors"] = errors[arm][:3]
    dp, bl = arms["dprag"], arms["baseline"]
    g = policy.generation
    report = {
        "models": (
            f"all-MiniLM-L6-v2 + SmolLM2-135M-Instruct ({g.mechanism}, m = {g.m}, max {g.max_tokens} tokens, "
            f"MuRAG tau = cosine 0.5, M = {g.max_queries_per_doc})"
        ),
        "cores": os.cpu_count(),
        "torch_threads": threads_n,
        "replicas": 1,
        "accounts": a.accounts,
        "requests": len(questions),
        "answered": dp["answered"],
        "errors": errors["dprag"][:3],
        "create_window_s": round(create_s, 2),
        "seconds": dp["seconds"],
        "throughput_rps": dp["throughput_rps"],
        "p50_s": dp["p50_s"],
        "p99_s": dp["p99_s"],
        "verdict": v.verdict,
        "epsilon": v.epsilon,
        "receipts_accepted": v.checked.get("receipts_accepted"),
        "arms": arms,
        "p50_ratio": round(dp["p50_s"] / bl["p50_s"], 3),
        "throughput_ratio": round(dp["throughput_rps"] / bl["throughput_rps"], 3),
        "rounds": order,
        "documents": {
            "compared": len(both),
            "same": sum(dprag_docs[i] == base_docs[i] for i in both),
            "mean_per_answer_dprag": round(float(np.mean([len(dprag_docs[i]) for i in both])), 2) if both else None,
            "mean_per_answer_baseline": round(float(np.mean([len(base_docs[i]) for i in both])), 2) if both else None,
        },
        "load_avg_before": load_before,
        "load_avg_after": load_after,
        "wall_s": round(time.perf_counter() - wall0, 1),
    }
    print(json.dumps(report))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(report, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
