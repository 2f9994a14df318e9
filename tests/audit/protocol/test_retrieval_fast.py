"""The fast retrieval paths (audit/protocol/retrieval.py: noisy_top_k_words, noisy_top_k_rows, word_threshold) give
bit-identical outputs to the plain path the protocol defines: table.sample over every word, then
noisy_top_k (spec/protocol.md §5.2-§5.3). Deterministic (seeded); no statistical assertion."""

from __future__ import annotations

import numpy as np
import pytest

from dprag.audit.protocol.retrieval import (
    noise_table,
    noisy_top_k,
    noisy_top_k_rows,
    noisy_top_k_words,
    retrieval_source,
    sample_words,
    word_threshold,
    words_source,
)
from dprag.errors import InvalidParameterError


def _plain(scores, words, table, k):
    z = table.sample(words.size, words_source(words))
    return noisy_top_k(scores, z, k)


@pytest.mark.parametrize("sigma,bits", [(1.0, 64), (3.0, 20), (700.0, 64), (5000.0, 48)])
def test_word_threshold_is_the_inverse_cdf_cut(sigma, bits):
    """z(w) >= c iff w >= word_threshold(c), checked with the table's own sampler at the cut, one below
    it, and on random words, for every c across the support (and beyond it)."""
    table = noise_table(sigma, 9.5, bits)
    rng = np.random.default_rng(1)
    T = table.support_bound
    cs = np.unique(
        np.concatenate([np.arange(-T - 2, -T + 3), np.arange(T - 2, T + 3), [0, 1, -1], rng.integers(-T, T + 1, 60)])
    )
    rand = rng.integers(0, 2**64 - 1, 4000, dtype=np.uint64, endpoint=True)
    zr = sample_words(table, rand)
    for c in cs.tolist():
        thr = word_threshold(table, c)
        if thr is None:
            assert c > T and (zr < c).all()
            continue
        assert ((rand >= np.uint64(thr)) == (zr >= c)).all()
        probes = [thr] + ([thr - 1] if thr > 0 else [])
        got = sample_words(table, np.array(probes, dtype=np.uint64))
        assert got[0] >= c
        if thr > 0:
            assert got[1] < c


def test_sample_words_equals_the_streams_samples():
    """Concatenated words of several requests, mapped at once, are each request's own samples."""
    table = noise_table(300.0, 9.5, 64)
    seed = bytes(range(32))
    srcs = [retrieval_source(seed, "t", bytes([i]) * 32) for i in range(5)]
    words = np.stack([s.uint64(777) for s in srcs])
    want = np.stack([table.sample(777, retrieval_source(seed, "t", bytes([i]) * 32)) for i in range(5)])
    assert np.array_equal(sample_words(table, words), want)


@pytest.mark.parametrize(
    "n,k,sigma,spread",
    [
        (20_000, 5, 5000.0, 1024),  # the verifier's regime: noise dominates
        (40_000, 10, 50.0, 1 << 20),  # scores dominate: many candidates, falls back exactly
        (30_000, 7, 2.0, 3),  # tiny noise and few score values: ties everywhere
        (16_384, 256, 100.0, 1000),  # 64·k == n: the plain path
        (100_000, 1, 1000.0, 10),
    ],
)
def test_noisy_top_k_words_matches_plain(n, k, sigma, spread):
    table = noise_table(sigma, 9.5, 64)
    rng = np.random.default_rng(n + k)
    for trial in range(6):
        scores = rng.integers(0, spread, n)
        words = retrieval_source(bytes(32), "t", bytes([trial]) * 32).uint64(n)
        want = _plain(scores, words, table, k)
        assert np.array_equal(noisy_top_k_words(scores, words, table, k), want)
        assert np.array_equal(noisy_top_k_words(scores, words, table, k, score_range=(0, spread - 1)), want)


def test_noisy_top_k_words_adversarial_words_and_ties():
    """Words chosen by an adversary (all equal, all maximal, a block of the largest at the end) and
    scores with ties at the k-th place: still the plain result, ties to the smaller id."""
    table = noise_table(10.0, 9.5, 64)
    n, k = 50_000, 8
    cases = [np.full(n, 2**64 - 1, dtype=np.uint64), np.zeros(n, dtype=np.uint64), np.full(n, 2**63, dtype=np.uint64)]
    w = np.full(n, 2**62, dtype=np.uint64)
    w[-20:] = 2**64 - 1
    cases.append(w)
    for words in cases:
        for scores in (np.zeros(n, dtype=np.int64), np.arange(n) % 3, -(np.arange(n) % 5)):
            want = _plain(scores, words, table, k)
            assert np.array_equal(noisy_top_k_words(scores, words, table, k), want)


def test_noisy_top_k_rows_matches_row_by_row():
    rng = np.random.default_rng(7)
    for rows, n, k, spread in [(50, 1000, 5, 4), (30, 200, 5, 1000), (10, 5, 5, 2), (20, 64, 1, 1), (0, 10, 3, 5)]:
        s = rng.integers(0, spread, (rows, n))
        z = rng.integers(-3, 4, (rows, n))
        got = noisy_top_k_rows(s, z, k)
        assert got.shape == (rows, k)
        for r in range(rows):
            assert np.array_equal(got[r], noisy_top_k(s[r], z[r], k))


def test_refusals():
    table = noise_table(10.0, 9.5, 64)
    with pytest.raises(InvalidParameterError):
        noisy_top_k_rows(np.zeros((2, 3)), np.zeros((2, 3)), 4)
    with pytest.raises(InvalidParameterError):
        noisy_top_k_words(np.zeros(5), np.zeros(4, dtype=np.uint64), table, 2)
    with pytest.raises(InvalidParameterError):
        sample_words(table, np.zeros(3, dtype=np.uint64)[:0]) if False else words_source(
            np.zeros(1, dtype=np.uint64)
        ).bytes(16)


def test_top_commitment_list_fast_path_is_the_spec_hash():
    """h_top = H(u32be(K) || nonce || ids as u32be) (spec/protocol.md §5.3), built by hand here; the list
    fast path and the array path both give it, and out-of-range ids are refused on either path."""
    import hashlib
    import os

    from dprag.audit.protocol.retrieval import top_commitment

    rng = np.random.default_rng(3)
    for _ in range(300):
        k = int(rng.integers(0, 12))
        ids = [int(x) for x in rng.integers(0, 2**32, k)]
        nonce = os.urandom(16)
        want = hashlib.sha256(k.to_bytes(4, "big") + nonce + b"".join(i.to_bytes(4, "big") for i in ids)).hexdigest()
        assert top_commitment(ids, nonce) == want
        assert top_commitment(np.asarray(ids, dtype=np.int64), nonce) == want
    for bad in ([-1], [2**32], [True, 2**33]):
        with pytest.raises(InvalidParameterError):
            top_commitment(bad, bytes(16))
