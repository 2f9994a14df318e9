"""The provider's request path (spec/protocol.md §5.3, spec/provider.md §6): admission, the record transaction
(selection, charge, opening, leaf, served row; group commit), generation outside any transaction, the answer
transaction (checkpoint, receipt, stored answer) and retries. ``Serving`` adds it to the window's state
(``window.Window``); ``service.ProviderService`` is the façade.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, NotRequired, ParamSpec, TypedDict, TypeVar, cast

import numpy as np
import numpy.typing as npt

from dprag.accounting.filters import IndividualRenyiFilter
from dprag.accounting.protocols import Generator
from dprag.accounting.rag.common import RagAnswer
from dprag.accounting.rag.ksa import TextGenerator
from dprag.accounting.rag.mechanism import filter_charge
from dprag.accounting.rag.multi_query import Selection
from dprag.errors import DpragError

from ..protocol import commitments as cm
from ..protocol.encoding import JSON, decode, digest, encode
from ..protocol.errors import AnswerPendingError, RateLimitError, RequestError, ServiceStateError, StoreUnavailableError
from ..protocol.ledger import Checkpoint, sign_checkpoint
from ..protocol.ledger.rfc6962 import hash_leaf
from ..protocol.receipts import receipt_body, refusal_body, sign_receipt, sign_refusal
from ..protocol.replay import recorded_top
from ..protocol.request import Request, request_hash
from ..protocol.retrieval import (
    noisy_top_k_excluding,
    request_source,
    retrieval_source,
    top_commitment,
)
from . import release as release_clock
from .admission import check_request
from .exclusion import UNEXPLAINED, find_failing
from .group_commit import BatchFailed, GroupCommitter
from .resend import Flights, StoredGuard, guard_generator
from .reservation import Reservations, device_memory, hosted_need, worst_case_bytes
from .void import has_outcome, settle_retry, void_error
from .window import Epoch, TenantRetriever, Window

P = ParamSpec("P")
T = TypeVar("T")
I = TypeVar("I")  # noqa: E741
R = TypeVar("R")


#: whether a served row's bytes hold the request's outcome, a stored answer or a void (void.py: the first one wins)
_has_answer = has_outcome


#: a transaction the store could not complete (connection lost, server restarting) is retried this many times
STORE_ATTEMPTS = 5


class Served(TypedDict):
    """A stored answer as the served table keeps it (``ServedQuery.to_dict``)."""

    answer: str
    citations: list[int] | None
    receipt: dict[str, JSON]
    pos: int


@dataclass
class ServedQuery:
    """What the account receives: the answer, the citations (None if the tenant has them off), the receipt."""

    answer: str
    citations: list[int] | None
    receipt: dict[str, JSON]
    pos: int

    def to_dict(self) -> Served:
        return {"answer": self.answer, "citations": self.citations, "receipt": self.receipt, "pos": self.pos}


class ServedRow(TypedDict):
    """The served-table row of a recorded request (``Serving.served_row``): its hash, ledger position, the receipt
    body the leaf fixes (all but ``h_answer``), the citations, and once stored the answer (``served``). The record
    transaction adds the question (provider-private: a retry finishes the answer from it) and, with a release
    period, its ``release_at_ms``."""

    h_req: str
    pos: int
    receipt_body: dict[str, JSON]
    top: list[int] | None
    served: Served | None
    question: NotRequired[str]
    release_at_ms: NotRequired[int]
    void: NotRequired[dict[str, JSON]]


class ChargeEntry(TypedDict):
    """One charge of an opening: its cost as the filter counted it, and the documents charged."""

    cost: dict[str, str | int]
    ids: list[int]


class Charge(TypedDict):
    """An opening's charge (spec/protocol.md §6.2): what the filter counted, per charge, and the algorithm."""

    nonce: str
    algorithm: str
    bins_released: JSON
    charges: list[ChargeEntry]
    #: the records excluded for this query (exclusion.py), present only when some are: auditor-only, under h_charge
    excluded: NotRequired[list[int]]


