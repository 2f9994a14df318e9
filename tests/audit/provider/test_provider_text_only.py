"""A provider whose generator only returns text (issue 8 §2): DP-KSA over sampled responses (004; accounting/rag/ksa.py,
spec/provider.md), audited end to end; the embedder named through the dprag.embedders entry points.

Expected numbers are computed here from the mechanism's proof (spec/provider.md §3), never read from the code
under test: per query the pure part is ε_em (FindBestK) + ε_ptr (the discrete-Laplace test on a gap of
sensitivity 2), the filter admits M such charges per document, replace-one doubles ε; the PTR failure
probability δ adds once per admitted charge, and replace-one gives δ + e^{ε_ar}·δ (remove then add).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import mpmath
import pytest

from dprag.accounting.noise.source import RandomSource
from dprag.accounting.protocols import Prompt
from dprag.accounting.rag.ksa import (
    DpKsaPureParameters,
    TextOnlyGenerator,
    as_text_generator,
    keyword_words,
    ptr_threshold_dlap,
)
from dprag.audit.protocol.certify import certified_epsilons
from dprag.audit.protocol.encoding import EncodingError, encode
from dprag.audit.protocol.policy import Policy
from dprag.audit.provider.models import embedder_loader
from dprag.audit.provider.service import ProviderService
from dprag.audit.testing import toy
from dprag.audit.testing import window as fx
from dprag.audit.verify import verify
from dprag.audit.verify.verdict import TRUST_TEXT_ONLY
from dprag.errors import InvalidParameterError

CORPUS = {"clinic": fx.CLINIC, "legal": fx.LEGAL}
# the toy dp-ksa policy (audit/testing/window.py toy_policy(mechanism="dp-ksa")): written out here, not read from it
EPS_EM, EPS_PTR, DELTA_PTR, M = 2.0, 4.0, 1e-12, 2


def _serve(svc, rounds: int = 2):
    clients = {a: fx.client(svc, a) for a in fx.ACCOUNTS}
    answers = []
    for i in range(rounds):
        for acct, q in fx.SCRIPT:
            answers.append(clients[acct].ask(svc, f"{q} {i}").answer)
    return clients, answers


def _export(svc, clients, d: Path):
    bundle = svc.export_bundle(d / "bundle")
    receipts = d / "receipts.jsonl"
    receipts.write_bytes(b"".join(encode(e) + b"\n" for c in clients.values() for e in c.receipts))
    return bundle, receipts


# -- the PTR offset against the exact discrete Laplace tail ----------------------------------------------------
@pytest.mark.parametrize(
    "scale,delta", [(0.5, 1e-12), (2 / 3, 1e-8), (1.0, 1e-6), (0.25, 0.3), (7.0, 1e-9), (1e-3, 1e-9)]
)
def test_ptr_offset_is_the_smallest_with_tail_below_delta(scale, delta):
    # P[X = x] = (1 - p)/(1 + p) p^|x|, p = e^{-1/scale}; the tail P[X > c] summed term by term in 50 digits
    with mpmath.workdps(50):
        p = mpmath.e ** (-1 / mpmath.mpf(scale))
        z = (1 - p) / (1 + p)

        def tail(c):  # P[X > c] for c >= 0
            return mpmath.nsum(lambda x: z * p**x, [c + 1, mpmath.inf])

        c = ptr_threshold_dlap(scale, delta)
        assert tail(c) <= delta
        assert c == 0 or tail(c - 1) > delta


def test_keyword_words_are_public_functions_of_response_and_question():
    assert keyword_words("The drug is Zorvatin, zorvatin!", "which drug") == {"zorvatin"}
    assert keyword_words("alpha beta gamma delta", "", max_words=2) == {"alpha", "beta"}
    assert keyword_words("x" * 33 + " ok", "") == {"ok"}


# -- honest providers ------------------------------------------------------------------------------------------
def test_honest_text_only_provider_passes_with_the_hand_computed_epsilon(tmp_path):
    svc = fx.open_text_service(tmp_path / "svc")  # replayable toy text generator, embedder's own descriptor
    clients, answers = _serve(svc)
    assert answers[0] == "zorvatin" and answers[2] == "settled"  # keywords released, answer from them only
    bundle, receipts = _export(svc, clients, tmp_path)
    svc.close()
    v = verify(bundle, receipts=receipts, corpus=CORPUS, replay_generator=toy.ToyTextGenerator())
    assert v.verdict == "PASS", v.reasons
    assert v.checked["generation"] == 6 and v.checked["answers_replayed"] == 6
    assert TRUST_TEXT_ONLY not in v.trust
    eps_ar = M * (EPS_EM + EPS_PTR)  # add/remove: M charges of the pure part
    eps_gen = 2 * eps_ar  # replace-one
    delta_ar = M * DELTA_PTR
    delta_gen = delta_ar + math.exp(eps_ar) * delta_ar
    g = v.channels["generation"]
    assert eps_gen <= g["epsilon"] <= eps_gen * (1 + 1e-9)  # certified: never below, rounded outward only
    assert delta_gen <= g["delta"] <= delta_gen * (1 + 1e-9)
    delta_policy = 1e-5
    assert delta_policy + delta_gen <= v.delta <= (delta_policy + delta_gen) * (1 + 1e-9)
    assert v.epsilon >= g["epsilon"] + v.channels["retrieval"]["epsilon"]


def test_hosted_generator_passes_with_the_trust_statement(tmp_path):
    llm = toy.HostedToyLLM()  # a bare callable prompt_text -> str whose wording varies: nobody can replay it
    svc = fx.open_text_service(tmp_path / "svc", generator=llm, replayable=False)
    clients, answers = _serve(svc)
    assert llm.calls > 0 and answers[0].startswith("zorvatin ")
    bundle, receipts = _export(svc, clients, tmp_path)
    svc.close()
    v = verify(bundle, receipts=receipts, corpus=CORPUS, replay_generator=toy.ToyTextGenerator())
    assert v.verdict == "PASS", v.reasons
    assert TRUST_TEXT_ONLY in v.trust and "on trust" in TRUST_TEXT_ONLY
    assert "not attested" in v.attestation["generation"]
    assert v.checked["generation"] == 6  # the charges are still replayed
    assert v.checked["answers_replayed"] == 0 and v.checked["answers_not_replayable"] == 6
    assert 2 * M * (EPS_EM + EPS_PTR) <= v.channels["generation"]["epsilon"]  # and ε still certified


def test_langchain_style_and_callable_generators():
    class Msg:
        def __init__(self, content):
            self.content = content

    class Runnable:
        def invoke(self, text):
            assert "Context:\nnote ANSWER: kiwi" in text and "Question: q?" in text
            return Msg("kiwi fruit salad bowl")

    gen = as_text_generator(Runnable())
    assert gen.generate(Prompt("q?", ("note ANSWER: kiwi",)), 2) == "kiwi fruit"
    assert as_text_generator(lambda text: "a b c").generate_many([Prompt("q")] * 2, 5) == ["a b c", "a b c"]
    with pytest.raises(InvalidParameterError, match="generator"):
        as_text_generator(42)
    with pytest.raises(InvalidParameterError, match="non-string"):
        TextOnlyGenerator(lambda text: 3).generate(Prompt("q"), 4)


# -- cheating providers ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("replayable", [True, False])
def test_provider_charging_only_the_documents_its_voters_read_fails(tmp_path, replayable):
    # "a document pays only when a voter reads it": the charge opening lists only the Top-K the voters read, not
    # every document above τ the rule charges (which the selection depends on) — the verifier's replay disagrees
    gen = None if replayable else toy.HostedToyLLM()
    svc = fx.open_text_service(tmp_path / "svc", generator=gen, replayable=replayable)
    honest = svc._charge_opening

    def charge_read_only(flt, selection):
        read = {int(i) for i in selection.top if i >= 0}
        charge = honest(flt, selection)
        for c in charge["charges"]:
            c["ids"] = [i for i in c["ids"] if i in read]
        return charge

    svc._charge_opening = charge_read_only
    clients, _ = _serve(svc)
    bundle, receipts = _export(svc, clients, tmp_path)
    svc.close()
    v = verify(bundle, receipts=receipts)
    assert v.verdict == "FAIL" and v.epsilon is None and v.delta is None
    assert any(r.startswith("generation:") and "charges differ" in r for r in v.reasons), v.reasons


def test_answer_other_than_the_committed_mechanism_fails_on_replay(tmp_path):
    svc = fx.open_text_service(tmp_path / "svc")
    honest = svc._generate

    def leak(question, top, retriever, h_req, ep):  # answers with the best document's text instead of DP-KSA's
        ans = honest(question, top, retriever, h_req, ep)
        best = int(top[0])
        return dataclasses.replace(ans, text=fx.CLINIC[best] if best >= 0 else ans.text)

    svc._generate = leak
    clients, answers = _serve(svc)
    assert answers[0].startswith("patient ")
    bundle, receipts = _export(svc, clients, tmp_path)
    svc.close()
    v = verify(bundle, receipts=receipts, corpus=CORPUS, replay_generator=toy.ToyTextGenerator())
    assert v.verdict == "FAIL"
    assert any("not the committed mechanism's answer" in r for r in v.reasons), v.reasons


def test_a_false_replayable_claim_is_caught_by_replay(tmp_path):
    # the provider commits replayable: true but serves a generator whose wording varies: replay FAILs it
    svc = fx.open_text_service(tmp_path / "svc", generator=toy.HostedToyLLM(), replayable=True)
    clients, _ = _serve(svc, rounds=1)
    bundle, receipts = _export(svc, clients, tmp_path)
    svc.close()
    v = verify(bundle, receipts=receipts, corpus=CORPUS, replay_generator=toy.HostedToyLLM())
    assert v.verdict == "FAIL" and any("not the committed mechanism's answer" in r for r in v.reasons)


# -- the mechanism draws only from the committed stream ---------------------------------------------------------
def test_the_keyword_release_is_a_function_of_the_stream():
    p = DpKsaPureParameters(m=20, epsilon_em=2.0, epsilon_ptr=4.0, ptr_delta=1e-12, max_keywords=5)
    responses = ["zorvatin"] * 15 + ["unknown words"] * 5
    picks = [p.select_keywords(responses, "q", RandomSource.from_seed(b"s" * 32, b"%d" % i)) for i in range(20)]
    again = [p.select_keywords(responses, "q", RandomSource.from_seed(b"s" * 32, b"%d" % i)) for i in range(20)]
    assert picks == again
    # d_1 = 10 (15 vs 5): FindBestK nearly always picks k = 1; PTR offset c = 13 at scale 1/2, so a release needs
    # max(2, 10) + X - 13 > 2, i.e. X >= 6: probability e^-12/(1+e^-2) ≈ 5.4e-6 per run — never in 20 runs
    # (false-failure rate < 1.1e-4)
    assert all(s["keywords"] is None for s in picks)
    many = ["zorvatin"] * 20
    assert p.select_keywords(many, "q", RandomSource.from_seed(b"t" * 32))["keywords"] == ("zorvatin",)


# -- bad input: typed errors naming the field ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "field,value,name",
    [
        ("ksa_epsilon_em", 0.0, "generation.dp_ksa.epsilon_em"),
        ("ksa_epsilon_em", float("nan"), "generation.dp_ksa.epsilon_em"),
        ("ksa_epsilon_ptr", -1.0, "generation.dp_ksa.epsilon_ptr"),
        ("ksa_epsilon_ptr", "3", "generation.dp_ksa.epsilon_ptr"),
        ("ksa_delta", 1.0, "generation.dp_ksa.delta"),
        ("ksa_delta", True, "generation.dp_ksa.delta"),
        ("ksa_max_keywords", 0, "generation.dp_ksa.max_keywords"),
        ("ksa_response_tokens", 1.5, "generation.dp_ksa.response_tokens"),
        ("ksa_replayable", "yes", "generation.dp_ksa.replayable"),
    ],
)
def test_bad_dp_ksa_fields_raise_naming_the_field(field, value, name):
    pol = fx.toy_policy(mechanism="dp-ksa")
    bad = dataclasses.replace(pol, generation=dataclasses.replace(pol.generation, **{field: value}))
    with pytest.raises(InvalidParameterError) as e:
        bad.validate()
    assert e.value.field == name


def test_dp_ksa_fields_need_the_mechanism_and_parse_strictly():
    pol = fx.toy_policy()
    stray = dataclasses.replace(pol, generation=dataclasses.replace(pol.generation, ksa_delta=1e-9))
    with pytest.raises(InvalidParameterError, match="generation.dp_ksa"):
        stray.validate()
    d = fx.toy_policy(mechanism="dp-ksa").to_dict()
    assert Policy.from_dict(d).to_dict() == d
    del d["generation"]["dp_ksa"]["replayable"]
    with pytest.raises(EncodingError, match="dp_ksa"):
        Policy.from_dict(d)
    plain = pol.to_dict()
    assert "dp_ksa" not in plain["generation"]  # other policies keep their canonical bytes
    plain["generation"]["dp_ksa"] = None
    with pytest.raises(EncodingError):
        Policy.from_dict(plain)
    with pytest.raises(InvalidParameterError, match="generation.dp_ksa.delta"):
        Policy.recommended("w", mechanism="dp-ksa", ksa_delta=0.0)


def test_recommended_dp_ksa_defaults_are_sound():
    pol = Policy.recommended("w", mechanism="dp-ksa")
    g = pol.generation
    assert g.mechanism == "dp-ksa" and g.replayable is False
    eps_q = g.ksa_epsilon_em + g.ksa_epsilon_ptr
    cert = certified_epsilons(pol)["generation"]
    assert 2 * g.max_queries_per_doc * eps_q <= cert["epsilon"] <= 2 * g.max_queries_per_doc * eps_q * (1 + 1e-9)
    assert cert["delta"] < 1e-6


def test_a_logit_mechanism_refuses_a_text_only_generator(tmp_path):
    emb = toy.HashEmbedder(32)
    with pytest.raises(InvalidParameterError, match="generator") as e:
        ProviderService.create(
            tmp_path / "svc",
            policy=fx.toy_policy(),
            embedder=emb,
            generator=lambda text: "x",
            tenants={"clinic": fx.CLINIC},
            accounts={},
            allow_weak=True,
        )
    assert "dp-ksa" in str(e.value)
    assert not (tmp_path / "svc" / "state").exists()


# -- the embedder by name ---------------------------------------------------------------------------------------
def test_embedder_entry_point_lookup_and_its_error(tmp_path):
    from dprag.rag_adapters import embedder as adapters_embedder

    assert embedder_loader("all-MiniLM-L6-v2") is adapters_embedder.load_minilm
    assert embedder_loader("sentence-transformers/all-MiniLM-L6-v2") is adapters_embedder.load_minilm
    with pytest.raises(InvalidParameterError) as e:
        embedder_loader("no-such-model")
    assert "embedder" in str(e.value) and "all-MiniLM-L6-v2" in str(e.value) and "no-such-model" in str(e.value)
    with pytest.raises(InvalidParameterError, match="embedder"):
        ProviderService.create(
            tmp_path / "svc",
            policy=fx.toy_policy(mechanism="dp-ksa"),
            embedder="no-such-model",
            generator=toy.ToyTextGenerator(),
            tenants={"clinic": fx.CLINIC},
            accounts={},
            allow_weak=True,
        )
    assert not (tmp_path / "svc").exists()


@pytest.mark.integration
def test_audit_does_not_import_the_adapters_floor():
    import subprocess
    import sys

    code = (
        "import sys, dprag.audit.provider.service, dprag.accounting.rag.ksa, dprag.audit.verify; "
        "print(any(m.startswith('dprag.rag_adapters') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.realmodel
def test_minilm_by_name_serves_and_verifies(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from dprag.audit.client.account import AccountClient
    from dprag.rag_adapters.embedder import MINILM_ID

    docs = {
        "rx-1": "The clinic prescribes zorvatin for asthma. ANSWER: zorvatin",
        "rx-2": "Asthma patients at the clinic receive zorvatin. ANSWER: zorvatin",
        "memo": "The cafeteria serves soup on Fridays.",
    }
    pol = dataclasses.replace(
        fx.toy_policy(mechanism="dp-ksa"),
        retrieval=dataclasses.replace(fx.toy_policy().retrieval, enabled_tenants=(), K=1),
    )
    svc = ProviderService.create(
        tmp_path / "svc",
        policy=pol,
        embedder="all-MiniLM-L6-v2",
        generator=toy.ToyTextGenerator(),
        tenants={"clinic": docs},
        accounts=fx.registry({"alice": "clinic"}),
        allow_weak=True,
    )
    assert svc.embedder_descriptor["model"] == MINILM_ID and svc.embedder_descriptor["dimension"] == 384
    acct = AccountClient(
        "alice",
        pol.window,
        fx.account_key("alice"),
        provider_vkey=svc.signer.vkey(),
        embedder=svc.embedder,
        embedding_scale=svc.embedder_descriptor["embedding_scale"],
        nonces=RandomSource.from_seed(b"n" * 32, b"alice"),
    )
    acct.ask(svc, "Which drug does the clinic prescribe for asthma?")
    bundle = svc.export_bundle(tmp_path / "bundle")
    receipts = tmp_path / "r.jsonl"
    receipts.write_bytes(b"".join(encode(e) + b"\n" for e in acct.receipts))
    svc.close()
    v = verify(bundle, receipts=receipts)
    assert v.verdict == "PASS", v.reasons
    assert v.checked["queries_with_account_confirmed_q"] == 1


@pytest.mark.integration
def test_readme_text_only_provider_example(tmp_path):
    # README "A provider's pipeline": a hosted LLM as a bare callable, string ids, dp-ksa; then the auditor's CLI
    import re
    import subprocess
    import sys

    text = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    block = re.search(r"<!-- example: provider-text-only -->\s*```python\n(.*?)```", text, re.S).group(1)
    p = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    # 20 voters agree: FindBestK picks k = 1 with probability e^5/(e^5 + 4) and the test (offset 14, scale 0.8)
    # then passes unless the noise is <= -4 (probability e^-5/(1 + e^-1.25) = 0.5 %); the seed is fresh each run,
    # so the fallback (the model without keywords) is allowed — never a document's text
    assert p.stdout.strip() in ("zorvatin", "no idea")
    a = subprocess.run(
        [
            sys.executable,
            "-m",
            "dprag",
            "audit",
            "verify",
            "text-bundle",
            "--receipts",
            "text-receipts.jsonl",
            "--json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert a.returncode == 0, a.stdout + a.stderr
    import json

    out = json.loads(a.stdout)
    assert out["verdict"] == "PASS" and TRUST_TEXT_ONLY in out["trust"]
    assert out["channels"]["generation"]["delta"] > 0


def test_account_cli_names_its_embedder(tmp_path, monkeypatch, capsys):
    # `dprag account new --embedder NAME`: the account's client computes Q itself with the named embedder. The
    # entry-point lookup is replaced by a registry holding one toy name, so no model loads here.
    import json

    from dprag.audit.cli import main
    from dprag.audit.protocol.commitments import embedding_bytes, quantise_embeddings
    from dprag.audit.provider import models as serving_models

    real = serving_models.embedder_loader

    def loader(name):
        if name == "hash-32":
            return lambda: toy.HashEmbedder(32)
        return real(name)

    monkeypatch.setattr(serving_models, "embedder_loader", loader)
    a = tmp_path / "dave"
    assert main(["account", "new", str(a), "--account", "dave", "--window", "w1", "--embedder", "hash-32"]) == 0
    capsys.readouterr()
    assert main(["account", "request", str(a), "asthma inhaler"]) == 0
    msg = json.loads(capsys.readouterr().out)
    want = embedding_bytes(quantise_embeddings(toy.HashEmbedder(32).embed(["asthma inhaler"]), 1024)[0])
    assert msg["qemb"] == want.hex() and msg["request"]["h_qemb"] is not None
    assert (
        main(
            [
                "account",
                "new",
                str(tmp_path / "eve"),
                "--account",
                "eve",
                "--window",
                "w1",
                "--embedder",
                "no-such-model",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "--embedder no-such-model" in err and "all-MiniLM-L6-v2" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "eve").exists()


@pytest.mark.slow
def test_keyword_release_is_empirically_dp_on_neighbouring_responses():
    # One response of 20 changed ("other" -> "zorvatin"): counts [12, 8] vs [11, 9], so d_1 = 4 vs 2 — the PTR test
    # sits at its boundary (released on one side, refused unless it fails on the other). The claim (ε_em + ε_ptr,
    # δ) = (2, 0.05) holds; a claim of (0.5, 0) is caught (the mechanism really spends more than that). Seeded; a
    # false report has probability <= 1e-6 per check (the checker's alpha). ~4 minutes on the loaded 2-core box.
    from dprag.accounting.testing import check_dp, seeded

    p = DpKsaPureParameters(m=20, epsilon_em=1.0, epsilon_ptr=1.0, ptr_delta=0.05, max_keywords=3)
    a = ["zorvatin"] * 12 + ["other"] * 8
    b = ["zorvatin"] * 11 + ["other"] * 9

    def mech(responses, source):
        s = p.select_keywords(responses, "q", source)
        return f"{s['k']}:{s['keywords']}"

    assert check_dp(mech, a, b, 2.0, 0.05, trials=20000, source_factory=seeded(b"ksa-emp"), alpha=1e-6).passed
    assert not check_dp(mech, a, b, 0.5, 0.0, trials=20000, source_factory=seeded(b"ksa-emp2"), alpha=1e-6).passed
