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

from dprag.errors import DpragError

# name -> "module:attribute" of a click command or group on this floor or below.
_BUILTIN = {
    "accounting": "dprag.audit.commands.accounting:accounting",
    "audit": "dprag.audit.commands.audit:audit",
    "account": "dprag.audit.commands.account:account",
    "zk": "dprag.audit.commands.zk:zk",
    "serve": "dprag.audit.commands.serve:serve",
    "provider": "dprag.audit.commands.provider:provider",
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


def _fail(argv, message: str, code: int) -> int:
    """One line on stderr; under --json also a JSON error object on stdout (spec/protocol.md §8.11). The message
    may quote a file or a flag's value: it is made printable (one line, no control characters)."""
    from .protocol.encoding import printable

    message = printable(message)
    click.echo(f"error: {message}", err=True)
    args = sys.argv[1:] if argv is None else list(argv)
    if "--json" in args or "--public" in args:
        import json

        click.echo(json.dumps({"schema": "dprag.error/1", "error": message, "exit_code": code}, sort_keys=True))
    return code


def main(argv=None) -> int:
    """Exit codes: 0 success / PASS; 1 FAIL (a defect inside the audited bundle); 2 unusable auditor input."""
    try:
        rv = cli.main(args=argv, prog_name="dprag", standalone_mode=False)
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.UsageError as e:
        hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
        return _fail(argv, e.format_message() + hint, 2)
    except click.ClickException as e:
        return _fail(argv, e.format_message(), e.exit_code if e.exit_code in (1, 2) else 2)
    except click.exceptions.Abort:
        return _fail(argv, "aborted", 2)
    except DpragError as e:
        return _fail(argv, str(e), 2)
    except (OverflowError, ValueError, ArithmeticError) as e:  # a value no check caught: still one line, exit 2
        return _fail(argv, f"{type(e).__name__}: {e}", 2)
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
