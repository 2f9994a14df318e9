"""Protocol v3 (spec/protocol.md): each finding against v2, as the test the party that found it would write, named
after the rule it breaks. Every test here fails on the v2 code by an assertion (or by the v2 API refusing the v3
behaviour) and passes on v3."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from dprag.audit.client.account import AccountClient, ReceiptError
from dprag.audit.protocol import commitments as cm
from dprag.audit.protocol.encoding import encode
from dprag.audit.protocol.errors import AnswerPendingError, RateLimitError, RequestError
from dprag.audit.protocol.receipts import verify_refusal
from dprag.audit.provider.service import ProviderService
from dprag.audit.testing import window as fx
from dprag.audit.testing.toy import HashEmbedder, ToyGenerator, ToyTextGenerator
from dprag.audit.verify import verify
from dprag.errors import InvalidParameterError


def _receipts(tmp_path, clients, name="receipts.jsonl", questions=False) -> str:
    p = tmp_path / name
    keep = ("receipt", "top", "request", "question") if questions else ("receipt", "top", "request")
    p.write_bytes(b"".join(encode({k: e[k] for k in keep}) + b"\n" for c in clients.values() for e in c.receipts))
    return str(p)


def _spent(svc: ProviderService, tenant: str = "clinic") -> np.ndarray:
    ten = svc.tenants[tenant]
    return ten.filter.spent_units(np.arange(len(ten.retriever)))[:, 0].astype(np.int64)


# ------------------------------------------------------------------------------------------------------------
# A3.7 what the account sees is what the receipt signs
# ------------------------------------------------------------------------------------------------------------
def test_rule_the_client_refuses_an_answer_the_receipt_does_not_sign(tmp_path):
    """A provider sends the account verbatim document text with a receipt for the honest answer: v2's client kept the
    receipt (and the audit PASSed); v3's client refuses it before showing it and logs the incident."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice", directory=tmp_path / "alice")
    honest_serve = svc.serve

    def leaky(req):
        served = honest_serve(req)
        served.answer = fx.CLINIC[0]  # a private record, not the answer the receipt signs
        return served

    svc.serve = leaky
    with pytest.raises(ReceiptError, match="h_answer"):
        alice.ask(svc, "asthma protocol inhaler patient")
    assert alice.receipts == [] and not (tmp_path / "alice" / "receipts.jsonl").exists()
    incident = json.loads((tmp_path / "alice" / "incidents.jsonl").read_text().splitlines()[0])
    assert "h_answer" in incident["why"]


def test_rule_no_citation_is_shown_where_the_channel_is_off(tmp_path):
    """carol's tenant (legal) has citations off: v3's h_top commits to the empty list, so the client refuses any
    citation list the provider attaches — it needs only the receipt, not the hidden policy."""
    svc = fx.open_service(tmp_path / "svc")
    carol = fx.client(svc, "carol")
    honest_serve = svc.serve

    def shows_citations(req):
        served = honest_serve(req)
        assert served.citations is None  # the honest provider shows none
        served.citations = [0, 1, 2]
        return served

    svc.serve = shows_citations
    with pytest.raises(ReceiptError, match="h_top"):
        carol.ask(svc, "contract dispute court case")
    svc.serve = honest_serve
    assert carol.receipts == [] and carol.pending() == [1]  # nothing of the rejected answer was kept
    served = carol.ask(svc, "contract dispute court case again")  # request 1 is resent first: its receipt checked
    assert served.citations is None and [r["receipt"]["counter"] for r in carol.receipts] == [1, 2]


def test_rule_the_verifier_accepts_only_receipts_whose_leaf_matches(tmp_path):
    """A receipt is bound to its leaf's h_req and h_top (the public leaf no longer names account or counter): a
    provider-signed receipt whose account or counter contradicts the request opened at its position FAILs."""
    w = fx.build_window(tmp_path / "w", rounds=1, close=False)
    svc = w.service
    alice = w.clients["alice"]
    body = {k: v for k, v in alice.receipts[0]["receipt"].items() if k != "sig"}
    forged = {**body, "counter": body["counter"] + 7}  # the provider's own key signs a contradiction
    from dprag.audit.protocol.receipts import sign_receipt

    extra = tmp_path / "forged.jsonl"
    extra.write_bytes(encode({"receipt": sign_receipt(forged, svc.signer)}) + b"\n")
    svc.close()
    v = verify(w.bundle, receipts=extra)
    assert v.verdict == "FAIL"
    assert any(r.startswith("receipts:") and "contradicts the request opened" in r for r in v.reasons), v.reasons


# ------------------------------------------------------------------------------------------------------------
# A2.4 refusals are decided before anything, are signed, and consume no counter
# ------------------------------------------------------------------------------------------------------------
class CountingEmbedder(HashEmbedder):
    def __init__(self):
        super().__init__(32)
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        return super().embed(texts)


