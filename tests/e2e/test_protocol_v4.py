"""Protocol v4 (spec/protocol.md): each finding against v3, as the test the party that found it would write.

Each test here fails on the v3 code by an assertion (the closing note of the session that landed it quotes the v3
output) and passes on v4."""

from __future__ import annotations

import hashlib
import itertools
import json

import pytest

from dprag.audit.protocol import commitments as cm
from dprag.audit.protocol.encoding import encode
from dprag.audit.protocol.errors import RateLimitError, RequestError
from dprag.audit.protocol.ledger import NoteSigner
from dprag.audit.provider import serving
from dprag.audit.provider.service import ProviderService
from dprag.audit.testing import window as fx
from dprag.audit.testing.toy import HashEmbedder, ToyGenerator
from dprag.audit.verify import verify
from dprag.errors import InvalidParameterError


def _write(path, lines) -> str:
    path.write_bytes(b"".join(encode(x) + b"\n" for x in lines))
    return str(path)


# ------------------------------------------------------------------------------------------------------------
# refusals sign the log they read: an account cannot frame an honest provider
# ------------------------------------------------------------------------------------------------------------
def test_rule_a_refused_request_served_later_does_not_frame_the_provider(tmp_path):
    """An account sends counter 2 first (signed refusal: "must be the next counter 1"), then counter 1, then the same
    counter-2 bytes, which are served. v3 FAILed the honest provider when the account handed the refusal in ("the
    provider signed a refusal of the request it recorded"); v4's refusal names the log size its decision read, and
    the request sits above it: PASS, the refusal checked."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    r1 = alice.request("asthma protocol inhaler patient")
    r2 = alice.request("inhaler drug protocol")
    with pytest.raises(RequestError, match="must be the next counter 1") as exc:
        svc.serve(r2)  # the account's own doing: counter 2 before counter 1
    refusal = exc.value.refusal
    assert refusal is not None and refusal["code"] == "counter" and refusal["size"] == svc.ledger.size
    s1 = alice.send(svc, r1)
    s2 = alice.send(svc, r2)  # the same signed bytes, now the next counter: served
    assert s2.pos > s1.pos >= refusal["size"]
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    receipts = _write(
        tmp_path / "r.jsonl",
        [
            {"receipt": s1.receipt, "top": s1.citations, "request": r1.signed},
            {"receipt": s2.receipt, "top": s2.citations, "request": r2.signed},
            {"refusal": refusal, "request": r2.signed},  # handed in to frame the provider
        ],
    )
    v = verify(bundle, receipts=receipts)
    assert v.verdict == "PASS", v.reasons
    assert v.checked["refusals"] == 1 and v.checked["receipts_accepted"] == 2 and not v.rejected_evidence


def test_rule_a_refusal_whose_rule_is_false_of_the_log_fails(tmp_path):
    """A provider refusing a request with a rule that does not hold (alice's counter 1 refused as "not the next
    counter", or as over the rate limit, on a log where it was the next and within n) denies service and says the
    log made it: the refusal, with the request it names, FAILs naming the rule. Without the request the rule cannot
    be checked (the refusal is still checked against the log)."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    alice.ask(svc, "garden weather rain")
    req = alice.request("asthma protocol inhaler patient")  # counter 2, the next one
    lies = []
    for exc, code in (
        (RequestError("request.counter", "must be the next counter 7 (gapless)"), "counter"),
        (RateLimitError("account 'alice' has used its queries"), "rate"),
    ):
        exc.code, exc.snapshot = code, svc.ledger.size
        lies.append(svc._refuse(exc, req.signed).refusal)  # signed with the provider's own key
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    for lie, why in zip(lies, ("not the account's next, which it was", "over the policy's n"), strict=True):
        v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", [{"refusal": lie, "request": req.signed}]))
        assert v.verdict == "FAIL" and any("rule is false of the log" in r and why in r for r in v.reasons), v.reasons
        v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", [{"refusal": lie}]))
        assert v.verdict == "PASS" and v.checked["refusals"] == 1, v.reasons


def test_rule_a_refusal_signed_at_another_root_is_a_fork(tmp_path):
    """A refusal carries the root of the log its decision read; one whose root is not the ledger's at its size shows
    the provider served the account from another log (a fork): FAIL."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    alice.ask(svc, "garden weather rain")
    req = alice.request("asthma protocol inhaler patient")
    honest = svc._refuse(RequestError("question", "must be at most 4096 characters"), req.signed).refusal
    body = {k: v for k, v in honest.items() if k != "sig"}
    from dprag.audit.protocol.receipts import sign_refusal

    forked = sign_refusal({**body, "root": hashlib.sha256(b"another log").hexdigest()}, svc.signer)
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", [{"refusal": honest}]))
    assert v.verdict == "PASS" and v.checked["refusals"] == 1, v.reasons
    v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", [{"refusal": forked}]))
    assert v.verdict == "FAIL" and any("refusal's root is not the ledger's root" in r for r in v.reasons), v.reasons


# ------------------------------------------------------------------------------------------------------------
# no signed byte tells when the work ended
# ------------------------------------------------------------------------------------------------------------
class _ServesDuring(ToyGenerator):
    """The toy generator that, while generating the answer to a given question, first runs a callback (another
    account's request, served and recorded meanwhile): a long generation, with no clock."""

    def __init__(self):
        super().__init__()
        self.during: dict[str, object] = {}

    def _meanwhile(self, prompts) -> None:
        for q in sorted({p.question for p in prompts}):
            fn = self.during.pop(q, None)
            if fn is not None:
                fn()

    def start(self, prompts, *, max_new_tokens: int = 1):
        self._meanwhile(prompts)
        return super().start(prompts, max_new_tokens=max_new_tokens)

    def generate_many(self, prompts, max_new_tokens: int) -> list[str]:
        self._meanwhile(prompts)
        return super().generate_many(prompts, max_new_tokens)


def _run(tmp_path, monkeypatch, bob_lands_meanwhile: bool) -> tuple[bytes, bytes, list[int]]:
    """One toy window with every random choice fixed (the seed, the salts, the provider key, the nonces): alice
    asks, then bob — either after alice's answer is stored, or while it is being generated. Returns alice's and
    bob's receipts (bytes) and the sizes of the checkpoints signed."""
    counter = itertools.count()

    def fixed(n: int = 32) -> bytes:
        return hashlib.shake_256(b"fixed %d" % next(counter)).digest(n)

    monkeypatch.setattr(serving.secrets, "token_bytes", fixed)
    monkeypatch.setattr(serving.secrets, "token_hex", lambda n=32: fixed(n).hex())
    monkeypatch.setattr(cm.os, "urandom", fixed)
    gen = _ServesDuring()
    emb = HashEmbedder(32)
    svc = ProviderService.create(
        tmp_path / ("b" if bob_lands_meanwhile else "a"),
        policy=fx.toy_policy("murag"),
        embedder=emb,
        seed=b"\x05" * 32,
        signer=NoteSigner("provider", b"\x07" * 32),
        embedder_descriptor=emb.descriptor({"clinic": len(fx.CLINIC), "legal": len(fx.LEGAL)}),
        generator=gen,
        tenants={"clinic": fx.CLINIC, "legal": fx.LEGAL},
        accounts=fx.registry(fx.ACCOUNTS),
    )
    alice, bob = fx.client(svc, "alice"), fx.client(svc, "bob")
    bob_req = bob.request("inhaler drug protocol")
    got = {}
    if bob_lands_meanwhile:
        gen.during["asthma protocol inhaler patient"] = lambda: got.setdefault("bob", bob.send(svc, bob_req))
    got["alice"] = alice.ask(svc, "asthma protocol inhaler patient")
    if not bob_lands_meanwhile:
        got["bob"] = bob.send(svc, bob_req)
    sizes = [s for s, _ in svc.aud.checkpoints(svc.ledger.size)]
    svc.close()
    monkeypatch.undo()
    return encode(got["alice"].receipt), encode(got["bob"].receipt), sizes


def test_rule_a_receipt_does_not_tell_how_long_its_answer_took(tmp_path, monkeypatch):
    """v3 signed a receipt at the log head read when its answer was stored: alice's receipt said size 3 when bob's
    request landed while her answer was generated, size 2 when it did not (a signed timing channel: how long the
    generation took depends on the documents). v4 signs it at the log its leaf made (size pos + 1): the same bytes."""
    a_alone, b_alone, _ = _run(tmp_path, monkeypatch, bob_lands_meanwhile=False)
    a_meanwhile, b_meanwhile, _ = _run(tmp_path, monkeypatch, bob_lands_meanwhile=True)
    alone, meanwhile = json.loads(a_alone), json.loads(a_meanwhile)
    assert (alone["pos"], alone["size"]) == (1, 2), alone
    assert (meanwhile["pos"], meanwhile["size"]) == (1, 2), meanwhile
    assert a_alone == a_meanwhile
    assert b_alone == b_meanwhile


# ------------------------------------------------------------------------------------------------------------
# one text, one budget
# ------------------------------------------------------------------------------------------------------------
def test_rule_a_tenant_holds_each_text_once_at_creation_and_when_documents_join(tmp_path):
    """A copy of a document under another id would get a filter of its own (its text charged M times more). The
    provider refuses it, naming both ids: at create(), and when documents join a later window."""
    with pytest.raises(InvalidParameterError, match=r"tenants\[clinic\].*documents '3' and '100' have the same text"):
        ProviderService.create(
            tmp_path / "copy",
            policy=fx.toy_policy("murag"),
            embedder=HashEmbedder(32),
            seed=b"\x05" * 32,
            embedder_descriptor=HashEmbedder(32).descriptor({"clinic": 101}),
            generator=ToyGenerator(),
            tenants={"clinic": {**{str(i): x for i, x in enumerate(fx.CLINIC)}, "100": fx.CLINIC[3]}},
            accounts=fx.registry({"alice": "clinic"}),
        )
    assert not (tmp_path / "copy" / "state").exists()  # refused before anything was written
    svc = fx.open_service(tmp_path / "w1")
    with pytest.raises(InvalidParameterError, match=r"add_documents\[clinic\].*documents '7' and 'again-7'"):
        svc.next_window(
            tmp_path / "w2", policy=fx.toy_policy(window="w2"), add_documents={"clinic": {"again-7": fx.CLINIC[7]}}
        )
    assert not (tmp_path / "w2").exists()
    served = fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient")  # w1 still serves: nothing closed
    assert served.receipt["size"] == served.pos + 1
    svc.close()


def test_rule_exact_copies_under_new_ids_fail_without_the_corpus(tmp_path, monkeypatch):
    """A provider running its own code adds five texts again under new ids in w2, so each is charged to M twice over.
    v3 PASSed, even with --corpus (no code compared the text hashes); v4's auditor FAILs it from the committed
    text hashes alone (auditor/docs), naming the two ids, without the corpus."""
    monkeypatch.setattr(cm, "one_text_one_budget", lambda *a: None)  # the provider runs its own code
    w1 = fx.open_service(tmp_path / "w1")
    copies = {f"copy-{i}": fx.CLINIC[i] for i in range(5)}
    w2 = w1.next_window(tmp_path / "w2", policy=fx.toy_policy(window="w2"), add_documents={"clinic": copies})
    monkeypatch.undo()
    alice = fx.client(w2, "alice")
    alice.ask(w2, "asthma protocol inhaler patient")
    bundle = w2.export_bundle(tmp_path / "bundle")
    w1.close()
    w2.close()
    v = verify(bundle)
    assert v.verdict == "FAIL", v.headline()
    dup = [r for r in v.reasons if "have the same text" in r]
    assert len(dup) == 5 and dup[0].startswith("commitments: tenant 'clinic': documents '0' and 'copy-0'"), v.reasons


# ------------------------------------------------------------------------------------------------------------
# what the auditor reads: --corpus over a history whose corpus grew
# ------------------------------------------------------------------------------------------------------------
def test_rule_the_corpus_checks_each_epoch_against_the_prefix_it_committed(tmp_path):
    """An honest history adds a document in w2. v3 checked every window against the whole (grown) corpus: three
    false reasons and a FAIL. v4 checks each window against the prefix it committed, and re-embeds it: PASS; a
    corpus whose prefix differs still FAILs."""
    w1 = fx.open_service(tmp_path / "w1")
    alice = fx.client(w1, "alice")
    alice.ask(w1, "asthma protocol inhaler patient")
    new = {"new-1": "patient 99 asthma protocol inhaler drug ANSWER: newdrug"}
    w2 = w1.next_window(tmp_path / "w2", policy=fx.toy_policy(window="w2"), add_documents={"clinic": new})
    alice.next_window("w2", w2.signer.vkey())
    alice.ask(w2, "inhaler drug protocol")
    bundle = w2.export_bundle(tmp_path / "bundle")
    w1.close()
    w2.close()
    corpus = {"clinic": [*fx.CLINIC, *new.values()], "legal": list(fx.LEGAL)}
    v = verify(bundle, corpus=corpus, embedder=HashEmbedder(32))
    assert v.verdict == "PASS", v.reasons
    assert v.checked["documents_reembedded"] == 2 * len(fx.CLINIC) + 1 + 2 * len(fx.LEGAL)
    altered = {**corpus, "clinic": [fx.CLINIC[1], fx.CLINIC[0], *corpus["clinic"][2:]]}
    v = verify(bundle, corpus=altered, embedder=HashEmbedder(32))
    assert v.verdict == "FAIL" and any("is not the committed one" in r for r in v.reasons), v.reasons
    v = verify(bundle, corpus={**corpus, "clinic": list(fx.CLINIC)}, embedder=HashEmbedder(32))  # the head's is short
    assert v.verdict == "FAIL" and any("is not the committed one" in r for r in v.reasons), v.reasons
