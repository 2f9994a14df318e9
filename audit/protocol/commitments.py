"""Phase A commitments (spec/protocol.md §3): C_emb, C_idx, C_seed, C_policy and the genesis record.

Also the exact integer scoring of §4, shared by the provider (serving) and the verifier (replay), so both
compute bit-identical scores: quantised int16 embeddings, int64 dot products, clip, shift.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

from .encoding import encode, hexbytes
from .ledger.rfc6962 import hash_leaf, root_from_leaves

SEED_DOMAIN = b"dprag/seed/v1"
SEED_BYTES = 32
DEFAULT_EMBEDDING_SCALE = 1 << 10


def new_seed() -> bytes:
    """s_W: 32 bytes from the OS CSPRNG (λ = 256, 002 §5.3)."""
    return os.urandom(SEED_BYTES)


def seed_commitment(seed: bytes) -> str:
    """C_seed = H("dprag/seed/v1" || s_W), hex."""
    if not isinstance(seed, (bytes, bytearray)) or len(seed) != SEED_BYTES:
        raise InvalidParameterError("seed", f"must be {SEED_BYTES} bytes")
    return hashlib.sha256(SEED_DOMAIN + bytes(seed)).hexdigest()


def quantise_embeddings(emb: np.ndarray, scale: int = DEFAULT_EMBEDDING_SCALE) -> np.ndarray:
    """round_half_even(scale · e / ||e||) clipped to int16, row-wise (§3)."""
    e = np.asarray(emb, dtype=np.float64)
    if e.ndim == 1:
        e = e[None, :]
    if e.ndim != 2 or e.shape[1] == 0:
        raise InvalidParameterError("embeddings", "must be a (n, d) array with d >= 1")
    if not np.all(np.isfinite(e)):
        raise InvalidParameterError("embeddings", "must be finite")
    norms = np.linalg.norm(e, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    q: npt.NDArray[np.float64] = np.rint(scale * e / norms)  # numpy rounds half to even
    return np.clip(q, -32768, 32767).astype(np.int16)


def embedding_bytes(q: np.ndarray) -> bytes:
    """int16 little-endian, row-major bytes of quantised embeddings."""
    return np.ascontiguousarray(np.asarray(q, dtype="<i2")).tobytes()


def index_root(q_docs: np.ndarray) -> bytes:
    """RFC 6962 root over the per-document int16 embedding bytes of one tenant's index."""
    q = np.asarray(q_docs, dtype="<i2")
    if q.ndim != 2:
        raise InvalidParameterError("index", "must be a (n_docs, d) int16 array")
    return root_from_leaves([q[i].tobytes() for i in range(q.shape[0])])


INDEX_DOMAIN = b"dprag/v3/index\x00"


def index_commitment(q_docs: np.ndarray, salt: bytes) -> str:
    """C_idx of one tenant (hiding, §3): H("dprag/v3/index\\0" || salt || u32be(n_docs) || root), hex. The salt is
    the auditor's (auditor/docs/<tenant>.json): an observer cannot test a guessed index against it."""
    if len(salt) != SALT_BYTES:
        raise InvalidParameterError("index salt", f"must be {SALT_BYTES} bytes")
    q = np.asarray(q_docs, dtype="<i2")
    root = index_root(q)
    return hashlib.sha256(INDEX_DOMAIN + bytes(salt) + int(q.shape[0]).to_bytes(4, "big") + root).hexdigest()


def index_leaf_hash(q_doc_row: np.ndarray) -> bytes:
    return hash_leaf(np.asarray(q_doc_row, dtype="<i2").tobytes())


def integer_scores(q_docs: np.ndarray, q_query: np.ndarray, clip: tuple[int, int], shift: int) -> np.ndarray:
    """s_i = clip(Σ_j E_i[j]·Q[j], lo, hi) >> shift, exactly, as int64 (§4)."""
    lo, hi = clip
    dots: npt.NDArray[np.int64] = np.asarray(q_docs, dtype=np.int64) @ np.asarray(q_query, dtype=np.int64).reshape(-1)
    return np.right_shift(np.clip(dots, lo, hi), shift)


@dataclass(frozen=True)
class EmbedderDescriptor:
    """What C_emb binds (R1): model identity and weights digest, quantisation, prompt template, schema."""

    model: str
    weights_sha256: str
    dimension: int
    prompt_template: str
    tokenizer_sha256: str
    schema: Mapping[str, int]
    embedding_scale: int = DEFAULT_EMBEDDING_SCALE
    #: the ``dprag.embedders`` entry point that re-runs the model (what an auditor with ``--corpus`` loads to
    #: re-embed it); None for a provider's own embedder that is not installed as one
    entry_point: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "entry_point": self.entry_point,
            "weights_sha256": self.weights_sha256,
            "dimension": self.dimension,
            "embedding_scale": self.embedding_scale,
            "prompt_template": self.prompt_template,
            "tokenizer_sha256": self.tokenizer_sha256,
            "schema": dict(sorted(self.schema.items())),
        }

    def commitment(self, salt: bytes) -> str:
        """C_emb of this descriptor under ``salt`` (``embedder_commitment``)."""
        return embedder_commitment(salt, self.to_dict())


EMBEDDER_DOMAIN = b"dprag/v4/embedder\x00"