def _counting_service(tmp_path, **kw) -> tuple[ProviderService, CountingEmbedder]:
    fx.open_service(tmp_path / "svc", **kw).close()
    emb = CountingEmbedder()
    return ProviderService.open(tmp_path / "svc", embedder=emb, generator=ToyGenerator()), emb


def test_rule_a_refusal_consumes_no_counter(tmp_path):
    """v2: a refused request (too long) still consumed the account's gapless counter and every later request was
    refused (an account served 2 of its 4 queries, then locked out). v3: the refusal is signed, says the counter
    was not consumed, and the next request reuses it."""
    svc = fx.open_service(tmp_path / "svc", n=4)
    alice = fx.client(svc, "alice", confirm_q=False)
    alice.ask(svc, "asthma protocol inhaler patient 1")
    alice.ask(svc, "asthma protocol inhaler patient 2")
    with pytest.raises(RequestError) as e:
        alice.ask(svc, "x" * 5000)  # over MAX_QUESTION_CHARS
    refusal = verify_refusal(e.value.refusal, svc.signer.verifier())
    assert refusal["consumed"] is False and refusal["field"] == "question"
    assert alice.counter == 2 and len(alice.kept["refusals.jsonl"]) == 1
    alice.ask(svc, "asthma protocol inhaler patient 3")
    alice.ask(svc, "asthma protocol inhaler patient 4")
    assert [r["receipt"]["counter"] for r in alice.receipts] == [1, 2, 3, 4]
    with pytest.raises(RateLimitError) as e:
        alice.ask(svc, "asthma protocol inhaler patient 5")
    assert verify_refusal(e.value.refusal, svc.signer.verifier())["field"] == "request.counter"


def test_rule_nothing_is_embedded_before_a_refusal(tmp_path):
    """v2 embedded retries and over-limit requests before refusing them (the provider's embedder ran on a request
    that was then refused). v3 decides every refusal first: the embedder is not called."""
    svc, emb = _counting_service(tmp_path, n=1)
    alice = fx.client(svc, "alice", confirm_q=False)
    alice.ask(svc, "asthma protocol inhaler patient")
    assert emb.calls == 1
    alice.retry(svc)  # the same signed request: the stored answer
    with pytest.raises(RateLimitError):
        alice.ask(svc, "asthma protocol again")  # counter 2 > n = 1
    assert emb.calls == 1


class OverflowingToy(ToyGenerator):
    """A toy generator with a context window, counted in characters as a real adapter counts tokens: contexts are cut
    to ``max_context_tokens``, and a prompt over ``max_positions`` with the new tokens raises, the message stating its
    length (as rag_adapters.generator states the token count)."""

    max_positions = 200
    max_context_tokens = 60

    def prompt_token_bound(self, question: str, n_contexts: int, max_new_tokens: int) -> int:
        return len(question) + n_contexts * (self.max_context_tokens + 8) + max_new_tokens

    def start(self, prompts, *, max_new_tokens: int = 1):
        for p in prompts:
            size = len(p.question) + sum(len(c[: self.max_context_tokens]) for c in p.contexts) + max_new_tokens
            if size > self.max_positions:
                raise InvalidParameterError("prompt", f"rendered prompt has {size} tokens, over the window")
        return super().start(prompts, max_new_tokens=max_new_tokens)


def _outcome(tmp_path, name: str, long_record: bool, question: str):
    clinic = list(fx.CLINIC)
    if long_record:
        clinic[0] = "asthma protocol inhaler patient " + "zz " * 60  # a long private record
    emb = HashEmbedder(32)
    svc = ProviderService.create(
        tmp_path / name,
        policy=fx.toy_policy(),
        embedder=emb,
        seed=b"\x05" * 32,
        generator=OverflowingToy(),
        tenants={"clinic": clinic, "legal": fx.LEGAL},
        accounts=fx.registry(fx.ACCOUNTS),
        allow_weak=True,
    )
    alice = fx.client(svc, "alice")
    try:
        alice.ask(svc, question)
        out = "served"
    except Exception as e:  # noqa: BLE001 - the outcome is what is compared
        out = f"{type(e).__name__}: {e}"
    size = svc.ledger.size
    svc.close()
    return out, size


def test_rule_no_error_depends_on_a_document(tmp_path):
    """v2: a question sized so that a voter holding a long record overflows the context raised after the record was
    charged and its leaf appended, while the neighbouring corpus without it released an answer (P[error | D] = 1,
    P[error | D'] = 0). v3: the size is decided up front from public quantities, identically on both corpora, and
    nothing is recorded."""
    # 110 characters: with the toy clinic's notes (<= 56 characters) and 32 answer tokens a voter prompt fits the
    # window of 200; with the long record (cut to 60) it would not — v2 raised exactly then
    question = "asthma protocol inhaler patient " + "q" * 78
    with_record = _outcome(tmp_path, "d", True, question)
    without = _outcome(tmp_path, "d2", False, question)
    assert with_record == without
    assert with_record[0].startswith("RequestError: question: is too long") and with_record[1] == 1  # genesis only
    assert "zz" not in with_record[0]


