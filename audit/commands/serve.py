"""``dprag serve``: the provider's HTTP API (spec/api.md) on uvicorn, one process; replicas are more processes.

- ``dprag serve --toy --dir D [--host H --port P] [--store URL] [--accounts N]``: a toy window (hash embedder, toy
  generator) made under D on first start (keys under D/accounts/, D/auditor.key), reopened afterwards; seconds.
  TEST ONLY: ``DPRAG_TEST_TOY_HOLD`` in the environment makes the toy generator hold the answers of chosen requests
  after their record committed (``audit.testing.toy.toy_generator``; the replica fault test kills a replica then).
- ``dprag serve --dir D --generator NAME [--embedder NAME]``: a service directory made by the provider library
  (``ProviderService.create``), with its committed embedder (a ``dprag.embedders`` entry point; default: the one the
  directory's embedder.json names) and a ``dprag.generators`` entry point.
- ``--store URL``: with ``--toy`` on first start, where the window's store is made (a ``postgresql://`` URL); with an
  empty ``--dir`` (no --toy), a replica on another host: its directory is materialised from the store;
  otherwise the URL with credentials for a directory whose store is PostgreSQL (if not in ``PGPASSWORD``).
- ``--auditor-key FILE``: the auditor's public key (hex), which authenticates the confidential bundle export
  (``--toy``: D/auditor.vkey).
- ``--admin-port P [--admin-host H]``: the admin listener (``/metrics``, ``/status``; spec/provider.md §7), on
  loopback unless ``--admin-host`` says otherwise, which then needs a bearer token (``DPRAG_ADMIN_TOKEN`` or the file
  ``--admin-token-file``). ``--access-log -|FILE|off``: the JSON access log (default stderr). ``--otel-exporter
  none|console|otlp``: OpenTelemetry spans (the ``otel`` extra).
- ``dprag serve status [--admin URL ...]``: each replica's admin ``/status``; an unreachable one is reported as such.

Configuration: every option is also read from ``DPRAG_<OPTION>`` (``--admin-port``: ``DPRAG_ADMIN_PORT``; the store
also from ``DPRAG_DATABASE_URL``) and from the ``[serve]`` table of a TOML file (``--config FILE`` or
``DPRAG_CONFIG``; keys as the options, ``admin_port = 9464``). Precedence: flag > environment > file > default
(``--print-config`` shows each setting and where it came from). The database password is never needed on the
command line: ``DPRAG_DATABASE_PASSWORD``, the file ``DPRAG_DATABASE_PASSWORD_FILE`` (or ``--database-password-file``)
names, or ``PGPASSWORD``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
import sys
import threading
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import click
from click.core import ParameterSource

from dprag.errors import DpragError

#: the environment variables' prefix (``--admin-port``: ``DPRAG_ADMIN_PORT``)
PREFIX = "DPRAG_"
#: the bearer token of the admin listener, and the file variable that names a file holding it
TOKEN_ENV, TOKEN_FILE_ENV = "DPRAG_ADMIN_TOKEN", "DPRAG_ADMIN_TOKEN_FILE"
#: settings never shown by --print-config nor taken from the TOML file (secrets)
SECRET_KEYS = ("password", "token")


def _env(name: str, *more: str) -> list[str]:
    return [PREFIX + name.upper(), *more]


def _load_config(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """``--config FILE``: its ``[serve]`` table becomes the defaults of every other option (click's ``default_map``:
    a flag or an environment variable still wins). Unknown keys and secrets are refused by name."""
    if value is None:
        return None
    try:
        doc = tomllib.loads(value.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise click.BadParameter(f"cannot read it as TOML ({type(e).__name__}: {str(e)[:200]})", param=param) from None
    table = doc.get("serve", {})
    if set(doc) - {"serve"} or not isinstance(table, dict):
        raise click.BadParameter("must hold one [serve] table (keys as the options: admin_port = 9464)", param=param)
    known: dict[str, str] = {}  # a key (the long flag's name, dashes or underscores) -> the option's parameter
    for p in ctx.command.params:
        if isinstance(p, click.Option) and p.name not in ("config", "print_config", None):
            for flag in p.opts:
                if flag.startswith("--"):
                    known[flag[2:].replace("-", "_")] = p.name
    defaults: dict[str, object] = {}
    for key, v in table.items():
        name = key.replace("-", "_")
        if any(word in name for word in SECRET_KEYS) and not name.endswith("_file"):
            raise click.BadParameter(
                f"[serve] {key}: secrets are read from the environment or a file, never from this file "
                "(DPRAG_DATABASE_PASSWORD_FILE, DPRAG_ADMIN_TOKEN_FILE)",
                param=param,
            )
        if name not in known:
            raise click.BadParameter(
                f"[serve] {key}: not an option of dprag serve ({', '.join(sorted(known))})", param=param
            )
        if isinstance(v, (dict, list)):
            raise click.BadParameter(f"[serve] {key}: must be a string, a number or a boolean", param=param)
        defaults[known[name]] = v
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _read_secret(var: str, path: str) -> str:
    try:
        secret = Path(path).read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as e:
        raise click.UsageError(f"{var}: cannot read the file it names ({path}: {type(e).__name__})") from None
    if not secret:
        raise click.UsageError(f"{var}: names an empty file ({path})")
    return secret


def admin_token(token_file: Path | None) -> str | None:
    """The admin listener's bearer token: ``DPRAG_ADMIN_TOKEN``, else the file ``--admin-token-file`` (or
    ``DPRAG_ADMIN_TOKEN_FILE``) names, else None."""
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV]
    if token_file is not None:
        return _read_secret(TOKEN_FILE_ENV, str(token_file))
    return None


@click.group("serve", invoke_without_command=True)
@click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar=_env("config"),
    is_eager=True,
    expose_value=False,
    callback=_load_config,
    help="a TOML file whose [serve] table sets any option below (a flag or DPRAG_* variable wins)",
)
@click.option("--dir", "directory", default=None, envvar=_env("dir"), type=click.Path(file_okay=False, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, envvar=_env("host"))
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), envvar=_env("port"))
@click.option(
    "--toy", is_flag=True, envvar=_env("toy"), help="serve a toy window made under --dir (made on first start)"
)
@click.option(
    "--accounts",
    default=4,
    show_default=True,
    type=click.IntRange(1, 999),
    envvar=_env("accounts"),
    help="--toy: accounts to make",
)
@click.option(
    "--store",
    default=None,
    envvar=_env("store", "DPRAG_DATABASE_URL"),
    help="a postgresql:// URL, without its password (see the command's help)",
)
@click.option("--embedder", default=None, envvar=_env("embedder"), help="a dprag.embedders entry point")
@click.option("--generator", default=None, envvar=_env("generator"), help="a dprag.generators entry point")
@click.option(
    "--auditor-key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    envvar=_env("auditor_key"),
    help="file holding the auditor's Ed25519 public key (hex)",
)
@click.option(
    "--threads",
    type=click.IntRange(1, 1024),
    default=None,
    envvar=_env("threads"),
    help="blocking calls (generation, store) run at once per process (default: anyio's 40); the rest queue",
)
@click.option(
    "--signer",
    "signers",
    multiple=True,
    envvar=_env("signer"),
    help="the provider's signing key when it is held outside the directory and store: file:PATH (mode 0600) or an "
    "RFC 7512 pkcs11: URI (spec/provider.md §8); repeat it for a retired key still signing its era",
)
@click.option("--log-level", default="warning", show_default=True, envvar=_env("log_level"))
@click.option(
    "--database-password-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    envvar=_env("database_password_file"),
    help="a file holding the PostgreSQL password (or DPRAG_DATABASE_PASSWORD; never on the command line)",
)
@click.option("--admin-host", default="127.0.0.1", show_default=True, envvar=_env("admin_host"))
@click.option(
    "--admin-port",
    default=None,
    type=click.IntRange(0, 65535),
    envvar=_env("admin_port"),
    help="the admin listener's port (/metrics, /status); default: no admin listener",
)
@click.option(
    "--admin-token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    envvar=_env("admin_token_file"),
    help="a file holding the admin listener's bearer token (or DPRAG_ADMIN_TOKEN); needed off loopback",
)
@click.option(
    "--access-log",
    default="-",
    show_default=True,
    envvar=_env("access_log"),
    help="where the JSON access log goes: - (stderr), a file (appended), or off",
)
@click.option(
    "--otel-exporter",
    default="none",
    show_default=True,
    envvar=_env("otel_exporter"),
    type=click.Choice(["none", "console", "otlp"]),
    help="OpenTelemetry spans: console (JSON on stderr) or otlp (OTEL_EXPORTER_OTLP_*); needs the otel extra",
)
@click.option(
    "--reservation",
    default="auto",
    show_default=True,
    envvar=_env("reservation"),
    help="generation memory reserved before each charge (spec/provider.md §3.6): auto (the generator's device "
    "memory, else half the memory available at start), a number of bytes (K/M/G suffixes, powers of 1024), or off "
    "(also off: the hosted slot, one request at a time through a generator without a worst case)",
)
@click.option(
    "--reservation-wait",
    default=None,
    type=click.FloatRange(min=0),
    envvar=_env("reservation_wait"),
    help="seconds a request waits for its reservation before 503 busy (default 30)",
)
@click.option("--print-config", is_flag=True, help="print each setting and where it came from, then exit")
@click.pass_context
def serve(ctx: click.Context, **opts: object) -> int:
    """Serve a window over HTTP (spec/api.md); ``dprag serve status`` asks the replicas' admin listeners."""
    if ctx.invoked_subcommand is not None:
        return 0
    if opts["print_config"]:
        shown = {}
        for name, value in sorted(opts.items()):
            if name == "print_config":
                continue
            source = ctx.get_parameter_source(name)
            where = {ParameterSource.COMMANDLINE: "flag", ParameterSource.ENVIRONMENT: "env"}.get(source, "default")
            if source is ParameterSource.DEFAULT_MAP:
                where = "file"
            shown[name] = {
                "value": None if value is None else str(value) if isinstance(value, Path) else value,
                "from": where,
            }
        click.echo(json.dumps(shown, indent=1, sort_keys=True))
        return 0
    return _serve(ctx, **opts)


