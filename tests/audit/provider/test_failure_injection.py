"""Failure injection through the whole request path, on SQLite and PostgreSQL (spec/accounting/rag.md §6,
spec/provider.md §3.5-3.7).

Two neighbouring corpora: D holds the clinic record Z (a record that carries the marker word ``qmark``), D′ holds
the original record in its place (replace-one). Each window is served three HTTP requests (alice's asthma question,
the same signed request again, bob's garden question) through the FastAPI app, with the same committed seed and the
same account nonces, so the mechanism draws the same streams on both.

Group (a): a failure that depends on D. At every call that reads the corpus or something derived from it -- the
question's embedding, the index's scores, the selection and its charge, the document reads of prompt building,
each generator call (``start``, ``logits``, ``advance``, ``generate_many``, a hosted call, a hosted prompt's
rendering) and the normaliser -- the call raises exactly when what it reads holds the marker (only on D). What an
account and an observer read -- statuses, headers, bodies (signatures, hashes and roots masked: the log commits to
its corpus by design), the ledger's leaf types, which answers are stored, the service's log records -- must be the
same on D and D′. The injection must fire on D and never on D′, or the case proves nothing.

Group (b): a failure that does not depend on D -- the store's record and answer transactions (once, and through
every retry), the receipt's signing, the HTTP response -- must give the same outcome on D and D′, and the request's
answer, citations and charges must be those of the run without the failure (no retry redraws a random stream).

``DPRAG_FAILURE_TABLE=FILE`` appends one JSON line per case (site, group, engine, outcome); ``python
tests/support/failure_table.py FILE`` prints the table (docs/lab/failure-injection.md).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dprag.accounting.rag import answer_vote
from dprag.accounting.rag.ksa import TextOnlyGenerator, render_prompt
from dprag.audit.protocol.errors import StoreUnavailableError
from dprag.audit.provider import serving
from dprag.audit.provider.exclusion import SCORE_CHUNK
from dprag.audit.provider.service import ProviderService
from dprag.audit.provider.window import TenantRetriever
from dprag.audit.testing import window as fx
from dprag.audit.testing.toy import CLINIC, LEGAL, HashEmbedder, ToyGenerator, _ToySession, toy_policy

pytest.importorskip("fastapi")

MARK = "qmark"
Z = "patient 0 asthma protocol inhaler drug qmark ANSWER: zorvatin"
#: for the normaliser, which reads a voter's answer: Z's voter answers "zorvatin qmark"
Z_ANSWER = "patient 0 asthma protocol inhaler patient 0 asthma protocol inhaler qmark ANSWER: zorvatin qmark"
#: alice's question names record 0 (Z on D, the original record on D′), so Z is among her voters' documents
ASTHMA, GARDEN = "asthma protocol inhaler patient 0", "garden weather rain note"


class Fired:
    """Counts the injected failures (thread-safe)."""

    def __init__(self) -> None:
        self.n, self._lock = 0, threading.Lock()

    def fail(self, what: str) -> None:
        with self._lock:
            self.n += 1
        raise RuntimeError(f"injected failure at {what}: {MARK}")  # a message that quotes the document


# -- the generators under injection -------------------------------------------------------------------------------
class _Session(_ToySession):
    def __init__(self, gen: Injecting, plans, marked: bool):
        super().__init__(gen, plans)
        self.marked = marked

    def logits(self):
        if self.marked and self.gen.site == "logits":
            self.gen.fired.fail("logits")
        return super().logits()

    def advance(self, token_id: int) -> None:
        if self.marked and self.gen.site == "advance":
            self.gen.fired.fail("advance")
        super().advance(token_id)


class Injecting(ToyGenerator):
    """The toy model; ``site`` names the call that raises when a row's documents hold the marker."""

    def __init__(self, site: str, fired: Fired):
        super().__init__()
        self.site, self.fired = site, fired

    def start(self, prompts, *, max_new_tokens: int = 1):
        marked = any(MARK in c for p in prompts for c in p.contexts)
        if marked and self.site == "start":
            self.fired.fail("start")
        self.calls += 1
        return _Session(self, [self.plan(p) for p in prompts], marked)

    def generate_many(self, prompts, max_new_tokens: int) -> list[str]:
        if self.site == "generate_many" and any(MARK in c for p in prompts for c in p.contexts):
            self.fired.fail("generate_many")
        return super().generate_many(prompts, max_new_tokens)