# ------------------------------------------------------------------------------------------------------------
# A2.5 retries without a second release
# ------------------------------------------------------------------------------------------------------------
class FlakyHosted(ToyTextGenerator):
    """A hosted LLM: raises on every 7th call (429 / 504) and during an outage (calls 100-139), and returns
    different text on every call."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def generate(self, prompt, max_new_tokens: int) -> str:
        self.calls += 1
        if self.calls % 7 == 0 or 100 <= self.calls < 140:
            raise TimeoutError("504 gateway timeout")
        return f"{super().generate(prompt, max_new_tokens)} v{self.calls}"

    def generate_many(self, prompts, max_new_tokens: int):
        return [self.generate(p, max_new_tokens) for p in prompts]

    def generate_each(self, prompts, max_new_tokens: int, *, max_concurrency=None):
        """One call per prompt, None where it failed: declares that its calls are independent (a hosted model has
        no batch shape), so a failed call is asked again alone (spec/accounting/rag.md §6)."""
        out = []
        for p in prompts:
            try:
                out.append(self.generate(p, max_new_tokens))
            except TimeoutError:
                out.append(None)
        return out


def test_rule_a_hosted_generator_that_fails_answers_every_request_once(tmp_path):
    """v2: a generator that timed out after the charge lost the answer while the budget was spent, and the retry of
    the same signed request was refused. v3: every request is eventually answered with one stored answer, no
    document is charged twice for one request, and the bundle verifies."""
    gen = FlakyHosted()
    svc = fx.open_text_service(tmp_path / "svc", gen, replayable=False, n=12)
    clients = {a: fx.client(svc, a) for a in ("alice", "bob")}
    pending = answered = 0
    for i in range(10):
        for acct, q in fx.SCRIPT[:2]:
            before = _spent(svc).copy()
            try:
                clients[acct].ask(svc, f"{q} {i}")
            except AnswerPendingError:
                pending += 1
                after_charge = _spent(svc).copy()
                for _ in range(50):
                    try:
                        first = clients[acct].retry(svc)
                        break
                    except AnswerPendingError:
                        continue  # still inside the outage: the same signed request again
                else:
                    raise AssertionError("a request stayed pending through 50 retries")
                again = clients[acct].retry(svc)  # the stored bytes, however often it is asked
                assert again.answer == first.answer and again.receipt == first.receipt
                assert np.array_equal(_spent(svc), after_charge)  # retries charge nothing
            answered += 1
            charged = _spent(svc) - before
            assert charged.max() <= svc.rule.rag_units + (svc.rule.thr_units or 0)  # one charge per document at most
    assert pending >= 1 and answered == 20 and gen.calls > 20
    assert sum(len(c.receipts) for c in clients.values()) == 20
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle, receipts=_receipts(tmp_path, clients))
    assert v.verdict == "PASS", v.reasons
    assert v.checked["receipts_accepted"] == 20


def test_rule_a_crash_after_the_charge_rolls_the_charge_back_with_the_leaf(tmp_path, monkeypatch):
    """v2 wrote a 'recovery' leaf for a request charged before a crash (the ledger could relabel releases as
    recoveries; 8 colluders over k_max = 5 turned FAIL into PASS that way); v3 first completed it as a query leaf
    from a pending record. Now the charge, the opening, the leaf and the served row are one transaction: a crash
    after the charge and before the leaf leaves none of them, and the retry of the same signed request is served
    once, charged once, as an ordinary query leaf."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    alice.ask(svc, "asthma protocol inhaler patient 0")
    before, size = _spent(svc).copy(), svc.ledger.size
    charged = []
    real_charge = svc.tenants["clinic"].filter.store._charge

    def charge_then_note(batch):
        out = real_charge(batch)
        charged.append(sum(int(m.sum()) for m in out))
        return out

    def crash(leaf):
        raise KeyboardInterrupt("power cut after the charge")

    monkeypatch.setattr(svc.tenants["clinic"].filter.store, "_charge", charge_then_note)
    monkeypatch.setattr(svc.ledger, "append_with_root", crash)
    req = alice.request("asthma protocol inhaler patient 1")
    with pytest.raises(KeyboardInterrupt):
        svc.serve(req)
    assert sum(charged) > 0  # the charge ran before the crash
    svc.close()
    monkeypatch.undo()
    svc = fx.reopen_service(tmp_path / "svc")
    assert svc.ledger.size == size and np.array_equal(_spent(svc), before)  # rolled back, all of it
    served = alice.send(svc, req)  # the retry is served afresh
    assert served.pos == size and svc.ledger.size == size + 1
    leaf = json.loads(svc.ledger.leaf(size))
    assert leaf["type"] == "query" and set(leaf) == {"type", "h_req", "h_top", "h_charge"}
    op = json.loads(svc.aud.opening(size))
    replay = before.copy()
    for ch in op["charge"]["charges"]:
        replay[np.asarray(ch["ids"], dtype=np.int64)] += ch["cost"]["epsilon_units"]
    assert np.array_equal(_spent(svc), replay)  # charged exactly once, as its opening says
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle, receipts=_receipts(tmp_path, {"alice": alice}))
    assert v.verdict == "PASS", v.reasons


