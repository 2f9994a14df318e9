"""RFC 6962 / RFC 9162 Merkle tree hashing with SHA-256.

Source: RFC 9162 (Certificate Transparency 2.0) §2.1.1 "Definition of the Merkle Tree", identical to
RFC 6962 §2.1 for SHA-256. For an ordered list of ``n`` byte strings ``D[n] = {d(0), ..., d(n-1)}``::

    MTH({})      = SHA-256()                                  (the empty-tree hash)
    MTH({d(0)})  = SHA-256(0x00 || d(0))                      (leaf hash)
    MTH(D[n])    = SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n]))  for n > 1,
                   k = the largest power of two strictly smaller than n

Node addressing (transparency-dev/merkle ``compact.NodeID`` convention): the *perfect* (complete) subtree
at ``(level, index)`` covers leaves ``[index * 2**level, (index + 1) * 2**level)``; level 0 nodes are leaf
hashes. Every MTH of a range that starts at a multiple of its own size rounded up to a power of two is a
right-to-left fold of the perfect subtrees that tile it (:func:`range_nodes`, :func:`fold`), which is how
:class:`CompactRange` keeps a running root in O(log n) memory and how the store answers queries in
O(log n) reads.

Everything here is pure (no I/O) and indices are 0-based.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from .errors import MalformedProofError

HASH_SIZE = 32
LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"

TREE_HASH = hashlib.sha256

#: MTH({}) = SHA-256 of the empty string (RFC 9162 §2.1.1); also the paper's C_ledger,0 = H(⊥).
EMPTY_ROOT = TREE_HASH(b"").digest()

NodeID = tuple[int, int]  # (level, index)


def empty_root() -> bytes:
    """The Merkle tree hash of the empty list, SHA-256("")."""
    return EMPTY_ROOT


def hash_leaf(leaf: bytes) -> bytes:
    """Leaf hash ``SHA-256(0x00 || leaf)`` (RFC 9162 §2.1.1)."""
    return TREE_HASH(LEAF_PREFIX + leaf).digest()


def hash_children(left: bytes, right: bytes) -> bytes:
    """Interior node hash ``SHA-256(0x01 || left || right)`` (RFC 9162 §2.1.1)."""
    return TREE_HASH(NODE_PREFIX + left + right).digest()


def largest_power_of_two_below(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (``n >= 2``), the RFC's split point ``k``."""
    return 1 << ((n - 1).bit_length() - 1)


def mth(leaves: Sequence[bytes]) -> bytes:
    """Reference Merkle Tree Hash, the literal recursive definition of RFC 9162 §2.1.1.

    O(n) hashes and O(log n) recursion depth; meant as a test oracle and for tiny inputs. Use
    :func:`root_from_leaves` for long inputs.
    """
    n = len(leaves)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return hash_leaf(bytes(leaves[0]))
    k = largest_power_of_two_below(n)
    return hash_children(mth(leaves[:k]), mth(leaves[k:]))


def node_range(node: NodeID) -> tuple[int, int]:
    """Leaf range ``[begin, end)`` covered by the perfect subtree ``(level, index)``."""
    level, index = node
    return index << level, (index + 1) << level


def range_nodes(begin: int, end: int) -> list[NodeID]:
    """Tile ``[begin, end)`` with the fewest aligned perfect subtrees, left to right.

    Same decomposition as transparency-dev/merkle ``compact.RangeNodes``: sizes first grow (to align the
    left edge) then shrink (following the binary expansion of the remaining length).
    """
    if not 0 <= begin <= end:
        raise ValueError(f"invalid range [{begin}, {end})")
    nodes: list[NodeID] = []
    # Left part: climb while begin is aligned and the next bigger node still fits.
    while begin < end:
        level = (begin & -begin).bit_length() - 1 if begin else (end - begin).bit_length() - 1
        # Largest aligned node starting at begin that fits in [begin, end).
        while (1 << level) > end - begin:
            level -= 1
        nodes.append((level, begin >> level))
        begin += 1 << level
    return nodes


def peaks(size: int) -> list[NodeID]:
    """The perfect subtrees tiling ``[0, size)``, largest first (one per set bit of ``size``)."""
    return range_nodes(0, size)


def fold(hashes: Sequence[bytes]) -> bytes:
    """Root of a range from the hashes of its tiling perfect subtrees (left to right order).

    ``fold([h0, h1, ..., hm]) = H(h0, H(h1, ... H(h_{m-1}, hm)))``: the MTH split rule puts the largest
    power of two on the left, so the tiling of an RFC subtree is merged from the right.
    """
    if not hashes:
        return EMPTY_ROOT
    acc = hashes[-1]
    for h in reversed(hashes[:-1]):
        acc = hash_children(h, acc)
    return acc


