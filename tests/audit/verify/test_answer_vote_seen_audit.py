"""Answer-level voting's seen selection and abstain_empty as committed policy fields (issue 13):
generation.answer_vote.{selection, delta, abstain_empty}. Canonical bytes (and C_policy) of every earlier policy
pinned; strict parsing naming the field; the charges count the ε part only; the verdict's generation δ is
n_z·δ_q (add/remove) and n_z·δ_q·(1 + e^ε_B) (replace-one), checked against an independent exact computation;
windows served by the provider's own service PASS with their charges and answers replayed, and the attestation
names the selection."""

import dataclasses
import hashlib
import math
from fractions import Fraction

import mpmath as mp
import pytest

from dprag.accounting.events import ApproxDpEvent, ExponentialMechanismEvent, PureDpEvent
from dprag.accounting.rag.answer_vote import AnswerVoteParams
from dprag.audit.protocol.certify import certified_epsilons
from dprag.audit.protocol.encoding import EncodingError, decode, encode
from dprag.audit.protocol.policy import RECOMMENDED_V2, Policy
from dprag.audit.testing.window import CLINIC, LEGAL, build_window, toy_policy
from dprag.audit.verify import verify
from dprag.errors import DpragError, InvalidParameterError

SEEN = dict(mechanism="answer-vote", vote_selection="seen", vote_delta=1e-6)

#: SHA-256 of canonical(policy) for policies written before these fields, computed at commit 645cf0b (before
#: they existed): the new fields must leave every such policy's bytes, hence its C_policy, unchanged
PINNED = {
    ("murag", "pure-dp-rag"): "f8f57f0f309892c5b1aa5b85214125f8eee4ef155b02c5af24868181b5dc0211",
    ("murag-ada", "pure-dp-rag"): "d5609f02eade35dca0e8666a5b7ae1074dbbc24a8d57f13237045f98eed2216c",
    ("murag", "answer-vote"): "542634b85ae6cccf494cb7b12d65168fd8db291ce6a198f52048ab6079b80ce1",
    ("murag-ada", "answer-vote"): "bc68b0565d1c0e7f0e77a02acdbe6c78eb739f91e9891d9bfc0d345808a988da",
    ("murag", "dp-ksa"): "232a57942ef6c42a9374ae016014e370cb996b75f52c2e31f5e96fb472c03d80",
}
PINNED_RECOMMENDED = {
    "pure-dp-rag": "2a6e83529281395ec166906966b09679397756ea0b40b4946999a2504fb52f46",
    "answer-vote": "22aa512b76b2152b3ce6a15dfed7f0ef88582a25104e39826d62b79a02e51640",
}


def sha(pol: Policy) -> str:
    return hashlib.sha256(pol.to_bytes()).hexdigest()


def with_gen(pol: Policy, **kw) -> Policy:
    return dataclasses.replace(pol, generation=dataclasses.replace(pol.generation, **kw))


# ------------------------------------------------------------------------------------------------------------
# canonical form
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("alg,mech", sorted(PINNED))
def test_earlier_policies_keep_their_canonical_bytes(alg, mech):
    pol = toy_policy(alg, mechanism=mech).validate()
    assert sha(pol) == PINNED[(alg, mech)]
    # the new fields' defaults written out explicitly change nothing
    assert sha(with_gen(pol, vote_selection="universal", vote_delta=None, abstain_empty=False)) == PINNED[(alg, mech)]


def test_recommended_policies_keep_their_canonical_bytes():
    # the hashes were pinned before issue 25 changed the defaults: RECOMMENDED_V2 gives the earlier ones back
    assert sha(Policy.recommended("w", **RECOMMENDED_V2)) == PINNED_RECOMMENDED["pure-dp-rag"]
    v2_vote = {**RECOMMENDED_V2, "mechanism": "answer-vote"}
    assert sha(Policy.recommended("w", **v2_vote)) == PINNED_RECOMMENDED["answer-vote"]
    assert sha(Policy.recommended("w")) not in PINNED_RECOMMENDED.values()


