"""Markdown summary of a privacy–utility run (``dprag experiment report DIR``).

Reads the run's JSON-Lines rows (``privacy_utility.jsonl``, or ``cells_partial.jsonl`` of a run still going or
interrupted) and prints one table row per (method, ε_total) cell: the certified (ε, δ), the number of questions,
accuracy as a count, F1, retrieval precision, documents used, private tokens, the dev-chosen hyperparameters
with their dev accuracy, seconds per question and per cell (test and dev). With ``baseline``, each row also gets
the one-sided Fisher exact p-value of "this cell answers more questions correctly than the baseline cell"
(scipy.stats.fisher_exact, alternative="greater"; the cells must share the same questions, which runs of one
command do).
"""

from __future__ import annotations

import json
from pathlib import Path

from dprag.errors import InvalidParameterError


def load_rows(run_dir: str | Path) -> list[dict]:
    d = Path(run_dir)
    for name in ("privacy_utility.jsonl", "cells_partial.jsonl"):
        f = d / name
        if f.is_file():
            rows = [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
            if rows:
                return rows
    raise InvalidParameterError("run_dir", "holds no privacy_utility.jsonl or cells_partial.jsonl rows", str(d))


def fisher_greater(a_correct: int, a_n: int, b_correct: int, b_n: int) -> float:
    """One-sided Fisher exact p-value that the first cell's success rate exceeds the second's."""
    from scipy.stats import fisher_exact

    return float(fisher_exact([[a_correct, a_n - a_correct], [b_correct, b_n - b_correct]], alternative="greater")[1])


def _fmt(v, spec=".3f"):
    return "–" if v is None else format(v, spec)


def markdown(rows: list[dict], baseline: str | None = None) -> str:
    base = None
    if baseline is not None:
        cands = [r for r in rows if r["method"] == baseline and r.get("queries")]
        if not cands:
            raise InvalidParameterError("baseline", "names no method with answered questions in this run", baseline)
        base = cands[0]
    head = [
        "method",
        "ε_total",
        "certified (ε, δ)",
        "n",
        "accuracy",
        "F1",
        "precision",
        "docs used",
        "private tokens",
        "hyperparameters (dev accuracy)",
        "tuning rule",
        "s/question",
        "cell s",
        "dev s",
    ]
    if base is not None:
        head.append(f"p vs {baseline}")
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        n = int(r.get("queries") or 0)
        correct = round((r.get("accuracy") or 0.0) * n) if n else 0
        eps_c = r.get("eps_certified")
        cert = "none" if r["method"] == "non-private-rag" else f"({_fmt(eps_c, '.3f')}, {r.get('delta', 0):g})"
        hp = json.dumps(r.get("hp"), sort_keys=True) if r.get("hp") else "–"
        if r.get("dev_accuracy") is not None:
            hp += f" ({r['dev_accuracy']:.3f})"
        row = [
            r["method"],
            _fmt(r.get("eps_total"), "g"),
            cert,
            str(n),
            f"{correct}/{n} = {r['accuracy']:.3f}" if n else "infeasible",
            _fmt(r.get("f1")),
            _fmt(r.get("precision")),
            _fmt(r.get("docs_used"), ".1f"),
            _fmt(r.get("private_tokens"), ".2f"),
            hp,
            r.get("tuning") or "not recorded",
            _fmt(r.get("seconds_per_query"), ".1f"),
            _fmt(r.get("seconds"), ".0f"),
            _fmt(r.get("dev_seconds"), ".0f"),
        ]
        if base is not None:
            bn = int(base["queries"])
            row.append(
                "–" if r is base or not n else f"{fisher_greater(correct, n, round(base['accuracy'] * bn), bn):.2g}"
            )
        out.append("| " + " | ".join(row) + " |")
    plural = [r for r in rows if r.get("plurality_accuracy") is not None and r.get("queries")]
    for r in plural:  # answer-level voting: the same voters' non-private plurality (a diagnostic, not released)
        n = int(r["queries"])
        out.append(
            f"\nnon-private plurality of the voters of {r['method']} (ε_total {_fmt(r.get('eps_total'), 'g')}):"
            f" {round(r['plurality_accuracy'] * n)}/{n} = {r['plurality_accuracy']:.3f} (no privacy)"
        )
    return "\n".join(out)


def progress_bar(enabled: bool):
    """The experiments' progress bar on stderr: ``bar(items, desc)`` wrapping an iterable in tqdm, or None when
    progress is off (callers iterate the plain items)."""
    if not enabled:
        return None
    import sys

    from tqdm import tqdm

    def bar(items, desc=""):
        return tqdm(items, desc=desc, leave=False, file=sys.stderr)

    return bar
