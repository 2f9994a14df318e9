"""A throwaway PostgreSQL server for tests and benchmarks: Debian's package (``postgresql``), a cluster in a temporary
directory on a loopback port, trust authentication, stopped at the end. ``initdb`` and ``pg_ctl`` refuse to run as
root, so as root they run as the ``postgres`` user (``runuser``), which owns the cluster's directory.

``python -m tests.support.postgres start DIR [PORT]`` prints ``DPRAG_TEST_PG=<url>`` (for ``eval``);
``... stop DIR`` stops it. Tests use ``TempCluster`` (tests/conftest.py's ``pg_url`` fixture).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path


def pg_bin(name: str) -> str | None:
    """The newest Debian PostgreSQL binary ``name`` (``/usr/lib/postgresql/<v>/bin``), or one on PATH."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return found[-1] if found else shutil.which(name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TempCluster:
    """``TempCluster(directory, port=None).start()`` -> the server's URL (database ``dprag``); ``stop()``;
    ``restart()`` (a fast shutdown that drops every connection, then a start: the fault tests' database restart)."""

    def __init__(
        self, directory: Path, port: int | None = None, *, listen: tuple[str, ...] = (), trust: tuple[str, ...] = ()
    ):
        """``listen``: addresses to listen on besides 127.0.0.1; ``trust``: networks (CIDR) whose connections are
        trusted besides loopback's (another test host's, ``tests.support.hosts``)."""
        self.dir = Path(directory)
        self.listen, self.trust = ("127.0.0.1", *listen), tuple(trust)
        self.port = port or free_port()
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    @property
    def pid(self) -> int:
        """The running server's postmaster process id (its first line of postmaster.pid)."""
        return int((self.data / "postmaster.pid").read_text().split()[0])

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/dprag"

    def _run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([*self._as, *cmd], capture_output=True, text=True, check=check, timeout=120)

    def start(self) -> str:
        initdb, pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
        if initdb is None or pg_ctl is None:
            raise RuntimeError("PostgreSQL is not installed (Debian: apt-get install -y postgresql)")
        self.dir.mkdir(parents=True, exist_ok=True)
        if self._as:
            shutil.chown(self.dir, "postgres")
        if not (self.data / "PG_VERSION").exists():
            self._run(initdb, "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
            if self.trust:
                with open(self.data / "pg_hba.conf", "a") as f:
                    f.writelines(f"host all all {net} trust\n" for net in self.trust)
        self._ctl("start")
        createdb = pg_bin("createdb") or "createdb"
        r = self._run(createdb, "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "dprag", check=False)
        if r.returncode != 0 and "already exists" not in r.stderr:
            raise RuntimeError(f"createdb failed: {r.stderr.strip()}")
        return self.url

    def _ctl(self, what: str) -> None:
        pg_ctl = pg_bin("pg_ctl")
        listen = ",".join(self.listen)
        opts = f"-p {self.port} -c listen_addresses={listen} -k {self.dir} -c max_connections=300 -c fsync=on"
        if what == "start":
            self._run(pg_ctl, "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "-t", "60", "start")
        else:
            self._run(pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "-t", "60", what, check=what != "stop")

    def restart(self, down_seconds: float = 0.0) -> None:
        self._ctl("stop")
        time.sleep(down_seconds)
        self._ctl("start")

    def add_password_role(self, user: str, password: str) -> str:
        """A login role ``user`` that must authenticate with ``password`` (SCRAM) over TCP, allowed to create schemas in
        ``dprag``; returns its URL without the password. The cluster's other roles stay trusted."""
        psql = pg_bin("psql") or "psql"
        sql = f"CREATE ROLE {user} LOGIN PASSWORD '{password}'; GRANT CREATE ON DATABASE dprag TO {user};"
        self._run(psql, "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "dprag", "-c", sql)
        hba = self.data / "pg_hba.conf"
        hba.write_text(f"host all {user} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())  # the first match wins
        self._run(pg_bin("pg_ctl") or "pg_ctl", "-D", str(self.data), "reload")
        return f"postgresql://{user}@127.0.0.1:{self.port}/dprag"

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._ctl("stop")


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tests.support.postgres start|stop DIR [PORT]", file=sys.stderr)
        return 2
    c = TempCluster(Path(argv[1]), int(argv[2]) if len(argv) > 2 else 55433)
    if argv[0] == "start":
        print(f"DPRAG_TEST_PG={c.start()}")
    else:
        c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
