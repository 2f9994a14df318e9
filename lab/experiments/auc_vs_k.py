"""``dprag experiment auc-vs-k``: membership-inference AUC against coalition size k (paper 002 §4,
spec/experiments-collusion.md).

Three mechanisms (spec/experiments-collusion.md):
* ``scalar``: 002's M* (3.3) with σ from (3.4) (default) or the exact calibration, the pooled-mean adversary,
  the Bayes LR and the multi-target split ρ (``audit.leakage``); beside every cell the exact AUC
  Φ(Δ√(kn)/(√2σ)) and the AUC bound of the certified joint ε; gates P1 (slope) and P3 (tightness).
* ``topk``: the multi-tenant top-K harness of 002 §4.4 / §4.7 (``audit.leakage.topk``), same-tenant and
  external (M4) regimes; statistic = number of queries whose top-K holds the target.
* ``hnsw``: 002 §4.8: FAISS HNSW (``faiss.IndexHNSWFlat``, inner product, M = 64, efConstruction = 200,
  efSearch = 128) over MiniLM embeddings of the Wikipedia summaries and a synthetic set; the background graph is
  built once and cloned for the two worlds, the candidate search is done once per world and reused by every trial;
  noise-then-select over the candidates; the user-observable hit count and the auditor-observable pooled noisy score at
  the planted slot. No prediction and no bound: noise added to approximate-search candidates is not the audited
  mechanism (the candidate set itself is an unnoised function of the index).

Outputs in ``--out``: ``auc_vs_k.csv``, ``auc_vs_k.jsonl``, ``auc_vs_k.png``, ``gates.json`` and ``run.json``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from dprag.accounting import collusion
from dprag.accounting.errors import check_delta, check_positive_int
from dprag.errors import InvalidParameterError
from dprag.lab.auc import mann_whitney_auc
from dprag.lab.experiments.auc_vs_k_report import JSONL_NAME, gate_lines, gates, write_outputs
from dprag.lab.leakage import bounds
from dprag.lab.leakage.adversaries import bayes_llr, split_accounts, split_auc
from dprag.lab.leakage.montecarlo import run_cells, trial_source
from dprag.lab.leakage.scalar import ScalarCell, calibrate_sigma, scalar_trials
from dprag.lab.leakage.topk import (
    REGIMES,
    TABLE_BITS,
    TABLE_TAIL,
    TopKCell,
    score_sensitivity,
    target_in_noisy_top_k,
    topk_trials,
)
from dprag.lab.runinfo import write_run_json

SCHEMA = "dprag.experiment.auc-vs-k/1"
MECHANISMS = ("scalar", "topk", "hnsw")
HNSW_NOTE = (
    "no prediction and no bound: the noise is added to the candidates of an approximate (HNSW) search, "
    "whose candidate set is an unnoised function of the index, so this is not the audited mechanism "
    "(noise on every document's score, then select)"
)
TOPK_NOTE = (
    "no closed-form prediction: top-K is post-processing of the noisy score vector (002 Remark 3.7); "
    "upper_bound is the AUC bound of the certified joint epsilon of the noisy score vectors"
)
DEFAULT_RHOS = (0.5, 0.25)
HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH = 64, 200, 128  # 002 §4.8


@dataclass
class Config:
    mechanism: str
    ks: tuple[int, ...]
    eps: tuple[float, ...]
    trials: int
    seed: str = "0"
    n: int | None = None  # queries per account (default: scalar 10^4, topk/hnsw 200)
    delta_acc: float = 1e-6
    calibration: str | None = None  # scalar default "3.4", topk/hnsw "exact"
    mode: str = "sufficient"  # scalar: "sufficient" or "per-query"
    gap: float = 2.0  # scalar: realised score gap (sensitivity 2, raw cosine)
    rhos: tuple[float, ...] = DEFAULT_RHOS
    regimes: tuple[str, ...] = REGIMES
    K: int = 5
    n_background: int = 50
    d: int = 32
    datasets: tuple[str, ...] = ("wiki", "synthetic")
    synthetic_size: int = 100_000
    wiki_size: int | None = None  # hnsw: a seeded sample of this many summaries (None: all 10,033)
    synthetic_gap: float = 0.4
    candidates: int = 128
    workers: int | None = None
    scheduler: str | None = None
    chunk: int | None = None

    def __post_init__(self):
        if self.mechanism not in MECHANISMS:
            raise InvalidParameterError("mechanism", f"must be one of {MECHANISMS}", self.mechanism)
        if not self.ks or min(self.ks) < 1:
            raise InvalidParameterError("k", "every coalition size must be an integer >= 1", self.ks)
        if not self.eps or min(self.eps) <= 0 or not all(math.isfinite(e) for e in self.eps):
            raise InvalidParameterError("eps_acc", "every value must be finite and > 0", self.eps)
        check_positive_int("trials", self.trials, minimum=2)
        check_delta("delta_acc", self.delta_acc)
        if self.n is None:
            self.n = 10_000 if self.mechanism == "scalar" else 200
        check_positive_int("n", self.n)
        if self.calibration is None:
            self.calibration = "3.4" if self.mechanism == "scalar" else "exact"
        if self.calibration not in ("3.4", "exact"):
            raise InvalidParameterError("calibration", "must be '3.4' or 'exact'", self.calibration)
        if not (0 < self.gap <= 2.0):
            raise InvalidParameterError("gap", "must lie in (0, 2] (raw-cosine sensitivity 2)", self.gap)
        if any(not (0 < r <= 1) for r in self.rhos):
            raise InvalidParameterError("rho", "every split fraction must lie in (0, 1]", self.rhos)
        bad = [r for r in self.regimes if r not in REGIMES]
        if bad or not self.regimes:
            raise InvalidParameterError("regime", f"must be among {REGIMES}", self.regimes)
        bad = [d for d in self.datasets if d not in ("wiki", "synthetic")]
        if bad or not self.datasets:
            raise InvalidParameterError("dataset", "must be among ('wiki', 'synthetic')", self.datasets)
        if self.mechanism == "hnsw" and self.candidates < self.K:
            raise InvalidParameterError("candidates", "must be >= K", self.candidates)
        if self.wiki_size is not None and self.wiki_size < 100:
            raise InvalidParameterError("wiki_size", "must be >= 100", self.wiki_size)
        if not (0 < self.synthetic_gap < 1):
            raise InvalidParameterError("synthetic_gap", "must lie in (0, 1)", self.synthetic_gap)


# ----------------------------------------------------------------------------------------------------------
# HNSW (002 §4.8): candidates computed once per world, noise-then-select over them in every trial
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HnswCell:
    dataset: str
    k: int
    n: int
    eps_acc: float
    delta_acc: float
    sigma: float
    K: int
    cand_in: tuple[int, ...]  # integer scores of the candidates, world in
    cand_out: tuple[int, ...]
    slot_in: int  # position of the planted slot among the candidates (-1: not a candidate)
    slot_out: int
    key: str = field(default="", compare=False)

    def __post_init__(self):
        if not self.key:
            object.__setattr__(
                self,
                "key",
                f"hnsw/{self.dataset}/k={self.k}/n={self.n}/eps={self.eps_acc!r}/"
                f"dacc={self.delta_acc!r}/sigma={self.sigma!r}/K={self.K}",
            )


def hnsw_trials(cell: HnswCell, seed: bytes, start: int, stop: int) -> np.ndarray:
    """Rows [hits_in, hits_out, score_in, score_out]: hit count of the slot in the noisy top-K of the candidates
    and the pooled noisy score at the slot (−inf when the slot is not a candidate of that world)."""
    from dprag.audit.protocol.retrieval import noise_table

    table = noise_table(cell.sigma, TABLE_TAIL, TABLE_BITS)
    m = cell.k * cell.n
    rows = np.empty((stop - start, 4))
    for i, t in enumerate(range(start, stop)):
        for j, (w, cand, slot) in enumerate(
            (("in", cell.cand_in, cell.slot_in), ("out", cell.cand_out, cell.slot_out))
        ):
            s = np.asarray(cand, dtype=np.int64)
            z = table.sample(m * s.size, trial_source(seed, cell.key, t, w)).reshape(m, s.size)
            if slot < 0:
                rows[i, j], rows[i, 2 + j] = 0.0, -math.inf
            else:
                rows[i, j] = int(target_in_noisy_top_k(s, z, slot, cell.K).sum())
                rows[i, 2 + j] = float(s[slot]) + float(z[:, slot].mean())
    return rows


def _hnsw_worlds(cfg: Config, dataset: str, log) -> dict:
    """Build the two HNSW indexes (target in / replaced) and search the probe once in each."""
    from dprag.audit.protocol.commitments import integer_scores, quantise_embeddings
    from dprag.rag_adapters.common import require, torch_threads

    t0 = time.perf_counter()
    rng = np.random.default_rng(
        int.from_bytes(trial_source(cfg.seed.encode(), f"hnsw/{dataset}/setup", 0).bytes(32), "little")
    )
    if dataset == "wiki":
        from dprag.rag_adapters.datasets import load_wiki_fanout
        from dprag.rag_adapters.embedder import EmbeddingCache, MiniLMEmbedder

        docs = list(load_wiki_fanout().documents)
        if cfg.wiki_size is not None and cfg.wiki_size < len(docs):
            docs = [docs[i] for i in np.sort(rng.choice(len(docs), cfg.wiki_size, replace=False))]
        emb = EmbeddingCache().embed_corpus(MiniLMEmbedder(), docs).astype(np.float64)
        emb /= np.linalg.norm(emb, axis=1, keepdims=True)
        # target: a summary with no other summary within cosine 0.90 (002 §4.8's uniqueness screen);
        # decoy: its nearest other summary (the hardest replacement); both leave the background
        for _ in range(1000):
            t = int(rng.integers(len(docs)))
            c = emb @ emb[t]
            c[t] = -2.0
            if c.max() < 0.90:
                break
        dcy = int(np.argmax(c))
        target, decoy = emb[t], emb[dcy]
        bg = np.delete(emb, [t, dcy], axis=0)
        info = {"target_title": docs[t].split("\n", 1)[0], "decoy_title": docs[dcy].split("\n", 1)[0]}
    else:
        d = cfg.d
        bg = rng.standard_normal((cfg.synthetic_size, d))
        bg /= np.linalg.norm(bg, axis=1, keepdims=True)
        target = rng.standard_normal(d)
        target /= np.linalg.norm(target)
        u = rng.standard_normal(d)
        u -= (u @ target) * target
        u /= np.linalg.norm(u)
        c = 1.0 - cfg.synthetic_gap
        decoy = c * target + math.sqrt(1 - c * c) * u
        info = {}
    probe = target
    scale = 1 << 10
    shift = scale.bit_length() - 1
    out = {
        "dataset": dataset,
        "n_documents": int(bg.shape[0] + 1),
        "dimension": int(bg.shape[1]),
        "realised_gap_cosine": float(1.0 - target @ decoy),
        **info,
    }
    qq = quantise_embeddings(probe[None, :], scale)[0]
    # the background graph is built once and cloned (faiss.clone_index); each world then inserts its slot last
    faiss = require("faiss", "the HNSW experiment")
    faiss.omp_set_num_threads(torch_threads())
    tb = time.perf_counter()
    base = faiss.IndexHNSWFlat(bg.shape[1], HNSW_M, faiss.METRIC_INNER_PRODUCT)
    base.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    base.add(np.ascontiguousarray(bg, dtype=np.float32))
    out["build_seconds"] = time.perf_counter() - tb
    log(f"hnsw {dataset}: built the background graph over {bg.shape[0]} x {bg.shape[1]} in {out['build_seconds']:.1f}s")
    for w, x in (("in", target), ("out", decoy)):
        idx = faiss.clone_index(base)
        idx.add(np.ascontiguousarray(x[None, :], dtype=np.float32))  # the planted slot is the last id
        idx.hnsw.efSearch = HNSW_EF_SEARCH
        ts = time.perf_counter()
        _, ids = idx.search(np.ascontiguousarray(probe[None, :], dtype=np.float32), cfg.candidates)
        search = time.perf_counter() - ts
        ids = ids[0][ids[0] >= 0]
        docs_c = np.concatenate([bg, x[None, :]])[ids]
        sc = integer_scores(quantise_embeddings(docs_c, scale), qq, (0, scale * scale), shift)
        slot = np.flatnonzero(ids == bg.shape[0])
        out[w] = {
            "scores": tuple(int(v) for v in sc),
            "slot": int(slot[0]) if slot.size else -1,
            "search_seconds": search,
        }
        log(
            f"hnsw {dataset} world {w}: slot "
            f"{'at candidate ' + str(out[w]['slot']) if slot.size else 'NOT among the candidates'}"
        )
        del idx
    out["setup_seconds"] = time.perf_counter() - t0
    return out


# ----------------------------------------------------------------------------------------------------------
# cells, rows and gates
# ----------------------------------------------------------------------------------------------------------


def build_cells(cfg: Config, log=lambda s: None) -> tuple[list, dict]:
    cells, setup = [], {}
    if cfg.mechanism == "scalar":
        for e in cfg.eps:
            sigma = calibrate_sigma(e, cfg.delta_acc, cfg.n, 2.0, cfg.calibration)
            for k in cfg.ks:
                cells.append(
                    ScalarCell(
                        k,
                        cfg.n,
                        e,
                        cfg.delta_acc,
                        sigma,
                        gap=cfg.gap,
                        sensitivity=2.0,
                        rhos=tuple(cfg.rhos),
                        mode=cfg.mode,
                        calibration=cfg.calibration,
                    )
                )
    elif cfg.mechanism == "topk":
        sens = score_sensitivity(1 << 10)
        for regime in cfg.regimes:
            for e in cfg.eps:
                sigma = calibrate_sigma(e, cfg.delta_acc, cfg.n, sens, cfg.calibration)
                for k in cfg.ks:
                    cells.append(
                        TopKCell(
                            k,
                            cfg.n,
                            e,
                            cfg.delta_acc,
                            sigma,
                            regime=regime,
                            K=cfg.K,
                            n_background=cfg.n_background,
                            d=cfg.d,
                            calibration=cfg.calibration,
                        )
                    )
    else:
        sens = score_sensitivity(1 << 10)
        for ds in cfg.datasets:
            w = _hnsw_worlds(cfg, ds, log)
            setup[ds] = {k: v for k, v in w.items() if k not in ("in", "out")}
            setup[ds].update({f"{x}_{y}": w[x][y] for x in ("in", "out") for y in ("slot", "search_seconds")})
            for e in cfg.eps:
                sigma = calibrate_sigma(e, cfg.delta_acc, cfg.n, sens, cfg.calibration)
                for k in cfg.ks:
                    cells.append(
                        HnswCell(
                            ds,
                            k,
                            cfg.n,
                            e,
                            cfg.delta_acc,
                            sigma,
                            cfg.K,
                            w["in"]["scores"],
                            w["out"]["scores"],
                            w["in"]["slot"],
                            w["out"]["slot"],
                        )
                    )
    return cells, setup


def _fn(mechanism: str):
    return {"scalar": scalar_trials, "topk": topk_trials, "hnsw": hnsw_trials}[mechanism]


def _within(auc, se, pred):
    if pred is None or se <= 0:
        return None, None, None
    z = (auc - pred) / se
    return z, abs(z) <= 1.0, abs(z) <= 2.0


def rows_for(cfg: Config, cell, data: np.ndarray, seconds: float) -> list[dict]:
    base = {
        "schema": SCHEMA,
        "mechanism": cfg.mechanism,
        "k": cell.k,
        "eps_acc": cell.eps_acc,
        "n": cell.n,
        "delta_acc": cell.delta_acc,
        "trials": int(data.shape[0]),
        "sigma": cell.sigma,
        "calibration": cfg.calibration,
        "sqrt_k_eps_acc": math.sqrt(cell.k) * cell.eps_acc,
        "seconds": seconds,
    }
    out = []
    if cfg.mechanism == "scalar":
        est = mann_whitney_auc(data[:, 0], data[:, 1])
        pred = collusion.pooled_mean_auc(cell.k, cell.n, cell.sigma, cell.gap)
        ub = bounds.certified_auc_bound(cell.k, cell.n, cell.sigma, cell.sensitivity)
        z, w1, w2 = _within(est.auc, est.stderr, pred)
        m = cell.k * cell.n
        lr_in = bayes_llr(data[:, 0], 1.0, 1.0 - cell.gap, cell.sigma, m)
        lr_out = bayes_llr(data[:, 1], 1.0, 1.0 - cell.gap, cell.sigma, m)
        lr = mann_whitney_auc(lr_in, lr_out)
        alts = {
            "bayes-lr": {
                "auc": lr.auc,
                "stderr": lr.stderr,
                "predicted": pred,
                "identical_to_pooled_mean": bool(lr.auc == est.auc),
            }
        }
        for j, r in enumerate(cell.rhos):
            e2 = mann_whitney_auc(data[:, 2 + 2 * j], data[:, 3 + 2 * j])
            alts[f"split-{r:g}"] = {
                "auc": e2.auc,
                "stderr": e2.stderr,
                "rho": r,
                "k_target": split_accounts(cell.k, r),
                "predicted": split_auc(cell.k, cell.n, cell.sigma, cell.gap, r),
            }
        out.append(
            {
                **base,
                "statistic": "pooled-mean",
                "gap": cell.gap,
                "sensitivity": cell.sensitivity,
                "mode": cell.mode,
                **est.to_dict(),
                "predicted": pred,
                "predicted_formula": "Phi(gap*sqrt(k*n)/(sqrt(2)*sigma)) (collusion.pooled_mean_auc)",
                **ub,
                "gdp_bound": bounds.gdp_auc_bound(cell.k, cell.n, cell.sigma, cell.sensitivity),
                "z": z,
                "within_1se": w1,
                "within_2se": w2,
                "alternatives": alts,
            }
        )
    elif cfg.mechanism == "topk":
        from dprag.audit.protocol.retrieval import noise_table

        est = mann_whitney_auc(data[:, 0], data[:, 1])
        tv = noise_table(cell.sigma, TABLE_TAIL, TABLE_BITS).tv_distance
        ub = bounds.certified_auc_bound(cell.k, cell.n, cell.sigma, cell.sensitivity, "discrete", tv)
        out.append(
            {
                **base,
                "statistic": "hits",
                "regime": cell.regime,
                "K": cell.K,
                "n_background": cell.n_background,
                "d": cell.d,
                "sensitivity": cell.sensitivity,
                **est.to_dict(),
                "predicted": None,
                "predicted_note": TOPK_NOTE,
                **ub,
                "gdp_bound": bounds.gdp_auc_bound(cell.k, cell.n, cell.sigma, cell.sensitivity),
                "mean_hits_in": float(data[:, 0].mean()),
                "mean_hits_out": float(data[:, 1].mean()),
                "z": None,
                "within_1se": None,
                "within_2se": None,
            }
        )
    else:
        for stat, cols, who in (("hits", (0, 1), "user"), ("pooled-noisy-score", (2, 3), "auditor")):
            est = mann_whitney_auc(data[:, cols[0]], data[:, cols[1]])
            out.append(
                {
                    **base,
                    "statistic": stat,
                    "observer": who,
                    "dataset": cell.dataset,
                    "K": cell.K,
                    "candidates": len(cell.cand_in),
                    "slot_in": cell.slot_in,
                    "slot_out": cell.slot_out,
                    **est.to_dict(),
                    "predicted": None,
                    "predicted_note": HNSW_NOTE,
                    "upper_bound": None,
                    "z": None,
                    "within_1se": None,
                    "within_2se": None,
                }
            )
    return out


def run(cfg: Config, out_dir: str | os.PathLike, *, progress: bool = True, log=None, on_row=None) -> dict:
    """Run the experiment, write every output file, return {"rows", "gates", "run"}."""
    log = log or (lambda s: print(s, file=sys.stderr))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    cells, setup = build_cells(cfg, log)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(
            total=len(cells) * cfg.trials,
            desc=f"auc-vs-k {cfg.mechanism}",
            unit="trial",
            file=sys.stderr,
            smoothing=0.05,
        )
    t_mc = time.perf_counter()
    data = run_cells(
        _fn(cfg.mechanism),
        cells,
        cfg.trials,
        cfg.seed.encode(),
        scheduler=cfg.scheduler,
        workers=cfg.workers,
        chunk=cfg.chunk,
        progress=(bar.update if bar else None),
    )
    mc_seconds = time.perf_counter() - t_mc
    if bar:
        bar.close()
    per_cell = mc_seconds / max(1, len(cells))  # cells run interleaved: an average, not a per-cell measurement
    rows = []
    for cell, d in zip(cells, data, strict=False):
        for r in rows_for(cfg, cell, d, per_cell):
            rows.append(r)
            if on_row:
                on_row(r)
    with (out / JSONL_NAME).open("w", encoding="utf-8") as f:  # the measurements first, whatever follows
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    g = gates(rows)
    for line in gate_lines(g):
        log(line)
    cfg_d = asdict(cfg)
    runinfo = {
        "schema": "dprag.experiment.auc-vs-k.run/1",
        "argv": sys.argv[1:],
        "config": cfg_d,
        "seed": cfg.seed,
        "setup": setup,
        "engine": ("dask " + str(cfg.scheduler))
        if cfg.scheduler
        else f"local processes ({cfg.workers or os.cpu_count()})",
        "monte_carlo_seconds": mc_seconds,
        "total_seconds": time.perf_counter() - t_start,
        "threads": {
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "DPRAG_TORCH_THREADS": os.environ.get("DPRAG_TORCH_THREADS"),
        },
        "neighbouring": collusion.NEIGHBOURING,
        "sensitivity_note": collusion.SENSITIVITY_NOTE,
    }
    title = (
        f"{cfg.mechanism}: n={cfg.n}, T={cfg.trials}, delta_acc={cfg.delta_acc:g}, calibration {cfg.calibration}"
        + (f", gap {cfg.gap:g} (sensitivity 2)" if cfg.mechanism == "scalar" else "")
    )
    write_outputs(out, rows, title)
    (out / "gates.json").write_text(json.dumps(g, indent=1, sort_keys=True))
    runinfo = write_run_json(out, runinfo, seed=cfg.seed)
    return {"rows": rows, "gates": g, "run": runinfo}


# ----------------------------------------------------------------------------------------------------------
# command line: dprag experiment auc-vs-k (registered in experiments/cli.py)
# ----------------------------------------------------------------------------------------------------------

import click  # noqa: E402

from dprag.lab.experiments.options import Fail, parse_list  # noqa: E402


@click.command("auc-vs-k")
@click.option("--mechanism", type=click.Choice(MECHANISMS), required=True)
@click.option("--k", "k_text", default="1,2,5,10,20", show_default=True, help="coalition sizes")
@click.option("--eps-acc", "eps_text", default="1,2,4", show_default=True, help="per-account epsilon values")
@click.option("--trials", type=int, default=1000, show_default=True, help="Monte Carlo trials T per cell")
@click.option("--n", type=int, default=None, help="queries per account (default: scalar 10000, topk/hnsw 200)")
@click.option("--delta-acc", type=float, default=1e-6, show_default=True)
@click.option(
    "--calibration",
    type=click.Choice(["3.4", "exact"]),
    default=None,
    help="sigma: 002 (3.4) (scalar default) or exact per-account (eps_acc, delta_acc) (topk/hnsw default)",
)
@click.option(
    "--mode",
    type=click.Choice(["sufficient", "per-query"]),
    default="sufficient",
    show_default=True,
    help="scalar: draw block sums (exact sufficient statistic) or every query's noise",
)
@click.option(
    "--gap",
    type=float,
    default=2.0,
    show_default=True,
    help="scalar: realised score gap s_in - s_out (raw cosine, sensitivity 2; 2 = x*' = -q*)",
)
@click.option(
    "--rho",
    "rho_text",
    default="0.5,0.25",
    show_default=True,
    help="scalar: split fractions (002 §4.6); 'none' for none",
)
@click.option("--regimes", default="same-tenant,external-m4", show_default=True, help="topk: collusion regimes")
@click.option("--datasets", default="wiki,synthetic", show_default=True, help="hnsw: wiki and/or synthetic")
@click.option("--synthetic-size", type=int, default=100_000, show_default=True, help="hnsw: synthetic vectors")
@click.option(
    "--synthetic-gap",
    type=float,
    default=0.4,
    show_default=True,
    help="hnsw: cosine gap between target and decoy in the synthetic set",
)
@click.option(
    "--wiki-size",
    type=int,
    default=None,
    help="hnsw: embed a seeded sample of this many Wikipedia summaries (default: all 10,033)",
)
@click.option("--candidates", type=int, default=128, show_default=True, help="hnsw: candidates per search")
@click.option("--seed", default="0", show_default=True)
@click.option("--workers", type=int, default=None, help="local processes (default: CPU count; 1 = in process)")
@click.option("--scheduler", default=None, help="Dask scheduler address (tcp://host:8786): run trials there")
@click.option("--chunk", type=int, default=None, help="trials per task")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True)
@click.option(
    "--json", "as_json", is_flag=True, help="print one JSON object per row (schema dprag.experiment.auc-vs-k/1)"
)
@click.option("--progress/--no-progress", default=True, show_default=True)
def auc_vs_k_command(
    mechanism,
    k_text,
    eps_text,
    trials,
    n,
    delta_acc,
    calibration,
    mode,
    gap,
    rho_text,
    regimes,
    datasets,
    synthetic_size,
    synthetic_gap,
    wiki_size,
    candidates,
    seed,
    workers,
    scheduler,
    chunk,
    out_dir,
    as_json,
    progress,
):
    """Membership-inference AUC against coalition size k (paper 002 §4): scalar M*, top-K harness, HNSW."""
    try:
        try:
            cfg = Config(
                mechanism=mechanism,
                ks=parse_list("--k", k_text, int),
                eps=parse_list("--eps-acc", eps_text, float),
                trials=trials,
                seed=str(seed),
                n=n,
                delta_acc=delta_acc,
                calibration=calibration,
                mode=mode,
                gap=gap,
                rhos=parse_list("--rho", rho_text, float) if rho_text.strip() not in ("", "none") else (),
                regimes=tuple(x.strip() for x in regimes.split(",") if x.strip()),
                datasets=tuple(x.strip() for x in datasets.split(",") if x.strip()),
                synthetic_size=synthetic_size,
                synthetic_gap=synthetic_gap,
                wiki_size=wiki_size,
                candidates=candidates,
                workers=workers,
                scheduler=scheduler,
                chunk=chunk,
            )
            if chunk is not None and chunk < 1:
                raise InvalidParameterError("chunk", "must be >= 1", chunk)
            if synthetic_size < 1000:
                raise InvalidParameterError("synthetic_size", "must be >= 1000", synthetic_size)
        except InvalidParameterError as e:
            flag = {
                "eps_acc": "--eps-acc",
                "k": "--k",
                "delta_acc": "--delta-acc",
                "rho": "--rho",
                "regime": "--regimes",
                "dataset": "--datasets",
            }.get(e.field, "--" + e.field.replace("_", "-"))
            raise click.BadParameter(e.rule if hasattr(e, "rule") else str(e), param_hint=flag) from None
        echo = (lambda r: click.echo(json.dumps(r, sort_keys=True))) if as_json else None
        run(cfg, out_dir, progress=progress, on_row=echo, log=lambda s: click.echo(s, err=True))
    except click.BadParameter:
        raise
    except InvalidParameterError as e:
        raise Fail(str(e)) from None
    except OSError as e:
        raise Fail(f"{e}") from None
