"""The exclusion search (audit/provider/exclusion.py, spec/accounting/rag.md §6.2) against adversarial failure
patterns: several failing records in several chunks, a failure of the public probe, a failure that needs two records
at once. The scores are checked against an independent integer computation (``commitments.integer_scores``)."""

from __future__ import annotations

import numpy as np
import pytest

from dprag.audit.protocol import commitments as cm
from dprag.audit.protocol.errors import ServiceStateError
from dprag.audit.protocol.retrieval import noisy_top_k, noisy_top_k_excluding
from dprag.audit.provider import exclusion as ex
from dprag.audit.provider.window import TenantRetriever

CLIP, SHIFT = (-(1 << 30), 1 << 30), 4


def _index(n: int, d: int = 8, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).integers(-2000, 2000, size=(n, d)).astype(np.int16)


class _Failing:
    """score_chunk over ``q`` that raises when the rows it reads (kept) satisfy ``when(set of global ids)``;
    counts its calls."""

    def __init__(self, q: np.ndarray, query: np.ndarray, when):
        self.r = TenantRetriever([""] * len(q), q, CLIP, SHIFT)
        self.query, self.when, self.calls = query, when, 0

    def __call__(self, first: int, keep):
        self.calls += 1
        size = min(ex.SCORE_CHUNK, len(self.r) - first)
        read = {first + j for j in range(size) if keep is None or keep[j]}
        if self.when(read):
            raise MemoryError("injected")
        return self.r.score_chunk(first, keep, self.query)


def test_find_failing_finds_exactly_the_failing_items_within_the_probe_bound():
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(1, 300))
        bad = set(rng.choice(n, size=int(rng.integers(1, min(n, 6) + 1)), replace=False).tolist())
        probes = []

        def probe(s, bad=bad, probes=probes):
            probes.append(len(s))
            return bool(bad & set(s))

        assert ex.find_failing(probe, list(range(n))) == sorted(bad)
        assert len(probes) <= 2 * len(bad) * max(1, int(np.ceil(np.log2(n)))), (n, len(bad), len(probes))


def test_records_failing_in_two_chunks_are_excluded_and_every_other_score_is_exact():
    n = ex.SCORE_CHUNK + 50
    q, query = _index(n), np.arange(1, 9, dtype=np.int16)
    bad = {3, ex.SCORE_CHUNK - 1, ex.SCORE_CHUNK + 7}
    f = _Failing(q, query, lambda read: bool(read & bad))
    got, dropped = ex.score_contained(f, n)
    assert dropped == sorted(bad)
    want = cm.integer_scores(q, query, CLIP, SHIFT)
    keep = np.setdiff1d(np.arange(n), sorted(bad))
    assert np.array_equal(got[keep], want[keep])


def test_the_view_never_selects_nor_cites_an_excluded_record():
    n = 40
    q, query = _index(n), np.ones(8, dtype=np.int16)
    view = TenantRetriever([""] * n, q, CLIP, SHIFT).for_query("x", query, excluded=[0, 5])
    s = view.scores("x")
    assert np.isneginf(s[[0, 5]]).all() and np.isfinite(np.delete(s, [0, 5])).all()
    z = np.zeros(n, dtype=np.int64)
    ints = view.int_scores("x").copy()
    ints[[0, 5]] = 10**9  # even the largest score: never cited
    top = noisy_top_k_excluding(ints, z, 10, view.excluded)
    assert 0 not in top and 5 not in top and top.size == 10
    others = np.delete(np.arange(n), [0, 5])
    assert np.array_equal(top, others[noisy_top_k(np.delete(ints, [0, 5]), np.delete(z, [0, 5]), 10)])
    assert noisy_top_k_excluding(ints[:3], z[:3], 3, [0, 1, 2]).size == 0  # nothing left: the empty list


def test_a_public_failure_and_a_two_record_failure_raise_one_fixed_error_without_a_cause():
    n = 64
    q, query = _index(n), np.ones(8, dtype=np.int16)
    for when in (lambda read: True, lambda read: {4, 9} <= read):  # public; needs two records together
        with pytest.raises(ServiceStateError) as e:
            ex.score_contained(_Failing(q, query, when), n)
        assert str(e.value) == ex.UNEXPLAINED
        assert e.value.__cause__ is None and e.value.__context__ is None


def test_without_a_failure_the_scores_are_one_call_per_chunk_and_exact():
    n = 2 * ex.SCORE_CHUNK + 1
    q, query = _index(n), np.arange(8, dtype=np.int16)
    f = _Failing(q, query, lambda read: False)
    got, dropped = ex.score_contained(f, n)
    assert dropped == [] and f.calls == 3
    assert np.array_equal(got, cm.integer_scores(q, query, CLIP, SHIFT))
