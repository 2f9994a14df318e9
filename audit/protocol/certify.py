"""What a policy certifies: the ε and δ of each channel's verdict, from the committed parameters (spec/protocol.md §8).

``certified_epsilons(policy, earlier)`` is the one place the verifier, the provider and the experiments read a
policy's guarantee from; ``Policy`` itself only holds and validates the committed fields. For a history of several
windows (spec/protocol.md §3.1) every certified quantity is taken over all the windows' policies, never the last
one's alone: the largest k_max, n and per-document charge count any window allows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dprag.accounting import gdp
from dprag.accounting.collusion import eq_5_2_audit
from dprag.accounting.filters import FilterBudget, nats_up, sum_up

from .charges import ChargeRule

if TYPE_CHECKING:  # annotations only: policy.py -> recommended.py -> certify.py must not import policy back
    from .policy import Policy


def max_charges_per_doc(policies: Sequence[Policy]) -> int:
    """The most RAG charges the per-document filter admits to one document over windows with these policies:
    ``max(limit // rag_units)``, a function of the public policies only. Each charge costs at least the smallest
    ``rag_units`` of any window and the spend carries over under one limit, so no document can take more; the
    charges a document actually took depend on the corpus and are never used (the verdict is published)."""
    best = 0
    for p in policies:
        rule = ChargeRule.of(p)
        best = max(best, rule.limit // rule.rag_units)
    return best


def _over_history(policy: Policy, earlier: Sequence[Policy]) -> Policy:
    """``policy`` with the retrieval channel's history-wide parameters: the largest k_max and n of any window (the
    coalition may not grow and n may not fall along a history, so these are the first k_max and the last n on a
    history that keeps its rules; taken as maxima, the certificate holds even on one that does not)."""
    if not earlier:
        return policy
    k_max = max(p.coalition.k_max for p in (policy, *earlier))
    n = max(p.retrieval.n for p in (policy, *earlier))
    if k_max == policy.coalition.k_max and n == policy.retrieval.n:
        return policy
    return dataclasses.replace(
        policy,
        coalition=dataclasses.replace(policy.coalition, k_max=k_max),
        retrieval=dataclasses.replace(policy.retrieval, n=n),
    )


def certified_epsilons(policy: Policy, earlier: Sequence[Policy] = ()) -> dict[str, Any]:
    """Per-channel and composed (ε, δ), each a certified upper bound from the committed parameters.

    ``earlier``: the policies of the history's earlier windows (oldest first; the last window's is ``policy``).
    Every certified quantity is taken over all windows (spec/protocol.md §3.1): the retrieval channel's k_max and
    n, the generation channel's filter limit and the most charges per document (``max_charges_per_doc``), hence
    its δ. A history keeps the filter limit L and the per-charge δ constant; ε_q and M may change with M·ε_q = L.

    Generation: what the per-document filter certifies from its integer units (the budget the service
    enforces, ``FilterBudget.for_queries(M, query_cost, mode="pure")``), rounded up — not 2·M·fsum(ε_q) in
    floats (spec/accounting/filters.md §5); the composed ε is the exact sum rounded up."""
    windows = (*earlier, policy)
    policy = _over_history(policy, earlier)
    r, c, g = policy.retrieval, policy.coalition, policy.generation
    m = c.k_max * r.n
    dg = gdp.discrete_gaussian_epsilon(r.sigma, r.sensitivity, m, c.delta_policy, sampler_tv=r.sampler.tv)
    # the filter's budget: the largest limit of any window (a history keeps it constant; its ε, in units)
    budgets = [FilterBudget.for_queries(p.generation.max_queries_per_doc, p.query_cost(), mode="pure") for p in windows]
    budget = max(budgets, key=lambda b: int(b.units[0]))
    # one query's charge: the largest of any window, in units (ε_q may change along a history with M·ε_q = L)
    per_query = (int(b.units[0]) // p.generation.max_queries_per_doc for b, p in zip(budgets, windows, strict=True))
    eps_q = nats_up(max(per_query))
    eps_gen_ar = budget.certified_epsilon()
    eps_gen = budget.certified_epsilon(replace_one=True)
    delta_gen_ar = delta_gen = 0.0
    uses = None
    deltas = [d for d in (p.per_charge_delta() for p in windows) if d is not None]
    per_use = max(deltas) if deltas else None
    if per_use is not None:
        # each RAG charge of a document adds the mechanism's δ (dp-ksa: the PTR failure probability;
        # answer-vote seen: the seen selection's δ) to its δ (basic composition inside the pure filter,
        # spec/provider.md §3.3); the filter admits at most max(limit // rag_units) such charges over the windows
        uses = max_charges_per_doc(windows)
        up: Callable[[float], float] = lambda x: math.nextafter(x, math.inf)  # noqa: E731
        delta_gen_ar = up(uses * per_use)
        # replace-one = remove then add: (ε, δ) then (ε, δ) gives (2ε, δ + e^ε·δ)
        delta_gen = up(delta_gen_ar + up(up(math.exp(eps_gen_ar)) * delta_gen_ar))
    paper = eq_5_2_audit(c.k_max, r.epsilon_acc, r.delta_acc, c.delta_policy, n=r.n)
    acc = gdp.discrete_gaussian_epsilon(r.sigma, r.sensitivity, r.n, r.delta_acc, sampler_tv=r.sampler.tv)
    return {
        "relation": policy.relation,
        "retrieval": {
            "epsilon": dg.epsilon,
            "delta": c.delta_policy,
            "k_max": c.k_max,
            "releases": m,
            "method": f"discrete Gaussian PLD ({dg.method}), pessimistic; sampler TV added to delta",
            "covers": f"citations shown to any coalition of <= {c.k_max} accounts of one tenant "
            f"({r.n} queries each), replace-one document of that tenant's corpus",
            "paper_eq_5_2_leading": paper.get("leading") if isinstance(paper, dict) else None,
            # what σ certifies for one account's n releases at delta_acc: epsilon_acc must not claim less (§8.4)
            "epsilon_acc_certified": acc.epsilon,
        },
        "generation": {
            "epsilon": eps_gen,
            "epsilon_add_remove": eps_gen_ar,
            "delta": delta_gen,
            "per_query_epsilon": eps_q,
            "max_queries_per_doc": max(p.generation.max_queries_per_doc for p in windows),
            "mechanism": g.mechanism,
            **({} if g.mechanism != "answer-vote" else {"selection": g.vote_selection}),
            "covers": "answers released to every account of every tenant; the per-document filter is global "
            "across accounts, so colluding accounts cannot raise it (k does not enter)",
            **(
                {}
                if uses is None
                else {"delta_add_remove": delta_gen_ar, "per_query_delta": per_use, "max_charges_per_doc": uses}
            ),
        },
        "epsilon": sum_up(dg.epsilon, eps_gen),
        "delta": c.delta_policy if uses is None else math.nextafter(c.delta_policy + delta_gen, math.inf),
    }


#: the auditor's default limit on ε (``--max-epsilon``): beyond it a PASS is weak (e^10 > 22,000)
DEFAULT_MAX_EPSILON = 10.0


def guarantee_strength(
    epsilon: float | None, delta: float | None, n: int | None, max_epsilon: float = DEFAULT_MAX_EPSILON
) -> tuple[str | None, list[str]]:
    """How much a PASS's (ε, δ) guarantees, with why: ``vacuous`` when δ ≥ 1 (or ε is not finite) — it certifies
    nothing; ``weak`` when ε exceeds the auditor's ``max_epsilon`` (an adversary's likelihood ratio up to e^ε) or
    δ ≥ 1/n with n the most documents of any tenant at the audited size (the mechanism may then release one whole
    record outright with probability δ summed over the corpus); else ``strong``."""
    if epsilon is None or delta is None:
        return None, []
    if not math.isfinite(epsilon) or delta >= 1:
        return "vacuous", [
            f"the guarantee is vacuous: δ = {delta:.3g} >= 1 certifies nothing (any outcome is allowed with "
            "probability δ); fix the policy (fewer queries per document, a smaller per-charge δ)"
        ]
    why = []
    if epsilon > max_epsilon:
        why.append(
            f"the guarantee is weak: ε = {epsilon:.4g} > --max-epsilon {max_epsilon:g} (an adversary's likelihood "
            f"ratio may reach e^ε = {math.exp(min(epsilon, 700)):.3g})"
        )
    if n and delta >= 1 / n:
        why.append(
            f"the guarantee is weak: δ = {delta:.3g} >= 1/n = {1 / n:.3g} (n = {n} documents in the largest tenant):"
            " δ may cover releasing a whole record"
        )
    return ("weak" if why else "strong"), why


def policy_strength(
    policy: Policy, earlier: Sequence[Policy], n: int, max_epsilon: float = DEFAULT_MAX_EPSILON
) -> tuple[str | None, list[str]]:
    """The strength (``guarantee_strength``) of what ``policy`` after ``earlier`` would certify over a log whose
    largest tenant holds ``n`` documents: what a provider checks before it commits a policy (spec/protocol.md §8)."""
    cert = certified_epsilons(policy, earlier)
    return guarantee_strength(cert["epsilon"], cert["delta"], n, max_epsilon)
