"""Benchmark: how well one query's serve time tells two neighbouring corpora apart (spec/threat-model.md §2).

    python benchmarks/bench_timing.py [--model toy|smollm2] [--serves 1000] [--release-seconds S] [--out FILE]

Two windows are open side by side over neighbouring corpora (replace-one): D holds one record that answers the
probe question, D' holds an unrelated record in its place; everything else (the other records, the seed, the
account, the policy) is the same. The same account-signed probe is served alternately in D and D' ``--serves``
times each (the provider's view: ``ProviderService.serve``, from a verified request to the stored answer). An
observer who sees only the serve time guesses the corpus with the best threshold on the even-numbered serves;
the benchmark reports that guess's accuracy on the odd-numbered ones with its Wilson 95% interval (0.5 is
chance). Arms, measured in one run:

- ``skip-empty`` (the named baseline, v2's charge path): a charge of no document skips the store, so only D's
  serve writes and syncs a charge;
- ``constant-work``: every charge takes the store's durable step (``IndividualRenyiFilter.charge_nothing``);
- ``constant-time`` (with ``--release-seconds``): constant work, and every answer released at the period's
  deadline (``ProviderService.release``).

With ``--model smollm2`` the generator is SmolLM2-135M (m = 4 voters, 2 private tokens): its voters' prefill
reads the charged record, so the residual without constant-time release includes the prompt length.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from dprag.accounting.filters import IndividualRenyiFilter  # noqa: E402
from dprag.audit.client.account import AccountClient  # noqa: E402
from dprag.audit.provider.service import ProviderService  # noqa: E402
from dprag.audit.testing import window as fx  # noqa: E402
from dprag.audit.testing.toy import HashEmbedder, ToyGenerator  # noqa: E402

PROBE = "asthma protocol inhaler patient dose"
ANSWER = "patient 7 asthma protocol inhaler drug dose ANSWER: zorvatin 20 mg twice daily with spacer"
UNRELATED = "case 7 contract dispute court hearing adjourned ANSWER: settled out of court in march"


def corpora() -> tuple[list[str], list[str]]:
    base = list(fx.LEGAL)  # 20 legal records and distractors: nothing else answers the probe
    return base + [ANSWER], base + [UNRELATED]


PER_ACCOUNT = 50  # requests per account (n): the serves rotate over ceil(serves / 50) accounts


def open_window(
    d: Path, docs: list[str], generator, serves: int, m: int
) -> tuple[ProviderService, list[AccountClient]]:
    pol = fx.toy_policy(n=PER_ACCOUNT, max_queries_per_doc=serves + 8, k_max=1)
    pol = replace(pol, generation=replace(pol.generation, m=m, max_private_tokens=2, tau=330))
    emb = HashEmbedder(32)
    svc = ProviderService.create(
        d,
        policy=pol,
        embedder=emb,
        embedder_descriptor=emb.descriptor({"clinic": len(docs)}),
        generator=generator,
        tenants={"clinic": docs},
        accounts=fx.registry({f"u{i}": "clinic" for i in range(-(-serves // PER_ACCOUNT))}),
        seed=b"\x07" * 32,
        allow_weak=True,
    )
    return svc, [fx.client(svc, a) for a in sorted(svc.accounts, key=lambda a: int(a[1:]))]


@contextlib.contextmanager
def skip_empty_charges():
    """v2's charge path: a charge of nothing never reaches the store."""
    saved = IndividualRenyiFilter.charge_nothing

    def skip(self, cost):
        empty = np.zeros(0, dtype=np.int64)
        from dprag.accounting.filters import ChargeResult

        return ChargeResult(empty, empty, np.zeros(0, bool), self.cost_units(cost))

    IndividualRenyiFilter.charge_nothing = skip
    try:
        yield
    finally:
        IndividualRenyiFilter.charge_nothing = saved


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return c - h, c + h


