"""Independent references for the accountants' ε: brute-force privacy-loss distributions, no dprag code.

- ``dg_exact_epsilon`` / ``dg_exact_delta``: m adaptive releases of the discrete Gaussian N_Z(0, σ²) with
  integer sensitivity Δ, in mpmath (``dps`` digits). The per-release privacy loss at noise x is
  (Δ² − 2Δx)/(2σ²), linear in x, so the composed loss is (mΔ² − 2ΔS)/(2σ²) with S the sum of the m noises:
  its pmf is the m-fold convolution of N_Z's pmf (support [−40σ, 40σ], mass outside < e^{−800}), and
  δ(ε) = Σ_s P(S = s)·max(0, 1 − e^{ε − L(s)}) (hockey stick; the pair is symmetric).
- ``dg_brute_delta`` / ``dg_brute_epsilon``: the same in float64 numpy (every term positive, so the relative
  error is below m·n·2⁻⁵³ ≲ 1e-11 for the sizes used): fast enough for property tests.
- ``gdp_exact_epsilon``: μ-GDP (Balle–Wang 2018 Thm 8) in mpmath.
- ``pure_exact_epsilon``: optimal composition of pure-DP mechanisms ε_1..ε_k (Murtagh–Vadhan 2016 Thm 1.5),
  brute force over the 2^k subsets in mpmath.
"""

from __future__ import annotations

import functools
import itertools
import math

import mpmath as mp
import numpy as np

_DPS = 40


@functools.lru_cache(maxsize=32)
def _dg_sum_pmf_mp(sigma: float, m: int, tail: float = 40.0):
    with mp.workdps(_DPS):
        s2 = 2 * mp.mpf(sigma) ** 2
        t = int(math.ceil(tail * sigma)) + 1
        w = [mp.e ** (-(mp.mpf(x) ** 2) / s2) for x in range(-t, t + 1)]
        z = mp.fsum(w)
        p = [x / z for x in w]
        cur = p
        for _ in range(m - 1):
            out = [mp.mpf(0)] * (len(cur) + len(p) - 1)
            for i, a in enumerate(cur):
                for j, b in enumerate(p):
                    out[i + j] += a * b
            cur = out
        return -m * t, tuple(cur)


def dg_exact_delta(sigma: float, sensitivity: int, m: int, eps) -> mp.mpf:
    off, pmf = _dg_sum_pmf_mp(float(sigma), int(m))
    with mp.workdps(_DPS):
        s2 = 2 * mp.mpf(sigma) ** 2
        eps = mp.mpf(eps)
        tot = mp.mpf(0)
        for k, pk in enumerate(pmf):
            loss = (m * sensitivity * sensitivity - 2 * sensitivity * (off + k)) / s2
            if loss > eps:
                tot += pk * (1 - mp.e ** (eps - loss))
        return tot


def _bisect_epsilon(delta_at, delta, hi=400.0, iters=80):
    """Smallest ε (to 2^-iters·hi) with delta_at(ε) ≤ delta; δ(ε) is non-increasing."""
    lo, hi = 0.0, hi
    if delta_at(0.0) <= delta:
        return 0.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if delta_at(mid) > delta:
            lo = mid
        else:
            hi = mid
    return lo  # the exact ε lies in [lo, hi]; lo is the side a certified bound must not go below


def dg_exact_epsilon(sigma: float, sensitivity: int, m: int, delta: float) -> float:
    """A value ≤ the exact ε (to ~1e-20 absolute) of m releases of N_Z(0, σ²), Δ, at δ."""
    return _bisect_epsilon(lambda e: dg_exact_delta(sigma, sensitivity, m, e), mp.mpf(delta))


@functools.lru_cache(maxsize=256)
def _dg_sum_pmf_np(sigma: float, m: int, tail: float = 40.0):
    t = int(math.ceil(tail * sigma)) + 1
    x = np.arange(-t, t + 1, dtype=np.float64)
    p = np.exp(-(x * x) / (2 * sigma * sigma))
    p /= math.fsum(p)
    cur = p
    for _ in range(m - 1):
        cur = np.convolve(cur, p)
    return -m * t, cur


def dg_brute_delta(sigma: float, sensitivity: int, m: int, eps: float) -> float:
    off, pmf = _dg_sum_pmf_np(float(sigma), int(m))
    s = off + np.arange(pmf.size, dtype=np.float64)
    loss = (m * sensitivity * sensitivity - 2.0 * sensitivity * s) / (2.0 * sigma * sigma)
    keep = loss > eps
    return math.fsum(pmf[keep] * -np.expm1(eps - loss[keep]))


def dg_brute_epsilon(sigma: float, sensitivity: int, m: int, delta: float) -> float:
    return _bisect_epsilon(lambda e: dg_brute_delta(sigma, sensitivity, m, e), delta, iters=60)


def gdp_exact_delta(mu, eps) -> mp.mpf:
    with mp.workdps(_DPS):
        mu, eps = mp.mpf(mu), mp.mpf(eps)
        return mp.ncdf(-eps / mu + mu / 2) - mp.e**eps * mp.ncdf(-eps / mu - mu / 2)


def gdp_exact_epsilon(mu: float, delta: float) -> float:
    return _bisect_epsilon(lambda e: gdp_exact_delta(mu, e), mp.mpf(delta), hi=mu * mu / 2 + 12 * mu + 60)


def pure_exact_delta(epsilons, eps_g) -> mp.mpf:
    """Murtagh–Vadhan 2016 Thm 1.5 with all δ_i = 0, by brute force over subsets."""
    with mp.workdps(_DPS):
        es = [mp.mpf(e) for e in epsilons]
        eg = mp.e ** mp.mpf(eps_g)
        tot = mp.mpf(0)
        for mask in itertools.product((0, 1), repeat=len(es)):
            a = mp.fsum(e for e, b in zip(es, mask, strict=False) if b)
            b_ = mp.fsum(e for e, b in zip(es, mask, strict=False) if not b)
            tot += max(mp.e**a - eg * mp.e**b_, 0)
        den = mp.fprod(1 + mp.e**e for e in es)
        return tot / den


def pure_exact_epsilon(epsilons, delta: float) -> float:
    return _bisect_epsilon(
        lambda e: pure_exact_delta(epsilons, e), mp.mpf(delta), hi=float(sum(epsilons)) + 1.0, iters=60
    )
