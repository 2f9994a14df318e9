"""The provider's keys along a log (spec/protocol.md §3.3): a key rotation is a leaf, signed by the key it retires.

Genesis names the first note key. ``{"type": "key", "key", "sig"}`` at position p names the next one (``key``: its
note verifier key, ``<name>+<hash>+<base64>``) with ``sig`` = the outgoing key's Ed25519 signature of
``"dprag/provider-key/v4\\n" || canonical({"chain", "old", "new"})`` (both as verifier keys). From then on:

- the key **in effect at size s** is the last one whose leaf lies below s (genesis's key for every s before the
  first rotation leaf is covered);
- every checkpoint of size s is signed by the key in effect at s; the first checkpoint covering a rotation leaf
  (size p + 1) is signed by both the incoming and the outgoing key, so a witness or an auditor holding only the old
  key follows the rotation through a note it can verify;
- a receipt or refusal of size s is valid under the key in effect at s or any later key (a request recorded before
  the rotation may be answered after it); under an earlier key it is invalid — a retired key signing past its
  rotation — and kept as evidence, never accepted;
- a key is never reused. A stolen current key has no recovery, as for a Certificate Transparency log (the thief can
  rotate to a key of its own); spec/threat-model.md says so.

``KeyChain.apply`` is the one rule: the provider runs it before appending a rotation leaf, the verifier on each one
it reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dprag.errors import DpragError

from .encoding import EncodingError, encode, excerpt, hexbytes
from .ledger.checkpoint import NoteVerifier, Signer

_T = TypeVar("_T")

KEY_DOMAIN = b"dprag/provider-key/v4\n"
KEY_FIELDS = {"type", "key", "sig"}


class KeyLeafError(DpragError):
    """A rotation leaf that breaks the rule (``field``, ``rule``)."""

    def __init__(self, field: str, rule: str):
        super().__init__(f"{field}: {rule}")
        self.field, self.rule = field, rule


def key_message(chain: str, old: str, new: str) -> bytes:
    return KEY_DOMAIN + encode({"chain": chain, "old": old, "new": new})


def key_leaf(old: Signer, chain: str, new: str) -> dict[str, Any]:
    """The rotation leaf to ``new`` (a verifier key), signed by the outgoing ``old``."""
    return {"type": "key", "key": new, "sig": old.sign(key_message(chain, old.vkey(), new)).hex()}


@dataclass
class KeyChain:
    """The provider's keys of a log in order: (position of the leaf that introduced it, verifier); genesis's at 0."""

    chain: str
    eras: list[tuple[int, NoteVerifier]] = field(default_factory=list)

    @classmethod
    def from_genesis(cls, chain: str, vkey: str) -> KeyChain:
        return cls(chain, [(0, NoteVerifier.from_vkey(vkey))])

    @property
    def current(self) -> NoteVerifier:
        return self.eras[-1][1]

    def index_at(self, size: int) -> int:
        """The era of the key in effect at ``size``: the last whose leaf lies below it."""
        j = 0
        for k, (pos, _) in enumerate(self.eras):
            if k and pos < size:
                j = k
        return j

    def at(self, size: int) -> NoteVerifier:
        return self.eras[self.index_at(size)][1]

    def valid_for(self, size: int) -> list[NoteVerifier]:
        """The keys a receipt or refusal of ``size`` may be signed by: the one in effect there and every later one."""
        return [v for _, v in self.eras[self.index_at(size) :]]

    def retired_for(self, size: int) -> list[NoteVerifier]:
        """The keys that were retired before ``size``: a signature by one of them there is invalid (evidence)."""
        return [v for _, v in self.eras[: self.index_at(size)]]

    def rotations(self) -> list[tuple[int, NoteVerifier, NoteVerifier]]:
        """(position of the rotation leaf, outgoing key, incoming key) for each rotation."""
        return [(self.eras[k][0], self.eras[k - 1][1], self.eras[k][1]) for k in range(1, len(self.eras))]

    def __getstate__(self) -> dict[str, Any]:  # pickled to the verifier's workers: keys travel as vkeys
        return {"chain": self.chain, "eras": [(p, v.vkey()) for p, v in self.eras]}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.chain = state["chain"]
        self.eras = [(p, NoteVerifier.from_vkey(k)) for p, k in state["eras"]]

    def retired_at(self, key: NoteVerifier) -> int | None:
        """The position of the leaf that retired ``key`` (None: current, or not a key of this log)."""
        for k, (_, v) in enumerate(self.eras[:-1]):
            if v == key:
                return self.eras[k + 1][0]
        return None

    def verifying(self, size: Any, check: Callable[[NoteVerifier], _T], what: str) -> _T:
        """``check(key)`` under the first key valid at ``size`` that passes it; if none does but a retired key does,
        EncodingError saying so (a retired key signing past its rotation: invalid, kept as evidence); else the
        error of the key in effect."""
        size = size if isinstance(size, int) and not isinstance(size, bool) else 0
        first: EncodingError | None = None
        for key in self.valid_for(size):
            try:
                return check(key)
            except EncodingError as e:
                first = first or e
        for key in self.retired_for(size):
            try:
                check(key)
            except EncodingError:
                continue
            raise EncodingError(
                f"{what}: signed at size {size} by the provider key retired at leaf {self.retired_at(key)} "
                "(a retired key signing past its rotation: invalid, kept as evidence)"
            )
        raise first or EncodingError(f"{what}: no provider key of this log")

    def apply(self, pos: int, rec: Any) -> None:
        """Apply the rotation leaf ``rec`` at ``pos``, or raise ``KeyLeafError`` (the chain is unchanged then)."""
        if not isinstance(rec, dict) or rec.get("type") != "key" or set(rec) != KEY_FIELDS:
            raise KeyLeafError("leaf", f"a key rotation leaf has exactly the fields {sorted(KEY_FIELDS)}")
        if not isinstance(rec["key"], str):
            raise KeyLeafError("key", "must be a note verifier key")
        try:
            new = NoteVerifier.from_vkey(rec["key"])
        except Exception:  # noqa: BLE001 - the checkpoint module's typed errors: not a key
            raise KeyLeafError("key", "must be a note verifier key <name>+<hash>+<base64>") from None
        if rec["key"] != new.vkey():
            raise KeyLeafError("key", "must be the key's canonical verifier key")
        if any(v.vkey() == new.vkey() or v.public_key == new.public_key for _, v in self.eras):
            raise KeyLeafError("key", "was a key of this log before (a key is never reused)")
        old = self.current
        try:
            sig = hexbytes(rec["sig"], "sig", 64)
            ok = old.verify(key_message(self.chain, old.vkey(), new.vkey()), sig)
        except EncodingError:
            ok = False
        if not ok:
            raise KeyLeafError("sig", "is not the outgoing key's signature of the rotation (the old key names the new)")
        self.eras.append((pos, new))


def rotation_proof(chain: str, pos: int, leaf: bytes, checkpoint: bytes, inclusion: list[bytes]) -> dict[str, Any]:
    """What a party holding only the outgoing key needs to follow a rotation (``follow``): the rotation leaf at
    ``pos``, the dual-signed checkpoint of size ``pos + 1`` and the leaf's RFC 6962 inclusion proof in it."""
    return {
        "chain": chain,
        "pos": int(pos),
        "leaf": bytes(leaf).hex(),
        "checkpoint": bytes(checkpoint).decode("utf-8"),
        "inclusion": [bytes(h).hex() for h in inclusion],
    }


