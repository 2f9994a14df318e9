"""One log over one corpus (spec/protocol.md §3.2–§3.5): the issue's matrix of what must PASS and what must FAIL,
each as the party that would try it.

The honest log: three epochs, an account and a document added, the provider key rotated, ε_q changed with M·ε_q
kept. Against it: a rollback before an epoch boundary, a truncated bundle, a re-keyed account and a copied document
each FAIL; an honest provider audited mid-epoch, handed receipts from after a later rotation, PASSes with the
consistency proofs and the rotation the account followed, and is INCOMPLETE without the proofs; the framing
sequence PASSes."""

from __future__ import annotations

import json
import shutil

import pytest

from dprag.audit.protocol import commitments as cm
from dprag.audit.protocol.encoding import encode
from dprag.audit.protocol.errors import RequestError
from dprag.audit.protocol.ledger import NoteSigner
from dprag.audit.protocol.request import AccountKey
from dprag.audit.testing import window as fx
from dprag.audit.verify import verify
from dprag.errors import InvalidParameterError

pytestmark = pytest.mark.usefixtures("serial_verify")


@pytest.fixture
def serial_verify(monkeypatch):
    monkeypatch.setenv("DPRAG_VERIFY_WORKERS", "1")


def _kw(eps_q: float, m: int) -> dict:
    """Answer-level voting, seen selection, δ_q = 1e-6; the filter's limit L = m·eps_q = 1 nat in every epoch."""
    return dict(
        n=18, mechanism="answer-vote", vote_selection="seen", vote_delta=1e-6, max_queries_per_doc=m, vote_epsilon=eps_q
    )


def _write(path, clients) -> str:
    lines = []
    for c in clients:
        p = c.export_receipts(path.with_name(f"{c.account}-{path.name}"))
        lines += [x for x in p.read_bytes().splitlines() if x]
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    return str(path)


NEW_DOC = {"n-1": "asthma inhaler spacer technique note"}


def _honest_log(d):
    """The honest log of three epochs; returns the service (open), its clients, and the first key."""
    svc = fx.open_service(d / "svc", **_kw(1 / 16, 16))
    clients = {a: fx.client(svc, a) for a in fx.ACCOUNTS}
    first_key = svc.signer.vkey()
    for a, c in clients.items():
        c.ask(svc, f"asthma protocol inhaler patient {a}")
    dave = fx.account_key("dave")
    svc.add_account("dave", "clinic", dave.vkey)
    clients["dave"] = fx.client(svc, "dave")
    svc.add_documents("clinic", NEW_DOC)
    svc.rotate_key(NoteSigner.generate("dprag-w1-2"))
    svc.set_policy(fx.toy_policy(**_kw(0.5, 2)), allow_weak=True)
    for a, c in clients.items():
        c.ask(svc, f"garden weather rain note {a}")
    svc.set_policy(fx.toy_policy(**_kw(1.0, 1)), allow_weak=True)
    for a, c in clients.items():
        c.ask(svc, f"contract dispute court case {a}")
    return svc, clients, first_key


def test_the_honest_log_of_three_epochs_passes_with_a_delta_over_the_largest_m(tmp_path):
    svc, clients, first_key = _honest_log(tmp_path)
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    (tmp_path / "first.vkey").write_text(first_key)
    v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", clients.values()), key=tmp_path / "first.vkey")
    assert v.verdict == "PASS", v.reasons
    c = v.checked
    assert (c["epochs"], c["key_rotations"], c["registry_leaves"], c["documents_leaves"]) == (2, 1, 1, 1)
    assert c["receipts_accepted"] == c["queries"] == 3 + 4 + 4
    assert v.channels["generation"]["max_charges_per_doc"] == 16  # the largest M, not the last epoch's 1


