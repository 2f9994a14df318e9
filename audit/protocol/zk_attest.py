"""Groth16 attestation of the retrieval channel for a small zk tenant (spec/protocol.md §8.8, spec/zk.md).

For a tenant the policy lists in ``retrieval.zk_tenants``, the provider proves, per query, the noise-then-select
statement of ``dprag.zk.circuits.noise_then_select`` over the tenant's committed index: the released ids are the
top-K of ``clip(E·Q >> shift) + z``. Its public inputs are

    Z_idx  = index_commitment(E, b)        (genesis) Poseidon(TAG_INDEX, Merkle root of the quantised rows E, N, b)
    Z_q    = q_commitment(salt_q, Q)       Q: the request's opened query embedding
    Z_z    = noise_commitment(z)           z: the committed-seed noise of the request (the auditor recomputes it)
    Z_top  = topk_commitment(salt_k, ids)  ids: the opened citations

so an auditor holding only the seed, the openings and the proofs — not the index — checks that the citations
were selected from noisy scores of the committed index. The protocol's integer scores are ``clip(E·Q, lo, hi) >>
shift``; the circuit's are ``clip(E·Q >> shift, lo >> shift, hi >> shift)``, equal when lo and hi are multiples of
2^shift (``Policy.validate`` requires it for zk tenants).

Z_idx is hiding (protocol v3): b is the tenant's secret blinding scalar, a private input of the circuit
(``blind_idx``, reduced mod r) that the provider keeps and the auditor receives in its confidential files, so a
reader of the public genesis record cannot test a guessed index against Z_idx. The circuit changed with it:
verification keys from an earlier setup do not verify these proofs (a new ``setup_for`` is needed).

Trust: a proof attests against the provider only under a verification key the provider did not make — the
auditor runs the setup (``setup_for``, DEVELOPMENT ONLY: whoever runs it knows the toxic waste; a multi-party
ceremony ``.zkey`` replaces it) and hands the provider the proving key. Proofs checked under a provider-made
key leave the verdict's attestation at replay.
"""

from __future__ import annotations

import secrets
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from dprag.errors import InvalidParameterError
from dprag.zk.circuits import noise_then_select as nts
from dprag.zk.field import R
from dprag.zk.formats import proof_from_json, proof_to_json

if TYPE_CHECKING:
    from dprag.zk.keys import Proof, ProvingKey, VerifyingKey

    from .policy import Policy

VALUE_BITS = 12  # quantised embeddings at scale 2^10 lie in [-1024, 1024]
MAX_ZK_DOCS = 64


def circuit_params(policy: Policy, n_docs: int, dim: int, noise_bound: int) -> dict[str, int]:
    r = policy.retrieval
    if n_docs > MAX_ZK_DOCS:
        raise InvalidParameterError(
            "retrieval.zk_tenants",
            f"a zk tenant may hold at most {MAX_ZK_DOCS} documents (every score is proven)",
            n_docs,
        )
    lo, hi = r.score_clip
    return {
        "n": int(n_docs),
        "k": int(r.K),
        "d": int(dim),
        "value_bits": VALUE_BITS,
        "frac_bits": int(r.score_shift),
        "clip_lo": lo >> r.score_shift,
        "clip_hi": hi >> r.score_shift,
        "noise_bits": int(noise_bound).bit_length() + 2,
    }


@lru_cache(maxsize=8)
def _circuit(key: tuple[tuple[str, int], ...]) -> nts.Circuit:
    return nts.build(**dict(key))


def circuit(policy: Policy, n_docs: int, dim: int, noise_bound: int) -> nts.Circuit:
    return _circuit(tuple(sorted(circuit_params(policy, n_docs, dim, noise_bound).items())))


def index_commitment(q_rows: np.ndarray, blinding: int) -> str:
    """Z_idx of a tenant's quantised index under its blinding scalar (decimal string of a BN254 scalar; the
    blinding is reduced mod r, as in the circuit)."""
    return str(nts.index_commitment([[int(v) for v in row] for row in np.asarray(q_rows)], int(blinding), VALUE_BITS))


