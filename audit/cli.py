"""The ``dprag`` command line.

Sub-commands are loaded lazily (``dprag audit verify`` must not import torch). Commands that drive
real models (``experiment``, ``demo``) are contributed by the ``rag_adapters`` floor through the
``dprag.commands`` entry-point group, so no module here imports a floor above it.

Exit codes: 0 success / PASS, 1 FAIL (verifier), 2 unusable input (message on stderr, no traceback).
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import entry_points

import click

from dprag.accounting.errors import DpragError

# name -> "module:attribute" of a click command or group on this floor or below.
_BUILTIN = {
    "accounting": "dprag.audit.commands.accounting:accounting",
    "audit": "dprag.audit.commands.audit:audit",
}


def _plugins() -> dict[str, str]:
    found = {}
    for ep in entry_points(group="dprag.commands"):
        found[ep.name] = ep.value
    return found


class _LazyGroup(click.Group):
    def _targets(self) -> dict[str, str]:
        targets = dict(_plugins())
        targets.update(_BUILTIN)
        return targets

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self._targets()))

    def get_command(self, ctx, name):
        cmd = super().get_command(ctx, name)
        if cmd is not None:
            return cmd
        target = self._targets().get(name)
        if target is None:
            return None
        mod, _, attr = target.partition(":")
        try:
            return getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as e:
            # e.g. the rag extra is not installed: the other commands must keep working
            reason = f"{type(e).__name__}: {e}"

            @click.command(name, help=f"(unavailable: {reason})", context_settings={"ignore_unknown_options": True})
            @click.argument("args", nargs=-1, type=click.UNPROCESSED)
            def unavailable(args):
                raise click.ClickException(f"'{name}' is unavailable here ({reason}); install dprag[rag]")

            return unavailable


@click.group(cls=_LazyGroup)
@click.version_option(package_name="dprag")
def cli():
    """dprag: privacy accounting and audit for retrieval-augmented generation."""


def main(argv=None) -> int:
    try:
        rv = cli.main(args=argv, prog_name="dprag", standalone_mode=False)
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return 2
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 2
    except DpragError as e:
        click.echo(f"error: {e}", err=True)
        return 2
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
