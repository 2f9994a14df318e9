"""§8.3 ``commitments`` (spec/protocol.md): leaf 0 is a version-2 genesis that ``public/genesis.json`` repeats; the
seed, the salted policy, the embedder, each tenant's index and documents (and, with ``--corpus``, their texts)
open the commitments of genesis; the account registry is well formed; with ``--key``, the genesis provider key
is the pinned one."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from dprag.errors import DpragError

from ..protocol import commitments as cm
from ..protocol.encoding import (
    IDENTIFIER_RULE,
    EncodingError,
    decode,
    decode_content,
    excerpt,
    hexbytes,
    is_identifier,
)
from ..protocol.ledger import NoteVerifier
from ..protocol.policy import Policy
from .run import EpochView, Run, guarded, is_hex, is_int
from .verdict import key_fingerprint


@guarded("commitments")
def check_8_3_commitments(run: Run, corpus: dict[str, list[str]] | None, reembedder: Any = None) -> None:
    """§8.3: sets ``run.genesis``, ``run.key``, ``run.seed``, ``run.policy`` (not yet checked: §8.4),
    ``run.tenants`` and ``run.accounts`` from what opens its commitment. With ``corpus`` and the committed
    embedder ``reembedder`` (``embedder_fidelity``), the index is re-embedded from the texts."""
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
        run.fail("commitments", "ledger leaf 0 is not a well-formed version-4 genesis record")
        return
    if g.get("version") != cm.PROTOCOL_VERSION:
        run.fail(
            "commitments",
            f"the bundle is protocol version {_version_text(g.get('version'))}: older versions are refused "
            f"(this verifier checks version {cm.PROTOCOL_VERSION})",
        )
        return
    if not is_identifier(g["window"]):
        run.fail("commitments", f"genesis window {excerpt(g['window'])} is not a name ({IDENTIFIER_RULE})")
    run.genesis = g
    try:
        run.key = NoteVerifier.from_vkey(g["provider_key"])
    except (DpragError, TypeError, ValueError) as e:
        run.fail("commitments", f"genesis provider_key unusable ({e})")
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
            opening = decode(b.embedder_bytes, what="auditor/embedder.json")
            if (
                not isinstance(opening, dict)
                or set(opening) != {"descriptor", "salt"}
                or not isinstance(opening["descriptor"], dict)
                or not is_hex(opening["salt"], cm.SALT_BYTES)
            ):
                raise EncodingError("must be {descriptor, salt} (the salted opening of C_emb)")
            embedder = opening["descriptor"]
            if cm.embedder_commitment(bytes.fromhex(opening["salt"]), embedder) != g["C_emb"]:
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
            if not is_identifier(name):
                raise EncodingError(f"genesis names tenant {excerpt(name)}, which is not a name ({IDENTIFIER_RULE})")
            data = b.index_files.get(name)
            if data is None:
                raise EncodingError(f"auditor/index/{name}.i16 is missing")
            # the whole index the bundle's cut holds: genesis's rows, then those of its documents leaves (§3.5)
            if not is_int(dim, 1, 1 << 16):
                raise EncodingError(f"auditor/index/{name}.i16 has the wrong size")
            width = 2 * cast(int, dim)  # is_int checked it
            if len(data) % width or len(data) < n_docs * width:
                raise EncodingError(f"auditor/index/{name}.i16 has the wrong size")
            total = len(data) // width
            q = np.frombuffer(data, dtype="<i2").reshape(total, width // 2)
            docs = decode(b.docs_files.get(name, b"null"), what=f"auditor/docs/{name}.json")
            if not isinstance(docs, dict) or set(docs) - {"zk_blinding", "additions"} != {
                "ids",
                "salts",
                "text_sha256",
                "index_salt",
            }:
                raise EncodingError(
                    f"auditor/docs/{name}.json: must be {{ids, salts, text_sha256, index_salt}} (+ zk_blinding, "
                    "additions)"
                )
            additions = docs.get("additions", [])
            if not isinstance(additions, list) or not all(
                isinstance(a, dict) and set(a) == {"pos", "salt"} and is_int(a["pos"], 1) and is_hex(a["salt"], 16)
                for a in additions
            ):
                raise EncodingError(f'auditor/docs/{name}.json: additions must be [{{"pos", "salt"}}]')
            zk_blinding = docs.get("zk_blinding")
            if ("Z_idx" in t) != (zk_blinding is not None) or (
                zk_blinding is not None
                and not (isinstance(zk_blinding, str) and zk_blinding.isdigit() and len(zk_blinding) <= 80)
            ):
                raise EncodingError(f"auditor/docs/{name}.json: zk_blinding (decimal) exactly for a tenant with Z_idx")
            if not is_hex(docs["index_salt"], cm.SALT_BYTES):
                raise EncodingError(f"auditor/docs/{name}.json: index_salt must be {cm.SALT_BYTES} bytes of hex")
            if cm.index_commitment(q[:n_docs], bytes.fromhex(docs["index_salt"])) != t["C_idx"]:
                raise EncodingError(f"auditor/index/{name}.i16 does not open C_idx")
            docs = {k: v for k, v in docs.items() if k not in ("index_salt", "zk_blinding", "additions")}
            if (
                any(not isinstance(docs[k], list) or len(docs[k]) != total for k in docs)
                or not all(isinstance(x, str) for x in docs["ids"])
                or not all(is_hex(s, cm.SALT_BYTES) for s in docs["salts"])
                or not all(is_hex(h, 32) for h in docs["text_sha256"])
            ):
                raise EncodingError(f"auditor/docs/{name}.json: must hold n_docs ids, salts and text hashes")
            hashes = [bytes.fromhex(h) for h in docs["text_sha256"]]
            doc_salts = [bytes.fromhex(s) for s in docs["salts"]]
            if cm.documents_commitment(doc_salts[:n_docs], docs["ids"][:n_docs], hashes[:n_docs]) != t["C_docs"]:
                raise EncodingError(f"auditor/docs/{name}.json does not open C_docs")
            first_of: dict[bytes, int] = {}
            for i, h in enumerate(hashes):  # one text, one budget: a copy under another id would get its own filter
                j = first_of.setdefault(h, i)
                if j != i:
                    run.fail(
                        "commitments",
                        f"tenant {excerpt(name)}: documents {excerpt(docs['ids'][j])} and {excerpt(docs['ids'][i])} "
                        "have the same text (text_sha256): one text, one budget",
                    )
            if corpus is not None and name in corpus:
                # the corpus is the tenant's whole committed index at the bundle's size; each epoch and documents
                # leaf committed a prefix of it (documents only join, at the end of the index: §3.5)
                texts = corpus[name]
                if len(texts) != total or any(
                    cm.text_hash(x) != h for x, h in zip(texts[:total], hashes, strict=False)
                ):
                    raise EncodingError(f"the corpus given for tenant {name!r} is not the committed one (C_docs)")
                given_ids = getattr(corpus, "ids", {}).get(name)
                if given_ids is not None and list(given_ids)[:total] != list(docs["ids"]):
                    raise EncodingError(f"the corpus given for tenant {name!r} has other document ids (C_docs)")
                run.ok("corpus")
            run.tenants[name] = {
                "q": q,
                "qf": q.astype(np.float64),
                "n": total,  # the whole cut; the documents leaves commit the rows above genesis's (_documents_leaf)
                "sizes": [(0, n_docs)],  # (position, committed documents from there on), §3.5
                "salts": doc_salts,
                "hashes": hashes,
                "additions": {a["pos"]: a["salt"] for a in additions},
                "dim": dim,
                "ids": docs["ids"],
                "Z_idx": int(t["Z_idx"]) if "Z_idx" in t else None,
                "zk_blinding": None if zk_blinding is None else int(zk_blinding),
            }
            run.ok("commitments")
        except EncodingError as e:
            run.fail("commitments", str(e))
    names = {t.get("tenant") for t in g["tenants"] if isinstance(t, dict) and isinstance(t.get("tenant"), str)}
    for a in g["accounts"]:
        if (
            not isinstance(a, dict)
            or set(a) != {"account", "tenant", "key"}
            or not is_identifier(a["account"])
            or not isinstance(a["tenant"], str)
            or a["tenant"] not in names
            or not is_hex(a["key"], 32)
            or a["account"] in run.accounts
        ):
            run.fail(
                "commitments",
                f"malformed or duplicate account in the genesis registry (an account is a name: {IDENTIFIER_RULE})",
            )
            continue
        if any(other["key"] == a["key"] for other in run.accounts.values()):
            run.fail(
                "commitments", f"account {a['account']!r} shares its key with another account (one key, one account)"
            )
            continue
        run.accounts[a["account"]] = a
    _state_leaves(run, g)
    if corpus is not None and reembedder is not None:
        embedder_fidelity(run, corpus, reembedder)
    elif corpus is not None:  # the corpus without the committed embedder: the verdict says nothing was re-embedded
        run.checked["documents_reembedded"] += 0


def embedder_fidelity(run: Run, corpus: dict[str, list[str]], embedder: Any) -> None:
    """§8.3 with ``--corpus`` and the committed embedder installed: the embedder must be the committed one (its own
    descriptor equals the opened one, schema aside), and every committed index row must be its quantised output on
    the document's text, each coordinate within ±1 (float rounding across machines can move a value that sits on a
    rounding boundary by one step; a different text or model moves hundreds). Checked documents are counted
    (``checked.documents_reembedded``); without the embedder, fidelity stays on trust (threat model)."""
    committed = cm.descriptor_of(decode_content(run.b.embedder_bytes)) if run.b.embedder_bytes is not None else None
    if not isinstance(committed, dict):
        return
    try:
        own = embedder.descriptor(committed.get("schema") or {}, prompt_template=committed.get("prompt_template"))
        own = own.to_dict() if hasattr(own, "to_dict") else dict(own)
    except Exception as e:  # noqa: BLE001 - the auditor embedder: report, do not guess
        run.fail("commitments", f"embedder fidelity: the given embedder has no usable descriptor ({type(e).__name__})")
        return
    differs = sorted(k for k in set(own) | set(committed) if k != "schema" and own.get(k) != committed.get(k))
    if differs:
        run.fail("commitments", f"embedder fidelity: the installed embedder is not the committed one ({differs})")
        return
    scale = int(committed["embedding_scale"])
    for t, ten in run.tenants.items():
        texts = corpus.get(t)
        if texts is None or len(texts) < ten["n"]:
            continue
        texts = texts[: ten["n"]]  # the prefix this window committed (§8.3 checked it opens C_docs)
        q = cm.quantise_embeddings(np.asarray(embedder.embed(list(texts)), dtype=np.float64), scale)
        if q.shape != ten["q"].shape:
            run.fail("commitments", f"embedder fidelity: tenant {t!r}: the embedder's output has another shape")
            continue
        off = np.flatnonzero(np.abs(q.astype(np.int32) - ten["q"].astype(np.int32)).max(axis=1) > 1)
        if off.size:
            run.fail(
                "commitments",
                f"embedder fidelity: tenant {t!r}: {off.size} committed index rows are not the committed embedder's "
                f"output on their documents (first: row {int(off[0])})",
            )
        run.checked["documents_reembedded"] += int(ten["n"])


def _version_text(v: object) -> str:
    return str(v) if is_int(v, -(1 << 53), 1 << 53) else excerpt(v)


@guarded("commitments")
def check_8_3_pinned_key(run: Run, pinned: str | None) -> None:
    """§8.3 with ``--key``: the genesis provider key, or one its rotation leaves authenticated (§3.3), is the one the
    auditor pinned."""
    if pinned is not None and run.keys is not None and any(v.vkey() == pinned for _, v in run.keys.eras):
        return
    if pinned is not None and run.genesis is not None and run.genesis["provider_key"] != pinned:
        run.fail(
            "commitments",
            "the provider key is not the pinned one (bundle key "
            f"{key_fingerprint(run.genesis['provider_key'])}, pinned {key_fingerprint(pinned)})",
        )


POLICY_LEAF_KEYS = {"type", "epoch", "C_policy", "C_seed"}
EPOCH_KEYS = {"epoch", "pos", "policy", "salt", "seed"}


def _epoch_openings(run: Run) -> dict[int, dict[str, Any]]:
    """auditor/epochs.json (§3.4): epoch -> its opening (policy, salt, seed, and the position of its leaf)."""
    if run.b.epochs_bytes is None:
        return {}
    try:
        items = decode(run.b.epochs_bytes, what="auditor/epochs.json")
        if not isinstance(items, list) or not all(isinstance(e, dict) and set(e) == EPOCH_KEYS for e in items):
            raise EncodingError(f"auditor/epochs.json: must be a list of {sorted(EPOCH_KEYS)}")
        return {e["epoch"]: e for e in items if is_int(e["epoch"], 1)}
    except EncodingError as e:
        run.fail("commitments", str(e))
        return {}


def _policy_leaf(run: Run, i: int, rec: dict[str, Any], openings: dict[int, dict[str, Any]]) -> None:
    """§3.4: a policy leaf opens the next epoch; its policy and seed open its commitments (else that epoch has none,
    and the checks that replay it cannot PASS)."""
    k = len(run.epochs)
    policy, seed = None, None
    try:
        if set(rec) != POLICY_LEAF_KEYS or not all(is_hex(rec[f], 32) for f in ("C_policy", "C_seed")):
            raise EncodingError(f"not a well-formed policy leaf {sorted(POLICY_LEAF_KEYS)}")
        if rec["epoch"] != k:
            raise EncodingError(f"opens epoch {excerpt(rec['epoch'])}, not the next one {k}")
        op = openings.get(k)
        if op is None or op["pos"] != i:
            raise EncodingError(f"auditor/epochs.json holds no opening of epoch {k} at this position")
        salt = hexbytes(op["salt"], "epoch salt", cm.SALT_BYTES)
        pol = Policy.from_dict(op["policy"])
        if cm.policy_commitment(salt, pol.to_bytes()) != rec["C_policy"]:
            raise EncodingError("its policy does not open C_policy")
        sd = hexbytes(op["seed"], "epoch seed", cm.SEED_BYTES)
        if cm.seed_commitment(sd) != rec["C_seed"]:
            raise EncodingError("its seed does not open C_seed")
        policy, seed = pol, sd
        run.ok_at(i, "epochs")
    except (EncodingError, DpragError) as e:
        run.fail_at(i, "commitments", f"leaf {i}: epoch {k}: {e}")
    run.epochs.append(EpochView(k, i, policy, seed))


DOCUMENTS_LEAF_KEYS = {"type", "tenant", "first", "count", "C_idx", "C_docs"}


def _documents_leaf(run: Run, i: int, rec: dict[str, Any]) -> None:
    """§3.5: a documents leaf appends ``count`` documents at the end of its tenant's index; C_idx opens over the whole
    index after the addition (with the addition's salt), C_docs over the new documents alone."""
    try:
        if set(rec) != DOCUMENTS_LEAF_KEYS or not all(is_hex(rec[f], 32) for f in ("C_idx", "C_docs")):
            raise EncodingError(f"not a well-formed documents leaf {sorted(DOCUMENTS_LEAF_KEYS)}")
        ten = run.tenants.get(rec["tenant"]) if isinstance(rec["tenant"], str) else None
        if ten is None:
            raise EncodingError(f"names tenant {excerpt(rec['tenant'])}, which genesis does not commit")
        first, count = rec["first"], rec["count"]
        have = ten["sizes"][-1][1]
        if first != have or not is_int(count, 1, 1 << 31) or first + count > ten["n"]:
            raise EncodingError(
                f"appends at {excerpt(first)}, not at the tenant's {have} documents, or past the bundle's"
            )
        salt = ten["additions"].get(i)
        if salt is None:
            raise EncodingError("the bundle holds no index salt for this addition (auditor/docs additions)")
        end = first + count
        if cm.index_commitment(ten["q"][:end], bytes.fromhex(salt)) != rec["C_idx"]:
            raise EncodingError("the index after the addition does not open C_idx")
        ids, salts, hashes = ten["ids"][first:end], ten["salts"][first:end], ten["hashes"][first:end]
        if cm.documents_commitment(salts, ids, hashes) != rec["C_docs"]:
            raise EncodingError("the added documents do not open C_docs")
        ten["sizes"].append((i, end))
        run.ok_at(i, "documents_leaves")
    except EncodingError as e:
        run.fail_at(i, "commitments", f"leaf {i}: {e}")


def _state_leaves(run: Run, g: dict[str, Any]) -> None:
    """§3.2 and §3.3: the registry's and the provider key's leaves, in log order, each under the one rule the
    provider applied when it appended it (``Registry.apply``, ``KeyChain.apply``): ``run.registry`` and ``run.keys``
    are what they build, and ``run.accounts`` gains each account that joined by a leaf (its tenant and first key)."""
    from ..protocol.chain import chain_id
    from ..protocol.provider_keys import KeyChain, KeyLeafError
    from ..protocol.registry import TYPES, Registry, RegistryError

    chain: str = g["chain"] if isinstance(g.get("chain"), str) else chain_id(run.b.leaves[0])
    reg = Registry.from_genesis(chain, {a: (v["tenant"], v["key"]) for a, v in run.accounts.items()})
    keys = KeyChain.from_genesis(chain, g["provider_key"]) if run.key is not None else None
    epochs = _epoch_openings(run)
    run.epochs = [EpochView(0, 0, run.policy, run.seed)]
    for i, leaf in enumerate(run.records):
        kind = leaf.get("type") if i and isinstance(leaf, dict) else None
        if kind is None:
            continue
        rec = cast("dict[str, Any]", leaf)  # a parsed leaf with a type
        if kind == "policy":
            _policy_leaf(run, i, rec, epochs)
            continue
        if kind == "documents":
            _documents_leaf(run, i, rec)
            continue
        if kind == "key" and keys is not None:
            try:
                keys.apply(i, rec)
                run.ok_at(i, "key_leaves")
            except KeyLeafError as e:
                run.fail_at(i, "commitments", f"leaf {i}: a provider key rotation breaks its rule: {e}")
            continue
        if kind not in TYPES:
            continue
        try:
            reg.apply(i, rec, run.tenants)
        except RegistryError as e:
            run.fail_at(i, "commitments", f"leaf {i}: a registry leaf breaks its rule: {e}")
            continue
        if rec["type"] == "account":
            run.accounts[rec["account"]] = {"account": rec["account"], "tenant": rec["tenant"], "key": rec["key"]}
        run.ok_at(i, "registry_leaves")
    run.registry, run.keys = reg, keys
    for t, v in run.tenants.items():
        if v["sizes"][-1][1] != v["n"]:
            run.fail(
                "commitments",
                f"tenant {excerpt(t)}: the bundle holds {v['n']} documents, the log commits {v['sizes'][-1][1]}",
            )
    if keys is not None and run.b.vkey is not None and run.b.vkey != keys.current.vkey():
        run.fail("commitments", "public/provider.vkey is not the log's current provider key (after its rotations)")
