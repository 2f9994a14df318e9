"""A real ``dprag serve`` for tests and benchmarks: uvicorn on a loopback port, in a thread of this process
(``LiveServer``) or as separate replica processes (``start_replica``), stopped by the caller."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from .postgres import free_port


class LiveServer:
    """``with LiveServer(app) as url:`` — the app on http://127.0.0.1:<free port> until the block ends."""

    def __init__(self, app, port: int | None = None):
        import uvicorn

        self.port = port or free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False, lifespan="off")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> str:
        self.thread.start()
        wait_ready(self.url, 30)
        return self.url

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(15)


def wait_ready(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url + "/v1/info", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not come up within {timeout} s")
        time.sleep(0.1)


def start_replica(
    directory: Path,
    *,
    toy: bool = True,
    store: str | None = None,
    port: int | None = None,
    log=None,
    extra: tuple[str, ...] = (),
    generator: str = "toy",
    env: dict[str, str] | None = None,
):
    """``dprag serve`` as a child process (a replica); returns (Popen, url) once it answers. ``toy=False`` starts a
    replica of the window at ``directory`` with ``generator``, or, with ``store``, one started from the store alone (its
    directory materialised into ``directory``). ``env``: variables added to this process's environment for it (e.g.
    the test-only ``DPRAG_TEST_TOY_HOLD`` of ``audit.testing.toy``)."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "dprag", "serve", "--dir", str(directory), "--port", str(port), *extra]
    if toy:
        cmd.append("--toy")
    else:
        cmd += ["--generator", generator]
    if store:
        cmd += ["--store", store]
    return launch(cmd, port, env=env, log=log)


def launch(
    cmd: list[str],
    port: int,
    *,
    env: dict[str, str] | None = None,
    log=None,
    timeout: float = 300.0,
    host: str = "127.0.0.1",
):
    """Start the server ``cmd`` (listening on ``host``:``port``, answering /v1/info) as a child process with ``env``
    added to this process's environment; returns (Popen, url) once it answers, or kills it and raises TimeoutError."""
    child_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    p = subprocess.Popen(cmd, stdout=log or subprocess.DEVNULL, stderr=log or subprocess.DEVNULL, env=child_env)
    url = f"http://{host}:{port}"
    try:
        wait_ready(url, timeout)
    except TimeoutError:
        p.kill()
        raise
    return p, url


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def stop_replicas(*procs) -> None:
    """SIGTERM every replica still running, wait up to 20 s each, SIGKILL the ones that do not exit."""
    import signal

    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
