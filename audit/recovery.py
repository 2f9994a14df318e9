"""Crash recovery of a service directory (spec/protocol.md §5.5): a request charged but never recorded completes as a
query leaf with its exact charges; a leaf whose served row was lost gets it rebuilt; spend never goes down."""

from __future__ import annotations

import json
import secrets
from typing import Any

import numpy as np

from . import commitments as cm
from .account import request_hash
from .charges import expected_charges
from .encoding import decode, encode
from .retrieval import request_source
from .serving_errors import ServiceStateError


def _state_error(msg: str) -> ServiceStateError:
    return ServiceStateError(msg)


def replayed_units(svc: Any) -> dict[str, np.ndarray]:
    size = svc.ledger.size
    spent = {t: np.zeros(len(v["retriever"]), dtype=np.int64) for t, v in svc.tenants.items()}
    for t, units in (svc.history["carry"]["spend"] if svc.history else {}).items():  # carried over (§3.1)
        spent[t][: len(units)] = np.asarray(units, dtype=np.int64)
    for _pos, body in svc.aud.openings(size):
        op = json.loads(body)
        tenant = svc.accounts[op["request"]["account"]]["tenant"]
        for ch in op["charge"]["charges"]:
            if ch["ids"]:
                spent[tenant][np.asarray(ch["ids"], dtype=np.int64)] += ch["cost"]["epsilon_units"]
    return spent


def recover(svc) -> None:
    """§5.5: a request charged but never recorded completes as a query leaf with its exact charges (its answer is
    generated when the account retries the same signed request).

    Spend never goes down: a store holding less than the ledger, or more than the pending request explains,
    is a ServiceStateError (the service refuses to serve rather than write a refund or an unexplained charge).
    """
    replayed = replayed_units(svc)
    stored = {
        t: ten["filter"].spent_units(np.arange(len(ten["retriever"])))[:, 0].astype(np.int64)
        for t, ten in svc.tenants.items()
    }
    for t in svc.tenants:
        if np.any(stored[t] < replayed[t]):
            bad = np.flatnonzero(stored[t] < replayed[t])[:5].tolist()
            raise _state_error(f"tenant {t}: budget store holds less spend than the ledger for docs {bad}")
    raw = svc.aud.pending()
    diff_any = any(np.any(stored[t] > replayed[t]) for t in svc.tenants)
    if raw is None:
        if diff_any:
            raise _state_error("budget stores hold spend that no ledger record or pending request explains")
        return
    pend = decode(raw, what="pending request")
    signed = pend["request"]
    acct = signed["account"]
    tenant = svc.accounts[acct]["tenant"]
    h_req = request_hash(signed)
    svc._refresh_counters()
    if svc._counters.get(acct, 0) >= signed["counter"]:
        if svc.aud.served(acct, signed["counter"]) is None:  # recorded, but the served row was not written
            rebuild_record(svc, signed, pend["question"])
        svc.aud.set_pending(None)  # it reached the ledger before the crash
        if diff_any:
            raise _state_error("budget stores hold spend that no ledger record explains")
        return
    if not diff_any:
        svc.aud.set_pending(None)  # nothing was charged: a retry of the same request is served afresh
        return
    r = svc.policy.retrieval
    q_query = np.frombuffer(bytes.fromhex(pend["qemb"]), dtype="<i2")
    scores = cm.integer_scores(svc.tenants[tenant]["q"], q_query, r.score_clip, r.score_shift)
    charges, bins = expected_charges(
        svc.policy, svc.rule, scores, replayed[tenant], request_source(svc.seed, "select", h_req)
    )
    explained = replayed[tenant].copy()
    for units, ids in charges:
        explained[ids] += units
    if not np.array_equal(explained, stored[tenant]) or any(
        np.any(stored[u] != replayed[u]) for u in svc.tenants if u != tenant
    ):
        raise _state_error("budget stores differ from the ledger by more than the pending request's charges")
    charge = {
        "nonce": secrets.token_hex(16),
        "algorithm": svc.policy.generation.algorithm,
        "bins_released": bins,
        "charges": [
            {"cost": {"kind": "pure", "epsilon_units": int(u)}, "ids": [int(i) for i in ids]} for u, ids in charges
        ],
    }
    # the charged request completes as an ordinary query leaf (v3 has no recovery record): its answer is
    # generated when the account retries the same signed request, from this recorded selection
    pos = svc.ledger.size
    record = svc._append_query(pos, signed, tenant, bytes.fromhex(pend["qemb"]), scores, charge)
    record["question"] = pend["question"]
    svc.aud.put_served(acct, signed["counter"], encode(record))
    svc.aud.set_pending(None)


def rebuild_record(svc: Any, signed: dict, question: str) -> None:
    """The served-table row of a request whose leaf reached the ledger just before a crash (from its opening
    and leaf; a checkpoint of the current size is signed if none covers it)."""
    h_req = request_hash(signed).hex()
    for pos, body in svc.aud.openings(svc.ledger.size):
        op = json.loads(body)
        if request_hash(op["request"]).hex() != h_req:
            continue
        record = svc.served_row(pos, signed, svc.ledger.leaf(pos), op["nonce_top"], op["top"])
        record["question"] = question
        svc.aud.put_served(signed["account"], signed["counter"], encode(record))
        return
    raise _state_error("the pending request is counted in the ledger but has no opening")
