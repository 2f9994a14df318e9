"""BN254 scalar field F_r (the field of R1CS values, witnesses and public inputs) and its NTT domains.

Elements are plain Python ints in [0, r). The multiplicative generator and the roots of unity are the ones
ffjavascript (snarkjs) uses: 5 is the smallest quadratic non-residue, ``root_of_unity(k) = 5^((r-1)/2^28)`` squared
28 - k times, so evaluation domains (and with them the order of a ``.zkey``'s H points) agree with snarkjs.
"""

from __future__ import annotations

from collections.abc import Sequence

from dprag.errors import InvalidParameterError

R = 21888242871839275222246405745257275088548364400416034343698204186575808495617
"""Order of the BN254 groups G1, G2 (the scalar field modulus, snarkjs's ``r``)."""

TWO_ADICITY = 28
NQR = 5
_ROOT_28 = pow(NQR, (R - 1) >> TWO_ADICITY, R)


def check_element(field: str, value: int) -> int:
    """``value`` as a canonical field element; an int outside [0, r) is refused (never reduced silently)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParameterError(field, "must be an integer", value)
    if not 0 <= value < R:
        raise InvalidParameterError(field, "must be a field element: 0 <= value < r (BN254 scalar field)", value)
    return value


def inv(a: int) -> int:
    if a % R == 0:
        raise ZeroDivisionError("inverse of 0 in F_r")
    return pow(a, -1, R)


def batch_inv(values: Sequence[int], p: int = R) -> list[int]:
    """Inverses of all ``values`` (none zero) modulo ``p`` with one modular inversion (Montgomery's trick)."""
    n = len(values)
    if n == 0:
        return []
    prefix = [0] * n
    acc = 1
    for i, v in enumerate(values):
        prefix[i] = acc
        acc = acc * v % p
    acc = pow(acc, -1, p)
    out = [0] * n
    for i in range(n - 1, -1, -1):
        out[i] = acc * prefix[i] % p
        acc = acc * values[i] % p
    return out


def root_of_unity(log_n: int) -> int:
    """The primitive 2^log_n-th root of unity snarkjs uses (``Fr.w[log_n]``)."""
    if not 0 <= log_n <= TWO_ADICITY:
        raise InvalidParameterError("log_n", f"must be in [0, {TWO_ADICITY}]", log_n)
    w = _ROOT_28
    for _ in range(TWO_ADICITY - log_n):
        w = w * w % R
    return w


def signed(value: int) -> int:
    """The representative of ``value`` in (-r/2, r/2] (for reading back negative integers)."""
    value %= R
    return value - R if value > R // 2 else value
