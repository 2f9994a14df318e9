"""The shape of the house (spec/architecture.md): floors, cycles, module size and private names.

The repository keeps each floor in a top-level folder that installs as ``dprag.<floor>``, so the checks run
on a copy of the tree laid out as it installs (``dprag/<floor>/...``, from pyproject's package-dir mapping).

- the floors contract of ``[tool.importlinter]`` (import-linter's layers and acyclic-siblings contracts),
  function-level imports included and no import ignored, passes; the same check fails, naming the import,
  on a copy where one module of a lower floor imports a higher one inside a function;
- no import cycle among dprag's modules (Tarjan's strongly connected components over grimp's graph of every
  import statement, function-level ones included, parent packages and their children too);
- no library module over 800 lines (the generated Poseidon constants aside);
- no module imports another module's ``_private`` name or a ``_private`` module;
- mypy with the strict flags of ``[tool.mypy]`` finds no error in accounting/, zk/ and audit/{protocol,client,verify}/,
  and the override really is strict (an unannotated function there is an error).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIRS = CONFIG["tool"]["setuptools"]["package-dir"]
MAX_LINES = 800
GENERATED = {"zk/gadgets/poseidon_constants.py"}


def _install_layout(dest: Path) -> Path:
    for pkg, folder in sorted(PACKAGE_DIRS.items(), key=lambda kv: kv[0].count(".")):
        shutil.copytree(
            ROOT / folder,
            dest.joinpath(*pkg.split(".")),
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def _lint_imports(tree: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports")
    assert exe, "import-linter is not installed (pip install -e '.[dev]')"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [exe, "--config", "pyproject.toml", "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return _install_layout(tmp_path_factory.mktemp("installed"))


@pytest.mark.integration
def test_the_floors_contract_holds(tree):
    p = _lint_imports(tree)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in p.stdout
    assert "Audit roles: cli | commands > testing > provider | client | verify > protocol KEPT" in p.stdout


@pytest.mark.parametrize(
    "module,imported",
    [
        ("verify/ledger.py", "dprag.audit.provider import service"),  # the verifier on the provider
        ("client/remote.py", "dprag.audit.provider.storage import base"),  # the client on the provider's store
        ("protocol/encoding.py", "dprag.audit.verify import verdict"),  # the protocol on a role above it
        ("provider/admission.py", "dprag.audit.client import account"),  # two roles side by side
    ],
)
@pytest.mark.integration
def test_an_import_across_the_audit_roles_breaks_the_contract(tmp_path, module, imported):
    """The roles contract (audit-roles): provider, client and verify stand on protocol and never on each other; a
    function-level import that crosses is named in the report."""
    tree = _install_layout(tmp_path)
    path = tree / "dprag" / "audit" / module
    path.write_text(path.read_text() + f"\n\ndef _across():\n    from {imported}  # noqa: F401\n")
    p = _lint_imports(tree)
    assert p.returncode != 0
    assert "Audit roles: cli | commands > testing > provider | client | verify > protocol BROKEN" in p.stdout
    src = "dprag.audit." + module.removesuffix(".py").replace("/", ".")
    dst = imported.replace(" import ", ".")
    assert f"{src} -> {dst}" in p.stdout, p.stdout[-3000:]


@pytest.mark.integration
def test_an_upward_function_level_import_breaks_the_contract(tmp_path):
    tree = _install_layout(tmp_path)
    rdp = tree / "dprag" / "accounting" / "rdp.py"
    rdp.write_text(rdp.read_text() + "\n\ndef _upward():\n    from dprag.audit.protocol import policy  # noqa: F401\n")
    p = _lint_imports(tree)
    assert p.returncode != 0
    assert "BROKEN" in p.stdout
    assert "dprag.accounting.rdp -> dprag.audit.protocol.policy" in p.stdout


_GRAPH_SCRIPT = """
import json, grimp
g = grimp.build_graph("dprag", cache_dir=None, exclude_type_checking_imports=True)
print(json.dumps({m: sorted(g.find_modules_directly_imported_by(m)) for m in sorted(g.modules)}))
"""


def _module_graph(tree: Path) -> dict[str, list[str]]:
    # a fresh interpreter whose only dprag is the tree (this session has the editable install imported)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    p = subprocess.run(
        [sys.executable, "-c", _GRAPH_SCRIPT], cwd=tree, env=env, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


@pytest.mark.integration
def test_no_import_cycle_among_dprags_modules(tree):
    graph = _module_graph(tree)
    assert len(graph) > 100 and "dprag.audit.verify" in graph
    assert _cycles(graph) == []


@pytest.mark.integration
def test_the_cycle_finder_finds_a_cycle_hidden_in_a_function(tmp_path):
    tree = _install_layout(tmp_path)
    errors = tree / "dprag" / "accounting" / "rounding.py"
    errors.write_text(errors.read_text() + "\n\ndef _back():\n    from dprag.accounting import filters  # noqa: F401\n")
    cycles = _cycles(_module_graph(tree))
    assert any("dprag.accounting.rounding" in c and "dprag.accounting.filters" in c for c in cycles), cycles


def _library_files():
    for folder in sorted(set(PACKAGE_DIRS.values())):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path


def test_no_library_module_over_800_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in _library_files()
        if (n := len(p.read_text().splitlines())) > MAX_LINES and str(p.relative_to(ROOT)) not in GENERATED
    }
    assert long == {}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_imports_another_modules_private_names():
    offenders = []
    for path in _library_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            module = node.module or ""
            if node.level == 0 and not module.startswith("dprag"):
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            offenders += [f"{where} {a.name}" for a in node.names if _private(a.name)]
            offenders += [f"{where} {module}" for part in module.split(".") if _private(part)]
    assert offenders == []


STRICT = [
    "dprag/errors.py",
    "dprag/accounting",
    "dprag/zk",
    "dprag/audit/protocol",
    "dprag/audit/provider",
    "dprag/audit/client",
    "dprag/audit/verify",
]
#: the packages that also refuse an explicit ``Any`` (``disallow_any_explicit``, [tool.mypy]'s second override)
NO_EXPLICIT_ANY = ["dprag/audit/provider", "dprag/audit/client"]


def _mypy(tree: Path, cache: Path, *paths: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--cache-dir", str(cache), *paths],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.integration
def test_the_strict_floors_type_check(tree, tmp_path):
    """mypy --strict (the flags of [tool.mypy]'s strict override) finds no error in accounting/, zk/ and the audit
    floor's protocol/, provider/, client/ and verify/; the provider and the client hold no explicit ``Any``."""
    p = _mypy(tree, tmp_path / "mypy-cache", *STRICT)
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]
    assert "Success: no issues found" in p.stdout


