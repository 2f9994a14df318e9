"""``dprag provider``: the provider's lifecycle from the command line, each command appending the protocol's leaf to
the one log (spec/protocol.md §3.2-§3.5) through ``ProviderService`` — the same rules, refusals and transactions as
the library, on the service directory ``--dir`` (or the toy layout with ``--toy``, as ``dprag serve --toy`` made it).

- ``dprag provider rotate-key --dir D``: a ``key`` leaf signed by the outgoing key; prints the incoming key (also
  written to ``D/provider.vkey``: what accounts and auditors follow, by inclusion, from the key they pinned);
- ``dprag provider add-documents --dir D --tenant T FILE``: a ``documents`` leaf (FILE: a JSON object id -> text);
- ``dprag provider set-policy --dir D FILE``: a ``policy`` leaf opening the next epoch (FILE: a policy object);
- ``dprag provider account add --dir D NAME --tenant T --key HEX`` and ``account revoke --dir D NAME``: registry
  leaves.

Each prints one JSON object (``{"leaf": position, ...}``); a refusal is exit 2, one line naming the field and the
rule, with nothing appended. ``--allow-weak`` lets a policy or a growth whose certified guarantee would be weak or
vacuous through (spec/protocol.md §8)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from dprag.errors import DpragError

from ..protocol.encoding import loads_bounded


@dataclass(frozen=True)
class _Where:
    """The service a command acts on: the options every ``dprag provider`` command shares."""

    directory: Path
    toy: bool
    store: str | None
    embedder: str | None
    generator: str | None
    signers: tuple[str, ...]

    def open(self) -> Any:
        from .serve import open_service_dir as open_service

        d = self.directory
        if self.toy and not (d / "service" / "config" / "policy.json").exists():
            raise click.UsageError(f"--dir {d}: holds no toy service (dprag serve --toy makes one)")
        if not self.toy and not (d / "config" / "policy.json").exists() and not self.store:
            raise click.UsageError(f"--dir {d}: not a provider's service directory")
        try:
            return open_service(d, self.toy, 0, self.store, self.embedder, self.generator, None, self.signers)[0]
        except DpragError as e:
            raise click.UsageError(f"--dir {d}: {e}") from None


def _service_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The shared options, handed to the command as one ``where: _Where`` argument."""

    @functools.wraps(fn)
    def command(
        directory: Path,
        toy: bool,
        store: str | None,
        embedder: str | None,
        generator: str | None,
        signers: tuple[str, ...],
        **rest: Any,
    ) -> Any:
        return fn(_Where(directory, toy, store, embedder, generator, signers), **rest)

    out: Callable[..., Any] = command
    for opt in reversed(
        [
            click.option("--dir", "directory", required=True, type=click.Path(file_okay=False, path_type=Path)),
            click.option("--toy", is_flag=True, help="the toy layout dprag serve --toy made under --dir"),
            click.option("--store", default=None, help="the store's postgresql:// URL (else the directory's)"),
            click.option("--embedder", default=None, help="a dprag.embedders name (default: the committed one)"),
            click.option("--generator", default=None, help="a dprag.generators name (required without --toy)"),
            click.option(
                "--signer",
                "signers",
                multiple=True,
                help="the provider's key held outside the directory: file:PATH or pkcs11:URI (as dprag serve)",
            ),
        ]
    ):
        out = opt(out)
    return out


def _run(svc: Any, what: Callable[[], dict[str, Any]]) -> int:
    """Run ``what`` on the open service; a refusal (``InvalidParameterError``, any DpragError) is exit 2 naming it."""
    try:
        out = what()
    except DpragError as e:
        raise click.UsageError(str(e)) from None
    finally:
        svc.close()
    click.echo(json.dumps(out, sort_keys=True))
    return 0


def _json_file(path: Path, flag: str) -> Any:
    try:
        return loads_bounded(path.read_bytes(), what=flag)
    except (OSError, ValueError) as e:
        raise click.UsageError(f"{flag} {path}: not a readable JSON file ({e})") from None


@click.group("provider")
def provider() -> None:
    """The provider's lifecycle: key rotation, documents, policy epochs, accounts (leaves of the one log)."""


@provider.command("rotate-key")
@_service_options
@click.option(
    "--new-signer",
    default=None,
    help="the incoming key held outside the directory and store: file:PATH or pkcs11:URI (default: a fresh key kept "
    "in the store, as at creation)",
)
def rotate_key_cmd(
    where: _Where,
    new_signer: str | None,
) -> int:
    """Rotate the provider's note key: a key leaf signed by the outgoing key, the first covering checkpoint signed
    by both; prints the incoming key and writes it to DIR/provider.vkey."""
    svc = where.open()

    def rotate() -> dict[str, Any]:
        from ..provider.signers import load_signer

        pos = svc.rotate_key(None if new_signer is None else load_signer(new_signer))
        (where.directory / "provider.vkey").write_text(svc.signer.vkey() + "\n")
        return {"leaf": pos, "provider_key": svc.signer.vkey()}

    return _run(svc, rotate)


@provider.command("add-documents")
@_service_options
@click.option("--tenant", required=True)
@click.option("--allow-weak", is_flag=True, help="add them even if the guarantee would become weak (δ >= 1/n)")
@click.argument("documents", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def add_documents_cmd(
    where: _Where,
    tenant: str,
    allow_weak: bool,
    documents: Path,
) -> int:
    """Append DOCUMENTS (a JSON object: new id -> text) to TENANT's index by a documents leaf."""
    docs = _json_file(documents, "DOCUMENTS")
    if not isinstance(docs, dict):
        raise click.UsageError(f"DOCUMENTS {documents}: must be a JSON object mapping new document ids to texts")
    svc = where.open()
    return _run(svc, lambda: {"leaf": svc.add_documents(tenant, docs, allow_weak=allow_weak), "added": len(docs)})


@provider.command("set-policy")
@_service_options
@click.option("--allow-weak", is_flag=True, help="commit it even if its certified guarantee would be weak")
@click.argument("policy_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def set_policy_cmd(
    where: _Where,
    allow_weak: bool,
    policy_file: Path,
) -> int:
    """Open the next epoch with POLICY_FILE (a policy object, spec/protocol.md §4) by a policy leaf."""
    from ..protocol.policy import Policy

    try:
        policy = Policy.from_dict(_json_file(policy_file, "POLICY_FILE"))
    except DpragError as e:
        raise click.UsageError(f"POLICY_FILE {policy_file}: {e}") from None
    svc = where.open()
    return _run(svc, lambda: {"leaf": svc.set_policy(policy, allow_weak=allow_weak), "epoch": len(svc.epochs) - 1})


@provider.group("account")
def account_group() -> None:
    """Accounts join and are revoked by registry leaves (spec/protocol.md §3.2)."""


@account_group.command("add")
@_service_options
@click.argument("name")
@click.option("--tenant", required=True)
@click.option("--key", "key", required=True, help="the account's public key (hex: its account.vkey)")
def account_add_cmd(
    where: _Where,
    name: str,
    tenant: str,
    key: str,
) -> int:
    """Register NAME on TENANT under KEY (an account leaf)."""
    svc = where.open()
    return _run(svc, lambda: {"leaf": svc.add_account(name, tenant, key.strip()), "account": name})


@account_group.command("revoke")
@_service_options
@click.argument("name")
def account_revoke_cmd(
    where: _Where,
    name: str,
) -> int:
    """Revoke NAME (an account-revoke leaf): it never rejoins; its pending requests get signed refusals."""
    svc = where.open()
    return _run(svc, lambda: {"leaf": svc.revoke_account(name), "account": name})
