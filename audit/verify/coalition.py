"""§8.10 ``coalition`` (spec/protocol.md; spec/estimator.md): the estimator re-run from the checked Q of every
query leaf with the auditor's θ and window gives ĉ <= k_max (ε is computed from k_max, never from ĉ).

Exact repeats are skipped: the retrieval noise is keyed by (s_W, tenant, Q) (§5.2), so a query whose Q equals an
earlier query's of the same tenant gets the same citations — post-processing of the first release, which tells a
coalition nothing new (FAQ traffic). The window used is always named in the verdict; when the whole history holds
more pairs than the estimator compares by default, the auditor must choose one (``--coalition-window``: exit 2).
A finding stays non-PASS and is worded "coalition or a common question"; the ε for k = ĉ is reported as holding
only if exactly those accounts colluded, never as certified."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np

from ..protocol.bundle import AuditorInputError
from ..protocol.policy import Policy
from . import pool
from .estimator import coalition_size, resolve_window
from .run import Run, guarded


class CoalitionWindowRequired(AuditorInputError):
    """The whole history is larger than the estimator compares by default: the auditor must choose a window
    (exit 2; it is the auditor's input, not a defect of the bundle)."""

    auditor_input = True


def _coalition_task(
    embs: np.ndarray, accts: list[str], poss: list[int], theta: float, window: int | None
) -> tuple[int, int, int]:
    span = max(1, int(poss[-1] - poss[0]))
    w = resolve_window(window, poss, embs.shape[1])
    if window is None and w < span:
        return -1, w, span  # the auditor must choose (check_8_10_coalition raises)
    return coalition_size(embs, accts, theta, w, positions=poss), w, span


def coalition_inputs(run: Run) -> tuple[np.ndarray, list[str], list[int]] | None:
    """(Q of every query leaf as an int16 matrix, their accounts, their positions), or None if there is nothing
    to estimate (no query, or Q of several dimensions): every query of the log, from its start."""
    accts: list[str] = []
    poss: list[int] = []
    dims: set[int] = set()
    seen: set[tuple[str, bytes]] = set()
    records = cast("list[dict[str, Any]]", run.records)  # the query leaves' records are §8.7's, never None
    for i in run.queries:
        rec = records[i]
        if rec["type"] != "query":
            continue
        key = (rec["tenant"], run.qembs[i])
        if key in seen:
            continue  # an exact repeat: the same citations as the first, no new release (module docstring)
        seen.add(key)
        dims.add(len(run.qembs[i]) // 2)  # int16 entries (§8.7 checked them)
        accts.append(records[i]["account"])
        poss.append(i)
    if not poss or len(dims) != 1:
        return None
    embs = np.empty((len(poss), dims.pop()), dtype="<i2")  # filled in place: no per-query arrays (memory at scale)
    for k, i in enumerate(poss):
        embs[k] = np.frombuffer(run.qembs[i], dtype="<i2")
    return embs, accts, poss


def _coalition_estimate(run: Run, theta: float, window: int | None) -> tuple[int, int, int] | None:
    """(ĉ, the window used) from the opened Q of every query leaf, or None if there is nothing to estimate."""
    got = coalition_inputs(run)
    return None if got is None else _coalition_task(*got, theta, window)


def start_coalition(run: Run, theta: float, window: int | None) -> Callable[[], Any] | None:
    """The coalition estimate (BLAS-bound) needs only the checked openings: started in a fresh process beside the
    generation check (after the retrieval replay, whose workers already fill the cores: a lower peak); None
    where §8.10 computes it in line (a small window, one worker, or anything unexpected: the check reports it)."""
    if run.n < pool.FORK_MIN_ITEMS or pool.workers() < 2:
        return None
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
        if c_hat < 0:
            raise CoalitionWindowRequired(
                f"--coalition-window is required: the history's queries span {span} ledger positions, more than the "
                f"estimator compares by default (at most {w}); choose a window, which the verdict names"
            )
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
        run.qembs = {}