def test_rule_there_is_no_recovery_record(tmp_path):
    from dprag.audit.testing.attacks import _append, _honest

    svc, clients = _honest(tmp_path)
    op = json.loads(dict(svc.aud.openings(svc.ledger.size))[1])
    leaf = json.loads(svc.ledger.leaf(1))
    _append(svc, encode({**leaf, "type": "recovery"}), {**op, "kind": "recovery"})
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle)
    assert v.verdict == "FAIL" and any("not a well-formed version-4 query record" in r for r in v.reasons)


# ------------------------------------------------------------------------------------------------------------
# A2.6 one key, one account
# ------------------------------------------------------------------------------------------------------------
def test_rule_one_key_one_account(tmp_path, monkeypatch):
    """v2: one key registered as three accounts made 60 queries under k_max = 1, n = 20 and PASSed. v3: the
    provider refuses such a registry, and a provider that writes one anyway (its own code) FAILs."""
    key = fx.account_key("alice").vkey
    accounts = {"alice": ("clinic", key), "alice2": ("clinic", key)}
    with pytest.raises(InvalidParameterError, match="one key, one account"):
        ProviderService.create(
            tmp_path / "refused",
            policy=fx.toy_policy(),
            embedder=HashEmbedder(32),
            generator=ToyGenerator(),
            tenants={"clinic": fx.CLINIC, "legal": fx.LEGAL},
            accounts=accounts,
            allow_weak=True,
        )
    monkeypatch.setattr(ProviderService, "_registry", staticmethod(lambda accts, corpora: dict(accts)))
    svc = ProviderService.create(
        tmp_path / "forged",
        policy=fx.toy_policy(k_max=1),
        embedder=HashEmbedder(32),
        generator=ToyGenerator(),
        tenants={"clinic": fx.CLINIC, "legal": fx.LEGAL},
        accounts=accounts,
        allow_weak=True,
    )
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle)
    assert v.verdict == "FAIL" and any("shares its key with another account" in r for r in v.reasons), v.reasons


# ------------------------------------------------------------------------------------------------------------
# A3.7 forks: the client checks consistency between every two receipts and keeps proofs
# ------------------------------------------------------------------------------------------------------------
def test_rule_the_client_keeps_two_receipts_for_one_request_as_a_fork_proof(tmp_path):
    """v2's client accepted two receipts for one request with different roots. v3's client refuses the second and
    keeps both as a fork proof."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice", directory=tmp_path / "alice")
    served = alice.ask(svc, "asthma protocol inhaler patient")
    from dprag.audit.protocol.receipts import sign_receipt

    body = {k: v for k, v in served.receipt.items() if k != "sig"}
    other = sign_receipt({**body, "root": "ab" * 32}, svc.signer)
    req = alice._sent[1]
    with pytest.raises(ReceiptError, match="second, different receipt"):
        alice.accept(req, other, served.citations, answer=served.answer)
    fork = json.loads((tmp_path / "alice" / "forks.jsonl").read_text())
    assert fork["receipts"] == [served.receipt, other]


def test_rule_the_client_checks_consistency_between_receipts(tmp_path):
    """A provider that shows an account a forked history (a receipt whose root is not an extension of the earlier
    one): the client refuses it and keeps the inconsistent pair."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice", directory=tmp_path / "alice")
    alice.ask(svc, "asthma protocol inhaler patient 1")
    fx.client(svc, "bob").ask(svc, "garden weather rain note")
    req = alice.request("asthma protocol inhaler patient 2")
    served = svc.serve(req)
    from dprag.audit.protocol.receipts import sign_receipt

    body = {k: v for k, v in served.receipt.items() if k != "sig"}
    forked = sign_receipt({**body, "root": hashlib.sha256(b"another history").hexdigest()}, svc.signer)
    proof = svc.ledger.consistency_proof(alice.receipts[0]["receipt"]["size"], body["size"])
    with pytest.raises(ReceiptError, match="not shown consistent"):
        alice.accept(req, forked, served.citations, answer=served.answer, consistency=proof)
    assert json.loads((tmp_path / "alice" / "forks.jsonl").read_text())["kind"] == "inconsistent checkpoints"
    alice.accept(req, served.receipt, served.citations, answer=served.answer, consistency=proof)  # the real one


