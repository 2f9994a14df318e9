"""The account registry in the log (spec/protocol.md §3.2): accounts join, rotate their own key and are revoked by
leaves anywhere in the log, every party applies one rule to them, and the verifier re-derives who could ask where.

Each test is what the party trying to break the guarantee would do: a provider re-keying an account with a key it
holds, moving it to another tenant, letting a revoked account back in, or serving it after its revocation; an
account framing the provider with a refusal issued after its revocation."""

from __future__ import annotations

import json

import pytest

from dprag.audit.protocol.encoding import encode
from dprag.audit.protocol.errors import RequestError
from dprag.audit.protocol.registry import AccountEntry, Registry, RegistryError, account_key_leaf, account_leaf
from dprag.audit.protocol.request import AccountKey
from dprag.audit.provider.service import ProviderService
from dprag.audit.testing import window as fx
from dprag.audit.verify import verify
from dprag.errors import InvalidParameterError

pytestmark = pytest.mark.usefixtures("serial_verify")


@pytest.fixture
def serial_verify(monkeypatch):
    monkeypatch.setenv("DPRAG_VERIFY_WORKERS", "1")


def _write(path, lines) -> str:
    path.write_bytes(b"".join(encode(x) + b"\n" for x in lines))
    return str(path)


def _client(svc, name, key):
    c = fx.client(svc, name)
    c.key = key
    return c


def test_an_account_added_mid_log_asks_and_the_audit_passes(tmp_path):
    svc = fx.open_service(tmp_path / "svc")
    fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
    dave = AccountKey.generate()
    pos = svc.add_account("dave", "clinic", dave.vkey)
    assert json.loads(svc.ledger.leaf(pos)) == account_leaf("dave", "clinic", dave.vkey)
    d = _client(svc, "dave", dave)
    served = d.ask(svc, "inhaler drug protocol")
    assert served.pos > pos
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", d.receipts))
    assert v.verdict == "PASS", v.reasons
    assert v.checked["registry_leaves"] == 1 and v.checked["receipts_accepted"] == 1


def test_the_provider_refuses_what_the_registry_rule_forbids_and_spends_nothing(tmp_path):
    svc = fx.open_service(tmp_path / "svc")
    size = svc.ledger.size
    alice_key = fx.account_key("alice").vkey
    for args, field, rule in (
        (("alice", "clinic", AccountKey.generate().vkey), "account.account", "already registered"),
        (("erin", "clinic", alice_key), "account.key", "already registered to 'alice'"),
        (("erin", "nowhere", AccountKey.generate().vkey), "account.tenant", "not a tenant"),
        (("erin", "clinic", "zz"), "account.key", "64 hex"),
        (("bad name!", "clinic", AccountKey.generate().vkey), "account.account", "identifier"),
    ):
        with pytest.raises(InvalidParameterError, match=rule) as exc:
            svc.add_account(*args)
        assert exc.value.field == field
    with pytest.raises(InvalidParameterError, match="is not registered"):
        svc.revoke_account("zed")
    assert svc.ledger.size == size  # nothing appended
    svc.revoke_account("bob")
    with pytest.raises(InvalidParameterError, match="a revoked name never rejoins"):
        svc.add_account("bob", "clinic", AccountKey.generate().vkey)
    svc.close()


def test_the_provider_cannot_re_key_an_account_only_the_account_can(tmp_path):
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    alice.ask(svc, "asthma protocol inhaler patient")
    mine = AccountKey.generate()  # a key the provider holds
    forged = account_key_leaf(mine, svc.chain_id, "alice", mine.vkey)  # signed by the wrong key
    with pytest.raises(InvalidParameterError, match="not the signature of 'alice'"):
        svc.rotate_account_key(forged)
    new = AccountKey.generate()
    other_log = account_key_leaf(fx.account_key("alice"), "0" * 64, "alice", new.vkey)  # signed for another log
    with pytest.raises(InvalidParameterError, match="signature"):
        svc.rotate_account_key(other_log)
    svc.rotate_account_key(account_key_leaf(fx.account_key("alice"), svc.chain_id, "alice", new.vkey))
    stale = alice.request("inhaler drug protocol")  # signed by the key rotated out
    with pytest.raises(RequestError, match="signature"):
        svc.serve(stale)
    alice2 = _client(svc, "alice", new)
    alice2.counter = 1
    alice2.ask(svc, "inhaler drug protocol")
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle)
    assert v.verdict == "PASS", v.reasons


