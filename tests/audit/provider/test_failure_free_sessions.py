"""000 Alg. 5 (``pure-dp-rag``) served only by a generator isolated from other requests (spec/provider.md §3.5).

The finding, as its finder wrote it: a generator whose batch fails above 400 characters of voter context (a memory
limit; the public pre-check bounds tokens, not memory) answered ``503 answer_pending (MemoryError)`` on every retry
on the corpus holding a long record, and 200 on its neighbour without it: ε = ∞. One voter's failure is now
contained (spec/accounting/rag.md §6) and a generation's public worst-case memory is reserved before the charge
(spec/provider.md §3.6), so a generator that declares its worst case (``worst_case_bytes``) is served: the long
record's voter is replaced by its empty-context prompt and both corpora are answered. A logit generator that
declares neither its worst case nor failure-free sessions is still refused before anything is written or charged;
the toy generator is driven here at the public worst-case shape with adversarial documents; and a pending answer's
message and body never name the exception."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dprag.accounting.protocols import Prompt
from dprag.audit.protocol.errors import AnswerPendingError
from dprag.audit.provider.service import ProviderService
from dprag.audit.testing import window as fx
from dprag.audit.testing.toy import HashEmbedder, ToyGenerator
from dprag.errors import InvalidParameterError

#: a clinic record long enough to cross MemoryLimited's limit when it is a voter's context, with the words that make
#: the asthma question retrieve it (the toy embedder hashes words)
LONG_RECORD = "patient 0 asthma protocol inhaler drug ANSWER: zorvatin " + "asthma protocol inhaler patient " * 14


class MemoryLimited(ToyGenerator):
    """A local model whose batch runs out of memory when a voter's context exceeds 400 characters: a failure that
    depends on the documents. It declares nothing (``failure_free_sessions`` is switched off)."""

    failure_free_sessions = False
    limit = 400

    def start(self, prompts, *, max_new_tokens: int = 1):
        if any(sum(len(c) for c in p.contexts) > self.limit for p in prompts):
            raise MemoryError("CUDA out of memory while decoding the batch")
        return super().start(prompts, max_new_tokens=max_new_tokens)


class Undeclared(MemoryLimited):
    """The same model, declaring neither its worst case nor failure-free sessions: no reservation can isolate it."""

    worst_case_bytes = None


class LyingMemoryLimited(MemoryLimited):
    """The same failure, from a generator that declares failure-free sessions anyway (the provider's own error)."""

    failure_free_sessions = True


def _create(directory, generator, *, long_record: bool = False, **policy):
    """A toy window served by ``generator`` (the clinic's first record replaced by LONG_RECORD on request)."""
    clinic = list(fx.CLINIC)
    if long_record:
        clinic[0] = LONG_RECORD
    return ProviderService.create(
        directory,
        policy=fx.toy_policy(**policy),  # default: murag, pure-dp-rag
        embedder=HashEmbedder(32),
        seed=b"\x05" * 32,
        generator=generator,
        tenants={"clinic": clinic, "legal": fx.LEGAL},
        accounts=fx.registry(fx.ACCOUNTS),
        allow_weak=True,
    )


def _outcome(tmp_path, name: str, corpus_with_long_record: bool, generator) -> tuple:
    """What an account sees of one asthma question and two retries, on D (with the long record) or D′ (without)."""
    try:
        svc = _create(tmp_path / name, generator, long_record=corpus_with_long_record)
    except InvalidParameterError as e:
        return ("refused before anything was written", e.field, (tmp_path / name / "state").exists())
    alice = fx.client(svc, "alice")
    seen = []
    for attempt in range(3):
        try:
            if attempt == 0:
                alice.ask(svc, "asthma protocol inhaler patient")
            else:
                alice.retry(svc)  # the same signed request
            seen.append("served")
        except AnswerPendingError as e:
            seen.append(f"pending: {e}")
    svc.close()
    return tuple(seen)


def test_rule_no_generator_failure_after_the_charge_depends_on_a_document(tmp_path):
    """D and D′ must look the same to the account. Before containment D gave three 'pending (MemoryError)' and D′
    three 'served'; then the generator was refused at create on both (the stop-gap: on the parent commit
    "('refused before anything was written', 'generator', False) == ('served', 'served', 'served')" failed). Now it
    declares its worst case, is served, and both corpora are answered: the long record's voter is contained."""
    on_d = _outcome(tmp_path, "d", True, MemoryLimited())
    on_d_prime = _outcome(tmp_path, "d2", False, MemoryLimited())
    assert on_d == on_d_prime, (on_d, on_d_prime)
    assert on_d == ("served", "served", "served")


def test_a_logit_generator_declaring_neither_is_still_refused(tmp_path):
    """No worst case to reserve and no failure-free declaration: refused at create, before the store exists."""
    assert _outcome(tmp_path, "d", True, Undeclared()) == ("refused before anything was written", "generator", False)


def test_the_refusal_names_the_field_and_the_rule(tmp_path):
    with pytest.raises(InvalidParameterError) as err:
        _create(tmp_path / "svc", Undeclared())
    assert err.value.field == "generator"
    assert "failure_free_sessions" in str(err.value) and "answer-vote" in str(err.value)
    assert "worst_case_bytes" in str(err.value)
    assert not (tmp_path / "svc").exists() or not any((tmp_path / "svc").rglob("*.sqlite"))


def test_reopening_a_pure_dp_rag_window_with_an_undeclared_generator_is_refused(tmp_path):
    """``open`` checks it too: a window created with the toy generator cannot be served later by a model that
    declares nothing."""
    svc = fx.open_service(tmp_path / "svc")
    svc.close()
    with pytest.raises(InvalidParameterError) as err:
        ProviderService.open(tmp_path / "svc", embedder=HashEmbedder(32), generator=Undeclared())
    assert err.value.field == "generator"


@pytest.mark.parametrize("value", ["yes", 1, None, False])
def test_only_the_value_true_declares(value):
    from dprag.audit.provider.models import declares_failure_free_sessions

    class G(ToyGenerator):
        failure_free_sessions = value

    assert not declares_failure_free_sessions(G())


def test_text_mechanisms_need_no_declaration(tmp_path):
    """answer-vote and dp-ksa contain each voter's failure (accounting.rag.common.voter_responses): not refused."""
    _create(tmp_path / "svc", MemoryLimited(), mechanism="answer-vote").close()


def test_the_local_model_adapter_declares_its_worst_case_not_failure_freedom():
    """rag_adapters' causal LM can fail (memory, a voter over its budget is replaced): it must not claim failure-free
    sessions, and it declares its public worst case, so pure-dp-rag serves it under the reservation (checked on the
    class, no model loaded)."""
    generator = pytest.importorskip("dprag.rag_adapters.generator")
    assert getattr(generator.CausalLMGenerator, "failure_free_sessions", False) is not True
    assert callable(getattr(generator.CausalLMGenerator, "worst_case_bytes", None))


def test_the_toy_generator_keeps_its_declaration_at_the_public_worst_case_shape():
    """The declared property, driven adversarially: a batch of the policy's m voters at its largest context (every
    voter holding documents of fresh words, 30x more distinct words than the vocabulary holds), decoded for the
    policy's token budget plus one: start, logits and advance never raise, logits keep their shape, and words past
    the vocabulary decode as <unk>. On the parent commit the vocabulary-full case raised InvalidParameterError."""
    pol = fx.toy_policy()
    g = pol.generation
    gen = ToyGenerator()
    rng = np.random.default_rng(7)
    failures = []
    for round_ in range(30):
        prompts = []
        for v in range(g.m):
            words = [f"w{round_}x{v}x{i}x{rng.integers(1 << 30)}" for i in range(64)]
            ctx = "ANSWER: " + " ".join(words)  # the toy model answers from its context: every word a new token
            prompts.append(Prompt("asthma protocol inhaler patient", (ctx,) * g.docs_per_voter))
        try:
            session = gen.start(prompts, max_new_tokens=g.max_private_tokens + 1)
            for _ in range(g.max_private_tokens + 1):
                logits = session.logits()
                assert logits.shape == (g.m, gen.vocab_size)
                session.advance(int(np.argmax(logits[0])))
        except Exception as e:  # noqa: BLE001 - the property under test is that nothing is raised
            failures.append(f"round {round_}: {type(e).__name__}: {e}")
    assert not failures, failures[:3]
    assert len(gen.vocab) == gen.vocab_size - 1  # full, the last id reserved
    assert gen.decode([gen.encode("a-word-never-seen")[0]]) == "<unk>"


def test_a_pending_answer_names_no_exception(tmp_path):
    """Whatever the generator raised after the charge (here a provider whose generator wrongly declares the
    property, and fails on every batch, the public rows' too, so that no voter's containment absorbs it:
    spec/accounting/rag.md §6), the account reads one text: over HTTP the 503 body of a MemoryError and of a
    RuntimeError quoting a document are identical but for the position; in process, the message is the same and
    ``cause``, for the operator's log only, names the mechanism's fixed GenerationFailedError, not the generator's
    own exception."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from dprag.audit.provider.http.app import create_app

    class AlwaysOutOfMemory(LyingMemoryLimited):
        limit = -1  # every prompt is over it

    class Quoting(LyingMemoryLimited):
        def start(self, prompts, *, max_new_tokens: int = 1):
            raise RuntimeError(f"cannot decode {prompts[0].contexts[:1]}")

    bodies = []
    for name, gen in (("mem", AlwaysOutOfMemory()), ("quote", Quoting())):
        svc = _create(tmp_path / name, gen, long_record=True)
        alice = fx.client(svc, "alice")
        req = alice.request("asthma protocol inhaler patient")
        wire = req.to_json()
        with TestClient(create_app(svc)) as http:
            r = http.post("/v1/requests", content=json.dumps(wire).encode())
        with pytest.raises(AnswerPendingError) as err:
            svc.serve(req)  # the same signed request, in process
        svc.close()
        assert r.status_code == 503, r.text
        body = r.json()
        assert body["error"]["type"] == "answer_pending"
        for leaked in ("MemoryError", "RuntimeError", "memory", "ANSWER", "zorvatin"):
            assert leaked not in r.text and leaked not in str(err.value), (leaked, r.text)
        assert err.value.cause == "GenerationFailedError"
        bodies.append(body)
    assert bodies[0] == bodies[1]
