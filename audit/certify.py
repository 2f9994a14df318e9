"""What a policy certifies: the ε and δ of each channel's verdict, from the committed parameters (spec/protocol.md §8).

``certified_epsilons(policy)`` is the one place the verifier, the provider and the experiments read a
policy's guarantee from; ``Policy`` itself only holds and validates the committed fields.
"""

from __future__ import annotations

import math
from typing import Any

from dprag.accounting import gdp
from dprag.accounting.collusion import eq_5_2_audit
from dprag.accounting.filters import FilterBudget, nats_up, sum_up

from .charges import ChargeRule
from .policy import Policy


def certified_epsilons(policy: Policy) -> dict[str, Any]:
    """Per-channel and composed (ε, δ), each a certified upper bound from the committed parameters.

    Generation: what the per-document filter certifies from its integer units (the budget the service
    enforces, ``FilterBudget.for_queries(M, query_cost, mode="pure")``), rounded up — not 2·M·fsum(ε_q) in
    floats (spec/accounting/filters.md §5); the composed ε is the exact sum rounded up."""
    r, c, g = policy.retrieval, policy.coalition, policy.generation
    m = c.k_max * r.n
    dg = gdp.discrete_gaussian_epsilon(r.sigma, r.sensitivity, m, c.delta_policy, sampler_tv=r.sampler.tv)
    budget = FilterBudget.for_queries(g.max_queries_per_doc, policy.query_cost(), mode="pure")
    eps_q = nats_up(budget.units[0] // g.max_queries_per_doc)  # one query's charge, in units
    eps_gen_ar = budget.certified_epsilon()
    eps_gen = budget.certified_epsilon(replace_one=True)
    delta_gen_ar = delta_gen = 0.0
    uses = None
    per_use = policy.per_charge_delta()
    if per_use is not None:
        # each RAG charge of a document adds the mechanism's δ (dp-ksa: the PTR failure probability;
        # answer-vote seen: the seen selection's δ) to its δ (basic composition inside the pure filter,
        # spec/provider.md §3.3); the filter admits at most limit // rag_units such charges
        rule = ChargeRule.of(policy)
        uses = rule.limit // rule.rag_units
        up = lambda x: math.nextafter(x, math.inf)  # noqa: E731
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
            "max_queries_per_doc": g.max_queries_per_doc,
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
