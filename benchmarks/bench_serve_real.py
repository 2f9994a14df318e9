"""Benchmark: dprag serve with the real models — MiniLM (all-MiniLM-L6-v2) and SmolLM2-135M — one replica, ~20 requests.

    python benchmarks/bench_serve_real.py [--requests 20] [--accounts 4] [--out FILE]

A window over the synthetic clinic corpus (rag_adapters.datasets.clinic, 8 conditions, ~300 records), policy
``Policy.recommended`` with m = 4 voters and 2 private tokens; ``dprag serve --dir D --generator smollm2`` in its own
process; ``--accounts`` accounts, each computing Q with MiniLM itself, send their questions one after another over
HTTP. Reported: requests, seconds, throughput, p50/p99 latency, the verdict over every receipt.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from dprag.audit.account import AccountClient, AccountKey  # noqa: E402
from dprag.audit.api.client import RemoteService  # noqa: E402
from dprag.audit.policy import Policy  # noqa: E402
from dprag.audit.service import ProviderService  # noqa: E402
from dprag.audit.testing.live import start_replica  # noqa: E402
from dprag.audit.verify import verify  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--accounts", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    from dprag.rag_adapters.datasets.clinic import generate_clinic_corpus
    from dprag.rag_adapters.embedder import load_minilm
    from dprag.rag_adapters.generator import load_smollm2

    work = Path(tempfile.mkdtemp(prefix="dprag-bench-real-"))
    corpus = generate_clinic_corpus(3, n_conditions=8, support_min=10, support_max=20, n_distractors=150)
    questions = [q.question for q in corpus.questions][: a.requests]
    keys = {f"acct{i}": AccountKey.generate() for i in range(a.accounts)}
    per = -(-a.requests // a.accounts)
    policy = Policy.recommended(
        "real-1", citations_for=("clinic",), voters=4, private_tokens=2, queries_per_account=per, max_tokens=16
    )
    t = time.perf_counter()
    svc = ProviderService.create(
        work / "provider",
        policy=policy,
        embedder="all-MiniLM-L6-v2",
        generator=load_smollm2(),
        tenants={"clinic": list(corpus.documents)},
        accounts={n: ("clinic", k.vkey) for n, k in keys.items()},
    )
    create_s = time.perf_counter() - t
    window, vkey, scale = svc.policy.window, svc.signer.vkey(), int(svc.embedder_descriptor["embedding_scale"])
    svc.close()
    proc, url = start_replica(
        work / "provider", toy=False, generator="smollm2", extra=("--embedder", "all-MiniLM-L6-v2")
    )
    lat, errors, lock = [], [], threading.Lock()
    emb = load_minilm()
    clients = {
        n: AccountClient(n, window, k, provider_vkey=vkey, embedder=emb, embedding_scale=scale) for n, k in keys.items()
    }

    def run(i: int, name: str) -> None:
        remote = RemoteService(url, account=name, key=keys[name], timeout=600)
        for q in questions[i :: a.accounts]:
            t0 = time.perf_counter()
            try:
                clients[name].ask(remote, q)
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(repr(e)[:200])
                continue
            with lock:
                lat.append(time.perf_counter() - t0)

    try:
        threads = [threading.Thread(target=run, args=(i, n)) for i, n in enumerate(keys)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        secs = time.perf_counter() - t0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    svc = ProviderService.open(work / "provider", embedder="all-MiniLM-L6-v2", generator=load_smollm2())
    bundle = svc.export_bundle(work / "bundle")
    svc.close()
    receipts = work / "receipts.jsonl"
    receipts.write_bytes(b"".join(json.dumps(e).encode() + b"\n" for c in clients.values() for e in c.receipts))
    v = verify(bundle, receipts=receipts)
    arr = np.array(lat) if lat else np.zeros(1)
    report = {
        "models": "all-MiniLM-L6-v2 + SmolLM2-135M-Instruct (m = 4, 2 private tokens, max 16 tokens)",
        "cores": os.cpu_count(),
        "replicas": 1,
        "accounts": a.accounts,
        "requests": len(questions),
        "answered": len(lat),
        "errors": errors[:3],
        "create_window_s": round(create_s, 2),
        "seconds": round(secs, 2),
        "throughput_rps": round(len(lat) / secs, 3),
        "p50_s": round(float(np.percentile(arr, 50)), 3),
        "p99_s": round(float(np.percentile(arr, 99)), 3),
        "verdict": v.verdict,
        "epsilon": v.epsilon,
        "receipts_accepted": v.checked.get("receipts_accepted"),
    }
    print(json.dumps(report))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(report, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
