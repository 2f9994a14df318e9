"""The append-only Merkle ledger of the audit protocol (primitive G2, carrying the R2 query records).

RFC 6962 / RFC 9162 tree hashing with SHA-256, 0-based leaf indices, inclusion and consistency proofs
that any RFC-conformant verifier (e.g. transparency-dev/merkle ``proof.Verify*``) accepts, signed
checkpoints in the transparency-dev checkpoint format inside golang.org/x/mod/sumdb/note signed notes
(Ed25519), and durable storage in SQLite. Specification: spec/ledger.md.

Modules:
    rfc6962     leaf/node hashing, reference MTH, compact ranges, stored-hash addressing
    proof       proof generation plans and pure verification (RFC 9162 §2.1.3, §2.1.4)
    checkpoint  checkpoint body, signed notes, Ed25519 note keys (vkey/skey strings)
    store       MemoryLog and SqliteLog (WAL, group commit, crash-safe, multi-process)
    errors      typed errors (all are dprag.errors.DpragError)
"""

from .checkpoint import (
    Checkpoint,
    Note,
    NoteSignature,
    NoteSigner,
    NoteVerifier,
    Signer,
    open_checkpoint,
    open_note,
    sign_checkpoint,
    sign_note,
)
from .errors import (
    CheckpointError,
    KeyFormatError,
    LedgerCorruptError,
    LedgerError,
    LedgerRangeError,
    MalformedNoteError,
    MalformedProofError,
    ProofError,
    RootMismatchError,
    SignatureError,
)
from .proof import (
    ConsistencyProof,
    InclusionProof,
    root_from_consistency_proof,
    root_from_inclusion_proof,
    verify_consistency,
    verify_inclusion,
)
from .rfc6962 import EMPTY_ROOT, CompactRange, hash_children, hash_leaf, mth, root_from_leaves
from .store import MemoryLog, MerkleLog, SqliteLog

__all__ = [
    "EMPTY_ROOT",
    "root_from_leaves",
    "Checkpoint",
    "CheckpointError",
    "CompactRange",
    "ConsistencyProof",
    "InclusionProof",
    "KeyFormatError",
    "LedgerCorruptError",
    "LedgerError",
    "LedgerRangeError",
    "MalformedNoteError",
    "MalformedProofError",
    "MemoryLog",
    "MerkleLog",
    "Note",
    "NoteSignature",
    "NoteSigner",
    "Signer",
    "NoteVerifier",
    "ProofError",
    "RootMismatchError",
    "SignatureError",
    "SqliteLog",
    "hash_children",
    "hash_leaf",
    "mth",
    "open_checkpoint",
    "open_note",
    "root_from_consistency_proof",
    "root_from_inclusion_proof",
    "sign_checkpoint",
    "sign_note",
    "verify_consistency",
    "verify_inclusion",
]
