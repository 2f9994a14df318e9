"""The failure-injection table (tests/audit/provider/test_failure_injection.py): call site x group x engine x outcome.

    DPRAG_FAILURE_TABLE=rows.jsonl python -m pytest tests/audit/provider/test_failure_injection.py -m "not slow"
    python tests/support/failure_table.py rows.jsonl

Prints a Markdown table, one row per (site, group), one column per engine, from the JSON lines the test run wrote.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def table(lines: list[str]) -> str:
    rows: dict[tuple[str, str], dict[str, str]] = {}
    engines: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        r = json.loads(line)
        rows.setdefault((r["site"], r["group"]), {})[r["engine"]] = r["outcome"]
        if r["engine"] not in engines:
            engines.append(r["engine"])
    out = ["| call site | group | " + " | ".join(engines) + " |", "|---|---|" + "---|" * len(engines)]
    for (site, group), by in sorted(rows.items(), key=lambda kv: kv[0][1]):
        out.append(f"| {site} | {group} | " + " | ".join(by.get(e, "not run") for e in engines) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    print(table(Path(sys.argv[1]).read_text(encoding="utf-8").splitlines()))