def test_a_rollback_before_an_epoch_boundary_fails_on_the_receipts_it_erased(tmp_path):
    """The provider restores its state to a snapshot taken before alice's last answer of epoch 0 (the answer and
    its charge erased), then opens epoch 1 and serves on. alice's receipt names a root the log no longer has."""
    d = tmp_path
    svc = fx.open_service(d / "svc", **_kw(0.5, 2))
    alice, bob = fx.client(svc, "alice"), fx.client(svc, "bob")
    bob.ask(svc, "garden weather rain")
    svc.close()
    shutil.copytree(d / "svc", d / "snapshot")
    svc = fx.reopen_service(d / "svc")
    erased = alice.ask(svc, "asthma protocol inhaler patient")
    svc.close()
    shutil.rmtree(d / "svc")
    shutil.copytree(d / "snapshot", d / "svc")  # the rollback
    svc = fx.reopen_service(d / "svc")
    svc.set_policy(fx.toy_policy(**_kw(1.0, 1)), allow_weak=True)
    bob.ask(svc, "contract dispute court case")
    bundle = svc.export_bundle(d / "bundle")
    svc.close()
    v = verify(bundle, receipts=_write(d / "r.jsonl", [alice]))
    assert v.verdict == "FAIL", v.headline()
    size = erased.receipt["size"]
    assert any(f"its signed root is not the ledger's root at size {size}" in r for r in v.reasons), v.reasons


def test_a_truncated_bundle_fails_against_the_checkpoint_the_auditor_kept(tmp_path):
    """The auditor kept a checkpoint from an earlier audit; the provider hands it a bundle cut below it."""
    svc, clients, _ = _honest_log(tmp_path)
    kept = svc.checkpoint_note()  # the head the auditor saw
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    (tmp_path / "kept.note").write_bytes(kept)
    # the truncation: the provider re-cuts its log below the kept size (its own keys sign the shorter head)
    from dprag.audit.protocol.bundle import parse_leaves
    from dprag.audit.protocol.ledger import Checkpoint, sign_checkpoint
    from dprag.audit.protocol.ledger.rfc6962 import root_from_leaves

    leaves = parse_leaves((bundle / "public" / "leaves.bin").read_bytes())[:-2]
    (bundle / "public" / "leaves.bin").write_bytes(b"".join(len(x).to_bytes(4, "big") + x for x in leaves))
    lines = (bundle / "auditor" / "openings.jsonl").read_bytes().splitlines()
    ops = [x for x in lines if json.loads(x)["pos"] < len(leaves)]
    (bundle / "auditor" / "openings.jsonl").write_bytes(b"".join(x + b"\n" for x in ops))
    signer = NoteSigner.from_skey((tmp_path / "svc" / "secret" / "provider.skey").read_text())
    note = sign_checkpoint(Checkpoint(svc.origin, len(leaves), root_from_leaves(leaves), ()), signer)
    notes = (bundle / "public" / "checkpoints.txt").read_bytes().split(b"~~~\n")
    keep = [n for n in notes if n and int(n.split(b"\n")[1]) < len(leaves)]
    (bundle / "public" / "checkpoints.txt").write_bytes(b"~~~\n".join([*keep, note]))
    v = verify(bundle, trusted_checkpoint=tmp_path / "kept.note")
    assert v.verdict == "FAIL" and any("history was truncated" in r for r in v.reasons), v.reasons
    # every verified receipt is a trusted checkpoint for a later audit: the last one an account kept catches it too
    last = max((r for c in clients.values() for r in c.receipts), key=lambda r: r["receipt"]["size"])
    (tmp_path / "kept.receipt").write_bytes(encode({"receipt": last["receipt"]}))
    assert last["receipt"]["size"] > len(leaves)
    v = verify(bundle, trusted_checkpoint=tmp_path / "kept.receipt")
    assert v.verdict == "FAIL" and any("history was truncated" in r for r in v.reasons), v.reasons


