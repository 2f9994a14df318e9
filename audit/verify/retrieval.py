"""§8.8 ``retrieval`` (spec/protocol.md), the replay: per checked query leaf, z re-derived from s_W and h_req
(§5.2), the scores recomputed from the opened Q and the tenant index, and the citations must be the top-K of
s + z and open h_top. ``sample_leaves`` picks the leaves (``--mode full`` or ``sampled``); the Groth16 proofs of
the zk tenants are ``zk_proofs``."""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..protocol.charges import opened_excluded
from ..protocol.encoding import EncodingError, hexbytes
from ..protocol.retrieval import (
    noise_table,
    noisy_top_k_excluding,
    noisy_top_k_rows,
    noisy_top_k_words,
    retrieval_source,
    sample_words,
    top_commitment,
)
from .pool import Lazy, fork_map
from .run import Run, guarded, is_int
from .scores import ScoreCache, Scorer, scores_of

if TYPE_CHECKING:
    from dprag.accounting.noise.table import DiscreteGaussianTable

    from ..protocol.policy import Policy

#: retrieval jobs (up to 256 leaves each) below which the replay runs in this process
FORK_MIN_JOBS = 8
#: tenants of at least this many documents: the replay maps only the noise words that can reach the top K
LARGE_TENANT = 1 << 14

#: a retrieval job: (tenant, epoch, its documents then, keep its scores, [(pos, h_req, h_top, its opening line)])
_Job = tuple[str, int, int, bool, list[tuple[int, str, str, bytes | None]]]
#: a job before its opening lines are read (``with_lines`` reads them as the job is sent)
_JobSpec = tuple[str, int, int, bool, list[tuple[int, str, str]]]


@guarded("retrieval")
def check_8_8_retrieval(run: Run, chosen: Sequence[int]) -> None:
    """Per chosen leaf: the citations are the top-K of the exact scores plus the committed-seed noise and open
    h_top. Vectorised over jobs of up to 256 leaves of one tenant (one matrix product for the scores, one
    pass of the table's sampler over the concatenated streams, a row-wise top-K), run in the forked workers;
    the reasons come out in ledger order, exactly as the leaf-by-leaf replay words them. The workers hand
    back the scores (compact) while the cache has room, so the generation check does not score again."""
    r = cast("Policy", run.policy).retrieval  # §8.8 runs on the policies §8.4 accepted; σ is a constant (§3.4)
    records = cast("list[dict[str, Any]]", run.records)  # the chosen leaves are well-formed queries (§8.7)
    table = noise_table(r.sigma, r.sampler.tail, r.sampler.precision_bits) if chosen else None
    if chosen and run.scores is None:
        run.scores = ScoreCache(run)
    cache = run.scores
    plans: list[tuple[Sequence[int], list[tuple[int, str | None]], list[int]]] = []
    jobs: list[_JobSpec] = []
    room = cache.budget if cache is not None else 0
    scored = cast("ScoreCache", cache)  # made above whenever a leaf is chosen
    for a in range(0, len(chosen), ScoreCache.BLOCK):
        block = chosen[a : a + ScoreCache.BLOCK]
        found: list[tuple[int, str | None]] = []
        groups: dict[tuple[str, int, int], list[int]] = {}
        for i in block:
            rec, ep = records[i], run.epoch_at(i)
            if rec["tenant"] not in cast("Policy", ep.policy).retrieval.enabled_tenants or rec["type"] != "query":
                found.append((i, None))  # no citations released (§8.7 already refused any recorded here)
            else:  # missing citations are found in the job (the opening is parsed there)
                groups.setdefault((rec["tenant"], ep.number, run.n_docs_at(rec["tenant"], i)), []).append(i)
        ids: list[int] = []
        for (t, k, n), group in groups.items():
            step = scored.rows_for(n)
            for c in range(0, len(group), step):
                ps = group[c : c + step]
                size = len(ps) * n * (scored.dtype(0).itemsize if scored.dtype else 8)
                keep = size <= room
                room -= size if keep else 0
                ids.append(len(jobs))
                jobs.append((t, k, n, keep, [(i, records[i]["h_req"], records[i]["h_top"]) for i in ps]))
        plans.append((block, found, ids))
    ctx = _RetrievalCtx(run, table, {job[0] for job in jobs})

    def with_lines(j: int) -> _Job:  # each job's opening lines read as it is sent (spooled)
        t, k, n, keep, rows = jobs[j]
        return t, k, n, keep, [(*row, run.openings.line(row[0])) for row in rows]

    results = cast(  # fn is the serial path too: never None
        "list[Any]",
        fork_map(partial(_retrieval_job, ctx), Lazy(len(jobs), with_lines), chunk=1, min_items=FORK_MIN_JOBS),
    )
    del ctx
    for block, found, ids in plans:
        if any(results[j] is None for j in ids):
            _retrieval_one_by_one(run, block, table)  # anything unexpected: the plain replay, its reasons or error
        else:
            for j in ids:
                got, compact = results[j]
                found.extend(got)
                if compact is not None:
                    scored.keep_compact([x[0] for x in jobs[j][4]], compact)
                results[j] = None
            for i, what in sorted(found, key=lambda x: x[0]):
                if what is None:
                    run.ok("retrieval")
                else:
                    run.fail("retrieval", f"leaf {i}: {what}")
        run.progress("retrieval", len(block))