def setup_for(policy: Policy, n_docs: int, dim: int, noise_bound: int) -> tuple[ProvingKey, VerifyingKey]:
    """DEVELOPMENT-ONLY setup (the auditor's): (proving key for the provider, verification key to keep)."""
    from dprag.zk.setup import setup

    pk = setup(circuit(policy, n_docs, dim, noise_bound).r1cs)
    return pk, pk.verifying_key()


def prove(
    pk: ProvingKey,
    policy: Policy,
    E: np.ndarray,
    Q: np.ndarray,
    z: np.ndarray,
    top: list[int],
    noise_bound: int,
    *,
    blinding: int,
) -> dict[str, Any]:
    """One query's proof record: fresh salts (CSPRNG) and the snarkjs proof.json object. ``blinding`` is the
    tenant's index blinding scalar, the one its genesis Z_idx = ``index_commitment(E, blinding)`` was made with (it
    is not part of the record: the auditor has it from its confidential files)."""
    circ = circuit(policy, E.shape[0], E.shape[1], noise_bound)
    salt_q, salt_k = secrets.randbelow(R - 1) + 1, secrets.randbelow(R - 1) + 1
    Er = [[int(v) for v in row] for row in E]
    w = circ.witness(Er, [int(v) for v in Q], [int(v) for v in z], salt_q, salt_k, blinding=int(blinding))
    if nts.select(Er, [int(v) for v in Q], [int(v) for v in z], circ.params) != list(top):
        raise InvalidParameterError("top", "is not the circuit's top-K of the noisy scores")
    return {"salt_q": str(salt_q), "salt_k": str(salt_k), "proof": proof_to_json(nts.prove(pk, w))}


def public_inputs(
    z_idx: int, record: dict[str, Any], Q: np.ndarray, z: np.ndarray, top: list[int], noise_bits: int
) -> list[int]:
    salt_q, salt_k = int(record["salt_q"]), int(record["salt_k"])
    return [
        z_idx,
        nts.q_commitment(salt_q, [int(v) for v in Q], VALUE_BITS),
        nts.noise_commitment([int(v) for v in z], noise_bits),
        nts.topk_commitment(salt_k, list(top)),
    ]


def verify_many(vk: VerifyingKey, statements: list[tuple[Proof, list[int]]]) -> list[bool]:
    """Each statement's verdict: all at once in a randomized batch (``zk.verify.verify_batch``, a false pass with
    probability ≤ 2^-128), and one by one only if the batch fails, to name which."""
    try:
        if nts.verify_batch(vk, statements):
            return [True] * len(statements)
    except (InvalidParameterError, ValueError, TypeError):
        pass  # one statement's defect: found one by one below
    return [_verifies(vk, proof, public) for proof, public in statements]


def _verifies(vk: VerifyingKey, proof: Proof, public: list[int]) -> bool:
    try:
        return bool(nts.verify(vk, proof, public))
    except (InvalidParameterError, ValueError, TypeError):
        return False


def statement(
    policy: Policy,
    z_idx: int,
    record: dict[str, Any],
    Q: np.ndarray,
    z: np.ndarray,
    top: list[int],
    n_docs: int,
    dim: int,
    noise_bound: int,
) -> tuple[Proof, list[int]] | None:
    """The proof a record carries and the public inputs recomputed for it (what ``check`` verifies, and what a
    batch verifies at once: ``zk.verify.verify_batch``), or None if the record is malformed."""
    p = circuit_params(policy, n_docs, dim, noise_bound)
    if not isinstance(record, dict) or set(record) != {"pos", "salt_q", "salt_k", "proof"}:
        return None
    for s in ("salt_q", "salt_k"):
        v = record[s]
        if not isinstance(v, str) or not v.isdigit() or len(v) > 80 or not 0 < int(v) < R:
            return None
    raw = record["proof"]
    # every field bound (spec/protocol.md §8.8): snarkjs's proof.json and nothing else, on BN254 ("bn128")
    if (
        not isinstance(raw, dict)
        or set(raw) != PROOF_FIELDS
        or raw.get("protocol") != "groth16"
        or raw.get("curve") != "bn128"
    ):
        return None
    return proof_from_json(raw), list(public_inputs(z_idx, record, Q, z, top, p["noise_bits"]))


#: the fields of a snarkjs Groth16 proof.json (what ``prove`` writes): anything else is refused
PROOF_FIELDS = frozenset({"pi_a", "pi_b", "pi_c", "protocol", "curve"})