def test_recommended_defaults_are_the_best_known_and_certify_below_10():
    """Issue 25: answer-level voting over the voters' own keys, m = 30, 2 key words, δ_q = 1e-6, padded voters
    abstaining; composed ε and δ recomputed here from the policy's numbers with mpmath, not from the verifier."""
    import mpmath

    from dprag.audit.protocol.certify import certified_epsilons

    pol = Policy.recommended("w")
    g = pol.generation
    assert (g.mechanism, g.vote_selection, g.m, g.key_words, g.abstain_empty) == ("answer-vote", "seen", 30, 2, True)
    assert (g.vote_delta, g.normalizer, g.max_tokens, g.tau) == (1e-6, "answer-keys-v1", 16, 512)
    cert = certified_epsilons(pol)
    assert cert["epsilon"] <= 10.0
    # generation: replace-one 2·M·ε_q; δ: δ_policy + n·δ_q·(1 + e^(M·ε_q)) with n = M RAG charges per document
    mpmath.mp.dps = 50
    gen_delta = mpmath.mpf(g.vote_delta) * (1 + mpmath.e ** mpmath.mpf(g.vote_epsilon))
    want = mpmath.mpf(pol.coalition.delta_policy) + gen_delta
    assert cert["delta"] >= want and cert["delta"] - want < 1e-9 * want  # an upper bound, tight to 1e-9
    assert cert["epsilon"] >= 2 * g.vote_epsilon  # the generation part alone is 7.8


def test_seen_policy_round_trips_and_only_adds_its_keys():
    base = toy_policy(mechanism="answer-vote").validate()
    pol = toy_policy(**SEEN, abstain_empty=True).validate()
    d = decode(pol.to_bytes(), what="policy")
    av = d["generation"]["answer_vote"]
    assert av["selection"] == "seen" and av["delta"] == (1e-6).hex() and av["abstain_empty"] is True
    del av["selection"], av["delta"], av["abstain_empty"]
    assert d == decode(base.to_bytes(), what="policy")
    back = Policy.from_dict(decode(pol.to_bytes(), what="policy")).validate()
    assert back == pol and back.to_bytes() == pol.to_bytes()
    # abstain_empty alone (universal selection): one key
    one = toy_policy(mechanism="answer-vote", abstain_empty=True).validate()
    assert set(one.to_dict()["generation"]["answer_vote"]) - set(base.to_dict()["generation"]["answer_vote"]) == {
        "abstain_empty"
    }
    assert Policy.from_dict(one.to_dict()) == one
    rec = Policy.recommended("w", mechanism="answer-vote", vote_selection="seen", vote_delta=1e-7, abstain_empty=True)
    g = rec.generation
    assert (g.vote_selection, g.vote_delta, g.abstain_empty) == ("seen", 1e-7, True)


def _seen_dict(**av) -> dict:
    d = toy_policy(**SEEN).to_dict()
    d["generation"]["answer_vote"].update(av)
    return d


@pytest.mark.parametrize(
    "av,field",
    [
        ({"selection": "universal", "delta": None}, "generation.answer_vote.selection"),
        ({"selection": "Seen"}, "generation.answer_vote.selection"),
        ({"selection": 1}, "generation.answer_vote.selection"),
        ({"delta": 1e-6}, "generation.answer_vote.delta"),  # a float, not a float.hex string
        ({"delta": "0x1.0p+0"}, "generation.answer_vote.delta"),  # δ = 1
        ({"delta": "0x1.0p-1"}, "generation.answer_vote.delta"),  # 0.5 > (1 − e^{−ε/2})/2 at ε = 4
        ({"delta": "0x1.0p-200"}, "generation.answer_vote.delta"),  # < e^-100
        ({"delta": "-0x1.0p-20"}, "generation.answer_vote.delta"),
        ({"abstain_empty": False}, "generation.answer_vote.abstain_empty"),
        ({"abstain_empty": 1}, "generation.answer_vote.abstain_empty"),
        ({"abstain_empty": "true"}, "generation.answer_vote.abstain_empty"),
    ],
)
def test_from_dict_is_strict_and_names_the_field(av, field):
    d = _seen_dict(**av)
    d["generation"]["answer_vote"] = {k: v for k, v in d["generation"]["answer_vote"].items() if v is not None}
    with pytest.raises(DpragError) as e:
        Policy.from_dict(d).validate()
    assert field in str(e.value)


