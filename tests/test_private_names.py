"""No module of ``dprag.audit`` (nor the test support) reads a private name of another object: ``X._name`` only
where X is ``self``, ``cls`` or ``super()`` (issue: "The provider's state, typed"). What one module needs of another's
state is its public, typed interface; a test of this rule fails by naming the file, the line and the expression."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("audit", "tests/support")


def _private_reads(path: Path, root: Path = ROOT) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        out.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_module_reads_a_private_name_of_another_object():
    found = [hit for d in SCANNED for p in sorted((ROOT / d).rglob("*.py")) for hit in _private_reads(p)]
    assert found == [], "\n".join(found)


def test_the_rule_catches_what_it_forbids(tmp_path):
    """The scanner itself: a private read through another object is found; self, cls and super() are not."""
    p = tmp_path / "probe.py"
    p.write_text("def f(svc, self, cls):\n    svc._closed(); self._x; cls._y; super()._z; svc.__dict__\n")
    assert _private_reads(p, tmp_path) == ["probe.py:2: svc._closed"]


def test_the_scan_covers_the_audit_floor_and_the_test_support():
    """What the rule reads: every module of ``dprag.audit`` (the provider, the client, the verifier, the documented
    test API ``audit/testing``) and the test support ``tests/support``, so a read of the service's private state from
    any of them is found."""
    scanned = {p.relative_to(ROOT).as_posix() for d in SCANNED for p in (ROOT / d).rglob("*.py")}
    for must in ("audit/provider/service.py", "audit/provider/admission.py", "audit/testing/attacks.py"):
        assert must in scanned, must
    for folder in ("audit/provider", "audit/client", "audit/verify", "audit/testing", "tests/support"):
        assert any(p.startswith(folder + "/") for p in scanned), folder
