"""The provider: a multi-tenant RAG service that records everything its audit needs (spec/protocol.md).

``ProviderService.create(directory, ...)`` opens an audit window (Phase A: seed, salts, commitments, the
account registry, genesis leaf); ``ProviderService.open(directory, ...)`` resumes one (after a restart or a
crash); ``serve(request)`` serves one account-signed request (Phase B, §5; accounts build requests with
``audit.client.account.AccountClient``); ``export_bundle(out)`` writes the bundle (§7). ``ProviderService`` is the
façade: the window's state is ``window.Window``, the request path ``serving.Serving``, each in its own module.

Concurrency (spec/provider.md §6): one service object is safe from many threads; many processes (on one host
with the SQLite store, on many hosts with a PostgreSQL store) may serve one window, each with its own object.
A request's charge, opening, ledger leaf and served row are ONE transaction serialised on the ledger's tail
(``audit.provider.storage``); the checkpoint its receipt carries is signed after that commit, over committed state; the
answer is generated outside the transaction (in parallel across requests), stored in the shared store (the first
stored answer wins) and only then released.

State layout of ``directory`` (all of it provider-private; the bundle is what leaves it):
``secret/seed.hex`` s_W, ``secret/provider.skey`` the Ed25519 note key, ``secret/salts.json`` the policy and
document salts; ``config/{policy,embedder,tenants,accounts,store}.json``; ``index/<tenant>.i16`` quantised
embeddings; ``docs/<tenant>.json`` document ids and texts; the store: ``state/service.sqlite`` or the PostgreSQL
schema ``config/store.json`` names (ledger, openings, checkpoints, served table, zk proofs, per-document spend).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import numpy.typing as npt

from dprag.errors import DpragError, InvalidParameterError
from dprag.zk.field import R as BN254_R

from ..protocol import commitments as cm
from ..protocol.encoding import IDENTIFIER_RULE, JSON, EncodingError, decode, encode, hexbytes, is_identifier
from ..protocol.errors import ServiceStateError
from ..protocol.ledger import Checkpoint, NoteSigner, NoteVerifier, Signer, open_checkpoint
from ..protocol.policy import Policy
from .atomic_files import write_atomically
from .models import TextEmbedder, as_embedder, describes_itself, prompt_template_of, serving_generator
from .serving import Served, Serving
from .signers import held_in_window
from .storage import Session, create_store

if TYPE_CHECKING:
    from dprag.zk.keys import ProvingKey


class Salts(TypedDict):
    """``secret/salts.json`` as ``create`` writes it (hex, and the zk blindings in decimal); ``add_documents`` appends
    ``index_additions`` (``{tenant: [{"pos", "salt"}, ...]}``)."""

    policy: str
    documents: dict[str, list[str]]
    index: dict[str, str]
    zk: dict[str, str]
    embedder: str


def _opened(note: bytes, origin: str, key: NoteVerifier) -> Checkpoint:
    """The checkpoint ``note`` opened under ``key``; EncodingError if it does not open."""
    try:
        return open_checkpoint(note, origin, key)[0]
    except Exception as e:  # noqa: BLE001 - the checkpoint module's typed errors
        raise EncodingError(str(e)) from None


def _store_files(session: Session, files: Mapping[str, bytes]) -> None:
    """Keep ``files`` (path -> bytes) in the store's ``window_file``, inside the caller's write transaction: what a
    state leaf changes commits with the leaf, and every replica reads it from there."""
    session.executemany(
        "INSERT INTO window_file (path, data) VALUES (?, ?) ON CONFLICT (path) DO UPDATE SET data = excluded.data",
        list(files.items()),
    )


def _write_files(directory: Path, files: Mapping[str, bytes]) -> None:
    """The local copies of ``files`` after the commit (secrets 0600)."""
    for path, data in files.items():
        write_atomically(directory / path, data, private=path.startswith("secret/"))


def _refuse_weak(policy: Policy, earlier: Sequence[Policy], n: int, allow_weak: bool) -> None:
    """A policy that would certify a weak or vacuous guarantee over a log whose largest tenant holds ``n``
    documents is refused (naming why) unless the operator passes ``allow_weak`` (spec/protocol.md §8)."""
    from ..protocol.certify import policy_strength

    strength, why = policy_strength(policy, earlier, n)
    if strength != "strong" and not allow_weak:
        raise InvalidParameterError(
            "policy", f"would certify a {strength} guarantee — {why[0]}; pass allow_weak=True to serve it anyway"
        )


def _check_id(field: str, value: str) -> str:
    if not is_identifier(value):
        raise InvalidParameterError(field, f"must be {IDENTIFIER_RULE}", value)
    return value


#: how many times ``rotate_key`` signs again when the log moved while it signed
ROTATE_ATTEMPTS = 20


class ProviderService(Serving):
    """See the module docstring. The state is ``window.Window``, the request path ``serving.Serving``."""

    # -- opening a window ------------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        directory: str | os.PathLike[str],
        *,
        policy: Policy,
        embedder: TextEmbedder | str,
        embedder_descriptor: cm.EmbedderDescriptor | None = None,
        generator: object,
        tenants: Mapping[str, Sequence[str] | Mapping[str, str]],
        accounts: Mapping[str, tuple[str, str]],
        seed: bytes | None = None,
        signer: Signer | None = None,
        store: str | None = None,
        allow_weak: bool = False,
    ) -> ProviderService:
        """Phase A: validate, embed and commit the tenants' indexes and documents, draw s_W and the salts,
        register the accounts, append the genesis leaf.

        ``tenants``: tenant -> its documents, either a list of texts (ids "0", "1", ...) or a mapping from the
        provider's own document ids (strings) to texts; index order is the given order. ``accounts``: account
        -> (tenant, the account's Ed25519 public key as hex, ``AccountKey.vkey``): the registry genesis
        commits to; a request from any other account is refused.

        ``embedder``: the provider's own (an object with ``embed(texts)`` or a callable returning float vectors)
        or a name registered under the ``dprag.embedders`` entry points (``"all-MiniLM-L6-v2"``). Without
        ``embedder_descriptor`` the embedder's own ``descriptor(schema, prompt_template)`` builds what C_emb
        commits to (the prompt template from ``generator.prompt_template``, else the generator's class).
        ``generator``: one with next-token logits (``accounting.protocols.Generator``) for ``pure-dp-rag``, or
        one that only returns text for ``dp-ksa`` (and ``answer-vote``), see ``serving_generator``.
        ``store``: None (the SQLite file ``state/service.sqlite``) or a ``postgresql://`` URL for replicas on several
        hosts (``audit.provider.storage``; the window gets a schema of its own).
        ``signer``: the provider's note key (``audit.protocol.ledger.Signer``). None: a fresh ``NoteSigner`` kept in
        ``secret/provider.skey`` and the store (every replica reads it there). A ``provider.signers.FileSigner`` or
        ``Pkcs11Signer`` keeps it outside both: only its public key is written, and every process opening the log
        is given the signer (``open(..., signer=)``, ``dprag serve --signer``).
        ``allow_weak``: serve a policy whose certified guarantee would be weak or vacuous under the auditor's
        default limit (``certify.policy_strength``: ε > 10, or δ >= 1/n with n the largest tenant's documents,
        or δ >= 1); without it such a policy is refused before anything is written (spec/protocol.md §8).
        """
        policy.validate().check_claims()
        embedder = as_embedder(embedder)
        generator = serving_generator(policy, generator)
        d = Path(directory)
        if (d / "config" / "store.json").exists() or (d / "state" / "ledger.sqlite").exists():
            raise InvalidParameterError("directory", "already holds an audit window; use ProviderService.open", str(d))
        if not tenants:
            raise InvalidParameterError("tenants", "need at least one tenant")
        corpora: dict[str, tuple[list[str], list[str]]] = {}
        for t, docs in tenants.items():
            _check_id("tenant", t)
            if isinstance(docs, Mapping):
                ids, texts = [str(k) for k in docs], [docs[k] for k in docs]
            else:
                ids, texts = [str(i) for i in range(len(docs))], list(docs)
            if not texts:
                raise InvalidParameterError(f"tenants[{t}]", "corpus is empty")
            if len(set(ids)) != len(ids) or not all(isinstance(x, str) for x in texts):
                raise InvalidParameterError(f"tenants[{t}]", "document ids must be unique and texts strings")
            cm.one_text_one_budget(f"tenants[{t}]", ids, texts)
            if policy.retrieval.K > len(texts) and t in policy.retrieval.enabled_tenants:
                raise InvalidParameterError("retrieval.K", f"exceeds tenant {t}'s corpus size {len(texts)}")
            corpora[t] = (ids, texts)
        registry = cls._registry(accounts, corpora)
        _refuse_weak(policy, (), max(len(c[0]) for c in corpora.values()), allow_weak)
        for t in policy.retrieval.enabled_tenants:
            if t not in corpora:
                raise InvalidParameterError("retrieval.enabled_tenants", "names an unknown tenant", t)
        if embedder_descriptor is None:
            if not describes_itself(embedder):
                raise InvalidParameterError(
                    "embedder_descriptor", "is required for an embedder without descriptor(schema, prompt_template)"
                )
            embedder_descriptor = embedder.descriptor(
                {t: len(c[0]) for t, c in corpora.items()}, prompt_template=prompt_template_of(generator)
            )
        if not isinstance(embedder_descriptor, cm.EmbedderDescriptor):
            raise InvalidParameterError(
                "embedder_descriptor",
                "must be an audit.protocol.commitments.EmbedderDescriptor",
                type(embedder_descriptor).__name__,
            )
        scale = embedder_descriptor.embedding_scale
        qidx: dict[str, npt.NDArray[np.int16]] = {}
        dim = embedder_descriptor.dimension
        for t, (_ids, texts) in sorted(corpora.items()):
            e = np.asarray(embedder.embed(list(texts)))
            if e.shape != (len(texts), dim):
                raise InvalidParameterError("embedder", f"returned shape {e.shape}, expected ({len(texts)}, {dim})")
            qidx[t] = cm.quantise_embeddings(e, scale)
        seed = cm.new_seed() if seed is None else seed
        signer = signer or NoteSigner.generate(re.sub(r"[^A-Za-z0-9_.-]", "-", f"dprag-{policy.window}")[:64])
        salts: Salts = {
            "policy": cm.new_salt().hex(),
            "documents": {t: [cm.new_salt().hex() for _ in ids] for t, (ids, _) in corpora.items()},
            "index": {t: cm.new_salt().hex() for t in corpora},
            # Z_idx's blinding scalar per zk tenant (uniform in the BN254 scalar field; decimal)
            "zk": {t: str(secrets.randbelow(BN254_R)) for t in policy.retrieval.zk_tenants},
            "embedder": cm.new_salt().hex(),
        }
        for sub in ("secret", "config", "index", "docs", "state"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        write_atomically(d / "secret" / "seed.hex", seed.hex().encode(), private=True)
        if held_in_window(signer):
            write_atomically(d / "secret" / "provider.skey", signer.skey().encode(), private=True)
        write_atomically(d / "secret" / "salts.json", encode(salts), private=True)
        write_atomically(d / "config" / "policy.json", policy.to_bytes())
        emb_salt = bytes.fromhex(salts["embedder"])
        write_atomically(d / "config" / "embedder.json", encode(cm.embedder_opening(embedder_descriptor, emb_salt)))
        write_atomically(
            d / "config" / "accounts.json", encode({a: {"tenant": t, "key": k} for a, (t, k) in registry.items()})
        )
        tenant_meta = {}
        for t, q in qidx.items():
            ids, texts = corpora[t]
            write_atomically(d / "index" / f"{t}.i16", cm.embedding_bytes(q))
            write_atomically(d / "docs" / f"{t}.json", encode({"ids": ids, "texts": texts}))
            doc_salts = [bytes.fromhex(x) for x in salts["documents"][t]]
            tenant_meta[t] = (
                len(texts),
                cm.index_commitment(q, bytes.fromhex(salts["index"][t])),
                cm.documents_commitment(doc_salts, ids, [cm.text_hash(x) for x in texts]),
            )
        write_atomically(
            d / "config" / "tenants.json",
            encode({t: {"n_docs": n, "dimension": int(qidx[t].shape[1])} for t, (n, _, _) in tenant_meta.items()}),
        )
        c_policy = cm.policy_commitment(bytes.fromhex(salts["policy"]), policy.to_bytes())
        zk: dict[str, str] = {}
        if policy.retrieval.zk_tenants:
            from ..protocol import zk_attest

            for t in policy.retrieval.zk_tenants:
                if qidx[t].shape[0] > zk_attest.MAX_ZK_DOCS:
                    raise InvalidParameterError(
                        "retrieval.zk_tenants", f"tenant {t} holds more than {zk_attest.MAX_ZK_DOCS} documents"
                    )
                zk[t] = zk_attest.index_commitment(qidx[t], int(salts["zk"][t]))
        genesis = cm.genesis_record(
            policy.window,
            signer.vkey(),
            embedder_descriptor.commitment(emb_salt),
            c_policy,
            cm.seed_commitment(seed),
            tenant_meta,
            registry,
            zk,
        )
        # the log's origin names it by its genesis (spec/protocol.md §3.1): "dprag/" + hex H(genesis leaf bytes)
        from ..protocol.chain import origin_of

        write_atomically(d / "config" / "meta.json", encode({"origin": origin_of(encode(genesis))}))
        svc = cls(
            d,
            embedder=embedder,
            generator=generator,
            signer=signer,
            _store=create_store(d, store, window=policy.window),
        )
        with svc.store.write():
            if svc.ledger.size != 0:
                raise ServiceStateError("a fresh ledger is not empty")
            svc.ledger.append(encode(genesis))
        svc.registry.chain = svc.keys.chain = svc.chain_id
        from .storage import publish_files

        publish_files(svc.store, d)  # a replica sharing only the database URL materialises its directory from these
        svc.checkpoint_now()
        # what the provider hands its auditor and accounts out of band, to pin (spec/protocol.md §3.1, §8.10)
        (d / "pins").mkdir(exist_ok=True)
        write_atomically(d / "pins" / "provider.vkey", (svc.keys.eras[0][1].vkey() + "\n").encode())
        write_atomically(d / "pins" / "origin.txt", (svc.origin + "\n").encode())
        return svc

    @staticmethod
    def _registry(accounts: Mapping[str, tuple[str, str]], corpora: Mapping[str, object]) -> dict[str, tuple[str, str]]:
        """The account registry genesis commits to: ids well formed, tenants known, keys 32 bytes of hex, and one
        key per account (a key registered twice would let one party hold several accounts' counters)."""
        registry: dict[str, tuple[str, str]] = {}
        for a, spec in accounts.items():
            _check_id("account", a)
            if not (isinstance(spec, tuple) and len(spec) == 2):
                raise InvalidParameterError(f"accounts[{a}]", "must be (tenant, account key hex)", spec)
            t, key = spec
            if t not in corpora:
                raise InvalidParameterError(f"accounts[{a}]", "names an unknown tenant", t)
            try:
                hexbytes(key, f"accounts[{a}].key", 32)
            except Exception:
                raise InvalidParameterError(
                    f"accounts[{a}]", "key must be 64 hex characters (AccountKey.vkey)"
                ) from None
            if any(k == key for _, k in registry.values()):
                raise InvalidParameterError(
                    f"accounts[{a}]", "key is already registered to another account (one key, one account)"
                )
            registry[a] = (t, key)
        return registry

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        *,
        embedder: TextEmbedder | str,
        generator: object,
        store: str | None = None,
        signer: Signer | Sequence[Signer] | None = None,
    ) -> ProviderService:
        """Resume a window (after a restart, on another replica): check that every tenant's spend is exactly what
        the ledger's openings charged (``recovery.check_spend``), then serve. ``store``: the PostgreSQL URL with its
        credentials where ``config/store.json`` names one and the password is not in ``PGPASSWORD``. ``signer``: the
        provider's key(s) when a signer holds them outside the directory (``create``); the current one is used."""
        svc = cls(Path(directory), embedder=embedder, generator=generator, store=store, signer=signer)
        try:
            from .recovery import check_spend

            check_spend(svc)
        except BaseException:
            svc.close()
            raise
        return svc

    # -- the registry, in the log (spec/protocol.md §3.2) --------------------------------------------------------
    def add_account(self, name: str, tenant: str, key: str) -> int:
        """Register an account (``key``: its Ed25519 public key, ``AccountKey.vkey``) by an ``account`` leaf.
        Returns the leaf's position; the account may ask from the next position on. A name joins once, a revoked
        name never rejoins, a key belongs to one account ever (``InvalidParameterError`` naming the rule)."""
        from ..protocol.registry import account_leaf

        return self._append_state_leaf(account_leaf(name, tenant, key))

    def revoke_account(self, name: str) -> int:
        """End an account for good by an ``account-revoke`` leaf: its later requests are refused (code
        ``revoked``), its earlier receipts stay evidence. Returns the leaf's position."""
        from ..protocol.registry import revoke_leaf

        return self._append_state_leaf(revoke_leaf(name))

    def rotate_account_key(self, leaf: Mapping[str, JSON]) -> int:
        """Append an account's own key rotation (``AccountClient.rotation_leaf``: signed by its current key); the
        provider cannot re-key an account. Returns the leaf's position."""
        return self._append_state_leaf(dict(leaf))

    def rotate_key(self, signer: Signer | None = None) -> int:
        """Rotate the provider's note key (spec/protocol.md §3.3): a ``key`` leaf naming the new key, signed by the
        current one; the checkpoint of the size that first covers it is signed by both; every later checkpoint,
        receipt and refusal by the new key. ``signer``: the new key (default: a fresh ``NoteSigner``, kept in the
        store as the first one was; a ``FileSigner`` or ``Pkcs11Signer`` is kept outside it, and every other replica
        is restarted with it). Every replica of the store follows it before it signs again. Returns the leaf's
        position.

        Both signatures (the leaf and the dual-signed checkpoint) are made before the write transaction, over the
        committed log; the transaction appends only if the log did not move meanwhile, else it signs again
        (at most ``ROTATE_ATTEMPTS`` times, then ``StoreUnavailableError``)."""
        import copy

        from ..protocol.errors import StoreUnavailableError
        from ..protocol.ledger import sign_checkpoint
        from ..protocol.provider_keys import KeyLeafError, key_leaf

        new = signer or NoteSigner.generate(self.signer.name)
        for _ in range(ROTATE_ATTEMPTS):
            with self.store.snapshot():
                self.refresh_state()
                old, chain = self.signer, self.keys.chain
                keys = copy.deepcopy(self.keys)
            rec = key_leaf(old, chain, new.vkey())  # outside any transaction (spec/provider.md §8)
            leaf = encode(rec)
            size, root = self.ledger.root_after(leaf)
            try:
                keys.apply(size, rec)
            except KeyLeafError as e:
                raise InvalidParameterError(f"signer.{e.field}", e.rule) from None
            # the first checkpoint covering it, signed by both keys, commits with the leaf
            both = sign_checkpoint(Checkpoint(self.origin, size + 1, root, ()), new, old)
            with self.store.write() as s:
                self.refresh_state()
                if self.ledger.size != size or self.signer.vkey() != old.vkey():
                    continue  # the log moved while we signed: nothing written, sign again over the new head
                pos, root_now = self.ledger.append_with_root(leaf)
                if (pos, root_now) != (size, root):
                    raise ServiceStateError("the log's root changed under the tail lock (the store is corrupt)")
                self.aud.put_state_leaf(pos, "key")
                self.aud.put_checkpoint(pos + 1, both, replace=True)
                files: dict[str, bytes] = {}
                if held_in_window(new):
                    files["secret/provider.skey"] = new.skey().encode()
                if held_in_window(old):
                    try:
                        retired = decode(self.stored_file("secret/provider-retired.json"), what="retired keys")
                    except FileNotFoundError:
                        retired = []
                    # the retired key signs what the log placed in its era (an answer recorded before the rotation
                    # and stored after it: Window.signer_at), so no signature tells when that work ended
                    files["secret/provider-retired.json"] = encode([*retired, old.skey()])
                _store_files(s, files)  # a replica on another host reads the new key from here (Window._signer_for)
            break
        else:
            raise StoreUnavailableError(f"the log kept moving while the rotation was signed ({ROTATE_ATTEMPTS} tries)")
        _write_files(self.dir, files)
        self.remember_signer(new)
        self.refresh_state()
        self.checkpoint_now()
        return pos

    def set_policy(self, policy: Policy, *, seed: bytes | None = None, allow_weak: bool = False) -> int:
        """Start the next epoch (spec/protocol.md §3.4) by a ``policy`` leaf committing ``policy`` (salted) and a
        fresh seed (``seed``: tests only). The policy may change only what an epoch may (``chain_violations``: ε_q
        with M keeping the filter's limit, k_max down, n up, the uncertified generation fields) and keeps the
        window's name; every certified quantity is then taken over all epochs. Requests recorded before the leaf are
        finished under their own epoch. ``allow_weak`` as for ``create``, over every epoch's policy. Returns the
        leaf's position."""
        from ..protocol.chain import chain_violations

        policy.validate().check_claims()
        bad = [v for v in chain_violations(self.policy, policy) if not v.startswith("window")]
        if policy.window != self.policy.window:
            bad.append("window (an epoch keeps the log's name)")
        for t in policy.retrieval.enabled_tenants:
            if t not in self.tenants:
                bad.append(f"retrieval.enabled_tenants names an unknown tenant {t!r}")
        if bad:
            raise InvalidParameterError("policy", "changes what an epoch may not: " + "; ".join(bad))
        earlier = [ep.policy for ep in self.epochs]
        _refuse_weak(policy, earlier, max(len(t.retriever) for t in self.tenants.values()), allow_weak)
        seed = cm.new_seed() if seed is None else seed
        salt = cm.new_salt()
        with self.store.write() as s:
            self.refresh_state()
            k = len(self.epochs)
            pub = decode(self.stored_file("config/epochs.json"), what="epochs") if k > 1 else []
            sec = decode(self.stored_file("secret/epochs.json"), what="epochs") if k > 1 else []
            rec = {
                "type": "policy",
                "epoch": k,
                "C_policy": cm.policy_commitment(salt, policy.to_bytes()),
                "C_seed": cm.seed_commitment(seed),
            }
            pos = self.ledger.append(encode(rec))
            self.aud.put_state_leaf(pos, "policy")
            files = {
                "config/epochs.json": encode([*pub, {"epoch": k, "pos": pos, "policy": policy.to_dict()}]),
                "secret/epochs.json": encode([*sec, {"epoch": k, "seed": seed.hex(), "salt": salt.hex()}]),
            }
            _store_files(s, files)  # committed with the leaf: every replica loads the change from here
        _write_files(self.dir, files)
        self.refresh_state()
        self.checkpoint_now()
        return pos

    def add_documents(self, tenant: str, documents: Mapping[str, str], *, allow_weak: bool = False) -> int:
        """Append documents to ``tenant``'s index by a ``documents`` leaf (spec/protocol.md §3.5): ``documents`` maps
        the provider's new ids to texts, appended in the given order (index positions never move); each starts at
        zero spend. The leaf commits the tenant's whole index after the addition (C_idx, salted) and the new
        documents (C_docs); a text the tenant already holds, an id it already has, or a zk tenant (its index is
        fixed by Z_idx) is refused naming the rule, with nothing appended; so is a growth that would turn the
        log's strong guarantee weak (δ >= 1/n with the grown tenant's n) unless ``allow_weak``. Returns the leaf's
        position."""
        field = f"add_documents[{tenant}]"
        if tenant not in self.tenants:
            raise InvalidParameterError("tenant", "is not a tenant of this log (a tenant joins at genesis)", tenant)
        if tenant in self.policy.retrieval.zk_tenants:
            raise InvalidParameterError("tenant", "is a zk tenant: its index is fixed by Z_idx", tenant)
        if not isinstance(documents, Mapping) or not documents:
            raise InvalidParameterError(field, "must map at least one new document id to its text")
        ids, texts = [str(k) for k in documents], list(documents.values())
        if not all(isinstance(x, str) for x in texts):
            raise InvalidParameterError(field, "texts must be strings")
        from ..protocol.certify import policy_strength

        earlier = [ep.policy for ep in self.epochs[:-1]]
        now = max(len(t.retriever) for t in self.tenants.values())
        grown = max(len(t.retriever) + (len(ids) if name == tenant else 0) for name, t in self.tenants.items())
        if policy_strength(self.policy, earlier, now)[0] == "strong":  # a log already served weak stays the operator's
            _refuse_weak(self.policy, earlier, grown, allow_weak)
        scale = self.embedding_scale
        dim = self.tenants[tenant].q.shape[1]
        e = np.asarray(self.embedder.embed(texts))  # outside the transaction: the embedder is deterministic
        if e.shape != (len(texts), dim):
            raise InvalidParameterError("embedder", f"returned shape {e.shape}, expected ({len(texts)}, {dim})")
        q_add = cm.quantise_embeddings(e, scale)
        doc_salts, index_salt = [cm.new_salt() for _ in ids], cm.new_salt()
        with self.store.write() as s:
            self.refresh_state()  # the tenant as the log has it now (another replica may have added documents)
            docs = decode(self.stored_file(f"docs/{tenant}.json"), what="documents")
            clash = sorted(set(ids) & set(docs["ids"]))
            if clash:
                raise InvalidParameterError(field, "ids already in the corpus (documents only join)", clash[:3])
            cm.one_text_one_budget(field, [*docs["ids"], *ids], [*docs["texts"], *texts])
            first = len(docs["ids"])
            q = np.concatenate([self.tenants[tenant].q.astype(np.int16), q_add])
            salts = decode(self.stored_file("secret/salts.json"), what="salts")
            salts["documents"][tenant] = [*salts["documents"][tenant], *(x.hex() for x in doc_salts)]
            rec = {
                "type": "documents",
                "tenant": tenant,
                "first": first,
                "count": len(ids),
                "C_idx": cm.index_commitment(q, index_salt),
                "C_docs": cm.documents_commitment(doc_salts, ids, [cm.text_hash(x) for x in texts]),
            }
            pos = self.ledger.append(encode(rec))
            self.aud.put_state_leaf(pos, "documents")
            self.spend_store(tenant, first).grow(int(q.shape[0]))  # the new documents start at zero spend
            salts.setdefault("index_additions", {}).setdefault(tenant, []).append(
                {"pos": pos, "salt": index_salt.hex()}
            )
            tmeta = decode(self.stored_file("config/tenants.json"), what="tenants")
            tmeta[tenant]["n_docs"] = int(q.shape[0])
            files = {
                f"index/{tenant}.i16": cm.embedding_bytes(q),
                f"docs/{tenant}.json": encode({"ids": [*docs["ids"], *ids], "texts": [*docs["texts"], *texts]}),
                "config/tenants.json": encode(tmeta),
                "secret/salts.json": encode(salts),
            }
            _store_files(s, files)  # committed with the leaf: every replica loads the change from here
        _write_files(self.dir, files)
        self.refresh_state()
        self.checkpoint_now()
        return pos

    def key_history(self) -> dict[str, JSON]:
        """The provider's keys along the log (``GET /v1/keys``): genesis's, then a ``rotation_proof`` per rotation,
        which a client or witness holding the outgoing key follows (``provider_keys.follow``)."""
        from ..protocol.provider_keys import rotation_proof

        self.refresh_state()
        out: list[JSON] = []
        for pos, _old, _new in self.keys.rotations():
            note = self.checkpoint_note(pos + 1)
            proof = self.ledger.inclusion_proof(pos, pos + 1).hashes
            out.append(rotation_proof(self.keys.chain, pos, self.ledger.leaf(pos), note, list(proof)))
        return {"origin": self.origin, "genesis_key": self.keys.eras[0][1].vkey(), "rotations": out}

    def _append_state_leaf(self, rec: dict[str, JSON]) -> int:
        """Check ``rec`` against the registry as of the log's tail and append it, in one write transaction."""
        import copy

        from ..protocol.registry import RegistryError

        with self.store.write():  # serialised with every request: the rule reads the registry at this position
            size, _ = self.ledger.tail()
            self.refresh_state()
            trial = copy.deepcopy(self.registry)
            try:
                trial.apply(size, rec, self.tenants)
            except RegistryError as e:
                raise InvalidParameterError(f"{rec.get('type', 'leaf')}.{e.field}", e.rule) from None
            kind = rec["type"]  # one of the registry's kinds: ``apply`` checked it
            if not isinstance(kind, str):
                raise InvalidParameterError("leaf.type", "must name the leaf's kind", kind)
            pos = self.ledger.append(encode(rec))
            self.aud.put_state_leaf(pos, kind)
        self.refresh_state()
        self.checkpoint_now()
        return pos

    def export_bundle(self, out: str | os.PathLike[str], *, since: int = 0) -> Path:
        """Write the bundle (``bundle_export.export_bundle``, spec/protocol.md §7); ``since``: only the log from that
        size on (for an auditor's state, §8.14)."""
        from .export import export_bundle

        return export_bundle(self, out, since=since)

    def attest(self, proving_key: ProvingKey, *, tenant: str | None = None) -> int:
        """Prove noise-then-select (Groth16) for the zk tenants' unproven queries with the proving key the AUDITOR
        made; the proofs go into the bundle (``attest.attest_window``). Returns the count."""
        from .attest import attest_window

        return attest_window(self, proving_key, tenant=tenant)

    def set_auditor_key(self, vkey: str) -> None:
        """Keep the auditor's Ed25519 public key (hex) in the store, so every replica serves the auditor's
        confidential export (``GET /v1/bundle?part=all``), not only the one started with ``--auditor-key``."""
        from ..protocol.encoding import hexbytes

        try:
            hexbytes(vkey.strip(), "auditor_key", 32)
        except (DpragError, ValueError) as e:
            raise InvalidParameterError("auditor_key", f"must be the 32-byte Ed25519 public key in hex ({e})") from None
        files = {"config/auditor.vkey": (vkey.strip() + "\n").encode()}
        with self.store.write(tail=False) as s:
            _store_files(s, files)
        _write_files(self.dir, files)

    def auditor_key(self) -> str | None:
        """The auditor's key this log's store keeps (``set_auditor_key``), or None."""
        try:
            return self.stored_file("config/auditor.vkey").decode().strip() or None
        except OSError:
            return None

    def released_answer(self, account: str, counter: int) -> Served | None:
        """The stored answer, citations, receipt and position of ``account``'s request ``counter`` once released
        (``GET /v1/answers``): None until it is stored, and until its ``release_at_ms`` when the policy sets a
        release period (spec/protocol.md §5.6), so nothing tells when its work ended."""
        from ..protocol.encoding import loads_bounded
        from . import release as release_clock

        raw = self.aud.served(account, counter)
        stored = loads_bounded(raw, what="stored answer") if raw else None
        if not isinstance(stored, dict) or not stored.get("served"):
            return None
        if release_clock.now() * 1000 < stored.get("release_at_ms", 0):
            return None
        served: Served = stored["served"]  # decoded afresh: the caller's own copy
        return served

    def consistency(self, size1: int, size2: int | None = None) -> dict[str, object]:
        """The RFC 6962 consistency proof between two signed sizes of the ledger (JSON form), for an account's client
        to check that its receipts lie on one history (``AccountClient.accept``)."""
        lo, hi = sorted((int(size1), self.ledger.size if size2 is None else int(size2)))
        return self.ledger.consistency_proof(lo, hi).to_json_dict()

    def checkpoint_note(self, size: int | None = None) -> bytes:
        """The signed checkpoint note of ``size`` (default: the latest): what a witness is sent to cosign."""
        size = self.ledger.size if size is None else size
        notes = {s: n for s, n in self.aud.checkpoints(size)}
        if size not in notes:
            raise InvalidParameterError("size", "no checkpoint of that size was signed", size)
        return notes[size]

    def add_cosignature(self, cosigned: bytes) -> None:
        """Keep a witness-cosigned copy of one of this log's checkpoints (it replaces the stored note); the
        provider's signature on it is the key's in effect at its size (§3.3)."""
        from ..protocol.ledger.checkpoint import Checkpoint, parse_note

        try:
            claimed = Checkpoint.parse(parse_note(bytes(cosigned))[0]).size
            cp = self.keys.verifying(claimed, partial(_opened, bytes(cosigned), self.origin), "cosigned")
        except Exception as e:  # noqa: BLE001 - any defect: not a checkpoint of this log
            raise InvalidParameterError("cosigned", f"is not a checkpoint signed by this log's key ({e})") from None
        if cp.size > self.ledger.size or self.ledger.root(cp.size) != cp.root:
            raise InvalidParameterError("cosigned", "is not a checkpoint of this ledger")
        self.aud.put_checkpoint(cp.size, bytes(cosigned), replace=True)