def _serve(
    ctx: click.Context,
    *,
    directory: Path | None,
    host: str,
    port: int,
    toy: bool,
    accounts: int,
    store: str | None,
    embedder: str | None,
    generator: str | None,
    auditor_key: Path | None,
    threads: int | None,
    signers: tuple[str, ...],
    log_level: str,
    database_password_file: Path | None,
    admin_host: str,
    admin_port: int | None,
    admin_token_file: Path | None,
    access_log: str,
    otel_exporter: str,
    reservation: str,
    reservation_wait: float | None,
    print_config: bool,
) -> int:
    capacity = parse_reservation(reservation)  # a bad value: exit 2 before anything starts
    if directory is None:
        raise click.UsageError("--dir is required (or DPRAG_DIR, or dir in the [serve] table of --config)")
    try:
        import uvicorn

        from ..provider.http.app import create_app
        from ..provider.http.observe import Telemetry, make_tracer
        from ..provider.storage.postgres import PASSWORD_FILE_ENV, parse_url, password_from_env
    except ImportError as e:
        raise click.UsageError(f"dprag serve needs the serve extra (pip install 'dprag[serve]'): {e}") from None
    if database_password_file is not None:
        os.environ[PASSWORD_FILE_ENV] = str(database_password_file)  # read where the store connects (postgres.py)
    if store is not None:
        try:
            password_from_env()  # a password file that cannot be read: named now, before anything starts
            on_cli = ctx.get_parameter_source("store") is ParameterSource.COMMANDLINE
            if on_cli and urllib.parse.urlsplit(store).password:
                click.echo(
                    "dprag serve: warning: the --store URL carries a password, visible to every user of this host "
                    "(ps): give it in DPRAG_DATABASE_PASSWORD or DPRAG_DATABASE_PASSWORD_FILE instead",
                    err=True,
                )
            if store.startswith(("postgresql://", "postgres://")):
                parse_url(store)
        except DpragError as e:
            raise click.UsageError(str(e)) from None
    token = admin_token(admin_token_file)
    from ..provider.http.admin import MIN_TOKEN_LENGTH

    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise click.UsageError(f"{TOKEN_ENV}: the admin token must be at least {MIN_TOKEN_LENGTH} characters")
    admin_sock = None
    if admin_port is not None:
        if token is None and not _is_loopback(admin_host):
            raise click.UsageError(
                f"--admin-host {admin_host} is not loopback: the admin listener (operator-only) then needs a bearer "
                f"token, {TOKEN_ENV} or {TOKEN_FILE_ENV}"
            )
        admin_sock = _listen(admin_host, admin_port)
    log_stream = None if access_log == "off" else sys.stderr if access_log == "-" else _append(access_log)
    try:
        tracer, provider = make_tracer(otel_exporter)
        telemetry = Telemetry(access_log=log_stream, tracer=tracer)
        svc, akey = open_service_dir(directory, toy, accounts, store, embedder, generator, auditor_key, signers)
    except DpragError as e:
        raise click.UsageError(f"--dir {directory}: {e}") from None
    if capacity != "auto" or reservation_wait is not None:
        from ..provider.reservation import DEFAULT_WAIT_SECONDS

        cap = svc.reservations.capacity if capacity == "auto" else capacity
        wait = DEFAULT_WAIT_SECONDS if reservation_wait is None else reservation_wait
        svc.reservations.set(cap, wait)
        svc.hosted_slot.set(None if cap is None else 1, wait)  # off: no hosted slot either
    svc.start_schedule()  # checkpoints on the policy's release grid, when it sets a period (protocol §5.6)
    app = create_app(svc, auditor_key=akey, threads=threads, telemetry=telemetry)
    admin_server = admin_thread = None
    if admin_sock is not None:
        from ..provider.http.admin import create_admin_app

        try:
            admin_app = create_admin_app(svc, telemetry, token=token)
        except DpragError as e:
            raise click.UsageError(str(e)) from None
        where = admin_sock.getsockname()
        admin_server = uvicorn.Server(
            uvicorn.Config(
                admin_app, host=where[0], port=where[1], log_level=log_level, access_log=False, lifespan="off"
            )
        )
        admin_thread = threading.Thread(target=admin_server.run, kwargs={"sockets": [admin_sock]}, daemon=True)
        admin_thread.start()
    admin_note = f"; admin on http://{admin_host}:{admin_sock.getsockname()[1]}" if admin_sock is not None else ""
    click.echo(
        f"dprag serve: window {svc.policy.window} on http://{host}:{port} (store {svc.store.dialect}){admin_note}",
        err=True,
    )
    try:
        uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False)).run()
    finally:
        if admin_server is not None and admin_thread is not None:
            admin_server.should_exit = True
            admin_thread.join(10)
        svc.close()
        telemetry.close()
        if provider is not None:
            provider.shutdown()
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound and listening on ``host``:``port`` (now: a port in use is a one-line error before serving)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise click.UsageError(f"--admin-port {port}: cannot listen on {host} ({e.strerror or e})") from None
    sock.set_inheritable(True)
    return sock


