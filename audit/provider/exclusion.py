"""Exclusion on failure, per record (spec/accounting/rag.md §6.2, spec/protocol.md §5.3 steps 3-4).

A call that reads the tenant's records before the answer — the exact scores of the index (step 3), the selection and
its charge (step 4) — may fail because of what one record holds. Failing the request would make its outcome depend on
that record (a 500 on D, a 200 on D′), uncharged. Instead the failing records are found by a halving search over
probes, and the request is served on the tenant's index with them *excluded* for this query: never selected, never
charged, never cited. Whether a record is excluded is then a function of (the query, that record), so the map
D -> {d in D: d does not fail on q} moves one record at most between neighbours and the mechanism's guarantee holds
on what it reads. The excluded ids go into the query's charge opening (auditor-only, under h_charge), where the
verifier replays the selection without them and re-runs the protocol's scoring and selection on each of them.

``find_failing(probe, items)``: the items i whose probe {i} fails, searching halves of failing sets (1 + 2f·log2 n
probes for f failing items of n). ``score_contained``: the exact scores of the index by public fixed-shape chunks,
each chunk's excluded rows replaced by the empty (all-zero) row, so that every probe keeps the chunk's shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from ..protocol.errors import ServiceStateError

#: rows of one chunk of the index's exact scores: a public constant (the last chunk holds n mod SCORE_CHUNK rows)
SCORE_CHUNK = 1 << 14

#: the one error a failure no single record explains gives (fixed type and message, raised without a cause)
UNEXPLAINED = "a call over the tenant's records failed, and no single record explains it"


def find_failing(probe: Callable[[Sequence[int]], bool], items: Sequence[int]) -> list[int]:
    """The items i of ``items`` (which fail together: the caller has seen it) whose probe {i} fails, by halving: a
    failing set is split in two, each half probed, the failing halves searched, down to single items. ``probe(S)``:
    True if the call fails with exactly the items of S present. Under the per-record assumption (probe(S) fails iff
    S holds a failing item) this finds exactly the failing items."""
    out: list[int] = []
    stack = [list(items)]
    while stack:
        s = stack.pop()
        if len(s) == 1:
            out.append(s[0])
            continue
        half = len(s) // 2
        for part in (s[:half], s[half:]):
            if part and probe(part):
                stack.append(part)
    return sorted(out)


def _fails(fn: Callable[[], object]) -> bool:
    try:
        fn()
    except Exception:  # noqa: BLE001 - a probe's failure is a bit; its type and message are dropped
        return True
    return False


def score_contained(
    score_chunk: Callable[[int, npt.NDArray[np.bool_] | None], npt.NDArray[np.int64]],
    n: int,
    excluded: Sequence[int] = (),
) -> tuple[npt.NDArray[np.int64], list[int]]:
    """The exact integer scores of the n rows (excluded rows: 0, never read) and the sorted excluded ids: ``excluded``
    and every row the search finds failing. ``score_chunk(first, keep)``: the scores of the chunk at ``first`` with
    the rows where ``keep`` is False replaced by the empty row (``keep`` None: every row). A chunk whose public probe
    (every row empty) fails, or that still fails with its failing rows excluded, raises ``ServiceStateError``
    (``UNEXPLAINED``): a function of public inputs only, under the per-record assumption."""
    out = np.zeros(n, dtype=np.int64)
    dropped = {int(i) for i in excluded}
    for first in range(0, n, SCORE_CHUNK):
        size = min(SCORE_CHUNK, n - first)
        base = np.array([first + j not in dropped for j in range(size)], dtype=bool) if dropped else None
        got: npt.NDArray[np.int64] | None = None
        try:
            got = score_chunk(first, base)
        except Exception:  # noqa: BLE001 - searched below; nothing of it is kept
            got = None
        if got is None:
            got = _search_chunk(score_chunk, first, size, base, dropped)
        out[first : first + size] = got
    for i in dropped:
        out[i] = 0
    return out, sorted(dropped)


def _search_chunk(
    score_chunk: Callable[[int, npt.NDArray[np.bool_] | None], npt.NDArray[np.int64]],
    first: int,
    size: int,
    base: npt.NDArray[np.bool_] | None,
    dropped: set[int],
) -> npt.NDArray[np.int64]:
    live = [j for j in range(size) if base is None or base[j]]

    def keep_only(rows: Sequence[int]) -> npt.NDArray[np.bool_]:
        k = np.zeros(size, dtype=bool)
        k[np.asarray(rows, dtype=np.int64)] = True
        return k

    failed = _fails(lambda: score_chunk(first, keep_only([])))  # the public probe: every row empty
    bad = [] if failed else find_failing(lambda rows: _fails(lambda: score_chunk(first, keep_only(rows))), live)
    got: npt.NDArray[np.int64] | None = None
    if not failed:
        keep = keep_only([j for j in live if j not in set(bad)])
        try:
            got = score_chunk(first, keep)
        except Exception:  # noqa: BLE001 - unexplained: raised below, outside this handler (no cause, no context)
            got = None
    if got is None:
        raise ServiceStateError(UNEXPLAINED)
    dropped.update(first + j for j in bad)
    return got