# ------------------------------------------------------------------------------------------------------------
# A3.8 honest FAQ traffic passes; coalition findings are worded as what they are
# ------------------------------------------------------------------------------------------------------------
def test_rule_identical_questions_are_one_release(tmp_path):
    """v2: three users asking the same FAQ question FAILed ("coalition 3 > k_max 2"). v3 keys the retrieval noise by
    (s_W, tenant, Q): identical questions get identical citations (a repeat is post-processing of the first
    release) and the estimator skips exact repeats."""
    accounts = {"u1": "clinic", "u2": "clinic", "u3": "clinic"}
    svc = fx.open_service(tmp_path / "svc", accounts=accounts, k_max=2)
    clients = {a: fx.client(svc, a) for a in accounts}
    tops = [clients[a].ask(svc, "what is the asthma protocol for an inhaler patient").citations for a in accounts]
    assert tops[0] == tops[1] == tops[2]
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle, receipts=_receipts(tmp_path, clients))
    assert v.verdict == "PASS", v.reasons


def test_rule_a_coalition_finding_is_worded_and_not_certified(tmp_path):
    from dprag.audit.testing.attacks import ATTACKS

    res = ATTACKS["coalition_adjacent"].run(tmp_path)
    v = verify(res.bundle, receipts=res.receipts)
    assert v.verdict == "FAIL" and v.epsilon is None
    (r,) = [r for r in v.reasons if r.startswith("coalition:")]
    assert "coalition or a common question" in r and "holds only if exactly those accounts colluded" in r
    assert "not certified" in r and "the retrieval ε for k = 8 would be" in r


# ------------------------------------------------------------------------------------------------------------
# A3.10 the auditor's view
# ------------------------------------------------------------------------------------------------------------
def test_rule_the_headline_says_what_was_pinned_and_confirmed(tmp_path, capsys):
    """v2's PASS line was the same with and without a pinned key or any accepted receipt."""
    from dprag.audit.cli import main

    w = fx.build_window(tmp_path / "w", rounds=2)
    key = tmp_path / "provider.vkey"
    key.write_bytes((w.bundle / "public" / "provider.vkey").read_bytes())
    assert main(["audit", "verify", "--max-epsilon", "50", str(w.bundle)]) == 0
    bare = capsys.readouterr().out.splitlines()
    assert (
        main(
            ["audit", "verify", "--max-epsilon", "50", str(w.bundle), "--key", str(key), "--receipts", str(w.receipts)]
        )
        == 0
    )
    full = capsys.readouterr().out.splitlines()
    assert bare[0] != full[0]
    assert "key NOT pinned" in bare[0] and "no receipts given" in bare[0]
    assert any("warning: the provider key was not pinned" in x for x in bare)
    assert "key pinned, 6/6 receipts, 6/6 Q confirmed" in full[0] and "size 7, root " in full[0]
    assert not any("warning: the provider key" in x for x in full)


def test_rule_receipts_are_compared_by_content(tmp_path):
    """v2: receipts re-serialised by a JSON tool were all rejected and the verdict still PASSed with 0 receipts.
    v3 reads them by content; duplicate keys, floats and lone surrogates are still refused."""
    w = fx.build_window(tmp_path / "w", rounds=2)
    lines = [json.loads(x) for x in w.receipts.read_text().splitlines()]
    pretty = tmp_path / "pretty.jsonl"
    pretty.write_text("".join(json.dumps(x, indent=None, separators=(", ", ": ")) + "\r\n" for x in reversed(lines)))
    v = verify(w.bundle, receipts=pretty)
    assert v.verdict == "PASS" and v.checked["receipts_accepted"] == len(lines) and not v.rejected_evidence
    bad = tmp_path / "bad.jsonl"
    first = w.receipts.read_text().splitlines()[0]
    bad.write_text(
        "\n".join(
            [
                first[:-1] + ', "top": [1]}',  # a duplicate key
                first.replace('"pos":', '"pos":1.0,"x":'),  # a float
                first[:-1] + ', "x": "\\ud800"}',  # a lone surrogate
            ]
        )
        + "\n"
    )
    v = verify(w.bundle, receipts=bad)
    assert v.checked["receipts_accepted"] == 0 and len(v.rejected_evidence) == 3, v.rejected_evidence


def test_rule_a_receipt_newer_than_the_bundle_is_not_a_fork(tmp_path):
    """v2: an honest provider that exported and kept serving FAILed 'truncated or forked' on a newer genuine
    receipt. v3 counted it as newer and PASSed without checking it; v4 checks it with a consistency proof from the
    bundle's size to the receipt's (PASS), and without one the verdict is INCOMPLETE naming both sizes — never a
    FAIL of the honest provider, never a PASS."""
    w = fx.build_window(tmp_path / "w", rounds=1, close=False)
    later = w.clients["alice"].ask(w.service, "asthma protocol inhaler patient later")
    n, size = 4, later.receipt["size"]
    proof = w.service.ledger.consistency_proof(n, size)
    w.service.close()
    v = verify(w.bundle, receipts=_receipts(tmp_path, w.clients))
    assert v.verdict == "INCOMPLETE" and v.epsilon is None and not v.reasons, v.reasons
    assert f"signed at size {size}, beyond the bundle's size {n}" in v.headline()
    (w.bundle / "auditor" / "consistency.jsonl").write_bytes(encode(proof.to_json_dict()) + b"\n")
    v = verify(w.bundle, receipts=_receipts(tmp_path, w.clients))
    assert v.verdict == "PASS", v.reasons
    assert v.checked["receipts_newer_than_bundle"] == 1 and v.history["size"] == n
    wrong = dict(proof.to_json_dict(), hashes=[])  # a proof that does not verify proves nothing
    (w.bundle / "auditor" / "consistency.jsonl").write_bytes(encode(wrong) + b"\n")
    assert verify(w.bundle, receipts=_receipts(tmp_path, w.clients)).verdict == "INCOMPLETE"


