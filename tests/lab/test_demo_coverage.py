"""The demo's mechanism choice on the public calibration corpus (lab/demo/coverage.py, spec/demo.md step 3)."""

import math

import numpy as np

from dprag.audit.protocol import commitments as cm
from dprag.audit.testing.toy import HashEmbedder, ToyGenerator
from dprag.lab.demo.calibration import calibration_corpus
from dprag.lab.demo.config import ADA_EDGES, SCORE_CLIP, SCORE_SHIFT
from dprag.lab.demo.coverage import Candidate, coverage_grid, demo_passes, release_grid

CORPUS = calibration_corpus("test-coverage", n_conditions=4, support_min=6, support_max=8, n_distractors=20)


def test_the_replayed_traffic_asks_each_condition_once_per_pass_from_the_dev_split():
    passes = demo_passes(CORPUS, 4)
    assert len(passes) == 4
    for qs in passes:
        assert [q.group.split("-")[0] for q in qs] == ["c00", "c01", "c02", "c03"]
        assert all(q.split == "dev" for q in qs)
    assert len({q.qid for qs in passes for q in qs}) == 16  # the fact kind rotates with the pass


def test_ada_edges_are_the_experiments_bins_in_score_units():
    assert ADA_EDGES[0] == round(0.9 * 1024) and ADA_EDGES[-1] == round(0.2 * 1024) and len(ADA_EDGES) == 71
    assert all(a > b for a, b in zip(ADA_EDGES, ADA_EDGES[1:], strict=False))


def test_coverage_counts_own_records_in_the_top_k_served_in_order():
    emb = HashEmbedder(64)
    m, tau = 4, 300
    easy = Candidate("murag", m, 1e-1, tau=tau)  # T = 1 + 2 ln 10 / 4 = 2.15: 3 votes
    impossible = Candidate("murag", m, 1e-12, tau=tau)  # T = 14.8 votes > m
    assert easy.votes_needed(4.0) == 3 and impossible.votes_needed(4.0) > m
    rows = {r["candidate"]: r for r in coverage_grid(emb, CORPUS, [easy, impossible], passes=1)}
    assert rows[impossible.label()]["enough_records"] == 0
    # an independent count for pass 0: Top-m above τ of each question's integer scores, records answering once
    qd = cm.quantise_embeddings(np.asarray(emb.embed(list(CORPUS.documents))))
    spent, enough = set(), 0
    for item in demo_passes(CORPUS, 1)[0]:
        q = cm.quantise_embeddings(np.asarray(emb.embed([item.question])))[0]
        s = cm.integer_scores(qd, q, SCORE_CLIP, SCORE_SHIFT).astype(np.float64)
        admitted = [i for i in np.flatnonzero(s > tau) if i not in spent]
        top = sorted(admitted, key=lambda i: (-s[i], i))[:m]
        spent.update(admitted)  # MuRAG charges every admitted record (M = 1)
        enough += len(set(top) & set(item.relevant_ids)) >= math.ceil(1 + 2 * math.log(10) / 4)
    assert rows[easy.label()]["enough_records"] == enough


def test_release_grid_ranks_candidates_and_never_credits_an_unreachable_threshold():
    cands = [Candidate("murag", 4, 1e-1, tau=200), Candidate("murag", 4, 1e-12, tau=200)]
    cands.append(Candidate("murag-ada", 4, 1e-1, epsilon_thr=5.0))  # ε_RAG <= 0: skipped
    rows = release_grid(HashEmbedder(64), ToyGenerator(), CORPUS, cands, passes=1, key_words=(2,), seeds=2)
    assert [r["released_correct"] for r in rows] == sorted((r["released_correct"] for r in rows), reverse=True)
    by = {r["candidate"]: r for r in rows}
    assert set(by) == {cands[0].label(), cands[1].label()}
    assert by[cands[1].label()]["released_correct"] == 0.0  # 15 votes needed of 4 voters: only ⊥ is drawn
