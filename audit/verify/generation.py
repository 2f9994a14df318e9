"""§8.9 ``generation``, the charges (spec/protocol.md; always full, in ledger order, query and recovery leaves):
h_charge opens the charges; every epsilon_units is an integer in [0, 2^62]; the opened charges equal exactly
those §5.3 step 5 computes on the replayed per-document spend with the request's ``select`` stream; no document's
spend exceeds its budget. The answers' replay is ``answers``."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from ..protocol import retrieval as rt
from ..protocol.charges import ChargeRule, expected_charges, opened_excluded
from ..protocol.encoding import EncodingError, digest
from ..protocol.policy import Policy
from .run import MAX_UNITS, Run, guarded, is_int
from .scores import scores_of


def _opened_charges(charge: Any, n_docs: int) -> tuple[list[tuple[int, np.ndarray]], Any]:
    if (
        not isinstance(charge, dict)
        or set(charge) - {"excluded"} != {"nonce", "algorithm", "bins_released", "charges"}
        or not isinstance(charge["charges"], list)
    ):
        raise EncodingError("malformed charge opening")
    out: list[tuple[int, np.ndarray]] = []
    for c in charge["charges"]:
        if (
            not isinstance(c, dict)
            or set(c) != {"cost", "ids"}
            or not isinstance(c["cost"], dict)
            or set(c["cost"]) != {"kind", "epsilon_units"}
            or c["cost"]["kind"] != "pure"
        ):
            raise EncodingError("malformed charge")
        units = c["cost"]["epsilon_units"]
        if not is_int(units, 0, MAX_UNITS):
            raise EncodingError("a charge's epsilon_units must be an integer in [0, 2^62] (spends only add)")
        ids = c["ids"]
        if (
            not isinstance(ids, list)
            or not all(is_int(x, 0, n_docs - 1) for x in ids)
            or any(a >= b for a, b in zip(ids, ids[1:], strict=False))
        ):
            raise EncodingError("a charge's ids must be strictly increasing ids of the tenant's corpus")
        out.append((units, np.asarray(ids, dtype=np.int64)))
    return out, charge["bins_released"]


@guarded("generation")
def check_8_9_generation(run: Run) -> None:
    """§8.9: every charge replayed on the per-document filter, in ledger order."""
    # verify() runs §8.9 only with a policy and the committed seed; the query leaves' records are §8.7's, never None
    records = cast("list[dict[str, Any]]", run.records)
    rules = {ep.number: ChargeRule.of(cast(Policy, ep.policy)) for ep in run.epochs}  # the limit is a constant
    rule = rules[run.epochs[-1].number] if run.epochs else ChargeRule.of(cast(Policy, run.policy))
    spent = {t: np.zeros(v["n"], dtype=np.int64) for t, v in run.tenants.items()}
    for t, carried in (run.prior.spend if run.prior is not None else {}).items():  # the state's (§8.14)
        if t in spent:
            spent[t][: min(carried.size, spent[t].size)] = carried[: spent[t].size]
    for done, i in enumerate(run.queries):
        rec, op = records[i], run.openings[i]
        t = rec["tenant"]
        ep = run.epoch_at(i)  # the epoch's policy and seed (§3.4)
        pol, seed = cast(Policy, ep.policy), cast(bytes, ep.seed)
        try:
            if digest(op.get("charge")) != rec["h_charge"]:
                raise EncodingError("h_charge does not match the opened charges")
            n = run.n_docs_at(t, i)  # the tenant's documents at this position (§3.5)
            got, bins = _opened_charges(op["charge"], n)
            excluded = opened_excluded(op["charge"], n)
            if op["charge"]["algorithm"] != pol.generation.algorithm:
                raise EncodingError("the charge's algorithm differs from the policy")
            want, want_bins = expected_charges(
                pol,
                rules[ep.number],
                scores_of(run, i)[:n],
                spent[t][:n],
                rt.request_source(seed, "select", bytes.fromhex(rec["h_req"])),
                excluded,
            )
            if bins != want_bins:
                raise EncodingError(f"bins_released {bins!r} differs from the committed-seed release {want_bins}")
            if len(got) != len(want) or any(
                gu != wu or not np.array_equal(gi, wi) for (gu, gi), (wu, wi) in zip(got, want, strict=False)
            ):
                raise EncodingError(
                    "the charges differ from the policy's rule on the replayed filter "
                    f"(expected {[(u, int(x.size)) for u, x in want]} (units, documents))"
                )
            for units, ids in want:
                spent[t][ids] += units
            _excluded_reproduce(run, (i, t, n), excluded, pol, rules[ep.number], spent[t][:n], seed, (op, rec))
            run.ok("generation")
        except (EncodingError, KeyError, TypeError, ValueError) as e:
            run.fail("generation", f"leaf {i}: {e}")
        if done % 1000 == 999:
            run.progress("generation", 1000)
    run.final_spend = {t: [int(x) for x in s] for t, s in sorted(spent.items())}  # what the successor carries
    for t, s in spent.items():
        over = np.flatnonzero(s > rule.limit)
        if over.size:
            run.fail("generation", f"tenant {t}: {over.size} documents over budget")
        run.checked["documents_within_budget"] += int((s <= rule.limit).sum())


def _excluded_reproduce(
    run: Run,
    leaf: tuple[int, str, int],
    excluded: list[int],
    pol: Policy,
    rule: ChargeRule,
    spent: np.ndarray,
    seed: bytes,
    opened: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """spec/protocol.md §8.9, exclusions: a record the provider excluded for a query ``leaf`` (pos, tenant, n; its
    charge opening's ``excluded``) must fail on the auditor's side too — the protocol's exact scoring of that record's
    row (``retrieval.float_exact_scores``, the function the provider scores its chunks with), or the protocol's
    selection with that record as the only candidate. If neither fails, the exclusion depended on something other
    than that record (the privacy argument of spec/accounting/rag.md §6.2 does not apply): ``EncodingError``."""
    if not excluded:
        return
    r, (_i, tenant, n), (op, rec) = pol.retrieval, leaf, opened
    q = np.frombuffer(bytes.fromhex(op["qemb"]), dtype="<i2")
    h_req = rec["h_req"]
    rows = run.tenants[tenant]["qf"]
    for d in excluded:
        try:
            s = rt.float_exact_scores(rows[d : d + 1], q, r.score_clip, r.score_shift)
            alone = np.full(n, np.iinfo(np.int64).min // 4, dtype=np.int64)
            alone[d] = int(s[0])
            others = [x for x in range(n) if x != d]
            expected_charges(pol, rule, alone, spent, rt.request_source(seed, "select", bytes.fromhex(h_req)), others)
        except Exception:  # noqa: BLE001 - the failure reproduces: the exclusion is that record's
            continue
        raise EncodingError(
            f"record {d} was excluded, but the protocol's scoring and selection of it do not fail on the auditor's "
            "side: the exclusion is not a function of that record"
        )