def test_seen_without_delta_and_delta_without_seen_are_refused():
    d = _seen_dict()
    del d["generation"]["answer_vote"]["delta"]
    with pytest.raises(InvalidParameterError, match=r"generation\.answer_vote\.delta"):
        Policy.from_dict(d)
    d = toy_policy(mechanism="answer-vote").to_dict()
    d["generation"]["answer_vote"]["delta"] = (1e-6).hex()
    with pytest.raises(InvalidParameterError, match=r"generation\.answer_vote\.delta"):
        Policy.from_dict(d)


def test_unknown_keys_are_refused():
    d = _seen_dict(T="0x1.0p+3")
    with pytest.raises(EncodingError, match=r"generation\.answer_vote.*unknown keys \['T'\]"):
        Policy.from_dict(d)


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(vote_selection="seen"), "generation.answer_vote.delta"),
        (dict(vote_selection="seen", vote_delta=True), "generation.answer_vote.delta"),
        (dict(vote_selection="seen", vote_delta="1e-6"), "generation.answer_vote.delta"),
        (dict(vote_selection="seen", vote_delta=0.45), "generation.answer_vote.delta"),  # > (1 − e^-2)/2 = 0.432
        (dict(vote_selection="universal", vote_delta=1e-6), "generation.answer_vote.delta"),
        (dict(vote_selection="all"), "generation.answer_vote.selection"),
        (dict(abstain_empty=1), "generation.answer_vote.abstain_empty"),
    ],
)
def test_validate_is_strict_and_names_the_field(kw, field):
    with pytest.raises(InvalidParameterError) as e:
        with_gen(toy_policy(mechanism="answer-vote"), **kw).validate()
    assert field in str(e.value)


def test_seen_epsilon_below_the_selection_minimum_names_epsilon():
    with pytest.raises(InvalidParameterError, match=r"generation\.answer_vote\.epsilon"):
        with_gen(toy_policy(**SEEN), vote_epsilon=2.0**-11).validate()


@pytest.mark.parametrize("mech", ["pure-dp-rag", "dp-ksa"])
@pytest.mark.parametrize("kw", [dict(vote_selection="seen", vote_delta=1e-6), dict(abstain_empty=True)])
def test_other_mechanisms_refuse_the_fields(mech, kw):
    with pytest.raises(InvalidParameterError, match=r"generation\.answer_vote"):
        with_gen(toy_policy(mechanism=mech), **kw).validate()


# ------------------------------------------------------------------------------------------------------------
# the mechanism, the charges and the certified (ε, δ)
# ------------------------------------------------------------------------------------------------------------
def test_rag_params_carry_the_fields_and_the_filter_counts_the_epsilon_part():
    pol = toy_policy(**SEEN, abstain_empty=True).validate()
    p = pol.rag_params()
    assert isinstance(p, AnswerVoteParams)
    assert (p.selection, p.delta, p.abstain_empty, p.epsilon) == ("seen", 1e-6, True, 4.0)
    assert p.cost == ApproxDpEvent(4.0, 1e-6)
    assert pol.rag_charge() == PureDpEvent(4.0) and pol.query_cost() == PureDpEvent(4.0)
    uni = toy_policy(mechanism="answer-vote").validate()
    assert uni.rag_params().selection == "universal" and uni.rag_params().abstain_empty is False
    assert uni.rag_charge() == ExponentialMechanismEvent(4.0)
    # the same ε_q: the same filter units, so the same charges and the same generation ε as the universal one
    from dprag.audit.protocol.charges import ChargeRule

    assert ChargeRule.of(pol) == ChargeRule.of(uni)
    cu, cs = certified_epsilons(uni), certified_epsilons(pol)
    assert cs["generation"]["epsilon"] == cu["generation"]["epsilon"]
    assert cu["generation"]["delta"] == 0.0 and cu["delta"] == uni.coalition.delta_policy


