"""Coalition-size estimator (audit/verify/estimator.py; 002 §5.5, spec/protocol.md §6, spec/estimator.md §2).

Expected values come from hand-built cases and from an independent brute-force oracle (pure Python,
Fraction arithmetic, its own union-find), never from the estimator's own output.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from dprag.audit.verify.estimator import (
    MARGIN,
    NeighbourSearch,
    coalition_clusters,
    coalition_size,
    coalition_size_curve,
    exact_links,
    exact_window_search,
    link_pairs,
)
from dprag.errors import InvalidParameterError

# ---------------------------------------------------------------------------------------------------------
# independent oracle
# ---------------------------------------------------------------------------------------------------------


def _exact_cos_ge(x, y, theta) -> bool:
    """cos(x, y) >= θ in exact rational arithmetic (x, y: Python numbers; θ: float)."""
    fx = [Fraction(v) for v in x]
    fy = [Fraction(v) for v in y]
    d = sum(a * b for a, b in zip(fx, fy, strict=False))
    nx = sum(a * a for a in fx)
    ny = sum(b * b for b in fy)
    if nx == 0 or ny == 0 or d <= 0:
        return False
    t = Fraction(theta)
    return d * d >= t * t * nx * ny


def oracle(emb, accounts, theta, window, positions=None):
    """(sorted link list, list of account sets of clusters with >= 2 accounts, ĉ) by brute force."""
    n = len(accounts)
    pos = list(range(n)) if positions is None else [int(p) for p in positions]
    rows = [list(map(float, r)) if np.asarray(emb).dtype.kind == "f" else list(map(int, r)) for r in np.asarray(emb)]
    parent = {i: i for i in range(n)}

    def find(a):
        while parent[a] != a:
            a = parent[a]
        return a

    links = []
    for i in range(n):
        for j in range(i + 1, n):
            if pos[j] - pos[i] <= window and _exact_cos_ge(rows[i], rows[j], theta):
                links.append((i, j))
                ra, rb = find(i), find(j)
                if ra != rb:
                    parent[rb] = ra
    groups: dict[int, set] = {}
    for i in range(n):
        groups.setdefault(find(i), set()).add(accounts[i])
    sets = [g for g in groups.values() if len(g) >= 2]
    c_hat = 0 if n == 0 else max([len(g) for g in sets], default=1)
    return links, sets, c_hat


# ---------------------------------------------------------------------------------------------------------
# hand-built cases
# ---------------------------------------------------------------------------------------------------------

E1 = [1.0, 0.0, 0.0]
E2 = [0.0, 1.0, 0.0]


def test_distinct_accounts_are_counted_not_queries():
    # five identical queries, but only two accounts among them
    emb = np.array([E1] * 5)
    assert coalition_size(emb, ["a", "a", "b", "a", "b"], 0.9, 10) == 2
    assert coalition_clusters(emb, ["a", "a", "b", "a", "b"], 0.9, 10) == [{"a", "b"}]
    # one account repeating itself is not a coalition
    assert coalition_size(emb, ["a"] * 5, 0.9, 10) == 1
    assert coalition_clusters(emb, ["a"] * 5, 0.9, 10) == []


def test_connected_components_chain_through_links():
    # a - b linked, b - c linked, a - c not: one cluster {x, y, z} through the chain
    c = math.cos(math.radians(40))
    a = [1.0, 0.0]
    b = [math.cos(math.radians(40)), math.sin(math.radians(40))]
    cc = [math.cos(math.radians(80)), math.sin(math.radians(80))]
    emb = np.array([a, b, cc])
    assert coalition_size(emb, ["x", "y", "z"], c - 1e-6, 5) == 3
    assert coalition_size(emb, ["x", "y", "z"], c + 1e-6, 5) == 1
    # two separate clusters: the largest wins, clusters listed by earliest query
    emb = np.array([E1, E2, E1, E2, E2])
    acc = ["p", "q", "r", "s", "t"]
    assert coalition_size(emb, acc, 0.99, 10) == 3
    assert coalition_clusters(emb, acc, 0.99, 10) == [{"p", "r"}, {"q", "s", "t"}]


def test_window_boundary_is_inclusive():
    W = 4
    for gap, linked in [(W, True), (W + 1, False)]:
        emb = np.array([E1] + [E2] * (gap - 1) + [E1])
        acc = ["a"] + ["z"] * (gap - 1) + ["b"]
        # the E2 filler belongs to one account z, so a cluster of {a, b} needs the E1-E1 link at distance gap
        assert coalition_clusters(emb, acc, 0.5, W) == (
            [
                {"a", "b"},
            ]
            if linked
            else []
        ), gap
    # positions (ledger indices with gaps, e.g. recovery leaves) define the window, not row numbers
    emb = np.array([E1, E1])
    assert coalition_size(emb, ["a", "b"], 0.5, 4, positions=[10, 14]) == 2
    assert coalition_size(emb, ["a", "b"], 0.5, 4, positions=[10, 15]) == 1
    assert link_pairs(emb, 0.5, 4, positions=[3, 7]).tolist() == [[0, 1]]


def test_theta_boundary_is_inclusive_and_exact():
    # cos = 3/4 exactly: x = e1, y = (3, 2, 1, 1, 1), |y| = 4
    emb = np.array([[1, 0, 0, 0, 0], [3, 2, 1, 1, 1]], dtype=np.int16)
    assert coalition_size(emb, ["a", "b"], 0.75, 1) == 2
    assert coalition_size(emb, ["a", "b"], float(np.nextafter(0.75, 1.0)), 1) == 1
    # cos = 1 exactly for parallel vectors (θ = 1 is allowed and links exact duplicates / multiples)
    emb = np.array([[3, -7, 2], [6, -14, 4], [3, -7, 3]], dtype=np.int16)
    assert link_pairs(emb, 1.0, 5).tolist() == [[0, 1]]


def _float_misjudged_cases():
    """Integer vectors with cos exactly 1/2 where the float64 unit-row dot lands below 1/2 (brute force
    over {-4..4}^3; e.g. (-4, -4, 0) and (-4, 0, -4) give 0.4999999999999999)."""
    found = []
    vecs = [np.array(v) for v in itertools.product(range(-4, 5), repeat=3) if any(v)]
    for x in vecs[:60]:
        for y in vecs:
            d, nx, ny = int(x @ y), int(x @ x), int(y @ y)
            if d > 0 and 4 * d * d == nx * ny:
                if float((x / np.linalg.norm(x)) @ (y / np.linalg.norm(y))) < 0.5:
                    found.append((x, y, 0.5))
    return found


def test_exact_predicate_fixes_float_rounding_at_the_boundary():
    cases = _float_misjudged_cases()
    assert cases, "the search space holds such vectors (it does for seed 7); the test must exercise them"
    for x, y, theta in cases:
        emb = np.array([x, y], dtype=np.int16)
        assert coalition_size(emb, ["a", "b"], theta, 1) == 2
        assert exact_links(emb, np.array([[0, 1]]), theta).tolist() == [True]
        # and the same vectors as float64 (exact rationals too)
        assert coalition_size(emb.astype(np.float64), ["a", "b"], theta, 1) == 2


def test_zero_rows_link_to_nothing():
    emb = np.array([[0, 0, 0], [0, 0, 0], [1, 0, 0]], dtype=np.int16)
    assert link_pairs(emb, 0.1, 5).shape == (0, 2)
    assert coalition_size(emb, ["a", "b", "c"], 0.1, 5) == 1


def test_extreme_magnitudes_are_handled_exactly():
    # squares of 1e200 overflow and of 1e-200 underflow in float64; the rows are rescaled by powers of two
    emb = np.array([[1e200, 1e200, 0.0], [1e200, 0.0, 1e200], [1e-200, 1e-200, 0.0], [3e-320, 3e-320, 0.0]])
    # cos(0, 1) = 1/2 exactly; rows 0, 2 and 3 are parallel (cos 1, up to the subnormal's rounding)
    assert coalition_size(emb[:2], ["a", "b"], 0.5, 1) == 2
    assert coalition_size(emb[:2], ["a", "b"], float(np.nextafter(0.5, 1)), 1) == 1
    assert link_pairs(emb, 0.999, 3).tolist() == [[0, 2], [0, 3], [2, 3]]


def test_empty_and_single():
    assert coalition_size(np.zeros((0, 4)), [], 0.5, 3) == 0
    assert coalition_clusters(np.zeros((0, 4)), [], 0.5, 3) == []
    assert coalition_size(np.ones((1, 4)), ["a"], 0.5, 3) == 1


# ---------------------------------------------------------------------------------------------------------
# against the oracle
# ---------------------------------------------------------------------------------------------------------


def _random_case(rng):
    n = int(rng.integers(1, 45))
    d = int(rng.integers(1, 6))
    kind = rng.integers(0, 3)
    if kind == 0:  # int16 with many ties, duplicates and zero rows
        emb = rng.integers(-2, 3, (n, d)).astype(np.int16)
    elif kind == 1:  # float64 in general position
        emb = rng.standard_normal((n, d))
    else:  # float with repeated rows
        base = rng.standard_normal((max(1, n // 3), d))
        emb = base[rng.integers(0, base.shape[0], n)]
    accounts = [f"acct{k}" for k in rng.integers(0, 6, n)]
    window = int(rng.integers(1, n + 2))
    thetas = sorted({float(t) for t in rng.choice([0.05, 0.3, 0.5, 0.7071067811865476, 0.8, 0.95, 1.0], 4)})
    positions = None
    if rng.random() < 0.4:
        positions = np.cumsum(rng.integers(1, 4, n)) + int(rng.integers(0, 100))
    return emb, accounts, window, thetas, positions


def test_matches_bruteforce_oracle():
    rng = np.random.default_rng(20240611)
    for _ in range(150):
        emb, acc, W, thetas, pos = _random_case(rng)
        curve = coalition_size_curve(emb, acc, thetas, W, positions=pos)
        for g, theta in enumerate(thetas):
            links, sets, c_hat = oracle(emb, acc, theta, W, pos)
            assert link_pairs(emb, theta, W, positions=pos).tolist() == [list(p) for p in links]
            assert coalition_size(emb, acc, theta, W, positions=pos) == c_hat
            assert curve[g] == c_hat
            got = coalition_clusters(emb, acc, theta, W, positions=pos)
            assert sorted(map(sorted, got)) == sorted(map(sorted, sets))


def test_curve_matches_pointwise_on_many_thetas():
    # more than 4 θ: exercises every stage of the staged search and the saturation shortcut
    rng = np.random.default_rng(3)
    x = rng.standard_normal((400, 6))
    acc = rng.integers(0, 12, 400).tolist()
    thetas = np.round(np.linspace(0.2, 0.95, 16), 2)
    curve = coalition_size_curve(x, acc, thetas[::-1].copy(), 60)[::-1]
    assert curve.tolist() == [coalition_size(x, acc, float(t), 60) for t in thetas]
    assert (np.diff(curve) <= 0).all()  # nested clusters: ĉ is non-increasing in θ


def test_int16_and_float_views_agree():
    # the verifier feeds int16 quantised embeddings; the same integers as floats give the same answer
    rng = np.random.default_rng(11)
    q = np.clip(np.round(rng.standard_normal((300, 16)) * 300), -32768, 32767).astype(np.int16)
    q[50:60] = q[10]  # duplicates
    acc = rng.integers(0, 20, 300).tolist()
    for theta in (0.3, 0.6, 1.0):
        assert coalition_size(q, acc, theta, 40) == coalition_size(q.astype(np.float64), acc, theta, 40)


def test_block_size_does_not_matter():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((700, 8))
    ref = link_pairs(x, 0.6, 90)
    for block in (1, 7, 64, 5000):
        assert np.array_equal(link_pairs(x, 0.6, 90, block), ref)


# ---------------------------------------------------------------------------------------------------------
# injected neighbour searches
# ---------------------------------------------------------------------------------------------------------


def _all_pairs(unit, theta, window, positions):
    n = unit.shape[0]
    return np.array(list(itertools.combinations(range(n), 2)) or np.zeros((0, 2)), dtype=np.int64).reshape(-1, 2)


def test_injected_superset_search_gives_the_same_result():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((120, 5))
    acc = rng.integers(0, 8, 120).tolist()
    assert isinstance(_all_pairs, NeighbourSearch)
    for theta in (0.4, 0.8):
        # every pair (a gross superset, out-of-window pairs included, reversed and duplicated): filtered
        def messy(u, t, w, p):
            pairs = _all_pairs(u, t, w, p)
            return np.concatenate([pairs, pairs[:, ::-1], pairs[:5]])

        assert np.array_equal(link_pairs(x, theta, 15, search=messy), link_pairs(x, theta, 15))
        assert coalition_size(x, acc, theta, 15, search=messy) == coalition_size(x, acc, theta, 15)


def test_search_values_are_trusted_only_within_their_bound():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((80, 4))
    ref = link_pairs(x, 0.5, 80)

    def rough(u, t, w, p):  # values off by up to 0.05, declared with bound 0.05
        pairs = _all_pairs(u, t, w, p)
        v = np.einsum("ij,ij->i", u[pairs[:, 0]], u[pairs[:, 1]])
        return pairs, v + rng.uniform(-0.05, 0.05, v.size), 0.05

    assert np.array_equal(link_pairs(x, 0.5, 80, search=rough), ref)


def test_exact_window_search_is_a_superset_at_the_lowered_threshold():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((500, 3))
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    got = {tuple(p) for p in exact_window_search(u, 0.7 - MARGIN, 30, np.arange(500)).tolist()}
    want = {(i, j) for i in range(500) for j in range(i + 1, min(500, i + 31)) if u[i] @ u[j] >= 0.7}
    assert want <= got


# ---------------------------------------------------------------------------------------------------------
# bad input: typed errors naming the field
# ---------------------------------------------------------------------------------------------------------

GOOD = np.eye(3)
ACC = ["a", "b", "c"]


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(theta=float("nan")), "theta"),
        (dict(theta=0.0), "theta"),
        (dict(theta=-0.5), "theta"),
        (dict(theta=1.5), "theta"),
        (dict(theta=True), "theta"),
        (dict(theta="high"), "theta"),
        (dict(window=0), "window"),
        (dict(window=-3), "window"),
        (dict(window=True), "window"),
        (dict(embeddings=np.ones(3)), "embeddings"),
        (dict(embeddings=np.ones((3, 0))), "embeddings"),
        (dict(embeddings=np.array([[1.0, np.nan, 0]] * 3)), "embeddings"),
        (dict(embeddings=np.array([[1.0, np.inf, 0]] * 3)), "embeddings"),
        (dict(embeddings=np.ones((3, 3), dtype=bool)), "embeddings"),
        (dict(embeddings=np.array([["a"] * 3] * 3)), "embeddings"),
        (dict(embeddings=np.ones((4, 3))), "embeddings"),
        (dict(embeddings=np.ones((3, 3), dtype=np.uint64)), "embeddings"),
        (dict(embeddings=np.ones((3, 3), dtype=np.longdouble)), "embeddings"),
        (dict(accounts="abc"), "accounts"),
        (dict(accounts=[["a"], ["b"], ["c"]]), "accounts"),
        (dict(positions=[0, 2, 1]), "positions"),
        (dict(positions=[0, 1, 1]), "positions"),
        (dict(positions=[0, 1]), "positions"),
        (dict(positions=[0.0, 1.5, 2.0]), "positions"),
    ],
)
def test_bad_input_raises_typed_error(kwargs, field):
    args = dict(embeddings=GOOD, accounts=ACC, theta=0.5, window=3)
    args.update(kwargs)
    for fn in (coalition_size, coalition_clusters):
        with pytest.raises(InvalidParameterError) as e:
            fn(args["embeddings"], args["accounts"], args["theta"], args["window"], positions=args.get("positions"))
        assert e.value.field == field


def test_bad_curve_and_search_inputs():
    with pytest.raises(InvalidParameterError) as e:
        coalition_size_curve(GOOD, ACC, [], 3)
    assert e.value.field == "thetas"
    with pytest.raises(InvalidParameterError) as e:
        coalition_size_curve(GOOD, ACC, [0.5, 2.0], 3)
    assert e.value.field == "thetas"
    with pytest.raises(InvalidParameterError) as e:
        link_pairs(GOOD, 0.5, 3, block=0)
    assert e.value.field == "block"
    bad_searches = [
        lambda u, t, w, p: np.array([[0, 7]]),  # index out of range
        lambda u, t, w, p: np.array([0.5, 1.0]),  # not (m, 2)
        lambda u, t, w, p: np.array([[0.0, 1.0]]),  # not integers
        lambda u, t, w, p: (np.array([[0, 1]]), np.array([1.0]), -1.0),  # negative bound
        lambda u, t, w, p: (np.array([[0, 1]]), np.array([np.nan]), 0.0),  # NaN value
        lambda u, t, w, p: (np.array([[0, 1]]), np.array([1.0, 1.0]), 0.0),  # wrong length
        lambda u, t, w, p: (np.array([[0, 1]]), np.array([1.0])),  # 2-tuple
    ]
    for s in bad_searches:
        with pytest.raises(InvalidParameterError) as e:
            coalition_size(GOOD, ACC, 0.5, 3, search=s)
        assert e.value.field == "search"
