"""Merkle inclusion and consistency proofs (RFC 9162 §2.1.3 and §2.1.4), 0-based leaf indices.

Generation is split in two so that any storage can serve proofs in O(log n) reads:

* :func:`inclusion_plan` / :func:`consistency_plan` are pure functions of the sizes. They follow the
  recursive definitions PATH(m, D[n]) (RFC 9162 §2.1.3.1) and SUBPROOF(m, D[n], b) (§2.1.4.1) literally,
  but name every proof element by the perfect subtrees (``(level, index)`` nodes, see
  :mod:`audit.protocol.ledger.rfc6962`) whose right-to-left fold is that element. At most one element per proof is
  not itself a perfect subtree (the "ephemeral" node of transparency-dev/merkle).
* :func:`materialize` turns a plan into hashes given a batch lookup ``get(nodes) -> hashes``.

Verification (:func:`verify_inclusion`, :func:`verify_consistency` and the ``root_from_*`` variants) is
pure, independent of any storage, and implements the RFC 9162 §2.1.3.2 / §2.1.4.2 bit-walking algorithms
step by step. Before hashing, every structural rule is checked and reported with a
:class:`~audit.protocol.ledger.errors.MalformedProofError` naming the field and the rule (index >= size,
size1 > size2, size1 == 0, wrong proof length, a hash that is not 32 bytes); a well-formed proof that
does not reproduce the expected root raises :class:`~audit.protocol.ledger.errors.RootMismatchError`. Both are
:class:`~audit.protocol.ledger.errors.ProofError`. The accept/reject behaviour matches transparency-dev/merkle
``proof.VerifyInclusion`` / ``proof.VerifyConsistency`` (conventions: a consistency proof from size 0 is
rejected as meaningless; equal sizes need an empty proof and equal roots), except that we also reject
hashes that are not 32 bytes long in the equal-size case.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .errors import MalformedProofError, RootMismatchError
from .rfc6962 import (
    HASH_SIZE,
    NODE_PREFIX,
    TREE_HASH,
    NodeID,
    check_hash,
    fold,
    largest_power_of_two_below,
    range_nodes,
)

MAX_SIZE = (1 << 64) - 1  # tree sizes and indices are uint64, as in RFC 9162 and the checkpoint format

Plan = list[tuple[NodeID, ...]]


def _check_uint(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedProofError(field, "must be an integer", value)
    if value < 0 or value > MAX_SIZE:
        raise MalformedProofError(field, "must lie in [0, 2**64)", value)
    return int(value)


def _check_proof(proof: object) -> list[bytes]:
    if isinstance(proof, (bytes, bytearray, str, memoryview)) or not isinstance(proof, Sequence):
        raise MalformedProofError("proof", "must be a sequence of 32-byte hashes", type(proof).__name__)
    return [check_hash(f"proof[{i}]", h) for i, h in enumerate(proof)]


# ---------------------------------------------------------------------------------------------------
# Proof lengths (closed forms; transparency-dev/merkle decompInclProof)
# ---------------------------------------------------------------------------------------------------


def inclusion_proof_length(index: int, size: int) -> int:
    """Number of hashes in the inclusion proof of leaf ``index`` in a tree of ``size`` (0 <= index < size).

    ``inner = bitlen(index XOR (size-1))`` levels where the paths to ``index`` and to the last leaf differ,
    plus one left sibling for each set bit of ``index`` above that level.
    """
    inner = (index ^ (size - 1)).bit_length()
    return inner + bin(index >> inner).count("1")


def consistency_proof_length(size1: int, size2: int) -> int:
    """Number of hashes in the consistency proof between sizes ``0 < size1 <= size2``."""
    if size1 == size2:
        return 0
    shift = (size1 & -size1).bit_length() - 1  # trailing zeros of size1
    inner = ((size1 - 1) ^ (size2 - 1)).bit_length()
    border = bin((size1 - 1) >> inner).count("1")
    seed = 0 if size1 & (size1 - 1) == 0 else 1
    return seed + (inner - shift) + border


# ---------------------------------------------------------------------------------------------------
# Generation plans (RFC 9162 §2.1.3.1 and §2.1.4.1)
# ---------------------------------------------------------------------------------------------------


def inclusion_plan(index: int, size: int) -> Plan:
    """Node plan of PATH(index, D[size]) (RFC 9162 §2.1.3.1), bottom-up.

    PATH(m, D[n]) = PATH(m, D[0:k]) : MTH(D[k:n])        if m < k
                  = PATH(m - k, D[k:n]) : MTH(D[0:k])    if m >= k,   k = largest power of 2 < n
    Each element is the tuple of perfect subtrees that tile its range (one node unless the range is the
    ragged right part D[k:n]).
    """
    index = _check_uint("leaf_index", index)
    size = _check_uint("tree_size", size)
    if index >= size:
        raise MalformedProofError("leaf_index", "must be < tree_size", (index, size))
    path: Plan = []
    start, m, n = 0, index, size
    while n > 1:
        k = largest_power_of_two_below(n)
        if m < k:
            path.append(tuple(range_nodes(start + k, start + n)))
            n = k
        else:
            level = k.bit_length() - 1
            path.append(((level, start >> level),))
            start += k
            m -= k
            n -= k
    path.reverse()
    return path


def consistency_plan(size1: int, size2: int) -> Plan:
    """Node plan of PROOF(size1, D[size2]) = SUBPROOF(size1, D[size2], true) (RFC 9162 §2.1.4.1).

    SUBPROOF(m, D[m], true)  = {}
    SUBPROOF(m, D[m], false) = {MTH(D[m])}
    SUBPROOF(m, D[n], b)     = SUBPROOF(m, D[0:k], b) : MTH(D[k:n])          if m <= k
                             = SUBPROOF(m - k, D[k:n], false) : MTH(D[0:k])  if m > k
    Requires 0 < size1 <= size2 (transparency-dev convention: a proof from the empty tree is meaningless).
    """
    size1 = _check_uint("size1", size1)
    size2 = _check_uint("size2", size2)
    if size1 > size2:
        raise MalformedProofError("size1", "must be <= size2", (size1, size2))
    if size1 == 0:
        raise MalformedProofError("size1", "must be > 0 (a consistency proof from the empty tree is meaningless)", 0)
    path: Plan = []
    start, m, n, b = 0, size1, size2, True
    while m != n:
        k = largest_power_of_two_below(n)
        if m <= k:
            path.append(tuple(range_nodes(start + k, start + n)))
            n = k
        else:
            level = k.bit_length() - 1
            path.append(((level, start >> level),))
            start += k
            m -= k
            n -= k
            b = False
    if not b:
        nodes = range_nodes(start, start + m)
        assert len(nodes) == 1, "SUBPROOF(m, D[m], false) is always a perfect subtree"
        path.append(tuple(nodes))
    path.reverse()
    return path


def root_plan(size: int) -> tuple[NodeID, ...]:
    """The perfect subtrees whose fold is MTH(D[0:size]) (empty for size 0)."""
    return tuple(range_nodes(0, _check_uint("tree_size", size)))


def materialize(plan: Plan, get: Callable[[list[NodeID]], Sequence[bytes]]) -> list[bytes]:
    """Hashes of a proof plan, fetching every needed node with a single ``get`` call."""
    wanted = sorted({node for element in plan for node in element})
    found = dict(zip(wanted, get(wanted), strict=False))
    return [found[element[0]] if len(element) == 1 else fold([found[x] for x in element]) for element in plan]


# ---------------------------------------------------------------------------------------------------
# Verification (RFC 9162 §2.1.3.2 and §2.1.4.2)
# ---------------------------------------------------------------------------------------------------


def root_from_inclusion_proof(leaf_index: int, tree_size: int, leaf_hash: bytes, proof: Sequence[bytes]) -> bytes:
    """Root hash implied by an inclusion proof (RFC 9162 §2.1.3.2 steps 1-4).

    Raises :class:`MalformedProofError` if ``leaf_index >= tree_size``, a hash is not 32 bytes, or the proof
    does not have exactly :func:`inclusion_proof_length` hashes.
    """
    fn = _check_uint("leaf_index", leaf_index)
    size = _check_uint("tree_size", tree_size)
    if fn >= size:  # step 1
        raise MalformedProofError("leaf_index", "must be < tree_size", (fn, size))
    r = check_hash("leaf_hash", leaf_hash)
    path = _check_proof(proof)
    want = inclusion_proof_length(fn, size)
    if len(path) != want:
        raise MalformedProofError(
            "proof", f"must have exactly {want} hashes for leaf_index={fn}, tree_size={size}", len(path)
        )
    sn = size - 1  # step 2; step 3: r = leaf hash
    sha = TREE_HASH
    for p in path:  # step 4
        if sn == 0:  # 4a (unreachable after the length check; kept so the code reads as the RFC)
            raise MalformedProofError("proof", "is longer than the path to the root", len(path))
        if fn & 1 or fn == sn:  # 4b
            r = sha(NODE_PREFIX + p + r).digest()
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = sha(NODE_PREFIX + r + p).digest()
        fn >>= 1  # 4c
        sn >>= 1
    if sn != 0:  # step 5, first half (unreachable after the length check)
        raise MalformedProofError("proof", "is shorter than the path to the root", len(path))
    return r


def verify_inclusion(leaf_index: int, tree_size: int, leaf_hash: bytes, proof: Sequence[bytes], root: bytes) -> None:
    """Check that ``leaf_hash`` is leaf ``leaf_index`` of the tree of ``tree_size`` with hash ``root``.

    Returns None on success; raises :class:`~audit.protocol.ledger.errors.ProofError` otherwise (RFC 9162 §2.1.3.2).
    ``leaf_hash`` is the RFC 6962 leaf hash ``SHA-256(0x00 || leaf)`` (:func:`rfc6962.hash_leaf`).
    """
    root = check_hash("root", root)
    calculated = root_from_inclusion_proof(leaf_index, tree_size, leaf_hash, proof)
    if calculated != root:  # step 5, second half
        raise RootMismatchError("inclusion proof root", root, calculated)


def root_from_consistency_proof(size1: int, size2: int, proof: Sequence[bytes], root1: bytes) -> bytes:
    """Root of the tree of ``size2`` implied by a consistency proof from (``size1``, ``root1``).

    RFC 9162 §2.1.4.2. Raises :class:`MalformedProofError` for size1 > size2, size1 == 0, a hash that is not
    32 bytes, or a proof that does not have exactly :func:`consistency_proof_length` hashes; raises
    :class:`RootMismatchError` if the proof does not reproduce ``root1``.
    """
    first = _check_uint("size1", size1)
    second = _check_uint("size2", size2)
    root1 = check_hash("root1", root1)
    path = _check_proof(proof)
    if first > second:
        raise MalformedProofError("size1", "must be <= size2", (first, second))
    if first == 0:
        raise MalformedProofError("size1", "must be > 0 (a consistency proof from the empty tree is meaningless)", 0)
    if first == second:
        if path:
            raise MalformedProofError("proof", "must be empty when size1 == size2", len(path))
        return root1
    want = consistency_proof_length(first, second)
    if len(path) != want:  # also covers RFC step 1 (empty path)
        raise MalformedProofError(
            "proof", f"must have exactly {want} hashes for size1={first}, size2={second}", len(path)
        )
    if first & (first - 1) == 0:  # step 2: first is an exact power of 2
        path = [root1] + path
    fn, sn = first - 1, second - 1  # step 3
    while fn & 1:  # step 4
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]  # step 5
    sha = TREE_HASH
    for c in path[1:]:  # step 6
        if sn == 0:  # unreachable after the length check
            raise MalformedProofError("proof", "is longer than the path to the root", len(proof))
        if fn & 1 or fn == sn:
            fr = sha(NODE_PREFIX + c + fr).digest()
            sr = sha(NODE_PREFIX + c + sr).digest()
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = sha(NODE_PREFIX + sr + c).digest()
        fn >>= 1
        sn >>= 1
    if sn != 0:  # step 7 (unreachable after the length check)
        raise MalformedProofError("proof", "is shorter than the path to the root", len(proof))
    if fr != root1:  # step 7
        raise RootMismatchError("consistency proof first root", root1, fr)
    return sr


def verify_consistency(size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes) -> None:
    """Check that the tree (``size2``, ``root2``) is an append-only extension of (``size1``, ``root1``).

    RFC 9162 §2.1.4.2. Returns None on success; raises :class:`~audit.protocol.ledger.errors.ProofError` otherwise.
    Requires ``0 < size1 <= size2``; a tree that starts empty (the audit's C_ledger,0 = SHA-256(""))
    is checked by comparing the published first root with :data:`rfc6962.EMPTY_ROOT` instead.
    """
    check_hash("root1", root1)
    root2 = check_hash("root2", root2)
    calculated = root_from_consistency_proof(size1, size2, proof, root1)
    if calculated != root2:
        raise RootMismatchError("consistency proof second root", root2, calculated)


# ---------------------------------------------------------------------------------------------------
# Proof objects with a JSON-friendly encoding
# ---------------------------------------------------------------------------------------------------


def _b64(h: bytes) -> str:
    return base64.b64encode(h).decode("ascii")


def _unb64(field: str, s: object) -> bytes:
    if not isinstance(s, str):
        raise MalformedProofError(field, "must be a base64 string", type(s).__name__)
    try:
        raw = base64.b64decode(s, validate=True)
    except (ValueError, TypeError):
        raise MalformedProofError(field, "must be standard base64 (RFC 4648 §4, padded)", s) from None
    if _b64(raw) != s:
        raise MalformedProofError(field, "must be canonical base64", s)
    return raw


@dataclass(frozen=True)
class InclusionProof:
    """An inclusion proof of leaf ``leaf_index`` in the tree of ``tree_size`` leaves (RFC 9162 §2.1.3)."""

    leaf_index: int
    tree_size: int
    hashes: tuple[bytes, ...]

    def root(self, leaf_hash: bytes) -> bytes:
        return root_from_inclusion_proof(self.leaf_index, self.tree_size, leaf_hash, self.hashes)

    def verify(self, leaf_hash: bytes, root: bytes) -> None:
        verify_inclusion(self.leaf_index, self.tree_size, leaf_hash, self.hashes, root)

    def to_json_dict(self) -> dict[str, object]:
        """``{"leaf_index": int, "tree_size": int, "hashes": [base64, ...]}`` (standard padded base64)."""
        return {"leaf_index": self.leaf_index, "tree_size": self.tree_size, "hashes": [_b64(h) for h in self.hashes]}

    @classmethod
    def from_json_dict(cls, d: dict[str, object]) -> InclusionProof:
        if not isinstance(d, dict) or set(d) != {"leaf_index", "tree_size", "hashes"}:
            raise MalformedProofError("inclusion_proof", "must have exactly the keys leaf_index, tree_size, hashes", d)
        hs = d["hashes"]
        if not isinstance(hs, list):
            raise MalformedProofError("hashes", "must be a list", type(hs).__name__)
        hashes = tuple(check_hash(f"hashes[{i}]", _unb64(f"hashes[{i}]", h)) for i, h in enumerate(hs))
        return cls(_check_uint("leaf_index", d["leaf_index"]), _check_uint("tree_size", d["tree_size"]), hashes)


@dataclass(frozen=True)
class ConsistencyProof:
    """A consistency proof between tree sizes ``size1 <= size2`` (RFC 9162 §2.1.4)."""

    size1: int
    size2: int
    hashes: tuple[bytes, ...]

    def root2(self, root1: bytes) -> bytes:
        return root_from_consistency_proof(self.size1, self.size2, self.hashes, root1)

    def verify(self, root1: bytes, root2: bytes) -> None:
        verify_consistency(self.size1, self.size2, self.hashes, root1, root2)

    def to_json_dict(self) -> dict[str, object]:
        """``{"size1": int, "size2": int, "hashes": [base64, ...]}`` (standard padded base64)."""
        return {"size1": self.size1, "size2": self.size2, "hashes": [_b64(h) for h in self.hashes]}

    @classmethod
    def from_json_dict(cls, d: dict[str, object]) -> ConsistencyProof:
        if not isinstance(d, dict) or set(d) != {"size1", "size2", "hashes"}:
            raise MalformedProofError("consistency_proof", "must have exactly the keys size1, size2, hashes", d)
        hs = d["hashes"]
        if not isinstance(hs, list):
            raise MalformedProofError("hashes", "must be a list", type(hs).__name__)
        hashes = tuple(check_hash(f"hashes[{i}]", _unb64(f"hashes[{i}]", h)) for i, h in enumerate(hs))
        return cls(_check_uint("size1", d["size1"]), _check_uint("size2", d["size2"]), hashes)


__all__ = [
    "HASH_SIZE",
    "ConsistencyProof",
    "InclusionProof",
    "consistency_plan",
    "consistency_proof_length",
    "inclusion_plan",
    "inclusion_proof_length",
    "materialize",
    "root_from_consistency_proof",
    "root_from_inclusion_proof",
    "root_plan",
    "verify_consistency",
    "verify_inclusion",
]