def distinguish(t_d: np.ndarray, t_d2: np.ndarray) -> dict:
    """Best threshold (and side) on the even serves, its accuracy on the odd ones."""
    tr = np.concatenate([t_d[0::2], t_d2[0::2]])
    lab = np.concatenate([np.ones(t_d[0::2].size), np.zeros(t_d2[0::2].size)])
    best = (0.0, 0.0, 1)
    for thr in np.unique(tr):
        for side in (1, -1):
            acc = float(np.mean(((side * (tr - thr)) > 0) == (lab == 1)))
            best = max(best, (acc, float(thr), side))
    _, thr, side = best
    te = np.concatenate([t_d[1::2], t_d2[1::2]])
    lab_te = np.concatenate([np.ones(t_d[1::2].size), np.zeros(t_d2[1::2].size)])
    k = int(np.sum(((side * (te - thr)) > 0) == (lab_te == 1)))
    lo, hi = wilson(k, te.size)
    return {"accuracy": k / te.size, "ci95": [lo, hi], "test_serves": int(te.size), "threshold_s": thr}


def run_arm(name: str, workdir: Path, generator, serves: int, m: int, release: float | None) -> dict:
    d_docs, d2_docs = corpora()
    svc, alice = open_window(workdir / f"{name}-D", d_docs, generator, serves, m)
    svc2, alice2 = open_window(workdir / f"{name}-D2", d2_docs, generator, serves, m)
    for s in (svc, svc2):
        s.release.set(release)
    times = {"D": [], "D2": []}
    charged = {"D": 0, "D2": 0}
    for i in range(serves):
        for key, s, a in (
            (("D", svc, alice), ("D2", svc2, alice2)) if i % 2 == 0 else (("D2", svc2, alice2), ("D", svc, alice))
        ):
            req = a[i // PER_ACCOUNT].request(f"{PROBE} {i}")
            t0 = time.perf_counter()
            s.serve(req)
            times[key].append(time.perf_counter() - t0)
    for key, s in (("D", svc), ("D2", svc2)):
        charged[key] = int(s.spent_units("clinic").sum())
    overruns = svc.release.overruns + svc2.release.overruns
    svc.close()
    svc2.close()
    t_d, t_d2 = np.array(times["D"]), np.array(times["D2"])
    out = {
        "arm": name,
        "serves_per_corpus": serves,
        "median_ms": {"D": 1e3 * float(np.median(t_d)), "D2": 1e3 * float(np.median(t_d2))},
        "charged_units": charged,
        "release_seconds": release,
        "release_overruns": overruns,
    }
    out.update(distinguish(t_d, t_d2))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=("toy", "smollm2"), default="toy")
    ap.add_argument("--serves", type=int, default=1000, help="serves per corpus and arm")
    ap.add_argument("--release-seconds", type=float, default=None, help="add the constant-time arm with this period")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--arms", default="skip-empty,constant-work", help="which of skip-empty, constant-work to run (comma-separated)"
    )
    a = ap.parse_args(argv)
    if a.model == "smollm2":
        from dprag.rag_adapters.generator import load_smollm2

        generator, m = load_smollm2(), 4
    else:
        generator, m = ToyGenerator(), 10
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        arms = a.arms.split(",")
        if "skip-empty" in arms:
            with skip_empty_charges():
                results.append(run_arm("skip-empty", work, generator, a.serves, m, None))
        if "constant-work" in arms:
            results.append(run_arm("constant-work", work, generator, a.serves, m, None))
        if a.release_seconds:
            results.append(run_arm("constant-time", work, generator, a.serves, m, a.release_seconds))
    report = {"model": a.model, "m": m, "load": os.getloadavg(), "arms": results}
    for r in results:
        lo, hi = r["ci95"]
        print(
            f"{a.model:8s} {r['arm']:14s} accuracy {r['accuracy']:.3f} (95% CI {lo:.3f}-{hi:.3f}, "
            f"{r['test_serves']} test serves); median D {r['median_ms']['D']:.2f} ms, D' {r['median_ms']['D2']:.2f}"
            f" ms; charged units D {r['charged_units']['D']}, D' {r['charged_units']['D2']}"
            + (f"; overruns {r['release_overruns']}" if r["release_seconds"] else "")
        )
    if a.out:
        a.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
