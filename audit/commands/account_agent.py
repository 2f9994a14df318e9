"""``dprag account agent DIR``: the account's own process that keeps its embedder loaded (spec/protocol.md §5.1).

The account computes Q itself with the committed embedder — never the provider, which must not choose the Q the
account signs — so every ``dprag account ask`` used to load the model (MiniLM: seconds) before signing. The agent
loads it once and listens on ``DIR/agent.sock``, a Unix socket of mode 0600 in the account's directory (only the
account's owner can connect). ``dprag account ask DIR ...`` sends its question there when the socket answers and
prints what the agent's ask printed; otherwise it asks itself, as before. The agent re-reads the account's
directory for every ask (its counter, pending requests and receipts stay on disk, as the CLI keeps them) and runs
one ask at a time. Wire: one JSON line each way, ``{"question", "urls", "attempts"}`` →
``{"code", "out", "err"}``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import socketserver
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

SOCKET = "agent.sock"
#: ``commands.account.account_client`` and ``ask_once``
LoadClient = Callable[..., Any]
AskOnce = Callable[[Any, Path, str, list[str], int], tuple[int, str, str]]
#: the longest line either side reads (a question, the URLs; an answer with its citations)
MAX_LINE = 1 << 20


def socket_path(account_dir: Path) -> Path:
    return Path(account_dir) / SOCKET


def ask_via_agent(
    account_dir: Path, question: str, urls: list[str], attempts: int, timeout: float = 3600.0
) -> tuple[int, str, str] | None:
    """What the agent's ask returned, or None when no agent answers on ``DIR/agent.sock`` (absent or stale)."""
    path = socket_path(account_dir)
    if not path.exists():
        return None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(2.0)
        s.connect(str(path))
    except OSError:
        s.close()
        return None  # a socket left by an agent that died: ask without it
    with s:
        s.settimeout(timeout)
        s.sendall(json.dumps({"question": question, "urls": urls, "attempts": attempts}).encode() + b"\n")
        data = s.makefile("rb").readline(MAX_LINE)
    reply = json.loads(data)
    return int(reply["code"]), str(reply["out"]), str(reply["err"])


def _answers(path: Path) -> bool:
    """Whether an agent listens on ``path`` (a connection is accepted)."""
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


def open_agent(
    account_dir: Path, account_client: LoadClient, ask_once: AskOnce
) -> socketserver.ThreadingUnixStreamServer:
    """Load the account's embedder once and bind ``DIR/agent.sock`` (0600); ``serve_forever`` answers asks.
    ``account_client(dir, embedder)`` loads the account, ``ask_once(client, dir, question, urls, attempts)`` asks
    (``commands.account`` passes its own: this module imports nothing of it)."""
    d = Path(account_dir)
    embedder = account_client(
        d, None
    ).embedder  # loaded once (None: the account has no embedder; the agent saves little)
    lock = threading.Lock()

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            try:
                req = json.loads(self.rfile.readline(MAX_LINE))
                question, urls, attempts = str(req["question"]), [str(u) for u in req["urls"]], int(req["attempts"])
            except (ValueError, KeyError, TypeError) as e:
                reply = {"code": 2, "out": "", "err": f"agent: a malformed request ({e})"}
            else:
                with lock:  # one ask at a time: the account's counter is one sequence
                    try:
                        code, out, err = ask_once(account_client(d, embedder), d, question, urls, attempts)
                    except Exception as e:  # noqa: BLE001 - the agent outlives one bad ask; the CLI shows why
                        code, out, err = 1, "", f"ERROR agent: {type(e).__name__}: {e}"
                reply = {"code": code, "out": out, "err": err}
            self.wfile.write(json.dumps(reply).encode() + b"\n")

    path = socket_path(d)
    if _answers(path):
        raise OSError(f"{path}: another agent of this account is running")
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    old = os.umask(0o177)  # the socket is created 0600: only the account's owner connects
    try:
        server = socketserver.ThreadingUnixStreamServer(str(path), Handler)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    return server


def serve_agent(account_dir: Path, account_client: LoadClient, ask_once: AskOnce) -> None:
    """``open_agent``, then answer asks until interrupted; the socket is removed on the way out."""
    server = open_agent(account_dir, account_client, ask_once)
    path = socket_path(account_dir)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
