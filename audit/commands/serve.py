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
"""

from __future__ import annotations

from pathlib import Path

import click

from dprag.errors import DpragError


@click.command("serve")
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--toy", is_flag=True, help="serve a toy window made under --dir (made on first start)")
@click.option("--accounts", default=4, show_default=True, type=click.IntRange(1, 999), help="--toy: accounts to make")
@click.option("--store", default=None, help="a postgresql:// URL (see the command's help)")
@click.option("--embedder", default=None, help="a dprag.embedders entry point (default: the committed one's name)")
@click.option("--generator", default=None, help="a dprag.generators entry point (required without --toy)")
@click.option(
    "--auditor-key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="file holding the auditor's Ed25519 public key (hex)",
)
@click.option(
    "--threads",
    type=click.IntRange(1, 1024),
    default=None,
    help="blocking calls (generation, store) run at once per process (default: anyio's 40); the rest queue",
)
@click.option(
    "--signer",
    "signers",
    multiple=True,
    help="the provider's signing key when it is held outside the directory and store: file:PATH (mode 0600) or an "
    "RFC 7512 pkcs11: URI (spec/provider.md §7); repeat it for a retired key still signing its era",
)
@click.option("--log-level", default="warning", show_default=True)
def serve(
    directory: Path,
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
) -> int:
    """Serve a window over HTTP (spec/api.md)."""
    try:
        import uvicorn

        from ..provider.http.app import create_app
    except ImportError as e:
        raise click.UsageError(f"dprag serve needs the serve extra (pip install 'dprag[serve]'): {e}") from None
    try:
        svc, akey = open_service_dir(directory, toy, accounts, store, embedder, generator, auditor_key, signers)
    except DpragError as e:
        raise click.UsageError(f"--dir {directory}: {e}") from None
    svc.start_schedule()  # checkpoints on the policy's release grid, when it sets a period (protocol §5.6)
    app = create_app(svc, auditor_key=akey, threads=threads)
    click.echo(f"dprag serve: window {svc.policy.window} on http://{host}:{port} (store {svc.store.dialect})", err=True)
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
    finally:
        svc.close()
    return 0


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
