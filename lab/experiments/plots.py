"""Result files of the privacy–utility experiment: CSV, JSON Lines, per-question predictions and a PNG plot.

The plot (matplotlib, Agg backend, no display needed): match accuracy against total ε (log scale) for every
private method that spends ε; Non-RAG (ε = 0) and Non-Private-RAG (ε = ∞) as horizontal reference lines.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

from dprag.lab.experiments.runner import CellResult

CSV_NAME = "privacy_utility.csv"
JSONL_NAME = "privacy_utility.jsonl"
PNG_NAME = "privacy_utility.png"
PREDICTIONS_NAME = "predictions.jsonl"

COLUMNS = (
    "method",
    "eps_total",
    "eps_certified",
    "delta",
    "accuracy",
    "f1",
    "rouge_l",
    "precision",
    "recall_at_k",
    "support",
    "docs_used",
    "private_tokens",
    "queries",
    "split",
    "m",
    "hp",
    "dev_accuracy",
    "seconds",
    "seconds_per_query",
    "dev_seconds",
    "derived",
    "dev_grid",
    "plurality_accuracy",
    "tuning",
)


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


#: schema of one privacy-utility cell row (``--json`` on stdout, ``privacy_utility.jsonl``, ``cells_partial.jsonl``)
ROW_SCHEMA = "dprag.experiment.privacy-utility/1"


def json_row(cell: CellResult, extra: dict | None = None) -> dict:
    row = {k: _clean(v) for k, v in cell.row().items()}
    row["schema"] = ROW_SCHEMA
    row["hp"] = cell.hp
    row["dev_grid"] = cell.dev_grid
    row["derived"] = cell.derived
    if extra:
        row.update(extra)
    return row


def write_csv(cells: Sequence[CellResult], path: str | os.PathLike, extra: dict | None = None) -> Path:
    p = Path(path)
    cols = list(COLUMNS) + sorted(extra or {})
    with p.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for c in cells:
            row = {k: ("" if v is None else v) for k, v in c.row().items()}
            row.update(extra or {})
            w.writerow(row)
    return p


def write_jsonl(cells: Sequence[CellResult], path: str | os.PathLike, extra: dict | None = None) -> Path:
    p = Path(path)
    with p.open("w", encoding="utf-8") as f:
        for c in cells:
            f.write(json.dumps(json_row(c, extra), sort_keys=True) + "\n")
    return p


def write_predictions(cells: Sequence[CellResult], path: str | os.PathLike) -> Path:
    p = Path(path)
    with p.open("w", encoding="utf-8") as f:
        for c in cells:
            for q in c.questions:
                d = {"method": c.method, "eps_total": c.eps_total, "split": c.split, **q.__dict__}
                f.write(json.dumps({k: _clean(v) for k, v in d.items()}, sort_keys=True) + "\n")
    return p


def plot(cells: Sequence[CellResult], path: str | os.PathLike, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    by_method: dict[str, list[CellResult]] = {}
    for c in cells:
        if c.queries:
            by_method.setdefault(c.method, []).append(c)
    xs_all = [c.eps_total for c in cells if c.eps_total]
    styles = iter(["o-", "s-", "^-", "v-", "D-", "P-", "X-", "*-", "h-"])
    for method, cs in by_method.items():
        if method in ("non-rag", "non-private-rag"):
            ls = "--" if method == "non-rag" else ":"
            ax.axhline(
                cs[0].accuracy,
                linestyle=ls,
                color="gray" if method == "non-rag" else "black",
                label=f"{method} ({cs[0].accuracy:.2f})",
            )
            continue
        cs = sorted(cs, key=lambda c: c.eps_total)
        ax.plot([c.eps_total for c in cs], [c.accuracy for c in cs], next(styles, "o-"), label=method)
    if xs_all and min(xs_all) > 0:
        ax.set_xscale("log")
    ax.set_xlabel("total ε")
    ax.set_ylabel("match accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p)
    plt.close(fig)
    return p
