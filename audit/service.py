"""The provider: a multi-tenant RAG service that records everything its audit needs (spec/protocol.md).

``ProviderService.create(directory, ...)`` opens an audit window (Phase A: seed, commitments, genesis leaf);
``ProviderService.open(directory, ...)`` resumes one (after a restart or a crash: recovery, §5);
``query(account, question)`` serves one question (Phase B); ``export_bundle(out)`` writes the bundle (§7).

Several processes may serve from the same directory at once: each opens its own ``ProviderService``; the
selection-and-append section of a query runs under an exclusive file lock, so the ledger order is the order
in which the per-document filters saw the charges; generation runs outside the lock.

State layout of ``directory`` (all of it provider-private; the bundle is what leaves it):
``secret/seed.hex`` s_W, ``secret/provider.skey`` the Ed25519 note key; ``config/{policy,embedder,tenants,
accounts}.json``; ``index/<tenant>.i16`` quantised embeddings; ``docs/<tenant>.json`` document texts;
``state/ledger.sqlite`` (SqliteLog), ``state/auditor.sqlite`` (openings, checkpoints),
``state/budget-<tenant>.sqlite`` (per-document filters), ``state/lock``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol, Sequence

import numpy as np

from dprag.accounting.errors import DpragError, InvalidParameterError, check_positive_int
from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.protocols import Generator
from dprag.accounting.rag.multi_query import MuRAG, MuRAGAda, RetrievalParams, Selection
from dprag.accounting.stores import SqliteBudgetStore

from . import commitments as cm
from .encoding import decode, digest, encode
from .ledger import NoteSigner, SqliteLog
from .policy import Policy
from .receipts import receipt_body, sign_receipt
from .retrieval import float_exact_scores, noise_table, noisy_top_k, query_label, retrieval_noise, top_commitment

_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_QUESTION_CHARS = 4096


class RateLimitError(DpragError):
    """The account has used all n queries of the window (nothing was recorded or spent)."""


class ServiceStateError(DpragError):
    """The service directory is inconsistent (e.g. a budget store holds less spend than the ledger)."""


class TextEmbedder(Protocol):
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Float embeddings, shape (len(texts), d)."""
        ...


@dataclass
class ServedQuery:
    """What the account receives: the answer, the citations (None if the tenant has them off), the receipt."""

    answer: str
    citations: list[int] | None
    receipt: dict
    pos: int


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


