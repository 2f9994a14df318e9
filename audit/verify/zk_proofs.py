"""§8.8 ``retrieval`` with ``--zk-vkey`` (spec/protocol.md; spec/zk.md): every query of a zk tenant carries a
Groth16 proof of noise-then-select that verifies under the auditor's own key, with the public inputs
[Z_idx, q_commitment(salt_q, Q), noise_commitment(z), topk_commitment(salt_k, top)] recomputed here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

from dprag.errors import DpragError

from ..protocol.encoding import EncodingError, decode
from ..protocol.policy import Policy
from ..protocol.retrieval import noise_table, retrieval_source
from .run import Run, guarded, is_int

if TYPE_CHECKING:
    from dprag.zk.keys import VerifyingKey


@guarded("retrieval")
def check_8_8_proofs(run: Run, vk: VerifyingKey | None) -> None:
    """§8.8 (zk): every query of a zk tenant carries a Groth16 proof of noise-then-select that verifies under the
    auditor's key with public inputs recomputed here (Z_idx of genesis, Q and the citations from the opening,
    the noise from the seed)."""
    # verify() runs §8.8 only with a policy and the committed seed; the query leaves' records are §8.7's, never None
    policy = cast(Policy, run.policy)  # the zk tenants and σ are the log's constants (§3.4)
    leaves = cast("list[dict[str, Any]]", run.records)
    if vk is None or not policy.retrieval.zk_tenants:  # no auditor key: the proofs are not relied on
        return
    from ..protocol import zk_attest

    r = policy.retrieval
    table = noise_table(r.sigma, r.sampler.tail, r.sampler.precision_bits)
    records: dict[int, Any] = {}  # pos -> its proof record
    for k, line in enumerate(run.b.proofs_lines or []):
        try:
            rec = decode(line, what=f"proof line {k}")
            pos = rec.get("pos") if isinstance(rec, dict) else None
            if not is_int(pos, 1, run.n - 1) or pos in records:
                raise EncodingError(f"proof line {k}: pos must be a distinct ledger position")
            records[cast(int, pos)] = rec  # is_int checked it
        except EncodingError as e:
            run.fail("retrieval", str(e))
    done = 0
    batch: list[tuple[int, Any]] = []  # (leaf, its statement): verified at once below
    for i in run.queries:
        rec = leaves[i]
        if rec["type"] != "query" or rec["tenant"] not in r.zk_tenants:
            continue
        ten, op = run.tenants[rec["tenant"]], run.openings[i]
        if i not in records:
            run.fail("retrieval", f"leaf {i}: no Groth16 proof for a query of zk tenant {rec['tenant']!r}")
            continue
        Q = np.frombuffer(bytes.fromhex(op["qemb"]), dtype="<i2")
        z = table.sample(ten["n"], retrieval_source(run.seed_at(i), rec["tenant"], bytes.fromhex(op["qemb"])))
        try:
            st = zk_attest.statement(
                run.policy_at(i),
                ten["Z_idx"],
                records[i],
                Q,
                z,
                op["top"],
                ten["n"],
                ten["q"].shape[1],
                table.support_bound,
            )
        except (DpragError, ValueError, TypeError, KeyError):
            st = None
        batch.append((i, st))
    good = [(i, st) for i, st in batch if st is not None]
    try:
        verdicts = dict(zip([i for i, _ in good], zk_attest.verify_many(vk, [st for _, st in good]), strict=True))
    except (DpragError, ValueError, TypeError):
        verdicts = {}
    for i, _ in batch:
        if not verdicts.get(i, False):
            run.fail(
                "retrieval", f"leaf {i}: the Groth16 proof of noise-then-select does not verify under the auditor's key"
            )
        else:
            done += 1
    run.checked["zk_proofs"] = done
