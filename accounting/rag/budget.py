"""How many private steps a total budget allows: T_max of DPVoteRAG, c_max of DPSparseVoteRAG.

003 (footnote 3) takes the larger of the counts allowed by sequential and advanced composition. We take the
largest count ``c`` whose *cost event* the ``MixedAccountant`` certifies within (ε_total, δ_total) — it
reports the best of RDP accounting and the exact optimal composition (Kairouz–Oh–Viswanath), each of which
dominates both of 003's rules — so the guarantee an answer reports is exactly the accountant's number for
the event it was charged.
"""

from __future__ import annotations

from collections.abc import Callable

from dprag.errors import InvalidParameterError

from ..composition import MixedAccountant, PureDpAccountant
from ..errors import check_delta, check_epsilon
from ..events import PrivacyEvent


def certified_epsilon(event: PrivacyEvent, delta: float) -> float:
    """ε at total δ of one event (or composition): basic composition when δ = 0 (pure DP), else the
    MixedAccountant's best valid rule."""
    if delta == 0:
        return PureDpAccountant().compose(event).epsilon
    return MixedAccountant().compose(event).get_epsilon(delta)


def max_steps(
    step_cost: Callable[[int], PrivacyEvent], epsilon_total: float, delta_total: float, *, limit: int = 4096
) -> int:
    """Largest c in [0, limit] with ε(step_cost(c), δ_total) <= ε_total (monotone in c: bisection)."""
    epsilon_total = check_epsilon("epsilon_total", epsilon_total)
    delta_total = check_delta("delta_total", delta_total, allow_zero=True)

    def fits(c: int) -> bool:
        if c == 0:
            return True
        return certified_epsilon(step_cost(c), delta_total) <= epsilon_total

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def require_steps(c: int, what: str) -> int:
    if c < 1:
        raise InvalidParameterError(what, "the total budget does not cover one private token at the per-token budget")
    return c