def _forged_leaf_bundle(tmp_path, leaf: dict, *, then_ask: str | None = None):
    """A provider appending a registry leaf of its own choosing straight to its log (its own keys, its own
    checkpoints), then serving ``then_ask`` with the key it registered."""
    svc = fx.open_service(tmp_path / "svc")
    fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
    with svc.store.write():
        pos = svc.ledger.append(encode(leaf))
        svc.aud.put_state_leaf(pos, leaf["type"])
    svc.state_pos = pos  # its own process never applies the rule it broke
    svc.checkpoint_now()
    return svc


def test_a_provider_re_keying_or_moving_an_account_fails(tmp_path):
    mine = AccountKey.generate()
    # the provider re-registers alice's name under a key it holds, or moves carol to the other tenant
    for k, leaf in enumerate(
        (account_leaf("alice", "clinic", mine.vkey), account_leaf("carol", "clinic", AccountKey.generate().vkey))
    ):
        svc = _forged_leaf_bundle(tmp_path / str(k), leaf)
        bundle = svc.export_bundle(tmp_path / str(k) / "bundle")
        svc.close()
        v = verify(bundle)
        assert v.verdict == "FAIL" and any("registry leaf breaks its rule" in r for r in v.reasons), v.reasons
    # ... or re-keys alice with a rotation leaf it signed itself
    leaf = {**account_key_leaf(mine, "0" * 64, "alice", mine.vkey)}
    svc = _forged_leaf_bundle(tmp_path / "k", leaf)
    bundle = svc.export_bundle(tmp_path / "k" / "bundle")
    svc.close()
    v = verify(bundle)
    assert v.verdict == "FAIL" and any("is not the signature of 'alice'" in r for r in v.reasons), v.reasons


def test_a_revoked_account_is_refused_and_serving_it_anyway_fails(tmp_path):
    svc = fx.open_service(tmp_path / "svc")
    bob = fx.client(svc, "bob")
    bob.ask(svc, "garden weather rain note")
    rpos = svc.revoke_account("bob")
    req = bob.request("garden weather rain")
    with pytest.raises(RequestError, match="revoked") as exc:
        svc.serve(req)
    refusal = exc.value.refusal
    assert refusal["code"] == "revoked" and refusal["size"] > rpos
    size = svc.ledger.size
    # a dishonest provider serves bob anyway: it records the request past the revocation by hand
    svc.registry.entries["bob"] = AccountEntry("clinic", [(0, fx.account_key("bob").vkey)], 0)
    served = bob.send(svc, req)
    assert served.pos >= size
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", [{"refusal": refusal, "request": req.signed}]))
    assert v.verdict == "FAIL"
    assert any("account 'bob' may not ask here" in r and f"revoked at leaf {rpos}" in r for r in v.reasons), v.reasons


def test_a_revocation_refusal_is_checked_and_cannot_frame_the_provider(tmp_path):
    svc = fx.open_service(tmp_path / "svc")
    bob = fx.client(svc, "bob")
    bob.ask(svc, "garden weather rain note")
    svc.revoke_account("bob")
    req = bob.request("garden weather rain")
    with pytest.raises(RequestError) as exc:
        svc.serve(req)
    honest = exc.value.refusal
    # the provider lies: it refuses alice (never revoked) as revoked, with its own key
    alice = fx.client(svc, "alice")
    areq = alice.request("asthma protocol inhaler patient")
    lie = RequestError("request.account", "'alice' was revoked")
    lie.code, lie.snapshot = "revoked", svc.ledger.size
    lie = svc._refuse(lie, areq.signed).refusal
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", [{"refusal": honest, "request": req.signed}]))
    assert v.verdict == "PASS" and v.checked["refusals"] == 1, v.reasons
    v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", [{"refusal": lie, "request": areq.signed}]))
    assert v.verdict == "FAIL" and any("no leaf below size" in r for r in v.reasons), v.reasons


