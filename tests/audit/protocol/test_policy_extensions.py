"""000 Alg. 5's free-in-ε extensions as committed policy fields (generation.public_completion, generation.em_prior):
canonical bytes unchanged for the defaults, strict validation, the same charges and ε, and answers audited by
replay (a provider serving under other flags than it committed FAILs)."""

import dataclasses
import json

import pytest

from dprag.accounting.rag.single_query import PureDpRagParams
from dprag.audit.protocol.certify import certified_epsilons
from dprag.audit.protocol.encoding import decode, encode
from dprag.audit.protocol.policy import RECOMMENDED_V2, Policy
from dprag.audit.provider.service import ProviderService
from dprag.audit.testing.toy import HashEmbedder, ToyGenerator
from dprag.audit.testing.window import ACCOUNTS, CLINIC, LEGAL, SCRIPT, client, registry, toy_policy
from dprag.audit.verify import verify
from dprag.errors import DpragError, InvalidParameterError

#: the generation object's keys of every policy written before the extensions (spec/protocol.md §4)
LEGACY_KEYS = {
    "mechanism",
    "algorithm",
    "m",
    "epsilon_token",
    "max_private_tokens",
    "theta_svt",
    "redraw_threshold",
    "tau",
    "edges",
    "epsilon_thr",
    "docs_per_voter",
    "max_queries_per_doc",
    "max_tokens",
    "filter_mode",
    "answer_vote",
}


def extended(pol: Policy, **kw) -> Policy:
    return dataclasses.replace(pol, generation=dataclasses.replace(pol.generation, **kw))


def test_default_policies_keep_their_canonical_bytes():
    for mech in ("pure-dp-rag", "answer-vote"):
        for alg in ("murag", "murag-ada"):
            pol = toy_policy(alg, mechanism=mech).validate()
            assert set(pol.to_dict()["generation"]) == LEGACY_KEYS
            # the defaults written out explicitly are the same object and bytes
            same = extended(pol, public_completion=False, em_prior="uniform")
            assert same.to_bytes() == pol.to_bytes()
    assert set(Policy.recommended("w", **RECOMMENDED_V2).to_dict()["generation"]) == LEGACY_KEYS


def test_extended_policy_round_trips_and_only_adds_its_two_keys():
    base = toy_policy().validate()
    pol = extended(base, public_completion=True, em_prior="non-rag").validate()
    d = decode(pol.to_bytes(), what="policy")
    assert d["generation"]["public_completion"] is True and d["generation"]["em_prior"] == "non-rag"
    # removing the two keys gives back the default policy's object exactly
    del d["generation"]["public_completion"], d["generation"]["em_prior"]
    assert d == decode(base.to_bytes(), what="policy")
    back = Policy.from_dict(decode(pol.to_bytes(), what="policy")).validate()
    assert back == pol and back.to_bytes() == pol.to_bytes() and back.to_bytes() != base.to_bytes()
    one = extended(base, em_prior="non-rag")
    assert "public_completion" not in one.to_dict()["generation"]
    assert Policy.from_dict(one.to_dict()) == one
    # Policy.recommended takes them too
    rec = Policy.recommended("w", **RECOMMENDED_V2, public_completion=True, em_prior="non-rag")
    assert rec.generation.public_completion is True and rec.generation.em_prior == "non-rag"


@pytest.mark.parametrize(
    "key,value",
    [
        ("public_completion", 1),
        ("public_completion", "true"),
        ("public_completion", False),
        ("public_completion", None),
        ("em_prior", "uniform"),
        ("em_prior", "nonrag"),
        ("em_prior", 0),
        ("em_prior", None),
        ("em_prior", ["non-rag"]),
    ],
)
def test_from_dict_is_strict_and_names_the_field(key, value):
    d = toy_policy().to_dict()
    d["generation"][key] = value
    with pytest.raises(InvalidParameterError) as e:
        Policy.from_dict(d)
    assert f"generation.{key}" in str(e.value)


@pytest.mark.parametrize(
    "key,value", [("public_completion", 1), ("public_completion", "yes"), ("em_prior", "Non-RAG"), ("em_prior", None)]
)
def test_validate_is_strict_and_names_the_field(key, value):
    with pytest.raises(InvalidParameterError) as e:
        extended(toy_policy(), **{key: value}).validate()
    assert f"generation.{key}" in str(e.value)


@pytest.mark.parametrize("mech", ["answer-vote", "dp-ksa"])
@pytest.mark.parametrize("key,value", [("public_completion", True), ("em_prior", "non-rag")])
def test_other_mechanisms_refuse_the_extensions(mech, key, value):
    with pytest.raises(InvalidParameterError) as e:
        extended(toy_policy(mechanism=mech), **{key: value}).validate()
    assert f"generation.{key}" in str(e.value) and "pure-dp-rag" in str(e.value)
    # and a canonical object carrying them is refused once validated (from_dict then validate, as the verifier)
    d = toy_policy(mechanism=mech).to_dict()
    d["generation"][key] = value
    with pytest.raises(DpragError):
        Policy.from_dict(d).validate()


