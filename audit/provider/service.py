"""The provider: a multi-tenant RAG service that records everything its audit needs (spec/protocol.md).

``ProviderService.create(directory, ...)`` opens an audit window (Phase A: seed, salts, commitments, the
account registry, genesis leaf); ``ProviderService.open(directory, ...)`` resumes one (after a restart or a
crash); ``serve(request)`` serves one account-signed request (Phase B, §5; accounts build requests with
``audit.client.account.AccountClient``); ``export_bundle(out)`` writes the bundle (§7).

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

import contextlib
import copy
import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.protocols import Generator
from dprag.accounting.rag.mechanism import filter_charge
from dprag.accounting.rag.multi_query import MuRAG, MuRAGAda, RetrievalParams, Selection
from dprag.accounting.stores.session import SessionBudgetStore
from dprag.errors import InvalidParameterError
from dprag.zk.field import R as BN254_R

from ..protocol import commitments as cm
from ..protocol.charges import ChargeRule
from ..protocol.encoding import IDENTIFIER_RULE, decode, digest, encode, is_identifier
from ..protocol.errors import AnswerPendingError, RateLimitError, RequestError, ServiceStateError, StoreUnavailableError
from ..protocol.ledger import Checkpoint, NoteSigner, sign_checkpoint
from ..protocol.ledger.rfc6962 import hash_leaf
from ..protocol.policy import Policy
from ..protocol.receipts import receipt_body, refusal_body, sign_receipt, sign_refusal
from ..protocol.replay import recorded_top
from ..protocol.request import Request, request_hash
from ..protocol.retrieval import (
    float_exact_scores,
    noise_table,
    noisy_top_k,
    request_source,
    retrieval_source,
    top_commitment,
)
from .admission import check_request
from .atomic_files import write_atomically
from .group_commit import BatchFailed, GroupCommitter
from .models import TextEmbedder, as_embedder, prompt_template_of, serving_generator
from .release import ReleaseClock
from .storage import Records, ServiceStore, StoreLog, create_store, open_store


def _has_answer(row: bytes) -> bool:
    """Whether a served row's bytes hold a stored answer."""
    return bool(decode(row, what="served").get("served"))


#: a transaction the store could not complete (connection lost, server restarting) is retried this many times
STORE_ATTEMPTS = 5


@dataclass
class ServedQuery:
    """What the account receives: the answer, the citations (None if the tenant has them off), the receipt."""

    answer: str
    citations: list[int] | None
    receipt: dict
    pos: int

    def to_dict(self) -> dict:
        return {"answer": self.answer, "citations": self.citations, "receipt": self.receipt, "pos": self.pos}


def _check_id(field: str, value: str) -> str:
    if not is_identifier(value):
        raise InvalidParameterError(field, f"must be {IDENTIFIER_RULE}", value)
    return value


class _TenantRetriever:
    """accounting.protocols.Retriever over one tenant's index; ``for_query`` gives the view of one request (its exact
    integer scores, §4), so concurrent requests never share per-query state."""

    def __init__(self, documents: list[str], q_docs: np.ndarray, clip, shift, question=None, scores=None):
        self.docs = documents
        self.q_docs_f64 = q_docs if question is not None else q_docs.astype(np.float64)
        self.clip, self.shift = tuple(clip), int(shift)
        self._current: tuple[str, np.ndarray] | None = None if question is None else (question, scores)

    def __len__(self) -> int:
        return len(self.docs)

    def for_query(self, question: str, q_query: np.ndarray) -> _TenantRetriever:
        s = float_exact_scores(self.q_docs_f64, q_query, self.clip, self.shift)
        return _TenantRetriever(self.docs, self.q_docs_f64, self.clip, self.shift, question, s)

    def scores(self, query: str) -> np.ndarray:
        if self._current is None or self._current[0] != query:
            raise ServiceStateError("scores requested for a question that is not being served")
        return self._current[1].astype(np.float64)

    def document(self, doc_id: int) -> str:
        return self.docs[int(doc_id)]


