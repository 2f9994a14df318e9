"""§8.10 ``coalition`` (spec/protocol.md; spec/estimator.md): the estimator re-run from the checked Q of every
query leaf with the auditor's θ and window gives ĉ <= k_max (ε is computed from k_max, never from ĉ).

Exact repeats are skipped: the retrieval noise is keyed by (s_W, tenant, Q) (§5.2), so a query whose Q equals an
earlier query's of the same tenant gets the same citations — post-processing of the first release, which tells a
coalition nothing new (FAQ traffic). Every pair of the log is compared unless the auditor chooses a window
(``--coalition-window``); the window used is always named in the verdict, and whether it covers the whole log. With
the auditor's state (§8.14) only the pairs with a new row are compared, the state's labels carrying the rest.
A finding stays non-PASS and is worded "coalition or a common question"; the ε for k = ĉ is reported as holding
only if exactly those accounts colluded, never as certified."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from ..protocol.policy import Policy
from . import pool
from .estimator import coalition_size
from .qrows import SharedRows
from .run import Run, guarded
from .scan import extend_components


def row_digest(tenant: str, q: bytes) -> bytes:
    """The 16-byte key of a (tenant, Q) row: exact repeats share it (collision resistance: 2^64 work)."""
    return hashlib.blake2b(tenant.encode() + b"\x00" + q, digest_size=16).digest()


def _coalition_task(
    embs: np.ndarray | SharedRows, accts: list[str], poss: list[int], theta: float, window: int | None
) -> tuple[int, int, int]:
    """(ĉ, the window used, the span of the positions): ``window`` None compares every pair of the log. ``embs``
    may be the checked Q's own memory file (``SharedRows``: mapped, not copied, in a background process)."""
    if isinstance(embs, SharedRows):
        embs = embs.array
    span = max(1, int(poss[-1] - poss[0]))
    w = span if window is None else window
    return coalition_size(embs, accts, theta, w, positions=poss), w, span