def _append(path: str):
    try:
        return open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - for the life of the process
    except OSError as e:
        raise click.UsageError(f"--access-log {path}: cannot open it ({e.strerror or e})") from None


@serve.command("status")
@click.option(
    "--admin",
    "urls",
    multiple=True,
    envvar="DPRAG_ADMIN_URL",
    help="a replica's admin URL (repeatable; default: --admin-host/--admin-port of dprag serve's settings)",
)
@click.option("--timeout", default=5.0, show_default=True, type=click.FloatRange(0.1, 300))
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="one JSON object instead of lines (dprag.serve-status/1, spec/cli-json.md)",
)
@click.pass_context
def status(ctx: click.Context, urls: tuple[str, ...], timeout: float, as_json: bool) -> None:
    """Each replica's state, from its admin listener: the window, the store (reachable or not), the ledger, the
    answers pending, the documents exhausted. Exit 0 if every replica answered with its store up, 1 otherwise (each
    failing replica named: unreachable, unauthenticated, or its store down). ``--json``: the same as one JSON object
    (spec/cli-json.md), each replica's ``state`` one of ok, store_down, unreachable, unauthenticated, error."""
    parent = ctx.parent.params if ctx.parent is not None else {}
    if not urls:
        if parent.get("admin_port") is None:
            raise click.UsageError("give --admin URL (or DPRAG_ADMIN_URL, or DPRAG_ADMIN_PORT)")
        urls = (f"http://{parent.get('admin_host', '127.0.0.1')}:{parent['admin_port']}",)
    token = admin_token(parent.get("admin_token_file"))
    results = [_ask_status(url.rstrip("/"), token, timeout) for url in urls]
    ok = all(r["state"] == "ok" for r in results)
    if as_json:  # each replica's GET <admin>/status as it answered, under its url and state
        click.echo(json.dumps({"schema": "dprag.serve-status/1", "ok": ok, "replicas": results}, sort_keys=True))
    else:
        for r in results:  # one line each
            click.echo(_status_line(r))
    ctx.exit(0 if ok else 1)


