"""The provider's ``Signer`` (spec/provider.md §7): a key file of mode 0600 (refused otherwise, naming the path and
the rule), deterministic RFC 8032 Ed25519 (the RFC's own test vectors), a key kept out of the window's directory and
store, and no signature made while a store transaction is open."""

from __future__ import annotations

import os

import pytest

from dprag.audit.client.account import AccountClient
from dprag.audit.protocol.errors import ServiceStateError
from dprag.audit.protocol.ledger import NoteSigner, Signer
from dprag.audit.protocol.signer import ExternalSigner, SignerError
from dprag.audit.provider import service as service_module
from dprag.audit.provider.signers import FileSigner, load_signer, write_key_file
from dprag.audit.testing.toy import HashEmbedder, make_toy_directory, open_toy_directory
from dprag.errors import InvalidParameterError
from tests.support.rfc8032 import RFC8032


def _key_file(tmp_path, seed_hex: str, name: str = "dprag-test", mode: int = 0o600):
    path = write_key_file(tmp_path / f"{name}-{seed_hex[:8]}.key", NoteSigner(name, bytes.fromhex(seed_hex)))
    os.chmod(path, mode)
    return path


@pytest.mark.parametrize(("seed", "public", "message", "signature"), RFC8032)
def test_the_file_signer_signs_the_rfc_8032_vectors(tmp_path, seed, public, message, signature):
    s = FileSigner(_key_file(tmp_path, seed))
    assert isinstance(s, Signer)
    assert s.public_key.hex() == public
    assert s.sign(bytes.fromhex(message)).hex() == signature
    assert s.sign(bytes.fromhex(message)) == s.sign(bytes.fromhex(message))  # deterministic


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o602])
def test_a_key_file_readable_or_writable_by_others_is_refused_naming_path_and_rule(tmp_path, mode):
    path = _key_file(tmp_path, RFC8032[0][0], mode=mode)
    with pytest.raises(InvalidParameterError) as e:
        FileSigner(path)
    assert e.value.field == "signer" and str(path) in str(e.value) and "must be mode 0600" in str(e.value)
    assert f"{mode:04o}" in str(e.value)


def test_a_symlinked_key_file_is_refused_even_to_a_0600_file(tmp_path):
    target = _key_file(tmp_path, RFC8032[0][0])
    link = tmp_path / "link.key"
    link.symlink_to(target)
    with pytest.raises(InvalidParameterError) as e:
        load_signer(f"file:{link}")
    assert str(link) in str(e.value) and "symbolic link" in str(e.value)
    assert FileSigner(target).public_key.hex() == RFC8032[0][1]  # the file itself is fine (0600)
    os.chmod(target, 0o400)
    assert FileSigner(target).public_key.hex() == RFC8032[0][1]  # stricter than 0600 is fine too


def test_bad_signer_specs_are_refused_naming_the_rule(tmp_path):
    (tmp_path / "junk.key").write_text("not a key\n")
    os.chmod(tmp_path / "junk.key", 0o600)
    for spec, words in [
        ("vault:secret/provider", "file:PATH or a pkcs11: URI"),
        (f"file:{tmp_path / 'missing.key'}", "no such key file"),
        (f"file:{tmp_path / 'junk.key'}", "not a note signer key"),
        ("pkcs11:token=dprag?module-path=/nowhere.so", "needs object="),
        ("pkcs11:token=dprag;object=k", "needs module-path="),
    ]:
        with pytest.raises(InvalidParameterError) as e:
            load_signer(spec, environ={})
        assert e.value.field == "signer" and words in str(e.value), (spec, str(e.value))
    with pytest.raises(InvalidParameterError, match="needs a PIN"):
        load_signer("pkcs11:token=dprag;object=k?module-path=/nowhere.so", environ={})
    with pytest.raises(InvalidParameterError, match="already exists"):
        write_key_file(tmp_path / "junk.key", NoteSigner.generate("x"))


def test_an_external_signer_that_is_not_rfc_8032_fails_loudly():
    key = NoteSigner("dprag-test", bytes.fromhex(RFC8032[0][0]))
    other = NoteSigner("dprag-test", bytes.fromhex(RFC8032[1][0]))
    good = ExternalSigner(key.name, key.public_key, key.sign)
    assert good.sign(b"abc") == key.sign(b"abc") and good.vkey() == key.vkey()
    wrong_key = ExternalSigner(key.name, key.public_key, other.sign)
    with pytest.raises(SignerError, match="not RFC 8032 Ed25519"):
        wrong_key.sign(b"abc")
    with pytest.raises(SignerError, match="could not sign"):
        ExternalSigner(key.name, key.public_key, lambda m: (_ for _ in ()).throw(OSError("token removed"))).sign(b"a")


class Watching:
    """A signer that records, at each signature, whether any store of the test had a transaction open."""

    def __init__(self, key: NoteSigner, stores: list):
        self.key, self.stores, self.calls = key, stores, []
        self.name, self.key_hash, self.public_key = key.name, key.key_hash, key.public_key

    def vkey(self):
        return self.key.vkey()

    def verifier(self):
        return self.key.verifier()

    def sign(self, message: bytes) -> bytes:
        self.calls.append(any(s.in_transaction for s in self.stores))
        return self.key.sign(message)