class Opening(TypedDict):
    """A query's opening (spec/protocol.md §6.2), kept by ledger position for the auditor."""

    pos: int
    kind: Literal["query"]
    request: dict[str, JSON]
    qemb: str
    top: list[int] | None
    nonce_top: str
    charge: Charge


class Fresh(TypedDict):
    """What a record transaction wrote for one request: its served row, its opening and the row's bytes."""

    record: ServedRow
    opening: Opening
    bytes: bytes


#: a request's view prepared before its record transaction (``_prepare``): Q's bytes, the retriever with its exact
#: scores, the noisy top-K (None: citations off) and the number of the epoch it was prepared under
Prepared = tuple[bytes, TenantRetriever, list[int] | None, int]
#: one item of a record batch: the request, its hash, its tenant, what ``_prepare`` made
RecordItem = tuple[Request, bytes, str, Prepared]
#: a request admitted: "served" (its answer is stored) or "recorded" (charged, its answer not stored) with its served
#: row, or "new" (to be served now)
Admitted = tuple[Literal["served", "recorded"], ServedRow] | tuple[Literal["new"], None]
#: a record batch's outcome for one item: "fresh" (recorded by this batch), admitted before, or refused
Recorded = (
    tuple[Literal["fresh"], Fresh]
    | tuple[Literal["served", "recorded"], ServedRow]
    | tuple[Literal["refused"], RequestError | RateLimitError]
)
#: one item of an answer batch: the served row, the answer, the account, the counter, the row's bytes if known
AnswerItem = tuple[ServedRow, str, str, int, bytes | None]
#: an answer batch's outcome for one item: the stored bytes, our served answer, our bytes
AnswerStored = tuple[bytes, ServedQuery, bytes]


class _Timing(TypedDict):
    release_at_ms: int | None
    worked: bool


def _served_query(row: ServedRow) -> ServedQuery:
    """The answer a served row holds; its void (``RequestError`` with the signed void) if it holds one instead."""
    if row.get("void"):
        raise void_error(row.get("void"))
    served = row["served"]
    if served is None:
        raise ServiceStateError(f"the answer of ledger position {row['pos']} is not stored")
    return ServedQuery(**served)


