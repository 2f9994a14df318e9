"""§8.10 ``coalition`` (spec/protocol.md; spec/estimator.md): the estimator re-run from the checked Q of every
query leaf with the auditor's θ and window gives ĉ <= k_max (ε is computed from k_max, never from ĉ)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..estimator import coalition_size, resolve_window
from . import pool
from .run import Run, guarded


def _coalition_task(embs, accts, poss, theta, window) -> tuple[int, int]:
    w = resolve_window(window, poss, embs.shape[1])
    return coalition_size(embs, accts, theta, w, positions=poss), w


def _coalition_inputs(run: Run) -> tuple[np.ndarray, list, list] | None:
    """(Q of every query leaf as an int16 matrix, their accounts, their positions), or None if there is nothing
    to estimate (no query, or Q of several dimensions)."""
    accts, poss, dims = [], [], set()
    for i in run.queries:
        if run.records[i]["type"] != "query":
            continue
        dims.add(len(run.qembs[i]) // 2)  # int16 entries (§8.7 checked them)
        accts.append(run.records[i]["account"])
        poss.append(i)
    if not poss or len(dims) != 1:
        return None
    embs = np.empty((len(poss), dims.pop()), dtype="<i2")  # filled in place: no per-query arrays (memory at scale)
    for k, i in enumerate(poss):
        embs[k] = np.frombuffer(run.qembs[i], dtype="<i2")
    return embs, accts, poss


def _coalition_estimate(run: Run, theta: float, window: int | None) -> tuple[int, int] | None:
    """(ĉ, the window used) from the opened Q of every query leaf, or None if there is nothing to estimate."""
    got = _coalition_inputs(run)
    return None if got is None else _coalition_task(*got, theta, window)


def start_coalition(run: Run, theta: float, window: int | None) -> Callable | None:
    """The coalition estimate (BLAS-bound) needs only the checked openings: started in a fresh process beside the
    generation check (after the retrieval replay, whose workers already fill the cores: a lower peak); None
    where §8.10 computes it in line (a small window, one worker, or anything unexpected: the check reports it)."""
    if run.n < pool.FORK_MIN_ITEMS or pool.workers() < 2:
        return None
    try:
        inputs = _coalition_inputs(run)
    except Exception:  # noqa: BLE001 — the check itself (in line) reports it
        return None
    return None if inputs is None else pool.background(_coalition_task, *inputs, theta, window)


@guarded("coalition")
def check_8_10_coalition(run: Run, theta: float, window: int | None, background=None) -> int | None:
    """ĉ <= k_max. ``background``: the estimate started in a fresh process beside the other checks (its
    (ĉ, window), or None if the child failed: then it is computed here, raising what it raises). The checked
    Q (``run.qembs``) go afterwards (memory at scale)."""
    try:
        got = background() if background is not None else None
        est = got[0] if got is not None else _coalition_estimate(run, theta, window)
        if est is None:
            return None
        c_hat, w = est
        k_max = run.policy.coalition.k_max
        if c_hat > k_max:
            run.fail("coalition", f"estimated coalition size {c_hat} > k_max = {k_max} (θ = {theta}, window = {w})")
        else:
            run.ok("coalition")
        run.checked["coalition_estimate"] = c_hat
        return c_hat
    finally:
        run.qembs = {}
