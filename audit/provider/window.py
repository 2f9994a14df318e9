"""The provider's window: the log's state, loaded from the window's directory (spec/provider.md §6).

``Window`` is that state, one typed object: what one process serves the log with — the committed policy and its
epochs (``Epoch``), the embedder and generator, the registry, the origin, seed and signing keys, each tenant
(``Tenant``: its index, retriever and per-document filter), the store, its ledger and records — and the operations
on it that every role of the service shares (the chain id and epoch, the committed checkpoint, the per-document
spend). Admission, recovery, the bundle export and attestation take it (``Window``), never the service. The request
path is ``serving``; the façade that opens, continues, exports and attests is ``service.ProviderService``.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict, cast

import numpy as np
import numpy.typing as npt

from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.noise.table import DiscreteGaussianTable
from dprag.accounting.protocols import Generator
from dprag.accounting.rag.ksa import TextGenerator
from dprag.accounting.rag.mechanism import SingleQueryMechanism
from dprag.accounting.rag.multi_query import MuRAG, MuRAGAda, RetrievalParams
from dprag.accounting.stores.session import SessionBudgetStore
from dprag.errors import DpragError, InvalidParameterError

from ..protocol.charges import ChargeRule
from ..protocol.encoding import JSON, decode
from ..protocol.errors import ServiceStateError
from ..protocol.ledger import NoteSigner, Signer
from ..protocol.policy import Policy
from ..protocol.provider_keys import KeyChain
from ..protocol.registry import Registry
from ..protocol.retrieval import (
    float_exact_scores,
    noise_table,
)
from . import release as release_clock
from .exclusion import SCORE_CHUNK, score_contained
from .models import TextEmbedder, as_embedder, serving_generator
from .release import ReleaseClock
from .storage import Records, ServiceStore, StoreLog, open_store, sql_bytes

log = logging.getLogger("dprag.provider")

#: the two algorithms a policy may serve (``generation.algorithm``)
Algorithm = MuRAG | MuRAGAda


@dataclass
class Epoch:
    """One epoch of the log (spec/protocol.md §3.4): the policy and seed its leaf committed (``pos``: the policy
    leaf's position, 0 for genesis's), and what serving under them uses. A request belongs to the epoch of its
    position, before and after the next policy leaf (a request recorded under it is finished under it)."""

    number: int
    pos: int
    policy: Policy
    seed: bytes
    generator: Generator | TextGenerator
    budget: FilterBudget
    rule: ChargeRule
    rag_params: SingleQueryMechanism
    filters: dict[str, IndividualRenyiFilter]
    algorithms: dict[str, Algorithm] = field(default_factory=dict)


class TenantRetriever:
    """accounting.protocols.Retriever over one tenant's index; ``for_query`` gives the view of one request (its exact
    integer scores, §4), so concurrent requests never share per-query state."""

    def __init__(
        self,
        documents: list[str],
        q_docs: npt.NDArray[np.int16] | npt.NDArray[np.float64],
        clip: Sequence[int],
        shift: int,
        question: str | None = None,
        scores: npt.NDArray[np.int64] | None = None,
        excluded: Sequence[int] = (),
    ):
        self.docs = documents
        self.q_docs_f64: npt.NDArray[np.float64] = np.asarray(q_docs, dtype=np.float64)  # no copy if it is already
        lo, hi = clip
        self.clip, self.shift = (int(lo), int(hi)), int(shift)
        self._current: tuple[str, npt.NDArray[np.int64]] | None = (
            None if question is None or scores is None else (question, scores)
        )
        #: the records excluded for this request's query (exclusion.py): never selected, charged or cited
        self.excluded: tuple[int, ...] = tuple(int(i) for i in excluded)

    def __len__(self) -> int:
        return len(self.docs)

    def score_chunk(
        self, first: int, keep: npt.NDArray[np.bool_] | None, q_query: npt.NDArray[np.int16]
    ) -> npt.NDArray[np.int64]:
        """The exact scores of the public chunk of rows at ``first`` (``exclusion.SCORE_CHUNK`` rows), the rows where
        ``keep`` is False replaced by the empty (all-zero) row: the chunk's shape whatever is excluded."""
        rows = self.q_docs_f64[first : first + SCORE_CHUNK]
        if keep is not None:
            rows = np.where(keep[:, None], rows, 0.0)
        return float_exact_scores(rows, q_query, self.clip, self.shift)

    def for_query(self, question: str, q_query: npt.NDArray[np.int16], excluded: Sequence[int] = ()) -> TenantRetriever:
        """The request's view: its exact scores, by public chunks, with ``excluded`` and every record whose scoring
        fails excluded (``exclusion.score_contained``)."""
        s, dropped = score_contained(lambda first, keep: self.score_chunk(first, keep, q_query), len(self), excluded)
        return TenantRetriever(self.docs, self.q_docs_f64, self.clip, self.shift, question, s, dropped)

    def excluding(self, more: Sequence[int]) -> TenantRetriever:
        """This view with the records ``more`` excluded too (their scores are never read again)."""
        if self._current is None:
            raise ServiceStateError("exclusion asked of a retriever that serves no question")
        question, s = self._current
        return TenantRetriever(
            self.docs, self.q_docs_f64, self.clip, self.shift, question, s, sorted({*self.excluded, *more})
        )

    def int_scores(self, query: str) -> npt.NDArray[np.int64]:
        """The exact integer scores of the question being served (an excluded record's is 0: never read)."""
        if self._current is None or self._current[0] != query:
            raise ServiceStateError("scores requested for a question that is not being served")
        return self._current[1]

    def scores(self, query: str) -> npt.NDArray[np.float64]:
        """The scores the algorithms read: an excluded record's is -inf (never above a threshold, never selected)."""
        out = self.int_scores(query).astype(np.float64)
        if self.excluded:
            out[np.asarray(self.excluded, dtype=np.int64)] = -np.inf
        return out

    def document(self, doc_id: int) -> str:
        return self.docs[int(doc_id)]


