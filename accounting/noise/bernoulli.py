"""Exact Bernoulli trials with rational parameters, drawn in bulk from a ``RandomSource``.

Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020;
arXiv:2004.00010), Section 5: every sampler is built from Bernoulli(p) trials with *rational* p and
from Bernoulli(exp(-γ)) trials (their Algorithm 1). This module implements both, exactly, for many
samples at once. The stream consumption is specified in spec/accounting/noise.md §2–§3; in short:

- **Trial.** ``Bern(p)``, p ∈ (0, 1) rational, reads one 64-bit word w (little-endian, as
  ``RandomSource.uint64``) and compares the uniform real U = 0.w w' w'' … (base 2^64) with p
  lazily: with P = 2^64·p, the result is 1 if w < ⌊P⌋, 0 if w > ⌊P⌋ or w = P; otherwise
  (w = ⌊P⌋, P not an integer, probability 2^-64) the comparison continues with p ← P − ⌊P⌋ on the
  next word. So P[result = 1] = P[U < p] = p exactly. Trials with p ∈ {0, 1} read no word.
- **Bulk.** ``bulk step`` = one trial for each of m active samples: m words are read in one block and
  word j goes to the j-th active sample (index order); continuation words of ties are read after the
  block, one at a time, in index order of the tied samples.
- **Algorithm 1** (CKS): for γ ∈ [0, 1], K = 1, 2, …: A ← Bern(γ/K) until A = 0; return [K odd].
  For γ > 1: ⌊γ⌋ trials of Bernoulli(exp(-1)) (stop at the first 0, return 0), then
  Bernoulli(exp(-(γ - ⌊γ⌋))). In bulk, all samples still looping share the same K (so one bulk step
  per K), and the j-th Bernoulli(exp(-1)) of the integer part is one bulk call over the samples with
  ⌊γ⌋ ≥ j that have not failed yet.

Exactness with fast arithmetic: where p differs per sample it is a rational with large numerator and
denominator (σ² converted exactly from a float has ~106-bit parts). The decision ``w < ⌊2^64 p⌋`` is
then made with a float64 approximation of p *and a rigorous error bound*: if w lies farther from
2^64·p than the bound (all but ~2^-40 of the cases), the float comparison provably agrees with the
exact one; otherwise the exact rational is computed (``fractions.Fraction``) and compared. The float
path is only a filter: the result, and the stream consumption, are those of the exact algorithm.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import SupportsFloat

import numpy as np
import numpy.typing as npt

from .stream import RandomStream

TWO64 = 1 << 64
_F64 = float(TWO64)
#: margins of the float filter (see ``bernoulli_filtered``)
_W_ERR = 4096.0  # ≥ |float64(w) - w| (< 2^11) plus slack
_REL_ERR = 2.0**-50


def _resolve_tie(source: RandomStream, frac_p: Fraction) -> bool:
    """Continue comparing U with p after a tie: ``frac_p`` = 2^64·p - ⌊2^64·p⌋ ∈ (0, 1)."""
    p = frac_p
    while True:
        w = int(source.uint64(1)[0])
        num = p.numerator << 64
        fl = num // p.denominator
        if w < fl:
            return True
        if w > fl or num == fl * p.denominator:
            return False
        p = Fraction(num - fl * p.denominator, p.denominator)


def bernoulli_word(w: int, p: Fraction, source: RandomStream) -> bool:
    """Exact Bern(p) given its first word ``w`` (0 < p < 1); reads continuation words on a tie."""
    num = p.numerator << 64
    fl = num // p.denominator
    if w < fl:
        return True
    if w > fl or num == fl * p.denominator:
        return False
    return _resolve_tie(source, Fraction(num - fl * p.denominator, p.denominator))


def bernoulli_shared(source: RandomStream, p: Fraction, m: int) -> npt.NDArray[np.bool_]:
    """One bulk step of ``m`` trials sharing the rational p ∈ [0, 1] (exact integer comparison)."""
    if m == 0 or p == 0:
        return np.zeros(m, dtype=bool)
    if p == 1:
        return np.ones(m, dtype=bool)
    num = p.numerator << 64
    fl, rem = divmod(num, p.denominator)
    w = source.uint64(m)
    one = w < np.uint64(fl)
    if rem:
        for j in np.flatnonzero(w == np.uint64(fl)):
            one[j] = _resolve_tie(source, Fraction(rem, p.denominator))
    return one


def bernoulli_filtered(
    source: RandomStream,
    p_f: npt.NDArray[np.float64],
    p_err: npt.NDArray[np.float64] | float,
    exact_p: Callable[[int], Fraction],
) -> npt.NDArray[np.bool_]:
    """One bulk step of trials with per-sample p_j ∈ (0, 1) (the caller guarantees p_j ∉ {0, 1}).

    ``p_f[j]`` is a float64 approximation of p_j with |p_f[j] - p_j| ≤ ``p_err[j]``; ``exact_p(j)``
    returns p_j exactly and is called only when the float comparison cannot decide.

    Soundness of the filter: let T = 2^64·p_f (exact scaling), M ≥ 2^64·p_err + 2^-50·T + 2^12.
    float64(w) is within 2^11 of w, and fl(T ± M) within 2^-52·T of T ± M, so float64(w) < fl(T - M)
    implies w + 1 ≤ 2^64·p_j, i.e. w < ⌊2^64 p_j⌋ (result 1), and float64(w) > fl(T + M) implies
    w > 2^64·p_j (result 0). Everything else is decided exactly by ``bernoulli_word``.
    """
    m = int(p_f.size)
    if m == 0:
        return np.zeros(0, dtype=bool)
    w = source.uint64(m)
    wf = w.astype(np.float64)
    t = p_f * _F64
    margin = np.asarray(p_err, dtype=np.float64) * (_F64 * (1.0 + 2.0**-30)) + t * _REL_ERR + _W_ERR
    one = wf < t - margin
    zero = wf > t + margin
    for j in np.flatnonzero(~(one | zero)):
        one[j] = bernoulli_word(int(w[j]), exact_p(int(j)), source)
    return one


def bernoulli_half(source: RandomStream, m: int) -> npt.NDArray[np.bool_]:
    """Bern(1/2) in bulk: one word each, result w < 2^63 (never a tie)."""
    if m == 0:
        return np.zeros(0, dtype=bool)
    return source.uint64(m) < np.uint64(1 << 63)


def bernoulli_exp_minus_one(source: RandomStream, m: int) -> npt.NDArray[np.bool_]:
    """``m`` trials of Bernoulli(exp(-1)) by CKS Algorithm 1 with γ = 1, in bulk.

    K = 1 has p = 1 (no word read); then one bulk step with p = 1/K for K = 2, 3, … over the samples
    whose trials so far all returned 1. Result [K odd] at the first 0. Expected words per sample: e - 1.
    """
    result = np.empty(m, dtype=bool)
    active = np.arange(m)
    k = 2
    while active.size:
        a = bernoulli_shared(source, Fraction(1, k), active.size)
        result[active[~a]] = k % 2 == 1
        active = active[a]
        k += 1
    return result


def bernoulli_exp_fraction(
    source: RandomStream,
    g_f: npt.NDArray[np.float64],
    g_err: npt.NDArray[np.float64],
    exact_g: Callable[[int], Fraction],
    is_zero: npt.NDArray[np.bool_],
) -> npt.NDArray[np.bool_]:
    """Bernoulli(exp(-γ_i)) for per-sample γ_i ∈ [0, 1) by CKS Algorithm 1, in bulk.

    ``g_f`` ≈ γ (|g_f - γ| ≤ ``g_err``), ``exact_g(i)`` the exact rational, ``is_zero[i]`` iff γ_i = 0
    exactly (such samples read no word and return 1: K = 1, Bern(0) = 0, K odd).
    Round K: one bulk step with p_i = γ_i/K over the samples still looping; those with A = 0 stop
    with result [K odd].
    """
    m = int(g_f.size)
    result = np.ones(m, dtype=bool)
    active = np.flatnonzero(~is_zero)
    k = 1
    while active.size:
        p_f = g_f[active] / k
        p_err = g_err[active] / k + p_f * 2.0**-52
        act = active
        kk = k

        def exact_p(j: int, act: npt.NDArray[np.intp] = act, kk: int = kk) -> Fraction:
            return exact_g(int(act[j])) / kk

        a = bernoulli_filtered(source, p_f, p_err, exact_p)
        result[active[~a]] = k % 2 == 1
        active = active[a]
        k += 1
    return result


def bernoulli_exp(gamma: SupportsFloat, size: int, source: RandomStream) -> npt.NDArray[np.bool_]:
    """``size`` independent exact Bernoulli(exp(-γ)) trials for one rational γ ≥ 0 (CKS Algorithm 1).

    A public, shared-γ entry point (used by tests and by callers who need exact exp(-γ) coins).
    ``gamma`` is converted exactly with ``Fraction``.
    """
    from dprag.errors import InvalidParameterError

    from ..errors import check_positive_int

    g = as_fraction("gamma", gamma)
    if g < 0:
        raise InvalidParameterError("gamma", "must be >= 0", gamma)
    n = check_positive_int("size", size, minimum=0)
    if not isinstance(source, RandomStream):
        raise InvalidParameterError("source", "must be an accounting.noise.RandomSource", type(source).__name__)
    whole = g.numerator // g.denominator
    frac = g - whole
    ok = np.ones(n, dtype=bool)
    j = 1
    while j <= whole:
        act = np.flatnonzero(ok)
        if not act.size:
            break
        ok[act[~bernoulli_exp_minus_one(source, act.size)]] = False
        j += 1
    st2 = np.flatnonzero(ok)
    if st2.size and frac:
        gf = np.full(st2.size, float(frac))
        c = bernoulli_exp_fraction(source, gf, gf * 2.0**-52, lambda i: frac, np.zeros(st2.size, dtype=bool))
        ok[st2[~c]] = False
    return ok


def as_fraction(field: str, value: SupportsFloat) -> Fraction:
    from dprag.errors import InvalidParameterError

    if isinstance(value, (bool, str, bytes)) or value is None:
        raise InvalidParameterError(field, "must be a finite rational number", value)
    if isinstance(value, Fraction):
        return value
    if isinstance(value, (int, np.integer)):
        return Fraction(int(value))
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(field, "must be a finite rational number", value) from None
    if f != f or f in (float("inf"), float("-inf")):
        raise InvalidParameterError(field, "must be finite (not NaN or inf)", value)
    return Fraction(f)
