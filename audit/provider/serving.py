"""The provider's request path (spec/protocol.md §5.3, spec/provider.md §6): admission, the record transaction
(selection, charge, opening, leaf, served row; group commit), generation outside any transaction, the answer
transaction (checkpoint, receipt, stored answer) and retries. ``Serving`` adds it to the window's state
(``window.Window``); ``service.ProviderService`` is the façade.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import time
from dataclasses import dataclass

import numpy as np

from dprag.accounting.filters import IndividualRenyiFilter
from dprag.accounting.rag.mechanism import filter_charge
from dprag.accounting.rag.multi_query import Selection

from ..protocol import commitments as cm
from ..protocol.encoding import decode, digest, encode
from ..protocol.errors import AnswerPendingError, RateLimitError, RequestError, ServiceStateError, StoreUnavailableError
from ..protocol.ledger import Checkpoint, sign_checkpoint
from ..protocol.ledger.rfc6962 import hash_leaf
from ..protocol.receipts import receipt_body, refusal_body, sign_receipt, sign_refusal
from ..protocol.replay import recorded_top
from ..protocol.request import Request, request_hash
from ..protocol.retrieval import (
    noisy_top_k,
    request_source,
    retrieval_source,
    top_commitment,
)
from . import release as release_clock
from .admission import check_request
from .group_commit import BatchFailed, GroupCommitter
from .window import Epoch, TenantRetriever, Window


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


class Serving(Window):
    """The request path over a window's state."""

    def _refuse(self, exc: RequestError | RateLimitError, signed) -> RequestError | RateLimitError:
        """Attach the signed refusal (§5.1: decided before anything was embedded, charged or recorded; the
        counter is not consumed) to ``exc``; a request too malformed to name (no h_req) gets none. The refusal
        names its rule and the log it read: the size the decision read (``exc.snapshot``) or, for a rule of the
        request alone, the committed head now."""
        try:
            h = request_hash(signed).hex() if isinstance(signed, dict) else None
        except Exception:  # noqa: BLE001 - an unencodable request has no name to refuse
            h = None
        if h is not None:
            code = exc.code or ("question" if exc.field.startswith(("question", "qemb")) else "request")
            if exc.snapshot is None:
                size, root = self.ledger.head()
                self.refresh_state()  # a rotation below ``size``: sign with the key in effect there (§3.3)
            else:
                size, root = exc.snapshot, self.ledger.root(exc.snapshot)
            body = refusal_body(
                origin=self.origin,
                h_req=h,
                field=exc.field,
                rule=exc.rule,
                code=code,
                size=size,
                root=root.hex(),
            )
            exc.refusal = sign_refusal(body, self.signer_at(size))
        return exc

    def _embed(self, req: Request) -> np.ndarray:
        if req.qemb is not None:
            return np.frombuffer(req.qemb, dtype="<i2").copy()
        q_query = cm.quantise_embeddings(
            np.asarray(self.embedder.embed([req.question]))[0:1], self.embedder_descriptor["embedding_scale"]
        )[0]
        if q_query.shape[0] != self.tenants[self.registry[req.account].tenant]["q"].shape[1]:
            raise ServiceStateError("query embedding dimension differs from the index")
        return q_query

    def _admit(self, req: Request, h_req: str) -> tuple[str, dict | None]:
        """("served", stored) for a request already answered, ("recorded", record) for one charged and recorded
        whose answer is not stored yet, ("new", None) for one that may be served now; raises the refusal (counter,
        rate) otherwise. Reads only: run before the write transaction (to refuse early) and again inside it.
        ``h_req``: the request's hash (hex)."""
        acct, counter = req.account, req.signed["counter"]
        size, _last, prior, recorded_last, state_pos = self.aud.admission(acct, counter)  # one statement
        self.refresh_state(state_pos)  # another replica appended registry leaves: read them first

        def refused(exc: RequestError | RateLimitError, code: str) -> RequestError | RateLimitError:
            exc.code, exc.snapshot = code, size  # the rule, true of the log of ``size`` leaves this read
            return exc

        entry = self.registry.get(acct)
        if entry is not None and entry.revoked is not None and entry.revoked < size:
            raise refused(RequestError("request.account", f"{acct!r} was revoked at leaf {entry.revoked}"), "revoked")
        if prior is not None:
            old = decode(prior, what="served")
            if old["h_req"] != h_req:
                raise refused(
                    RequestError(
                        "request.counter",
                        f"{counter} was already used by another request (a client signs one per counter)",
                    ),
                    "counter-used",
                )
            return ("served" if old.get("served") else "recorded"), old
        last = recorded_last
        if counter <= last:
            raise ServiceStateError(f"counter {counter} of {acct!r} is below its last recorded {last} but not served")
        if counter > self.policy.retrieval.n:
            raise refused(
                RateLimitError(
                    f"account {acct!r} has used its {self.policy.retrieval.n} queries of window {self.policy.window}"
                ),
                "rate",
            )
        if counter != last + 1:
            raise refused(
                RequestError("request.counter", f"must be the next counter {last + 1} (gapless)", counter), "counter"
            )
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
        arrived = release_clock.now()
        signed = getattr(req, "signed", None)
        try:
            tenant = check_request(self, req)
            h_req = request_hash(signed)  # once per request: its canonical encoding is not cheap
            state, stored = self._with_retries(self._admit, req, h_req.hex())
        except (RequestError, RateLimitError) as e:
            raise self._refuse(e, signed) from None  # decided from the request and public quantities only
        timing: dict = {"release_at_ms": None, "worked": True}  # the record's release time, once known
        try:
            return self._serve_admitted(req, h_req, tenant, state, stored, timing)
        finally:  # on the policy's public grid, when it sets a release period (audit/provider/release.py)
            self.release.hold(timing["release_at_ms"], worked=timing["worked"], arrived=arrived)

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

    def _serve_admitted(self, req: Request, h_req: bytes, tenant: str, state: str, stored, timing: dict) -> ServedQuery:
        if state == "served":  # a retry of a stored answer: no work, it leaves at its release time
            timing.update(release_at_ms=stored.get("release_at_ms"), worked=False)
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
                timing.update(release_at_ms=stored.get("release_at_ms"), worked=False)
                return ServedQuery(**stored["served"])
            if state == "fresh":  # recorded by this call: finished from what it wrote, nothing read back
                timing["release_at_ms"] = stored["record"].get("release_at_ms")
                return self._finish(stored["record"], {**stored, "h_req": h_req, "view": prepared[1]})
        timing["release_at_ms"] = stored.get("release_at_ms")
        return self._finish(stored)

    def _prepare(self, req: Request, tenant: str, q_query: np.ndarray) -> tuple:
        """§5.3 steps 3 and 5: the exact scores (the request's view of the index) and the retrieval channel's
        noise-then-select top-K (None where the tenant's citations are off)."""
        qb = cm.embedding_bytes(q_query)
        retriever = self.tenants[tenant]["retriever"].for_query(req.question, q_query)
        ep = self.epochs[-1]  # the newest epoch; the record transaction prepares again if a policy leaf came since
        r, top = ep.policy.retrieval, None
        if tenant in r.enabled_tenants:
            scores = retriever.scores(req.question)
            z = self.table.sample(len(scores), retrieval_source(ep.seed, tenant, qb))
            top = [int(i) for i in noisy_top_k(scores, z, r.K)]  # noise first, then select
        return qb, retriever, top, ep.number

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
                if fresh and prepared[3] != self.epochs[-1].number:  # a policy leaf since: its noise and its K
                    prepared = self._prepare(req, tenant, np.frombuffer(prepared[0], dtype="<i2"))
                out.append(("fresh", self._record(req, h_req, tenant, *prepared[:3])) if fresh else (state, stored))
        return out

    def _record(
        self, req: Request, h_req: bytes, tenant: str, qb: bytes, retriever: TenantRetriever, top: list | None
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
        release_at_ms = self.release.release_at_ms(release_clock.now())  # the public grid (§5.6), with the record
        if release_at_ms is not None:
            record["release_at_ms"] = release_at_ms
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
        got, root = self.ledger.append_with_root(leaf)
        if got != pos:
            raise ServiceStateError(f"ledger position moved inside the transaction ({got} != {pos})")
        return self.served_row(pos, signed, leaf, nonce.hex(), top, h_req=h_req, root=root), opening

    def served_row(
        self,
        pos: int,
        signed: dict,
        leaf: bytes,
        nonce_top: str,
        top: list | None,
        *,
        root: bytes,
        h_req: bytes | None = None,
    ) -> dict:
        """The served-table row of a recorded request, its answer not yet stored: the ledger position, the receipt
        body's fields that the leaf fixes — all but ``h_answer``: the log it made (size pos + 1, ``root``), so no
        signed byte depends on when the answer is stored (``_finish``) — and the citations. ``h_req``: the
        request's hash, if the caller has it."""
        h_req_hex = (request_hash(signed) if h_req is None else h_req).hex()
        body = receipt_body(
            origin=self.origin,
            account=signed["account"],
            tenant=self.registry[signed["account"]].tenant,
            counter=signed["counter"],
            h_req=h_req_hex,
            h_top=json.loads(leaf)["h_top"],
            nonce_top=nonce_top,
            h_answer="0" * 64,
            pos=pos,
            leaf_hash=hash_leaf(leaf).hex(),
            size=pos + 1,
            root=root.hex(),
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
        tenant = self.registry[acct].tenant
        ten = self.tenants[tenant]
        h_req = fresh.get("h_req") or request_hash(signed)
        question = record.get("question")
        if question is None:
            raise ServiceStateError(f"the question of ledger position {pos} was not kept")
        ep = self.epoch_at(pos)  # recorded under it, finished under it (§3.4)
        if fresh.get("view") is not None:  # the same exact integer scores (float_exact_scores == integer_scores, §4)
            scores = fresh["view"].scores(question)
        else:
            q_query = np.frombuffer(bytes.fromhex(op["qemb"]), dtype="<i2")
            r = ep.policy.retrieval
            scores = cm.integer_scores(ten["q"], q_query, r.score_clip, r.score_shift)
        top = recorded_top(ep.policy, op, scores)
        try:
            ans = self._generate(question, top, ten["retriever"], h_req, ep)
        except Exception as e:  # noqa: BLE001 - any failure after the charge: nothing released, one outcome for all
            raise AnswerPendingError(pos, cause=type(e).__name__) from None
        item = (record, ans.text, acct, counter, fresh.get("bytes"))  # with the answers finished meanwhile
        kept, served, mine = self._grouped(self._answers, self._store_answers, item)
        if kept is mine:  # ours was stored: the served answer is what those bytes encode
            return served
        return ServedQuery(**decode(kept, what="served")["served"])

    def _store_answers(self, items: list[tuple]) -> list[tuple[bytes, ServedQuery, bytes]]:
        """One transaction without the tail lock (no ledger row): the checkpoint of the largest log the batch's
        receipts name, each answer with its receipt, signed at its own leaf's size (pos + 1; the first stored answer
        wins). Per item (record, answer, account, counter, the row's bytes if known): (the stored bytes, our served
        answer, our bytes)."""
        out = []
        with self.store.write(tail=False):
            # the checkpoint of the largest log a receipt of this batch names (size pos + 1, its root recorded with
            # the leaf): no read, and this process's key is at least the one in effect there, since it read the
            # log's key leaves when it recorded that leaf (§3.3)
            last = max((it[0] for it in items), key=lambda r: r["pos"])["receipt_body"]
            size, root = int(last["size"]), bytes.fromhex(last["root"])
            if all(it[0].get("release_at_ms") is None for it in items):  # else signed on the grid (§5.6)
                self.aud.put_checkpoint(
                    size, sign_checkpoint(Checkpoint(self.origin, size, root, ()), self.signer_at(size))
                )
            for record, text, acct, counter, expect in items:
                h_answer = hashlib.sha256(text.encode("utf-8")).hexdigest()
                # signed at the log its leaf made (size pos + 1, recorded with the leaf): whatever was appended while
                # the answer was generated, no signed byte tells when the work ended
                body = {**record["receipt_body"], "h_answer": h_answer}
                served = ServedQuery(
                    text, record["top"], sign_receipt(body, self.signer_at(body["size"])), record["pos"]
                )
                mine = encode({**record, "served": served.to_dict()})
                kept = self.aud.store_answer(acct, counter, mine, unless_stored=_has_answer, expect=expect)
                out.append((kept, served, mine))
        return out

    # -- internals -------------------------------------------------------------------------------------------
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

    def _generate(self, question: str, top: np.ndarray, retriever, h_req: bytes, ep: Epoch):
        """§5.3 step 7: the answer from the recorded selection's documents ``top``, drawn from the request's
        committed ``generate`` stream only, under the epoch it was recorded in."""
        return ep.rag_params.respond(
            question, top, retriever, ep.generator, source=request_source(ep.seed, "generate", h_req)
        )