@dataclass
class Tenant:
    """One tenant of the log as this process serves it: its quantised index (``q``: one int16 row per document, in
    index order), the retriever over its documents, and its per-document filter under the newest epoch. A documents
    leaf grows ``q`` and ``retriever`` (``Window.refresh_state``); a policy leaf gives ``filter`` the new epoch's
    budget."""

    q: npt.NDArray[np.int16]
    retriever: TenantRetriever
    filter: IndividualRenyiFilter


class PolicyLeaf(TypedDict):
    """A ``policy`` leaf (spec/protocol.md §3.4), as ``ProviderService.set_policy`` appends it."""

    type: Literal["policy"]
    epoch: int
    C_policy: str
    C_seed: str


class DocumentsLeaf(TypedDict):
    """A ``documents`` leaf (spec/protocol.md §3.5), as ``ProviderService.add_documents`` appends it."""

    type: Literal["documents"]
    tenant: str
    first: int
    count: int
    C_idx: str
    C_docs: str


class Window:
    """The state of one log in this process (``__init__`` loads it from the log's directory)."""

    def __init__(
        self,
        d: Path,
        *,
        embedder: TextEmbedder | str,
        generator: object,
        store: str | None = None,
        signer: Signer | Sequence[Signer] | None = None,
        _store: ServiceStore | None = None,
    ):
        """Every random choice of serving comes from the committed seed and the signed request (§5.2). ``generator``:
        the committed model as given (``accounting.protocols.Generator``, or one that only returns text; see
        ``models.serving_generator``). ``signer``: the provider's key(s) held outside the directory and the store
        (``provider.signers``: a key file, a PKCS#11 token); without one, ``secret/provider.skey``."""
        if not (d / "config" / "policy.json").exists():
            raise InvalidParameterError("directory", "is not a dprag service directory", str(d))
        self.dir = d
        self.policy = Policy.from_dict(decode((d / "config" / "policy.json").read_bytes(), what="policy")).validate()
        self.embedder: TextEmbedder = as_embedder(embedder)
        self.generator: Generator | TextGenerator = serving_generator(self.policy, generator)
        self.committed_generator = generator  # the committed model itself: its context window bounds the question
        # the descriptor C_emb commits to (config/embedder.json opens it with its salt)
        self.embedder_descriptor: dict[str, JSON] = decode(
            (d / "config" / "embedder.json").read_bytes(), what="embedder"
        )["descriptor"]
        scale = self.embedder_descriptor["embedding_scale"]
        if not isinstance(scale, int):
            raise ServiceStateError("config/embedder.json: the descriptor's embedding_scale is not an integer")
        #: the committed quantisation scale of the embeddings (the descriptor's ``embedding_scale``)
        self.embedding_scale = scale
        #: the genesis registry (config/accounts.json); the live one, with the registry leaves applied, is
        #: ``registry`` (spec/protocol.md §3.2)
        self.genesis_accounts: dict[str, dict[str, str]] = decode(
            (d / "config" / "accounts.json").read_bytes(), what="accounts"
        )
        self.origin: str = decode((d / "config" / "meta.json").read_bytes())["origin"]
        self.seed = bytes.fromhex((d / "secret" / "seed.hex").read_text())
        given = [] if signer is None else [signer] if isinstance(signer, Signer) else list(signer)
        if not all(isinstance(s, Signer) for s in given):
            raise InvalidParameterError("signer", "must be a Signer (audit.protocol.ledger.Signer) or a list of them")
        if given:
            self.signer: Signer = given[0]
        elif (d / "secret" / "provider.skey").exists():
            self.signer = NoteSigner.from_skey((d / "secret" / "provider.skey").read_text())
        else:
            raise InvalidParameterError(
                "signer", "the provider's key is held by a signer outside the directory: pass it (--signer)", str(d)
            )
        tenants: dict[str, dict[str, int]] = decode((d / "config" / "tenants.json").read_bytes(), what="tenants")
        r = self.policy.retrieval
        #: the window's one database (audit.provider.storage): ledger, auditor records, per-document spend
        self.store: ServiceStore = _store if _store is not None else open_store(d, store)
        self.ledger = StoreLog(self.store)
        self.aud = Records(self.store)
        self.release = ReleaseClock()  # the epoch's release period (``_use``): the public grid, or off
        self._schedule: tuple[threading.Event, threading.Thread] | None = None  # ``start_schedule``
        # the committed sampler TV must bound the table's real one; the epsilon_acc claim (a PLD of the discrete
        # Gaussian, seconds) was checked when create() committed this policy, and the verifier re-certifies it
        self.policy.check_claims(epsilon_acc=False)
        self.table: DiscreteGaussianTable = noise_table(r.sigma, r.sampler.tail, r.sampler.precision_bits)
        # each tenant as genesis committed it; the documents leaves (refresh_state) add the rest in log order
        at_genesis = (
            {x["tenant"]: x["n_docs"] for x in json.loads(self.ledger.leaf(0))["tenants"]}
            if self.store.records_exist()
            else {t: meta["n_docs"] for t, meta in tenants.items()}
        )
        indexes: dict[str, tuple[npt.NDArray[np.int16], TenantRetriever]] = {}
        for t, meta in tenants.items():
            n = at_genesis[t]
            q = np.frombuffer((d / "index" / f"{t}.i16").read_bytes(), dtype="<i2").reshape(-1, meta["dimension"])[:n]
            docs = decode((d / "docs" / f"{t}.json").read_bytes(), what="documents")["texts"][:n]
            indexes[t] = (q, TenantRetriever(docs, q, r.score_clip, r.score_shift))
        #: the log's epochs (spec/protocol.md §3.4): genesis's policy and seed, then one per policy leaf
        self.epochs: list[Epoch] = []
        genesis = self._epoch(0, 0, self.policy, self.seed, {t: len(retr) for t, (_, retr) in indexes.items()})
        #: the log's tenants (each ``Tenant``: index, retriever, filter under the newest epoch)
        self.tenants: dict[str, Tenant] = {t: Tenant(q, retr, genesis.filters[t]) for t, (q, retr) in indexes.items()}
        self._use(genesis)
        self._state_lock = threading.Lock()
        #: every key of the log this process holds (the given signers first)
        self._signers: dict[str, Signer] = {s.vkey(): s for s in reversed([self.signer, *given])}
        started = self.store.records_exist()  # create() sets the chain once genesis is appended
        chain = self.chain_id if started else ""
        self.registry = Registry.from_genesis(
            chain, {a: (v["tenant"], v["key"]) for a, v in self.genesis_accounts.items()}
        )
        #: the provider's keys along the log (§3.3); ``signer`` signs with the current one
        self.keys = KeyChain.from_genesis(chain, self.genesis_key() if started else self.signer.vkey())
        self.state_pos = 0  # the last state leaf applied (0: genesis only)
        if started:
            self.refresh_state()
            self.signer = self._signer_for(self.keys.current.vkey())  # the key in effect now, or a clear refusal
        self._loaded()

    def _loaded(self) -> None:
        """Called once the state is loaded: what a subclass builds on it (the request path's group commit)."""

    def genesis_key(self) -> str:
        return str(json.loads(self.ledger.leaf(0))["provider_key"])

    def _epoch(
        self, number: int, pos: int, policy: Policy, seed: bytes, sizes: Mapping[str, int] | None = None
    ) -> Epoch:
        """An epoch's serving state: its policy and seed, and what they make (generator, filters, algorithm).
        ``sizes``: each tenant's document count (default: the tenants served now)."""
        g = policy.generation
        budget = FilterBudget.for_queries(g.max_queries_per_doc, policy.query_cost(), mode="pure")
        if sizes is None:
            sizes = {t: len(v.retriever) for t, v in self.tenants.items()}
        filters = {t: IndividualRenyiFilter(self.spend_store(t, n), budget) for t, n in sizes.items()}
        generator = serving_generator(policy, self.committed_generator)
        return Epoch(number, pos, policy, seed, generator, budget, ChargeRule.of(policy), policy.rag_params(), filters)

    def _use(self, ep: Epoch) -> None:
        """Serve new requests under ``ep`` (the newest epoch)."""
        self.epochs.append(ep)
        self.policy, self.seed, self.generator = ep.policy, ep.seed, ep.generator
        self.release.set(ep.policy.release_period)
        self.budget, self.rule, self.rag_params = ep.budget, ep.rule, ep.rag_params
        for t, v in self.tenants.items():
            v.filter = ep.filters[t]

    def epoch_at(self, pos: int) -> Epoch:
        """The epoch of the leaf at ``pos``: the last whose policy leaf lies below it."""
        for ep in reversed(self.epochs):
            if ep.pos < pos or ep.number == 0:
                return ep
        return self.epochs[0]

    def stored_file(self, path: str) -> bytes:
        """A file of this log as its store holds it (``window_file``: committed with the leaf that made it), else
        the local copy."""
        with self.store.read() as s:
            row = s.one("SELECT data FROM window_file WHERE path = ?", (path,))
        return sql_bytes(row[0]) if row is not None else (self.dir / path).read_bytes()

    def _load_epoch(self, pos: int, rec: PolicyLeaf) -> None:
        """Apply the policy leaf ``rec`` at ``pos``: the epoch's policy and seed, opened against its commitments."""
        from ..protocol import commitments as cm

        k = rec["epoch"]
        if k != len(self.epochs):
            raise ServiceStateError(f"the policy leaf at {pos} opens epoch {k}, not the next one {len(self.epochs)}")
        pub = decode(self.stored_file("config/epochs.json"), what="epochs")
        sec = decode(self.stored_file("secret/epochs.json"), what="epochs")
        policy = Policy.from_dict(pub[k - 1]["policy"]).validate()
        seed, salt = bytes.fromhex(sec[k - 1]["seed"]), bytes.fromhex(sec[k - 1]["salt"])
        opens = cm.policy_commitment(salt, policy.to_bytes()) == rec["C_policy"]
        if not opens or cm.seed_commitment(seed) != rec["C_seed"]:
            raise ServiceStateError(f"epoch {k}'s stored policy or seed does not open the leaf at {pos}")
        self._use(self._epoch(k, pos, policy, seed))

    def spend_store(self, tenant: str, n: int) -> SessionBudgetStore:
        """The tenant's per-document spend rows for ``n`` documents; the store may already cover documents a later
        documents leaf added (this process replays the leaves from genesis after a restart)."""
        try:
            return SessionBudgetStore(self.store.sessions, tenant, n)
        except InvalidParameterError:
            st = SessionBudgetStore(self.store.sessions, tenant, None)
            if st.n_docs < n:
                raise
            return st

    def _load_documents(self, pos: int, rec: DocumentsLeaf) -> None:
        """Apply the documents leaf ``rec`` at ``pos``: the tenant's index and documents grow (the rows below
        ``first`` are the ones served so far), and every epoch's filter and algorithm over it are rebuilt."""
        t = rec["tenant"]
        ten = self.tenants[t]
        n0, dim = ten.q.shape
        if rec["first"] != n0:
            raise ServiceStateError(f"the documents leaf at {pos} appends at {rec['first']}, not at {n0}")
        n = n0 + int(rec["count"])
        data = self.stored_file(f"index/{t}.i16")
        q = np.frombuffer(data, dtype="<i2").reshape(-1, dim)[:n]
        if q.shape[0] != n or not np.array_equal(q[:n0], ten.q):
            raise ServiceStateError(f"the stored index of tenant {t} does not extend the one served (leaf {pos})")
        docs = decode(self.stored_file(f"docs/{t}.json"), what="documents")["texts"][:n]
        r = self.policy.retrieval
        ten.q, ten.retriever = q, TenantRetriever(docs, q, r.score_clip, r.score_shift)
        for ep in self.epochs:
            ep.filters[t] = IndividualRenyiFilter(self.spend_store(t, n), ep.budget)
            ep.algorithms.pop(t, None)
        ten.filter = self.epochs[-1].filters[t]

    def account_key(self, name: str) -> str | None:
        """The account's current key (None: not registered), re-reading the registry's leaves once on a miss."""
        entry = self.registry.get(name)
        if entry is None:
            self.refresh_state()
            entry = self.registry.get(name)
        return None if entry is None else entry.key

    def refresh_state(self, upto: int | None = None) -> None:
        """Apply the state leaves this process has not read yet (another replica appended them), in log order.
        ``upto``: the last state leaf's position if the caller read it (nothing to read when it is not newer)."""
        if upto is not None and upto <= self.state_pos:
            return
        with self._state_lock:
            for pos, leaf in self.aud.state_leaves(self.state_pos):
                rec = json.loads(leaf)  # each leaf was checked by its rule when it was appended: its shape is known
                try:
                    if rec.get("type") == "key":
                        self.keys.apply(pos, rec)
                        self.signer = self._signer_for(self.keys.current.vkey())
                    elif rec.get("type") == "policy":
                        self._load_epoch(pos, rec)
                    elif rec.get("type") == "documents":
                        self._load_documents(pos, rec)
                    else:
                        self.registry.apply(pos, rec, self.tenants)
                except DpragError as e:  # RegistryError, KeyLeafError: the store was written around the rule
                    raise ServiceStateError(f"the log's leaf {pos} breaks its rule ({e}): the store is corrupt") from e
                self.state_pos = pos

    def _signer_for(self, vkey: str) -> Signer:
        """The signing key of ``vkey``: this process's own, ``secret/provider.skey`` or a retired one
        (``secret/provider-retired.json``), locally or (a replica that has not written them yet) as the rotation
        committed them to the store (``window_file``)."""
        if self.signer.vkey() == vkey:
            return self.signer
        if vkey in self._signers:
            return self._signers[vkey]
        candidates: list[str] = []
        for path in ("secret/provider.skey", "secret/provider-retired.json"):
            try:
                data = self.stored_file(path).decode()
            except FileNotFoundError:
                continue
            candidates += decode(data.encode(), what=path) if path.endswith(".json") else [data]
        for skey in candidates:
            signer = NoteSigner.from_skey(skey)
            self._signers[signer.vkey()] = signer
        if vkey in self._signers:
            return self._signers[vkey]
        raise ServiceStateError(
            f"the log's provider key {vkey} is not held by this replica (secret/provider.skey, or --signer)"
        )

    def remember_signer(self, signer: Signer) -> None:
        """Hold ``signer`` too (a key this process rotated to): ``_signer_for`` finds it by its verifier key."""
        self._signers[signer.vkey()] = signer

    def signer_at(self, size: int) -> Signer:
        """The key in effect at ``size`` (spec/protocol.md §3.3): what signs a receipt, refusal or checkpoint of that
        size, so that which key signed it follows from the log's order, never from when the work ended (an answer
        recorded before a rotation and stored after it is signed by the retired key, which the provider keeps for
        that). Never inside a store transaction: a signer (a token, a remote KMS) may be slow, and no lock is held
        while it runs (spec/provider.md §8)."""
        if self.store.in_transaction:
            raise ServiceStateError("the provider signs outside store transactions (a signer may be slow)")
        return self._signer_for(self.keys.at(size).vkey())

    def _algorithm(
        self, tenant: str, source: RandomSource, retriever: TenantRetriever, ep: Epoch | None = None
    ) -> Algorithm:
        """MuRAG / MuRAG-Ada for one request, drawing from that request's committed-seed stream: a shallow copy of the
        tenant's algorithm of the epoch (built and checked once) with the request's scores view and stream, the only
        per-request state the algorithms hold (they write none of their own after __init__)."""
        ep = ep or self.epochs[-1]
        algos = ep.algorithms
        algo = copy.copy(algos.get(tenant) or algos.setdefault(tenant, self._new_algorithm(tenant, retriever, ep=ep)))
        algo.retriever, algo.source = retriever, source
        return algo

    def _new_algorithm(
        self, tenant: str, retriever: TenantRetriever, source: RandomSource | None = None, ep: Epoch | None = None
    ) -> Algorithm:
        ep = ep or self.epochs[-1]
        g = ep.policy.generation
        # the algorithms hand the generator to the epoch's mechanism only, which takes the kind serving_generator
        # made for it (a text generator for dp-ksa and answer-vote); accounting types the parameter as the logit kind
        generator = cast(Generator, ep.generator)
        if g.algorithm == "murag":
            return MuRAG(
                retriever,
                generator,
                ep.filters[tenant],
                ep.rag_params,
                tau=cast(int, g.tau),  # set for "murag" (Policy.validate)
                retrieval=RetrievalParams(g.docs_per_voter),
                source=source,
            )
        return MuRAGAda(
            retriever,
            generator,
            ep.filters[tenant],
            ep.rag_params,
            edges=cast("tuple[int, ...]", g.edges),  # set for "murag-ada" (Policy.validate)
            epsilon_thr=cast(float, g.epsilon_thr),
            retrieval=RetrievalParams(g.docs_per_voter),
            source=source,
        )

    def close(self) -> None:
        if self._schedule is not None:
            stop, thread = self._schedule
            stop.set()
            thread.join(10)
            self._schedule = None
        self.store.close()

    # -- release on a public schedule (spec/protocol.md §5.6) -------------------------------------------------
    def scheduled_checkpoint(self) -> int | None:
        """What the schedule does at each grid point of the release period: sign a checkpoint of the committed log
        (deterministic, so replicas signing one size write the same note). With release on, storing an answer signs
        none, so no checkpoint tells when an answer's work ended. Returns the size, or None when release is off."""
        if self.release.seconds is None:
            return None
        return self.checkpoint_now()[0]

    def start_schedule(self) -> None:
        """Sign ``scheduled_checkpoint`` at every grid point, in a daemon thread, until ``close`` (``dprag serve``
        starts it; a library caller serving with a release period starts it too, or signs on its own schedule)."""
        if self._schedule is not None:
            return
        stop = threading.Event()

        def run() -> None:
            while not stop.is_set():
                if self.release.seconds is None:
                    stop.wait(1.0)
                    continue
                tick = self.release.next_tick(release_clock.now() + 1e-3)
                if stop.wait(max(0.0, tick - release_clock.now())):
                    return
                try:
                    self.scheduled_checkpoint()
                except DpragError as e:  # a store that is down: the next grid point tries again
                    log.warning("scheduled checkpoint: %s", e)

        thread = threading.Thread(target=run, name="dprag-release-schedule", daemon=True)
        self._schedule = (stop, thread)
        thread.start()

    # -- Phase B ---------------------------------------------------------------------------------------------
    # -- one log per corpus (§3.1) ----------------------------------------------------------------------------
    @property
    def chain_id(self) -> str:
        """The log's name (hex H(its genesis leaf)): what auditors and clients pin."""
        from ..protocol.chain import chain_id

        return chain_id(self.ledger.leaf(0))

    def spent_units(self, tenant: str) -> npt.NDArray[np.int64]:
        ten = self.tenants[tenant]
        return ten.filter.spent_units(np.arange(len(ten.retriever)))[:, 0].astype(np.int64)

    def checkpoint_now(self) -> tuple[int, bytes]:
        """Sign a checkpoint of the committed ledger (its current size) and keep it; never inside a write
        transaction, so what is signed is committed (Ed25519 is deterministic: two replicas signing one size write
        the same note)."""
        if self.store.in_transaction:
            raise ServiceStateError("a checkpoint is signed over committed state only (outside a write transaction)")
        with self.store.snapshot():
            size = self.ledger.size
            root = self.ledger.root(size)
            self.refresh_state()  # a rotation below ``size``: sign with the key in effect there (§3.3)
        self.aud.put_checkpoint(size, self.ledger.checkpoint(self.signer_at(size), self.origin, size=size))
        return size, root
