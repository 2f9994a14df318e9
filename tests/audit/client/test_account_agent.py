"""``dprag account agent DIR``: the account's embedder stays loaded in the account's own process, on a Unix socket
of mode 0600; ``dprag account ask`` goes through it when it answers (loading nothing itself) and asks alone when it
does not (no socket, or one left by a dead agent); the directory's state is one sequence either way."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading

import pytest

from dprag.audit.cli import main
from dprag.audit.commands.account import account_client, ask_once
from dprag.audit.commands.account_agent import open_agent, socket_path
from dprag.audit.provider import models as serving_models
from dprag.audit.provider.http.app import create_app
from dprag.audit.testing.toy import make_toy_directory
from tests.support.live import LiveServer

pytestmark = pytest.mark.integration


def _ask(capsys, d, url, q):
    capsys.readouterr()
    rc = main(["account", "ask", str(d), q, "--url", url])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_ask_goes_through_the_agent_and_falls_back_without_it(tmp_path, capsys, monkeypatch):
    """Run in a fresh interpreter that collects this file alone: in the whole suite's process, pytest's output
    capture around this in-process CLI and agent thread ends with "I/O operation on closed file" once
    tests/audit/ledger/test_interop.py (dp_accounting) has been collected — a harness interaction not yet understood
    (the agent itself works from the real CLI: benchmarks/bench_account_agent.py)."""
    if os.environ.get("DPRAG_AGENT_TEST_INNER") != "1":
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k", "through_the_agent"],
            env={**os.environ, "DPRAG_AGENT_TEST_INNER": "1"},
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
        return
    svc = make_toy_directory(tmp_path / "toy", n=12, accounts=2, seed=b"\x0c" * 32)
    alice = tmp_path / "toy" / "accounts" / "alice"
    with LiveServer(create_app(svc)) as url:
        server = open_agent(alice, account_client, ask_once)  # loads the embedder (toy-hash-32) once
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        thread.start()
        try:
            assert stat.S_IMODE(socket_path(alice).stat().st_mode) == 0o600
            loads = []
            real = serving_models.load_embedder
            monkeypatch.setattr(serving_models, "load_embedder", lambda name: loads.append(name) or real(name))
            for i in range(2):
                rc, out, err = _ask(capsys, alice, url, f"asthma protocol inhaler patient {i}")
                assert rc == 0, err
                assert json.loads(out)["pos"] >= 1
            assert loads == [], "the CLI loaded the embedder although the agent holds it"
        finally:
            server.shutdown()
            server.server_close()
        # the agent is gone but its socket file is left behind: the CLI asks alone, from the same state
        assert socket_path(alice).exists()
        rc, out, err = _ask(capsys, alice, url, "asthma protocol inhaler patient after the agent")
        assert rc == 0, err
        assert loads == ["toy-hash-32"]
        lines = (alice / "receipts.jsonl").read_text().splitlines()
        assert len(lines) == 3 and (alice / "counter").read_text().strip() == "3"
    svc.close()
