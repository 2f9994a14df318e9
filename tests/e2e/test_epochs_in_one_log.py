"""Epochs in one log (spec/protocol.md §3.4): a policy leaf starts the next epoch with its own committed policy and
seed; counters and spend simply continue (nothing is carried); every certified quantity is taken over every epoch.

Each guarantee as the party that would break it: a provider whose epoch raises the filter's limit, resets nothing
but re-opens an epoch with another policy or seed than it committed, or replays an epoch's queries with another
epoch's noise; an auditor who must still PASS an honest log whose requests straddle a policy change."""

from __future__ import annotations

import mpmath as mp
import pytest

from dprag.audit.protocol import commitments as cm
from dprag.audit.protocol.encoding import encode
from dprag.audit.protocol.ledger import NoteSigner
from dprag.audit.provider.service import ProviderService
from dprag.audit.testing import window as fx
from dprag.audit.verify import verify
from dprag.errors import InvalidParameterError

pytestmark = pytest.mark.usefixtures("serial_verify")


@pytest.fixture
def serial_verify(monkeypatch):
    monkeypatch.setenv("DPRAG_VERIFY_WORKERS", "1")


def _vote_kw(eps_q: float, m: int) -> dict:
    """Answer-level voting, seen selection, δ_q = 1e-6; filter limit L = m·eps_q = 1 nat in every epoch."""
    return dict(
        n=18, mechanism="answer-vote", vote_selection="seen", vote_delta=1e-6, max_queries_per_doc=m, vote_epsilon=eps_q
    )


def _receipts(path, clients) -> str:
    lines = [e for c in clients for e in c.receipts]
    path.write_bytes(
        b"".join(encode({k: e[k] for k in ("receipt", "top", "request") if k in e}) + b"\n" for e in lines)
    )
    return str(path)


QUESTIONS = ["asthma protocol inhaler patient", "garden weather rain note", "contract dispute court case"]


def _round(svc, clients, k: int) -> None:
    for name, c in clients.items():
        c.provider_vkey = c.provider_vkey or svc.signer.vkey()
        c.ask(svc, f"{QUESTIONS[k % 3]} {name} {k}")


def test_three_epochs_in_one_log_pass_with_a_delta_over_the_largest_m(tmp_path):
    """One log: epoch 0 (ε_q, M) = (1/16, 16); an account joins, the key rotates, epoch 1 (1/2, 2); epoch 2 (1, 1).
    PASS, and the generation δ covers 16 charges per document (the largest M of any epoch, not the last one's 1):
    16·δ_q·(1 + e^L), L = 1 nat, against an mpmath reference at 50 digits."""
    svc = fx.open_service(tmp_path / "svc", **_vote_kw(1 / 16, 16))
    clients = {a: fx.client(svc, a) for a in fx.ACCOUNTS}
    _round(svc, clients, 0)
    dave = fx.account_key("dave")
    svc.add_account("dave", "clinic", dave.vkey)
    clients["dave"] = fx.client(svc, "dave")
    svc.rotate_key()
    p1 = svc.set_policy(fx.toy_policy(**_vote_kw(0.5, 2)), allow_weak=True)
    _round(svc, clients, 1)
    p2 = svc.set_policy(fx.toy_policy(**_vote_kw(1.0, 1)), allow_weak=True)
    _round(svc, clients, 2)
    assert [ep.pos for ep in svc.epochs] == [0, p1, p2]
    bundle = svc.export_bundle(tmp_path / "bundle")
    receipts = _receipts(tmp_path / "r.jsonl", clients.values())
    svc.close()
    v = verify(bundle, receipts=receipts)
    assert v.verdict == "PASS", v.reasons
    assert v.checked["epochs"] == 2 and v.checked["receipts_accepted"] == 11 and v.checked["queries"] == 11
    gen = v.channels["generation"]
    mp.mp.dps = 50
    ref = 16 * mp.mpf("1e-6") * (1 + mp.e)
    assert gen["max_charges_per_doc"] == 16
    assert gen["delta"] >= ref and gen["delta"] <= ref * (1 + mp.mpf("1e-12"))