class _AuditorStore:
    """state/auditor.sqlite: openings (by ledger position) and signed checkpoints (by size)."""

    def __init__(self, path: Path):
        self.con = sqlite3.connect(str(path), timeout=60.0, isolation_level=None)
        self.con.execute("PRAGMA journal_mode=WAL")
        self.con.execute("PRAGMA synchronous=FULL")
        self.con.execute("CREATE TABLE IF NOT EXISTS opening (pos INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        self.con.execute("CREATE TABLE IF NOT EXISTS checkpoint (size INTEGER PRIMARY KEY, note BLOB NOT NULL)")

    def put_opening(self, pos: int, body: bytes) -> None:
        self.con.execute("INSERT OR REPLACE INTO opening (pos, body) VALUES (?, ?)", (pos, body))

    def put_checkpoint(self, size: int, note: bytes) -> None:
        self.con.execute("INSERT OR REPLACE INTO checkpoint (size, note) VALUES (?, ?)", (size, note))

    def openings(self, below: int):
        return self.con.execute("SELECT pos, body FROM opening WHERE pos < ? ORDER BY pos", (below,))

    def checkpoints(self, upto: int):
        return self.con.execute("SELECT size, note FROM checkpoint WHERE size <= ? ORDER BY size", (upto,))

    def close(self):
        self.con.close()


class ProviderService:
    """See the module docstring."""

    # -- opening a window ------------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        directory: str | os.PathLike,
        *,
        policy: Policy,
        embedder: TextEmbedder,
        embedder_descriptor: cm.EmbedderDescriptor,
        generator: Generator,
        tenants: Mapping[str, Sequence[str]],
        accounts: Mapping[str, str],
        origin: str | None = None,
        seed: bytes | None = None,
        signer: NoteSigner | None = None,
        generation_source: RandomSource | None = None,
    ) -> "ProviderService":
        """Phase A: validate, embed and commit the tenants' indexes, draw s_W, append the genesis leaf."""
        policy.validate()
        d = Path(directory)
        if (d / "state" / "ledger.sqlite").exists():
            raise InvalidParameterError("directory", "already holds an audit window; use ProviderService.open", str(d))
        if not tenants:
            raise InvalidParameterError("tenants", "need at least one tenant")
        for t, docs in tenants.items():
            _check_id("tenant", t)
            if not docs:
                raise InvalidParameterError(f"tenants[{t}]", "corpus is empty")
            if policy.retrieval.K > len(docs) and t in policy.retrieval.enabled_tenants:
                raise InvalidParameterError("retrieval.K", f"exceeds tenant {t}'s corpus size {len(docs)}")
        for a, t in accounts.items():
            _check_id("account", a)
            if t not in tenants:
                raise InvalidParameterError(f"accounts[{a}]", "names an unknown tenant", t)
        for t in policy.retrieval.enabled_tenants:
            if t not in tenants:
                raise InvalidParameterError("retrieval.enabled_tenants", "names an unknown tenant", t)
        scale = embedder_descriptor.embedding_scale
        qidx = {}
        for t, docs in sorted(tenants.items()):
            e = np.asarray(embedder.embed(list(docs)))
            if e.shape != (len(docs), embedder_descriptor.dimension):
                raise InvalidParameterError("embedder", f"returned shape {e.shape}, expected ({len(docs)}, "
                                                        f"{embedder_descriptor.dimension})")
            qidx[t] = cm.quantise_embeddings(e, scale)
        seed = cm.new_seed() if seed is None else seed
        origin = origin or f"dprag/{policy.window}"
        signer = signer or NoteSigner.generate(re.sub(r"[^A-Za-z0-9_.-]", "-", origin)[:64] or "dprag")
        for sub in ("secret", "config", "index", "docs", "state"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        _write(d / "secret" / "seed.hex", seed.hex().encode(), private=True)
        _write(d / "secret" / "provider.skey", signer.skey().encode(), private=True)
        _write(d / "config" / "policy.json", encode(policy.to_dict()))
        _write(d / "config" / "embedder.json", encode(embedder_descriptor.to_dict()))
        _write(d / "config" / "accounts.json", encode(dict(accounts)))
        _write(d / "config" / "meta.json", encode({"origin": origin}))
        tenant_meta = {}
        for t, q in qidx.items():
            _write(d / "index" / f"{t}.i16", cm.embedding_bytes(q))
            _write(d / "docs" / f"{t}.json", json.dumps(list(tenants[t]), ensure_ascii=False).encode())
            tenant_meta[t] = (len(tenants[t]), cm.index_commitment(q))
        _write(d / "config" / "tenants.json", encode({t: {"n_docs": n, "dimension": int(qidx[t].shape[1])}
                                                       for t, (n, _) in tenant_meta.items()}))
        genesis = cm.genesis_record(policy.window, signer.vkey(), embedder_descriptor.commitment, policy.commitment,
                                    cm.seed_commitment(seed), tenant_meta)
        svc = cls(d, embedder=embedder, generator=generator, generation_source=generation_source)
        with svc._locked():
            if svc.ledger.size != 0:
                raise ServiceStateError("a fresh ledger is not empty")
            svc.ledger.append(encode(genesis))
            svc._checkpoint()
        return svc

    @classmethod
    def open(cls, directory, *, embedder: TextEmbedder, generator: Generator,
             generation_source: RandomSource | None = None) -> "ProviderService":
        """Resume a window: reconcile orphan charges left by a crash (recovery leaf), then serve."""
        svc = cls(Path(directory), embedder=embedder, generator=generator, generation_source=generation_source)
        with svc._locked():
            svc._recover()
        return svc

    def __init__(self, d: Path, *, embedder: TextEmbedder, generator: Generator,
                 generation_source: RandomSource | None = None):
        """``generation_source``: randomness of the answers' mechanisms (default: the OS CSPRNG; tests seed it).
        The retrieval channel's noise always comes from the committed seed."""
        if not (d / "config" / "policy.json").exists():
            raise InvalidParameterError("directory", "is not a dprag service directory", str(d))
        self.dir = d
        self.embedder, self.generator = embedder, generator
        self.policy = Policy.from_dict(decode((d / "config" / "policy.json").read_bytes(), what="policy")).validate()
        self.embedder_descriptor = decode((d / "config" / "embedder.json").read_bytes(), what="embedder")
        self.accounts: dict[str, str] = decode((d / "config" / "accounts.json").read_bytes(), what="accounts")
        self.origin = decode((d / "config" / "meta.json").read_bytes())["origin"]
        self.seed = bytes.fromhex((d / "secret" / "seed.hex").read_text())
        self.signer = NoteSigner.from_skey((d / "secret" / "provider.skey").read_text())
        tenants = decode((d / "config" / "tenants.json").read_bytes(), what="tenants")
        r, g = self.policy.retrieval, self.policy.generation
        self.ledger = SqliteLog(d / "state" / "ledger.sqlite")
        self.aud = _AuditorStore(d / "state" / "auditor.sqlite")
        self._lockfile = open(d / "state" / "lock", "a+b")
        self.table = noise_table(r.sigma, r.sampler.tail, r.sampler.precision_bits)
        if self.table.tv_distance > r.sampler.tv:
            raise ServiceStateError(f"sampler TV {self.table.tv_distance} exceeds the committed bound {r.sampler.tv}")
        cost = self.policy.query_cost()
        self.budget = FilterBudget.for_queries(g.max_queries_per_doc, cost, mode="pure")
        self.rag_params = self.policy.rag_params()
        self.tenants: dict[str, dict] = {}
        for t, meta in tenants.items():
            q = np.frombuffer((d / "index" / f"{t}.i16").read_bytes(), dtype="<i2").reshape(meta["n_docs"],
                                                                                              meta["dimension"])
            docs = json.loads((d / "docs" / f"{t}.json").read_text())
            retr = _TenantRetriever(docs, q, r.score_clip, r.score_shift)
            flt = IndividualRenyiFilter(SqliteBudgetStore(d / "state" / f"budget-{t}.sqlite", len(docs)), self.budget)
            if g.algorithm == "murag":
                algo = MuRAG(retr, generator, flt, self.rag_params, tau=g.tau,
                             retrieval=RetrievalParams(g.docs_per_voter), source=generation_source)
            else:
                algo = MuRAGAda(retr, generator, flt, self.rag_params, edges=g.edges, epsilon_thr=g.epsilon_thr,
                                retrieval=RetrievalParams(g.docs_per_voter), source=generation_source)
            self.tenants[t] = {"q": q, "retriever": retr, "filter": flt, "algo": algo}
        self._seen = 0
        self._counts: dict[str, int] = {}

    def close(self) -> None:
        self.ledger.close()
        self.aud.close()
        for t in self.tenants.values():
            t["filter"].store.close()
        self._lockfile.close()

    # -- Phase B ---------------------------------------------------------------------------------------------
    def query(self, account: str, question: str) -> ServedQuery:
        """Serve one question (spec/protocol.md §5). Raises before recording or spending on bad input."""
        if account not in self.accounts:
            raise InvalidParameterError("account", "is not registered", account)
        if not isinstance(question, str) or not question.strip():
            raise InvalidParameterError("question", "must be a non-empty string")
        if len(question) > MAX_QUESTION_CHARS:
            raise InvalidParameterError("question", f"must be at most {MAX_QUESTION_CHARS} characters", len(question))
        tenant = self.accounts[account]
        ten = self.tenants[tenant]
        r = self.policy.retrieval
        q_query = cm.quantise_embeddings(np.asarray(self.embedder.embed([question]))[0:1],
                                         self.embedder_descriptor["embedding_scale"])[0]
        if q_query.shape[0] != ten["q"].shape[1]:
            raise ServiceStateError("query embedding dimension differs from the index")
        h_q = hashlib.sha256(question.encode("utf-8")).hexdigest()
        h_qemb = hashlib.sha256(cm.embedding_bytes(q_query)).hexdigest()
        with self._locked():
            self._refresh_counts()
            if self._counts.get(account, 0) >= r.n:
                raise RateLimitError(f"account {account!r} has used its {r.n} queries of window {self.policy.window}")
            pos = self.ledger.size
            scores = ten["retriever"].score_query(question, q_query)
            top = nonce_top = h_top = None
            if tenant in r.enabled_tenants:
                z = retrieval_noise(self.seed, query_label(account, tenant, h_q, pos), len(scores), self.table)
                top = noisy_top_k(scores, z, r.K)  # noise first, then select
                nonce = secrets.token_bytes(16)
                nonce_top, h_top = nonce.hex(), top_commitment(top, nonce)
            selection: Selection = ten["algo"].select(question)  # durable filter charges
            charge = self._charge_opening(ten["filter"], selection)
            opening = {"pos": pos, "kind": "query", "qemb": cm.embedding_bytes(q_query).hex(),
                       "top": None if top is None else [int(i) for i in top], "nonce_top": nonce_top,
                       "charge": charge}
            self.aud.put_opening(pos, encode(opening))
            leaf = {"type": "query", "account": account, "tenant": tenant, "h_q": h_q, "h_qemb": h_qemb,
                    "h_top": h_top, "h_charge": digest(charge)}
            got = self.ledger.append(encode(leaf))
            if got != pos:
                raise ServiceStateError(f"ledger position moved under the lock ({got} != {pos})")
            self._counts[account] = self._counts.get(account, 0) + 1
            self._seen = pos + 1
            size, root = self._checkpoint()
        ans = ten["algo"].respond(question, selection)
        body = receipt_body(account=account, tenant=tenant, h_q=h_q, h_top=h_top, nonce_top=nonce_top,
                            h_answer=hashlib.sha256(ans.text.encode("utf-8")).hexdigest(), pos=pos, size=size,
                            root=root.hex())
        return ServedQuery(answer=ans.text, citations=None if top is None else [int(i) for i in top],
                           receipt=sign_receipt(body, self.signer), pos=pos)

    # -- internals -------------------------------------------------------------------------------------------
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
            units = int(flt.cost_units(event)[0])
            charges.append({"cost": {"kind": "pure", "epsilon_units": units},
                            "ids": sorted(int(i) for i in np.asarray(ids))})
        return {"nonce": secrets.token_hex(16), "algorithm": self.policy.generation.algorithm,
                "bins_released": selection.info.get("bins_released"), "charges": charges}

    def _refresh_counts(self) -> None:
        size = self.ledger.size
        if self._seen == 0 and size:
            self._seen = 1  # leaf 0 is the genesis record
        for raw in self.ledger.leaves(self._seen, size):
            rec = json.loads(raw)
            if rec.get("type") == "query":
                self._counts[rec["account"]] = self._counts.get(rec["account"], 0) + 1
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
        """Append a recovery leaf for every tenant whose store holds charges the ledger does not account for."""
        replayed = self._replayed_units()
        for t, ten in sorted(self.tenants.items()):
            stored = ten["filter"].spent_units(np.arange(len(ten["retriever"])))[:, 0].astype(np.int64)
            diff = stored - replayed[t]
            if np.any(diff < 0):
                bad = np.flatnonzero(diff < 0)[:5].tolist()
                raise ServiceStateError(f"tenant {t}: budget store holds less spend than the ledger for docs {bad}")
            if not np.any(diff > 0):
                continue
            charges = [{"cost": {"kind": "pure", "epsilon_units": int(u)},
                        "ids": np.flatnonzero(diff == u).astype(int).tolist()} for u in np.unique(diff[diff > 0])]
            charge = {"nonce": secrets.token_hex(16), "algorithm": "recovery", "bins_released": None,
                      "charges": charges}
            pos = self.ledger.size
            self.aud.put_opening(pos, encode({"pos": pos, "kind": "recovery", "charge": charge}))
            self.ledger.append(encode({"type": "recovery", "tenant": t, "h_charge": digest(charge)}))
            self._checkpoint()

    # -- the bundle ------------------------------------------------------------------------------------------
    def export_bundle(self, out: str | os.PathLike) -> Path:
        """Write the bundle (spec/protocol.md §7): ``public/`` and the confidential ``auditor/``."""
        out = Path(out)
        with self._locked():
            size = self.ledger.size
            (out / "public").mkdir(parents=True, exist_ok=True)
            (out / "auditor" / "index").mkdir(parents=True, exist_ok=True)
            leaves = list(self.ledger.leaves(0, size))
            _write(out / "public" / "genesis.json", leaves[0])
            _write(out / "public" / "leaves.bin", b"".join(len(x).to_bytes(4, "big") + x for x in leaves))
            notes = [note for _, note in self.aud.checkpoints(size)]
            _write(out / "public" / "checkpoints.txt", b"~~~\n".join(notes))
            _write(out / "public" / "provider.vkey", self.signer.vkey().encode())
            _write(out / "auditor" / "seed.hex", self.seed.hex().encode(), private=True)
            _write(out / "auditor" / "policy.json", (self.dir / "config" / "policy.json").read_bytes(), private=True)
            _write(out / "auditor" / "embedder.json", (self.dir / "config" / "embedder.json").read_bytes())
            for t in self.tenants:
                _write(out / "auditor" / "index" / f"{t}.i16", (self.dir / "index" / f"{t}.i16").read_bytes())
            lines = [body for _, body in self.aud.openings(size)]
            _write(out / "auditor" / "openings.jsonl", b"".join(b + b"\n" for b in lines), private=True)
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
