"""F_q12 on lists of 12 ints, in py-ecc's basis F_q[w] / (w^12 - 18 w^6 + 82) (so values compare directly with
py-ecc's FQ12 coefficients; u = w^6 - 9, i.e. F_q2 = F_q[u] / (u^2 + 1) sits at w^0 and w^6).

Inversion by the norm to F_q2: N(f) = prod_{i<6} f^(q^(2i)) lies in F_q2, so f^-1 = (prod_{0<i<6} f^(q^(2i))) / N(f).
Frobenius maps f -> f^(q^k) move only the powers of w (the coefficients are in F_q): 12 precomputed images per k.
"""

from __future__ import annotations

from dprag.zk.curve import Q

ONE = [1] + [0] * 11


def mul(a: list[int], b: list[int]) -> list[int]:
    prod = [0] * 23
    for i, ai in enumerate(a):
        if ai:
            for j, bj in enumerate(b):
                if bj:
                    prod[i + j] += ai * bj
    return _reduce(prod)


def mul_sparse(a: list[int], terms: list[tuple[int, int]]) -> list[int]:
    prod = [0] * 23
    for i, ai in enumerate(a):
        if ai:
            for j, lj in terms:
                prod[i + j] += ai * lj
    return _reduce(prod)


def _reduce(prod: list[int]) -> list[int]:
    for k in range(22, 11, -1):
        c = prod[k]
        if c:
            prod[k - 6] += 18 * c
            prod[k - 12] -= 82 * c
    return [x % Q for x in prod[:12]]


def add(a: list[int], b: list[int]) -> list[int]:
    return [(x + y) % Q for x, y in zip(a, b, strict=False)]


def sub(a: list[int], b: list[int]) -> list[int]:
    return [(x - y) % Q for x, y in zip(a, b, strict=False)]


def neg(a: list[int]) -> list[int]:
    return [-x % Q for x in a]


def pow_(a: list[int], e: int) -> list[int]:
    out = ONE
    for bit in bin(e)[2:] if e else "":
        out = mul(out, out)
        if bit == "1":
            out = mul(out, a)
    return out


_FROB: dict[int, list[list[int]]] = {}


def frob(f: list[int], k: int) -> list[int]:
    """f^(q^k)."""
    tab = _FROB.get(k)
    if tab is None:
        if k == 1:
            wq = pow_([0, 1] + [0] * 10, Q)
            tab = [ONE]
            for _ in range(11):
                tab.append(mul(tab[-1], wq))
        else:
            tab = [frob(t, 1) for t in ([ONE] + [[0] * i + [1] + [0] * (11 - i) for i in range(1, 12)])]
            for _ in range(k - 1):
                tab = [frob(t, 1) for t in tab]
        _FROB[k] = tab
    out = [0] * 12
    for ci, t in zip(f, tab, strict=False):
        if ci:
            for j in range(12):
                out[j] += ci * t[j]
    return [x % Q for x in out]


def inv(f: list[int]) -> list[int]:
    if not any(f):
        raise ZeroDivisionError("inverse of 0 in F_q12")
    p = ONE
    for i in range(1, 6):
        p = mul(p, frob(f, 2 * i))
    n = mul(f, p)  # in F_q2: only positions 0 and 6
    a, b = (n[0] + 9 * n[6]) % Q, n[6]  # a + b u
    t = pow(a * a + b * b, -1, Q)
    ia, ib = a * t % Q, -b * t % Q
    return mul_sparse(p, [(0, (ia - 9 * ib) % Q), (6, ib)])


def from_fq2(c: tuple[int, int], k: int) -> list[int]:
    """(a + b u) * w^k for k < 6."""
    v = [0] * 12
    v[k] = (c[0] - 9 * c[1]) % Q
    v[k + 6] = c[1] % Q
    return v