def test_a_replica_sees_the_registry_another_one_changed(tmp_path):
    """Two service objects on one store (two processes of one host): an account the first adds is served by the
    second, and one the first revokes is refused by the second, with no restart."""
    a = fx.open_service(tmp_path / "svc")
    b = ProviderService.open(tmp_path / "svc", embedder=a.embedder, generator=a.committed_generator)
    dave = AccountKey.generate()
    a.add_account("dave", "legal", dave.vkey)
    _client(b, "dave", dave).ask(b, "contract dispute court case")
    a.revoke_account("carol")
    with pytest.raises(RequestError, match="revoked"):
        fx.client(b, "carol").ask(b, "contract dispute court case")
    a.close()
    b.close()


def test_the_registry_rule_on_its_own():
    """The one rule, without a service: every way a leaf can break it, each naming its field."""
    k1, k2 = AccountKey.generate(), AccountKey.generate()
    reg = Registry.from_genesis("c" * 64, {"alice": ("t", k1.vkey)})
    bad = [
        ({"type": "account", "account": "x", "tenant": "t"}, "leaf"),
        ({"type": "account", "account": "alice", "tenant": "t", "key": k2.vkey}, "account"),
        ({"type": "account", "account": "bob", "tenant": "t", "key": k1.vkey}, "key"),
        ({"type": "account-revoke", "account": "bob"}, "account"),
        ({**account_key_leaf(k2, "c" * 64, "alice", k2.vkey)}, "key"),  # k2 rotates alice: not alice's signature
    ]
    for rec, field in bad[:4]:
        with pytest.raises(RegistryError) as exc:
            reg.apply(5, rec, {"t"})
        assert exc.value.field == field, (rec, exc.value)
    with pytest.raises(RegistryError) as exc:
        reg.apply(5, account_key_leaf(k2, "c" * 64, "alice", AccountKey.generate().vkey), {"t"})
    assert exc.value.field == "sig"
    k3 = AccountKey.generate()
    reg.apply(6, account_key_leaf(k1, "c" * 64, "alice", k3.vkey), {"t"})
    assert reg["alice"].key_at(6) == k1.vkey and reg["alice"].key_at(7) == k3.vkey
    with pytest.raises(RegistryError, match="already registered"):  # a key rotated out is never registered again
        reg.apply(8, {"type": "account", "account": "bob", "tenant": "t", "key": k1.vkey}, {"t"})
    reg.apply(9, {"type": "account-revoke", "account": "alice"}, {"t"})
    assert reg["alice"].active_at(9) is False and reg["alice"].active_at(8) is True
    with pytest.raises(RegistryError, match="revoked"):
        reg.apply(10, {"type": "account-revoke", "account": "alice"}, {"t"})


# ------------------------------------------------------------------------------------------------------------
# the provider's key rotates inside the log (§3.3)
# ------------------------------------------------------------------------------------------------------------
def _rotated(tmp_path):
    """alice asks, the provider rotates its key, bob asks; the receipts of both, and the rotation's position."""
    svc = fx.open_service(tmp_path / "svc")
    alice, bob = fx.client(svc, "alice"), fx.client(svc, "bob")
    alice.ask(svc, "asthma protocol inhaler patient")
    old = svc.signer
    pos = svc.rotate_key()
    assert svc.signer.vkey() != old.vkey()
    bob.provider_vkey = svc.signer.vkey()  # (the client following a rotation is tested on its own)
    bob.ask(svc, "garden weather rain note")
    return svc, old, pos, alice.receipts + bob.receipts


def test_a_rotated_key_verifies_pass_with_the_dual_signed_checkpoint(tmp_path):
    svc, old, pos, receipts = _rotated(tmp_path)
    from dprag.audit.protocol.ledger import open_checkpoint

    note = svc.checkpoint_note(pos + 1)
    open_checkpoint(note, svc.origin, old.verifier())  # the first checkpoint covering it: signed by both keys
    open_checkpoint(note, svc.origin, svc.signer.verifier())
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", receipts), key=_vkey(tmp_path, old.vkey()))
    assert v.verdict == "PASS", v.reasons
    assert v.checked["key_leaves"] == 1 and v.checked["key_rotations"] == 1 and v.checked["receipts_accepted"] == 2


