"""One history per corpus (spec/protocol.md §3.1): a chain of audit windows over the same corpora.

A window is one append-only log with one provider key, one seed, one policy and one account registry. Its
successor continues it: the predecessor's last leaf is a ``close`` record naming the successor's genesis hash, and
the successor's genesis names the chain (the first genesis's hash), its epoch number, the predecessor's head
``prev = {"window", "size", "root"}`` just before the close, and ``C_carry``, a salted commitment to what carries
over — every account's last counter and every document's spend. Documents and accounts only join (a new document
starts at zero spend), the key may rotate (the old key's checkpoint covers the close that names the new genesis),
and the **chain constants** never change: what the ε of the whole history is computed from.

This module holds what the provider and the verifier share: the chain constants, the carry object and its
commitment, and the close record.
"""

from __future__ import annotations

import hashlib
from typing import Any

from dprag.errors import InvalidParameterError

from .charges import ChargeRule
from .encoding import encode
from .policy import Policy

CARRY_DOMAIN = b"dprag/v3/carry\x00"
#: embedder descriptor fields that may not change along a history (the schema, documents per tenant, may grow)
EMBEDDER_CONSTANTS = (
    "model",
    "entry_point",
    "weights_sha256",
    "dimension",
    "embedding_scale",
    "prompt_template",
    "tokenizer_sha256",
)


def chain_id(first_genesis: bytes) -> str:
    """The history's name: hex H(the first window's genesis leaf bytes). Auditors and clients pin it like the key."""
    return hashlib.sha256(bytes(first_genesis)).hexdigest()


def genesis_hash(genesis: bytes) -> str:
    """What a close record names: hex H(the successor's genesis leaf bytes)."""
    return hashlib.sha256(bytes(genesis)).hexdigest()


def close_record(next_genesis: bytes) -> dict[str, Any]:
    return {"type": "close", "next": genesis_hash(next_genesis)}


def carry_commitment(salt: bytes, carry: dict[str, Any]) -> str:
    """C_carry = H("dprag/v3/carry\\0" || salt || canonical(carry)): hiding (per-document spend is a non-DP
    function of the corpus; the salt is the auditor's)."""
    if len(salt) != 16:
        raise InvalidParameterError("carry salt", "must be 16 bytes")
    return hashlib.sha256(CARRY_DOMAIN + bytes(salt) + encode(carry)).hexdigest()


def chain_violations(old: Policy, new: Policy) -> list[str]:
    """What the successor's policy changes that a history may not (empty: none). The ε of the whole history is
    computed from the constants, k_max of the first window (it may not rise) and the last window's n (a per-account
    cap on the counter, which carries over, so it may not fall)."""
    out = []
    ro, rn = old.retrieval, new.retrieval
    if new.relation != old.relation:
        out.append("relation")
    for f in ("sigma", "sensitivity", "score_clip", "score_shift", "sampler", "delta_acc"):
        if getattr(rn, f) != getattr(ro, f):
            out.append(f"retrieval.{f}")
    if rn.n < ro.n:
        out.append("retrieval.n (a per-account cap over the history: it may not fall)")
    if new.coalition.k_max > old.coalition.k_max:
        out.append("coalition.k_max (it may not rise)")
    if new.coalition.delta_policy != old.coalition.delta_policy:
        out.append("coalition.delta_policy")
    if ChargeRule.of(new).limit != ChargeRule.of(old).limit:
        out.append("generation: the filter's limit in units (max_queries_per_doc x the query cost)")
    if new.per_charge_delta() != old.per_charge_delta():
        out.append("generation: the per-charge delta")
    if new.window == old.window:
        out.append("window (each window of a history has its own id)")
    return out


def embedder_violations(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = [f"embedder.{f}" for f in EMBEDDER_CONSTANTS if old.get(f) != new.get(f)]
    schema_old, schema_new = old.get("schema") or {}, new.get("schema") or {}
    out += [
        f"embedder.schema[{t}] (documents only join)"
        for t, n in schema_old.items()
        if not isinstance(schema_new.get(t), int) or schema_new[t] < n
    ]
    return out