def test_an_epoch_that_raises_the_filter_limit_is_refused_and_a_forged_one_fails(tmp_path):
    """The provider may change ε_q only with M (M·ε_q = L): a policy that raises L is refused, naming the rule; one
    appended around the rule (a forged policy leaf, its opening in the bundle) FAILs `policy`."""
    svc = fx.open_service(tmp_path / "svc", **_vote_kw(0.5, 2))
    size = svc.ledger.size
    with pytest.raises(InvalidParameterError, match="filter's limit") as exc:
        svc.set_policy(fx.toy_policy(**_vote_kw(0.5, 4)), allow_weak=True)
    assert exc.value.field == "policy" and svc.ledger.size == size
    with pytest.raises(InvalidParameterError, match="keeps the log's name"):
        svc.set_policy(fx.toy_policy(window="other", **_vote_kw(0.5, 2)), allow_weak=True)
    # around the rule: the provider writes the leaf and its opening itself
    bigger = fx.toy_policy(**_vote_kw(0.5, 4))
    seed, salt = b"\x07" * 32, b"\x08" * 16
    leaf = {
        "type": "policy",
        "epoch": 1,
        "C_policy": cm.policy_commitment(salt, bigger.to_bytes()),
        "C_seed": cm.seed_commitment(seed),
    }
    fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
    with svc.store.write():
        pos = svc.ledger.append(encode(leaf))
        svc.aud.put_state_leaf(pos, "policy")
    svc.state_pos = pos  # its own process never applies the rule it broke (its filter store would refuse the limit)
    svc.checkpoint_now()
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    opening = {"epoch": 1, "pos": pos, "policy": bigger.to_dict(), "salt": salt.hex(), "seed": seed.hex()}
    (bundle / "auditor" / "epochs.json").write_bytes(encode([opening]))
    v = verify(bundle)
    assert v.verdict == "FAIL" and any("changes what an epoch may not" in r and "limit" in r for r in v.reasons), (
        v.reasons
    )


def test_an_epoch_opened_with_another_seed_than_it_committed_fails(tmp_path):
    """The provider commits epoch 1's seed, then hands the auditor another (to explain noise it drew elsewhere)."""
    import json

    svc = fx.open_service(tmp_path / "svc", **_vote_kw(0.5, 2))
    svc.set_policy(fx.toy_policy(**_vote_kw(1.0, 1)), allow_weak=True)
    fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    path = bundle / "auditor" / "epochs.json"
    epochs = json.loads(path.read_text())
    epochs[0]["seed"] = "11" * 32
    path.write_bytes(encode(epochs))
    v = verify(bundle)
    assert v.verdict == "FAIL" and any("epoch 1: its seed does not open C_seed" in r for r in v.reasons), v.reasons


def test_each_epoch_replays_with_its_own_seed(tmp_path):
    """The same question in epoch 0 and epoch 1 gets each epoch's own noise; a provider replaying epoch 1's query
    with epoch 0's seed (the citations of the old noise) FAILs `retrieval`."""
    svc = fx.open_service(tmp_path / "svc", **_vote_kw(0.5, 2))
    alice = fx.client(svc, "alice")
    first = alice.ask(svc, "asthma protocol inhaler patient")
    svc.set_policy(fx.toy_policy(**_vote_kw(1.0, 1)), seed=b"\x42" * 32, allow_weak=True)
    again = alice.ask(svc, "asthma protocol inhaler patient")
    assert svc.epoch_at(again.pos).number == 1 and svc.epoch_at(first.pos).number == 0
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    assert verify(bundle).verdict == "PASS"
    # the cheat: epoch 1 committed its own seed, but the provider keeps drawing from epoch 0's
    svc = fx.open_service(tmp_path / "cheat", **_vote_kw(0.5, 2))
    alice = fx.client(svc, "alice")
    alice.ask(svc, "asthma protocol inhaler patient")
    svc.set_policy(fx.toy_policy(**_vote_kw(1.0, 1)), seed=b"\x42" * 32, allow_weak=True)
    svc.epochs[1].seed = svc.seed = svc.epochs[0].seed
    alice.ask(svc, "asthma protocol inhaler patient")
    svc.epochs[1].seed = b"\x42" * 32  # what the bundle opens
    bundle = svc.export_bundle(tmp_path / "cheat-bundle")
    svc.close()
    v = verify(bundle)
    assert v.verdict == "FAIL" and any("committed-seed noisy scores" in r for r in v.reasons), v.reasons