class Serving(Window):
    """The request path over a window's state."""

    #: group commit (audit/provider/group_commit.py): the record transactions, and the answer transactions
    _records: GroupCommitter[RecordItem, Recorded]
    _answers: GroupCommitter[AnswerItem, AnswerStored]

    def _loaded(self) -> None:
        self._records = GroupCommitter(self._record_batch)
        self._answers = GroupCommitter(self._store_answers)
        #: isolation between requests (spec/provider.md §3.6): each generation's public worst-case memory, reserved
        #: before the charge; ``reservations.set(None)`` turns it off (``benchmarks/bench_serve.py`` measures both)
        self.reservations = Reservations(device_memory(self.committed_generator))
        #: the hosted slot (§3.6): one request at a time generates through a generator without a worst case (a
        #: hosted API), so a hosted call's deadline never depends on this provider's other requests; ``set(None)``
        #: turns it off (``benchmarks/bench_serve.py --reservation hosted`` measures both)
        self.hosted_slot = Reservations(1)
        self._flights = Flights()  # one finishing per ledger position at a time (resend.py)

    def _refuse(self, exc: RequestError | RateLimitError, signed: object) -> RequestError | RateLimitError:
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

    def _embed(self, req: Request) -> npt.NDArray[np.int16]:
        if req.qemb is not None:
            return np.frombuffer(req.qemb, dtype="<i2").copy()
        q_query: npt.NDArray[np.int16] = cm.quantise_embeddings(
            np.asarray(self.embedder.embed([req.question]))[0:1], self.embedding_scale
        )[0]
        if q_query.shape[0] != self.tenants[self.registry[req.account].tenant].q.shape[1]:
            raise ServiceStateError("query embedding dimension differs from the index")
        return q_query

    def _admit(self, req: Request, h_req: str) -> Admitted:
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
            old: ServedRow = decode(prior, what="served")
            if old["h_req"] != h_req:
                raise refused(
                    RequestError(
                        "request.counter",
                        f"{counter} was already used by another request (a client signs one per counter)",
                    ),
                    "counter-used",
                )
            return ("served", old) if old.get("served") else ("recorded", old)
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
                RequestError(
                    "request.counter",
                    f"must be the next counter {last + 1} (gapless; if this account signed request {last + 1} and "
                    f"lost its answer, resend it: dprag account resend DIR {last + 1}, or AccountClient.retry)",
                    counter,
                ),
                "counter",
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
        signed: object = getattr(req, "signed", None)
        try:
            tenant = check_request(self, req)
            h_req = request_hash(req.signed)  # once per request: its canonical encoding is not cheap
            admitted = self._with_retries(self._admit, req, h_req.hex())
            # §3.6: the generation's public worst case (none for a stored answer's retry), whole-capacity check
            served = admitted[0] == "served"
            need = 0 if served else worst_case_bytes(self.committed_generator, self.policy, req.question)
            self.reservations.check(need)
            slot = 0 if served else hosted_need(self.committed_generator)
        except (RequestError, RateLimitError) as e:
            settled = settle_retry(self, req)  # a request the log holds: never a refusal that frees its counter
            if settled is None:
                raise self._refuse(e, signed) from None  # decided from the request and public quantities only
            if isinstance(settled, RequestError):
                raise settled from None  # its void (the counter consumed), or unsigned
            self.release.hold(settled.get("release_at_ms"), worked=False, arrived=arrived)
            return _served_query(settled)  # its stored answer, as for any retry
        timing: _Timing = {"release_at_ms": None, "worked": True}  # the record's release time, once known
        try:
            # before the charge: each waits (bounded) or raises ServiceBusyError; held until stored or pending
            with self.reservations.hold(need), self.hosted_slot.hold(slot):
                return self._serve_admitted(req, h_req, tenant, admitted, timing)
        finally:  # on the policy's public grid, when it sets a release period (audit/provider/release.py)
            self.release.hold(timing["release_at_ms"], worked=timing["worked"], arrived=arrived)

    def _grouped(self, committer: GroupCommitter[I, R], write_batch: Callable[[list[I]], list[R]], item: I) -> R:
        """``write_batch([item])[0]`` in one batch with others (group_commit.py), or alone if that fails."""
        if not self.store.in_transaction:  # a caller's open transaction is not a batch's to commit
            with contextlib.suppress(BatchFailed):  # that batch did not commit: this item runs alone
                return committer.commit(item)
        return self._with_retries(write_batch, [item])[0]

    def _with_retries(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args)``, again after a StoreUnavailableError (each try is one transaction, rolled back on failure;
        every caller's retry is idempotent), with backoff 0.05 s doubling; the last failure is raised."""
        pause = 0.05
        for attempt in range(STORE_ATTEMPTS):
            try:
                return fn(*args, **kwargs)
            except StoreUnavailableError:
                if attempt == STORE_ATTEMPTS - 1:
                    raise
                time.sleep(pause)
                pause = min(2 * pause, 2.0)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _serve_admitted(
        self, req: Request, h_req: bytes, tenant: str, admitted: Admitted, timing: _Timing
    ) -> ServedQuery:
        if admitted[0] == "served":  # a retry of a stored answer: no work, it leaves at its release time
            stored = admitted[1]
            timing["release_at_ms"], timing["worked"] = stored.get("release_at_ms"), False
            return _served_query(stored)
        if admitted[0] == "recorded":
            stored = admitted[1]
        else:
            q_query = self._embed(req)  # after every refusal: retries and over-limit requests are never embedded
            # the scores and the retrieval channel depend on Q, the index and s_W only (never on the filter): computed
            # before the transaction, so the tail lock is held for the charge and the records alone
            prepared = self._prepare(req, tenant, q_query)
            try:
                try:
                    recorded = self._grouped(self._records, self._record_batch, (req, h_req, tenant, prepared))
                except _SelectionFailed:  # the selection failed (rolled back): exclusion, below
                    recorded = None
                if recorded is None:
                    prepared = self._exclude_failing_selection(req, h_req, tenant, q_query, prepared)
                    recorded = self._record_alone(req, h_req, tenant, prepared)
                if recorded[0] == "refused":
                    raise recorded[1]
            except (RequestError, RateLimitError) as e:
                raise self._refuse(e, getattr(req, "signed", None)) from None
            if recorded[0] == "served":
                stored = recorded[1]
                timing["release_at_ms"], timing["worked"] = stored.get("release_at_ms"), False
                return _served_query(stored)
            if recorded[0] == "fresh":  # recorded by this call: finished from what it wrote, nothing read back
                fresh = recorded[1]
                timing["release_at_ms"] = fresh["record"].get("release_at_ms")
                return self._finish(fresh["record"], fresh, h_req=h_req, view=prepared[1])
            stored = recorded[1]
        timing["release_at_ms"] = stored.get("release_at_ms")
        return self._finish(stored)

    def _prepare(
        self, req: Request, tenant: str, q_query: npt.NDArray[np.int16], excluded: Sequence[int] = ()
    ) -> Prepared:
        """§5.3 steps 3 and 5: the exact scores (the request's view of the index, with ``excluded`` and every record
        whose scoring fails excluded: exclusion.py) and the retrieval channel's noise-then-select top-K over the
        records not excluded (None where the tenant's citations are off)."""
        qb = cm.embedding_bytes(q_query)
        retriever = self.tenants[tenant].retriever.for_query(req.question, q_query, excluded)
        ep = self.epochs[-1]  # the newest epoch; the record transaction prepares again if a policy leaf came since
        r, top = ep.policy.retrieval, None
        if tenant in r.enabled_tenants:
            scores = retriever.int_scores(req.question)
            z = self.table.sample(len(scores), retrieval_source(ep.seed, tenant, qb))
            top = [int(i) for i in noisy_top_k_excluding(scores, z, r.K, retriever.excluded)]  # noise, then select
        return qb, retriever, top, ep.number

    def _record_alone(self, req: Request, h_req: bytes, tenant: str, prepared: Prepared) -> Recorded:
        """The record transaction of one request alone (after an exclusion); a selection that fails again, with
        every failing record excluded, raises the fixed ``exclusion.UNEXPLAINED`` (no cause, no context)."""
        try:
            return self._with_retries(self._record_batch, [(req, h_req, tenant, prepared)])[0]
        except _SelectionFailed:
            pass  # raised below, outside this handler
        raise ServiceStateError(UNEXPLAINED)

    def _selection_fails(self, req: Request, h_req: bytes, tenant: str, view: TenantRetriever) -> bool:
        """One probe: whether the selection and its charge (§5.3 step 4) fail on ``view``, in a write transaction
        that is always rolled back (nothing of it is kept: the filter's caches move only on commit)."""
        try:
            with self.store.write(durable=False):
                algo = self._algorithm(tenant, request_source(self.seed, "select", h_req), view)
                self._charge_opening(self.tenants[tenant].filter, algo.select(req.question))
                raise _RolledBack
        except _RolledBack:
            return False
        except DpragError:
            raise  # the store's and the protocol's own errors are not a record's
        except Exception:  # noqa: BLE001 - a probe's failure is one bit; its type and message are dropped
            return True

    def _exclude_failing_selection(
        self, req: Request, h_req: bytes, tenant: str, q_query: npt.NDArray[np.int16], prepared: Prepared
    ) -> Prepared:
        """The selection failed inside the record transaction (rolled back): find the records whose presence among
        its candidates makes it fail (exclusion.find_failing, each probe a rolled-back transaction), and prepare
        the request again with them excluded (spec/accounting/rag.md §6.2). The public probe (no candidate) failing
        is a failure of public inputs: the fixed ``UNEXPLAINED``."""
        view = prepared[1]
        g = self.epochs[-1].policy.generation
        s = view.scores(req.question)
        low = float(cast(float, g.tau)) if g.algorithm == "murag" else float(cast("tuple[float, ...]", g.edges)[-1])
        cands = [int(i) for i in np.flatnonzero(s > low if g.algorithm == "murag" else s >= low)]

        def probe(keep: Sequence[int]) -> bool:
            return self._selection_fails(req, h_req, tenant, view.excluding(sorted(set(cands) - set(keep))))

        if probe([]):
            raise ServiceStateError(UNEXPLAINED)
        bad = find_failing(probe, cands) if probe(cands) else []
        return self._prepare(req, tenant, q_query, (*view.excluded, *bad))

    def _record_batch(self, items: list[RecordItem]) -> list[Recorded]:
        """One write transaction for ``items`` = [(req, h_req, tenant, prepared), ...], in order: each admitted again
        (it may be served by now), then recorded (§5.3 steps 2, 4, 6). Per item: ("fresh", {"record", "opening",
        "bytes"}: what it wrote), ("served" | "recorded", stored) or ("refused", the refusal; nothing written)."""
        out: list[Recorded] = []
        # not durable: its commit need not wait for the disk, since nothing depending on it is released before the
        # answer's commit (``_finish``), which is durable and so makes this one durable too (spec/provider.md §6)
        with self.store.write(durable=False):
            for req, h_req, tenant, prepared in items:
                try:
                    admitted = self._admit(req, h_req.hex())  # reads only
                except (RequestError, RateLimitError) as e:
                    out.append(("refused", e))
                    continue
                if admitted[0] != "new":
                    out.append(admitted)
                    continue
                if prepared[3] != self.epochs[-1].number:  # a policy leaf since: its noise and its K
                    q_query = np.frombuffer(prepared[0], dtype="<i2")
                    prepared = self._prepare(req, tenant, q_query, prepared[1].excluded)
                out.append(("fresh", self._record(req, h_req, tenant, *prepared[:3])))
        return out

    def _record(
        self, req: Request, h_req: bytes, tenant: str, qb: bytes, retriever: TenantRetriever, top: list[int] | None
    ) -> Fresh:
        """§5.3 steps 4 and 6 inside the request's write transaction: the selection and its charge, the opening,
        the query leaf and the served-table row (answer not yet stored). All or nothing. Returns {"record", "opening",
        "bytes"}: the served-table record, the opening and the served row's bytes."""
        acct, counter = req.account, req.signed["counter"]
        pos = self.ledger.size  # under the tail lock (read once per transaction, ``audit.provider.storage``)
        ten = self.tenants[tenant]
        algo = self._algorithm(tenant, request_source(self.seed, "select", h_req), retriever)
        failed = False
        try:
            selection: Selection = algo.select(req.question)  # the filter's charges, in this transaction
            charge = self._charge_opening(ten.filter, selection)
        except DpragError:
            raise  # the store's and the protocol's own errors, as before
        except Exception:  # noqa: BLE001 - the selection's own failure: the caller searches (exclusion.py)
            failed = True
        if failed:  # outside the handler: no cause, no context, nothing of the record's failure
            raise _SelectionFailed
        if retriever.excluded:  # auditor-only (the opening), under h_charge, whose nonce hides it
            charge["excluded"] = list(retriever.excluded)
        record, opening = self._append_query(pos, req.signed, qb, top, charge, h_req)
        record["question"] = req.question  # provider-private: a retry finishes the answer from it
        release_at_ms = self.release.release_at_ms(release_clock.now())  # the public grid (§5.6), with the record
        if release_at_ms is not None:
            record["release_at_ms"] = release_at_ms
        body = encode(record)
        self.aud.put_served(acct, counter, pos, body)
        return {"record": record, "opening": opening, "bytes": body}

    def _append_query(
        self, pos: int, signed: dict[str, JSON], qb: bytes, top: list[int] | None, charge: Charge, h_req: bytes
    ) -> tuple[ServedRow, Opening]:
        """The opening and the query leaf (§5.3 step 6); returns the served-table record of the request (what a retry
        needs to finish it) and the opening."""
        nonce = secrets.token_bytes(16)
        h_top = top_commitment(top or [], nonce)  # always present: the empty list where citations are off
        opening: Opening = {
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
        signed: dict[str, JSON],
        leaf: bytes,
        nonce_top: str,
        top: list[int] | None,
        *,
        root: bytes,
        h_req: bytes | None = None,
    ) -> ServedRow:
        """The served-table row of a recorded request, its answer not yet stored: the ledger position, the receipt
        body's fields that the leaf fixes — all but ``h_answer``: the log it made (size pos + 1, ``root``), so no
        signed byte depends on when the answer is stored (``_finish``) — and the citations. ``h_req``: the
        request's hash, if the caller has it."""
        h_req_hex = (request_hash(signed) if h_req is None else h_req).hex()
        account, counter = signed["account"], signed["counter"]
        if not isinstance(account, str) or not isinstance(counter, int):
            raise ServiceStateError(f"the request at ledger position {pos} names no account and counter")
        body = receipt_body(
            origin=self.origin,
            account=account,
            tenant=self.registry[account].tenant,
            counter=counter,
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

    def _finish(
        self,
        record: ServedRow,
        fresh: Fresh | None = None,
        *,
        h_req: bytes | None = None,
        view: TenantRetriever | None = None,
    ) -> ServedQuery:
        """Generate the answer of a recorded (committed) request from its recorded selection, sign its receipt at a
        checkpoint of committed state, store it (the first stored answer wins: concurrent retries, in any process,
        all return the same bytes), and return it. Runs outside any transaction: generation is the long part.

        ``fresh``: for a request this call recorded, what its committed transaction wrote ("opening", "bytes": the
        served row), with ``h_req`` and ``view`` (the request's exact scores); a retry reads the opening instead."""
        pos = record["pos"]
        op: Opening | None = (
            fresh["opening"] if fresh is not None else decode(self.aud.opening(pos) or b"null", what="opening")
        )
        if not isinstance(op, dict) or op.get("pos") != pos:
            raise ServiceStateError(f"no opening stored for ledger position {pos}")
        signed = op["request"]
        acct, counter = signed["account"], signed["counter"]
        if not isinstance(acct, str) or not isinstance(counter, int):
            raise ServiceStateError(f"the opening at ledger position {pos} names no account and counter")
        tenant = self.registry[acct].tenant
        ten = self.tenants[tenant]
        h_req = h_req or request_hash(signed)
        question = record.get("question")
        if question is None:
            raise ServiceStateError(f"the question of ledger position {pos} was not kept")
        ep = self.epoch_at(pos)  # recorded under it, finished under it (§3.4)
        if view is not None:  # the same exact integer scores (float_exact_scores == integer_scores, §4)
            scores = view.scores(question)
        else:  # by the contained path too (exclusion.py): recorded_top reads only the charged records' scores
            q_query = np.frombuffer(bytes.fromhex(op["qemb"]), dtype="<i2")
            excl = op["charge"].get("excluded") or []
            scores = ten.retriever.for_query(question, q_query, excl).scores(question)
        top = recorded_top(ep.policy, dict(op), scores)
        # spec/provider.md §3.7: once the answer is stored (by any replica), nothing is sent to the generator again
        with self._flights.hold(pos):
            if fresh is None:  # a retry, or a replica: the answer may be stored by now (one read)
                now = self.aud.served(acct, counter)
                if now is not None and _has_answer(now):
                    return _served_query(decode(now, what="served"))
            guard = StoredGuard(lambda: _has_answer(self.aud.served(acct, counter) or b"{}"))
            try:
                ans = self._generate(question, top, ten.retriever, h_req, _guarded(ep, guard))
            except Exception as e:  # noqa: BLE001 - any failure after the charge: nothing released, one outcome for all
                if not guard.fired:
                    raise AnswerPendingError(pos, cause=type(e).__name__) from None
            if guard.fired:  # another replica stored it meanwhile: its bytes, never a second answer
                return _served_query(decode(self.aud.served(acct, counter) or b"{}", what="served"))
            item: AnswerItem = (record, ans.text, acct, counter, None if fresh is None else fresh["bytes"])
            # with those finished meanwhile
            kept, served, mine = self._grouped(self._answers, self._store_answers, item)
        if kept is mine:  # ours was stored: the served answer is what those bytes encode
            return served
        return _served_query(decode(kept, what="served"))

    def _store_answers(self, items: list[AnswerItem]) -> list[AnswerStored]:
        """One transaction without the tail lock (no ledger row): the checkpoint of the largest log the batch's
        receipts name, each answer with its receipt, signed at its own leaf's size (pos + 1; the first stored answer
        wins). Per item (record, answer, account, counter, the row's bytes if known): (the stored bytes, our served
        answer, our bytes)."""
        # everything is signed first, outside the transaction (spec/provider.md §8: a signer may be slow, and no lock
        # is held while it runs): the checkpoint of the largest log a receipt of this batch names (size pos + 1, its
        # root recorded with the leaf) and each receipt at its own leaf's size; no read, and this process's key is at
        # least the one in effect there, since it read the log's key leaves when it recorded that leaf (§3.3)
        last = max((it[0] for it in items), key=lambda r: r["pos"])
        size, root = _receipt_size(last), bytes.fromhex(_receipt_root(last))
        note = None
        if all(it[0].get("release_at_ms") is None for it in items):  # else signed on the grid (§5.6)
            note = sign_checkpoint(Checkpoint(self.origin, size, root, ()), self.signer_at(size))
        signed: list[tuple[ServedQuery, str, int, bytes | None, bytes]] = []
        for record, text, acct, counter, expect in items:
            # signed at the log its leaf made (size pos + 1, recorded with the leaf): whatever was appended while
            # the answer was generated, no signed byte tells when the work ended
            body = {**record["receipt_body"], "h_answer": hashlib.sha256(text.encode("utf-8")).hexdigest()}
            served = ServedQuery(
                text, record["top"], sign_receipt(body, self.signer_at(_receipt_size(record))), record["pos"]
            )
            signed.append((served, acct, counter, expect, encode({**record, "served": served.to_dict()})))
        out: list[AnswerStored] = []
        with self.store.write(tail=False):
            if note is not None:
                self.aud.put_checkpoint(size, note)
            for served, acct, counter, expect, mine in signed:
                kept = self.aud.store_answer(acct, counter, mine, unless_stored=_has_answer, expect=expect)
                out.append((kept, served, mine))
        return out

    # -- internals -------------------------------------------------------------------------------------------
    def _charge_opening(self, flt: IndividualRenyiFilter, selection: Selection) -> Charge:
        charges: list[ChargeEntry] = []
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

    def _generate(
        self, question: str, top: npt.NDArray[np.int64], retriever: TenantRetriever, h_req: bytes, ep: Epoch
    ) -> RagAnswer:
        """§5.3 step 7: the answer from the recorded selection's documents ``top``, drawn from the request's
        committed ``generate`` stream only, under the epoch it was recorded in. The epoch's generator is the kind its
        mechanism takes (``models.serving_generator``), which the mechanism protocol types as the logit kind."""
        generator = cast(Generator, ep.generator)
        return ep.rag_params.respond(
            question, top, retriever, generator, source=request_source(ep.seed, "generate", h_req)
        )


class _SelectionFailed(Exception):
    """The selection and its charge (§5.3 step 4) failed inside the record transaction, which rolls back; the
    request path then searches for the failing records (``Serving._exclude_failing_selection``)."""


class _RolledBack(Exception):
    """Ends a probe's transaction (``Serving._selection_fails``): rolled back, nothing kept."""


def _guarded(ep: Epoch, guard: StoredGuard) -> Epoch:
    """``ep`` with its text generator wrapped in ``guard`` (resend.py: no call once the answer is stored); a logit
    generator (``pure-dp-rag``, local) sends nothing out of the process and is used as is."""
    if ep.policy.generation.mechanism == "pure-dp-rag":
        return ep
    return dataclasses.replace(ep, generator=cast(TextGenerator, guard_generator(ep.generator, guard)))


def _receipt_size(row: ServedRow) -> int:
    """The size a served row's receipt names (pos + 1: the log its leaf made)."""
    size = row["receipt_body"]["size"]
    if not isinstance(size, int):
        raise ServiceStateError(f"the receipt body of ledger position {row['pos']} names no size")
    return size


def _receipt_root(row: ServedRow) -> str:
    """The root (hex) a served row's receipt names: the log its leaf made."""
    root = row["receipt_body"]["root"]
    if not isinstance(root, str):
        raise ServiceStateError(f"the receipt body of ledger position {row['pos']} names no root")
    return root
