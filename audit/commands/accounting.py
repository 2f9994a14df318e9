"""``dprag accounting ...``: privacy-accounting commands that need no model.

``dprag accounting collusion`` prints every bound of paper 002 for one (k, ε_acc, δ_acc, n) next to the
certified joint ε (``accounting.collusion.collusion_report``).  Bad input raises a typed
``accounting.errors`` error, which ``audit.cli.main`` turns into a message on stderr and exit code 2.
"""

from __future__ import annotations

import json
import math

import click

from dprag.accounting.collusion import collusion_report


@click.group()
def accounting():
    """Privacy accounting: collusion bounds and certified joint epsilon."""


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}" if math.isfinite(v) else str(v)
    return str(v)


def _finite(obj):
    """Strict JSON: a non-finite float (an ε that could not be certified) becomes null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


_SUMMARY = [
    ("leading", "002 (3.2)/(5.2) leading term at delta_joint (NOT an upper bound)"),
    ("closed_form", "Theorem 3.4 with residual, at delta_joint"),
    ("rdp", "Theorem 3.9 (3.6), at delta"),
    ("rdp_accountant", "RDP accountant (improved conversion), at delta"),
    ("exact", "exact composition, at delta"),
    ("certified", "certified upper bound, at delta"),
    ("exact_at_delta_joint", "exact composition, at delta_joint"),
    ("certified_at_delta_joint", "certified upper bound, at delta_joint"),
]


@accounting.command("collusion")
@click.option("--k", "k", type=int, required=True, help="coalition size (number of colluding accounts), >= 1")
@click.option("--eps-acc", "eps_acc", type=float, required=True, help="per-account epsilon, > 0")
@click.option("--delta-acc", "delta_acc", type=float, required=True, help="per-account delta, in (0, 1)")
@click.option("--n", "n", type=int, required=True, help="queries per account in the audit window, >= 1")
@click.option("--delta", "delta", type=float, default=None, help="delta for exact/certified/rdp [default: delta-acc]")
@click.option("--sigma", "sigma", type=float, default=None, help="per-query noise sigma [default: calibrated]")
@click.option("--sensitivity", "sensitivity", type=float, default=1.0, show_default=True,
              help="score sensitivity under replace-one (raw cosine: 2)")
@click.option("--noise", type=click.Choice(["gaussian", "discrete"]), default="gaussian", show_default=True,
              help="continuous Gaussian, or discrete Gaussian on integer scores (sigma, sensitivity in units)")
@click.option("--calibration", type=click.Choice(["3.4", "exact", "3.9"]), default="3.4", show_default=True,
              help="how sigma is calibrated when --sigma is not given")
@click.option("--delta-policy", "delta_policy", type=float, default=None,
              help="002 (5.2): policy joint delta; must exceed k*delta_acc")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def collusion(k, eps_acc, delta_acc, n, delta, sigma, sensitivity, noise, calibration, delta_policy, as_json):
    """Joint epsilon of a k-account coalition (002 Theorems 3.4 / 3.9, audit formula (5.2)) and the certified value."""
    report = collusion_report(
        k, eps_acc, delta_acc, n, delta=delta, sigma=sigma, sensitivity=sensitivity, noise=noise,
        calibration=calibration, delta_policy=delta_policy,
    )
    if as_json:
        click.echo(json.dumps(_finite(report), sort_keys=False, allow_nan=False))
        return
    click.echo(f"k={k} accounts x n={n} queries, per-account ({_fmt(report['eps_acc'])}, {_fmt(report['delta_acc'])})")
    click.echo(f"sigma = {_fmt(report['sigma'])} ({report['sigma_source']})")
    click.echo(f"delta = {_fmt(report['delta'])}, delta_joint = delta + k*delta_acc = {_fmt(report['delta_joint'])}")
    click.echo(f"neighbouring: {report['neighbouring']}")
    for key, label in _SUMMARY:
        click.echo(f"  {key:<26} {_fmt(report[key]):>14}   {label}")
    if "audit" in report:
        a = report["audit"]
        click.echo(f"audit (5.2): delta_comp={_fmt(a['delta_comp'])} leading={_fmt(a['leading'])} "
                   f"closed_form={_fmt(a['closed_form'])} certified@delta_policy={_fmt(a['certified'])}")
    for note in report["notes"]:
        click.echo(f"note: {note}")