def test_a_kept_receipt_is_a_trusted_checkpoint(tmp_path):
    """A receipt the auditor verified before (its size and root signed by the key valid there, for this origin)
    pins the log like a checkpoint: the honest log extends it (PASS, the size named); an edited receipt, or one the
    same key signed for another log, FAILs ledger naming why."""
    svc, clients, _ = _honest_log(tmp_path)
    receipt = clients["alice"].receipts[0]["receipt"]
    bundle = svc.export_bundle(tmp_path / "bundle")
    other = fx.open_service(
        tmp_path / "other",
        seed=b"\x06" * 32,
        signer=NoteSigner.from_skey((tmp_path / "svc" / "secret" / "provider.skey").read_text()),
    )
    foreign = fx.client(other, "alice").ask(other, "asthma protocol inhaler patient").receipt
    other.close()
    svc.close()
    kept = tmp_path / "kept.json"
    kept.write_bytes(encode({"receipt": receipt}))
    v = verify(bundle, trusted_checkpoint=kept)
    assert v.verdict == "PASS" and v.trusted_checkpoint == receipt["size"], v.reasons
    kept.write_bytes(encode({**receipt, "root": "00" * 32}))  # a bare receipt, edited: its signature breaks
    v = verify(bundle, trusted_checkpoint=kept)
    assert v.verdict == "FAIL" and any(r.startswith("ledger: trusted checkpoint (a receipt)") for r in v.reasons)
    kept.write_bytes(encode({"receipt": foreign}))
    v = verify(bundle, trusted_checkpoint=kept)
    assert v.verdict == "FAIL" and any("the trusted receipt names the log" in r for r in v.reasons), v.reasons


def test_a_re_keyed_account_and_a_copied_document_fail(tmp_path):
    """The provider refuses both itself; written around its own rules, the verifier FAILs each, naming the rule."""
    svc = fx.open_service(tmp_path / "svc")
    with pytest.raises(InvalidParameterError, match="already registered"):
        svc.add_account("alice", "clinic", AccountKey.generate().vkey)
    with pytest.raises(InvalidParameterError, match="same text"):
        svc.add_documents("clinic", {"copy": fx.CLINIC[3]})
    fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
    leaf = {"type": "account", "account": "alice", "tenant": "clinic", "key": AccountKey.generate().vkey}
    with svc.store.write():
        pos = svc.ledger.append(encode(leaf))
        svc.aud.put_state_leaf(pos, "account")
    svc.state_pos = pos
    svc.checkpoint_now()
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle)
    assert v.verdict == "FAIL" and any(f"leaf {pos}: a registry leaf breaks its rule" in r for r in v.reasons)
    # the copied document: genesis commits the copy's text hash under a new id (the provider's own bundle)
    svc = fx.open_service(tmp_path / "svc2")
    fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
    bundle = svc.export_bundle(tmp_path / "bundle2")
    svc.close()
    docs_path = bundle / "auditor" / "docs" / "clinic.json"
    docs = json.loads(docs_path.read_text())
    docs["text_sha256"][5] = docs["text_sha256"][3]  # the provider's own edit; C_docs re-derived below
    docs_path.write_bytes(encode(docs))
    g = json.loads((bundle / "public" / "genesis.json").read_text())
    salts = [bytes.fromhex(x) for x in docs["salts"]]
    hashes = [bytes.fromhex(x) for x in docs["text_sha256"]]
    for t in g["tenants"]:
        if t["tenant"] == "clinic":
            t["C_docs"] = cm.documents_commitment(salts, docs["ids"], hashes)
    v = verify(_resign_genesis(bundle, g, tmp_path / "svc2"))
    assert v.verdict == "FAIL" and any("one text, one budget" in r for r in v.reasons), v.reasons


def _resign_genesis(bundle, g, svc_dir):
    """The provider re-writes its genesis and re-signs its checkpoint (its own key)."""
    from dprag.audit.protocol.bundle import parse_leaves
    from dprag.audit.protocol.ledger import Checkpoint, sign_checkpoint
    from dprag.audit.protocol.ledger.rfc6962 import root_from_leaves

    leaves = parse_leaves((bundle / "public" / "leaves.bin").read_bytes())
    leaves[0] = encode(g)
    (bundle / "public" / "leaves.bin").write_bytes(b"".join(len(x).to_bytes(4, "big") + x for x in leaves))
    (bundle / "public" / "genesis.json").write_bytes(leaves[0])
    signer = NoteSigner.from_skey((svc_dir / "secret" / "provider.skey").read_text())
    origin = f"dprag/{g['window']}"
    note = sign_checkpoint(Checkpoint(origin, len(leaves), root_from_leaves(leaves), ()), signer)
    (bundle / "public" / "checkpoints.txt").write_bytes(note)
    return bundle