def test_rule_epsilon_acc_is_checked_against_sigma(tmp_path, monkeypatch):
    """v2 printed 002's leading term from an epsilon_acc never checked against σ. v3: the provider refuses such a
    policy, and a provider whose own code commits one anyway FAILs `policy`."""
    import dataclasses

    from dprag.audit.protocol.policy import Policy

    pol = fx.toy_policy()
    pol.check_claims()
    lying = dataclasses.replace(pol, retrieval=dataclasses.replace(pol.retrieval, epsilon_acc=0.01))
    with pytest.raises(InvalidParameterError, match="epsilon_acc"):
        lying.check_claims()
    monkeypatch.setattr(Policy, "epsilon_acc_violation", lambda self, certified: None)  # the provider's code
    svc = ProviderService.create(
        tmp_path / "svc",
        policy=lying,
        embedder=HashEmbedder(32),
        generator=ToyGenerator(),
        tenants={"clinic": fx.CLINIC, "legal": fx.LEGAL},
        accounts=fx.registry(fx.ACCOUNTS),
        allow_weak=True,
    )
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    monkeypatch.undo()
    v = verify(bundle)
    assert v.verdict == "FAIL" and any(r.startswith("policy: retrieval.epsilon_acc: declares 0.01") for r in v.reasons)


def test_rule_the_first_fail_reason_is_the_root_cause(tmp_path):
    w = fx.build_window(tmp_path / "w", rounds=1)
    seed = w.bundle / "auditor" / "seed.hex"
    seed.write_text("00" * 32)  # every retrieval replay then cascades
    v = verify(w.bundle)
    assert v.verdict == "FAIL" and v.reasons[0] == "commitments: auditor/seed.hex does not open C_seed"
    assert v.headline().startswith("FAIL — commitments: auditor/seed.hex does not open C_seed")


# ------------------------------------------------------------------------------------------------------------
# A3.9 the v3 record format
# ------------------------------------------------------------------------------------------------------------
def test_rule_public_leaves_name_no_account_tenant_or_counter(tmp_path):
    w = fx.build_window(tmp_path / "w", rounds=1)
    data = (w.bundle / "public" / "leaves.bin").read_bytes()
    leaves, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i : i + 4], "big")
        leaves.append(json.loads(data[i + 4 : i + 4 + n]))
        i += 4 + n
    for leaf in leaves[1:]:
        assert set(leaf) == {"type", "h_req", "h_top", "h_charge"} and leaf["h_top"] is not None
    pub = (w.bundle / "public").read_bytes() if False else data
    for name in ("alice", "bob", "carol"):
        assert name.encode() not in pub.split(b"\n", 1)[-1][len(encode(leaves[0])) :]


def test_rule_the_index_commitment_is_salted(tmp_path):
    """v2's C_idx was the plain Merkle root of the quantised rows: an observer holding a guessed index could test it.
    v3's is H(domain || salt || n || root) with the salt in the auditor's files."""
    w = fx.build_window(tmp_path / "w", rounds=1)
    genesis = json.loads((w.bundle / "public" / "genesis.json").read_bytes())
    (clinic,) = [t for t in genesis["tenants"] if t["tenant"] == "clinic"]
    q = cm.quantise_embeddings(HashEmbedder(32).embed(fx.CLINIC), cm.DEFAULT_EMBEDDING_SCALE)
    assert clinic["C_idx"] != cm.index_root(q).hex()
    salt = json.loads((w.bundle / "auditor" / "docs" / "clinic.json").read_bytes())["index_salt"]
    assert clinic["C_idx"] == cm.index_commitment(q, bytes.fromhex(salt))


def test_client_default_is_a_memory_client():
    c = AccountClient("a", "w", fx.account_key("a"))
    assert c.kept == {} and c.counter == 0