def coalition_inputs(run: Run) -> tuple[np.ndarray | SharedRows, list[str], list[int]] | None:
    """(Q of every new query leaf as an int16 matrix, their accounts, their positions), or None if there is nothing
    to estimate (no query, or Q of several dimensions): every query of the log from ``run.base``, but the exact
    repeats of an earlier query of the same tenant (the state's too, §8.14). ``run.coalition_new`` gets the new
    rows' tenants and keys."""
    accts: list[str] = []
    poss: list[int] = []
    tenants: list[str] = []
    keys = bytearray()  # 16 bytes a row, end to end
    dims: set[int] = set()
    prior = run.prior
    seen: set[bytes] = set() if prior is None else {bytes(k) for k in prior.co_digest}
    if prior is not None and prior.co_rows.shape[0]:
        dims.add(prior.co_rows.shape[1])
    records = cast("list[dict[str, Any]]", run.records)  # the query leaves' records are §8.7's, never None
    for i in run.queries:
        rec = records[i]
        if rec["type"] != "query":
            continue
        q = run.qembs[i]
        key = row_digest(rec["tenant"], q)
        if key in seen:
            continue  # an exact repeat: the same citations as the first, no new release (module docstring)
        seen.add(key)
        dims.add(len(q) // 2)  # int16 entries (§8.7 checked them)
        accts.append(records[i]["account"])
        poss.append(i)
        tenants.append(rec["tenant"])
        keys += key
    run.coalition_new = (tenants, bytes(keys))
    if len(dims) > 1 or not dims:
        return None
    dim = dims.pop()
    if not poss:  # nothing new (with a state): the state's rows alone
        return np.zeros((0, dim), dtype="<i2"), accts, poss
    return run.qembs.matrix(poss), accts, poss  # §8.7's own matrix when no query repeats (qrows.py)


def _coalition_estimate(run: Run, theta: float, window: int | None) -> tuple[int, int, int] | None:
    """(ĉ, the window used, the span) from the opened Q of every query leaf, or None if there is nothing to
    estimate. With the auditor's state (§8.14) the new rows are compared with the state's, and the labels of all
    rows are kept for the next run (``run.coalition_rows``)."""
    got = coalition_inputs(run)
    client = pool.dask_client()
    if run.prior is None and client is None:
        return None if got is None or not got[2] else _coalition_task(*got, theta, window)  # in line
    if got is None:
        return None
    shared, accts, poss = got
    embs = shared.array if isinstance(shared, SharedRows) else shared
    prior = run.prior
    if prior is None:  # on Dask, without a state: the same scan from no rows
        from .state import empty_state

        prior = empty_state("", None, "", {}, embs.shape[1])
    names = prior.accounts
    codes = np.concatenate([prior.co_account, np.asarray([prior.account_code(a) for a in accts], dtype=np.int64)])
    start = prior.co_rows.shape[0]
    rows = embs if not start else np.concatenate([prior.co_rows.reshape(-1, embs.shape[1]), embs])  # (no copy)
    pos = np.concatenate([prior.co_pos, np.asarray(poss, dtype=np.int64)])
    labels, c_hat = extend_components(rows, codes, len(names), theta, window, pos, start, prior.co_labels, client)
    run.coalition_rows = (rows, codes, pos, labels)
    if not rows.shape[0]:
        return None
    span = max(1, int(pos[-1] - pos[0]))
    return c_hat, span if window is None else window, span


def start_coalition(run: Run, theta: float, window: int | None) -> Callable[[], Any] | None:
    """The coalition estimate (BLAS-bound) needs only the checked openings: started in a fresh process beside the
    generation check (after the retrieval replay, whose workers already fill the cores: a lower peak); None
    where §8.10 computes it in line (a small window, one worker, or anything unexpected: the check reports it)."""
    if run.n < pool.FORK_MIN_ITEMS or pool.workers() < 2 or run.prior is not None or pool.dask_client() is not None:
        return None  # with the auditor's state it runs in line: it keeps the labels (§8.14)
    try:
        inputs = coalition_inputs(run)
    except Exception:  # noqa: BLE001 — the check itself (in line) reports it
        return None
    return None if inputs is None else pool.background(_coalition_task, *inputs, theta, window)


@guarded("coalition")
def check_8_10_coalition(
    run: Run, theta: float, window: int | None, background: Callable[[], Any] | None = None
) -> int | None:
    """ĉ <= k_max. ``background``: the estimate started in a fresh process beside the other checks (its
    (ĉ, window), or None if the child failed: then it is computed here, raising what it raises). The checked
    Q (``run.qembs``) go afterwards (memory at scale)."""
    try:
        got = background() if background is not None else None
        est = got[0] if got is not None else _coalition_estimate(run, theta, window)
        if est is None:
            return None
        c_hat, w, span = est
        policy = cast(Policy, run.policy)  # verify() runs §8.10 only with a policy (the last epoch's; n only rises)
        # the largest k_max of any epoch (it may only fall, §3.4): what the certified ε assumes
        k_max = max([policy.coalition.k_max, *(ep.policy.coalition.k_max for ep in run.epochs if ep.policy)])
        run.checked["coalition_window"] = w
        run.checked["coalition_window_covers_history"] = w >= span
        if c_hat > k_max:
            r = policy.retrieval
            try:
                from dprag.accounting import gdp

                e_k = gdp.discrete_gaussian_epsilon(
                    r.sigma, r.sensitivity, c_hat * r.n, policy.coalition.delta_policy, sampler_tv=r.sampler.tv
                ).epsilon
                if_colluded = f"; the retrieval ε for k = {c_hat} would be {e_k:.4g}"
            except Exception:  # noqa: BLE001 - the finding stands without the figure
                if_colluded = ""
            run.fail(
                "coalition",
                f"coalition or a common question: {c_hat} accounts asked similar questions (θ = {theta}, window = "
                f"{w} ledger positions), more than k_max = {k_max}{if_colluded}, which holds only if exactly those "
                "accounts colluded (not certified)",
            )
        else:
            run.ok("coalition")
        run.checked["coalition_estimate"] = c_hat
        return c_hat
    finally:
        run.qembs.clear()
