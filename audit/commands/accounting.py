"""``dprag accounting ...``: privacy-accounting commands that need no model.

``dprag accounting collusion`` prints every bound of paper 002 for one (k, ε_acc, δ_acc, n) next to the
certified joint ε (``accounting.collusion.collusion_report``).  Bad input raises a typed
``dprag.errors`` error, which ``audit.cli.main`` turns into a message on stderr and exit code 2.
"""

from __future__ import annotations

import json
import math

import click

from dprag.accounting.collusion import collusion_report
from dprag.errors import InvalidParameterError

#: library field names -> the flags a user types
_FLAGS = {
    "k": "--k",
    "eps_acc": "--eps-acc",
    "delta_acc": "--delta-acc",
    "n": "--n",
    "delta": "--delta",
    "sigma": "--sigma",
    "sensitivity": "--sensitivity",
    "noise": "--noise",
    "calibration": "--calibration",
    "delta_policy": "--delta-policy",
}


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
@click.option(
    "--sigma",
    "sigma",
    type=float,
    default=None,
    help="per-query noise sigma [default: calibrated]; needs --sensitivity",
)
@click.option(
    "--sensitivity",
    "sensitivity",
    type=float,
    default=None,
    help="L2 sensitivity of one query's score vector under the relation the epsilon is for. "
    "2: replace-one document with raw cosine scores in [-1, 1] (a replaced document's score moves "
    "by up to 2) - the default when sigma is calibrated. 1: add/remove-one document with scores in "
    "[-1, 1] (one score appears or vanishes, absent = 0), or replace-one with scores clipped to an "
    "interval of width 1. With --noise discrete: the integer sensitivity in quantised units. "
    "Required with --sigma or --noise discrete (no default is sound for a given sigma).",
)
@click.option(
    "--noise",
    type=click.Choice(["gaussian", "discrete"]),
    default="gaussian",
    show_default=True,
    help="continuous Gaussian, or discrete Gaussian on integer scores (sigma, sensitivity in units)",
)
@click.option(
    "--calibration",
    type=click.Choice(["3.4", "exact", "3.9"]),
    default="3.4",
    show_default=True,
    help="how sigma is calibrated when --sigma is not given",
)
@click.option(
    "--delta-policy",
    "delta_policy",
    type=float,
    default=None,
    help="002 (5.2): policy joint delta; must exceed k*delta_acc",
)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def collusion(k, eps_acc, delta_acc, n, delta, sigma, sensitivity, noise, calibration, delta_policy, as_json):
    """Joint epsilon of a k-account coalition (002 Theorems 3.4 / 3.9, audit formula (5.2)) and the certified value."""
    if sensitivity is None:
        if sigma is not None or noise == "discrete":
            need = "--sigma" if sigma is not None else "--noise discrete"
            raise click.UsageError(
                f"--sensitivity is required with {need}: 2 for raw cosine scores under "
                "replace-one, 1 for add/remove-one (see --help); a given sigma certifies "
                "nothing without the sensitivity it is calibrated for"
            )
        sensitivity = 2.0  # sound for raw cosine scores under replace-one (spec/accounting/collusion.md)
    try:
        report = collusion_report(
            k,
            eps_acc,
            delta_acc,
            n,
            delta=delta,
            sigma=sigma,
            sensitivity=sensitivity,
            noise=noise,
            calibration=calibration,
            delta_policy=delta_policy,
        )
    except InvalidParameterError as e:  # name the flag as typed, not the library's field name
        flag = _FLAGS.get(e.field, e.field)
        shown = "" if e.value is None else f" (got {e.value!r})"
        raise click.BadParameter(f"{e.rule}{shown}", param_hint=f"'{flag}'") from None
    except (OverflowError, ArithmeticError):
        if sigma is not None:
            raise click.BadParameter(
                f"too small for these parameters: the privacy loss of one query with "
                f"sigma={sigma!r} overflows a float (no finite epsilon)",
                param_hint="'--sigma'",
            ) from None
        raise click.UsageError(
            "the calibrated sigma overflows: --eps-acc, --delta-acc or --n is out of range (no finite epsilon)"
        ) from None
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
        click.echo(
            f"audit (5.2): delta_comp={_fmt(a['delta_comp'])} leading={_fmt(a['leading'])} "
            f"closed_form={_fmt(a['closed_form'])} certified@delta_policy={_fmt(a['certified'])}"
        )
    for note in report["notes"]:
        click.echo(f"note: {note}")