class ProviderService:
    """See the module docstring."""

    # -- opening a window ------------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        directory: str | os.PathLike,
        *,
        policy: Policy,
        embedder: TextEmbedder | str,
        embedder_descriptor: cm.EmbedderDescriptor | None = None,
        generator: Generator,
        tenants: Mapping[str, Sequence[str] | Mapping[str, str]],
        accounts: Mapping[str, tuple[str, str]],
        origin: str | None = None,
        seed: bytes | None = None,
        signer: NoteSigner | None = None,
        store: str | None = None,
        _history: dict | None = None,
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
            if policy.retrieval.K > len(texts) and t in policy.retrieval.enabled_tenants:
                raise InvalidParameterError("retrieval.K", f"exceeds tenant {t}'s corpus size {len(texts)}")
            corpora[t] = (ids, texts)
        registry = cls._registry(accounts, corpora)
        for t in policy.retrieval.enabled_tenants:
            if t not in corpora:
                raise InvalidParameterError("retrieval.enabled_tenants", "names an unknown tenant", t)
        if embedder_descriptor is None:
            if not callable(getattr(embedder, "descriptor", None)):
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
        qidx = {}
        dim = embedder_descriptor.dimension
        for t, (_ids, texts) in sorted(corpora.items()):
            # a history's successor keeps its predecessor's committed rows (documents only join, the embedder is a
            # chain constant, §3.1) and embeds only the documents that joined
            known = cls._predecessor_index(_history, t, dim)
            new = texts[len(known) :]
            e = np.asarray(embedder.embed(list(new))) if new else np.zeros((0, dim))
            if e.shape != (len(new), dim):
                raise InvalidParameterError("embedder", f"returned shape {e.shape}, expected ({len(new)}, {dim})")
            qidx[t] = np.concatenate([known.astype(np.int16), cm.quantise_embeddings(e, scale)])
        seed = cm.new_seed() if seed is None else seed
        origin = origin or f"dprag/{policy.window}"
        signer = signer or NoteSigner.generate(re.sub(r"[^A-Za-z0-9_.-]", "-", origin)[:64] or "dprag")
        salts = {
            "policy": cm.new_salt().hex(),
            "documents": {t: [cm.new_salt().hex() for _ in ids] for t, (ids, _) in corpora.items()},
            "index": {t: cm.new_salt().hex() for t in corpora},
            # Z_idx's blinding scalar per zk tenant (uniform in the BN254 scalar field; decimal)
            "zk": {t: str(secrets.randbelow(BN254_R)) for t in policy.retrieval.zk_tenants},
            "carry": cm.new_salt().hex(),
        }
        for sub in ("secret", "config", "index", "docs", "state"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        write_atomically(d / "secret" / "seed.hex", seed.hex().encode(), private=True)
        write_atomically(d / "secret" / "provider.skey", signer.skey().encode(), private=True)
        write_atomically(d / "secret" / "salts.json", encode(salts), private=True)
        write_atomically(d / "config" / "policy.json", policy.to_bytes())
        write_atomically(d / "config" / "embedder.json", encode(embedder_descriptor.to_dict()))
        write_atomically(
            d / "config" / "accounts.json", encode({a: {"tenant": t, "key": k} for a, (t, k) in registry.items()})
        )
        write_atomically(d / "config" / "meta.json", encode({"origin": origin}))
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
        zk = {}
        if policy.retrieval.zk_tenants:
            from ..protocol import zk_attest

            for t in policy.retrieval.zk_tenants:
                if qidx[t].shape[0] > zk_attest.MAX_ZK_DOCS:
                    raise InvalidParameterError(
                        "retrieval.zk_tenants", f"tenant {t} holds more than {zk_attest.MAX_ZK_DOCS} documents"
                    )
                zk[t] = zk_attest.index_commitment(qidx[t], int(salts["zk"][t]))
        chain = None
        if _history is not None:  # a successor window (next_window): what carries over, committed hidingly
            from ..protocol.chain import carry_commitment

            chain = {
                "chain": _history["chain"],
                "epoch": _history["epoch"],
                "prev": _history["prev"],
                "C_carry": carry_commitment(bytes.fromhex(salts["carry"]), _history["carry"]),
            }
            write_atomically(d / "config" / "history.json", encode({**_history, "C_carry": chain["C_carry"]}))
        genesis = cm.genesis_record(
            policy.window,
            signer.vkey(),
            embedder_descriptor.commitment,
            c_policy,
            cm.seed_commitment(seed),
            tenant_meta,
            registry,
            zk,
            chain,
        )
        svc = cls(d, embedder=embedder, generator=generator, _store=create_store(d, store, window=policy.window))
        with svc.store.write():  # genesis and the carried spend: one transaction
            if svc.ledger.size != 0:
                raise ServiceStateError("a fresh ledger is not empty")
            if _history is not None:
                for t, units in _history["carry"]["spend"].items():  # every document's spend carries over
                    units = np.asarray(units, dtype=np.int64)
                    for v in np.unique(units[units > 0]):
                        svc.tenants[t]["filter"].store.charge(np.flatnonzero(units == v), np.array([int(v)]))
            svc.ledger.append(encode(genesis))
        from .storage import publish_files

        publish_files(svc.store, d)  # a replica sharing only the database URL materialises its directory from these
        svc._checkpoint()
        return svc

    @staticmethod
    def _registry(accounts: Mapping[str, tuple[str, str]], corpora: Mapping) -> dict[str, tuple[str, str]]:
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
                cm.hexbytes(key, f"accounts[{a}].key", 32)
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
        cls, directory, *, embedder: TextEmbedder | str, generator: Generator, store: str | None = None
    ) -> ProviderService:
        """Resume a window (after a restart, on another replica): check that every tenant's spend is exactly what
        the ledger's openings charged (``recovery.check_spend``), then serve. ``store``: the PostgreSQL URL with its
        credentials where ``config/store.json`` names one and the password is not in ``PGPASSWORD``."""
        svc = cls(Path(directory), embedder=embedder, generator=generator, store=store)
        try:
            from .recovery import check_spend

            check_spend(svc)
        except BaseException:
            svc.close()
            raise
        return svc

    @staticmethod
    def _predecessor_index(history: dict | None, tenant: str, dim: int) -> np.ndarray:
        """The committed int16 rows of ``tenant`` in the predecessor window (none outside a history)."""
        path = Path(history["previous_dir"]) / "index" / f"{tenant}.i16" if history else None
        if path is None or not path.is_file():
            return np.zeros((0, dim), dtype="<i2")
        return np.frombuffer(path.read_bytes(), dtype="<i2").reshape(-1, dim)

    def __init__(
        self,
        d: Path,
        *,
        embedder: TextEmbedder,
        generator: Generator,
        store: str | None = None,
        _store: ServiceStore | None = None,
    ):
        """Every random choice of serving comes from the committed seed and the signed request (§5.2)."""
        if not (d / "config" / "policy.json").exists():
            raise InvalidParameterError("directory", "is not a dprag service directory", str(d))
        self.dir = d
        self.policy = Policy.from_dict(decode((d / "config" / "policy.json").read_bytes(), what="policy")).validate()
        self.embedder, self.generator = as_embedder(embedder), serving_generator(self.policy, generator)
        self._raw_generator = generator  # the committed model itself: its context window bounds the question
        self.embedder_descriptor = decode((d / "config" / "embedder.json").read_bytes(), what="embedder")
        self.accounts: dict[str, dict] = decode((d / "config" / "accounts.json").read_bytes(), what="accounts")
        self.origin = decode((d / "config" / "meta.json").read_bytes())["origin"]
        self.seed = bytes.fromhex((d / "secret" / "seed.hex").read_text())
        self.signer = NoteSigner.from_skey((d / "secret" / "provider.skey").read_text())
        tenants = decode((d / "config" / "tenants.json").read_bytes(), what="tenants")
        r, g = self.policy.retrieval, self.policy.generation
        #: the window's one database (audit.provider.storage): ledger, auditor records, per-document spend
        self.store: ServiceStore = _store if _store is not None else open_store(d, store)
        self.ledger = StoreLog(self.store)
        self.aud = Records(self.store)
        self.release = ReleaseClock()  # constant-time release: off until the provider sets its period
        # group commit (audit/provider/group_commit.py): the record transactions, and the answer transactions
        self._records, self._answers = GroupCommitter(self._record_batch), GroupCommitter(self._store_answers)
        # the committed sampler TV must bound the table's real one; the epsilon_acc claim (a PLD of the discrete
        # Gaussian, seconds) was checked when create() committed this policy, and the verifier re-certifies it
        self.policy.check_claims(epsilon_acc=False)
        self.table = noise_table(r.sigma, r.sampler.tail, r.sampler.precision_bits)
        self.budget = FilterBudget.for_queries(g.max_queries_per_doc, self.policy.query_cost(), mode="pure")
        self.rule = ChargeRule.of(self.policy)
        self.rag_params = self.policy.rag_params()
        self.tenants: dict[str, dict] = {}
        for t, meta in tenants.items():
            q = np.frombuffer((d / "index" / f"{t}.i16").read_bytes(), dtype="<i2").reshape(
                meta["n_docs"], meta["dimension"]
            )
            docs = decode((d / "docs" / f"{t}.json").read_bytes(), what="documents")["texts"]
            retr = _TenantRetriever(docs, q, r.score_clip, r.score_shift)
            flt = IndividualRenyiFilter(SessionBudgetStore(self.store.sessions, t, len(docs)), self.budget)
            self.tenants[t] = {"q": q, "retriever": retr, "filter": flt}
        hist = d / "config" / "history.json"
        self.history: dict | None = decode(hist.read_bytes(), what="history") if hist.exists() else None
        #: each account's last counter of the earlier windows (counters carry over, §3.1)
        self._carried: dict[str, int] = dict(self.history["carry"]["counters"]) if self.history else {}

    def _algorithm(self, tenant: str, source: RandomSource, retriever: _TenantRetriever):
        """MuRAG / MuRAG-Ada for one request, drawing from that request's committed-seed stream: a shallow copy of the
        tenant's algorithm (built and checked once) with the request's scores view and stream, the only per-request
        state the algorithms hold (they write none of their own after __init__)."""
        ten = self.tenants[tenant]
        algo = copy.copy(ten.get("algorithm") or ten.setdefault("algorithm", self._new_algorithm(tenant, retriever)))
        algo.retriever, algo.source = retriever, source
        return algo

    def _new_algorithm(self, tenant: str, retriever: _TenantRetriever, source: RandomSource | None = None):
        ten, g = self.tenants[tenant], self.policy.generation
        if g.algorithm == "murag":
            return MuRAG(
                retriever,
                self.generator,
                ten["filter"],
                self.rag_params,
                tau=g.tau,
                retrieval=RetrievalParams(g.docs_per_voter),
                source=source,
            )
        return MuRAGAda(
            retriever,
            self.generator,
            ten["filter"],
            self.rag_params,
            edges=g.edges,
            epsilon_thr=g.epsilon_thr,
            retrieval=RetrievalParams(g.docs_per_voter),
            source=source,
        )

    def close(self) -> None:
        self.store.close()

    # -- Phase B ---------------------------------------------------------------------------------------------
    def _refuse(self, exc: RequestError | RateLimitError, signed) -> RequestError | RateLimitError:
        """Attach the signed refusal (§5.1: decided before anything was embedded, charged or recorded; the
        counter is not consumed) to ``exc``; a request too malformed to name (no h_req) gets none."""
        try:
            h = request_hash(signed).hex() if isinstance(signed, dict) else None
        except Exception:  # noqa: BLE001 - an unencodable request has no name to refuse
            h = None
        if h is not None:
            body = refusal_body(window=self.policy.window, h_req=h, field=exc.field, rule=exc.rule)
            exc.refusal = sign_refusal(body, self.signer)
        return exc

    def _embed(self, req: Request) -> np.ndarray:
        if req.qemb is not None:
            return np.frombuffer(req.qemb, dtype="<i2").copy()
        q_query = cm.quantise_embeddings(
            np.asarray(self.embedder.embed([req.question]))[0:1], self.embedder_descriptor["embedding_scale"]
        )[0]
        if q_query.shape[0] != self.tenants[self.accounts[req.account]["tenant"]]["q"].shape[1]:
            raise ServiceStateError("query embedding dimension differs from the index")
        return q_query

    def _admit(self, req: Request, h_req: str) -> tuple[str, dict | None]:
        """("served", stored) for a request already answered, ("recorded", record) for one charged and recorded
        whose answer is not stored yet, ("new", None) for one that may be served now; raises the refusal (counter,
        rate) otherwise. Reads only: run before the write transaction (to refuse early) and again inside it.
        ``h_req``: the request's hash (hex)."""
        acct, counter = req.account, req.signed["counter"]
        size, last_leaf, prior, recorded_last = self.aud.admission(acct, counter)  # one statement
        if self._closed((size, last_leaf)):
            raise RequestError("request.window", f"window {self.policy.window} is closed: send it to its successor")
        if prior is not None:
            old = decode(prior, what="served")
            if old["h_req"] != h_req:
                raise RequestError(
                    "request.counter", f"{counter} was already used by another request (a client signs one per counter)"
                )
            return ("served" if old.get("served") else "recorded"), old
        last = max(recorded_last, self._carried.get(acct, 0))
        if counter <= self._carried.get(acct, 0):
            raise RequestError("request.counter", f"{counter} was used in an earlier window (counters carry over)")
        if counter <= last:
            raise ServiceStateError(f"counter {counter} of {acct!r} is below its last recorded {last} but not served")
        if counter > self.policy.retrieval.n:
            raise RateLimitError(
                f"account {acct!r} has used its {self.policy.retrieval.n} queries of window {self.policy.window}"
            )
        if counter != last + 1:
            raise RequestError("request.counter", f"must be the next counter {last + 1} (gapless)", counter)
        return "new", None

    def serve(self, req: Request) -> ServedQuery:
        """Serve one account-signed request (spec/protocol.md §5). Safe from many threads at once.

        Every refusal (request, question size in tokens, counter, rate) is decided before anything is embedded,
        charged or recorded, and carries a signed refusal (``exc.refusal``; the counter is not consumed). A retry of
        the same signed request returns the stored answer's bytes; if the request was charged and recorded but its
        answer was never stored (the generator failed, the process died), the retry generates it from the recorded
        selection — never re-selecting against the current filter — and stores it before returning it. A failure
        after the charge is ``AnswerPendingError`` (nothing released; retry the same request); a store that stays
        unreachable through ``STORE_ATTEMPTS`` tries is ``StoreUnavailableError`` (nothing committed, or the retry
        finds what was)."""
        t0 = time.monotonic()
        signed = getattr(req, "signed", None)
        try:
            tenant = check_request(self, req)
            h_req = request_hash(signed)  # once per request: its canonical encoding is not cheap
            state, stored = self._with_retries(self._admit, req, h_req.hex())
        except (RequestError, RateLimitError) as e:
            raise self._refuse(e, signed) from None  # decided from the request and public quantities only
        try:
            return self._serve_admitted(req, h_req, tenant, state, stored)
        finally:
            self.release.hold(t0)  # constant-time release, when set (audit/provider/release.py)

    def _grouped(self, committer: GroupCommitter, write_batch, item: tuple):
        """``write_batch([item])[0]`` in one batch with others (group_commit.py), or alone if that fails."""
        if not self.store.in_transaction:  # a caller's open transaction is not a batch's to commit
            with contextlib.suppress(BatchFailed):  # that batch did not commit: this item runs alone
                return committer.commit(item)
        return self._with_retries(write_batch, [item])[0]

    def _with_retries(self, fn, *args):
        """``fn(*args)``, again after a StoreUnavailableError (each try is one transaction, rolled back on failure;
        every caller's retry is idempotent), with backoff 0.05 s doubling; the last failure is raised."""
        pause = 0.05
        for attempt in range(STORE_ATTEMPTS):
            try:
                return fn(*args)
            except StoreUnavailableError:
                if attempt == STORE_ATTEMPTS - 1:
                    raise
                time.sleep(pause)
                pause = min(2 * pause, 2.0)

    def _serve_admitted(self, req: Request, h_req: bytes, tenant: str, state: str, stored) -> ServedQuery:
        if state == "served":
            return ServedQuery(**stored["served"])
        if state == "new":
            q_query = self._embed(req)  # after every refusal: retries and over-limit requests are never embedded
            # the scores and the retrieval channel depend on Q, the index and s_W only (never on the filter): computed
            # before the transaction, so the tail lock is held for the charge and the records alone
            prepared = self._prepare(req, tenant, q_query)
            try:
                state, stored = self._grouped(self._records, self._record_batch, (req, h_req, tenant, prepared))
                if state == "refused":
                    raise stored
            except (RequestError, RateLimitError) as e:
                raise self._refuse(e, getattr(req, "signed", None)) from None
            if state == "served":
                return ServedQuery(**stored["served"])
            if state == "fresh":  # recorded by this call: finished from what it wrote, nothing read back
                return self._finish(stored["record"], {**stored, "h_req": h_req, "view": prepared[1]})
        return self._finish(stored)

    def _prepare(self, req: Request, tenant: str, q_query: np.ndarray) -> tuple:
        """§5.3 steps 3 and 5: the exact scores (the request's view of the index) and the retrieval channel's
        noise-then-select top-K (None where the tenant's citations are off)."""
        qb = cm.embedding_bytes(q_query)
        retriever = self.tenants[tenant]["retriever"].for_query(req.question, q_query)
        r, top = self.policy.retrieval, None
        if tenant in r.enabled_tenants:
            scores = retriever.scores(req.question)
            z = self.table.sample(len(scores), retrieval_source(self.seed, tenant, qb))
            top = [int(i) for i in noisy_top_k(scores, z, r.K)]  # noise first, then select
        return qb, retriever, top

    def _record_batch(self, items: list[tuple]) -> list[tuple[str, object]]:
        """One write transaction for ``items`` = [(req, h_req, tenant, prepared), ...], in order: each admitted again
        (it may be served by now), then recorded (§5.3 steps 2, 4, 6). Per item: ("fresh", {"record", "opening",
        "bytes"}: what it wrote), ("served" | "recorded", stored) or ("refused", the refusal; nothing written)."""
        out: list[tuple[str, object]] = []
        # not durable: its commit need not wait for the disk, since nothing depending on it is released before the
        # answer's commit (``_finish``), which is durable and so makes this one durable too (spec/provider.md §6)
        with self.store.write(durable=False):
            for req, h_req, tenant, prepared in items:
                try:
                    state, stored = self._admit(req, h_req.hex())  # reads only
                except (RequestError, RateLimitError) as e:
                    state, stored = "refused", e
                fresh = state == "new"
                out.append(("fresh", self._record(req, h_req, tenant, *prepared)) if fresh else (state, stored))
        return out

    def _closed(self, tail: tuple[int, bytes | None] | None = None) -> bool:
        """Whether the ledger (or the one of ``tail``: its size and last leaf) ends in the close leaf."""
        size, last = self.ledger.tail() if tail is None else tail  # one statement: the size and the last leaf
        return size > 1 and last is not None and json.loads(last).get("type") == "close"

    # -- one history per corpus (§3.1) ------------------------------------------------------------------------
    @property
    def chain_id(self) -> str:
        """The history's name (hex H(the first window's genesis)): what auditors and clients pin."""
        from ..protocol.chain import chain_id

        return self.history["chain"] if self.history else chain_id(self.ledger.leaf(0))

    @property
    def epoch(self) -> int:
        return int(self.history["epoch"]) if self.history else 0

    def next_window(self, directory: str | os.PathLike, **kw) -> ProviderService:
        """Close this window and open its successor (``succession.next_window``, spec/protocol.md §3.1)."""
        from .succession import next_window

        return next_window(self, directory, **kw)

    def _spent(self, tenant: str) -> np.ndarray:
        ten = self.tenants[tenant]
        return ten["filter"].spent_units(np.arange(len(ten["retriever"])))[:, 0].astype(np.int64)

    def _record(
        self, req: Request, h_req: bytes, tenant: str, qb: bytes, retriever: _TenantRetriever, top: list | None
    ) -> dict:
        """§5.3 steps 4 and 6 inside the request's write transaction: the selection and its charge, the opening,
        the query leaf and the served-table row (answer not yet stored). All or nothing. Returns {"record", "opening",
        "bytes"}: the served-table record, the opening and the served row's bytes."""
        acct, counter = req.account, req.signed["counter"]
        pos = self.ledger.size  # under the tail lock (read once per transaction, ``audit.provider.storage``)
        ten = self.tenants[tenant]
        algo = self._algorithm(tenant, request_source(self.seed, "select", h_req), retriever)
        selection: Selection = algo.select(req.question)  # the filter's charges, in this transaction
        charge = self._charge_opening(ten["filter"], selection)
        record, opening = self._append_query(pos, req.signed, qb, top, charge, h_req)
        record["question"] = req.question  # provider-private: a retry finishes the answer from it
        body = encode(record)
        self.aud.put_served(acct, counter, pos, body)
        return {"record": record, "opening": opening, "bytes": body}

    def _append_query(self, pos: int, signed: dict, qb: bytes, top: list | None, charge: dict, h_req: bytes) -> tuple:
        """The opening and the query leaf (§5.3 step 6); returns the served-table record of the request (what a retry
        needs to finish it) and the opening."""
        nonce = secrets.token_bytes(16)
        h_top = top_commitment(top or [], nonce)  # always present: the empty list where citations are off
        opening = {
            "pos": pos,
            "kind": "query",
            "request": signed,
            "qemb": qb.hex(),
            "top": top,
            "nonce_top": nonce.hex(),
            "charge": charge,
        }
        self.aud.put_opening(pos, encode(opening))
        leaf = encode({"type": "query", "h_req": h_req.hex(), "h_top": h_top, "h_charge": digest(charge)})
        got = self.ledger.append(leaf)
        if got != pos:
            raise ServiceStateError(f"ledger position moved inside the transaction ({got} != {pos})")
        return self.served_row(pos, signed, leaf, nonce.hex(), top, h_req=h_req), opening

    def served_row(
        self, pos: int, signed: dict, leaf: bytes, nonce_top: str, top: list | None, *, h_req: bytes | None = None
    ) -> dict:
        """The served-table row of a recorded request, its answer not yet stored: the ledger position, the receipt
        body's fields that the leaf fixes (the checkpoint is signed after the commit, ``_finish``), the citations.
        ``h_req``: the request's hash, if the caller has it."""
        h_req_hex = (request_hash(signed) if h_req is None else h_req).hex()
        body = receipt_body(
            window=self.policy.window,
            account=signed["account"],
            tenant=self.accounts[signed["account"]]["tenant"],
            counter=signed["counter"],
            h_req=h_req_hex,
            h_top=json.loads(leaf)["h_top"],
            nonce_top=nonce_top,
            h_answer="0" * 64,
            pos=pos,
            leaf_hash=hash_leaf(leaf).hex(),
            size=pos + 1,
            root="0" * 64,
        )
        return {"h_req": h_req_hex, "pos": pos, "receipt_body": body, "top": top, "served": None}

    def _finish(self, record: dict, fresh: dict | None = None) -> ServedQuery:
        """Generate the answer of a recorded (committed) request from its recorded selection, sign its receipt at a
        checkpoint of committed state, store it (the first stored answer wins: concurrent retries, in any process,
        all return the same bytes), and return it. Runs outside any transaction: generation is the long part.

        ``fresh``: for a request this call recorded, what its committed transaction wrote ("opening", "bytes": the
        served row) and "h_req", "view" (the request's exact scores); a retry reads the opening instead."""
        pos, fresh = record["pos"], fresh or {}
        op = fresh.get("opening") or decode(self.aud.opening(pos) or b"null", what="opening")
        if not isinstance(op, dict) or op.get("pos") != pos:
            raise ServiceStateError(f"no opening stored for ledger position {pos}")
        signed = op["request"]
        acct, counter = signed["account"], signed["counter"]
        tenant = self.accounts[acct]["tenant"]
        ten = self.tenants[tenant]
        h_req = fresh.get("h_req") or request_hash(signed)
        question = record.get("question")
        if question is None:
            raise ServiceStateError(f"the question of ledger position {pos} was not kept")
        if fresh.get("view") is not None:  # the same exact integer scores (float_exact_scores == integer_scores, §4)
            scores = fresh["view"].scores(question)
        else:
            q_query = np.frombuffer(bytes.fromhex(op["qemb"]), dtype="<i2")
            scores = cm.integer_scores(
                ten["q"], q_query, self.policy.retrieval.score_clip, self.policy.retrieval.score_shift
            )
        top = recorded_top(self.policy, op, scores)
        try:
            ans = self._generate(question, top, ten["retriever"], h_req)
        except Exception as e:  # noqa: BLE001 - any failure after the charge: nothing released, one outcome for all
            raise AnswerPendingError(pos, cause=type(e).__name__) from None
        item = (record, ans.text, acct, counter, fresh.get("bytes"))  # with the answers finished meanwhile
        kept, served, mine = self._grouped(self._answers, self._store_answers, item)
        if kept is mine:  # ours was stored: the served answer is what those bytes encode
            return served
        return ServedQuery(**decode(kept, what="served")["served"])

    def _store_answers(self, items: list[tuple]) -> list[tuple[bytes, ServedQuery, bytes]]:
        """One transaction without the tail lock (no ledger row): the checkpoint of the committed head (N > each pos),
        each answer with its receipt at it (the first stored answer wins). Per item (record, answer, account, counter,
        the row's bytes if known): (the stored bytes, our served answer, our bytes)."""
        out = []
        with self.store.write(tail=False):
            size, root = self.ledger.head()  # read once: the note and every receipt carry the same root
            self.aud.put_checkpoint(size, sign_checkpoint(Checkpoint(self.origin, size, root, ()), self.signer))
            for record, text, acct, counter, expect in items:
                if not size > record["pos"]:
                    raise ServiceStateError(f"ledger position {record['pos']} is not below the committed size {size}")
                h_answer = hashlib.sha256(text.encode("utf-8")).hexdigest()
                body = {**record["receipt_body"], "h_answer": h_answer, "size": size, "root": root.hex()}
                served = ServedQuery(text, record["top"], sign_receipt(body, self.signer), record["pos"])
                mine = encode({**record, "served": served.to_dict()})
                kept = self.aud.store_answer(acct, counter, mine, unless_stored=_has_answer, expect=expect)
                out.append((kept, served, mine))
        return out

    # -- internals -------------------------------------------------------------------------------------------
    def _checkpoint(self) -> tuple[int, bytes]:
        """Sign a checkpoint of the committed ledger (its current size) and keep it; never inside a write
        transaction, so what is signed is committed (Ed25519 is deterministic: two replicas signing one size write
        the same note)."""
        if self.store.in_transaction:
            raise ServiceStateError("a checkpoint is signed over committed state only (outside a write transaction)")
        with self.store.snapshot():
            size = self.ledger.size
            root = self.ledger.root(size)
        self.aud.put_checkpoint(size, self.ledger.checkpoint(self.signer, self.origin, size=size))
        return size, root

    def _charge_opening(self, flt: IndividualRenyiFilter, selection: Selection) -> dict:
        charges = []
        for event, ids in selection.charges:
            # what the filter counted: the ε part of an (ε, δ) cost (its δ is per charge, outside the filter)
            units = int(flt.cost_units(filter_charge(event)[0])[0])
            charges.append(
                {"cost": {"kind": "pure", "epsilon_units": units}, "ids": sorted(int(i) for i in np.asarray(ids))}
            )
        return {
            "nonce": secrets.token_hex(16),
            "algorithm": self.policy.generation.algorithm,
            "bins_released": selection.info.get("bins_released"),
            "charges": charges,
        }

    def _generate(self, question: str, top: np.ndarray, retriever, h_req: bytes):
        """§5.3 step 7: the answer from the recorded selection's documents ``top``, drawn from the request's
        committed ``generate`` stream only."""
        return self.rag_params.respond(
            question, top, retriever, self.generator, source=request_source(self.seed, "generate", h_req)
        )

    def export_bundle(self, out: str | os.PathLike) -> Path:
        """Write the bundle (``bundle_export.export_bundle``, spec/protocol.md §7)."""
        from .export import export_bundle

        return export_bundle(self, out)

    def attest(self, proving_key, *, tenant: str | None = None) -> int:
        """Prove noise-then-select (Groth16) for the zk tenants' unproven queries with the proving key the AUDITOR
        made; the proofs go into the bundle (``attest.attest_window``). Returns the count."""
        from .attest import attest_window

        return attest_window(self, proving_key, tenant=tenant)

    def consistency(self, size1: int, size2: int | None = None) -> dict:
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
        """Keep a witness-cosigned copy of one of this window's checkpoints (it replaces the stored note)."""
        from ..protocol.ledger import open_checkpoint

        cp, _ = open_checkpoint(cosigned, self.origin, self.signer.verifier())
        if cp.size > self.ledger.size or self.ledger.root(cp.size) != cp.root:
            raise InvalidParameterError("cosigned", "is not a checkpoint of this ledger")
        self.aud.put_checkpoint(cp.size, bytes(cosigned), replace=True)