def follow(old: NoteVerifier, origin: str, proof: Any) -> tuple[int, NoteVerifier]:
    """Follow one rotation from ``old`` (a key this party trusts) with ``proof`` (``rotation_proof``): the
    checkpoint opens under ``old`` and under the incoming key, the leaf is included at its position under it, and
    the leaf is ``old``'s signed rotation to the incoming key. Returns (the leaf's position, the incoming key);
    EncodingError naming what does not hold."""
    from .ledger.checkpoint import open_checkpoint
    from .ledger.proof import verify_inclusion
    from .ledger.rfc6962 import hash_leaf

    try:
        if not isinstance(proof, dict) or set(proof) != {"chain", "pos", "leaf", "checkpoint", "inclusion"}:
            raise EncodingError("rotation proof: must hold exactly chain, pos, leaf, checkpoint, inclusion")
        if origin != "dprag/" + str(proof["chain"]):
            raise EncodingError(f"rotation proof: names chain {excerpt(proof['chain'])}, not the log {excerpt(origin)}")
        pos, note = proof["pos"], proof["checkpoint"].encode("utf-8")
        leaf = bytes.fromhex(proof["leaf"])
        cp, _ = open_checkpoint(note, origin, old)
        if not (isinstance(pos, int) and 0 < pos < cp.size):
            raise EncodingError("rotation proof: the checkpoint does not cover the leaf's position")
        verify_inclusion(pos, cp.size, hash_leaf(leaf), [bytes.fromhex(h) for h in proof["inclusion"]], cp.root)
        chain = KeyChain(proof["chain"], [(0, old)])
        chain.apply(pos, json.loads(leaf))
        new = chain.current
        open_checkpoint(note, origin, new)  # the first covering checkpoint is signed by both keys
        return pos, new
    except EncodingError:
        raise
    except (DpragError, ValueError, TypeError, AttributeError, UnicodeError) as e:
        raise EncodingError(f"rotation proof: {e}") from None


def witness_follow(witness: Any, proof: Any, consistency: list[bytes] | tuple[bytes, ...] = ()) -> NoteVerifier:
    """A witness follows a rotation only through its proof (spec/protocol.md §3.3): ``follow`` from the key it follows
    (the leaf's inclusion under the dual-signed checkpoint, the outgoing key's signature naming the incoming key),
    then ``Witness.rotate`` (that checkpoint extends what it cosigned). SignatureError otherwise."""
    from .ledger.errors import SignatureError

    try:
        _, new = follow(witness.log, witness.origin, proof)
    except EncodingError as e:
        raise SignatureError(f"the rotation does not follow from the key this witness follows: {e}") from None
    witness.rotate(proof["checkpoint"].encode("utf-8"), new, consistency)
    return new
