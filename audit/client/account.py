"""The account's client (spec/protocol.md §5.1, §5.4): ``AccountClient`` keeps the account's side of the protocol:
its key, its counter, the receipts it received (appended durably, one JSON object per line), and the check that a
receipt answers the request it sent. The signed request itself is ``audit.protocol.request``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeGuard, TypeVar, cast

import numpy as np
import numpy.typing as npt

from dprag.errors import DpragError, InvalidParameterError

from ..protocol.encoding import JSON, EncodingError, encode, loads_bounded
from ..protocol.request import AccountKey, Request, make_request

if TYPE_CHECKING:
    from dprag.accounting.noise.stream import RandomStream

    from ..protocol.ledger.proof import ConsistencyProof
    from ..protocol.provider_keys import KeyChain

    class _Embedder(Protocol):
        """The committed embedder as the client uses it: ``embed(texts) -> (n, d) floats``."""

        def embed(self, texts: list[str], /) -> npt.ArrayLike: ...


class Shown(Protocol):
    """What a service shows the account for a request: ``ServedQuery`` in process, the HTTP client's over the wire
    (``remote.RemoteService``). Nothing of it is trusted before ``AccountClient.accept`` checks it."""

    @property
    def answer(self) -> object: ...

    @property
    def citations(self) -> object: ...

    @property
    def receipt(self) -> JSON: ...

    @property
    def pos(self) -> object: ...


S_co = TypeVar("S_co", bound=Shown, covariant=True)
#: what a service shows, in the client's methods (``send`` returns what ``serve`` returned, checked)
S = TypeVar("S", bound=Shown)


class Ledger(Protocol):
    """The service's ledger as the client asks it: a consistency proof between two sizes."""

    def consistency_proof(self, size1: int, size2: int, /) -> ConsistencyProof: ...


class Service(Protocol[S_co]):
    """A service as the account's client uses it: a ``ProviderService`` in process, or ``remote.RemoteService``."""

    @property
    def ledger(self) -> Ledger: ...

    def serve(self, req: Request, /) -> S_co: ...


class _ServesConsistency(Service[S_co], Protocol[S_co]):
    """A service that brings the consistency proof from the client's head with the answer (``RemoteService``)."""

    def serve(self, req: Request, /, since: int | None = None) -> S_co: ...


class Fetches(Service[S_co], Protocol[S_co]):
    """A service that returns a stored answer as it is (``RemoteService.answer_unchecked``)."""

    def answer_unchecked(self, counter: int, /) -> S_co: ...


def _serves_consistency(service: Service[S]) -> TypeGuard[_ServesConsistency[S]]:
    return bool(getattr(service, "serves_consistency", False))


def _field(record: JSON, name: str) -> JSON:
    """A field of a JSON object (None if ``record`` is not one or lacks it)."""
    return record.get(name) if isinstance(record, dict) else None


def _ints(values: object) -> list[int]:
    """``[int(x) for x in values]`` (TypeError or ValueError if that fails)."""
    if not isinstance(values, Iterable):
        raise TypeError(f"{type(values).__name__} is not iterable")
    return [int(x) for x in values]


class ReceiptError(DpragError):
    """What the account was shown does not answer the request it claims to (wrong signature, window, request, answer,
    citations, position, shape, or a checkpoint not shown consistent with the ones seen before). ``field`` names what
    failed (``receipt.sig``, ``receipt.h_req``, ``receipt.h_answer``, ``pos``, ...) and ``rule`` the rule it broke."""

    def __init__(self, field: str, rule: str):
        self.field, self.rule = field, rule
        super().__init__(f"{field}: {rule}")


class PendingRequestError(DpragError):
    """A request this account signed and sent has no receipt yet (a lost response, an outage) and could not be
    finished now: ``ask`` resends it before it signs a new counter, so nothing new is asked until it is answered.
    ``counter`` names it, ``cause`` is why the resend failed; the message names the commands that finish it."""

    def __init__(self, counter: int, cause: BaseException):
        self.counter, self.cause = counter, cause
        super().__init__(
            f"request {counter} of this account is still pending ({type(cause).__name__}: {cause}); it is resent "
            f"before any new request: retry when the service is back (dprag account resend DIR {counter} --url URL, "
            f"or AccountClient.retry(service, {counter}))"
        )