def _vkey(tmp_path, vkey: str) -> str:
    p = tmp_path / "pinned.vkey"
    p.write_text(vkey)
    return str(p)


def test_a_retired_key_signing_past_its_rotation_is_evidence_not_a_receipt(tmp_path):
    """After the rotation the old key signs a receipt for a later leaf (a thief holding it, or the provider): the
    verifier does not accept it as evidence of a release (it is listed, naming the retirement)."""
    svc, old, pos, receipts = _rotated(tmp_path)
    from dprag.audit.protocol.receipts import sign_receipt

    late = receipts[-1]["receipt"]
    assert late["size"] > pos + 1
    forged = sign_receipt({k: v for k, v in late.items() if k != "sig"}, old)
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", [{"receipt": forged}]))
    assert v.verdict == "PASS" and v.checked["receipts_accepted"] == 0, v.reasons
    assert any(f"retired at leaf {pos}" in r for r in v.rejected_evidence), v.rejected_evidence


def test_a_rotation_the_old_key_did_not_sign_or_without_the_dual_checkpoint_fails(tmp_path):
    from dprag.audit.protocol.ledger import Checkpoint, NoteSigner, sign_checkpoint
    from dprag.audit.protocol.provider_keys import key_leaf

    # the provider appends a rotation signed by the new key itself (it lost, or never had, the old one)
    svc = fx.open_service(tmp_path / "a" / "svc")
    new = NoteSigner.generate("other")
    leaf = key_leaf(new, svc.chain_id, new.vkey())
    with svc.store.write():
        p, root = svc.ledger.append_with_root(encode(leaf))
    svc.aud.put_checkpoint(p + 1, sign_checkpoint(Checkpoint(svc.origin, p + 1, root, ()), svc.signer))
    bundle = svc.export_bundle(tmp_path / "a" / "bundle")
    svc.close()
    v = verify(bundle)
    assert v.verdict == "FAIL" and any("rotation breaks its rule: sig" in r for r in v.reasons), v.reasons
    # an honest rotation leaf, but the checkpoint that first covers it signed by the new key alone
    svc = fx.open_service(tmp_path / "b" / "svc")
    pos = svc.rotate_key()
    cp = Checkpoint(svc.origin, pos + 1, svc.ledger.root(pos + 1), ())
    svc.aud.put_checkpoint(pos + 1, sign_checkpoint(cp, svc.signer), replace=True)
    bundle = svc.export_bundle(tmp_path / "b" / "bundle")
    svc.close()
    v = verify(bundle)
    assert v.verdict == "FAIL" and any(f"rotation at leaf {pos} has no checkpoint" in r for r in v.reasons), v.reasons


def test_a_replica_follows_a_rotation_before_it_signs_again(tmp_path):
    a = fx.open_service(tmp_path / "svc")
    b = ProviderService.open(tmp_path / "svc", embedder=a.embedder, generator=a.committed_generator)
    old = b.signer.vkey()
    a.rotate_key()
    c = fx.client(b, "carol")
    c.provider_vkey = a.signer.vkey()
    c.ask(b, "contract dispute court case")  # b signs the receipt and the checkpoint with the new key
    assert b.signer.vkey() == a.signer.vkey() != old
    bundle = b.export_bundle(tmp_path / "bundle")
    a.close()
    b.close()
    v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", c.receipts))
    assert v.verdict == "PASS" and v.checked["receipts_accepted"] == 1, v.reasons


def test_the_verdict_names_the_pinned_key_and_the_rotation_that_authenticated_the_head_key(tmp_path):
    """Pinned the genesis key, the head's key is the rotated one: the CLI does not call it "pinned by the auditor"."""
    from dprag.audit.commands.audit import _key_provenance
    from dprag.audit.verify.verdict import key_fingerprint

    svc, old, pos, receipts = _rotated(tmp_path)
    new = svc.signer.vkey()
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle, key=_vkey(tmp_path, old.vkey()))
    assert v.verdict == "PASS" and v.provider_key == key_fingerprint(new), v.reasons
    assert v.history["key_rotations"] == [{"pos": pos, "key": key_fingerprint(new)}]
    said = _key_provenance(v)
    assert said.startswith("NOT the pinned key") and f"leaf {pos}" in said, said
    v = verify(bundle, key=_vkey(tmp_path, new))
    assert v.verdict == "PASS" and _key_provenance(v) == "pinned by the auditor"
    from dprag.audit.protocol.ledger import NoteSigner

    v = verify(bundle, key=_vkey(tmp_path, NoteSigner.generate("x").vkey()))
    assert v.verdict == "FAIL" and any("not the pinned one" in r for r in v.reasons), v.reasons


