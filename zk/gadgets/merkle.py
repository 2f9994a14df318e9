"""Binary Poseidon Merkle trees: node = Poseidon(left, right); leaves padded with 0 to a power of two."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from dprag.errors import InvalidParameterError
from dprag.zk.gadgets.poseidon import poseidon, poseidon_hash
from dprag.zk.r1cs import LC, ConstraintSystem

_T = TypeVar("_T")


def _pad(leaves: list[_T]) -> list[_T | int]:
    n = 1
    while n < len(leaves):
        n *= 2
    return leaves + [0] * (n - len(leaves))


def merkle_root(leaves: Sequence[int]) -> int:
    if not leaves:
        raise InvalidParameterError("leaves", "must be non-empty", 0)
    level = _pad(list(leaves))
    while len(level) > 1:
        level = [poseidon_hash([level[i], level[i + 1]]) for i in range(0, len(level), 2)]
    return level[0]


def merkle_path(leaves: Sequence[int], index: int) -> list[int]:
    """Sibling hashes from the leaf up to (excluding) the root."""
    if not 0 <= index < len(leaves):
        raise InvalidParameterError("index", f"must be in [0, {len(leaves)})", index)
    level = _pad(list(leaves))
    path = []
    while len(level) > 1:
        path.append(level[index ^ 1])
        level = [poseidon_hash([level[i], level[i + 1]]) for i in range(0, len(level), 2)]
        index //= 2
    return path


def merkle_verify(root: int, leaf: int, index: int, path: Sequence[int]) -> bool:
    h = leaf
    for sib in path:
        h = poseidon_hash([sib, h] if index & 1 else [h, sib])
        index >>= 1
    return index == 0 and h == root


def root_gadget(cs: ConstraintSystem, leaves: Sequence[LC]) -> LC:
    """The root of the tree over ``leaves`` (all of them in-circuit: N - 1 hashes after padding)."""
    padded = _pad(list(leaves))
    level = [x if isinstance(x, LC) else LC.const(x) for x in padded]
    while len(level) > 1:
        level = [poseidon(cs, [level[i], level[i + 1]]) for i in range(0, len(level), 2)]
    return level[0]


def path_gadget(cs: ConstraintSystem, leaf: LC, index_bits: Sequence[LC], path: Sequence[LC]) -> LC:
    """The root implied by ``leaf`` at the position whose (boolean, caller-constrained) bits are ``index_bits``,
    little-endian, with sibling hashes ``path`` (1 + ~243 constraints per level)."""
    if len(index_bits) != len(path):
        raise InvalidParameterError("path", "needs one sibling per index bit", len(path))
    h = leaf
    for bit, sib in zip(index_bits, path, strict=False):
        # left = bit ? sib : h ; right = bit ? h : sib
        d = cs.mul(bit, sib - h, "merkle swap")
        h = poseidon(cs, [h + d, sib - d])
    return h
