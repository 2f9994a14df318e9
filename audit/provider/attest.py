"""The provider's Groth16 attestation of a window (spec/protocol.md §8.8, spec/zk.md): for each query of a zk tenant, a
proof of noise-then-select over the committed index from the request's opening and committed-seed noise, stored by
ledger position. The circuit, proving, checking and public inputs are ``audit.protocol.zk_attest``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np

from ..protocol.encoding import decode, encode
from ..protocol.retrieval import retrieval_source
from ..protocol.zk_attest import prove

if TYPE_CHECKING:
    from dprag.zk.keys import ProvingKey

    from .window import Window


def attest_window(svc: Window, proving_key: ProvingKey, *, tenant: str | None = None) -> int:
    """``ProviderService.attest``: prove noise-then-select for every query of ``svc``'s window whose tenant is one of
    the policy's zk tenants (or ``tenant`` alone) and that has no proof yet, from its opening (Q, the recorded
    top-K) and the noise its committed stream gives; each proof is stored by ledger position. Returns the count."""
    zk_tenants = set(svc.policy.retrieval.zk_tenants)
    if tenant is not None:
        zk_tenants &= {tenant}
    done = 0
    have = {pos for pos, _ in svc.aud.proofs()}
    for pos, body in list(svc.aud.openings(svc.ledger.size)):
        if pos in have:
            continue
        op = json.loads(body)
        rec = json.loads(svc.ledger.leaf(pos))
        t = svc.registry[op["request"]["account"]].tenant
        if rec.get("type") != "query" or t not in zk_tenants or op.get("top") is None:
            continue
        E = svc.tenants[t].q
        qb = bytes.fromhex(op["qemb"])
        Q = np.frombuffer(qb, dtype="<i2")
        ep = svc.epoch_at(pos)  # the epoch's seed and policy (spec/protocol.md §3.4)
        z = svc.table.sample(E.shape[0], retrieval_source(ep.seed, t, qb))
        blinding = int(decode((svc.dir / "secret" / "salts.json").read_bytes(), what="salts")["zk"][t])
        record = prove(proving_key, ep.policy, E, Q, z, op["top"], svc.table.support_bound, blinding=blinding)
        svc.aud.put_proof(pos, encode({"pos": pos, **record}))
        done += 1
    return done