def _hosted_llm(text: str) -> str:
    """A deterministic hosted LLM: the ANSWER words of the first document in its prompt, or the keywords."""
    found = re.findall(r"(?:ANSWER|Keywords):\s*([^\n.]+)", text)
    return found[0].replace(",", " ").strip() if found else "unknown"


def _hosted(site: str, fired: Fired) -> TextOnlyGenerator:
    def complete(text: str) -> str:
        if site == "hosted_call" and MARK in text:
            fired.fail("hosted call")
        return _hosted_llm(text)

    def render(prompt) -> str:
        if site == "hosted_render" and any(MARK in c for c in prompt.contexts):
            fired.fail("render")
        return render_prompt(prompt)

    return TextOnlyGenerator(complete, render=render, max_concurrency=1, name="injected-hosted")


# -- the sites ----------------------------------------------------------------------------------------------------
#: site -> (mechanism, outcome expected: "identical" or the gap it shows)
GROUP_A = {
    "embed(question)": "pure-dp-rag",
    "scores(index)": "pure-dp-rag",
    "selection+charge": "pure-dp-rag",
    "document read (prompt building)": "pure-dp-rag",
    "generator.start": "pure-dp-rag",
    "session.logits": "pure-dp-rag",
    "session.advance": "pure-dp-rag",
    "generate_many": "answer-vote",
    "normaliser": "answer-vote",
    "hosted call": "dp-ksa",
    "hosted prompt render": "dp-ksa",
}


@contextmanager
def _inject_a(site: str, fired: Fired, mp: pytest.MonkeyPatch) -> Iterator[None]:
    if site == "embed(question)":
        orig = HashEmbedder.embed

        def embed(self, texts):
            if any(MARK in t for t in texts):
                fired.fail("embed")
            return orig(self, texts)

        mp.setattr(HashEmbedder, "embed", embed)
    elif site == "scores(index)":  # the call that reads the index's rows: one public chunk, some rows emptied
        orig_q = TenantRetriever.score_chunk

        def score_chunk(self, first, keep, q_query):
            rows = range(first, min(first + SCORE_CHUNK, len(self.docs)))
            if any(MARK in self.docs[i] for k, i in enumerate(rows) if keep is None or keep[k]):
                fired.fail("scores")
            return orig_q(self, first, keep, q_query)

        mp.setattr(TenantRetriever, "score_chunk", score_chunk)
    elif site == "selection+charge":
        orig_c = serving.Serving._charge_opening

        def charge_opening(self, flt, selection):
            ids = {int(i) for _, ids in selection.charges for i in ids}
            tenant_docs = self.tenants["clinic"].retriever.docs
            if any(MARK in tenant_docs[i] for i in ids if 0 <= i < len(tenant_docs)):
                fired.fail("selection")
            return orig_c(self, flt, selection)

        mp.setattr(serving.Serving, "_charge_opening", charge_opening)
    elif site == "document read (prompt building)":
        orig_d = TenantRetriever.document

        def document(self, doc_id):
            text = orig_d(self, doc_id)
            if MARK in text:
                fired.fail("document")
            return text

        mp.setattr(TenantRetriever, "document", document)
    elif site == "normaliser":
        orig_k = answer_vote.basic_key

        def key(answer, question="", max_words=3):
            if MARK in answer:
                fired.fail("normaliser")
            return orig_k(answer, question, max_words)

        mp.setattr(answer_vote, "basic_key", key)
    yield


def _generator(site: str, mechanism: str, fired: Fired):
    if mechanism == "dp-ksa":
        return _hosted({"hosted call": "hosted_call", "hosted prompt render": "hosted_render"}.get(site, ""), fired)
    name = {"generator.start": "start", "session.logits": "logits", "session.advance": "advance"}.get(site, site)
    return Injecting(name, fired)


# -- one window, observed ---------------------------------------------------------------------------------------
def _create(d: Path, store: str | None, mechanism: str, generator, with_z: bool, z: str = Z) -> ProviderService:
    clinic = list(CLINIC)
    if with_z:
        clinic[0] = z
    emb = HashEmbedder(32)
    return ProviderService.create(
        d,
        policy=toy_policy(mechanism=mechanism, replayable=mechanism != "dp-ksa"),
        embedder=emb,
        seed=b"\x05" * 32,
        embedder_descriptor=emb.descriptor({"clinic": len(clinic), "legal": len(LEGAL)}),
        generator=generator,
        tenants={"clinic": clinic, "legal": LEGAL},
        accounts=fx.registry(fx.ACCOUNTS),
        store=store,
        allow_weak=True,
    )


