"""Top-K selection: the ids of the K largest of N distinct keys, in decreasing key order.

Constraints (kb = key bit width, keys must be range-checked < 2^kb and pairwise distinct by construction):
- one-hot rows e[j][i] (boolean, sum_i e[j][i] = 1): ids[j] = sum_i i * e[j][i], key_of[j] = sum_i e[j][i] key_i;
- sel_i = sum_j e[j][i] is boolean: the K ids are distinct;
- key_of[0] > key_of[1] > ... > key_of[K-1] = t (strict order, K - 1 comparisons);
- every i with sel_i = 0 has key_i < t (N comparisons).
So {ids} is exactly the set of the K largest keys and the list is in rank order: nothing else satisfies them.
Cost ~ 2NK + (N + K - 1)(kb + 2) + N + K constraints.
"""

from __future__ import annotations

from collections.abc import Sequence

from dprag.errors import InvalidParameterError
from dprag.zk.gadgets.compare import less_than
from dprag.zk.r1cs import LC, ONE, ConstraintSystem, lc_sum


def topk_indices(keys: Sequence[int], k: int) -> list[int]:
    """Plain Python: indices of the k largest keys, largest first (keys distinct)."""
    return sorted(range(len(keys)), key=lambda i: -keys[i])[:k]


def topk_gadget(cs: ConstraintSystem, keys: Sequence[LC], k: int, kb: int) -> list[LC]:
    n = len(keys)
    if not 1 <= k <= n:
        raise InvalidParameterError("k", f"must be in [1, N = {n}]", k)

    def onehot(*vals: int) -> list[int]:
        order = topk_indices(list(vals), k)
        return [1 if order[j] == i else 0 for j in range(k) for i in range(n)]

    flat = cs.alloc_many(k * n, onehot, *keys)
    e = [flat[j * n : (j + 1) * n] for j in range(k)]
    ids = []
    key_of = []
    for j in range(k):
        for x in e[j]:
            cs.assert_bool(x, "topk one-hot")
        cs.enforce_equal(lc_sum(e[j]), ONE, "topk one-hot sum")
        ids.append(lc_sum(x * i for i, x in enumerate(e[j])))
        key_of.append(lc_sum(cs.mul(x, key, "topk pick") for x, key in zip(e[j], keys, strict=False)))
    sel = [lc_sum(e[j][i] for j in range(k)) for i in range(n)]
    for s in sel:
        cs.assert_bool(s, "topk distinct")
    for j in range(k - 1):
        cs.enforce_equal(less_than(cs, key_of[j + 1], key_of[j], kb), ONE, "topk order")
    t = key_of[k - 1]
    for i in range(n):
        lt = less_than(cs, keys[i], t, kb)
        cs.enforce(ONE - sel[i], ONE - lt, 0, "topk threshold")
    return ids
