"""A guarantee that means something (spec/protocol.md §8, "How much that is"): a PASS is strong, weak (ε above the
auditor's limit, or δ >= 1/n) or vacuous (δ >= 1); the provider refuses to commit a policy that would be weak or
vacuous unless the operator says so, and ``Policy.recommended`` refuses one given the corpus size."""

from __future__ import annotations

import math

import pytest

from dprag.audit.protocol.certify import guarantee_strength
from dprag.audit.protocol.policy import Policy
from dprag.audit.testing import window as fx
from dprag.errors import InvalidParameterError


@pytest.mark.parametrize(
    "eps,delta,n,limit,expect",
    [
        (10.0, 1e-5, 60, 10.0, "strong"),  # at the limit: not above it
        (math.nextafter(10.0, 11.0), 1e-5, 60, 10.0, "weak"),
        (42.0, 1e-5, 60, 50.0, "strong"),  # the auditor's own limit
        (1.0, 1 / 60, 60, 10.0, "weak"),  # δ = 1/n: may cover releasing one record outright
        (1.0, math.nextafter(1 / 60, 0.0), 60, 10.0, "strong"),
        (1.0, 1.0, 60, 10.0, "vacuous"),
        (1.0, 1471.3, 60, 10.0, "vacuous"),
        (math.inf, 1e-9, 60, 10.0, "vacuous"),
        (1.0, 0.5, None, 10.0, "strong"),  # without a tenant size only δ >= 1 and ε judge it
    ],
)
def test_the_strength_boundaries(eps, delta, n, limit, expect):
    strength, why = guarantee_strength(eps, delta, n, limit)
    assert strength == expect
    assert (why == []) == (expect == "strong") and all(w.startswith(f"the guarantee is {expect}") for w in why)


def test_recommended_with_the_corpus_size_refuses_a_vacuous_policy():
    """The issue's case: Policy.recommended(max_queries_per_doc=5) certified ε = 41.124, δ = 1471.34 and was
    accepted silently. Given the corpus size it is refused naming why; the defaults pass."""
    with pytest.raises(InvalidParameterError, match=r"vacuous guarantee .* δ = 1\.47e\+03 >= 1") as e:
        Policy.recommended("w", max_queries_per_doc=5, documents=60)
    assert e.value.field == "policy"
    with pytest.raises(InvalidParameterError, match=r"weak guarantee .* δ = .* >= 1/n"):
        Policy.recommended("w", documents=10**4, vote_delta=1e-3)  # 2·1e-3·(1+e^3.9) ≈ 0.1 >= 1e-4
    assert Policy.recommended("w", documents=60).window == "w"
    with pytest.raises(InvalidParameterError, match="documents"):
        Policy.recommended("w", documents=0)


def test_the_provider_refuses_a_weak_policy_unless_told_and_writes_nothing(tmp_path):
    with pytest.raises(InvalidParameterError, match=r"weak guarantee .* ε = 42\.12 > --max-epsilon 10") as e:
        fx.open_service(tmp_path / "w", allow_weak=False)  # the toy policy certifies ε = 42.1
    assert e.value.field == "policy" and "allow_weak=True" in str(e.value)
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir())  # nothing written
    svc = fx.open_service(tmp_path / "w2")
    size = svc.ledger.size
    with pytest.raises(InvalidParameterError, match="weak guarantee"):
        svc.set_policy(fx.toy_policy("murag"))  # the next epoch: judged over every epoch's policy
    assert svc.ledger.size == size and len(svc.epochs) == 1  # nothing appended
    svc.set_policy(fx.toy_policy("murag"), allow_weak=True)
    assert len(svc.epochs) == 2
    svc.close()


def test_a_corpus_that_grows_past_1_over_delta_is_refused_unless_told(tmp_path):
    """δ >= 1/n is weak for the LARGEST tenant (n·δ records may leak in expectation), so adding documents can
    weaken a committed guarantee: add_documents applies the rule to the grown tenant. Here a policy with a
    per-charge δ of 0.01 (answer-vote, seen selection, M = 1 so that ε stays under 10) certifies δ just under
    1/n for the toy corpus; the added documents push n over 1/δ."""
    from dprag.audit.protocol.certify import certified_epsilons

    kw = dict(mechanism="answer-vote", vote_selection="seen", vote_delta=1e-4, max_queries_per_doc=1, vote_epsilon=1.0)
    pol = fx.toy_policy("murag", k_max=1, n=2, **kw)
    cert = certified_epsilons(pol)
    n_ok = max(len(fx.CLINIC), len(fx.LEGAL))
    assert cert["epsilon"] <= 10 and cert["delta"] < 1 / n_ok, cert  # strong at genesis
    svc = fx.open_service(tmp_path / "w", k_max=1, n=2, **kw)
    size = svc.ledger.size
    more = int(1 / cert["delta"]) + 1 - len(fx.CLINIC)  # the clinic's n then crosses 1/δ
    docs = {f"new-{i}": f"a new note number {i} about nothing in particular" for i in range(more)}
    with pytest.raises(InvalidParameterError, match=r"weak guarantee .* >= 1/n"):
        svc.add_documents("clinic", docs)
    assert svc.ledger.size == size
    svc.add_documents("clinic", docs, allow_weak=True)
    assert svc.ledger.size == size + 1
    svc.close()