_OPAQUE = re.compile(r"^[0-9a-f]{32,}$|^[A-Za-z0-9+/=_:.\-]{40,}$")


def _mask(x):
    """Signatures, hashes, roots and origins replaced (the log commits to its corpus by design); all else kept."""
    if isinstance(x, dict):
        return {k: _mask(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_mask(v) for v in x]
    if isinstance(x, str) and (_OPAQUE.match(x) or "\n" in x and len(x) > 80):
        return "<opaque>"
    return x


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("dprag"):
            self.lines.append(f"{record.levelname} {record.name} {record.getMessage()}")


def _observe(svc: ProviderService) -> dict:
    """What the accounts and an observer read of the three requests (module doc), and the request's charges."""
    from fastapi.testclient import TestClient

    from dprag.audit.provider.http.app import create_app

    alice, bob = fx.client(svc, "alice"), fx.client(svc, "bob")
    a, b = alice.request(ASTHMA), bob.request(GARDEN)
    wires = [json.dumps(r.to_json()).encode() for r in (a, a, b)]
    handler = _Records()
    logging.getLogger().addHandler(handler)
    seen = []
    try:
        with TestClient(create_app(svc), raise_server_exceptions=False) as http:
            for w in wires:
                r = http.post("/v1/requests", content=w)
                headers = sorted((k, v) for k, v in r.headers.items() if k not in ("date", "content-length"))
                seen.append((r.status_code, headers, _mask(r.json())))
    finally:
        logging.getLogger().removeHandler(handler)
    leaves = [json.loads(svc.ledger.leaf(i)).get("type") for i in range(svc.ledger.size)]
    stored = {}
    charges = {}
    for acct, counter in (("alice", 1), ("bob", 1)):
        row = svc.aud.served(acct, counter)
        served = None if row is None else json.loads(row)
        stored[acct] = None if served is None else bool(served.get("served"))
        if served is not None:
            op = json.loads(svc.aud.opening(served["pos"]) or b"null")
            charges[acct] = op["charge"]["charges"]
    return {
        "responses": seen,
        "leaves": leaves,
        "stored": stored,
        "log": [_mask(line) for line in handler.lines],
        "charges": charges,
    }


def _outcome(obs: dict) -> str:
    return "/".join(str(s) for s, _, _ in obs["responses"])


def _record(site: str, group: str, engine: str, outcome: str) -> None:
    path = os.environ.get("DPRAG_FAILURE_TABLE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"site": site, "group": group, "engine": engine, "outcome": outcome}) + "\n")


def _engine(store_url: str | None) -> str:
    return "sqlite" if store_url is None else "postgresql"


# -- group (a) ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("site", list(GROUP_A))
def test_a_failure_that_depends_on_the_corpus_is_invisible(site, tmp_path, store_url, monkeypatch):
    mechanism = GROUP_A[site]
    obs, fired = {}, {}
    for name, with_z in (("D", True), ("D'", False)):
        f = Fired()
        z = Z_ANSWER if site == "normaliser" else Z
        svc = _create(tmp_path / name, store_url, mechanism, _generator(site, mechanism, f), with_z, z)
        try:
            with monkeypatch.context() as mp, _inject_a(site, f, mp):
                obs[name] = _observe(svc)
        finally:
            svc.close()
        fired[name] = f.n
    same = {k: obs["D"][k] == obs["D'"][k] for k in ("responses", "leaves", "stored", "log")}
    reads_corpus = site != "embed(question)"
    d, d2 = obs["D"], obs["D'"]
    outcome = ("identical " if all(same.values()) else "DIFFERS ") + f"D {_outcome(d)} / D' {_outcome(d2)}"
    n_d, n_d2 = fired["D"], fired["D'"]
    outcome += f"; fired {n_d}x on D, {n_d2}x on D'"
    _record(site, "a", _engine(store_url), outcome)
    assert fired["D'"] == 0, fired
    if reads_corpus:
        assert fired["D"] > 0, f"the injection never fired on D: the case proves nothing ({fired})"
    else:  # the question's embedding reads no document: the injection cannot fire (the row says so)
        assert fired["D"] == 0, fired
    for k, ok in same.items():
        assert ok, (k, obs["D"][k], obs["D'"][k])


# -- group (b) ----------------------------------------------------------------------------------------------------
GROUP_B = (
    "store: record transaction, once",
    "store: record transaction, every attempt",
    "store: answer transaction, once",
    "signing: the receipt",
    "HTTP: the response",
)


@contextmanager
def _inject_b(site: str, fired: Fired, mp: pytest.MonkeyPatch) -> Iterator[None]:
    times = {"store: record transaction, every attempt": serving.STORE_ATTEMPTS + 1}.get(site, 1)

    def once(orig: Callable, exc: Callable[[], Exception], when: Callable[..., bool] = lambda *a, **k: True):
        def wrapped(*args, **kwargs):
            if fired.n < times and when(*args, **kwargs):
                fired.n += 1
                raise exc()
            return orig(*args, **kwargs)

        return wrapped

    unavailable = lambda: StoreUnavailableError("injected: the store went away")  # noqa: E731
    if site.startswith("store: record"):  # inside the record transaction, after the charge's writes began
        mp.setattr(serving.Serving, "_record", once(serving.Serving._record, unavailable))
    elif site == "store: answer transaction, once":  # inside the answer transaction
        from dprag.audit.provider.storage.records import Records

        mp.setattr(Records, "store_answer", once(Records.store_answer, unavailable))
    elif site == "signing: the receipt":
        mp.setattr(serving, "sign_receipt", once(serving.sign_receipt, lambda: RuntimeError("injected: signer down")))
    elif site == "HTTP: the response":  # the 200's body, built by the HTTP handler after the answer is stored

        def in_the_handler(*a, **k) -> bool:
            return sys._getframe(2).f_globals.get("__name__", "").endswith("http.app")

        reset = lambda: RuntimeError("injected: connection reset")  # noqa: E731
        mp.setattr(serving.ServedQuery, "to_dict", once(serving.ServedQuery.to_dict, reset, in_the_handler))
    yield


_BASELINES: dict[tuple[str, bool], dict] = {}


def _baseline(tmp_path: Path, store_url: str | None, with_z: bool) -> dict:
    """The run without a failure (one per engine and corpus, shared by the group's cases)."""
    key = (_engine(store_url), with_z)
    if key not in _BASELINES:
        svc = _create(tmp_path / f"base-{with_z}", store_url, "pure-dp-rag", ToyGenerator(), with_z)
        try:
            _BASELINES[key] = _observe(svc)
        finally:
            svc.close()
    return _BASELINES[key]


def _answers(obs: dict) -> list:
    """Each account's served answer and citations (the last 200 of each), and the charges."""
    out = {}
    for i, (status, _, body) in enumerate(obs["responses"]):
        if status == 200:
            out["bob" if i == 2 else "alice"] = (body["answer"], body["citations"])
    return [out, obs["charges"]]


@pytest.mark.parametrize("site", GROUP_B)
def test_a_failure_that_does_not_depend_on_the_corpus_is_the_same_on_both(site, tmp_path, store_url, monkeypatch):
    obs = {}
    for name, with_z in (("D", True), ("D'", False)):
        f = Fired()
        svc = _create(tmp_path / name, store_url, "pure-dp-rag", ToyGenerator(), with_z)
        try:
            with monkeypatch.context() as mp, _inject_b(site, f, mp):
                obs[name] = _observe(svc)
        finally:
            svc.close()
        assert f.n > 0, f"the injection never fired on {name}"
        # no retry redraws a random stream: the answers, citations and charges of the run without the failure
        assert _answers(obs[name]) == _answers(_baseline(tmp_path, store_url, with_z)), name
    statuses = [[(s, h, b if s != 200 else "<served>") for s, h, b in obs[n]["responses"]] for n in ("D", "D'")]
    d, d2 = obs["D"], obs["D'"]
    _record(site, "b", _engine(store_url), f"identical D {_outcome(d)} / D' {_outcome(d2)}; no redraw")
    assert statuses[0] == statuses[1], statuses
    for k in ("leaves", "stored", "log"):
        assert obs["D"][k] == obs["D'"][k], (k, obs["D"][k], obs["D'"][k])
