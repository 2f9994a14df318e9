"""Option parsing shared by the ``dprag experiment …`` commands: comma-separated lists and the exit-2 error.

Every error names the flag the user typed and the rule (``click.BadParameter`` → one line on stderr, exit 2);
``Fail`` turns a library ``DpragError`` raised while setting a run up into the same one-line exit 2."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import click

from dprag.rag_adapters.scoring import ScoreBins


class Fail(click.ClickException):
    """A bad setting found after parsing (a library error naming the field): one line on stderr, exit 2."""

    exit_code = 2


def parse_list(flag: str, text: str, conv: Callable = float, kind: str = "numbers") -> tuple:
    """The comma-separated values of ``flag`` converted by ``conv``; empty items are skipped, none is an error."""
    try:
        vals = tuple(conv(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"must be comma-separated {kind}, got {text!r}", param_hint=flag) from None
    if not vals:
        raise click.BadParameter("must not be empty", param_hint=flag)
    return vals


def finite_floats(flag: str, text: str) -> tuple[float, ...]:
    """Comma-separated finite numbers."""
    vals = parse_list(flag, text, float)
    for v in vals:
        if not math.isfinite(v):
            raise click.BadParameter(f"every value must be finite, got {v}", param_hint=flag)
    return vals


def positive_floats(flag: str, text: str) -> tuple[float, ...]:
    """Comma-separated finite numbers, each > 0."""
    vals = finite_floats(flag, text)
    for v in vals:
        if v <= 0:
            raise click.BadParameter(f"every value must be > 0, got {v}", param_hint=flag)
    return vals


def auto_ints(flag: str, text: str) -> tuple[int, ...]:
    """Comma-separated integers >= 0 (0 = choose automatically)."""
    vals = parse_list(flag, text, int, "integers")
    if min(vals) < 0:
        raise click.BadParameter("must be integers >= 0 (0 = auto)", param_hint=flag)
    return vals


def choices(flag: str, text: str, allowed: Sequence[str]) -> list[str]:
    """Comma-separated names from ``allowed``, duplicates dropped, order kept."""
    vals = [x.strip() for x in text.split(",") if x.strip()]
    bad = [v for v in vals if v not in allowed]
    if bad or not vals:
        raise click.BadParameter(f"unknown value(s) {bad}; choose from {list(allowed)}", param_hint=flag)
    return list(dict.fromkeys(vals))


#: MuRAG-Ada bins on the MiniLM scale for the experiments: 50 bins of width 1 from 80 down to 30 (scores above
#: 80 clipped into the top bin). Chosen on dev questions by the threshold error of the noisy prefix sums
#: (001 Fig. 5's criterion): the noise of 000 Alg. 2 accumulates over every released bin (a random walk),
#: and with width 0.2 from 90 the ~150 empty bins above the relevant scores (50-73) made the released
#: threshold miss the true top-20 score by 4.9 (median over 20 dev questions; 2 of 20 released no document)
#: against 1.4 with these bins (docs/lab/privacy-utility.md §5.3).
EXPERIMENT_BINS = (30.0, 80.0, 1.0)


def default_scale(kind: str, bins: tuple[float, float, float] | None = None) -> dict:
    """τ grid and MuRAG-Ada bins on the retriever's score scale (fixed configuration, spec/experiments.md)."""
    if kind == "words":
        return {"taus": (4.0, 6.0), "edges": tuple(float(x) for x in range(30, -1, -1))}
    return {"taus": (45.0, 50.0), "edges": tuple(ScoreBins(*(bins or EXPERIMENT_BINS)).edges().tolist())}
