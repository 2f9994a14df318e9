"""The exact law of answer-level voting's release given the voters' answers, scored against gold answers.

Answer-level voting with the seen selection (spec/accounting/rag.md §5.2) releases a key the voters wrote, or ⊥,
from ``seen_key_probabilities`` at the cell's ε and δ_q. Given the voters' answers (and which of them abstained),
the chance that the release is correct is therefore a number, not a draw: the sum of the probabilities of the keys
that contain a gold answer (plus P(⊥) when the fallback text is itself correct). Summed over questions it is the
**expected number of correct releases** -- what ``dprag experiment normalizer-check`` compares normalisers by, what
the demo's calibration chooses its mechanism by, and what the demo's report gives beside its one draw.

The draw itself is a sum of independent Bernoullis (each question's release is drawn from its own stream), so its
law is the Poisson-binomial of the per-question chances: ``count_law`` gives it exactly (convolution) and
``central_interval`` the smallest counts holding the draw with probability at least 1 − α on each side.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def voted_keys(
    answers: Sequence[str | None],
    abstained: Sequence[bool],
    question: str,
    normalizer: Callable[..., str],
    key_words: int,
) -> list[str]:
    """The keys the voters vote with: every answered, non-abstaining voter's key under ``normalizer`` (an empty
    key abstains)."""
    return [
        k
        for a, gone in zip(answers, abstained, strict=True)
        if a is not None and not gone
        for k in [normalizer(a, question, max_words=key_words)]
        if k
    ]


def correct_chance(
    voted: Sequence[str], gold: Sequence[str], epsilon: float, delta: float, *, fallback_correct: bool = False
) -> float:
    """P(the seen selection's release over ``voted`` at (ε, δ) contains a gold answer); ⊥ counts as correct only
    when ``fallback_correct`` (the text released on ⊥ contains one)."""
    from dprag.accounting.mechanisms.seen_key_selection import seen_key_probabilities
    from dprag.rag_adapters.metrics import contains_answer

    law = seen_key_probabilities(voted, epsilon, delta)
    p = sum(pr for k, pr in law.items() if k and contains_answer(k, gold))
    return p + (law[None] if fallback_correct else 0.0)


def count_law(chances: Sequence[float]) -> np.ndarray:
    """The law of the number of successes of independent Bernoullis with these chances (Poisson-binomial):
    ``out[k]`` = P(k successes), by convolution."""
    out = np.array([1.0])
    for p in chances:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"chance {p!r} is not a probability")
        nxt = np.zeros(out.size + 1)
        nxt[:-1] += out * (1.0 - p)
        nxt[1:] += out * p
        out = nxt
    return out


def central_interval(chances: Sequence[float], alpha: float = 0.05) -> tuple[int, int]:
    """(lo, hi): the largest lo with P(count < lo) <= α/2 and the smallest hi with P(count > hi) <= α/2 under
    ``count_law`` -- where one draw of the count falls with probability at least 1 − α."""
    law = count_law(chances)
    cdf = np.cumsum(law)
    slack = 1e-12  # float sums: a tail equal to α/2 in exact arithmetic counts as within α/2 despite rounding
    lo = int(np.searchsorted(cdf, alpha / 2 + slack, side="right"))  # the first k with P(count <= k) > α/2
    tail = 1.0 - cdf  # tail[k] = P(count > k)
    hi = int(np.argmax(tail <= alpha / 2 + slack))
    return lo, hi
