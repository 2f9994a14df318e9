"""``dprag serve``'s configuration (audit/commands/serve.py): every option from a flag, a ``DPRAG_*`` variable or the
``[serve]`` table of a TOML file, in that precedence; secrets never from the file nor needed on the command line;
each mistake a one-line error naming what to fix, exit 2, before anything is opened or served."""

from __future__ import annotations

import json
import os

import pytest

from dprag.audit.cli import main


class Result:
    def __init__(self, exit_code: int, output: str, err: str):
        self.exit_code, self.output, self.err = exit_code, output, err


@pytest.fixture
def run(monkeypatch, capsys):
    """``run(args, env)``: ``dprag serve ARGS`` as the console script runs it (``audit.cli.main``), with ``env`` as
    the only DPRAG_* settings; its exit code, stdout and stderr."""
    for var in list(os.environ):
        if var.startswith("DPRAG_") and var != "DPRAG_TEST_PG":
            monkeypatch.delenv(var)

    def go(args, env=None) -> Result:
        before = dict(os.environ)
        try:
            with monkeypatch.context() as m:
                for k, v in (env or {}).items():
                    m.setenv(k, v)
                code = main(["serve", *args])
        finally:  # `serve --database-password-file` hands the path to its store through its process's environment
            os.environ.clear()
            os.environ.update(before)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return go


@pytest.fixture
def config(run):
    def go(args, env=None) -> dict:
        r = run([*args, "--print-config"], env)
        assert r.exit_code == 0, r.err
        return json.loads(r.output)

    return go


def _toml(tmp_path, text: str):
    p = tmp_path / "serve.toml"
    p.write_text(text)
    return str(p)


def test_flag_beats_environment_beats_file_beats_default(tmp_path, config):
    f = _toml(tmp_path, "[serve]\nport = 7001\nadmin_port = 9001\nhost = '127.0.0.2'\nlog-level = 'info'\n")
    got = config([])
    assert got["port"] == {"value": 8080, "from": "default"} and got["admin_port"]["value"] is None
    got = config(["--config", f])
    assert got["port"] == {"value": 7001, "from": "file"} and got["admin_port"] == {"value": 9001, "from": "file"}
    assert got["host"] == {"value": "127.0.0.2", "from": "file"} and got["log_level"]["value"] == "info"
    got = config(["--config", f], env={"DPRAG_PORT": "7002"})
    assert got["port"] == {"value": 7002, "from": "env"} and got["admin_port"]["from"] == "file"
    got = config(["--config", f, "--port", "7003"], env={"DPRAG_PORT": "7002"})
    assert got["port"] == {"value": 7003, "from": "flag"}
    got = config([], env={"DPRAG_CONFIG": f, "DPRAG_ADMIN_PORT": "9002"})  # the file named by the environment
    assert got["port"]["from"] == "file" and got["admin_port"] == {"value": 9002, "from": "env"}


def test_the_store_is_also_read_from_database_url_and_flags_from_their_variables(config):
    got = config([], env={"DPRAG_DATABASE_URL": "postgresql://app@db/dprag", "DPRAG_TOY": "1"})
    assert got["store"] == {"value": "postgresql://app@db/dprag", "from": "env"}
    assert got["toy"] == {"value": True, "from": "env"}


@pytest.mark.parametrize(
    "text,named",
    [
        ("[serve]\nprot = 1\n", "prot: not an option"),
        ("[serve]\ndatabase_password = 'hunter2'\n", "DPRAG_DATABASE_PASSWORD_FILE"),
        ("[serve]\nadmin_token = 'x'\n", "DPRAG_ADMIN_TOKEN_FILE"),
        ("[serve]\nport = 'many'\n", "'many' is not a valid integer"),
        ("[serve]\nport = 99999\n", "0<=x<=65535"),
        ("[server]\nport = 1\n", "one [serve] table"),
        ("[serve\nport = 1\n", "cannot read it as TOML"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_key(tmp_path, run, text, named):
    r = run(["--config", _toml(tmp_path, text), "--print-config"])
    assert r.exit_code == 2 and r.output == "", (r.output, r.err)
    lines = r.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], r.err
    assert "hunter2" not in r.err


def test_a_bad_variable_is_refused_naming_the_option(run):
    r = run(["--print-config"], env={"DPRAG_PORT": "eighty"})
    assert r.exit_code == 2 and "--port" in r.err and "eighty" in r.err and len(r.err.splitlines()) == 1, r.err


def test_an_admin_listener_off_loopback_needs_a_token(tmp_path, run):
    r = run(["--dir", str(tmp_path / "d"), "--admin-port", "0", "--admin-host", "0.0.0.0"])
    assert r.exit_code == 2 and "DPRAG_ADMIN_TOKEN" in r.err and "not loopback" in r.err, r.err
    assert not (tmp_path / "d").exists()  # refused before anything was made


def test_the_admin_token_comes_from_the_environment_or_a_file_and_is_long_enough(tmp_path, run):
    d = str(tmp_path / "d")
    args = ["--dir", d, "--admin-port", "0", "--admin-host", "0.0.0.0"]
    r = run(args, env={"DPRAG_ADMIN_TOKEN": "short"})
    assert r.exit_code == 2 and "DPRAG_ADMIN_TOKEN: the admin token must be at least 16" in r.err, r.err
    (tmp_path / "token").write_text("short\n")
    r = run([*args, "--admin-token-file", str(tmp_path / "token")])
    assert r.exit_code == 2 and "at least 16" in r.err, r.err
    r = run([*args, "--admin-token-file", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "DPRAG_ADMIN_TOKEN_FILE: cannot read the file it names" in r.err, r.err
    r = run(["--admin-token-file", str(tmp_path / "token"), "--print-config"], env={"DPRAG_ADMIN_TOKEN": "x" * 20})
    assert r.exit_code == 0 and "x" * 20 not in r.output and "short" not in r.output  # never printed
    assert not (tmp_path / "d").exists()


def test_a_password_file_that_cannot_be_read_is_named(tmp_path, run):
    args = ["--dir", str(tmp_path / "d"), "--store", "postgresql://app@127.0.0.1:1/dprag?schema=w"]
    r = run(args, env={"DPRAG_DATABASE_PASSWORD_FILE": str(tmp_path / "missing")})
    assert r.exit_code == 2 and "DPRAG_DATABASE_PASSWORD_FILE: cannot read the file it names" in r.err, r.err
    (tmp_path / "empty").write_text("\n")
    r = run([*args, "--database-password-file", str(tmp_path / "empty")])
    assert r.exit_code == 2 and "DPRAG_DATABASE_PASSWORD_FILE: names an empty file" in r.err, r.err


def test_dir_is_required_to_serve_but_not_to_ask_status(run):
    r = run([])
    assert r.exit_code == 2 and "--dir is required" in r.err, r.err
    r = run(["status"])
    assert r.exit_code == 2 and "--admin URL" in r.err, r.err


def test_status_reports_an_unreachable_replica_as_such(run):
    """A port nothing listens on (connection refused): named UNREACHABLE, exit 1 — never a traceback."""
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run(["status", "--admin", f"http://127.0.0.1:{port}", "--timeout", "2"])
    assert r.exit_code == 1, r.output
    assert r.output.startswith(f"http://127.0.0.1:{port}  UNREACHABLE (") and "refused" in r.output.lower(), r.output