def stored_hash_index(level: int, index: int) -> int:
    """Position of node ``(level, index)`` in the append-order sequence of all perfect-subtree hashes.

    When leaf ``m`` is appended the log stores, in this order, the leaf hash ``(0, m)`` and then every
    node ``(l, m >> l)`` for ``l = 1, 2, ...`` that leaf ``m`` completes (as long as the low ``l`` bits of
    ``m`` are all ones). Hence, as in golang.org/x/mod/sumdb/tlog ``StoredHashIndex``::

        stored_hash_index(0, m) = m + m//2 + m//4 + ...          (hashes stored before leaf m)
        stored_hash_index(l, i) = stored_hash_index(0, (i + 1) * 2**l - 1) + l
    """
    m = ((index + 1) << level) - 1 if level else index
    total = 0
    while m:
        total += m
        m >>= 1
    return total + level


def stored_hash_count(size: int) -> int:
    """Number of perfect-subtree hashes stored for a log of ``size`` leaves: ``2*size - popcount(size)``."""
    return 2 * size - bin(size).count("1")


class CompactRange:
    """The right frontier of a growing tree: the hashes of :func:`peaks(size) <peaks>`.

    O(log n) memory; ``append`` reports the perfect subtrees each leaf completes, in
    :func:`stored_hash_index` order, so a store can persist them; ``root()`` is the MTH of everything
    appended (RFC 9162 §2.1.1), computed in O(log n) hashes.
    """

    __slots__ = ("size", "_hashes")

    def __init__(self, size: int = 0, hashes: Sequence[bytes] = ()):
        if size < 0 or len(hashes) != bin(size).count("1"):
            raise ValueError(f"a compact range of size {size} has {bin(size).count('1')} hashes, got {len(hashes)}")
        self.size = size
        self._hashes = [bytes(h) for h in hashes]

    @property
    def hashes(self) -> list[bytes]:
        """Hashes of :func:`peaks(size) <peaks>`, largest subtree first."""
        return list(self._hashes)

    def copy(self) -> CompactRange:
        return CompactRange(self.size, self._hashes)

    def append_leaf_hash(self, leaf_hash: bytes, out: list[bytes] | None = None) -> None:
        """Append one leaf hash; extend ``out`` with the leaf hash and every node it completes."""
        hashes = self._hashes
        h = leaf_hash
        if out is not None:
            out.append(h)
        m = self.size
        while m & 1:
            h = hash_children(hashes.pop(), h)
            if out is not None:
                out.append(h)
            m >>= 1
        hashes.append(h)
        self.size += 1

    def extend(self, leaves: Iterable[bytes], out: list[bytes] | None = None) -> None:
        """Append many leaves (raw leaf data, hashed here); see :meth:`append_leaf_hash`."""
        hashes = self._hashes
        size = self.size
        sha = TREE_HASH
        if out is None:
            for leaf in leaves:
                h = sha(LEAF_PREFIX + leaf).digest()
                m = size
                while m & 1:
                    h = sha(NODE_PREFIX + hashes.pop() + h).digest()
                    m >>= 1
                hashes.append(h)
                size += 1
        else:
            push = out.append
            for leaf in leaves:
                h = sha(LEAF_PREFIX + leaf).digest()
                push(h)
                m = size
                while m & 1:
                    h = sha(NODE_PREFIX + hashes.pop() + h).digest()
                    push(h)
                    m >>= 1
                hashes.append(h)
                size += 1
        self.size = size

    def root(self) -> bytes:
        """MTH of all leaves appended so far."""
        return fold(self._hashes)


def root_from_leaves(leaves: Iterable[bytes]) -> bytes:
    """MTH of a stream of leaves in O(n) time and O(log n) memory (what a verifier uses on a bundle)."""
    cr = CompactRange()
    cr.extend(leaves)
    return cr.root()


def check_hash(field: str, value: object) -> bytes:
    """Return ``value`` as bytes if it is a 32-byte hash, else raise :class:`MalformedProofError`."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        b = bytes(value)
        if len(b) == HASH_SIZE:
            return b
        raise MalformedProofError(field, f"must be a {HASH_SIZE}-byte SHA-256 hash", f"{len(b)} bytes")
    raise MalformedProofError(field, f"must be a {HASH_SIZE}-byte SHA-256 hash (bytes)", type(value).__name__)
