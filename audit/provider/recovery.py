"""Reopening a window (spec/protocol.md §5.5): a request's charge, opening, leaf and served row commit in one
transaction (spec/provider.md §6), so a crash leaves either all of them or none; what is left to check on open is
that the store agrees with itself — every tenant's spend exactly what the ledger's openings
charge. Spend never goes down: a store that disagrees is a ServiceStateError (the service refuses to serve rather
than write a refund or an unexplained charge)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..protocol.errors import ServiceStateError

if TYPE_CHECKING:
    from .window import Window


def replayed_units(svc: Window) -> dict[str, npt.NDArray[np.int64]]:
    """Each tenant's spend as the ledger explains it: every opening's charges."""
    size = svc.ledger.size
    spent = {t: np.zeros(len(v.retriever), dtype=np.int64) for t, v in svc.tenants.items()}
    for _pos, body in svc.aud.openings(size):
        op = json.loads(body)
        tenant = svc.registry[op["request"]["account"]].tenant
        for ch in op["charge"]["charges"]:
            if ch["ids"]:
                spent[tenant][np.asarray(ch["ids"], dtype=np.int64)] += ch["cost"]["epsilon_units"]
    return spent


def check_spend(svc: Window) -> None:
    """Raise ServiceStateError unless every tenant's stored spend equals the ledger's (one read snapshot)."""
    with svc.store.snapshot():
        replayed = replayed_units(svc)
        stored = {t: svc.spent_units(t) for t in svc.tenants}
        served = svc.aud.served_count()
        size = svc.ledger.size
    for t in svc.tenants:
        if np.any(stored[t] < replayed[t]):
            bad = np.flatnonzero(stored[t] < replayed[t])[:5].tolist()
            raise ServiceStateError(f"tenant {t}: the store holds less spend than the ledger for docs {bad}")
        if np.any(stored[t] > replayed[t]):
            bad = np.flatnonzero(stored[t] > replayed[t])[:5].tolist()
            raise ServiceStateError(f"tenant {t}: the store holds spend no ledger record explains, docs {bad}")
    queries = sum(1 for pos in range(1, size) if json.loads(svc.ledger.leaf(pos)).get("type") == "query")
    if served != queries:
        raise ServiceStateError(f"the served table holds {served} requests but the ledger {queries} query leaves")