def test_an_honest_provider_audited_mid_epoch_with_receipts_after_a_later_rotation(tmp_path):
    """The auditor cut the bundle mid-epoch; the provider then rotated its key and served alice, whose client
    followed the rotation. With the consistency proof from the bundle's size to her receipt's and the rotation she
    followed: PASS, her receipt checked. Without the proof: INCOMPLETE naming both sizes, never a FAIL."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    alice.ask(svc, "asthma protocol inhaler patient")
    bundle = svc.export_bundle(tmp_path / "bundle")  # the audit's cut, mid-epoch
    from dprag.audit.protocol.bundle import parse_leaves

    n = len(parse_leaves((bundle / "public" / "leaves.bin").read_bytes()))
    svc.rotate_key(NoteSigner.generate("dprag-w1-2"))
    svc.set_policy(fx.toy_policy(), allow_weak=True)
    later = alice.ask(svc, "inhaler drug protocol")
    assert len(alice.key_eras) == 2 and later.receipt["size"] > n
    proof = svc.ledger.consistency_proof(n, later.receipt["size"])
    svc.close()
    receipts = _write(tmp_path / "r.jsonl", [alice])
    v = verify(bundle, receipts=receipts)
    assert v.verdict == "INCOMPLETE" and not v.reasons and v.checked["rotations_followed"] == 1, v.reasons
    assert f"signed at size {later.receipt['size']}, beyond the bundle's size {n}" in v.headline()
    (bundle / "auditor" / "consistency.jsonl").write_bytes(encode(proof.to_json_dict()) + b"\n")
    v = verify(bundle, receipts=receipts)
    assert v.verdict == "PASS", v.reasons
    assert v.checked["receipts_newer_than_bundle"] == 1 and v.checked["receipts_accepted"] == 1
    # a rotation proof the old key never signed (a thief's key): not followed, and the later receipt is not evidence
    lines = [json.loads(x) for x in open(receipts, "rb").read().splitlines()]
    for x in lines:
        if "rotation" in x:
            leaf = json.loads(bytes.fromhex(x["rotation"]["leaf"]))
            x["rotation"]["leaf"] = encode({**leaf, "sig": "00" * 64}).hex()
    (tmp_path / "forged.jsonl").write_bytes(b"".join(encode(x) + b"\n" for x in lines))
    v = verify(bundle, receipts=str(tmp_path / "forged.jsonl"))
    assert "rotations_followed" not in v.checked and v.checked["receipts_accepted"] == 1, v.checked
    assert any("a key rotation that does not follow" in r for r in v.rejected_evidence), v.rejected_evidence
    assert any("does not name the key it is checked under" in r for r in v.rejected_evidence), v.rejected_evidence


def test_the_framing_sequence_passes_in_the_one_log(tmp_path):
    """counter 2 before counter 1 (a signed refusal), then 1, then the same counter-2 bytes, across an epoch
    boundary and a rotation: the refusal handed in cannot make the honest provider FAIL."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    r1 = alice.request("asthma protocol inhaler patient")
    r2 = alice.request("inhaler drug protocol")
    with pytest.raises(RequestError, match="must be the next counter 1") as exc:
        alice.send(svc, r2)
    assert exc.value.refusal is not None
    svc.rotate_key()
    svc.set_policy(fx.toy_policy(), allow_weak=True)
    alice.counter = 2  # the client keeps both signed requests: it resends them in order
    alice.send(svc, r1)
    alice.send(svc, r2)
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", [alice]))
    assert v.verdict == "PASS" and v.checked["refusals"] == 1 and v.checked["receipts_accepted"] == 2, v.reasons
