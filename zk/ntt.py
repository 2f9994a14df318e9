"""Number-theoretic transforms over F_r on power-of-two domains (iterative radix-2, bit-reversal permutation)."""

from __future__ import annotations

from dprag.errors import InvalidParameterError
from dprag.zk.field import R, root_of_unity

_TWIDDLES: dict[int, list[int]] = {}
_REV: dict[int, list[int]] = {}


def _twiddles(log_n: int) -> list[int]:
    tw = _TWIDDLES.get(log_n)
    if tw is None:
        n = 1 << log_n
        w = root_of_unity(log_n)
        tw = [1] * max(n // 2, 1)
        for i in range(1, n // 2):
            tw[i] = tw[i - 1] * w % R
        _TWIDDLES[log_n] = tw
    return tw


def _log2(n: int) -> int:
    if n <= 0 or n & (n - 1):
        raise InvalidParameterError("n", "NTT length must be a power of two", n)
    return n.bit_length() - 1


def _bitrev(a: list[int], log_n: int) -> list[int]:
    rev = _REV.get(log_n)
    if rev is None:
        rev = [int(format(i, f"0{log_n}b")[::-1], 2) if log_n else 0 for i in range(1 << log_n)]
        _REV[log_n] = rev
    return [a[i] for i in rev]  # bit reversal is an involution: out[rev[i]] = a[i] <=> out[i] = a[rev[i]]


def ntt(coeffs: list[int], inverse: bool = False) -> list[int]:
    """Evaluations at w^0..w^(n-1) of the polynomial with ``coeffs`` (or back, with ``inverse``)."""
    n = len(coeffs)
    log_n = _log2(n)
    a = _bitrev(coeffs, log_n)
    tw = _twiddles(log_n)
    p = R
    half = 1
    while half < n:
        step = n // (2 * half)
        tws = (
            tw[::step][:half]
            if not inverse
            else [tw[0]] + [p - tw[n // 2 - j * step] if j else 1 for j in range(1, half)]
        )
        span = 2 * half
        if half <= step:
            # few twiddles, many blocks: one strided slice per twiddle (all butterflies that use it)
            for j in range(half):
                t = tws[j]
                lo = a[j::span]
                hi = a[j + half :: span]
                vs = hi if t == 1 else [x * t % p for x in hi]
                a[j::span] = [(u + v) % p for u, v in zip(lo, vs, strict=False)]
                a[j + half :: span] = [(u - v) % p for u, v in zip(lo, vs, strict=False)]
        else:
            # long blocks: one contiguous slice per block
            for start in range(0, n, span):
                mid = start + half
                lo = a[start:mid]
                vs = [x * t % p for x, t in zip(a[mid : start + span], tws, strict=False)]
                a[start:mid] = [(u + v) % p for u, v in zip(lo, vs, strict=False)]
                a[mid : start + span] = [(u - v) % p for u, v in zip(lo, vs, strict=False)]
        half *= 2
    if inverse:
        n_inv = pow(n, -1, p)
        a = [x * n_inv % p for x in a]
    return a


def intt(evals: list[int]) -> list[int]:
    return ntt(evals, inverse=True)


def coset_scale(coeffs: list[int], shift: int) -> list[int]:
    """Coefficients of f(shift * X) given those of f."""
    out = []
    acc = 1
    for c in coeffs:
        out.append(c * acc % R)
        acc = acc * shift % R
    return out