def test_rule_an_account_commits_to_q_by_default(tmp_path, capsys):
    """v2: Q on trust was the account CLI's default (`dprag account new` without --embedder) and PASSed with nothing
    confirmed, silently. v3: the committed embedder is the default; leaving Q to the provider is an explicit flag
    with a warning, and the verdict's headline and warnings count such queries."""
    from dprag.audit.cli import main

    assert main(["account", "new", str(tmp_path / "a"), "--account", "a", "--window", "w1"]) == 0
    assert json.loads((tmp_path / "a" / "config.json").read_text())["embedder"] == "all-MiniLM-L6-v2"
    assert main(["account", "new", str(tmp_path / "b"), "--account", "b", "--window", "w1", "--q-on-trust"]) == 0
    assert "embedder" not in json.loads((tmp_path / "b" / "config.json").read_text())
    assert "--q-on-trust" in capsys.readouterr().err
    svc = fx.open_service(tmp_path / "svc")
    fx.client(svc, "alice", confirm_q=False).ask(svc, "asthma protocol inhaler patient")
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle)
    assert v.verdict == "PASS" and "0/1 Q confirmed" in v.headline()
    assert any("Q on trust for 1 of 1 queries" in w for w in v.warnings())


def test_rule_resend_prints_the_same_signed_request(tmp_path, capsys):
    from dprag.audit.cli import main

    svc = fx.open_service(tmp_path / "svc")
    a = tmp_path / "dave"
    assert main(["account", "new", str(a), "--account", "dave", "--window", "w1", "--q-on-trust"]) == 0
    capsys.readouterr()
    assert main(["account", "request", str(a), "asthma protocol"]) == 0
    first = capsys.readouterr().out
    assert main(["account", "resend", str(a), "1"]) == 0
    assert capsys.readouterr().out == first
    assert main(["account", "resend", str(a), "2"]) == 2
    svc.close()


def test_rule_corpus_accepts_the_providers_format(tmp_path):
    """v2's --corpus refused the provider's own {ids, texts} files; v3 takes them and checks the ids too."""
    from dprag.audit.cli import main

    w = fx.build_window(tmp_path / "w", rounds=1)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    svc_docs = tmp_path / "w" / "svc" / "docs"
    for t in ("clinic", "legal"):
        (corpus / f"{t}.json").write_bytes((svc_docs / f"{t}.json").read_bytes())
    assert main(["audit", "verify", "--max-epsilon", "50", str(w.bundle), "--corpus", str(corpus)]) == 0
    docs = json.loads((corpus / "clinic.json").read_text())
    docs["ids"][0], docs["ids"][1] = docs["ids"][1], docs["ids"][0]
    (corpus / "clinic.json").write_text(json.dumps(docs))
    assert main(["audit", "verify", str(w.bundle), "--corpus", str(corpus)]) == 1


class ShiftedEmbedder(HashEmbedder):
    """The provider's own pipeline: it claims the hash embedder (its descriptor) but indexes other vectors."""

    def embed(self, texts):
        out = super().embed(texts)
        return out + 3.0 * np.roll(out, 1, axis=1)


def test_rule_corpus_re_embeds_the_index_with_the_committed_embedder(tmp_path):
    """v2's --corpus checked text hashes only: an index computed by another model than the committed one PASSed.
    With the committed embedder installed, the verifier re-embeds the texts and compares every row."""
    corpus = {"clinic": fx.CLINIC, "legal": fx.LEGAL}
    w = fx.build_window(tmp_path / "w", rounds=1)
    v = verify(w.bundle, corpus=corpus, embedder=HashEmbedder(32))
    assert v.verdict == "PASS" and v.checked["documents_reembedded"] == len(fx.CLINIC) + len(fx.LEGAL)
    emb = HashEmbedder(32)
    svc = ProviderService.create(
        tmp_path / "lying",
        policy=fx.toy_policy(),
        embedder=ShiftedEmbedder(32),
        embedder_descriptor=emb.descriptor({"clinic": len(fx.CLINIC), "legal": len(fx.LEGAL)}),
        generator=ToyGenerator(),
        tenants=corpus,
        accounts=fx.registry(fx.ACCOUNTS),
        allow_weak=True,
    )
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    assert verify(bundle, corpus=corpus).verdict == "PASS"  # text hashes alone cannot see it
    v = verify(bundle, corpus=corpus, embedder=HashEmbedder(32))
    assert v.verdict == "FAIL"
    assert any("not the committed embedder's output" in r for r in v.reasons), v.reasons
    v = verify(w.bundle, corpus=corpus, embedder=HashEmbedder(16))  # another model than the committed one
    assert v.verdict == "FAIL" and any("is not the committed one" in r for r in v.reasons)


