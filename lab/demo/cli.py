"""The command ``dprag demo`` (entry point ``demo = "dprag.lab.demo:demo"``) and ``python -m dprag.lab.demo``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import click

from dprag.lab.demo.config import MECHANISMS, default_config, quick_config, seeded
from dprag.lab.demo.run import run_demo


@click.command("demo")
@click.option(
    "--out",
    "out",
    type=click.Path(path_type=Path),
    default=Path("dprag-demo"),
    show_default=True,
    help="output directory (bundle/, receipts.jsonl, verdict.json, report.md, plots/)",
)
@click.option("--quick", is_flag=True, help="small sizes (~2 minutes on 2 cores)")
@click.option(
    "--model",
    type=click.Choice(["real", "tiny", "toy"]),
    default="real",
    show_default=True,
    help="real: MiniLM + SmolLM2; tiny / toy: no model weights (for tests)",
)
@click.option(
    "--mechanism",
    type=click.Choice(list(MECHANISMS)),
    default="answer-vote-seen",
    show_default=True,
    help="the committed generation mechanism; all at the same per-query ε_q = 4 "
    "(composed ε 9.8752; the other mechanisms at m = 30 too): answer-level voting over the voters' own keys (-seen, "
    "the default: m = 30 voters, δ = 1e-6 per query and charged document, composed δ 6.56e-5; "
    "empty-context voters abstain), answer-level voting with the universal "
    "selection (pure ε, composed δ 1e-5), "
    "000 Alg. 5 at ε_token = 1.6, c = 3, or the same with public completion and "
    "the Non-RAG base measure (-ext; both --model toy only: 000 Alg. 5 is served only by a generator that declares "
    "failure-free sessions)",
)
@click.option(
    "--zk/--no-zk",
    default=True,
    show_default=True,
    help="Groth16 proofs for the zk tenant's queries (--no-zk: the same tenant and traffic, replay only)",
)
@click.option(
    "--seed",
    default=None,
    help="a text that derives the corpora (hence the questions), s_W (the retrieval and selection noise) and the "
    "account keys, for a reproducible run whose noise anyone with the seed can recompute; default: the fixed corpora, "
    "noise and keys from the OS CSPRNG",
)
@click.option("--no-progress", is_flag=True, help="no progress bars")
def demo(out: Path, quick: bool, model: str, mechanism: str, zk: bool, seed: str | None, no_progress: bool) -> int:
    """Run the audited multi-tenant DP-RAG service end to end and verify it (exit 0 iff PASS)."""
    if mechanism.startswith("pure-dp-rag") and model != "toy":
        # refused before any model loads: the service would refuse it at create (spec/provider.md §3.5)
        raise click.UsageError(
            f"--mechanism {mechanism}: 000 Alg. 5 has no per-voter containment and is served only by a generator that "
            f"declares failure-free sessions; the {model} model's generator does not (spec/provider.md §3.5): use "
            "answer-vote-seen or answer-vote, or --model toy"
        )
    cfg = quick_config(model) if quick else default_config(model)
    cfg = seeded(replace(cfg, privacy=replace(cfg.privacy, mechanism=mechanism)), seed)
    if not zk:
        cfg = replace(cfg, tenants=tuple(replace(t, zk=False) for t in cfg.tenants))
    res = run_demo(out, cfg, progress=not no_progress)
    return 0 if res.passed else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dprag.lab.demo [options]``: the command with the CLI's exit codes (2 on bad input)."""
    from dprag.errors import DpragError

    try:
        rv = demo.main(args=None if argv is None else list(argv), prog_name="dprag demo", standalone_mode=False)
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return 2
    except DpragError as e:
        click.echo(f"error: {e}", err=True)
        return 2
    return rv if isinstance(rv, int) else 0