def test_a_request_recorded_before_a_policy_leaf_is_finished_under_its_own_epoch(tmp_path):
    """alice's request is charged and recorded in epoch 0, its answer fails; the policy changes; her retry finishes it
    from the recorded selection under epoch 0's policy and seed: PASS (the answer is replayed under epoch 0)."""
    from dprag.audit.protocol.errors import AnswerPendingError

    svc = fx.open_service(tmp_path / "svc", **_vote_kw(0.5, 2))
    alice = fx.client(svc, "alice")
    req = alice.request("asthma protocol inhaler patient")
    gen = svc.epochs[0].generator
    real = gen.generate  # the toy generator of the serving path
    calls = {"n": 0}

    def failing(*a, **k):
        calls["n"] += 1
        raise RuntimeError("the generator failed")

    gen.generate = failing
    with pytest.raises(AnswerPendingError):
        svc.serve(req)
    assert calls["n"] >= 1  # the failure was the generator's, after the charge
    gen.generate = real
    svc.set_policy(fx.toy_policy(**_vote_kw(1.0, 1)), allow_weak=True)
    served = alice.send(svc, req)
    assert svc.epoch_at(served.pos).number == 0
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle, receipts=_receipts(tmp_path / "r.jsonl", [alice]))
    assert v.verdict == "PASS" and v.checked["receipts_accepted"] == 1, v.reasons


def test_a_replica_serves_the_new_epoch_without_a_restart(tmp_path):
    a = fx.open_service(tmp_path / "svc", **_vote_kw(0.5, 2))
    b = ProviderService.open(tmp_path / "svc", embedder=a.embedder, generator=a.committed_generator)
    pos = a.set_policy(fx.toy_policy(**_vote_kw(1.0, 1)), allow_weak=True)
    served = fx.client(b, "carol").ask(b, "contract dispute court case")
    assert served.pos > pos and b.epochs[-1].number == 1 and b.policy.generation.max_queries_per_doc == 1
    c = ProviderService.open(tmp_path / "svc", embedder=a.embedder, generator=a.committed_generator)  # restarted
    assert [ep.pos for ep in c.epochs] == [0, pos]
    bundle = b.export_bundle(tmp_path / "bundle")
    for s in (a, b, c):
        s.close()
    assert verify(bundle).verdict == "PASS"


def test_the_key_signer_name_is_kept(tmp_path):
    """A rotated key keeps a note name: the log's checkpoints still open under the new key."""
    svc = fx.open_service(tmp_path / "svc")
    svc.rotate_key(NoteSigner.generate("dprag-next"))
    assert svc.signer.name == "dprag-next"
    svc.close()


# ------------------------------------------------------------------------------------------------------------
# documents join the log (§3.5)
# ------------------------------------------------------------------------------------------------------------
NEW = {"n-1": "asthma inhaler spacer technique note", "n-2": "garden compost rain barrel note"}