def _exact_delta(pol: Policy) -> tuple[int, Fraction, mp.mpf]:
    """n_z, add/remove δ and replace-one δ from the committed parameters alone (closed forms, exact/60 digits):
    the filter's budget is M·ε_q per document (MuRAG) or M·(ε_thr + ε_q) (MuRAG-Ada), one RAG charge costs ε_q,
    so n_z = ⌊budget / ε_q⌋ and ε_B = the budget."""
    g = pol.generation
    eps_q = Fraction(g.vote_epsilon)
    per = eps_q + (Fraction(g.epsilon_thr) if g.algorithm == "murag-ada" else 0)
    budget = g.max_queries_per_doc * per
    n = math.floor(budget / eps_q)
    ar = n * Fraction(g.vote_delta)
    with mp.workdps(60):
        ro = mp.mpf(ar.numerator) / ar.denominator * (1 + mp.exp(mp.mpf(budget.numerator) / budget.denominator))
    return n, ar, ro


@pytest.mark.parametrize("alg", ["murag", "murag-ada"])
@pytest.mark.parametrize("delta", [1e-6, 3e-9, 0.1])
def test_certified_delta_is_n_z_delta_and_never_below_the_exact_value(alg, delta):
    pol = toy_policy(alg, mechanism="answer-vote", vote_selection="seen", vote_delta=delta).validate()
    c = certified_epsilons(pol)
    gen = c["generation"]
    n, ar, ro = _exact_delta(pol)
    # toy: M = 2, ε_q = 4 (+ ε_thr = 1): n_z = 2 for both algorithms (MuRAG-Ada: ⌊10/4⌋)
    assert n == 2 and gen["max_charges_per_doc"] == n and gen["per_query_delta"] == delta
    assert gen["selection"] == "seen"
    assert Fraction(gen["delta_add_remove"]) >= ar and gen["delta_add_remove"] <= float(ar) * (1 + 1e-12)
    with mp.workdps(60):
        assert mp.mpf(gen["delta"]) >= ro and gen["delta"] <= float(ro) * (1 + 1e-12)
        # the composed δ adds it to the retrieval δ, rounded up
        assert mp.mpf(c["delta"]) >= mp.mpf(pol.coalition.delta_policy) + ro
    assert c["delta"] <= (pol.coalition.delta_policy + float(ro)) * (1 + 1e-12)


# ------------------------------------------------------------------------------------------------------------
# windows served by the provider's own service
# ------------------------------------------------------------------------------------------------------------
def _receipts_with_questions(w, path):
    path.write_bytes(b"".join(encode(e) + b"\n" for c in w.clients.values() for e in c.receipts))
    return path


