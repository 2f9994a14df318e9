"""``dprag experiment mia-table DIR...``: the MIA table (attack × pipeline) from ``dprag experiment mia`` runs.

Each DIR is one run's ``--out``. A finished run contributes its ``mia.jsonl`` rows (one per cell) as written.
A run that is still going or was stopped has only ``scores.jsonl`` (one record per scored target); its cells
are recomputed from those scores with the same statistics the command uses (``lab.auc.auc_ci``,
``tpr_at_fpr``) and marked **partial** — no certified ε (the session's guarantee exists only at its end). When
the run wrote ``run.json`` at its start (session 7 on), the targets are rebuilt from it (``mia.world_of_run``)
and the canary counter is replayed over the stored answers (and, where stored, retrieved ids): secrets exposed
and records cited among the scored targets, over the answers given so far. Every number is read from the
files, never typed by hand.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import click

from dprag.errors import DpragError, InvalidParameterError
from dprag.lab.auc import auc_ci, tpr_at_fpr
from dprag.lab.experiments.options import Fail

HEAD = [
    "attack",
    "pipeline",
    "ε_total",
    "targets",
    "AUC (95% CI)",
    "half-width",
    "TPR@1%FPR",
    "ε certified",
    "AUC bound",
    "secrets exposed (m / nm)",
    "cited (m / nm)",
    "s / record",
    "run",
]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def partial_rows(scores: Sequence[dict], world=None) -> list[dict]:
    """Cells recomputed from per-target score records (a run still going or stopped); with the run's ``world``
    also the exposure figures over the stored answers."""
    cells: dict[tuple, dict] = {}
    for rec in scores:
        key = (rec["attack"], rec["method"], rec.get("eps_total"))
        c = cells.setdefault(key, {"members": [], "nonmembers": [], "seconds": 0.0, "recs": []})
        c["members" if rec["member"] else "nonmembers"].append(float(rec["score"]))
        c["seconds"] += float(rec.get("seconds") or 0.0)
        c["recs"].append(rec)
    out = []
    for (attack, method, eps), c in cells.items():
        row = {
            "attack": attack,
            "method": method,
            "eps_total": eps,
            "members": len(c["members"]),
            "nonmembers": len(c["nonmembers"]),
            "partial": True,
            "seconds_per_record": c["seconds"] / (len(c["members"]) + len(c["nonmembers"])),
        }
        if len(c["members"]) >= 2 and len(c["nonmembers"]) >= 2:
            ci = auc_ci(c["members"], c["nonmembers"])
            row.update(
                auc=ci.auc,
                auc_ci_lo=ci.lo,
                auc_ci_hi=ci.hi,
                auc_halfwidth=ci.halfwidth,
                tpr_at_1pct_fpr=tpr_at_fpr(c["members"], c["nonmembers"], 0.01),
            )
        if world is not None:
            row.update(_exposure(c["recs"], world))
        out.append(row)
    return out


def _exposure(recs: Sequence[dict], world) -> dict:
    """The command's canary counter (``mia.exposure_counter``, as ``mia.run_cell`` uses it) replayed over the
    stored answers; summarised over the scored targets. Records without ``retrieved`` give no citation figure."""
    from dprag.lab.experiments.mia import exposure_counter

    counter = exposure_counter(world)
    with_ids = all("retrieved" in r for r in recs)
    for r in recs:
        for j, a in enumerate(r["answers"]):
            counter.add(a, r["retrieved"][j] if with_ids else ())
    mem = [r["key"] for r in recs if r["member"]]
    non = [r["key"] for r in recs if not r["member"]]
    sm, sn = counter.summary(mem), counter.summary(non)
    return {
        "exposed_members": sm["exposed_records"],
        "exposed_nonmembers": sn["exposed_records"],
        "cited_members": sm["cited_records"] if with_ids else None,
        "cited_nonmembers": sn["cited_records"] if with_ids else None,
    }


def load_run(run_dir: str | Path) -> list[dict]:
    """The rows of one run directory (finished: ``mia.jsonl``; otherwise partial rows from ``scores.jsonl``)."""
    d = Path(run_dir)
    if not d.is_dir():
        raise InvalidParameterError("run_dir", "is not a directory", str(d))
    if (d / "mia.jsonl").is_file():
        rows = _jsonl(d / "mia.jsonl")
    elif (d / "scores.jsonl").is_file():
        world = None
        if (d / "run.json").is_file():
            from dprag.lab.experiments.mia import world_of_run

            world = world_of_run(json.loads((d / "run.json").read_text(encoding="utf-8")))
        rows = partial_rows(_jsonl(d / "scores.jsonl"), world)
    else:
        rows = []
    if not rows:
        raise InvalidParameterError("run_dir", "holds no mia.jsonl rows and no scores.jsonl records", str(d))
    return [{**r, "run": d.name} for r in rows]


def _f(v, spec=".3f") -> str:
    return "–" if v is None else format(v, spec)


def _pair(a, b, spec=".2f") -> str:
    return "–" if a is None and b is None else f"{_f(a, spec)} / {_f(b, spec)}"


def markdown(rows: Sequence[dict]) -> str:
    out = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for r in rows:
        if r.get("error"):
            cells = [r["attack"], r["method"], _f(r.get("eps_total"), "g"), "–", f"error: {r['error']}"]
            out.append("| " + " | ".join(cells + [""] * (len(HEAD) - len(cells) - 1) + [r["run"]]) + " |")
            continue
        auc = "–" if r.get("auc") is None else f"{r['auc']:.3f} ({r['auc_ci_lo']:.3f}–{r['auc_ci_hi']:.3f})"
        eps_c = (
            "∞"
            if r.get("eps_certified") is None and r.get("method") == "non-private-rag"
            else _f(r.get("eps_certified"), ".4g")
        )
        cells = [
            r["attack"],
            r["method"],
            _f(r.get("eps_total"), "g"),
            f"{r['members']} + {r['nonmembers']}" + (" (partial)" if r.get("partial") else ""),
            auc,
            _f(r.get("auc_halfwidth")),
            _f(r.get("tpr_at_1pct_fpr")),
            eps_c,
            _f(r.get("auc_bound"), ".5f"),
            _pair(r.get("exposed_members"), r.get("exposed_nonmembers")),
            _pair(r.get("cited_members"), r.get("cited_nonmembers")),
            _f(r.get("seconds_per_record"), ".1f"),
            r["run"],
        ]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


@click.command("mia-table")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="print the rows as JSON Lines instead of a markdown table")
def mia_table(run_dirs, as_json):
    """The MIA table (attack × pipeline: AUC with its 95% interval, TPR@1%FPR, the certified ε and its AUC bound,
    secrets exposed, citations, seconds per record) of one or more ``dprag experiment mia`` run directories."""
    try:
        rows = [r for d in run_dirs for r in load_run(d)]
    except DpragError as e:
        raise Fail(str(e)) from None
    if as_json:
        for r in rows:
            click.echo(json.dumps(r, sort_keys=True))
    else:
        click.echo(markdown(rows))
