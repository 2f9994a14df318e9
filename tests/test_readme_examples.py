"""The README's quick-start examples, run as written (provider, then auditor on its output, then test writer)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # starts servers or processes (CONTRIBUTING.md)

ROOT = Path(__file__).resolve().parents[1]


def _block(name: str) -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"<!-- example: {name} -->\s*```(?:python|sh)\n(.*?)```", text, re.S)
    assert m, f"README example {name!r} not found"
    return m.group(1)


def test_provider_then_auditor(tmp_path):
    p = subprocess.run(
        [sys.executable, "-c", _block("provider")], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "bundle" / "public" / "leaves.bin").is_file()
    cmd = _block("auditor").strip()
    assert cmd.startswith("dprag audit verify")
    args = cmd.split()[1:]
    a = subprocess.run(
        [sys.executable, "-m", "dprag", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert a.returncode == 0, a.stdout + a.stderr
    assert a.stdout.startswith("PASS ") and "pinned by the auditor" in a.stdout


def test_test_writer(tmp_path):
    p = subprocess.run(
        [sys.executable, "-c", _block("test-writer")], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr


def test_langchain_example(tmp_path):
    """The README's LangChain example, as written: invoke, batch, ainvoke and the retriever (ids, never texts)."""
    import pytest

    pytest.importorskip("langchain_core")
    p = subprocess.run(
        [sys.executable, "-c", _block("langchain")], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.strip().splitlines()
    assert lines[1] == "3"  # the batch answered all three
    ids, texts = lines[-1].rsplit(" ", 1)
    assert texts == "{''}" and "rx-" in ids  # the retriever shows the provider's ids (public here) and no text
