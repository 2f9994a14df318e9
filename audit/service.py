"""The provider: a multi-tenant RAG service that records everything its audit needs (spec/protocol.md).

``ProviderService.create(directory, ...)`` opens an audit window (Phase A: seed, salts, commitments, the
account registry, genesis leaf); ``ProviderService.open(directory, ...)`` resumes one (after a restart or a
crash: recovery, §5.5); ``serve(request)`` serves one account-signed request (Phase B, §5; accounts build
requests with ``audit.account.AccountClient``); ``export_bundle(out)`` writes the bundle (§7).

Several processes may serve from the same directory at once: each opens its own ``ProviderService``; the
selection-and-append section of a query runs under an exclusive file lock, so the ledger order is the order
in which the per-document filters saw the charges; generation runs outside the lock.

State layout of ``directory`` (all of it provider-private; the bundle is what leaves it):
``secret/seed.hex`` s_W, ``secret/provider.skey`` the Ed25519 note key, ``secret/salts.json`` the policy and
document salts; ``config/{policy,embedder,tenants,accounts}.json``; ``index/<tenant>.i16`` quantised
embeddings; ``docs/<tenant>.json`` document ids and texts; ``state/ledger.sqlite`` (SqliteLog),
``state/auditor.sqlite`` (openings, checkpoints, served receipts, the pending request),
``state/budget-<tenant>.sqlite`` (per-document filters), ``state/lock``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dprag.accounting.errors import BudgetExhaustedError, DpragError, InvalidParameterError
from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.protocols import Generator
from dprag.accounting.rag.mechanism import filter_charge
from dprag.accounting.rag.multi_query import MuRAG, MuRAGAda, RetrievalParams, Selection
from dprag.accounting.stores import SqliteBudgetStore

from . import commitments as cm
from .account import Request, qemb_commitment, question_commitment, request_hash, verify_request
from .auditor_store import AuditorStore
from .charges import ChargeRule, expected_charges
from .encoding import decode, digest, encode
from .ledger import NoteSigner, SqliteLog
from .ledger.rfc6962 import hash_leaf
from .policy import Policy
from .receipts import receipt_body, sign_receipt
from .retrieval import float_exact_scores, noise_table, noisy_top_k, request_source, top_commitment
from .serving_models import TextEmbedder, as_embedder, prompt_template_of, serving_generator

_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_QUESTION_CHARS = 4096


class RateLimitError(BudgetExhaustedError):
    """The account has used all n queries of the window (nothing was recorded or spent)."""


class RequestError(InvalidParameterError):
    """A request was refused before anything was recorded or spent (signature, window, counter, question)."""


class ServiceStateError(DpragError):
    """The service directory is inconsistent (e.g. a budget store holds less spend than the ledger)."""


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
    if not isinstance(value, str) or not _ID_RE.fullmatch(value):
        raise InvalidParameterError(field, "must be 1-64 characters of [A-Za-z0-9_.-]", value)
    return value


class _TenantRetriever:
    """accounting.protocols.Retriever over the exact integer scores of the current query (§4)."""

    def __init__(self, documents: list[str], q_docs: np.ndarray, clip, shift):
        self.docs = documents
        self.q_docs_f64 = q_docs.astype(np.float64)
        self.clip, self.shift = tuple(clip), int(shift)
        self._current: tuple[str, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.docs)

    def score_query(self, question: str, q_query: np.ndarray) -> np.ndarray:
        s = float_exact_scores(self.q_docs_f64, q_query, self.clip, self.shift)
        self._current = (question, s)
        return s

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
        """
        policy.validate().check_claims()
        embedder = as_embedder(embedder)
        generator = serving_generator(policy, generator)
        d = Path(directory)
        if (d / "state" / "ledger.sqlite").exists():
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
            registry[a] = (t, key)
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
                "must be an audit.commitments.EmbedderDescriptor",
                type(embedder_descriptor).__name__,
            )
        scale = embedder_descriptor.embedding_scale
        qidx = {}
        for t, (_ids, texts) in sorted(corpora.items()):
            e = np.asarray(embedder.embed(list(texts)))
            if e.shape != (len(texts), embedder_descriptor.dimension):
                raise InvalidParameterError(
                    "embedder", f"returned shape {e.shape}, expected ({len(texts)}, {embedder_descriptor.dimension})"
                )
            qidx[t] = cm.quantise_embeddings(e, scale)
        seed = cm.new_seed() if seed is None else seed
        origin = origin or f"dprag/{policy.window}"
        signer = signer or NoteSigner.generate(re.sub(r"[^A-Za-z0-9_.-]", "-", origin)[:64] or "dprag")
        salts = {
            "policy": cm.new_salt().hex(),
            "documents": {t: [cm.new_salt().hex() for _ in ids] for t, (ids, _) in corpora.items()},
        }
        for sub in ("secret", "config", "index", "docs", "state"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        _write(d / "secret" / "seed.hex", seed.hex().encode(), private=True)
        _write(d / "secret" / "provider.skey", signer.skey().encode(), private=True)
        _write(d / "secret" / "salts.json", encode(salts), private=True)
        _write(d / "config" / "policy.json", policy.to_bytes())
        _write(d / "config" / "embedder.json", encode(embedder_descriptor.to_dict()))
        _write(d / "config" / "accounts.json", encode({a: {"tenant": t, "key": k} for a, (t, k) in registry.items()}))
        _write(d / "config" / "meta.json", encode({"origin": origin}))
        tenant_meta = {}
        for t, q in qidx.items():
            ids, texts = corpora[t]
            _write(d / "index" / f"{t}.i16", cm.embedding_bytes(q))
            _write(d / "docs" / f"{t}.json", encode({"ids": ids, "texts": texts}))
            doc_salts = [bytes.fromhex(x) for x in salts["documents"][t]]
            tenant_meta[t] = (
                len(texts),
                cm.index_commitment(q),
                cm.documents_commitment(doc_salts, ids, [cm.text_hash(x) for x in texts]),
            )
        _write(
            d / "config" / "tenants.json",
            encode({t: {"n_docs": n, "dimension": int(qidx[t].shape[1])} for t, (n, _, _) in tenant_meta.items()}),
        )
        c_policy = cm.policy_commitment(bytes.fromhex(salts["policy"]), policy.to_bytes())
        zk = {}
        if policy.retrieval.zk_tenants:
            from . import zk_attest

            for t in policy.retrieval.zk_tenants:
                if qidx[t].shape[0] > zk_attest.MAX_ZK_DOCS:
                    raise InvalidParameterError(
                        "retrieval.zk_tenants", f"tenant {t} holds more than {zk_attest.MAX_ZK_DOCS} documents"
                    )
                zk[t] = zk_attest.index_commitment(qidx[t])
        genesis = cm.genesis_record(
            policy.window,
            signer.vkey(),
            embedder_descriptor.commitment,
            c_policy,
            cm.seed_commitment(seed),
            tenant_meta,
            registry,
            zk,
        )
        svc = cls(d, embedder=embedder, generator=generator)
        with svc._locked():
            if svc.ledger.size != 0:
                raise ServiceStateError("a fresh ledger is not empty")
            svc.ledger.append(encode(genesis))
            svc._checkpoint()
        return svc

    @classmethod
    def open(cls, directory, *, embedder: TextEmbedder | str, generator: Generator) -> ProviderService:
        """Resume a window: account for a request that was charged but never recorded (recovery), then serve."""
        svc = cls(Path(directory), embedder=embedder, generator=generator)
        with svc._locked():
            svc._recover()
        return svc

    def __init__(self, d: Path, *, embedder: TextEmbedder, generator: Generator):
        """Every random choice of serving comes from the committed seed and the signed request (§5.2)."""
        if not (d / "config" / "policy.json").exists():
            raise InvalidParameterError("directory", "is not a dprag service directory", str(d))
        self.dir = d
        self.policy = Policy.from_dict(decode((d / "config" / "policy.json").read_bytes(), what="policy")).validate()
        self.embedder, self.generator = as_embedder(embedder), serving_generator(self.policy, generator)
        self.embedder_descriptor = decode((d / "config" / "embedder.json").read_bytes(), what="embedder")
        self.accounts: dict[str, dict] = decode((d / "config" / "accounts.json").read_bytes(), what="accounts")
        self.origin = decode((d / "config" / "meta.json").read_bytes())["origin"]
        self.seed = bytes.fromhex((d / "secret" / "seed.hex").read_text())
        self.signer = NoteSigner.from_skey((d / "secret" / "provider.skey").read_text())
        tenants = decode((d / "config" / "tenants.json").read_bytes(), what="tenants")
        r, g = self.policy.retrieval, self.policy.generation
        self.ledger = SqliteLog(d / "state" / "ledger.sqlite")
        self.aud = AuditorStore(d / "state" / "auditor.sqlite")
        self._lockfile = open(d / "state" / "lock", "a+b")
        self.policy.check_claims()  # the committed sampler TV must bound the table's real one
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
            flt = IndividualRenyiFilter(SqliteBudgetStore(d / "state" / f"budget-{t}.sqlite", len(docs)), self.budget)
            self.tenants[t] = {"q": q, "retriever": retr, "filter": flt}
        self._counters: dict[str, int] = {}
        self._seen = 0

    def _algorithm(self, tenant: str, source: RandomSource):
        """MuRAG / MuRAG-Ada for one request, drawing from that request's committed-seed stream."""
        ten, g = self.tenants[tenant], self.policy.generation
        if g.algorithm == "murag":
            return MuRAG(
                ten["retriever"],
                self.generator,
                ten["filter"],
                self.rag_params,
                tau=g.tau,
                retrieval=RetrievalParams(g.docs_per_voter),
                source=source,
            )
        return MuRAGAda(
            ten["retriever"],
            self.generator,
            ten["filter"],
            self.rag_params,
            edges=g.edges,
            epsilon_thr=g.epsilon_thr,
            retrieval=RetrievalParams(g.docs_per_voter),
            source=source,
        )

    def close(self) -> None:
        self.ledger.close()
        self.aud.close()
        for t in self.tenants.values():
            t["filter"].store.close()
        self._lockfile.close()

    # -- Phase B ---------------------------------------------------------------------------------------------
    def _check_request(self, req: Request) -> tuple[str, np.ndarray]:
        """§5.1: everything about a request that is checked before anything is recorded or spent."""
        if not isinstance(req, Request):
            raise RequestError("request", "must be an audit.account.Request")
        signed = req.signed
        acct = signed.get("account") if isinstance(signed, dict) else None
        if acct not in self.accounts:
            raise RequestError("request.account", "is not registered in this window's genesis", acct)
        try:
            verify_request(signed, self.accounts[acct]["key"])
        except Exception as e:  # EncodingError: a malformed or forged request
            raise RequestError("request", str(e)) from None
        if signed["window"] != self.policy.window:
            raise RequestError("request.window", f"must be {self.policy.window!r}", signed["window"])
        q = req.question
        if not isinstance(q, str) or not q.strip():
            raise RequestError("question", "must be a non-empty string")
        if len(q) > MAX_QUESTION_CHARS:
            raise RequestError("question", f"must be at most {MAX_QUESTION_CHARS} characters", len(q))
        nonce = bytes.fromhex(signed["nonce"])
        if question_commitment(nonce, q) != signed["h_q"]:
            raise RequestError("question", "does not match the request's h_q")
        tenant = self.accounts[acct]["tenant"]
        dim = self.tenants[tenant]["q"].shape[1]
        if req.qemb is not None:
            if signed["h_qemb"] is None or qemb_commitment(nonce, req.qemb) != signed["h_qemb"]:
                raise RequestError("qemb", "does not match the request's h_qemb")
            if len(req.qemb) != 2 * dim:
                raise RequestError("qemb", f"must be {dim} int16 values", len(req.qemb))
            q_query = np.frombuffer(req.qemb, dtype="<i2").copy()
        else:
            if signed["h_qemb"] is not None:
                raise RequestError("qemb", "the request commits to a query embedding but none was sent")
            q_query = cm.quantise_embeddings(
                np.asarray(self.embedder.embed([q]))[0:1], self.embedder_descriptor["embedding_scale"]
            )[0]
            if q_query.shape[0] != dim:
                raise ServiceStateError("query embedding dimension differs from the index")
        return tenant, q_query

    def serve(self, req: Request) -> ServedQuery:
        """Serve one account-signed request (spec/protocol.md §5). Raises before recording or spending on bad
        input. A retry of a request already served returns the same outputs and receipt (nothing new is
        drawn, recorded or spent)."""
        tenant, q_query = self._check_request(req)
        acct, counter = req.account, req.signed["counter"]
        r = self.policy.retrieval
        ten = self.tenants[tenant]
        h_req = req.h_req
        with self._locked():
            prior = self.aud.served(acct, counter)
            if prior is not None:
                old = decode(prior, what="served")
                if old["h_req"] != h_req.hex():
                    raise RequestError("request.counter", f"{counter} was already used by another request")
                return ServedQuery(**old["served"])
            self._refresh_counters()
            last = self._counters.get(acct, 0)
            if counter <= last:
                raise RequestError(
                    "request.counter",
                    f"{counter} was already recorded (not released: send the next counter, {last + 1})",
                )
            if counter > r.n:
                raise RateLimitError(f"account {acct!r} has used its {r.n} queries of window {self.policy.window}")
            if counter != last + 1:
                raise RequestError("request.counter", f"must be the next counter {last + 1} (gapless)", counter)
            pos = self.ledger.size
            pending = encode({"request": req.signed, "qemb": cm.embedding_bytes(q_query).hex()})
            self.aud.set_pending(pending)  # durable before any charge: recovery knows what was being served
            scores = ten["retriever"].score_query(req.question, q_query)
            top = nonce_top = h_top = None
            if tenant in r.enabled_tenants:
                z = self.table.sample(len(scores), request_source(self.seed, "retrieval", h_req))
                top = noisy_top_k(scores, z, r.K)  # noise first, then select
                nonce = secrets.token_bytes(16)
                nonce_top, h_top = nonce.hex(), top_commitment(top, nonce)
            algo = self._algorithm(tenant, request_source(self.seed, "select", h_req))
            selection: Selection = algo.select(req.question)  # durable filter charges
            charge = self._charge_opening(ten["filter"], selection)
            opening = {
                "pos": pos,
                "kind": "query",
                "request": req.signed,
                "qemb": cm.embedding_bytes(q_query).hex(),
                "top": None if top is None else [int(i) for i in top],
                "nonce_top": nonce_top,
                "charge": charge,
            }
            self.aud.put_opening(pos, encode(opening))
            leaf = encode(
                {
                    "type": "query",
                    "account": acct,
                    "tenant": tenant,
                    "counter": counter,
                    "h_req": h_req.hex(),
                    "h_top": h_top,
                    "h_charge": digest(charge),
                }
            )
            got = self.ledger.append(leaf)
            if got != pos:
                raise ServiceStateError(f"ledger position moved under the lock ({got} != {pos})")
            self.aud.set_pending(None)
            self._counters[acct] = counter
            self._seen = pos + 1
            size, root = self._checkpoint()
        ans = self._answer(algo, req.question, selection, h_req)
        body = receipt_body(
            window=self.policy.window,
            account=acct,
            tenant=tenant,
            counter=counter,
            h_req=h_req.hex(),
            h_top=h_top,
            nonce_top=nonce_top,
            h_answer=hashlib.sha256(ans.text.encode("utf-8")).hexdigest(),
            pos=pos,
            leaf_hash=hash_leaf(leaf).hex(),
            size=size,
            root=root.hex(),
        )
        served = ServedQuery(
            answer=ans.text,
            citations=None if top is None else [int(i) for i in top],
            receipt=sign_receipt(body, self.signer),
            pos=pos,
        )
        self.aud.put_served(acct, counter, encode({"h_req": h_req.hex(), "served": served.to_dict()}))
        return served

    # -- internals -------------------------------------------------------------------------------------------
    def _answer(self, algo, question: str, selection: Selection, h_req: bytes):
        """§5.3 step 7: the answer, drawn from the request's committed ``generate`` stream only."""
        algo.source = request_source(self.seed, "generate", h_req)
        return algo.respond(question, selection)

    @contextmanager
    def _locked(self):
        fcntl.flock(self._lockfile.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lockfile.fileno(), fcntl.LOCK_UN)

    def _checkpoint(self) -> tuple[int, bytes]:
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

    def _refresh_counters(self) -> None:
        size = self.ledger.size
        if self._seen == 0 and size:
            self._seen = 1  # leaf 0 is the genesis record
        for raw in self.ledger.leaves(self._seen, size):
            rec = json.loads(raw)
            if rec.get("type") in ("query", "recovery"):
                self._counters[rec["account"]] = max(self._counters.get(rec["account"], 0), rec["counter"])
        self._seen = size

    def _replayed_units(self) -> dict[str, np.ndarray]:
        size = self.ledger.size
        tenant_of: dict[int, str] = {}
        for i, raw in enumerate(self.ledger.leaves(0, size)):
            rec = json.loads(raw)
            if rec.get("type") in ("query", "recovery"):
                tenant_of[i] = rec["tenant"]
        spent = {t: np.zeros(len(v["retriever"]), dtype=np.int64) for t, v in self.tenants.items()}
        for pos, body in self.aud.openings(size):
            if pos not in tenant_of:
                continue
            op = json.loads(body)
            for ch in op["charge"]["charges"]:
                if ch["ids"]:
                    spent[tenant_of[pos]][np.asarray(ch["ids"], dtype=np.int64)] += ch["cost"]["epsilon_units"]
        return spent

    def _recover(self) -> None:
        """§5.5: a request charged but never recorded gets a recovery leaf naming it and its exact charges.

        Spend never goes down: a store holding less than the ledger, or more than the pending request explains,
        is a ServiceStateError (the service refuses to serve rather than write a refund or an unexplained charge).
        """
        replayed = self._replayed_units()
        stored = {
            t: ten["filter"].spent_units(np.arange(len(ten["retriever"])))[:, 0].astype(np.int64)
            for t, ten in self.tenants.items()
        }
        for t in self.tenants:
            if np.any(stored[t] < replayed[t]):
                bad = np.flatnonzero(stored[t] < replayed[t])[:5].tolist()
                raise ServiceStateError(f"tenant {t}: budget store holds less spend than the ledger for docs {bad}")
        raw = self.aud.pending()
        diff_any = any(np.any(stored[t] > replayed[t]) for t in self.tenants)
        if raw is None:
            if diff_any:
                raise ServiceStateError("budget stores hold spend that no ledger record or pending request explains")
            return
        pend = decode(raw, what="pending request")
        signed = pend["request"]
        acct = signed["account"]
        tenant = self.accounts[acct]["tenant"]
        h_req = request_hash(signed)
        self._refresh_counters()
        if self._counters.get(acct, 0) >= signed["counter"]:
            self.aud.set_pending(None)  # it reached the ledger before the crash
            if diff_any:
                raise ServiceStateError("budget stores hold spend that no ledger record explains")
            return
        if not diff_any:
            self.aud.set_pending(None)  # nothing was charged: a retry of the same request is served afresh
            return
        r = self.policy.retrieval
        q_query = np.frombuffer(bytes.fromhex(pend["qemb"]), dtype="<i2")
        scores = cm.integer_scores(self.tenants[tenant]["q"], q_query, r.score_clip, r.score_shift)
        charges, bins = expected_charges(
            self.policy, self.rule, scores, replayed[tenant], request_source(self.seed, "select", h_req)
        )
        explained = replayed[tenant].copy()
        for units, ids in charges:
            explained[ids] += units
        if not np.array_equal(explained, stored[tenant]) or any(
            np.any(stored[u] != replayed[u]) for u in self.tenants if u != tenant
        ):
            raise ServiceStateError("budget stores differ from the ledger by more than the pending request's charges")
        charge = {
            "nonce": secrets.token_hex(16),
            "algorithm": self.policy.generation.algorithm,
            "bins_released": bins,
            "charges": [
                {"cost": {"kind": "pure", "epsilon_units": int(u)}, "ids": [int(i) for i in ids]} for u, ids in charges
            ],
        }
        pos = self.ledger.size
        self.aud.put_opening(
            pos,
            encode(
                {
                    "pos": pos,
                    "kind": "recovery",
                    "request": signed,
                    "qemb": pend["qemb"],
                    "top": None,
                    "nonce_top": None,
                    "charge": charge,
                }
            ),
        )
        self.ledger.append(
            encode(
                {
                    "type": "recovery",
                    "account": acct,
                    "tenant": tenant,
                    "counter": signed["counter"],
                    "h_req": h_req.hex(),
                    "h_top": None,
                    "h_charge": digest(charge),
                }
            )
        )
        self.aud.set_pending(None)
        self._checkpoint()

    def attest(self, proving_key, *, tenant: str | None = None) -> int:
        """Prove noise-then-select (Groth16) for every query of the policy's zk tenants that has no proof yet, with
        the proving key the AUDITOR made (audit/zk_attest.py); the proofs go into the bundle. Returns the count."""
        from . import zk_attest

        zk_tenants = set(self.policy.retrieval.zk_tenants)
        if tenant is not None:
            zk_tenants &= {tenant}
        done = 0
        size = self.ledger.size
        have = {pos for pos, _ in self.aud.proofs()}
        for pos, body in list(self.aud.openings(size)):
            if pos in have:
                continue
            op = json.loads(body)
            rec = json.loads(self.ledger.leaf(pos))
            if rec.get("type") != "query" or rec["tenant"] not in zk_tenants or op.get("top") is None:
                continue
            E = self.tenants[rec["tenant"]]["q"]
            Q = np.frombuffer(bytes.fromhex(op["qemb"]), dtype="<i2")
            z = self.table.sample(E.shape[0], request_source(self.seed, "retrieval", bytes.fromhex(rec["h_req"])))
            record = zk_attest.prove(proving_key, self.policy, E, Q, z, op["top"], self.table.support_bound)
            self.aud.put_proof(pos, encode({"pos": pos, **record}))
            done += 1
        return done

    def checkpoint_note(self, size: int | None = None) -> bytes:
        """The signed checkpoint note of ``size`` (default: the latest): what a witness is sent to cosign."""
        size = self.ledger.size if size is None else size
        notes = {s: n for s, n in self.aud.checkpoints(size)}
        if size not in notes:
            raise InvalidParameterError("size", "no checkpoint of that size was signed", size)
        return notes[size]

    def add_cosignature(self, cosigned: bytes) -> None:
        """Keep a witness-cosigned copy of one of this window's checkpoints (it replaces the stored note)."""
        from .ledger import open_checkpoint

        cp, _ = open_checkpoint(cosigned, self.origin, self.signer.verifier())
        if self.ledger.root(cp.size) != cp.root:
            raise InvalidParameterError("cosigned", "is not a checkpoint of this ledger")
        self.aud.put_checkpoint(cp.size, bytes(cosigned))

    # -- the bundle ------------------------------------------------------------------------------------------
    def export_bundle(self, out: str | os.PathLike) -> Path:
        """Write the bundle (spec/protocol.md §7): ``public/`` and the confidential ``auditor/``."""
        out = Path(out)
        with self._locked():
            size = self.ledger.size
            (out / "public").mkdir(parents=True, exist_ok=True)
            (out / "auditor" / "index").mkdir(parents=True, exist_ok=True)
            (out / "auditor" / "docs").mkdir(parents=True, exist_ok=True)
            leaves = list(self.ledger.leaves(0, size))
            _write(out / "public" / "genesis.json", leaves[0])
            _write(out / "public" / "leaves.bin", b"".join(len(x).to_bytes(4, "big") + x for x in leaves))
            notes = [note for _, note in self.aud.checkpoints(size)]
            _write(out / "public" / "checkpoints.txt", b"~~~\n".join(notes))
            _write(out / "public" / "provider.vkey", self.signer.vkey().encode())
            salts = decode((self.dir / "secret" / "salts.json").read_bytes(), what="salts")
            _write(out / "auditor" / "seed.hex", self.seed.hex().encode(), private=True)
            _write(
                out / "auditor" / "policy.json",
                encode({"policy": self.policy.to_dict(), "salt": salts["policy"]}),
                private=True,
            )
            _write(out / "auditor" / "embedder.json", (self.dir / "config" / "embedder.json").read_bytes())
            for t in self.tenants:
                _write(out / "auditor" / "index" / f"{t}.i16", (self.dir / "index" / f"{t}.i16").read_bytes())
                docs = decode((self.dir / "docs" / f"{t}.json").read_bytes(), what="documents")
                _write(
                    out / "auditor" / "docs" / f"{t}.json",
                    encode(
                        {
                            "ids": docs["ids"],
                            "salts": salts["documents"][t],
                            "text_sha256": [cm.text_hash(x).hex() for x in docs["texts"]],
                        }
                    ),
                    private=True,
                )
            lines = [body for _, body in self.aud.openings(size)]
            _write(out / "auditor" / "openings.jsonl", b"".join(b + b"\n" for b in lines), private=True)
            proofs = [body for pos, body in self.aud.proofs() if pos < size]
            if self.policy.retrieval.zk_tenants:
                _write(out / "auditor" / "proofs.jsonl", b"".join(b + b"\n" for b in proofs), private=True)
        return out


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """Write atomically (temp file, fsync, rename); private files are created 0600."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