def test_rag_params_carry_the_flags_and_the_cost_is_unchanged():
    base = toy_policy()
    pol = extended(base, public_completion=True, em_prior="non-rag")
    p = pol.rag_params()
    assert isinstance(p, PureDpRagParams) and p.public_completion is True and p.em_prior == "non-rag"
    q = base.rag_params()
    assert q.public_completion is False and q.em_prior == "uniform"
    # ε_q of 000 Alg. 5 with the SVT threshold drawn once: ε_Lap/2·(c + 1) + c·ε_Expo, ε_Lap = ε_Expo = ε_token/2
    eps_token, c = base.generation.epsilon_token, base.generation.max_private_tokens
    closed = eps_token / 4 * (c + 1) + c * eps_token / 2
    assert p.cost == q.cost
    for pp in (pol, base):
        eps_q = certified_epsilons(pp)["generation"]["per_query_epsilon"]
        assert closed <= eps_q <= closed * (1 + 1e-9)
    assert certified_epsilons(pol) == certified_epsilons(base)


# ------------------------------------------------------------------------------------------------------------
# served windows
# ------------------------------------------------------------------------------------------------------------
def serve(directory, policy: Policy, rounds: int = 3, served_params=None):
    """A toy window under ``policy`` (fixed seed and nonces, as audit.testing.window.build_window); ``served_params``:
    a cheating provider's generation parameters used instead of the committed ones."""
    emb = HashEmbedder(32)
    svc = ProviderService.create(
        directory / "svc",
        policy=policy,
        embedder=emb,
        seed=b"\x05" * 32,
        embedder_descriptor=emb.descriptor({"clinic": len(CLINIC), "legal": len(LEGAL)}),
        generator=ToyGenerator(),
        tenants={"clinic": CLINIC, "legal": LEGAL},
        accounts=registry(ACCOUNTS),
        allow_weak=True,
    )
    if served_params is not None:
        svc.rag_params = svc.epochs[-1].rag_params = served_params  # the epoch serving uses
    clients = {a: client(svc, a) for a in ACCOUNTS}
    answers = []
    for i in range(rounds):
        for acct, q in SCRIPT:
            r = clients[acct].ask(svc, f"{q} {i}")
            answers.append(r.answer)
    bundle = svc.export_bundle(directory / "bundle")
    svc.close()
    receipts = directory / "receipts.jsonl"  # with the questions: the accounts open h_q for the answer replay
    receipts.write_bytes(b"".join(encode(e) + b"\n" for c in clients.values() for e in c.receipts))
    return bundle, receipts, answers


def charges(bundle):
    out = []
    for line in (bundle / "auditor" / "openings.jsonl").read_text().splitlines():
        op = json.loads(line)
        if op.get("kind") == "query":
            out.append([(c["cost"], c["ids"]) for c in op["charge"]["charges"]])
    return out


def audit(bundle, receipts):
    return verify(bundle, receipts=receipts, corpus={"clinic": CLINIC, "legal": LEGAL}, replay_generator=ToyGenerator())


def test_same_charges_and_epsilon_and_answers_replay(tmp_path):
    base = toy_policy().validate()
    ext = extended(base, public_completion=True, em_prior="non-rag").validate()
    b0, r0, a0 = serve(tmp_path / "plain", base)
    b1, r1, a1 = serve(tmp_path / "ext", ext)
    v0, v1 = audit(b0, r0), audit(b1, r1)
    assert v0.verdict == "PASS" and v1.verdict == "PASS", (v0.reasons, v1.reasons)
    # the same seed and requests: identical charges (documents and units) and identical certified ε
    ch0, ch1 = charges(b0), charges(b1)
    assert len(ch0) == 9 and ch0 == ch1
    assert v0.epsilon == v1.epsilon and v0.channels == v1.channels
    # every answer of the extended window was replayed under the committed flags and matched
    assert v1.checked["answers_replayed"] == 9 and v1.checked["generation"] == 9
    # the flags changed what was served (the non-RAG prior splits the toy's unanimous vote with "unknown"), so the
    # replay above compared answers that depend on them (deterministic: fixed seed and nonces)
    assert a0 != a1


@pytest.mark.parametrize(
    "committed,served",
    [
        ({}, {"em_prior": "non-rag"}),
        ({"em_prior": "non-rag", "public_completion": True}, {"public_completion": True}),
    ],
)
def test_serving_other_flags_than_committed_fails(tmp_path, committed, served):
    pol = extended(toy_policy(), **committed).validate()
    cheat = dataclasses.replace(pol.rag_params(), **{"public_completion": False, "em_prior": "uniform", **served})
    bundle, receipts, _ = serve(tmp_path, pol, served_params=cheat)
    v = audit(bundle, receipts)
    assert v.verdict == "FAIL"
    assert any("not the committed mechanism's answer" in r for r in v.reasons), v.reasons
    # the charges do not depend on the flags: only the answer replay can catch this provider
    v2 = verify(bundle, receipts=receipts)
    assert v2.verdict == "PASS", v2.reasons
