"""§8.7 ``requests`` and ``rate`` (spec/protocol.md): every non-genesis leaf is a well-formed query leaf
``{"type": "query", "h_req", "h_top", "h_charge"}`` (v3: the public leaf names no account, tenant or counter); its
opening's request verifies under its account's registered key, names the window and hashes to h_req; the account's
tenant comes from the registry; h_top opens to the opened citations (the empty list where the tenant's citation
channel is off); the opened Q opens h_qemb when the account committed to one; per account, counters are 1, 2, 3, …
in ledger order and at most n."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, cast

from ..protocol.encoding import EncodingError, hexbytes
from ..protocol.policy import Policy
from ..protocol.registry import TYPES as REGISTRY_TYPES
from ..protocol.request import qemb_commitment, request_hash, verify_request
from ..protocol.retrieval import top_commitment
from .pool import Lazy, fork_map
from .qrows import QRows
from .run import EpochView, Run, guarded, is_hex

LEAF_KEYS = {"type", "h_req", "h_top", "h_charge"}
OPENING_KEYS = {"pos", "kind", "request", "qemb", "top", "nonce_top", "charge"}


#: what ``_request_leaf`` returns for one leaf: None, (check, reason), or (confirmed, Q, account, counter)
_LeafResult = tuple[str, str] | tuple[bool, bytes, str, int] | None


def _request_leaf(run: Run | _LeafView, i: int) -> _LeafResult:
    """§8.7 for one leaf, without shared state (run in the forked workers). Returns None (no record),
    (check, reason) on a defect, else (whether the account committed to Q, Q's bytes, the account, its counter)."""
    rec = run.records[i]
    if rec is None:
        return None
    if rec.get("type") in REGISTRY_TYPES or rec.get("type") in ("key", "policy", "documents"):
        return None  # §3.2: checked in log order by §8.3 (run.registry)
    if (
        rec.get("type") != "query"
        or set(rec) != LEAF_KEYS
        or not all(is_hex(rec[k], 32) for k in ("h_req", "h_charge", "h_top"))
    ):
        return "canonical", f"leaf {i}: not a well-formed version-4 query record"
    op = run.openings.get(i)
    if op is None:
        return "requests", f"leaf {i}: no opening in auditor/openings.jsonl"
    if set(op) != OPENING_KEYS or op.get("kind") != "query" or op.get("pos") != i:
        return "canonical", f"leaf {i}: the opening's fields are not {sorted(OPENING_KEYS)} with kind query and its pos"
    signed = op.get("request")
    name = signed.get("account") if isinstance(signed, dict) else None
    acct = run.accounts.get(name) if isinstance(name, str) else None
    entry = run.registry.get(cast(str, name)) if acct is not None and run.registry is not None else None
    if acct is None or entry is None:
        return "requests", f"leaf {i}: the opened request's account is not in the registry"
    if not entry.active_at(i):
        return "requests", (
            f"leaf {i}: account {name!r} may not ask here (it joined at leaf {entry.joined}"
            + ("" if entry.revoked is None else f" and was revoked at leaf {entry.revoked}")
            + ")"
        )
    if acct["tenant"] not in run.tenants:
        return "requests", f"leaf {i}: the account's registered tenant is not committed"
    if not is_hex(op["nonce_top"], 16):
        return "canonical", f"leaf {i}: the opening's nonce_top must be 16 bytes of hex"
    # verify() runs §8.7 only with every epoch's policy and a genesis (``_RequestCtx`` copies them from the run)
    policy, genesis = cast(Policy, run.epoch_at(i).policy), cast("dict[str, Any]", run.genesis)
    released = acct["tenant"] in policy.retrieval.enabled_tenants
    if not released:
        if op["top"] is not None:
            return "retrieval", f"leaf {i}: citations recorded where the retrieval channel is off"
        if top_commitment([], bytes.fromhex(op["nonce_top"])) != rec["h_top"]:
            return "retrieval", f"leaf {i}: h_top does not commit to the empty list where the retrieval channel is off"
    try:
        req = verify_request(signed, entry.key_at(i))
        if req["window"] != genesis["window"]:
            raise EncodingError("the request names another window")
        if request_hash(req).hex() != rec["h_req"]:
            raise EncodingError("h_req does not match the opened request")
        qb = hexbytes(op.get("qemb"), "qemb", 2 * run.tenants[acct["tenant"]]["dim"])
        if req["h_qemb"] is None:
            return False, qb, cast(str, name), req["counter"]
        if qemb_commitment(bytes.fromhex(req["nonce"]), qb) != req["h_qemb"]:
            raise EncodingError("the opened Q is not the one the account committed to (h_qemb)")
        return True, qb, cast(str, name), req["counter"]
    except EncodingError as e:
        return "requests", f"leaf {i}: {e}"


class _RequestCtx:
    """What ``_request_leaf`` reads of the run besides the leaf (pickled to the workers): the registry, each
    tenant's dimension, the policy, the genesis."""

    def __init__(self, run: Run):
        self.accounts, self.policy, self.genesis, self.n = run.accounts, run.policy, run.genesis, run.n
        self.registry, self.epochs = run.registry, run.epochs
        self.tenants = {t: {"dim": v["dim"]} for t, v in run.tenants.items()}


class _LeafView:
    """What ``_request_leaf`` reads of the run, for one leaf parsed in a worker from its canonical bytes (the
    parent accepted them, so ``json.loads`` gives the values the parent holds)."""

    def __init__(self, ctx: _RequestCtx, i: int, rec: dict[str, Any] | None, op: dict[str, Any] | None):
        self.records: dict[int, dict[str, Any] | None] = {i: rec}
        self.openings: dict[int, dict[str, Any]] = {} if op is None else {i: op}
        self.accounts, self.tenants, self.policy, self.genesis = ctx.accounts, ctx.tenants, ctx.policy, ctx.genesis
        self.registry, self.epochs = ctx.registry, ctx.epochs
        self.n = ctx.n

    def epoch_at(self, pos: int) -> EpochView:
        return Run.epoch_at(cast(Run, self), pos)


def _request_in_worker(ctx: _RequestCtx, item: tuple[int, bytes | None, bytes | None]) -> _LeafResult:
    """§8.7 for one leaf from its raw leaf and opening line (in a worker)."""
    i, leaf, line = item
    view = _LeafView(ctx, i, None if leaf is None else json.loads(leaf), None if line is None else json.loads(line))
    return _request_leaf(view, i)


#: positions mapped at a time by §8.7: the results of one block (each with its Q) are held, not the log's
REQUEST_BLOCK = 1 << 16


def _in_blocks(
    positions: list[int],
    task: Callable[[Any], _LeafResult],
    raw: Callable[[int], tuple[int, bytes | None, bytes | None]],
    serial: Callable[[Any], _LeafResult],
) -> Iterator[tuple[int, _LeafResult]]:
    """(position, result) of §8.7 in ledger order, mapped a block at a time (each line read as its chunk is sent)."""
    for a in range(0, len(positions), REQUEST_BLOCK):
        block = positions[a : a + REQUEST_BLOCK]
        results = cast(
            "list[_LeafResult]", fork_map(task, Lazy(len(block), partial(_raw_of, raw, block)), serial=serial)
        )  # a serial path is given: never None
        yield from zip(block, results, strict=True)


def _raw_of(
    raw: Callable[[int], tuple[int, bytes | None, bytes | None]], block: list[int], k: int
) -> tuple[int, bytes | None, bytes | None]:
    return raw(block[k])


@guarded("requests")
def check_8_7_requests(run: Run) -> None:
    """§8.7, every leaf checked in the worker pool: the accepted leaves go to ``run.queries`` (ledger order) and
    their Q to ``run.qembs``."""
    last_counter: dict[str, int] = dict(run.prior.last_counter) if run.prior is not None else {}
    confirmed = 0
    positions = list(range(max(1, run.base), run.n))  # below base: verified by earlier runs (§8.14)

    def raw(i: int) -> tuple[int, bytes | None, bytes | None]:
        return i, None if run.records[i] is None else run.b.leaves[i], run.openings.line(i)

    run.qembs = QRows(len(positions))  # one int16 matrix (qrows.py), filled in ledger order
    task = partial(_request_in_worker, _RequestCtx(run))
    for i, res in _in_blocks(positions, task, raw, lambda item: _request_leaf(run, item[0])):
        if res is None:
            continue
        if isinstance(res[0], str):
            run.fail(*res)
            continue
        confirmed += res[0]
        run.qembs[i] = res[1]
        # the checks after this one read the account, tenant and counter the opening binds (not the public leaf)
        rec = run.records[i] = {
            **cast("dict[str, Any]", run.records[i]),
            "account": res[2],
            "tenant": run.accounts[res[2]]["tenant"],
            "counter": res[3],
        }
        expected = last_counter.get(rec["account"], 0) + 1
        if rec["counter"] != expected:
            run.fail(
                "requests",
                f"leaf {i}: account {rec['account']!r} counter {rec['counter']} where {expected} "
                "was next (counters are gapless and increasing)",
            )
        last_counter[rec["account"]] = rec["counter"]
        n_limit = run.policy_at(i).retrieval.n  # a cap over the log, which an epoch may only raise (§3.4)
        if rec["counter"] > n_limit:
            run.fail("rate", f"account {rec['account']!r} made more than n = {n_limit} queries")
        run.queries.append(i)
        run.ok("requests")
    run.progress("requests", len(positions))
    run.final_counters = dict(sorted(last_counter.items()))
    run.checked["queries_with_account_confirmed_q"] = confirmed
    run.checked["queries"] = len(run.queries)
    run.let_go_query_leaves()