def test_no_signature_is_made_while_a_store_transaction_is_open(tmp_path, monkeypatch, store_url):
    stores: list = []
    real = service_module.create_store
    monkeypatch.setattr(service_module, "create_store", lambda *a, **k: stores.append(real(*a, **k)) or stores[-1])
    first = Watching(NoteSigner.generate("dprag-first"), stores)
    svc = make_toy_directory(tmp_path / "toy", n=12, accounts=2, seed=b"\x07" * 32, signer=first, store=store_url)
    assert first.calls, "create() signs the genesis checkpoint"
    a = AccountClient.load(tmp_path / "toy" / "accounts" / "alice", embedder=HashEmbedder(32))
    for i in range(3):
        a.ask(svc, f"asthma protocol inhaler patient {i}")
    a.retry(svc, a.counter)  # a stored answer, served again
    ahead = AccountClient(
        a.account,
        a.window,
        a.key,
        provider_vkey=a.provider_vkey,
        origin=a.origin,
        embedder=HashEmbedder(32),
        embedding_scale=a.embedding_scale,
    )  # memory only
    ahead.counter = a.counter + 5
    with pytest.raises(InvalidParameterError, match="counter") as e:  # a refusal is signed too
        ahead.send(svc, ahead.request("asthma protocol inhaler, a counter ahead"))
    assert e.value.refusal is not None
    second = Watching(NoteSigner.generate("dprag-second"), stores)
    svc.rotate_key(second)
    a.ask(svc, "asthma protocol inhaler after the rotation")
    svc.checkpoint_now()
    assert len(first.calls) >= 6 and len(second.calls) >= 3
    assert not any(first.calls + second.calls), "a signature was made inside a store transaction"
    with svc.store.write(), pytest.raises(ServiceStateError, match="outside store transactions"):
        svc.signer_at(svc.ledger.size)
    svc.close()


def test_a_file_signer_keeps_the_key_out_of_the_directory_and_the_store(tmp_path):
    key_path = _key_file(tmp_path, os.urandom(32).hex(), name="dprag-file")
    signer = FileSigner(key_path)
    d = tmp_path / "toy"
    svc = make_toy_directory(d, n=12, accounts=2, seed=b"\x08" * 32, signer=signer)
    a = AccountClient.load(d / "accounts" / "alice", embedder=HashEmbedder(32))
    a.ask(svc, "asthma protocol inhaler patient")
    assert not (d / "service" / "secret" / "provider.skey").exists()
    with svc.store.snapshot() as s:
        paths = [r[0] for r in s.execute("SELECT path FROM window_file")]
    assert paths and not [p for p in paths if "provider" in p and p.startswith("secret/")]
    for p in (d / "service").rglob("*"):
        assert not (p.is_file() and signer.skey().encode() in p.read_bytes()), f"{p} holds the key"
    svc.close()
    with pytest.raises(InvalidParameterError) as e:
        open_toy_directory(d)
    assert e.value.field == "signer" and "--signer" in str(e.value)
    with pytest.raises(ServiceStateError, match="not held by this replica"):
        open_toy_directory(d, signer=FileSigner(_key_file(tmp_path, os.urandom(32).hex(), name="dprag-other")))
    svc = open_toy_directory(d, signer=load_signer(f"file:{key_path}"))
    a.ask(svc, "asthma protocol inhaler patient again")  # the receipt verifies under the pinned key
    # a rotation to another file signer: its key stays out of the store too, the old one is kept by this process
    new_path = _key_file(tmp_path, os.urandom(32).hex(), name="dprag-file")
    svc.rotate_key(FileSigner(new_path))
    a.ask(svc, "asthma protocol inhaler patient after the rotation")
    with svc.store.snapshot() as s:
        paths = [r[0] for r in s.execute("SELECT path FROM window_file")]
    assert not [p for p in paths if "provider" in p and p.startswith("secret/")]
    svc.close()


def test_the_cli_takes_the_signer_and_refuses_without_it(tmp_path, capsys):
    from dprag.audit.cli import main
    from dprag.audit.protocol.request import AccountKey

    key_path = _key_file(tmp_path, os.urandom(32).hex(), name="dprag-cli")
    d = tmp_path / "toy"
    make_toy_directory(d, n=12, accounts=2, seed=b"\x0b" * 32, signer=FileSigner(key_path)).close()
    add = ["provider", "account", "add", "--dir", str(d), "--toy", "erin", "--tenant", "clinic"]
    assert main([*add, "--key", AccountKey.generate().vkey]) == 2
    err = capsys.readouterr().err
    assert "--signer" in err and len(err.strip().splitlines()) == 1
    assert main([*add, "--key", AccountKey.generate().vkey, "--signer", f"file:{key_path}"]) == 0
    capsys.readouterr()
    new_path = _key_file(tmp_path, os.urandom(32).hex(), name="dprag-cli", mode=0o644)
    rotate = ["provider", "rotate-key", "--dir", str(d), "--toy", "--signer", f"file:{key_path}"]
    assert main([*rotate, "--new-signer", f"file:{new_path}"]) == 2  # 0644: refused, nothing appended
    err = capsys.readouterr().err
    assert str(new_path) in err and "0600" in err
    os.chmod(new_path, 0o600)
    assert main([*rotate, "--new-signer", f"file:{new_path}"]) == 0
    out = capsys.readouterr().out
    assert FileSigner(new_path).vkey() in out
    # the log now signs with the new key: a process holding only the old one is refused, one with both serves
    frank = ["provider", "account", "add", "--dir", str(d), "--toy", "frank", "--tenant", "clinic"]
    assert main([*frank, "--key", AccountKey.generate().vkey, "--signer", f"file:{key_path}"]) == 2
    assert "not held by this replica" in capsys.readouterr().err
    svc = open_toy_directory(d, signer=[FileSigner(new_path), FileSigner(key_path)])
    assert svc.signer.vkey() == FileSigner(new_path).vkey()
    svc.close()
