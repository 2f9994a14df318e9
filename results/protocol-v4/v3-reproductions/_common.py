"""Shared helpers for the v3 reproductions (run with a venv holding the v3 code: run_all.sh).

Every script builds its toy history under out/<name>/ beside it (wiped first), then runs the real
``dprag audit verify`` CLI of the v3 worktree (a subprocess, DPRAG_VERIFY_WORKERS=1) and prints its output, so
what is quoted is what an auditor would see."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dprag

from dprag.audit.protocol.encoding import encode

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
DPRAG = str(Path(sys.executable).with_name("dprag"))

# the scripts must run the v3 code (a detached worktree at 339d301, named by $DPRAG_V3_WORKTREE)
V3 = Path(os.environ.get("DPRAG_V3_WORKTREE", "wt-v3")).resolve()
assert Path(dprag.__file__).resolve().is_relative_to(V3), dprag.__file__


def workdir(name: str) -> Path:
    d = OUT / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


def write_lines(path: Path, objs) -> Path:
    path.write_bytes(b"".join(encode(o) + b"\n" for o in objs))
    return path


def receipt_lines(clients, keep=("receipt", "top")):
    return [{k: e[k] for k in keep if k in e} for c in clients for e in c.receipts]


def cli_verify(bundle, *args, title: str | None = None, show=None) -> int:
    """Run ``dprag audit verify BUNDLE ARGS`` and print the command and its output (``show``: a predicate on
    lines, to trim; the headline is always printed)."""
    env = {**os.environ, "DPRAG_VERIFY_WORKERS": "1"}
    cmd = [DPRAG, "audit", "verify", str(bundle), *map(str, args)]
    shown = " ".join(["dprag", "audit", "verify", _rel(bundle), *(_rel(a) for a in args)])
    if title:
        print(f"--- {title}")
    print(f"$ {shown}")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = p.stdout.splitlines()
    for i, line in enumerate(lines):
        if i == 0 or show is None or show(line):
            print(line)
    if p.stderr.strip():
        print("[stderr] " + p.stderr.strip().replace("\n", "\n[stderr] "))
    print(f"[exit {p.returncode}]")
    return p.returncode


def _rel(x) -> str:
    s = str(x)
    return s.replace(str(OUT) + "/", "out/") if isinstance(x, (str, Path)) else s


def checked_line(line: str) -> bool:
    return line.lstrip().startswith(("warning:", "checked:", "provider key:", "rejected evidence", "on trust"))