class _RetrievalCtx:
    """What ``_retrieval_job`` reads of the run (pickled to the workers): the policy, the seed, the noise
    table, each tenant's size, and a ``Scorer`` holding the index of the tenants the jobs score."""

    def __init__(self, run: Run, table: DiscreteGaussianTable | None, tenants: set[str]):
        self.policy, self.table = cast("Policy", run.policy), table
        #: epoch -> (its K, its seed) (§3.4; the other retrieval parameters are the log's constants)
        self.epochs = {ep.number: (cast("Policy", ep.policy).retrieval.K, cast(bytes, ep.seed)) for ep in run.epochs}
        self.tenants = {t: {"n": run.tenants[t]["n"]} for t in tenants}
        self.scores = Scorer(self.policy, {t: run.tenants[t]["qf"] for t in tenants})


def _retrieval_job(run: _RetrievalCtx, job: _Job) -> tuple[list[tuple[int, str | None]], np.ndarray | None] | None:
    """§8.8 for up to 256 leaves of one tenant (in a worker), each (pos, h_req, h_top, its opening line):
    [(pos, reason or None)] and, if asked, their compact scores; None on anything unexpected (the parent then
    replays those leaves one by one)."""
    try:
        t, epoch, n, keep, leaves = job
        r, cache, table = run.policy.retrieval, run.scores, cast("DiscreteGaussianTable", run.table)  # jobs: a table
        K, seed = run.epochs[epoch]
        ops = [json.loads(cast(bytes, x[3])) for x in leaves]  # canonical lines (§8.2), whose Q §8.7 checked
        # the scores of the index prefix the query saw (§3.5): a row's scores do not depend on the other rows
        full = cache.score_rows(t, [bytes.fromhex(op["qemb"]) for op in ops])  # kept whole: the cache's rows
        scores = full[:, :n]
        words = np.empty((len(leaves), n), dtype=np.uint64)
        for k, op in enumerate(ops):
            words[k] = retrieval_source(seed, t, bytes.fromhex(op["qemb"])).uint64(n)
        if n >= LARGE_TENANT:  # map only the words that can reach the top K (bit-identical, retrieval.py)
            span = (r.score_clip[0] >> r.score_shift, r.score_clip[1] >> r.score_shift)
            expected = np.stack(
                [noisy_top_k_words(scores[k], words[k], table, K, score_range=span) for k in range(len(leaves))]
            )
        else:
            expected = noisy_top_k_rows(scores, sample_words(table, words), K)
        rows = list(expected)
        for k, op in enumerate(ops):  # a query with records excluded (§5.3 steps 3-4): top-K of the others
            excluded = opened_excluded(op.get("charge"), n)
            if excluded:
                rows[k] = noisy_top_k_excluding(scores[k], sample_words(table, words[k]), K, excluded)
        out = [
            (
                x[0],
                "citations missing for a tenant with the retrieval channel on"
                if op.get("top") is None
                else _retrieval_leaf({"h_top": x[2]}, op, rows[k]),
            )
            for k, (x, op) in enumerate(zip(leaves, ops, strict=False))
        ]
        return out, (cache.compact(full) if keep else None)
    except Exception:  # noqa: BLE001 — see the docstring
        return None


def _retrieval_one_by_one(run: Run, block: Sequence[int], table: DiscreteGaussianTable | None) -> None:
    """§8.8 leaf by leaf (the plain replay; the vectorised path falls back to it on anything unexpected)."""
    for i in block:
        rec, op = cast("dict[str, Any]", run.records[i]), run.openings[i]
        r = run.policy_at(i).retrieval
        try:
            if rec["tenant"] not in r.enabled_tenants or rec["type"] != "query":
                run.ok("retrieval")
                continue
            if op.get("top") is None:
                raise EncodingError("citations missing for a tenant with the retrieval channel on")
            n = run.n_docs_at(rec["tenant"], i)
            z = cast("DiscreteGaussianTable", table).sample(  # a table whenever a leaf is chosen
                n, retrieval_source(run.seed_at(i), rec["tenant"], bytes.fromhex(op["qemb"]))
            )
            excluded = opened_excluded(op.get("charge"), n)
            what = _retrieval_leaf(rec, op, noisy_top_k_excluding(scores_of(run, i)[:n], z, r.K, excluded))
            if what is not None:
                raise EncodingError(what)
            run.ok("retrieval")
        except EncodingError as e:
            run.fail("retrieval", f"leaf {i}: {e}")


def _retrieval_leaf(rec: dict[str, Any], op: dict[str, Any], expected: np.ndarray) -> str | None:
    """§8.8 for one leaf, given the replayed top-K: None if it conforms, else what is wrong."""
    top = op["top"]
    if (
        not isinstance(top, list)
        or len(top) != expected.size
        or not all(is_int(x, 0, (1 << 32) - 1) for x in top)
        or top != expected.tolist()
    ):
        return "citations are not the top-K of the committed-seed noisy scores"
    try:
        if top_commitment(top, hexbytes(op.get("nonce_top"), "nonce_top", 16)) != rec["h_top"]:  # top == expected
            return "h_top does not match the opened citations"
    except EncodingError as e:
        return str(e)
    return None


def _sample(items: list[int], k: int) -> list[int]:
    """k items uniformly without replacement, by the verifier's own CSPRNG."""
    pool = list(items)
    for i in range(k):
        j = i + secrets.randbelow(len(pool) - i)
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:k]


def sample_leaves(
    queries: Sequence[int], mode: str, samples: int | None, sampled: list[tuple[int, int]]
) -> Sequence[int]:
    """The query leaves §8.8 replays: ``full`` checks every leaf; ``sampled`` checks ``samples`` leaves drawn
    uniformly without replacement by the verifier's own CSPRNG, and appends the sample's size ``(s, N)`` (s of the
    N query leaves) to ``sampled`` (``sampling_guarantee`` states what the samples detect)."""
    if mode != "sampled":
        return queries
    positions = list(queries)
    k = min(cast(int, samples), len(positions))  # sampled mode: --samples >= 1 (inputs.py)
    sampled.append((k, len(positions)))
    return sorted(_sample(positions, k))
