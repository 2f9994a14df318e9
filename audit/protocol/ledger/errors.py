"""Typed errors of the Merkle ledger (audit primitive G2 / R2).

Hierarchy (every class is a :class:`dprag.errors.DpragError`, so the CLI maps it to exit code 2)::

    LedgerError
    ├── ProofError                 a proof did not verify (the verifier's FAIL signal)
    │   ├── MalformedProofError    structurally impossible input: index >= size, size1 > size2,
    │   │                          wrong proof length, a hash that is not 32 bytes   (+ InvalidParameterError)
    │   └── RootMismatchError      well-formed proof whose recomputed root differs from the claimed one
    ├── CheckpointError            a signed checkpoint / note could not be accepted
    │   ├── MalformedNoteError     bytes break the note or checkpoint grammar   (+ InvalidParameterError)
    │   ├── KeyFormatError         a signer/verifier key string is malformed    (+ InvalidParameterError)
    │   └── SignatureError         no valid signature by the expected key, or a known key's signature is bad
    ├── LedgerRangeError           a read or proof request outside the log     (+ InvalidParameterError)
    └── LedgerCorruptError         a stored log contradicts itself (detected on open or by verify_integrity)

Classes marked ``+ InvalidParameterError`` also carry ``field``, ``rule`` and ``value`` so a caller can say
exactly which input broke which rule. Raising any of them never changes the log.
"""

from __future__ import annotations

from dprag.errors import DpragError, InvalidParameterError


class LedgerError(DpragError):
    """Base class of every error raised by :mod:`audit.protocol.ledger`."""


class ProofError(LedgerError):
    """A Merkle inclusion or consistency proof does not verify."""


class MalformedProofError(ProofError, InvalidParameterError):
    """The proof or its parameters break a structural rule (checked before any hashing)."""

    def __init__(self, field: str, rule: str, value: object = None):
        InvalidParameterError.__init__(self, field, rule, value)


class RootMismatchError(ProofError):
    """The root recomputed from a well-formed proof differs from the expected root."""

    def __init__(self, what: str, expected: bytes, calculated: bytes):
        self.what = what
        self.expected = bytes(expected)
        self.calculated = bytes(calculated)
        super().__init__(f"{what}: calculated {self.calculated.hex()} does not match expected {self.expected.hex()}")


class CheckpointError(LedgerError):
    """A signed note or checkpoint could not be accepted."""


class MalformedNoteError(CheckpointError, InvalidParameterError):
    """The bytes are not a well-formed signed note / checkpoint body."""

    def __init__(self, field: str, rule: str, value: object = None):
        InvalidParameterError.__init__(self, field, rule, value)


class KeyFormatError(CheckpointError, InvalidParameterError):
    """A note signer or verifier key string is malformed or inconsistent."""

    def __init__(self, field: str, rule: str, value: object = None):
        InvalidParameterError.__init__(self, field, rule, value)


class SignatureError(CheckpointError):
    """No signature by the expected key, or a signature by a known key does not verify."""


class LedgerRangeError(LedgerError, InvalidParameterError):
    """A request names a leaf index or tree size outside the stored log."""

    def __init__(self, field: str, rule: str, value: object = None):
        InvalidParameterError.__init__(self, field, rule, value)


class LedgerCorruptError(LedgerError):
    """The stored log is internally inconsistent (e.g. a node hash that does not match its leaves)."""
