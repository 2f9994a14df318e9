"""Load and fault runs against ``dprag serve`` replicas (tests/audit/provider/test_replicas.py,
benchmarks/bench_serve.py).

``run_accounts`` drives M toy accounts, each in its own thread with its own ``AccountClient`` over HTTP, each sending
``per_account`` requests one after another (a client never has two requests in flight: its counter is gapless), and
records every request's latency and the client's retries. ``audit_window`` then checks what the run left behind:
the ledger's query leaves are exactly the requests answered (none lost, none twice), every tenant's spend is exactly
what the openings charge, each charge names a document at most once, and the bundle verifies with every receipt.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dprag.audit.client.account import AccountClient
from dprag.audit.client.remote import RemoteService
from dprag.audit.protocol.request import AccountKey
from dprag.audit.testing.toy import HashEmbedder

QUESTIONS = ("asthma protocol inhaler patient", "inhaler drug protocol", "garden weather rain", "contract court case")


@dataclass
class LoadResult:
    sent: int = 0
    answered: int = 0
    retries: int = 0
    errors: list = field(default_factory=list)
    latencies: list = field(default_factory=list)
    first: list = field(default_factory=list)  # the latencies of each account's first request (also in latencies)
    seconds: float = 0.0
    clients: dict = field(default_factory=dict)

    def summary(self) -> dict:
        import numpy as np

        lat = np.array(self.latencies) if self.latencies else np.zeros(1)
        return {
            "sent": self.sent,
            "answered": self.answered,
            "retries": self.retries,
            "errors": len(self.errors),
            "seconds": round(self.seconds, 3),
            "throughput_rps": round(self.answered / self.seconds, 2) if self.seconds else None,
            "p50_ms": round(1e3 * float(np.percentile(lat, 50)), 2),
            "p99_ms": round(1e3 * float(np.percentile(lat, 99)), 2),
            **first_and_rest(self.latencies, self.first),
        }


def first_and_rest(latencies: list, first: list) -> dict:
    """The p50 of the accounts' first requests, and the p99 of all the others: a run's tail split into its start
    (every account's first request reaches the server at once) and its steady state."""
    import numpy as np

    rest = list(latencies)
    for x in first:
        rest.remove(x)
    out = {}
    if first:
        out["first_p50_ms"] = round(1e3 * float(np.percentile(first, 50)), 2)
    if rest:
        out["rest_p99_ms"] = round(1e3 * float(np.percentile(rest, 99)), 2)
    return out


def toy_client(d: Path, account: str, info: dict | None = None) -> AccountClient:
    """The toy directory ``d``'s ``account`` (``make_toy_directory``) as an AccountClient, pinned to ``info`` (a
    service's /v1/info: window, provider_key) or, without it, to what the account's config.json recorded."""
    cfg = json.loads((d / "accounts" / account / "config.json").read_text())
    pins = info or cfg
    return AccountClient(
        account,
        pins["window"],
        AccountKey.from_hex((d / "accounts" / account / "account.key").read_text().strip()),
        provider_vkey=pins["provider_key"],
        origin=pins.get("origin") or cfg.get("origin"),
        embedder=HashEmbedder(32),
        embedding_scale=int(cfg["embedding_scale"]),
    )


def toy_clients(d: Path, n: int | None = None) -> list[AccountClient]:
    """The first ``n`` (default: every) accounts of the toy directory ``d`` in name order (``toy_client``)."""
    return [toy_client(d, a) for a in sorted(p.name for p in (d / "accounts").iterdir())[:n]]


def run_accounts(
    d: Path,
    accounts: list[str],
    urls_of: Callable[[int], list[str]],
    per_account: int,
    *,
    attempts: int = 30,
    during: Callable[[], None] | None = None,
) -> LoadResult:
    """Run the load (see module docstring); ``during()`` runs in its own thread meanwhile (a fault to inject)."""
    res = LoadResult()
    lock = threading.Lock()
    info = RemoteService(urls_of(0)).info()

    def one(i: int, account: str) -> None:
        client = toy_client(d, account, info)
        remote = RemoteService(urls_of(i), account=account, key=client.key, attempts=attempts)
        res.clients[account] = client
        for k in range(per_account):
            q = f"{QUESTIONS[(i + k) % len(QUESTIONS)]} {account} {k}"
            t0 = time.perf_counter()
            with lock:
                res.sent += 1
            try:
                client.ask(remote, q)
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    res.errors.append(f"{account}#{k}: {type(e).__name__}: {str(e)[:200]}")
                continue
            with lock:
                res.answered += 1
                res.latencies.append(time.perf_counter() - t0)
                if k == 0:
                    res.first.append(res.latencies[-1])
        with lock:
            res.retries += remote.retries

    threads = [threading.Thread(target=one, args=(i, a)) for i, a in enumerate(accounts)]
    fault = threading.Thread(target=during) if during else None
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    if fault:
        fault.start()
    for th in threads:
        th.join()
    if fault:
        fault.join()
    res.seconds = time.perf_counter() - t0
    return res


def audit_window(svc, res: LoadResult, out: Path) -> dict:
    """What the run left behind (see module docstring), with the verdict over every receipt the accounts kept."""
    import numpy as np

    from dprag.audit.provider.recovery import check_spend
    from dprag.audit.verify import verify

    check_spend(svc)
    size = svc.ledger.size
    queries, twice = 0, 0
    seen = set()
    for pos in range(1, size):
        leaf = json.loads(svc.ledger.leaf(pos))
        if leaf.get("type") != "query":
            continue
        queries += 1
        op = json.loads(svc.aud.opening(pos))
        key = (op["request"]["account"], op["request"]["counter"])
        twice += key in seen
        seen.add(key)
        for ch in op["charge"]["charges"]:
            if len(set(ch["ids"])) != len(ch["ids"]):
                twice += 1
    charged = sum(int(np.sum(svc.spent_units(t) > 0)) for t in svc.tenants)
    bundle = svc.export_bundle(out / "bundle")
    receipts = out / "receipts.jsonl"
    receipts.write_bytes(b"".join(json.dumps(e).encode() + b"\n" for c in res.clients.values() for e in c.receipts))
    v = verify(bundle, receipts=receipts)
    return {
        "query_leaves": queries,
        "requests_recorded_twice": twice,
        "documents_charged": charged,
        "receipts": sum(len(c.receipts) for c in res.clients.values()),
        "verdict": v.verdict,
        "reasons": v.reasons[:3],
        "receipts_accepted": v.checked.get("receipts_accepted"),
    }
