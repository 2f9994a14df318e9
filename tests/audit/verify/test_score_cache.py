"""The verifier's score cache (spec/protocol.md §8 item 13): each query's scores are computed once when they fit
the budget, read once, and a block goes when its last row has been read — at the end of the generation check the
cache holds nothing; when the budget is full the oldest blocks stay (the readers go in ledger order) and the rest
are scored again when read. The verdict does not change (test_verifier_parallel.py compares whole verdicts)."""

from __future__ import annotations

from collections import Counter

import pytest

import dprag.audit.verify.scores as scores
from dprag.audit.verify import verify
from tests.support.bulk import bulk_window


@pytest.fixture(scope="module")
def window(tmp_path_factory):
    return bulk_window(tmp_path_factory.mktemp("cache") / "w", n_queries=300, n_docs=50, dim=16, accounts=10)


def _run(window, monkeypatch, budget: int):
    caches: list[scores.ScoreCache] = []
    scored: Counter[bytes] = Counter()
    init, score_rows = scores.ScoreCache.__init__, scores.Scorer.score_rows

    def record_init(self, run, b=None):
        init(self, run, b)
        caches.append(self)

    def count(self, tenant, qembs):
        scored.update(qembs)
        return score_rows(self, tenant, qembs)

    with monkeypatch.context() as m:
        m.setenv("DPRAG_VERIFY_WORKERS", "1")  # the retrieval replay scores in this process (counted)
        m.setattr(scores.ScoreCache, "BUDGET", budget)
        m.setattr(scores.ScoreCache, "BLOCK", 16)
        m.setattr(scores.ScoreCache, "__init__", record_init)
        m.setattr(scores.Scorer, "score_rows", count)
        v = verify(window[0], receipts=window[1])
    assert v.verdict == "PASS", v.reasons
    return caches, scored


def test_with_room_each_query_is_scored_once_and_the_cache_ends_empty(window, monkeypatch):
    caches, scored = _run(window, monkeypatch, 1 << 30)
    assert len(caches) == 1 and len(scored) == 300
    assert set(scored.values()) == {1}  # the generation check read the retrieval replay's scores
    assert caches[0].held == 0 and not caches[0].blocks  # each block went with its last row


def test_a_full_budget_keeps_the_oldest_blocks_and_rescores_the_rest(window, monkeypatch):
    caches, scored = _run(window, monkeypatch, 16 * 50 * 2 * 4)  # room for about 4 blocks of 16 rows
    counts = Counter(scored.values())
    assert set(counts) == {1, 2} and counts[1] >= 48 and counts[2] >= 200, counts  # the first blocks kept
    assert caches[0].held == 0 and not caches[0].blocks
    _, scored = _run(window, monkeypatch, 1)  # no room: one block at a time, each scored once by each check
    counts = Counter(scored.values())
    assert set(counts) <= {1, 2} and counts[2] >= 250, counts
