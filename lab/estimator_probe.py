"""Probe detection at the auditor's defaults (spec/estimator.md §8): how often the coalition-size estimator
flags a coalition of colluders that each send a probe among honest traffic, placed adjacent or spaced out.

Built on the calibration harness of ``lab.estimator_calibration`` (its random streams and θ grids).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dprag.accounting.errors import check_positive_int
from dprag.audit.verify.estimator import component_labels
from dprag.errors import InvalidParameterError
from dprag.lab.estimator_calibration import cell_rng, check_grid

PLACEMENTS = ("adjacent", "spaced")


@dataclass(frozen=True)
class ProbeConfig:
    """A coalition of ``colluders`` accounts, one probe each, mixed into honest traffic of
    ``honest_accounts`` accounts × ``queries_per_account`` distinct pool questions (interleaved uniformly at
    random). ``adjacent``: the probes take consecutive ledger entries at a uniformly random place;
    ``spaced``: consecutive probes are ``spacing`` ledger entries apart. ``window=None``: the estimator's
    default (the whole audit window)."""

    honest_accounts: int = 100
    queries_per_account: int = 100
    colluders: int = 8
    k_max: int = 5
    spacing: int = 100
    thetas: tuple[float, ...] = (0.80, 0.85, 0.90, 0.95, 0.99, 1.0)
    window: int | None = None

    def __post_init__(self):
        check_positive_int("honest_accounts", self.honest_accounts)
        check_positive_int("queries_per_account", self.queries_per_account)
        check_positive_int("colluders", self.colluders, minimum=2)
        check_positive_int("k_max", self.k_max)
        check_positive_int("spacing", self.spacing)
        object.__setattr__(self, "thetas", check_grid(self.thetas))
        if self.window is not None:
            check_positive_int("window", self.window)
        if (self.colluders - 1) * self.spacing + 1 > self.n_honest + self.colluders:
            raise InvalidParameterError("spacing", "spaced probes must fit in the traffic", self.spacing)

    @property
    def n_honest(self) -> int:
        return self.honest_accounts * self.queries_per_account


def probe_trial(
    rng: np.random.Generator, cfg: ProbeConfig, pool: np.ndarray, probes: np.ndarray | None, placement: str = "adjacent"
):
    """One trial: (queries (N, d), account of each query, is-colluder mask). Ledger positions are the row
    numbers. ``probes``: (colluders, d), colluder c asks ``probes[c]`` (None: honest traffic only).
    Honest accounts are 0..H-1, colluders H..H+C-1."""
    H, n, P = cfg.honest_accounts, cfg.queries_per_account, pool.shape[0]
    if P < n:
        raise InvalidParameterError("pool", "must hold at least queries_per_account questions", P)
    ids = np.concatenate([rng.choice(P, size=n, replace=False) for _ in range(H)])
    acc = np.repeat(np.arange(H), n)
    perm = rng.permutation(ids.size)
    x, acc = pool[ids[perm]], acc[perm]
    col = np.zeros(x.shape[0], dtype=bool)
    if probes is None:
        return x, acc, col
    probes = np.asarray(probes, dtype=pool.dtype)
    C = cfg.colluders
    if probes.shape != (C, pool.shape[1]):
        raise InvalidParameterError("probes", "must be a (colluders, d) array", probes.shape)
    N = x.shape[0] + C
    if placement == "adjacent":
        start = int(rng.integers(0, N - C + 1))
        where = start + np.arange(C)
    elif placement == "spaced":
        span = (C - 1) * cfg.spacing
        start = int(rng.integers(0, N - span))
        where = start + cfg.spacing * np.arange(C)
    else:
        raise InvalidParameterError("placement", f"must be one of {PLACEMENTS}", placement)
    out = np.empty((N, pool.shape[1]), dtype=pool.dtype)
    out_acc = np.empty(N, dtype=np.int64)
    is_probe = np.zeros(N, dtype=bool)
    is_probe[where] = True
    out[is_probe], out_acc[is_probe] = probes, H + np.arange(C)
    out[~is_probe], out_acc[~is_probe] = x, acc
    return out, out_acc, is_probe


def probe_detection(
    pool: np.ndarray,
    cells: dict[str, Callable[[np.random.Generator], np.ndarray]],
    cfg: ProbeConfig = ProbeConfig(),
    trials: int = 20,
    seed: int = 0,
    *,
    placements: Sequence[str] = PLACEMENTS,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Run every (pattern, placement) cell and the honest null; per cell and θ: the fraction of trials with
    ĉ > k_max (the verdict's alarm), the fraction in which more than k_max **colluders** share one cluster
    (the coalition itself is caught, whatever honest traffic does), and the mean number of colluders in
    their largest cluster. ``cells[name](rng)`` draws the (colluders, d) probes of one trial. The estimator
    runs at ``cfg.window`` (None: its default, the whole audit window) with exact decisions, on the given
    float rows (quantise before calling to measure int16 material)."""
    trials = check_positive_int("trials", trials)
    th = np.asarray(cfg.thetas)
    k = cfg.k_max
    out: dict = {"config": cfg, "trials": trials, "seed": seed, "thetas": th, "cells": {}}

    def measure(x, acc, is_probe):
        labels = component_labels(x, acc, th, cfg.window)
        c_hat = np.empty(th.size, dtype=np.int64)
        caught = np.empty(th.size, dtype=np.int64)
        for g in range(th.size):
            key = np.unique(labels[g] * (int(acc.max()) + 1) + acc)
            c_hat[g] = max(1, int(np.bincount(key // (int(acc.max()) + 1)).max()))
            if is_probe.any():
                pl = np.unique(labels[g][is_probe] * (int(acc.max()) + 1) + acc[is_probe])
                caught[g] = int(np.bincount(pl // (int(acc.max()) + 1)).max())
            else:
                caught[g] = 0
        return c_hat, caught

    for name in ["honest"] + [f"{c}/{p}" for c in cells for p in placements]:
        rng = cell_rng(seed, name)
        ch = np.empty((trials, th.size), dtype=np.int64)
        cc = np.empty((trials, th.size), dtype=np.int64)
        for t in range(trials):
            if name == "honest":
                x, acc, isp = probe_trial(rng, cfg, pool, None)
            else:
                c, p = name.rsplit("/", 1)
                x, acc, isp = probe_trial(rng, cfg, pool, cells[c](rng), p)
            ch[t], cc[t] = measure(x, acc, isp)
        out["cells"][name] = {
            "c_hat": ch,
            "colluders_linked": cc,
            "alarm": (ch > k).mean(axis=0),
            "caught": (cc > k).mean(axis=0),
            "mean_colluders_linked": cc.mean(axis=0),
            "mean_c_hat": ch.mean(axis=0),
        }
        if progress:
            progress(name)
    return out


def probe_table(res: dict, theta: float) -> str:
    """Markdown: per cell at θ, alarm rate P(ĉ > k_max), caught rate (> k_max colluders in one cluster),
    mean colluders linked, mean ĉ; the honest row is the false-alarm rate."""
    th = res["thetas"]
    g = np.flatnonzero(np.isclose(th, theta))
    if g.size == 0:
        raise InvalidParameterError("theta", "must be one of the run's thetas", theta)
    g = int(g[0])
    cfg, T = res["config"], res["trials"]
    lines = [
        f"θ = {theta:g}, k_max = {cfg.k_max}, {cfg.colluders} colluders, {T} trials per cell",
        "",
        "| cell | alarm P(ĉ > k_max) | coalition caught (> k_max colluders linked) | mean colluders linked | mean ĉ |",
        "|---|---|---|---|---|",
    ]
    for name, r in res["cells"].items():
        caught = "–" if name == "honest" else f"{r['caught'][g]:.2f}"
        linked = "–" if name == "honest" else f"{r['mean_colluders_linked'][g]:.1f}"
        lines.append(f"| {name} | {r['alarm'][g]:.2f} | {caught} | {linked} | {r['mean_c_hat'][g]:.1f} |")
    return "\n".join(lines)
