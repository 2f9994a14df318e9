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