def embedder_commitment(salt: bytes, descriptor: Mapping[str, Any]) -> str:
    """C_emb = H("dprag/v4/embedder\\0" || salt || canonical(descriptor)), hex: hiding like the other public
    commitments, so an observer cannot confirm a guessed embedder (§3). The salt is the auditor's
    (auditor/embedder.json)."""
    if len(salt) != SALT_BYTES:
        raise InvalidParameterError("embedder salt", f"must be {SALT_BYTES} bytes")
    return hashlib.sha256(EMBEDDER_DOMAIN + bytes(salt) + encode(dict(descriptor))).hexdigest()


def embedder_opening(descriptor: EmbedderDescriptor, salt: bytes) -> dict[str, Any]:
    """What opens C_emb (the provider's config/embedder.json, the auditor's auditor/embedder.json)."""
    return {"descriptor": descriptor.to_dict(), "salt": bytes(salt).hex()}


def descriptor_of(opening: Any) -> dict[str, Any] | None:
    """The descriptor inside an embedder opening, or None if it is not one (the verifier reports it)."""
    if isinstance(opening, dict) and isinstance(opening.get("descriptor"), dict):
        return cast("dict[str, Any]", opening["descriptor"])
    return None


def files_sha256(paths: Iterable[tuple[str, bytes]]) -> str:
    """SHA-256 over files sorted by path: u32be(len(path)) || path || u64be(len(data)) || data (§3)."""
    h = hashlib.sha256()
    for path, data in sorted(paths):
        p = path.encode()
        h.update(len(p).to_bytes(4, "big") + p + len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


PROTOCOL_VERSION = 4
#: the last version before this one: refused with exit 2 naming it and the release that reads it (§8.11)
PREVIOUS_VERSION = 3
PREVIOUS_RELEASE = "dprag 0.3.0"
POLICY_DOMAIN = b"dprag/v2/policy\x00"
DOC_DOMAIN = b"dprag/v2/doc\x00"
SALT_BYTES = 16


def new_salt() -> bytes:
    return os.urandom(SALT_BYTES)


def policy_commitment(salt: bytes, policy_bytes: bytes) -> str:
    """C_policy = H("dprag/v2/policy\\0" || salt || canonical(policy)), hex: hiding (§3)."""
    if len(salt) != SALT_BYTES:
        raise InvalidParameterError("policy salt", f"must be {SALT_BYTES} bytes")
    return hashlib.sha256(POLICY_DOMAIN + bytes(salt) + bytes(policy_bytes)).hexdigest()


def text_hash(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def document_leaf(salt: bytes, doc_id: str, text_sha256: bytes) -> bytes:
    """Leaf i of C_docs: "dprag/v2/doc\\0" || salt_i || u32be(len(id)) || UTF-8(id) || H(UTF-8(text)) (§3)."""
    if len(salt) != SALT_BYTES:
        raise InvalidParameterError("document salt", f"must be {SALT_BYTES} bytes")
    i = doc_id.encode("utf-8")
    return DOC_DOMAIN + bytes(salt) + len(i).to_bytes(4, "big") + i + bytes(text_sha256)


def documents_commitment(salts: list[bytes], ids: list[str], text_hashes: list[bytes]) -> str:
    """C_docs of one tenant: RFC 6962 root over the salted document leaves, hex (hiding; binds id <-> index
    position <-> text)."""
    if not (len(salts) == len(ids) == len(text_hashes)) or not ids:
        raise InvalidParameterError("documents", "salts, ids and text hashes must be non-empty and of one length")
    return root_from_leaves([document_leaf(s, i, t) for s, i, t in zip(salts, ids, text_hashes, strict=False)]).hex()


def genesis_record(
    window: str,
    provider_vkey: str,
    c_emb: str,
    c_policy: str,
    c_seed: str,
    tenants: Mapping[str, tuple[int, str, str]],
    accounts: Mapping[str, tuple[str, str]],
    zk: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Ledger leaf 0 (§3). ``tenants``: tenant -> (n_docs, C_idx, C_docs); ``accounts``: the account registry,
    account -> (tenant, account key hex); ``zk``: tenant -> Z_idx (decimal) for the policy's zk tenants. The log's
    later changes are leaves of their own (§3.2-§3.5)."""
    for f, v in (("C_emb", c_emb), ("C_policy", c_policy), ("C_seed", c_seed)):
        hexbytes(v, f, 32)
    return {
        "type": "genesis",
        "version": PROTOCOL_VERSION,
        "window": window,
        "provider_key": provider_vkey,
        "C_emb": c_emb,
        "C_policy": c_policy,
        "C_seed": c_seed,
        "tenants": [
            {"tenant": t, "n_docs": n, "C_idx": c, "C_docs": cd, **({"Z_idx": zk[t]} if zk and t in zk else {})}
            for t, (n, c, cd) in sorted(tenants.items())
        ],
        "accounts": [{"account": a, "tenant": t, "key": k} for a, (t, k) in sorted(accounts.items())],
    }


def genesis_bytes(record: dict[str, Any]) -> bytes:
    return encode(record)


def one_text_one_budget(field: str, ids: list[str], texts: list[str]) -> None:
    """One text, one budget (spec/protocol.md §3): a tenant holds each text once, so a copy of a document under
    another id cannot get a filter of its own. Refused naming both ids."""
    first: dict[bytes, str] = {}
    for i, x in zip(ids, texts, strict=True):
        j = first.setdefault(text_hash(x), i)
        if j != i:
            raise InvalidParameterError(
                field,
                f"documents {j!r} and {i!r} have the same text (one text, one budget: a copy would be charged "
                "to a filter of its own)",
            )
