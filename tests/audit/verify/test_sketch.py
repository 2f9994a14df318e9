"""The coalition scan's sketch filter (spec/estimator.md §10) loses no link: its components equal those of an
independent reference (every pair decided in exact integer arithmetic, union-find here), on data a provider
would choose to hide links from it — links at exactly θ, rows outside the auditor's basis, a basis fitted to
other rows — and on random data. Deterministic (seeded data, derandomized hypothesis): no false failures."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprag.audit.verify.estimator import DEFAULT_THETA, stream_components
from dprag.audit.verify.scan import extend_components
from dprag.audit.verify.sketch import sketch_rows, worth_it


def reference_partition(raw: np.ndarray, theta: float) -> list[frozenset[int]]:
    """Components of the link graph over all pairs: x·y > 0 and (x·y)^2 >= θ^2 |x|^2 |y|^2, θ the exact binary64
    value as a fraction; Python integers throughout."""
    rows = [[int(v) for v in r] for r in raw.tolist()]
    t = Fraction(theta)
    parent = list(range(len(rows)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    sq = [sum(v * v for v in r) for r in rows]
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            dot = sum(a * b for a, b in zip(rows[i], rows[j], strict=True))
            if dot > 0 and Fraction(dot * dot) >= t * t * sq[i] * sq[j]:
                parent[find(j)] = find(i)
    groups: dict[int, set[int]] = {}
    for i in range(len(rows)):
        groups.setdefault(find(i), set()).add(i)
    return sorted(frozenset(g) for g in groups.values())


def partition(labels: np.ndarray) -> list[frozenset[int]]:
    groups: dict[int, set[int]] = {}
    for i, lab in enumerate(labels.tolist()):
        groups.setdefault(lab, set()).add(i)
    return sorted(frozenset(g) for g in groups.values())


def scan(raw: np.ndarray, theta: float, sketch) -> np.ndarray:
    n = raw.shape[0]
    codes = np.arange(n, dtype=np.int64) % 7
    labels, _ = stream_components(
        raw, codes, 7, np.asarray([theta]), max(1, n), np.arange(n), saturate=False, sketch=sketch, block=16, tile=256
    )
    return labels[0]


def hidden_chain(d: int, at: int, length: int) -> np.ndarray:
    """``length`` rows on coordinates ``at..at+4`` only, each linked to the next at a cosine of exactly 19/20
    (the binary64 0.95 lies just below it, so every one is a link): (1,0,0,0,0) ~ (19,5,3,2,1) ~ ... by
    alternating the two directions along a rotation of the coordinates."""
    a = np.array([20, 0, 0, 0, 0])
    b = np.array([19, 5, 3, 2, 1])  # |b| = 20, a·b = 380 = 19/20 · 400
    out = np.zeros((length, d), dtype="<i2")
    for i in range(length):
        out[i, at : at + 5] = a if i % 2 == 0 else b
    return out


def test_an_exact_threshold_chain_outside_the_basis_is_found():
    """The bulk lies on coordinates 0..9 (the basis fits it); the provider's sybils lie on 10..14, orthogonal to
    every basis vector, and link in a chain at exactly θ: the sketch must keep them (its residual coordinate)."""
    rng = np.random.default_rng(5)
    d = 16
    bulk = np.zeros((200, d), dtype="<i2")
    bulk[:, :10] = rng.integers(-200, 200, (200, 10))
    raw = np.concatenate([bulk[:20], hidden_chain(d, 10, 6), bulk[20:]])
    want = reference_partition(raw, DEFAULT_THETA)
    chain = frozenset(range(20, 26))
    assert chain in want  # the reference links the whole chain
    sk = sketch_rows(raw, k=4)
    assert np.abs(sk[20:26, :4]).max() < 1e-6  # the chain lies outside the basis: only the residual carries it
    assert partition(scan(raw, DEFAULT_THETA, sk)) == want
    assert partition(scan(raw, DEFAULT_THETA, False)) == want


def test_pairs_a_hair_below_theta_stay_unlinked_and_above_linked():
    """Integer rows at cosines just below and just above θ = 0.95 (|cos - θ| ~ 1e-9): the sketch keeps them as
    candidates and the exact rule decides, as the reference does."""
    d = 8
    rows = []
    for num in (94999999, 95000001):  # cos = num/10^8 from (10^8, 0) ~ (num, h) with h^2 = 10^16 - num^2
        h2 = 10**16 - num**2
        h = int(h2**0.5)
        rows.append([10**8, 0])
        rows.append([num, h])
    scale = max(abs(v) for r in rows for v in r)
    raw = np.zeros((4, d), dtype=np.float64)
    for i, r in enumerate(rows):  # each pair on coordinates of its own: the pairs are orthogonal
        raw[i, 2 * (i // 2) : 2 * (i // 2) + 2] = np.asarray(r, dtype=np.float64) / scale
    got = partition(scan(raw, DEFAULT_THETA, sketch_rows(raw, k=2)))
    assert got == partition(scan(raw, DEFAULT_THETA, False))
    assert frozenset({2, 3}) in got and frozenset({0}) in got  # 0.95000001 links, 0.94999999 does not


@settings(max_examples=60, derandomize=True, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 40),
    d=st.integers(3, 12),
    span=st.sampled_from([1, 3, 100, 30000]),
    theta=st.sampled_from([0.5, 0.8, DEFAULT_THETA, 0.99]),
    dup=st.floats(0.0, 0.6),
    data=st.data(),
)
def test_sketch_components_equal_the_exact_reference(seed, n, d, span, theta, dup, data):
    rng = np.random.default_rng(seed)
    raw = rng.integers(-span, span + 1, (n, d)).astype("<i2")
    for i in range(1, n):  # near-duplicates and exact repeats: dense link graphs
        if rng.random() < dup:
            raw[i] = raw[rng.integers(0, i)] + rng.integers(-1, 2, d) * (span > 3)
    k = data.draw(st.integers(1, d - 1))
    want = reference_partition(raw, theta)
    assert partition(scan(raw, theta, sketch_rows(raw, k=k))) == want
    assert partition(scan(raw, theta, False)) == want


def test_the_verifier_scan_uses_the_sketch_and_finds_sybils_hidden_from_it():
    """At the protocol's d = 384 the incremental scan builds the sketch itself (``worth_it``); 3,000 bulk rows on
    100 coordinates fix the basis, and a chain of 8 sybil accounts on 5 other coordinates links at exactly θ.
    Whole, and in three steps from a state, the scan's ĉ counts all 8; so does the scan without the sketch."""
    assert worth_it(384)
    rng = np.random.default_rng(11)
    d, n_bulk = 384, 3000
    bulk = np.zeros((n_bulk, d), dtype="<i2")
    bulk[:, :100] = rng.integers(-3000, 3000, (n_bulk, 100))
    raw = np.concatenate([bulk[:1000], hidden_chain(d, 300, 8), bulk[1000:]])
    n = raw.shape[0]
    codes = np.arange(n, dtype=np.int64) % 50
    codes[1000:1008] = np.arange(50, 58)  # eight accounts of their own
    pos = np.arange(n, dtype=np.int64) * 3
    lab, c_hat = extend_components(raw, codes, 58, DEFAULT_THETA, None, pos, 0, None)
    assert c_hat >= 8
    assert len({int(lab[i]) for i in range(1000, 1008)}) == 1
    plain, c_plain = stream_components(
        raw, codes, 58, np.asarray([DEFAULT_THETA]), int(pos[-1]), pos, saturate=False, sketch=False
    )
    assert partition(lab) == partition(plain[0]) and c_hat == max(1, int(c_plain[0]))
    labels = None
    for start, stop in ((0, 1004), (1004, 2500), (2500, n)):  # the chain split across steps
        labels, c_step = extend_components(raw[:stop], codes[:stop], 58, DEFAULT_THETA, None, pos[:stop], start, labels)
    assert partition(labels) == partition(lab) and c_step == c_hat


def test_a_sketch_of_the_wrong_shape_is_refused():
    raw = np.ones((5, 8), dtype="<i2")
    with pytest.raises(Exception, match="sketch"):
        scan(raw, DEFAULT_THETA, np.zeros((4, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="sketch dimension"):
        sketch_rows(raw, k=8)
