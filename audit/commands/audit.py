"""``dprag audit ...``: verify a bundle, print its ledger root and leaves."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..verifier import BundleError, load_bundle, verify
from ..ledger.rfc6962 import root_from_leaves


@click.group("audit")
def audit() -> None:
    """Audit bundles: verification and ledger inspection."""


@audit.command("verify")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--receipts", type=click.Path(path_type=Path), default=None,
              help="JSONL of receipts supplied by accounts (never taken from the provider's bundle).")
@click.option("--mode", type=click.Choice(["full", "sampled"]), default="full", show_default=True)
@click.option("--samples", type=click.IntRange(min=1), default=None, help="records to check in sampled mode")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def verify_cmd(bundle: Path, receipts: Path | None, mode: str, samples: int | None, as_json: bool) -> int:
    """Re-check everything in BUNDLE; PASS ε δ (exit 0), FAIL reasons (exit 1), unusable input (exit 2)."""
    if mode == "sampled" and samples is None:
        raise click.UsageError("--mode sampled needs --samples S")
    v = verify(bundle, receipts=receipts, mode=mode, samples=samples)
    if as_json:
        click.echo(json.dumps(v.to_json(), sort_keys=True))
    else:
        if v.verdict == "PASS":
            click.echo(f"PASS {v.epsilon:.6g} {v.delta:.6g}")
            ch = v.channels
            click.echo(f"  relation: {ch['relation']}")
            click.echo(f"  retrieval channel: ε={ch['retrieval']['epsilon']:.6g} δ={ch['retrieval']['delta']:.3g} "
                       f"— {ch['retrieval']['covers']}")
            click.echo(f"  generation channel: ε={ch['generation']['epsilon']:.6g} δ=0 — {ch['generation']['covers']}")
        else:
            click.echo("FAIL")
            for r in v.reasons:
                click.echo(f"  {r}")
        click.echo(f"  attestation: {v.attestation}")
        if v.guarantee:
            click.echo(f"  {v.guarantee}")
        click.echo("  checked: " + ", ".join(f"{k}={n}" for k, n in sorted(v.checked.items())))
    return 0 if v.verdict == "PASS" else 1


@audit.group("ledger")
def ledger() -> None:
    """Inspect a bundle's public ledger."""


def _leaves(bundle: Path) -> list[bytes]:
    b = load_bundle(bundle)
    if b.framing_error:
        raise BundleError(b.framing_error)
    return b.leaves


@ledger.command("root")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def root_cmd(bundle: Path, as_json: bool) -> int:
    """Size and RFC 6962 root of the ledger."""
    leaves = _leaves(bundle)
    root = root_from_leaves(leaves).hex()
    if as_json:
        click.echo(json.dumps({"size": len(leaves), "root": root}))
    else:
        click.echo(f"{len(leaves)} {root}")
    return 0


@ledger.command("leaves")
@click.argument("bundle", type=click.Path(path_type=Path))
def leaves_cmd(bundle: Path) -> int:
    """Every leaf's exact bytes as hex, one per line (anyone can recompute the root)."""
    out = sys.stdout
    for leaf in _leaves(bundle):
        out.write(leaf.hex() + "\n")
    return 0
