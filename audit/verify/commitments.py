"""§8.3 ``commitments`` (spec/protocol.md): leaf 0 is a version-2 genesis that ``public/genesis.json`` repeats; the
seed, the salted policy, the embedder, each tenant's index and documents (and, with ``--corpus``, their texts)
open the commitments of genesis; the account registry is well formed; with ``--key``, the genesis provider key
is the pinned one."""

from __future__ import annotations

import numpy as np

from dprag.accounting.errors import DpragError

from .. import commitments as cm
from ..encoding import EncodingError, decode, digest, hexbytes
from ..ledger import NoteVerifier
from ..policy import Policy
from .run import Run, guarded, is_hex, is_int
from .verdict import key_fingerprint


@guarded("commitments")
def check_8_3_commitments(run: Run, corpus: dict[str, list[str]] | None) -> None:
    """§8.3: sets ``run.genesis``, ``run.key``, ``run.seed``, ``run.policy`` (not yet checked: §8.4),
    ``run.tenants`` and ``run.accounts`` from what opens its commitment."""
    if not run.records:  # no ledger leaf at all: §8.1 / §8.2 say why
        return
    b = run.b
    g = run.records[0] if run.records else None
    if b.genesis_file is not None and run.b.leaves and b.genesis_file != b.leaves[0]:
        run.fail("commitments", "public/genesis.json differs from ledger leaf 0")
    gkeys = {"type", "version", "window", "provider_key", "C_emb", "C_policy", "C_seed", "tenants", "accounts"}
    if (
        not isinstance(g, dict)
        or g.get("type") != "genesis"
        or set(g) != gkeys
        or not all(is_hex(g[k], 32) for k in ("C_emb", "C_policy", "C_seed"))
        or not isinstance(g["tenants"], list)
        or not isinstance(g["accounts"], list)
        or not isinstance(g["window"], str)
        or not isinstance(g["provider_key"], str)
    ):
        run.fail("commitments", "ledger leaf 0 is not a well-formed version-2 genesis record")
        return
    run.genesis = g
    try:
        run.key = NoteVerifier.from_vkey(g["provider_key"])
    except (DpragError, TypeError, ValueError) as e:
        run.fail("commitments", f"genesis provider_key unusable ({e})")
    if b.vkey is not None and b.vkey != g["provider_key"]:
        run.fail("commitments", "public/provider.vkey differs from the genesis provider_key")
    # the seed
    try:
        run.seed = hexbytes(b.seed_hex, "auditor/seed.hex", cm.SEED_BYTES) if b.seed_hex is not None else None
        if run.seed is not None and cm.seed_commitment(run.seed) != g["C_seed"]:
            run.fail("commitments", "auditor/seed.hex does not open C_seed")
            run.seed = None
    except EncodingError as e:
        run.fail("commitments", str(e))
    # the policy (salted)
    if b.policy_bytes is not None:
        try:
            wrapped = decode(b.policy_bytes, what="auditor/policy.json")
            if not isinstance(wrapped, dict) or set(wrapped) != {"policy", "salt"}:
                raise EncodingError('auditor/policy.json: must be {"policy", "salt"}')
            salt = hexbytes(wrapped["salt"], "policy salt", cm.SALT_BYTES)
            pol = Policy.from_dict(wrapped["policy"])
            if cm.policy_commitment(salt, pol.to_bytes()) != g["C_policy"]:
                raise EncodingError("the policy does not open C_policy")
            if pol.window != g["window"]:
                raise EncodingError("the policy names another window than genesis")
            run.policy = pol
        except (EncodingError, DpragError) as e:
            run.fail("commitments", f"auditor/policy.json: {e}")
    # the embedder
    embedder = None
    if b.embedder_bytes is not None:
        try:
            embedder = decode(b.embedder_bytes, what="auditor/embedder.json")
            if not isinstance(embedder, dict) or digest(embedder) != g["C_emb"]:
                raise EncodingError("the embedder descriptor does not open C_emb")
        except EncodingError as e:
            run.fail("commitments", f"auditor/embedder.json: {e}")
            embedder = None
    dim = embedder.get("dimension") if isinstance(embedder, dict) else None
    # tenants: index (C_idx) and document ids / salts (C_docs, checked against a corpus when given)
    for t in g["tenants"]:
        try:
            if (
                not isinstance(t, dict)
                or set(t) - {"Z_idx"} != {"tenant", "n_docs", "C_idx", "C_docs"}
                or (
                    "Z_idx" in t
                    and not (isinstance(t["Z_idx"], str) and t["Z_idx"].isdigit() and len(t["Z_idx"]) <= 80)
                )
            ):
                raise EncodingError("malformed tenant entry in genesis")
            name, n_docs = t["tenant"], t["n_docs"]
            if not isinstance(name, str) or not is_int(n_docs, 1, 1 << 31):
                raise EncodingError("malformed tenant entry in genesis")
            data = b.index_files.get(name)
            if data is None:
                raise EncodingError(f"auditor/index/{name}.i16 is missing")
            if not is_int(dim, 1, 1 << 16) or len(data) != 2 * n_docs * dim:
                raise EncodingError(f"auditor/index/{name}.i16 has the wrong size")
            q = np.frombuffer(data, dtype="<i2").reshape(n_docs, dim)
            if cm.index_commitment(q) != t["C_idx"]:
                raise EncodingError(f"auditor/index/{name}.i16 does not open C_idx")
            docs = decode(b.docs_files.get(name, b"null"), what=f"auditor/docs/{name}.json")
            if (
                not isinstance(docs, dict)
                or set(docs) != {"ids", "salts", "text_sha256"}
                or any(not isinstance(docs[k], list) or len(docs[k]) != n_docs for k in docs)
                or not all(isinstance(x, str) for x in docs["ids"])
                or not all(is_hex(s, cm.SALT_BYTES) for s in docs["salts"])
                or not all(is_hex(h, 32) for h in docs["text_sha256"])
            ):
                raise EncodingError(f"auditor/docs/{name}.json: must hold n_docs ids, salts and text hashes")
            hashes = [bytes.fromhex(h) for h in docs["text_sha256"]]
            if cm.documents_commitment([bytes.fromhex(s) for s in docs["salts"]], docs["ids"], hashes) != t["C_docs"]:
                raise EncodingError(f"auditor/docs/{name}.json does not open C_docs")
            if corpus is not None and name in corpus:
                texts = corpus[name]
                if len(texts) != n_docs or any(cm.text_hash(x) != h for x, h in zip(texts, hashes, strict=False)):
                    raise EncodingError(f"the corpus given for tenant {name!r} is not the committed one (C_docs)")
                run.ok("corpus")
            run.tenants[name] = {
                "q": q,
                "qf": q.astype(np.float64),
                "n": n_docs,
                "dim": dim,
                "ids": docs["ids"],
                "Z_idx": int(t["Z_idx"]) if "Z_idx" in t else None,
            }
            run.ok("commitments")
        except EncodingError as e:
            run.fail("commitments", str(e))
    names = {t.get("tenant") for t in g["tenants"] if isinstance(t, dict) and isinstance(t.get("tenant"), str)}
    for a in g["accounts"]:
        if (
            not isinstance(a, dict)
            or set(a) != {"account", "tenant", "key"}
            or not isinstance(a["account"], str)
            or not isinstance(a["tenant"], str)
            or a["tenant"] not in names
            or not is_hex(a["key"], 32)
            or a["account"] in run.accounts
        ):
            run.fail("commitments", "malformed or duplicate account in the genesis registry")
            continue
        run.accounts[a["account"]] = a


@guarded("commitments")
def check_8_3_pinned_key(run: Run, pinned: str | None) -> None:
    """§8.3 with ``--key``: the genesis provider key is the one the auditor pinned."""
    if pinned is not None and run.genesis is not None and run.genesis["provider_key"] != pinned:
        run.fail(
            "commitments",
            "the provider key is not the pinned one (bundle key "
            f"{key_fingerprint(run.genesis['provider_key'])}, pinned {key_fingerprint(pinned)})",
        )
