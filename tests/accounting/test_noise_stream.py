"""Stream conformance: the samplers consume the RandomSource exactly as spec/accounting/noise.md says.

A second, deliberately naive implementation of the spec lives in this file: pure Python, exact
``Fraction`` arithmetic everywhere (no float filter), one word read at a time from the SHAKE-256 stream
re-derived from source.py's docstring. The production samplers must return identical samples *and* leave
the stream at the same position (checked by comparing the next word).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import struct
from fractions import Fraction

import numpy as np
import pytest

from dprag.accounting.noise import (
    DiscreteGaussianTable,
    RandomSource,
    bernoulli_exp,
    discrete_gaussian,
    discrete_laplace,
    gaussian,
    gumbel,
    laplace,
)
from dprag.accounting.noise.bernoulli import bernoulli_filtered, bernoulli_shared

TWO64 = 1 << 64


# ------------------------------------------------------------------------------------------------
# The spec's stream, re-derived (source.py docstring) and read one word at a time
# ------------------------------------------------------------------------------------------------
class SpecWords:
    def __init__(self, seed: bytes, label: bytes = b""):
        self.prefix = struct.pack(">I", len(seed)) + seed + struct.pack(">I", len(label)) + label
        self.buf = b""
        self.block = 0
        self.pos = 0
        self.count = 0

    def next(self) -> int:
        while len(self.buf) - self.pos < 8:
            self.buf = self.buf[self.pos :] + hashlib.shake_256(self.prefix + struct.pack(">Q", self.block)).digest(
                65536
            )
            self.block += 1
            self.pos = 0
        w = int.from_bytes(self.buf[self.pos : self.pos + 8], "little")
        self.pos += 8
        self.count += 1
        return w


# ------------------------------------------------------------------------------------------------
# Reference implementation of spec §2–§6, §8 (pure Python, exact)
# ------------------------------------------------------------------------------------------------
def ref_compare(words: SpecWords, w: int, p: Fraction) -> bool:
    """[U < p] for U = 0.w w' w'' ... (base 2^64), first word w given (spec §2)."""
    while True:
        big = p * TWO64
        fl = math.floor(big)
        if w < fl:
            return True
        if w > fl or big == fl:
            return False
        p = big - fl
        w = words.next()


def ref_bern_bulk(words: SpecWords, ps: list[Fraction]) -> list[bool]:
    """One bulk step (spec §2): p ∈ {0,1} read nothing; block of words; ties resolved afterwards in order."""
    out: list = [None] * len(ps)
    need = [j for j, p in enumerate(ps) if 0 < p < 1]
    for j, p in enumerate(ps):
        if p == 0:
            out[j] = False
        elif p == 1:
            out[j] = True
    block = [words.next() for _ in need]
    ties = []
    for j, w in zip(need, block, strict=False):
        big = ps[j] * TWO64
        fl = math.floor(big)
        if w < fl:
            out[j] = True
        elif w > fl or big == fl:
            out[j] = False
        else:
            ties.append((j, big - fl))
    for j, rest in ties:
        out[j] = ref_compare(words, words.next(), rest)
    return out


def ref_bernexp01(words: SpecWords, gammas: list[Fraction]) -> list[bool]:
    """CKS Algorithm 1, γ ∈ [0, 1], bulk over K (spec §3)."""
    res: list = [None] * len(gammas)
    active = list(range(len(gammas)))
    k = 1
    while active:
        a = ref_bern_bulk(words, [gammas[i] / k for i in active])
        nxt = []
        for i, ai in zip(active, a, strict=False):
            if ai:
                nxt.append(i)
            else:
                res[i] = k % 2 == 1
        active = nxt
        k += 1
    return res


def ref_bernexp(words: SpecWords, gammas: list[Fraction]) -> list[bool]:
    """CKS Algorithm 1, any γ ≥ 0 (spec §3): integer part j = 1, 2, ..., then the fractional part."""
    ok = [True] * len(gammas)
    whole = [math.floor(g) for g in gammas]
    j = 1
    while True:
        act = [i for i in range(len(gammas)) if ok[i] and whole[i] >= j]
        if not act:
            break
        b = ref_bernexp01(words, [Fraction(1)] * len(act))
        for i, bi in zip(act, b, strict=False):
            if not bi:
                ok[i] = False
        j += 1
    st2 = [i for i in range(len(gammas)) if ok[i]]
    c = ref_bernexp01(words, [gammas[i] - whole[i] for i in st2])
    for i, ci in zip(st2, c, strict=False):
        ok[i] = ci
    return ok


