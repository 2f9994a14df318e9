"""Another host for tests: a Linux network namespace joined to this one by a veth pair (``ip netns``, iproute2).

A process started in it (``TestHost.run``, ``TestHost.start_replica``) has a network stack of its own: its loopback
is not this host's, and it reaches this host only at ``gateway`` over the link, as a replica on another machine
reaches the database server. The filesystem is still shared. Creating one needs CAP_NET_ADMIN (root here);
``TestHost.create`` raises ``HostUnavailable`` where that is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .live import launch
from .postgres import free_port


class HostUnavailable(RuntimeError):
    """This machine cannot make a network namespace (no iproute2, or no CAP_NET_ADMIN)."""


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise HostUnavailable(f"ip {' '.join(args)}: {r.stderr.strip()[:200]}")


class TestHost:
    """``TestHost.create()``: a namespace ``host.name`` at ``host.address``, reaching this host at ``host.gateway`` (a
    /30 of 10.231.0.0/16 chosen from this process id); ``remove()`` deletes it, and its link with it."""

    __test__ = False  # not a pytest test class

    def __init__(self, name: str, address: str, gateway: str, network: str):
        self.name, self.address, self.gateway, self.network = name, address, gateway, network

    @classmethod
    def create(cls) -> TestHost:
        tag = os.getpid() % 16000
        name, outer, inner = f"dprag-h{tag}", f"dpv{tag}a", f"dpv{tag}b"
        base = f"10.231.{tag // 64}.{(tag % 64) * 4}"
        prefix = base.rsplit(".", 1)[0]
        last = int(base.rsplit(".", 1)[1])
        gateway, address = f"{prefix}.{last + 1}", f"{prefix}.{last + 2}"
        # one left behind by a killed run of a process with the same id would make "add" fail: gone first
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        try:
            _ip("netns", "add", name)
        except (HostUnavailable, FileNotFoundError) as e:
            raise HostUnavailable(str(e)) from None
        host = cls(name, address, gateway, f"{base}/30")
        try:
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", name)
            _ip("addr", "add", f"{gateway}/30", "dev", outer)
            _ip("link", "set", outer, "up")
            _ip("-n", name, "addr", "add", f"{address}/30", "dev", inner)
            _ip("-n", name, "link", "set", inner, "up")
            _ip("-n", name, "link", "set", "lo", "up")
        except BaseException:
            host.remove()
            raise
        return host

    def remove(self) -> None:
        """Delete the namespace; its end of the link goes with it, and so the other end."""
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)

    def run(self, cmd: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.name, *cmd], capture_output=True, text=True, timeout=timeout)

    def start_replica(self, directory: Path, store: str, *, generator: str = "toy", timeout: float = 300.0):
        """``dprag serve`` on this host from the database URL ``store`` alone (its directory materialised into
        ``directory``), listening on ``address``; returns (Popen, url) once it answers."""
        port = free_port()
        cmd = [sys.executable, "-m", "dprag", "serve", "--dir", str(directory), "--host", self.address]
        cmd += ["--port", str(port), "--generator", generator, "--store", store]
        return launch(["ip", "netns", "exec", self.name, *cmd], port, host=self.address, timeout=timeout)
