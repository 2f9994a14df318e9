"""The gates and outputs of ``dprag experiment auc-vs-k`` (spec/experiments-collusion.md): the pass/fail gates
over the rows, the CSV / JSONL files and the AUC-against-k plot.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy.stats import chi2, norm

CSV_NAME, JSONL_NAME, PNG_NAME = "auc_vs_k.csv", "auc_vs_k.jsonl", "auc_vs_k.png"

#: a gate decides only if its predicted effect would pass its z > 2 test with at least this probability
GATE_POWER = 0.95
#: the resolution of a z > 2 test, in standard errors: an effect of 2 + z_0.95 = 3.64 SE passes w.p. 0.95
RESOLUTION_SE = 2.0 + float(norm.isf(1.0 - GATE_POWER))
UNDECIDED = "too few trials to decide"


def _trials_needed(trials: int | None, resolution: float, effect: float) -> int | None:
    """Trials at which ``resolution`` (∝ 1/√T) falls to ``effect``; None if unknown or out of reach (more than
    10^12·T: a zero effect up to rounding)."""
    if not trials or effect <= resolution * 1e-6:
        return None
    return math.ceil(trials * (resolution / effect) ** 2)


def _max_trials(rows: Sequence[dict]) -> int | None:
    ts = [r["trials"] for r in rows if r.get("trials")]
    return max(ts) if ts else None


def _group(row: dict) -> tuple:
    return (row.get("regime") or row.get("dataset") or "", row["statistic"], row["eps_acc"])


def gates(rows: Sequence[dict]) -> dict:
    """002's P1 (slope in √k, per curve) and, for the scalar mechanism, P3 (tightness), as evaluated.

    P1: weighted least squares AUC = a + b√k over a curve's cells (weights 1/SE²); passes iff b > 0 with
    b/SE(b) > 2 and the linear fit is not rejected (χ² goodness of fit p > 0.01).
    P3 (scalar): every cell's AUC is above ½ by more than 2 SE and below the certified upper bound (within 2 SE);
    reports the range of (AUC − ½)/(bound − ½) (the "constant factor").

    Resolution: a gate's z > 2 test sees an effect of ``RESOLUTION_SE`` SE with probability ``GATE_POWER``. Where
    the rows predict the effect (``predicted`` on every row of a P1 curve: the same fit of the predicted AUCs; a
    P3 cell: predicted − ½) and it is below that resolution, the gate's ``status`` is "undecided" (too few
    trials; ``trials_needed`` scales T by (resolution/effect)², SE ∝ 1/√T), never "pass" or "fail". ``pass``
    (kept for old readers) is true iff ``status`` is "pass".
    """
    out: dict = {"P1": [], "P3": None, "gate_power": GATE_POWER, "resolution_se": RESOLUTION_SE}
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault(_group(r), []).append(r)
    for g, rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        rs = sorted(rs, key=lambda r: r["k"])
        if len(rs) < 3:
            continue
        x = np.sqrt([r["k"] for r in rs])
        y = np.array([r["auc"] for r in rs])
        # SE floored at 1e-4: a saturated cell (AUC 0 or 1, or all ties) has DeLong SE 0
        w = 1.0 / np.maximum(np.array([r["stderr"] for r in rs]), 1e-4) ** 2
        X = np.stack([np.ones_like(x), x], axis=1)
        cov = np.linalg.pinv(X.T @ (X * w[:, None]))
        a, b = cov @ (X.T @ (w * y))
        resid = y - (a + b * x)
        c2 = float(np.sum(w * resid**2))
        dof = len(rs) - 2
        p = float(chi2.sf(c2, dof))
        se_b = math.sqrt(cov[1, 1])
        preds = [r.get("predicted") for r in rs]
        b_pred = None if any(v is None for v in preds) else float((cov @ (X.T @ (w * np.array(preds))))[1])
        resolution = RESOLUTION_SE * se_b
        trials = _max_trials(rs)
        if b_pred is not None and b_pred < resolution:
            status, needed = "undecided", _trials_needed(trials, resolution, b_pred)
        else:
            status, needed = ("pass" if se_b > 0 and b / se_b > 2 and p > 0.01 else "fail"), None
        out["P1"].append(
            {
                "curve": {"group": g[0], "statistic": g[1], "eps_acc": g[2]},
                "slope": float(b),
                "slope_stderr": se_b,
                "slope_z": float(b / se_b) if se_b > 0 else None,
                "chi2": c2,
                "dof": dof,
                "p_linear": p,
                "pass": status == "pass",
                "status": status,
                "predicted_slope": b_pred,
                "resolution": resolution,
                "trials": trials,
                "trials_needed": needed,
            }
        )
    sc = [r for r in rows if r["mechanism"] == "scalar"]
    if sc:
        above = [r for r in sc if r["auc"] - 0.5 > 2 * r["stderr"]]
        below_ub = [r for r in sc if r["auc"] <= r["upper_bound"] + 2 * r["stderr"]]
        ratios = [(r["auc"] - 0.5) / (r["upper_bound"] - 0.5) for r in sc if r["upper_bound"] > 0.5]
        small = [r for r in sc if r.get("predicted") is not None and r["predicted"] - 0.5 < RESOLUTION_SE * r["stderr"]]
        undecided = [
            {
                "k": r["k"],
                "eps_acc": r["eps_acc"],
                "predicted": r["predicted"],
                "stderr": r["stderr"],
                "resolution": RESOLUTION_SE * r["stderr"],
                "trials": r.get("trials"),
                "trials_needed": _trials_needed(r.get("trials"), RESOLUTION_SE * r["stderr"], r["predicted"] - 0.5),
            }
            for r in small
        ]
        # a decidable cell not above ½, or any cell above its certified bound, is a miss; the bound is not an
        # effect to resolve (the prediction lies below it), so it always decides
        seen = {id(r) for r in small} | {id(r) for r in above}
        missed = any(id(r) not in seen for r in sc) or len(below_ub) < len(sc)
        status = "fail" if missed else "undecided" if small else "pass"
        needs = [u["trials_needed"] for u in undecided]
        out["P3"] = {
            "cells": len(sc),
            "above_half_by_2se": len(above),
            "below_upper_bound": len(below_ub),
            "ratio_min": min(ratios) if ratios else None,
            "ratio_max": max(ratios) if ratios else None,
            "pass": status == "pass",
            "status": status,
            "undecided_cells": undecided,
            "trials_needed": max(needs) if needs and None not in needs else None,
        }
        out["within_1se"] = sum(bool(r["within_1se"]) for r in sc)
        out["within_2se"] = sum(bool(r["within_2se"]) for r in sc)
        out["cells"] = len(sc)
        out["alternatives_max_excess_over_baseline"] = max(
            ((a["auc"] - r["auc"]) / max(r["stderr"], 1e-12) for r in sc for a in r["alternatives"].values()),
            default=None,
        )
    return out


def _verdict(p: dict, why: str) -> str:
    """PASS / FAIL, or "too few trials to decide (why; needs T >= N)" (gates.json files older than the status
    field have only ``pass``)."""
    status = p.get("status") or ("pass" if p["pass"] else "fail")
    if status != "undecided":
        return status.upper()
    need = p.get("trials_needed")
    return f"{UNDECIDED} ({why}; " + (f"needs T >= {need})" if need else "no trial count given decides it)")


def gate_lines(g: dict) -> list[str]:
    lines = []
    for p in g["P1"]:
        c = p["curve"]
        name = "/".join(str(v) for v in (c["group"], c["statistic"]) if v)
        zs = "n/a" if p["slope_z"] is None else f"{p['slope_z']:.1f}"
        why = (
            f"predicted slope {p.get('predicted_slope') or 0:.4f} < resolution {p.get('resolution') or 0:.4f} "
            f"at T = {p.get('trials')}"
        )
        lines.append(
            f"P1 {name} eps_acc={c['eps_acc']:g}: slope dAUC/dsqrt(k) = {p['slope']:.4f} +- "
            f"{p['slope_stderr']:.4f} (z = {zs}), linear fit chi2 = {p['chi2']:.2f} on "
            f"{p['dof']} dof (p = {p['p_linear']:.3f}): {_verdict(p, why)}"
        )
    if g.get("P3"):
        p = g["P3"]
        cells = ", ".join(
            f"k={u['k']} eps_acc={u['eps_acc']:g}: {u['predicted'] - 0.5:.4f} < {u['resolution']:.4f}"
            for u in p.get("undecided_cells", [])
        )
        lines.append(
            f"P3 tightness: {p['above_half_by_2se']}/{p['cells']} cells above 1/2 by > 2 SE, "
            f"{p['below_upper_bound']}/{p['cells']} below the certified upper bound; "
            f"(AUC - 1/2)/(bound - 1/2) in [{p['ratio_min']:.3f}, {p['ratio_max']:.3f}]: "
            f"{_verdict(p, f'predicted AUC - 1/2 below the resolution in {cells}')}"
        )
        lines.append(
            f"prediction (exact pooled-mean AUC): {g['within_1se']}/{g['cells']} cells within 1 SE, "
            f"{g['within_2se']}/{g['cells']} within 2 SE"
        )
    return lines


# ----------------------------------------------------------------------------------------------------------
# output
# ----------------------------------------------------------------------------------------------------------

CSV_COLUMNS = (
    "mechanism",
    "regime",
    "dataset",
    "statistic",
    "k",
    "eps_acc",
    "n",
    "trials",
    "auc",
    "stderr",
    "stderr_hanley_mcneil",
    "predicted",
    "z",
    "within_1se",
    "within_2se",
    "upper_bound",
    "upper_bound_epsilon",
    "upper_bound_delta",
    "gdp_bound",
    "sigma",
    "calibration",
    "gap",
    "sensitivity",
    "seconds",
)


def write_outputs(out: Path, rows: list[dict], title: str) -> None:
    with (out / CSV_NAME).open("w", newline="", encoding="utf-8") as f:
        alt_cols = sorted({a for r in rows for a in r.get("alternatives", {})})
        cols = list(CSV_COLUMNS) + [f"{a}_{x}" for a in alt_cols for x in ("auc", "stderr", "predicted")]
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            flat = {k: ("" if v is None else v) for k, v in r.items()}
            for a, v in r.get("alternatives", {}).items():
                for x in ("auc", "stderr", "predicted"):
                    flat[f"{a}_{x}"] = v[x]
            w.writerow(flat)
    with (out / JSONL_NAME).open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    plot(rows, out / PNG_NAME, title)


def plot(rows: Sequence[dict], path: Path, title: str = "") -> Path:
    """(a) AUC vs k with ±1 SE bars, predictions as lines; (b) AUC vs √k·ε_acc (002 Fig. 2 and P2)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault(_group(r), []).append(r)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    markers = "osd^v<>ph*"
    for i, (g, rs) in enumerate(sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2]))):
        rs = sorted(rs, key=lambda r: r["k"])
        name = "/".join(str(v) for v in (g[0], g[1]) if v and v != "pooled-mean")
        label = (name + " " if name else "") + f"eps_acc={g[2]:g}"
        ks = [r["k"] for r in rs]
        auc = [r["auc"] for r in rs]
        se = [r["stderr"] for r in rs]
        e = axes[0].errorbar(
            ks,
            auc,
            yerr=se,
            marker=markers[i % len(markers)],
            capsize=3,
            ls="-" if rs[0].get("predicted") is None else "none",
            label=label,
        )
        if rs[0].get("predicted") is not None:
            axes[0].plot(ks, [r["predicted"] for r in rs], ls="--", color=e[0].get_color(), lw=1)
        axes[1].errorbar(
            [r["sqrt_k_eps_acc"] for r in rs],
            auc,
            yerr=se,
            marker=markers[i % len(markers)],
            capsize=3,
            ls="none",
            color=e[0].get_color(),
            label=label,
        )
    for ax in axes:
        ax.axhline(0.5, color="grey", ls=":", lw=1)
        ax.set_ylabel("membership-inference AUC")
        ax.grid(alpha=0.3)
    axes[0].set_xscale("log")
    has_pred = any(r.get("predicted") is not None for r in rows)
    axes[0].set_xlabel("coalition size k" + (" (dashed: exact prediction)" if has_pred else ""))
    axes[1].set_xlabel("sqrt(k) * eps_acc")
    axes[1].set_xscale("log")
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
