"""Benchmark: durable charges per second on SqliteBudgetStore, one transaction per query vs group commit.

    python benchmarks/bench_store.py [--docs 1000000] [--per-query 50] [--queries 512]

Every configuration charges the same stream of queries (50 documents each, Gaussian event, budget of
M = 5 charges per document, 156 orders) on a fresh database; a query counts as done when the call that
charged it returned, i.e. when its charge is durable. Baseline: ``try_charge`` per query with
``synchronous=FULL`` (one fsync'd commit per query). Group commit: ``try_charge_many`` over batches of B
queries (one commit per batch; each query still admitted or refused on its own). For reference, the same
without the per-commit fsync (``synchronous=NORMAL``: durable against process crashes, not power loss) and
the in-memory store. The benchmark checks that every configuration ends with identical recorded spend.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from dprag.accounting.events import GaussianEvent  # noqa: E402
from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter  # noqa: E402
from dprag.accounting.stores import MemoryBudgetStore, SqliteBudgetStore  # noqa: E402

EVENT = GaussianEvent(2.0)
BUDGET = FilterBudget.for_queries(5, EVENT)


def stream_of(n_docs: int, per_query: int, queries: int, seed: int = 11) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    hot = rng.choice(n_docs, size=min(5000, n_docs), replace=False)
    out = []
    for _ in range(queries):
        k = int(per_query * 0.7)
        ids = np.concatenate([rng.choice(hot, size=k, replace=False), rng.choice(n_docs, size=per_query - k)])
        out.append(np.unique(ids))
    return out


def run(f: IndividualRenyiFilter, stream, batch: int) -> float:
    t0 = time.perf_counter()
    if batch == 1:
        for ids in stream:
            f.try_charge(ids, EVENT)
    else:
        for i in range(0, len(stream), batch):
            f.try_charge_many([(ids, EVENT) for ids in stream[i : i + batch]])
    return time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=10**6)
    ap.add_argument("--per-query", type=int, default=50)
    ap.add_argument("--queries", type=int, default=512)
    args = ap.parse_args(argv)
    stream = stream_of(args.docs, args.per_query, args.queries)
    touched = np.unique(np.concatenate(stream))

    configs = [("FULL", 1), ("FULL", 8), ("FULL", 32), ("FULL", 128), ("NORMAL", 1), ("NORMAL", 32), ("memory", 1)]
    results, finals = [], []
    with tempfile.TemporaryDirectory() as d:
        for sync, batch in configs:
            if sync == "memory":
                store = MemoryBudgetStore(args.docs)
            else:
                store = SqliteBudgetStore(os.path.join(d, f"{sync}_{batch}.db"), args.docs, synchronous=sync)
            f = IndividualRenyiFilter(store, BUDGET)
            t = run(f, stream, batch)
            finals.append(f.spent_units(touched))
            store.close()
            results.append((sync, batch, t))
    assert all(np.array_equal(finals[0], x) for x in finals[1:]), "configurations disagree on the recorded spend"

    base_qps = len(stream) / results[0][2]
    print(
        f"{len(stream)} queries × ≤{args.per_query} docs, N = {args.docs:,}, {BUDGET.width} orders; "
        "identical final spend in every configuration: yes"
    )
    print(f"{'store / synchronous':<24}{'queries per commit':>20}{'durable queries/s':>20}{'× baseline':>12}")
    for sync, batch, t in results:
        qps = len(stream) / t
        name = "MemoryBudgetStore" if sync == "memory" else f"SQLite {sync}"
        note = "  (not durable)" if sync == "memory" else ("  (process-crash durable only)" if sync == "NORMAL" else "")
        print(f"{name:<24}{batch:>20}{qps:>20.0f}{qps / base_qps:>11.1f}×{note}")


if __name__ == "__main__":
    main()