def ref_uniform(words: SpecWords, t: int, m: int) -> list[int]:
    if t == 1:
        return [0] * m
    limit = TWO64 - TWO64 % t
    out: list = [None] * m
    todo = list(range(m))
    while todo:
        ws = [words.next() for _ in todo]
        nxt = []
        for i, w in zip(todo, ws, strict=False):
            if w < limit:
                out[i] = w % t
            else:
                nxt.append(i)
        todo = nxt
    return out


def ref_dlap(words: SpecWords, t: int, s: int, m: int) -> list[int]:
    """CKS Algorithm 2 in bulk rounds (spec §4)."""
    out: list = [None] * m
    pending = list(range(m))
    while pending:
        u = ref_uniform(words, t, len(pending))
        d = ref_bernexp01(words, [Fraction(ui, t) for ui in u])
        sel = [j for j in range(len(pending)) if d[j]]
        v = {j: 0 for j in sel}
        act = list(sel)
        while act:
            a = ref_bernexp01(words, [Fraction(1)] * len(act))
            act = [j for j, aj in zip(act, a, strict=False) if aj]
            for j in act:
                v[j] += 1
        b = ref_bern_bulk(words, [Fraction(1, 2)] * len(sel))
        accepted = set()
        for j, bj in zip(sel, b, strict=False):
            y = (u[j] + t * v[j]) // s
            if bj and y == 0:
                continue
            out[pending[j]] = -y if bj else y
            accepted.add(j)
        pending = [pending[j] for j in range(len(pending)) if j not in accepted]
    return out


def ref_dgauss(words: SpecWords, s2: Fraction, m: int) -> list[int]:
    """CKS Algorithm 3 in bulk rounds (spec §5)."""
    t = math.isqrt(math.floor(s2))
    while (t + 1) ** 2 <= s2:
        t += 1
    while t * t > s2:
        t -= 1
    t += 1
    out: list = [None] * m
    pending = list(range(m))
    while pending:
        y = ref_dlap(words, t, 1, len(pending))
        gam = [(abs(yi) - s2 / t) ** 2 / (2 * s2) for yi in y]
        c = ref_bernexp(words, gam)
        acc = [j for j in range(len(pending)) if c[j]]
        for j in acc:
            out[pending[j]] = y[j]
        pending = [pending[j] for j in range(len(pending)) if not c[j]]
    return out


# ------------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------------
def _next_word(src: RandomSource) -> int:
    return int(src.uint64(1)[0])


@pytest.mark.parametrize("seed", [b"a", b"b", b"c"])
@pytest.mark.parametrize("scale", [0.5, 1.0, 2.5, 3.7, Fraction(7, 3), 1e6])
def test_discrete_laplace_matches_reference(seed, scale):
    b = Fraction(scale)
    words = SpecWords(seed, b"dlap")
    expected = ref_dlap(words, b.numerator, b.denominator, 40)
    src = RandomSource.from_seed(seed, b"dlap")
    got = discrete_laplace(scale, 40, src)
    assert got.tolist() == expected
    assert _next_word(src) == words.next()  # same stream position afterwards


@pytest.mark.parametrize("seed", [b"a", b"b"])
@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.7, Fraction(10, 3), 123.456, 2.0**20 + 0.1])
def test_discrete_gaussian_matches_reference(seed, sigma):
    words = SpecWords(seed, b"dg")
    expected = ref_dgauss(words, Fraction(sigma) ** 2, 30)
    src = RandomSource.from_seed(seed, b"dg")
    got = discrete_gaussian(sigma, 30, src)
    assert got.tolist() == expected
    assert _next_word(src) == words.next()