def test_documents_added_mid_log_are_served_and_each_query_replays_over_its_prefix(tmp_path):
    """alice asks, two documents join the clinic, alice asks again: PASS; the first query replays over the 60
    documents it saw, the second over 62; with --corpus the whole corpus is checked and re-embedded."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    first = alice.ask(svc, "asthma protocol inhaler patient")
    n0 = len(svc.tenants["clinic"].retriever)
    pos = svc.add_documents("clinic", NEW)
    assert len(svc.tenants["clinic"].retriever) == n0 + 2
    second = alice.ask(svc, "asthma inhaler spacer technique")
    assert first.pos < pos < second.pos
    bundle = svc.export_bundle(tmp_path / "bundle")
    corpus = {"clinic": list(fx.CLINIC), "legal": list(fx.LEGAL)}
    corpus["clinic"] += list(NEW.values())
    svc.close()
    v = verify(bundle, receipts=_receipts(tmp_path / "r.jsonl", [alice]))
    assert v.verdict == "PASS" and v.checked["documents_leaves"] == 1 and v.checked["receipts_accepted"] == 2, v.reasons
    from dprag.audit.testing.toy import HashEmbedder

    v = verify(bundle, corpus=corpus, embedder=HashEmbedder(32))
    assert v.verdict == "PASS" and v.checked["documents_reembedded"] == sum(len(x) for x in corpus.values()), v.reasons


def test_adding_documents_refuses_copies_known_ids_and_spends_nothing(tmp_path):
    svc = fx.open_service(tmp_path / "svc")
    size = svc.ledger.size
    existing = fx.CLINIC[0]
    for docs, rule in (
        ({"n-9": existing}, "same text"),
        ({"0": "a brand new text"}, "already in the corpus"),
        ({"a": "same new text", "b": "same new text"}, "same text"),
        ({}, "at least one"),
    ):
        with pytest.raises(InvalidParameterError, match=rule):
            svc.add_documents("clinic", docs)
    with pytest.raises(InvalidParameterError, match="not a tenant"):
        svc.add_documents("nowhere", NEW)
    assert svc.ledger.size == size
    svc.close()


def test_a_provider_that_commits_other_rows_than_it_serves_fails(tmp_path):
    """The provider adds two documents, then hands the auditor an index whose added rows differ (or a bundle that
    drops the addition's salt): FAIL `commitments` naming the documents leaf."""
    import json

    svc = fx.open_service(tmp_path / "svc")
    fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
    pos = svc.add_documents("clinic", NEW)
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    index = bundle / "auditor" / "index" / "clinic.i16"
    data = bytearray(index.read_bytes())
    data[-1] ^= 1  # the last added row, changed
    index.write_bytes(bytes(data))
    v = verify(bundle)
    assert v.verdict == "FAIL" and any(f"leaf {pos}: the index after the addition" in r for r in v.reasons), v.reasons
    data[-1] ^= 1
    index.write_bytes(bytes(data))
    docs_path = bundle / "auditor" / "docs" / "clinic.json"
    docs = json.loads(docs_path.read_text())
    del docs["additions"]
    docs_path.write_bytes(encode(docs))
    v = verify(bundle)
    assert v.verdict == "FAIL" and any("no index salt for this addition" in r for r in v.reasons), v.reasons


def test_a_replica_serves_documents_another_one_added(tmp_path):
    a = fx.open_service(tmp_path / "svc")
    b = ProviderService.open(tmp_path / "svc", embedder=a.embedder, generator=a.committed_generator)
    a.add_documents("clinic", NEW)
    served = fx.client(b, "alice").ask(b, "asthma inhaler spacer technique")
    assert len(b.tenants["clinic"].retriever) == len(a.tenants["clinic"].retriever)
    c = ProviderService.open(tmp_path / "svc", embedder=a.embedder, generator=a.committed_generator)  # restarted
    assert c.tenants["clinic"].q.shape == a.tenants["clinic"].q.shape
    bundle = c.export_bundle(tmp_path / "bundle")
    for s in (a, b, c):
        s.close()
    v = verify(bundle)
    assert v.verdict == "PASS" and served.pos in range(1, v.history["size"]), v.reasons