def test_the_overrides_name_the_strict_packages():
    """[tool.mypy]'s overrides cover what the type-check tests claim: every STRICT package under the strict flags,
    and exactly the provider and the client under ``disallow_any_explicit``."""
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    strict = [o for o in overrides if o.get("disallow_untyped_defs")]
    no_any = [o for o in overrides if o.get("disallow_any_explicit")]
    assert len(strict) == 1 and len(no_any) == 1
    for path in STRICT:
        module = path.removesuffix(".py").replace("/", ".")
        assert module in strict[0]["module"], module
        assert path.endswith(".py") or f"{module}.*" in strict[0]["module"], module
    assert sorted(no_any[0]["module"]) == sorted(
        m for path in NO_EXPLICIT_ANY for m in (path.replace("/", "."), path.replace("/", ".") + ".*")
    )


# (file, what is appended to it, the mypy error code that must then be reported)
_BREAKS = [
    ("dprag/accounting/rounding.py", "\n\ndef _untyped(x):\n    return x\n", "no-untyped-def"),
    ("dprag/audit/provider/window.py", "\n\ndef _untyped(x):\n    return x\n", "no-untyped-def"),
    (
        "dprag/audit/provider/window.py",
        "\n\nfrom typing import Any\n\n\ndef _explicit(x: Any) -> None:\n    return None\n",
        "explicit-any",
    ),
    (
        "dprag/audit/provider/storage/base.py",
        "\n\nfrom typing import Any\n\nROWS: list[tuple[Any, ...]] = []\n",
        "explicit-any",
    ),
    (
        "dprag/audit/client/remote.py",
        "\n\nfrom typing import Any, cast\n\n\ndef _explicit(x: object) -> int:\n    return cast(Any, x)\n",
        "explicit-any",
    ),
]


@pytest.mark.integration
@pytest.mark.parametrize(("path", "tail", "code"), _BREAKS, ids=[f"{p}:{c}" for p, _, c in _BREAKS])
def test_the_type_check_is_strict(tree, tmp_path, path, tail, code):
    """The overrides really apply: an unannotated function in a strict package, or an explicit ``Any`` in the
    provider or the client, is an error naming its code (and the same module checks clean without it, so the error
    is the appended line's)."""
    target = tree / path
    original = target.read_text()
    target.write_text(original + tail)
    try:
        p = _mypy(tree, tmp_path / "mypy-cache", path)
    finally:
        target.write_text(original)
    assert p.returncode != 0
    assert f"[{code}]" in p.stdout, p.stdout[-3000:]
    lines = len(original.splitlines())
    assert all(int(x.split(":")[1]) > lines for x in p.stdout.splitlines() if f"[{code}]" in x), p.stdout[-3000:]


@pytest.mark.integration
def test_explicit_any_is_allowed_where_the_flag_is_off(tree, tmp_path):
    """The verifier is strict but may name ``Any``: the flag is the provider's and the client's alone, so the
    case above fails because of the flag, not because of how the line is written."""
    target = tree / "dprag/audit/verify/receipts.py"
    original = target.read_text()
    target.write_text(original + "\n\nfrom typing import Any\n\n\ndef _explicit(x: Any) -> None:\n    return None\n")
    try:
        p = _mypy(tree, tmp_path / "mypy-cache", "dprag/audit/verify/receipts.py")
    finally:
        target.write_text(original)
    assert "[explicit-any]" not in p.stdout, p.stdout[-3000:]


def test_the_verifier_reads_as_the_ordered_list_of_its_checks():
    # spec/protocol.md §8: verify() calls every check by name, in the spec's order, and stays short
    tree = ast.parse((ROOT / "audit" / "verify" / "__init__.py").read_text())
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "verify"]
    assert fn.end_lineno - fn.lineno + 1 < 60
    found = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    calls = [n.func.id for n in sorted(found, key=lambda n: (n.lineno, n.col_offset))]
    checks = [c for c in calls if c.startswith("check_8_")]
    sections = [tuple(int(x) for x in c.split("_")[1:3]) for c in checks]
    assert sections == sorted(sections)
    assert {s[1] for s in sections} == set(range(1, 11))  # §8.1 ... §8.10, each called