def test_an_account_client_follows_a_rotation_from_the_key_it_pinned(tmp_path):
    """The client pinned the genesis key; after a rotation its next receipt is signed by the new key: it follows
    the rotation through the proof the service gives (a dual-signed checkpoint including the leaf) and accepts."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice", directory=tmp_path / "alice")
    alice.ask(svc, "asthma protocol inhaler patient")
    svc.rotate_key()
    alice.ask(svc, "inhaler drug protocol")
    assert alice.provider_vkey == svc.signer.vkey() and len(alice.key_eras) == 2
    again = fx.client(svc, "alice", directory=tmp_path / "alice")  # restarted: the followed key is kept
    assert again.provider_vkey == svc.signer.vkey()
    svc.close()


def test_an_account_client_refuses_a_rotation_its_pinned_key_did_not_sign(tmp_path):
    """A provider (or a thief of the new key) shows a key history whose rotation the pinned key never signed: the
    client refuses it, keeps the incident, and accepts no receipt of the new key."""
    from dprag.audit.client.account import ReceiptError
    from dprag.audit.protocol.ledger import NoteSigner

    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    pinned = alice.provider_vkey
    svc.rotate_key()
    history = svc.key_history()
    thief = NoteSigner.generate("thief")
    from dprag.audit.protocol.provider_keys import key_leaf

    forged = dict(history["rotations"][0], leaf=encode(key_leaf(thief, svc.chain_id, thief.vkey())).hex())
    with pytest.raises(ReceiptError, match="does not follow"):
        alice.follow_rotations({**history, "rotations": [forged]})
    assert alice.provider_vkey == pinned and len(alice.key_eras) == 1
    assert alice.kept["incidents.jsonl"]
    svc.close()


def test_a_witness_follows_a_rotation_only_through_its_inclusion_under_the_old_key(tmp_path):
    from dprag.audit.protocol.ledger.errors import SignatureError
    from dprag.audit.protocol.ledger.witness import Witness, WitnessSigner

    svc = fx.open_service(tmp_path / "svc")
    genesis_key = svc.signer.verifier()
    with pytest.raises(Exception, match="state file"):
        Witness(WitnessSigner.generate("w"), svc.origin, genesis_key)  # no state file outside tests
    state = tmp_path / "witness.json"
    w = Witness(WitnessSigner.generate("w"), svc.origin, genesis_key, state=state)
    fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
    w.cosign(svc.checkpoint_note())
    seen = w.size
    pos = svc.rotate_key()
    bob = fx.client(svc, "bob")
    bob.ask(svc, "garden weather rain note")  # a leaf after the rotation: its checkpoint has the new key only
    head = svc.checkpoint_note()
    with pytest.raises(SignatureError):
        w.cosign(head, svc.ledger.consistency_proof(seen, svc.ledger.size).hashes)  # the new key: not followed yet
    proof = svc.key_history()["rotations"][0]
    from dprag.audit.protocol.provider_keys import witness_follow

    forged = dict(proof, leaf=encode({**json.loads(bytes.fromhex(proof["leaf"])), "sig": "00" * 64}).hex())
    with pytest.raises(SignatureError, match="does not follow"):
        witness_follow(w, forged, svc.ledger.consistency_proof(seen, pos + 1).hashes)
    witness_follow(w, proof, svc.ledger.consistency_proof(seen, pos + 1).hashes)
    assert w.log.vkey() == svc.signer.vkey()
    cosigned = w.cosign(head, svc.ledger.consistency_proof(pos + 1, svc.ledger.size).hashes)
    svc.add_cosignature(cosigned)
    restarted = Witness(w.signer, svc.origin, genesis_key, state=state)  # started with the genesis key again
    assert restarted.log.vkey() == svc.signer.vkey()
    svc.close()