def test_single_sample_consumption_by_hand():
    # σ = 1: t = 2, Laplace of scale 2 (s = 1). Walk the first sample word by word as spec §4–§5 say.
    words = SpecWords(b"hand", b"")
    ws = []

    def nxt():
        w = words.next()
        ws.append(w)
        return w

    while True:
        # --- one discrete Laplace sample, scale t = 2 (spec §4) ---
        while True:
            u = nxt() % 2  # t = 2 is a power of two: no rejection in step U
            # step D: Bernoulli(exp(-u/2)); u = 0 reads nothing and gives 1
            d = True
            if u == 1:
                k = 1
                while True:
                    p = Fraction(1, 2 * k)
                    if not ref_compare(words, nxt(), p):
                        break
                    k += 1
                d = k % 2 == 1
            if not d:
                continue
            v = 0
            while True:  # Bernoulli(exp(-1)): K = 1 reads nothing, then p = 1/K, K = 2, 3, ...
                k = 2
                while ref_compare(words, nxt(), Fraction(1, k)):
                    k += 1
                if k % 2 == 0:
                    break
                v += 1
            y = u + 2 * v
            b = nxt() < (1 << 63)
            if b and y == 0:
                continue
            y = -y if b else y
            break
        # --- acceptance, γ = (|y| - 1/2)² / 2 ---
        gam = (abs(y) - Fraction(1, 2)) ** 2 / 2
        ok = True
        for _ in range(math.floor(gam)):
            k = 2
            while ref_compare(words, nxt(), Fraction(1, k)):
                k += 1
            if k % 2 == 0:
                ok = False
                break
        if ok:
            f = gam - math.floor(gam)
            if f:
                k = 1
                while ref_compare(words, nxt(), f / k):
                    k += 1
                ok = k % 2 == 1
        if ok:
            expected = y
            break
    src = RandomSource.from_seed(b"hand", b"")
    assert int(discrete_gaussian(1.0, 1, src)[0]) == expected
    assert _next_word(src) == words.next()
    assert len(ws) >= 3  # at least U, V's first coin, the sign


def test_bernoulli_exp_matches_reference():
    for gamma in [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), 0.7]:
        words = SpecWords(b"be", b"")
        expected = ref_bernexp(words, [Fraction(gamma)] * 25)
        src = RandomSource.from_seed(b"be", b"")
        assert bernoulli_exp(gamma, 25, src).tolist() == expected
        assert _next_word(src) == words.next()


def test_table_reads_one_word_per_sample_inverse_cdf():
    table = DiscreteGaussianTable(2.5)
    src = RandomSource.from_seed(b"tab")
    got = table.sample(500, src)
    words = SpecWords(b"tab")
    cum = list(itertools.accumulate(int(v) for v in table.weights))[:-1]  # C_0 .. C_{2T-1}
    T = table.support_bound
    expected = []
    for _ in range(500):
        u = words.next()  # B = 64: u = w
        # x = -T + #{i : C_i ≤ u} with C_i = q(-T) + ... + q(-T+i), i = 0 .. 2T-1
        expected.append(-T + sum(1 for c in cum if c <= u))
    assert got.tolist() == expected
    assert _next_word(src) == words.next()


def test_table_precision_bits_use_top_bits():
    table = DiscreteGaussianTable(1.5, precision_bits=20)
    src = RandomSource.from_seed(b"tb20")
    got = table.sample(300, src)
    words = SpecWords(b"tb20")
    cum = list(itertools.accumulate(int(v) for v in table.weights))[:-1]
    T = table.support_bound
    expected = []
    for _ in range(300):
        u = words.next() >> 44
        expected.append(-T + sum(1 for c in cum if c <= u))
    assert got.tolist() == expected


def test_gumbel_consumption():
    src = RandomSource.from_seed(b"gum")
    got = gumbel(100, src)
    words = SpecWords(b"gum")
    u = np.array([(words.next() >> 11) * 2.0**-53 for _ in range(100)])
    assert np.all(u > 0)  # (a zero has probability 2^-53·100; tested separately with a crafted source)
    np.testing.assert_array_equal(got, -np.log(-np.log(u)))


def test_secure_noise_is_grid_times_discrete_sample():
    # laplace(b, γ) = γ · discrete_laplace(b/γ) on the same stream; same for gaussian.
    g = 2.0**-10
    a = laplace(0.75, 50, RandomSource.from_seed(b"s"), granularity=g)
    b = discrete_laplace(0.75 / g, 50, RandomSource.from_seed(b"s")) * g
    np.testing.assert_array_equal(a, b)
    a = gaussian(1.25, 50, RandomSource.from_seed(b"s"), granularity=g)
    b = discrete_gaussian(1.25 / g, 50, RandomSource.from_seed(b"s")) * g
    np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------------------------------------