@pytest.mark.parametrize("alg", ["murag", "murag-ada"])
def test_seen_window_passes_with_charges_and_answers_replayed(tmp_path, alg):
    from dprag.audit.testing.toy import ToyGenerator

    w = build_window(tmp_path / "w", algorithm=alg, rounds=2, **SEEN, abstain_empty=True)
    r = _receipts_with_questions(w, tmp_path / "r.jsonl")
    v = verify(w.bundle, receipts=r, corpus={"clinic": CLINIC, "legal": LEGAL}, replay_generator=ToyGenerator())
    assert v.verdict == "PASS", v.reasons
    assert v.checked["generation"] == 6 and v.checked["answers_replayed"] == 6
    pol = toy_policy(alg, **SEEN, abstain_empty=True)
    n, _, ro = _exact_delta(pol)
    # the verdict's δ is at least retrieval δ + n_z·δ_q·(1 + e^ε_B), from the committed parameters
    with mp.workdps(60):
        assert mp.mpf(v.delta) >= mp.mpf(pol.coalition.delta_policy) + ro
    exact_eps = 2 * 2 * (4.0 + (0.0 if alg == "murag" else 1.0))
    assert exact_eps <= v.channels["generation"]["epsilon"] <= exact_eps * (1 + 1e-6)
    att = v.attestation["generation"]
    assert "seen selection" in att and "1e-06" in att and f"n_z = {n}: the most RAG charges" in att
    assert "abstain" in att
    # every opened charge is a pure ε_q charge in filter units (the δ is never in the ledger)
    import json

    units = {
        c["cost"]["epsilon_units"]
        for ln in (w.bundle / "auditor" / "openings.jsonl").read_text().splitlines()
        if json.loads(ln).get("kind") == "query"
        for c in json.loads(ln)["charge"]["charges"]
    }
    from dprag.audit.protocol.charges import ChargeRule

    assert ChargeRule.of(pol).rag_units in units


def test_universal_window_attestation_names_its_selection(tmp_path):
    w = build_window(tmp_path / "w", rounds=1, mechanism="answer-vote")
    v = verify(w.bundle, receipts=w.receipts)
    assert v.verdict == "PASS", v.reasons
    assert "universal selection" in v.attestation["generation"] and "no δ" in v.attestation["generation"]
    assert v.delta == toy_policy().coalition.delta_policy


def _answers(directory, **kw) -> list[str]:
    from dprag.audit.testing.window import SCRIPT, client, open_service

    svc = open_service(directory, **kw)
    clients = {a: client(svc, a) for a in svc.registry}
    out = [clients[a].ask(svc, f"{q} {i}").answer for i in range(2) for a, q in SCRIPT]
    svc.close()
    return out


def test_seen_and_universal_release_differently_on_the_toy(tmp_path):
    # on the toy clinic the voters agree on the 8-letter key "zorvatin": the universal selection at ε = 4, t = 2
    # needs ε·h/2 > t + 9·ln 38 (h > 17 votes of m = 10: never), the seen one h > T = 1 + 2·ln(10^6)/4 = 7.9,
    # so the served answers differ (deterministic: fixed seed and nonces) — the answer replay of the seen windows
    # above compared answers that depend on the committed selection
    a_s = _answers(tmp_path / "s", **SEEN)
    a_u = _answers(tmp_path / "u", mechanism="answer-vote")
    assert any("zorvatin" in a for a in a_s) and not any("zorvatin" in a for a in a_u)


def test_a_window_committing_answer_keys_v2_passes_with_its_answers_replayed(tmp_path):
    """A policy may name the v2 normaliser (an installed dprag.normalizers entry point); the verifier replays
    every answer with the normaliser the policy committed."""
    from dprag.audit.testing.toy import ToyGenerator

    w = build_window(
        tmp_path / "w", algorithm="murag-ada", rounds=2, **SEEN, abstain_empty=True, normalizer="answer-keys-v2"
    )
    import json

    committed = json.loads((w.bundle / "auditor" / "policy.json").read_text())["policy"]["generation"]
    assert committed["answer_vote"]["normalizer"] == "answer-keys-v2"
    r = _receipts_with_questions(w, tmp_path / "r.jsonl")
    v = verify(w.bundle, receipts=r, corpus={"clinic": CLINIC, "legal": LEGAL}, replay_generator=ToyGenerator())
    assert v.verdict == "PASS", v.reasons
    assert v.checked["answers_replayed"] == 6
