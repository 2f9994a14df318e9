"""One log per corpus (spec/protocol.md §3.1): what every party computes alike about the log's name and what its
epochs keep constant.

A corpus has one append-only log. Its **chain id** is hex H(genesis leaf bytes) and its **origin** (the name its
checkpoints carry) is ``"dprag/" + chain id``: auditors and clients pin it as they pin the key. Accounts, documents,
provider keys and policies change by leaves of the log itself (§3.2-§3.5); what an epoch may not change is
``chain_violations``.
"""

from __future__ import annotations

import hashlib

from .charges import ChargeRule
from .policy import Policy


def chain_id(genesis: bytes) -> str:
    """The log's name: hex H(its genesis leaf bytes). Auditors and clients pin it like the key."""
    return hashlib.sha256(bytes(genesis)).hexdigest()


def origin_of(genesis: bytes) -> str:
    """The origin line of the log's checkpoints: ``dprag/<chain id>``."""
    return "dprag/" + chain_id(genesis)


def chain_violations(old: Policy, new: Policy) -> list[str]:
    """What the next epoch's policy changes that a log may not (empty: none). The ε over the whole log is computed
    from the constants, the largest k_max of any epoch (it may not rise) and the last epoch's n (a per-account cap on
    the counter over the log, so it may not fall)."""
    out = []
    ro, rn = old.retrieval, new.retrieval
    if new.relation != old.relation:
        out.append("relation")
    for f in ("sigma", "sensitivity", "score_clip", "score_shift", "sampler", "delta_acc"):
        if getattr(rn, f) != getattr(ro, f):
            out.append(f"retrieval.{f}")
    if rn.n < ro.n:
        out.append("retrieval.n (a per-account cap over the log: it may not fall)")
    if new.coalition.k_max > old.coalition.k_max:
        out.append("coalition.k_max (it may not rise)")
    if new.coalition.delta_policy != old.coalition.delta_policy:
        out.append("coalition.delta_policy")
    if ChargeRule.of(new).limit != ChargeRule.of(old).limit:
        out.append("generation: the filter's limit in units (max_queries_per_doc x the query cost)")
    if new.per_charge_delta() != old.per_charge_delta():
        out.append("generation: the per-charge delta")
    if new.window != old.window:
        out.append("window (an epoch keeps the log's name)")
    if set(rn.zk_tenants) != set(ro.zk_tenants):
        out.append("retrieval.zk_tenants (genesis fixes their Z_idx)")
    return out