# Ties and the float filter's exact fallback, with crafted streams
# ------------------------------------------------------------------------------------------------
def _crafted(words: list[int]) -> RandomSource:
    data = b"".join(w.to_bytes(8, "little") for w in words)
    pos = [0]

    def read(n):
        if pos[0] + n > len(data):
            raise AssertionError("crafted stream exhausted")
        out = data[pos[0] : pos[0] + n]
        pos[0] += n
        return out

    src = RandomSource(read)
    src.position = lambda: pos[0] // 8  # type: ignore[attr-defined]
    return src


def test_tie_continues_on_next_word():
    p = Fraction(1, 3)
    fl = (TWO64) // 3  # 2^64/3 is not an integer: w = ⌊2^64/3⌋ is a tie
    rest = p * TWO64 - fl  # = 1/3
    # sample 0 ties and the continuation word decides 1; sample 1 decides 0 at once; sample 2 ties → 0
    cont_one = math.floor(rest * TWO64) - 5
    cont_zero = math.floor(rest * TWO64) + 5
    src = _crafted([fl, fl + 1, fl, cont_one, cont_zero, 77])
    got = bernoulli_shared(src, p, 3)
    assert got.tolist() == [True, False, False]
    assert src.position() == 5  # block of 3, then the two continuation words in index order


def test_dyadic_p_never_ties():
    # p = 1/4: 2^64 p is an integer; w = 2^62 exactly means U ≥ p → 0, no continuation word
    src = _crafted([1 << 62, (1 << 62) - 1, 99])
    assert bernoulli_shared(src, Fraction(1, 4), 2).tolist() == [False, True]
    assert src.position() == 2


def test_float_filter_falls_back_to_exact_near_threshold():
    # Per-sample p with a float approximation; words placed within the filter's margin of 2^64·p.
    ps = [Fraction(1, 3), Fraction(2, 7), Fraction(5, 11), Fraction(1, 3)]
    thr = [math.floor(p * TWO64) for p in ps]
    ws = [thr[0] - 1, thr[1] + 1, thr[2], thr[3]]  # last two tie: continuation words follow
    cont = [math.floor((ps[2] * TWO64 - thr[2]) * TWO64) + 1, 0]
    src = _crafted(ws + cont + [5])
    p_f = np.array([float(p) for p in ps])
    got = bernoulli_filtered(src, p_f, p_f * 2.0**-52, lambda j: ps[j])
    assert got.tolist() == [True, False, False, True]
    assert src.position() == 6


def test_gumbel_redraws_zero_uniforms():
    src = _crafted([0, 5 << 11, 0, 0, 7 << 11])  # U_0 = 0 → redrawn from word 2 (0 again) then word 3 ...
    g = gumbel(2, src)
    u1 = 5 * 2.0**-53
    u0 = 7 * 2.0**-53  # sample 0 gets the first nonzero word after the block: words 2, 3 are zero
    np.testing.assert_array_equal(g, -np.log(-np.log(np.array([u0, u1]))))
    assert np.all(np.isfinite(g))


@pytest.mark.parametrize("sigma", [0.5, 2.0, 3.7, 1000.0])
def test_exact_fallbacks_agree_with_reference(monkeypatch, sigma):
    # Widen the float filters' margins so that most decisions take the exact-rational fallback paths
    # (γ's floor/fraction in §5 and the per-sample Bernoulli comparison in §2): output and consumption
    # must not change.
    from dprag.accounting.noise import bernoulli as bern_mod
    from dprag.accounting.noise import discrete as disc_mod

    monkeypatch.setattr(disc_mod, "_GAMMA_REL", 0.45)
    monkeypatch.setattr(bern_mod, "_W_ERR", 2.0**62)
    words = SpecWords(b"fb", b"")
    expected = ref_dgauss(words, Fraction(sigma) ** 2, 25)
    src = RandomSource.from_seed(b"fb", b"")
    assert discrete_gaussian(sigma, 25, src).tolist() == expected
    assert _next_word(src) == words.next()
