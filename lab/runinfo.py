"""``run.json``: the one writer every experiment uses, so each run records where it came from.

``write_run_json(out, run, seed=...)`` writes ``out/run.json`` with the run's own fields plus:

- ``commit``: ``git describe --always --dirty`` of the checkout dprag was loaded from, or ``None`` when
  dprag is not running from a git checkout (an installed wheel);
- ``python`` and ``versions``: the interpreter and the installed versions of dprag and the libraries a
  result can depend on (``None`` for one that is not installed);
- ``seed``: the run's seed as text (every experiment is reproducible from it and its flags).
"""

from __future__ import annotations

import json
import platform
import subprocess
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

PACKAGES = (
    "dprag",
    "numpy",
    "scipy",
    "dp-accounting",
    "torch",
    "transformers",
    "sentence-transformers",
    "faiss-cpu",
    "gguf",
    "matplotlib",
    "dask",
    "distributed",
    "tqdm",
)


def package_versions(packages: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """The installed version of each package (``None`` when it is not installed) and the Python version."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in packages:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


@lru_cache(maxsize=1)
def source_commit() -> str | None:
    """``git describe --always --dirty`` of the checkout this package was loaded from, or None (asked once per
    process: every run record of one process names the same checkout)."""
    here = Path(__file__).resolve().parent
    try:
        p = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    return p.stdout.strip() or None


def write_run_json(out: Path, run: dict[str, Any], *, seed: object) -> dict[str, Any]:
    """Write ``out/run.json``: ``run`` plus commit, Python, library versions and seed; returns what it wrote."""
    record = {
        **run,
        "commit": source_commit(),
        "python": platform.python_version(),
        "versions": package_versions(),
        "seed": str(seed),
    }
    (Path(out) / "run.json").write_text(json.dumps(record, indent=1, sort_keys=True, default=str))
    return record
