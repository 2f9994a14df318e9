"""Witness cosignatures (c2sp.org/tlog-cosignature cosignature/v1): the byte format re-derived from the spec
text with raw Ed25519, a stateful witness that refuses forks and rollbacks, and the verifier's
--witness / --min-witnesses."""

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from dprag.audit.cli import main as cli_main
from dprag.audit.protocol.ledger.errors import KeyFormatError, SignatureError
from dprag.audit.protocol.ledger.witness import Witness, WitnessSigner, WitnessVerifier
from dprag.audit.testing.window import client, open_service
from dprag.audit.verify import verify


def test_cosignature_bytes_follow_the_spec(tmp_path):
    svc = open_service(tmp_path / "s")
    note = svc.checkpoint_note()
    w = WitnessSigner.generate("witness.example.com/w1")
    out = w.cosign(note, 1679315147)
    assert out.startswith(note)
    line = out[len(note) :].decode()
    assert line.startswith("\u2014 witness.example.com/w1 ") and line.endswith("\n")
    raw = base64.b64decode(line.split(" ")[2])
    pub = w.verifier.public_key
    # key ID = SHA-256(name || "\n" || 0x04 || public key)[:4]; then u64be(timestamp); then the signature
    assert raw[:4] == hashlib.sha256(b"witness.example.com/w1\n\x04" + pub).digest()[:4]
    assert int.from_bytes(raw[4:12], "big") == 1679315147
    body = note[: note.index(b"\n\n") + 1]
    Ed25519PublicKey.from_public_bytes(pub).verify(raw[12:], b"cosignature/v1\ntime 1679315147\n" + body)
    assert WitnessVerifier.from_vkey(w.verifier.vkey) == w.verifier
    svc.close()


def test_witness_refuses_a_fork_and_a_rollback(tmp_path):
    a = open_service(tmp_path / "a")
    alice = client(a, "alice")
    alice.ask(a, "asthma one")
    wit = Witness(WitnessSigner.generate("w"), a.origin, a.signer.verifier(), ephemeral=True)
    wit.cosign(a.checkpoint_note())
    n1 = a.ledger.size
    alice.ask(a, "asthma two")
    proof = a.ledger.consistency_proof(n1, a.ledger.size).hashes
    wit.cosign(a.checkpoint_note(), proof)  # an append-only extension: cosigned
    # the provider rewrites its history after the first checkpoint (same key): a fork
    from dprag.audit.protocol.encoding import encode
    from dprag.audit.protocol.ledger import SqliteLog

    log = SqliteLog(tmp_path / "other.sqlite")
    for leaf in a.ledger.leaves(0, n1):
        log.append(leaf)
    log.append(encode({"type": "query", "forged": True}))
    log.append(encode({"type": "query", "forged": 2}))
    forged = log.checkpoint(a.signer, a.origin, size=log.size)
    with pytest.raises(SignatureError, match="not consistent"):
        wit.cosign(forged, log.consistency_proof(n1, log.size).hashes)
    with pytest.raises(SignatureError, match="rolls back"):
        wit.cosign(a.ledger.checkpoint(a.signer, a.origin, size=n1))
    a.close()


def test_rule_a_restarted_witness_does_not_cosign_a_fork(tmp_path):
    """v2: the stateful witness kept its last cosigned checkpoint in memory, so a restarted one cosigned a fork of
    what it had cosigned before. v3: its state file is written before a cosignature leaves, and read at start."""
    a = open_service(tmp_path / "a")
    alice = client(a, "alice")
    alice.ask(a, "asthma one")
    signer = WitnessSigner.generate("w")
    state = tmp_path / "witness-state.json"
    Witness(signer, a.origin, a.signer.verifier(), state=state).cosign(a.checkpoint_note())
    n1 = a.ledger.size
    from dprag.audit.protocol.encoding import encode
    from dprag.audit.protocol.ledger import SqliteLog

    log = SqliteLog(tmp_path / "other.sqlite")
    for leaf in a.ledger.leaves(0, n1 - 1):
        log.append(leaf)
    log.append(encode({"type": "query", "forged": True}))
    log.append(encode({"type": "query", "forged": 2}))
    forged = log.checkpoint(a.signer, a.origin, size=log.size)
    restarted = Witness(signer, a.origin, a.signer.verifier(), state=state)  # a new process, the same state
    assert restarted.size == n1
    with pytest.raises(SignatureError, match="not consistent"):
        restarted.cosign(forged, log.consistency_proof(n1, log.size).hashes)
    with pytest.raises(KeyFormatError, match="belongs to log"):
        Witness(signer, "another/log", a.signer.verifier(), state=state)
    a.close()


def test_verifier_requires_witness_cosignatures(tmp_path, capsys):
    svc = open_service(tmp_path / "s")
    client(svc, "alice").ask(svc, "asthma protocol")
    w1, w2, w3 = (WitnessSigner.generate(f"witness.example/w{i}") for i in (1, 2, 3))
    svc.add_cosignature(w2.cosign(w1.cosign(svc.checkpoint_note(), 1700000000), 1700000001))
    b = svc.export_bundle(tmp_path / "b")
    keys = {}
    for w in (w1, w2, w3):
        keys[w.name] = tmp_path / (w.name.split("/")[1] + ".vkey")
        keys[w.name].write_text(w.verifier.vkey)
    v = verify(b, witnesses=[keys["witness.example/w1"], keys["witness.example/w2"]], min_witnesses=2)
    assert v.verdict == "PASS" and v.checked["witness_cosignatures"] == 2
    v = verify(b, witnesses=[keys["witness.example/w1"], keys["witness.example/w3"]], min_witnesses=2)
    assert v.verdict == "FAIL" and any("fewer than --min-witnesses 2" in r for r in v.reasons)
    assert cli_main(["audit", "verify", str(b), "--witness", str(keys["witness.example/w3"])]) == 1
    assert (
        cli_main(["audit", "verify", str(b), "--witness", str(keys["witness.example/w1"]), "--min-witnesses", "2"]) == 2
    )
    assert "--min-witnesses" in capsys.readouterr().err
    svc.close()