class AccountClient:
    """The account's side: key, gapless counter, receipts kept durably (``directory``: state; None = memory).

    ``embedder``: the committed embedder (anything with ``embed(texts) -> (n, d) floats``) and its scale; with
    it the client computes Q itself and commits to it, so the provider cannot substitute another Q.
    """

    def __init__(
        self,
        account: str,
        window: str,
        key: AccountKey,
        *,
        provider_vkey: str | None = None,
        origin: str | None = None,
        embedder: _Embedder | None = None,
        embedding_scale: int | None = None,
        directory: str | os.PathLike[str] | None = None,
        nonces: RandomStream | None = None,
    ):
        """``origin``: the log's name (``dprag/<chain id>``, ``GET /v1/info``) the account pins with the key; None:
        the first receipt's, then every later one must name it. ``nonces``: a RandomSource for the request nonces
        (tests only, for reproducible windows; default: the OS CSPRNG — a predictable nonce makes h_q guessable)."""
        self.account, self.window, self.key = account, window, key
        self.origin = origin
        self.provider_vkey = provider_vkey
        #: the provider keys this client trusts, with the leaf position each took effect at: the pinned one, then
        #: each rotation it followed (``follow_rotations``; spec/protocol.md §3.3)
        self.key_eras: list[tuple[int, str]] = [] if provider_vkey is None else [(0, provider_vkey)]
        #: the proof of each rotation followed: handed to the auditor with the receipts (``export_receipts``)
        self.rotation_proofs: list[JSON] = []
        self.embedder, self.embedding_scale = embedder, embedding_scale
        self.dir = None if directory is None else Path(directory)
        self.nonces = nonces
        self.counter = 0
        self.receipts: list[dict[str, JSON]] = []
        self.kept: dict[str, list[dict[str, JSON]]] = {}  # incidents, forks, refusals (also on disk with a directory)
        self._sent: dict[int, Request] = {}  # signed requests by counter: a retry resends the same bytes
        # the largest checkpoint seen: (size, root, its receipt)
        self._head: tuple[int, str, JSON] | None = None
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            rpath = self.dir / "receipts.jsonl"
            if rpath.exists():
                for i, line in enumerate(rpath.read_bytes().splitlines(), 1):
                    if line.strip():
                        self.receipts.append(loads_bounded(line, what=f"{rpath} line {i}"))
            cpath = self.dir / "counter"
            if cpath.exists():
                self.counter = int(cpath.read_text())
            for p in sorted((self.dir / "sent").glob("*.json")) if (self.dir / "sent").is_dir() else []:
                req = Request.from_json(loads_bounded(p.read_bytes(), what=str(p)))
                self._sent[int(req.signed["counter"])] = req
            for name in ("incidents.jsonl", "forks.jsonl", "refusals.jsonl"):
                if (self.dir / name).is_file():
                    lines = (self.dir / name).read_bytes().splitlines()
                    what = str(self.dir / name)
                    self.kept[name] = [loads_bounded(x, what=what) for x in lines if x.strip()]
            kpath = self.dir / "provider_keys.json"
            if kpath.is_file() and provider_vkey is not None:
                kept = loads_bounded(kpath.read_bytes(), what=str(kpath))
                eras = [(int(p), str(k)) for p, k in kept["eras"]]
                if eras and eras[0][1] == provider_vkey:  # followed from the key pinned now
                    self.key_eras, self.rotation_proofs = eras, list(kept["proofs"])
                    self.provider_vkey = eras[-1][1]
            for e in self.receipts:
                r = e["receipt"]
                size, root, named = _field(r, "size"), _field(r, "root"), _field(r, "origin")
                if isinstance(size, int) and isinstance(root, str) and (self._head is None or size > self._head[0]):
                    self._head = (size, root, r)
                if self.origin is None and isinstance(named, str):
                    self.origin = named  # the log its earlier receipts named (pinned on first use)

    @classmethod
    def load(cls, directory: str | os.PathLike[str], *, embedder: _Embedder | None = None) -> AccountClient:
        """The account of an account directory (``dprag account new DIR``: ``config.json``, ``account.key`` 0600,
        its state): pinned to the provider key and origin its config records. ``embedder``: the committed embedder
        the config names (``config.json``'s ``embedder``; load it by name with
        ``audit.provider.models.load_embedder``, or pass your own object), so the client computes Q itself.
        ``InvalidParameterError`` naming ``directory`` if it is not an account directory."""
        d = Path(directory)
        try:
            cfg = loads_bounded((d / "config.json").read_bytes(), what="config.json")
            key = AccountKey.from_hex((d / "account.key").read_text())
            if not isinstance(cfg, dict):
                raise EncodingError("config.json: must be a JSON object")
            name, window = cfg["account"], cfg["window"]
            pk, origin, scale = cfg.get("provider_key"), cfg.get("origin"), cfg.get("embedding_scale") or 1024
            if not (isinstance(name, str) and isinstance(window, str) and isinstance(scale, int)):
                raise EncodingError("config.json: account and window must be strings, embedding_scale an integer")
        except (OSError, ValueError, KeyError, DpragError) as e:
            raise InvalidParameterError("directory", f"{d}: not an account directory ({e})") from None
        return cls(
            name,
            window,
            key,
            provider_vkey=pk if isinstance(pk, str) else None,
            origin=origin if isinstance(origin, str) else None,
            directory=d,
            embedder=embedder,
            embedding_scale=scale,
        )

    # -- requests ----------------------------------------------------------------------------------------
    def request(self, question: str) -> Request:
        """Sign the next request (the counter advances durably first, so a crash never reuses one)."""
        qemb = None
        if self.embedder is not None:
            from ..protocol.commitments import embedding_bytes, quantise_embeddings

            scale = cast(int, self.embedding_scale)  # given with the embedder (None would fail here)
            q = quantise_embeddings(np.asarray(self.embedder.embed([question]))[0:1], scale)[0]
            qemb = embedding_bytes(q)
        counter = self.counter + 1
        signed = make_request(
            self.key,
            window=self.window,
            account=self.account,
            counter=counter,
            question=question,
            qemb=qemb,
            nonce=None if self.nonces is None else self.nonces.bytes(16),
        )
        req = Request(signed, question, qemb)
        if self.dir is not None:  # durable before it is sent: after a crash the client resends it, never re-signs
            p = self.dir / "sent" / f"{counter}.json"
            p.parent.mkdir(exist_ok=True)
            p.write_bytes(encode(req.to_json()))
        self._set_counter(counter)
        self._sent[counter] = req
        return req

    def _set_counter(self, c: int) -> None:
        self.counter = c
        if self.dir is not None:
            tmp = self.dir / "counter.tmp"
            tmp.write_text(str(c))
            os.replace(tmp, self.dir / "counter")

    def ask(self, service: Service[S], question: str) -> S:
        """Send one request to ``service`` (a ProviderService), check the answer, the citations and the receipt
        against each other and the ledger's history the client has seen (``accept``); return what was served.
        A request signed earlier that has no receipt yet (``pending``) is resent first, byte for byte, so a lost
        response never leaves the account a counter ahead; if it still cannot be finished, PendingRequestError
        names it and nothing new is signed. A resend the provider answers with a signed void (recorded, never to be
        answered: its account re-keyed or was revoked since, spec/protocol.md §5.1) is kept and no longer pending.
        Over HTTP nothing is signed or sent until the provider key and the log's origin are pinned
        (``require_pins``)."""
        if _serves_consistency(service):
            self.require_pins()
        for counter in self.pending():
            try:
                self.send(service, self._sent[counter])
            except ReceiptError:
                raise
            except DpragError as e:
                if counter in self.pending():  # a signed refusal of it frees its counter: then go on
                    raise PendingRequestError(counter, e) from e
        return self.send(service, self.request(question))

    def require_pins(self) -> None:
        """Refuse (``InvalidParameterError`` naming ``provider_key`` or ``origin``) unless the provider's key and the
        log's origin are pinned: a request sent before would be charged by a log this client cannot yet tell from
        another (spec/protocol.md §5.1). ``send``, ``ask`` and ``retry`` call it for a service over HTTP."""
        if self.provider_vkey is None:
            raise InvalidParameterError(
                "provider_key", "is not pinned: pass provider_vkey= (dprag account new --provider-key FILE)"
            )
        if self.origin is None:
            raise InvalidParameterError(
                "origin", "is not pinned: pass origin= (dprag account new --origin dprag/<chain id>)"
            )

    def pending(self) -> list[int]:
        """The counters this client signed (durably, ``sent/``) up to its current one that have no kept receipt and
        no kept void: a response lost to an outage, a crash, or a request signed and never sent."""
        answered = {_field(e["receipt"], "counter") for e in self.receipts}
        voided = self.voided()
        return sorted(
            c
            for c in self._sent
            if c <= self.counter and c not in answered and voided.get(c) != self._sent[c].h_req.hex()
        )

    def voided(self) -> dict[int, str]:
        """The counters of this client's requests that the provider voided (a signed ``void`` refusal kept in
        ``refusals.jsonl``, spec/protocol.md §5.1: recorded, never to be answered, the counter consumed): counter
        -> the voided request's h_req."""
        out: dict[int, str] = {}
        for e in self.kept.get("refusals.jsonl", []):
            refusal, req = e.get("refusal"), e.get("request")
            if _field(refusal, "code") == "void" and isinstance(c := _field(req, "counter"), int):
                h = _field(refusal, "h_req")
                if isinstance(h, str):
                    out[c] = h
        return out

    def rotation_leaf(self, new: AccountKey) -> dict[str, JSON]:
        """The ``account-key`` leaf that moves this account to ``new``, signed by its current key for the pinned log
        (spec/protocol.md §3.2; the provider appends it: ``ProviderService.rotate_account_key``). The client keeps
        its key until the caller switches it (``client.key = new``) once the leaf is in the log."""
        from ..protocol.registry import account_key_leaf

        if self.origin is None or not self.origin.startswith("dprag/"):
            raise InvalidParameterError("origin", "is not pinned: a key rotation is signed for one log (its chain id)")
        return account_key_leaf(self.key, self.origin.removeprefix("dprag/"), self.account, new.vkey)

    def send(self, service: Service[S], req: Request) -> S:
        """Send ``req`` (a new request, or a retry of the same signed bytes) and check what comes back. A signed
        refusal (counter not consumed) frees the counter for the next request and is kept as evidence; a signed void
        of ``req`` (its counter consumed: recorded, never to be answered) is kept as well, and ``req`` is no longer
        pending: the next request takes the next counter."""
        from dprag.errors import BudgetExhaustedError

        from ..protocol.receipts import verify_refusal

        if _serves_consistency(service):  # a service over the network: nothing leaves until both are pinned
            self.require_pins()
        try:
            if _serves_consistency(service):  # over HTTP: the proof from our head comes along
                served = service.serve(req, since=None if self._head is None else self._head[0])
            else:
                served = service.serve(req)
        except (InvalidParameterError, BudgetExhaustedError) as e:  # RequestError / RateLimitError: a refusal
            refusal = getattr(e, "refusal", None)
            if refusal is not None and self.provider_vkey is not None:
                self._follow_if_rotated(service, refusal)
                try:
                    size = refusal.get("size") if isinstance(refusal, dict) else None
                    keys = self._keys()
                    body = None if keys is None else keys.verifying(size, partial(verify_refusal, refusal), "refusal")
                except (EncodingError, DpragError):
                    body = None
                if (
                    body is not None
                    and body["code"] == "void"
                    and body["h_req"] == req.h_req.hex()
                    and body["origin"] == (self.origin or body["origin"])
                ):
                    if req.signed["counter"] not in self.voided():
                        self._keep("refusals.jsonl", {"refusal": refusal, "request": req.signed})
                elif (
                    body is not None
                    and body["h_req"] == req.h_req.hex()
                    and body["origin"] == (self.origin or body["origin"])
                    and req.signed["counter"] == self.counter
                ):
                    self._keep("refusals.jsonl", {"refusal": refusal, "request": req.signed})
                    self._set_counter(self.counter - 1)  # not consumed: the next request reuses it
            raise
        return self._check_shown(service, req, served)

    def fetch(self, service: Fetches[S], counter: int) -> S:
        """Fetch the stored answer of this client's request ``counter`` and check it exactly as ``send`` checks a
        served one, before anything of it is shown: ``service.answer_unchecked(counter)`` (``RemoteService``: ``GET
        /v1/answers/{counter}``) brings it, then ``accept`` checks the receipt's signature under the pinned provider
        key, that it answers the request this client signed at ``counter`` (its counter and h_req), that the answer
        hashes to its h_answer, that the citations open its h_top and the position shown is its ``pos``, and that its
        checkpoint is consistent with the last one this client accepted (the proof is fetched from ``service``), or
        keeps the fork. Returns what was fetched; otherwise raises ReceiptError (``field``, ``rule``), kept as an
        incident (never as a receipt). A stored answer already accepted is accepted again without a second entry."""
        if isinstance(counter, bool) or not isinstance(counter, int):
            raise InvalidParameterError("counter", "must be an integer", counter)
        req = self._sent.get(counter)
        if req is None:
            raise InvalidParameterError("counter", "no request of this client was signed for it", counter)
        return self._check_shown(service, req, service.answer_unchecked(counter))

    def _check_shown(self, service: Service[S], req: Request, served: S) -> S:
        """``accept`` what ``service`` returned for ``req`` (served or fetched), with the consistency proof from this
        client's head to the receipt's size: the one that came along, else one asked of ``service``."""
        proof: ConsistencyProof | None = None
        size = _field(served.receipt, "size")
        if self._head is not None and isinstance(size, int) and self._head[0] != size:
            lo, hi = sorted((self._head[0], size))
            try:
                sent = getattr(served, "consistency", None)  # checked like any proof: a wrong one is refused below
                proof = sent if sent is not None else service.ledger.consistency_proof(lo, hi)
            except Exception:  # noqa: BLE001 - no proof is a refusal below
                proof = None
        self._follow_if_rotated(service, served.receipt)
        self.accept(req, served.receipt, served.citations, answer=served.answer, consistency=proof, pos=served.pos)
        return served

    def retry(self, service: Service[S], counter: int | None = None) -> S:
        """Resend the signed request of ``counter`` (default: the last one) byte for byte: the provider returns the
        stored answer, or finishes a request charged before a failure from its recorded selection."""
        counter = self.counter if counter is None else int(counter)
        req = self._sent.get(counter)
        if req is None:
            raise InvalidParameterError("counter", "no request of this client was signed for it", counter)
        return self.send(service, req)

    def _keys(self) -> KeyChain | None:
        """The key chain this client trusts (``provider_keys.KeyChain``), or None with no key pinned."""
        from ..protocol.ledger import NoteVerifier
        from ..protocol.provider_keys import KeyChain

        if not self.key_eras:
            return None
        return KeyChain("", [(p, NoteVerifier.from_vkey(k)) for p, k in self.key_eras])

    def follow_rotations(self, history: JSON) -> int:
        """Follow the provider's key rotations (``service.key_history()``, ``GET /v1/keys``) from the key this
        client trusts: each rotation's proof must open under the key before it (``provider_keys.follow``); the
        keys followed are kept (``provider_keys.json``). Returns how many were followed; ReceiptError if a proof
        does not hold (kept as an incident)."""
        from ..protocol.ledger import NoteVerifier
        from ..protocol.provider_keys import follow

        if not self.key_eras:
            raise ReceiptError("provider_key", "no provider key pinned: nothing to follow a rotation from")
        done = 0
        rotations = _field(history, "rotations")

        def at(proof: JSON) -> int:
            pos = _field(proof, "pos")
            return pos if isinstance(pos, int) else 0

        for proof in sorted(rotations if isinstance(rotations, list) else [], key=at):
            pos0 = _field(proof, "pos")
            if not isinstance(pos0, int):
                continue
            if pos0 <= self.key_eras[-1][0]:
                continue
            try:
                origin = self.origin if self.origin is not None else str(_field(history, "origin"))
                pos, new = follow(NoteVerifier.from_vkey(self.key_eras[-1][1]), origin, proof)
            except (EncodingError, DpragError) as e:
                self._keep("incidents.jsonl", {"field": "rotation", "rule": str(e), "proof": proof})
                raise ReceiptError("rotation", f"a key rotation does not follow from the trusted key: {e}") from None
            self.key_eras.append((pos, new.vkey()))
            self.rotation_proofs.append(proof)
            self.provider_vkey = new.vkey()
            done += 1
        if done and self.dir is not None:
            tmp = self.dir / "provider_keys.json.tmp"
            tmp.write_bytes(encode({"eras": [[p, k] for p, k in self.key_eras], "proofs": self.rotation_proofs}))
            os.replace(tmp, self.dir / "provider_keys.json")
        return done

    def _follow_if_rotated(self, service: object, signed: JSON) -> None:
        """A receipt or refusal that no trusted key signed: follow the service's rotations first, if it has any."""
        keys = self._keys()
        history = getattr(service, "key_history", None)
        if keys is None or not callable(history) or not isinstance(signed, dict):
            return
        from ..protocol.encoding import encode as enc

        body = {k: v for k, v in signed.items() if k != "sig"}
        try:
            sig = bytes.fromhex(str(signed.get("sig")))
        except ValueError:
            return
        from ..protocol.receipts import DOMAIN, REFUSAL_DOMAIN

        domain = DOMAIN if signed.get("type") == "receipt" else REFUSAL_DOMAIN
        if any(v.verify(domain + enc(body), sig) for _, v in keys.eras):
            return
        try:
            self.follow_rotations(history())
        except Exception:  # noqa: BLE001 - no history, or one that does not follow: the check below refuses
            return

    # -- receipts ----------------------------------------------------------------------------------------
    def accept(
        self,
        req: Request,
        receipt: JSON,
        citations: object = None,
        *,
        answer: object,
        consistency: ConsistencyProof | None = None,
        pos: object = None,
    ) -> dict[str, JSON]:
        """Check everything the account is shown against the signed receipt before it is shown, then keep it:
        the signature under the pinned key, that it answers ``req`` (its counter and h_req), that ``answer`` hashes to
        ``h_answer``, that the ``citations`` shown open ``h_top`` (where the tenant's citation channel is off only the
        empty list does: no citation may be shown), that the ledger position shown (``pos``, if given) is the one
        signed, and that its checkpoint is consistent with every earlier one this client saw (``consistency``: the
        RFC 6962 proof between the two sizes). Anything else raises ReceiptError (naming the field and the rule) and
        is logged as an incident (``incidents.jsonl``); two receipts that cannot both be honest are kept as a fork
        proof (``forks.jsonl``): hand them to the auditor."""
        from ..protocol.ledger.proof import verify_consistency
        from ..protocol.receipts import verify_receipt

        if self.provider_vkey is None:
            raise ReceiptError("provider_key", "no provider key pinned: pass provider_vkey= to check receipts")
        try:
            keys = self._keys()
        except (EncodingError, DpragError) as e:
            raise ReceiptError("provider_key", f"the pinned provider key is unusable ({e})") from None
        try:
            size = _field(receipt, "size")
            chain = cast("KeyChain", keys)  # a key is pinned (checked above)
            body = chain.verifying(size, partial(verify_receipt, receipt), "receipt")
        except (EncodingError, DpragError) as e:
            why = str(e)
            named = re.match(r"(receipt(?:\.\w+)?):", why)
            field = "receipt.sig" if "signature" in why else named.group(1) if named else "receipt"
            raise self._incident(req, receipt, field, f"receipt rejected: {why}") from None
        if body["account"] != self.account:
            raise self._incident(req, receipt, "receipt.account", "receipt names another account")
        if self.origin is not None and body["origin"] != self.origin:
            raise self._incident(req, receipt, "receipt.origin", "receipt names another log (origin)")
        if body["counter"] != req.signed["counter"]:
            raise self._incident(req, receipt, "receipt.counter", "receipt answers another request (its counter)")
        if body["h_req"] != req.h_req.hex():
            raise self._incident(req, receipt, "receipt.h_req", "receipt answers another request (its h_req)")
        if not isinstance(answer, str) or hashlib.sha256(answer.encode("utf-8")).hexdigest() != body["h_answer"]:
            raise self._incident(
                req, receipt, "receipt.h_answer", "the answer received is not the one the receipt signs (h_answer)"
            )
        if pos is not None and (isinstance(pos, bool) or pos != body["pos"]):
            raise self._incident(req, receipt, "pos", "the ledger position shown is not the receipt's pos")
        ids: list[int] | None = None
        if citations is not None:
            from ..protocol.retrieval import top_commitment

            try:
                ids = _ints(citations)
                ok = top_commitment(ids, bytes.fromhex(body["nonce_top"])) == body["h_top"]
            except (TypeError, ValueError, DpragError):
                ok = False
            if not ok:
                raise self._incident(
                    req, receipt, "receipt.h_top", "the citations shown do not open the receipt's h_top"
                )
        if self.voided().get(body["counter"]) == body["h_req"]:  # voided, then answered: both signed by the provider
            void = next(
                e["refusal"] for e in self.kept["refusals.jsonl"] if _field(e["refusal"], "h_req") == body["h_req"]
            )
            self._keep(
                "forks.jsonl", {"kind": "a receipt for a request the provider voided", "receipts": [void, receipt]}
            )
            raise self._incident(req, receipt, "receipt", "a receipt for a request the provider voided (both kept)")
        prior = next((e for e in self.receipts if _field(e["receipt"], "counter") == body["counter"]), None)
        if prior is not None:
            if prior["receipt"] == receipt:
                return body  # the same receipt again (a retry): nothing new to keep
            self._keep("forks.jsonl", {"kind": "two receipts for one request", "receipts": [prior["receipt"], receipt]})
            raise self._incident(
                req, receipt, "receipt", "a second, different receipt for a request already answered (kept)"
            )
        if self._head is not None and self._head[0] != body["size"]:
            (s1, r1, rc1), (s2, r2, rc2) = sorted(
                [self._head, (body["size"], body["root"], receipt)], key=lambda x: x[0]
            )
            try:
                if consistency is None:
                    raise ValueError("no consistency proof")
                verify_consistency(s1, s2, list(consistency.hashes), bytes.fromhex(r1), bytes.fromhex(r2))
            except Exception as e:  # noqa: BLE001 - any defect: the two checkpoints are not shown consistent
                if consistency is not None:
                    self._keep("forks.jsonl", {"kind": "inconsistent checkpoints", "receipts": [rc1, rc2]})
                raise self._incident(
                    req, receipt, "receipt.root", f"its checkpoint is not shown consistent with size {s1} ({e})"
                ) from None
        elif self._head is not None and self._head[1] != body["root"]:
            self._keep("forks.jsonl", {"kind": "two roots for one size", "receipts": [self._head[2], receipt]})
            raise self._incident(
                req, receipt, "receipt.root", "its root differs from an earlier receipt's at the same size (a fork)"
            )
        entry: dict[str, JSON] = {
            "receipt": receipt,
            "top": None if ids is None else [*ids],
            "request": req.signed,
            "question": req.question,
        }
        self.receipts.append(entry)
        self._keep("receipts.jsonl", entry)
        if self.origin is None:
            self.origin = body["origin"]  # pinned on first use: every later receipt must name this log
        if self._head is None or body["size"] > self._head[0]:
            self._head = (body["size"], body["root"], receipt)
        return body

    def _incident(self, req: Request, receipt: JSON, field: str, why: str) -> ReceiptError:
        self._keep("incidents.jsonl", {"field": field, "why": why, "request": req.signed, "receipt": receipt})
        return ReceiptError(field, why)

    def _keep(self, name: str, entry: dict[str, JSON]) -> None:
        """Append one JSON line durably (memory-only clients keep nothing on disk)."""
        self.kept.setdefault(name, []).append(entry)
        if self.dir is not None:
            with open(self.dir / name, "ab") as f:
                f.write(json.dumps(entry, sort_keys=True, ensure_ascii=False).encode("utf-8") + b"\n")
                f.flush()
                os.fsync(f.fileno())

    def export_receipts(self, path: str | os.PathLike[str], *, include_questions: bool = False) -> Path:
        """Write every kept receipt, with the citations shown and the signed request, as JSONL: what the account
        hands the auditor. ``include_questions``: also the question texts (they open the requests' h_q), which
        an auditor needs to replay the answers; the account decides."""
        keep = ("receipt", "top", "request", "question") if include_questions else ("receipt", "top", "request")
        p = Path(path)
        lines = [encode({k: e[k] for k in keep if k in e}) for e in self.receipts]
        # signed refusals, with the request each names: the auditor checks the refusal's rule against the log
        lines += [
            encode({k: e[k] for k in ("refusal", "request") if k in e}) for e in self.kept.get("refusals.jsonl", [])
        ]
        # the key rotations this client followed: the auditor follows them too (receipts beyond its bundle)
        lines += [encode({"rotation": proof}) for proof in self.rotation_proofs]
        p.write_bytes(b"".join(x + b"\n" for x in lines))
        return p