def test_rule_a_the_coalition_check_covers_the_whole_history_whatever_its_size(tmp_path, monkeypatch):
    """v2: at 150k queries the default coalition window silently shrank to 38,196 entries (two groups of colluders
    placed further apart PASSed). v3 stopped (exit 2) and asked the auditor to choose. v4 (issue 41): no default
    shrink at all — the whole history is compared however large it is; a window the auditor chooses is named in the
    verdict with a warning that it does not cover the history."""
    from dprag.audit.verify import estimator

    w = fx.build_window(tmp_path / "w", rounds=4)  # 12 queries over ledger positions 1..12
    tiny = lambda positions, dim, budget=0: 1  # noqa: E731 - a budget that fits no pair: must not be consulted
    monkeypatch.setattr(estimator, "default_window", tiny)
    v = verify(w.bundle)
    assert v.verdict == "PASS"
    assert v.checked["coalition_window"] == 11 and v.checked["coalition_window_covers_history"] is True
    v = verify(w.bundle, coalition_window=3)
    assert v.verdict == "PASS" and v.checked["coalition_window"] == 3
    assert v.checked["coalition_window_covers_history"] is False
    assert any("coalition estimate covers a window of 3 ledger positions only" in x for x in v.warnings())


def test_rule_a_client_never_signs_two_requests_for_one_counter(tmp_path):
    """A signed request is kept durably before it is sent: a client restarted after a crash resends those bytes
    (the provider returns the stored answer) instead of signing a second request for the same counter."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice", directory=tmp_path / "alice")
    req = alice.request("asthma protocol inhaler patient")
    served = svc.serve(req)  # the answer is lost on the way back: the client crashes before accepting it
    again = fx.client(svc, "alice", directory=tmp_path / "alice")  # restarted from its directory
    assert again.counter == 1 and again._sent[1].signed == req.signed
    got = again.retry(svc)
    assert got.answer == served.answer and got.receipt == served.receipt
    assert again.request("next question").signed["counter"] == 2


def test_rule_a_trusted_checkpoint_under_the_pinned_key_exposes_a_rewrite(tmp_path):
    """A provider rewrites its history under a new key (same window id): the checkpoint the auditor kept verifies
    under the pinned key but not under the bundle's. That is a rewrite: FAIL naming it, never exit 2."""
    from dprag.audit.cli import main

    w = fx.build_window(tmp_path / "w", rounds=1, close=False)
    kept = tmp_path / "trusted.note"
    kept.write_bytes(w.service.checkpoint_note())
    key = tmp_path / "provider.vkey"
    key.write_text(w.service.signer.vkey())
    w.service.close()
    rewritten = fx.build_window(tmp_path / "w2", rounds=1, seed=b"\x06" * 32)  # another key, another history
    v = verify(rewritten.bundle, key=key, trusted_checkpoint=kept)
    assert v.verdict == "FAIL"
    rewrite = [r for r in v.reasons if r.startswith("ledger: the trusted checkpoint names the log")]
    assert rewrite and "verifies under the pinned key" in rewrite[0], v.reasons  # v4: the origin names the log
    assert main(["audit", "verify", str(rewritten.bundle), "--key", str(key), "--trusted-checkpoint", str(kept)]) == 1


def test_rule_a_signed_refusal_of_a_recorded_request_is_evidence(tmp_path):
    """A refusal says the counter was not consumed. A provider that signs a refusal for a request and records it
    anyway (it would let the account sign a second request for the counter, two releases under one counter) is
    caught by the refusal the account hands over; an account cannot forge one (rejected evidence)."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice", directory=tmp_path / "alice")
    served = alice.ask(svc, "asthma protocol inhaler patient")
    lie = svc._refuse(RequestError("question", "is too long"), alice._sent[1].signed).refusal  # P's own key
    receipts = tmp_path / "r.jsonl"
    alice.kept.setdefault("refusals.jsonl", []).append({"refusal": lie})
    alice.export_receipts(receipts)
    bundle = svc.export_bundle(tmp_path / "bundle")
    v = verify(bundle, receipts=receipts)
    assert v.verdict == "FAIL" and any(
        "signed a refusal at size" in r and "its log held at leaf 1" in r for r in v.reasons
    )
    forged = dict(lie, rule="forged by the account")  # the signature no longer verifies
    receipts.write_bytes(encode({"receipt": served.receipt}) + b"\n" + encode({"refusal": forged}) + b"\n")
    v = verify(bundle, receipts=receipts)
    assert v.verdict == "PASS" and any("refusal" in r for r in v.rejected_evidence)
    svc.close()


def test_receipt_lines_of_any_shape_get_a_verdict(tmp_path):
    """Found by the fuzz campaign (seed 100, cases 210 and 646): a receipt whose window is a list or an object made
    the history's receipt routing raise TypeError (unhashable) instead of rejecting the line."""
    w = fx.build_window(tmp_path / "w", rounds=1)
    first = json.loads(w.receipts.read_text().splitlines()[0])
    odd = [dict(first, receipt=dict(first["receipt"], window=x)) for x in (["w1"], {"w": 1}, 7, None)]
    odd.append({"refusal": {"window": ["w1"], "h_req": [1]}})
    p = tmp_path / "odd.jsonl"
    p.write_bytes(b"".join(encode(x) + b"\n" for x in odd))
    v = verify(w.bundle, receipts=p)
    assert v.verdict == "PASS" and len(v.rejected_evidence) == len(odd), v.rejected_evidence