def _ask_status(url: str, token: str | None, timeout: float) -> dict[str, object]:
    req = urllib.request.Request(url + "/status", headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = json.loads(r.read())
    except urllib.error.HTTPError as e:
        return {"url": url, "state": "unauthenticated" if e.code == 401 else "error", "reason": f"HTTP {e.code}"}
    except (OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        text = getattr(reason, "strerror", None) or str(reason)
        return {"url": url, "state": "unreachable", "reason": str(text)[:200]}
    up = isinstance(body.get("store"), dict) and body["store"].get("up") is True
    return {"url": url, "state": "ok" if up else "store_down", "status": body}


def _status_line(r: dict[str, object]) -> str:
    url, state = r["url"], r["state"]
    if state in ("unreachable", "unauthenticated", "error"):
        return f"{url}  {str(state).upper()} ({r['reason']})"
    st = r["status"]
    assert isinstance(st, dict)
    store = st["store"]
    head = f"{url}  window {st['window']} epoch {st['epoch']}  pid {st['pid']}  up {st['uptime_seconds']} s  "
    head += f"store {store['dialect']} schema v{store.get('schema_version')}  "
    if state == "store_down":
        return head + f"STORE DOWN ({store.get('error')})"
    tenants = ", ".join(f"{t}: {v['exhausted']}/{v['documents']} exhausted" for t, v in st.get("tenants", {}).items())
    return (
        head + f"ok  ledger {st['ledger_size']}  served {st['served_requests']}  pending {st.get('pending_answers')}  "
        f"in flight {st['in_flight']}  {tenants}"
    )


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_reservation(text: str) -> int | None | str:
    """``--reservation``: "auto", "off" (None), or a positive number of bytes with an optional K/M/G/T suffix
    (powers of 1024; "KiB" etc. also read); anything else is a usage error naming the flag."""
    t = text.strip()
    if t.lower() in ("auto", "off"):
        return "auto" if t.lower() == "auto" else None
    m = re.fullmatch(r"(\d+)\s*([KMGT]?)(?:i?B)?", t, flags=re.IGNORECASE)
    if m is None or int(m.group(1)) * _UNITS[m.group(2).upper()] < 1:
        raise click.UsageError(
            f"--reservation {text!r}: must be auto, off, or a positive number of bytes (e.g. 4G, 512M, 1073741824)"
        )
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def open_service_dir(directory, toy, accounts, store, embedder, generator, auditor_key, signers=()):
    """The service of ``directory`` (``--toy``: the toy layout, made on first use with ``accounts`` accounts), with
    the embedder and generator named and the ``--signer`` specs given; returns it and the auditor key (hex, or None).
    Also `dprag provider`."""
    from ..provider.service import ProviderService
    from ..provider.signers import load_signer

    signer = [load_signer(s) for s in signers] or None

    akey = auditor_key.read_text().strip() if auditor_key else None
    if toy:
        from ..testing.toy import make_toy_directory, open_toy_directory, toy_generator

        gen = toy_generator()  # TEST ONLY: DPRAG_TEST_TOY_HOLD makes it hold chosen answers (audit/testing/toy.py)
        fresh = not (directory / "service" / "config" / "policy.json").exists()
        svc = (
            make_toy_directory(
                directory, store=store, accounts=accounts, generator=gen, signer=signer[0] if signer else None
            )
            if fresh
            else open_toy_directory(directory, store=store, generator=gen, signer=signer)
        )
        return svc, akey or (directory / "auditor.vkey").read_text().strip()
    if generator is None:
        raise click.UsageError("--generator NAME is required without --toy (a dprag.generators entry point)")
    if not (directory / "config" / "policy.json").exists() and store:  # a replica on another host
        from ..provider.storage import materialize

        materialize(store, directory)
    from importlib.metadata import entry_points

    from ..provider import models as serving_models

    gens = {ep.name: ep for ep in entry_points(group="dprag.generators")}
    if generator not in gens:
        raise click.UsageError(f"--generator {generator}: no such dprag.generators entry point ({sorted(gens)})")
    if embedder is None:
        from ..protocol.encoding import loads_bounded

        path = directory / "config" / "embedder.json"
        desc = loads_bounded(path.read_bytes(), what=str(path))["descriptor"]
        embedder = desc.get("entry_point") or desc.get("model")
    try:
        emb = serving_models.load_embedder(embedder)
    except DpragError as e:
        raise click.UsageError(f"--embedder {embedder}: {e}") from None
    svc = ProviderService.open(directory, embedder=emb, generator=gens[generator].load()(), store=store, signer=signer)
    return svc, akey
