"""The PKCS#11 signer against SoftHSM2, offline (spec/provider.md §7): the token signs the RFC 8032 vectors and,
for the same key, exactly the bytes the file signer signs (replicas write identical notes whichever backend holds
the key); a window served with the key in the token verifies PASS. Integration tier: it runs ``softhsm2-util``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from dprag.audit.client.account import AccountClient
from dprag.audit.protocol.ledger import Checkpoint, NoteSigner, sign_checkpoint
from dprag.audit.protocol.receipts import refusal_body, sign_refusal
from dprag.audit.provider.signers import FileSigner, Pkcs11Signer, load_signer, pkcs11_import_key, write_key_file
from dprag.audit.testing.toy import HashEmbedder, make_toy_directory
from dprag.audit.verify import verify
from dprag.errors import InvalidParameterError
from tests.support.rfc8032 import RFC8032

pytestmark = pytest.mark.integration
pkcs11 = pytest.importorskip("pkcs11", reason="python-pkcs11 is not installed (pip install 'dprag[pkcs11]')")

MODULES = ["/usr/lib/softhsm/libsofthsm2.so", "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
           "/usr/local/lib/softhsm/libsofthsm2.so"]  # fmt: skip
MODULE = next((m for m in MODULES if Path(m).is_file()), None)
UTIL = shutil.which("softhsm2-util")
PIN = "4321"


@pytest.fixture(scope="module")
def token(tmp_path_factory):
    """A SoftHSM2 token labelled ``dprag`` in a directory of this module. SoftHSM2 reads its configuration once per
    process (at C_Initialize), so the module shares one token; each test imports keys of its own labels."""
    if MODULE is None or UTIL is None:
        pytest.skip(f"the softhsm2 library is absent (none of {MODULES}; Debian: apt-get install softhsm2)")
    d = tmp_path_factory.mktemp("softhsm")
    (d / "tokens").mkdir()
    conf = d / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {d / 'tokens'}\nobjectstore.backend = file\nlog.level = ERROR\n")
    os.environ["SOFTHSM2_CONF"] = str(conf)  # before this process first loads the library
    subprocess.run(
        [UTIL, "--init-token", "--free", "--label", "dprag", "--pin", PIN, "--so-pin", "8765"],
        check=True,
        capture_output=True,
    )
    return MODULE


def _uri(module: str, label: str, **extra: str) -> str:
    q = "&".join([f"module-path={module}", *(f"{k}={v}" for k, v in extra.items())])
    return f"pkcs11:token=dprag;object={label}?{q}"


def test_the_token_signs_the_rfc_8032_vectors_and_exactly_what_the_file_signer_signs(token, tmp_path):
    for i, (seed, public, message, signature) in enumerate(RFC8032):
        key = NoteSigner("dprag-hsm", bytes.fromhex(seed))
        pkcs11_import_key(token, "dprag", PIN, f"rfc{i}", key)
        hsm = load_signer(_uri(token, f"rfc{i}", **{"x-key-name": "dprag-hsm"}), environ={"DPRAG_PKCS11_PIN": PIN})
        assert isinstance(hsm, Pkcs11Signer)
        assert hsm.public_key.hex() == public and hsm.vkey() == key.vkey()
        assert hsm.sign(bytes.fromhex(message)).hex() == signature
        path = write_key_file(tmp_path / f"rfc{i}.key", key)
        file = FileSigner(path)
        # the protocol's own signatures: a checkpoint note, a refusal, arbitrary bytes; byte for byte equal
        note = Checkpoint("dprag/" + "ab" * 32, 7 + i, bytes(range(32)), ())
        assert sign_checkpoint(note, hsm) == sign_checkpoint(note, file)
        body = refusal_body(
            origin="dprag/x", h_req="00" * 32, field="counter", rule="r", code="request", size=3, root="11" * 32
        )
        assert sign_refusal(body, hsm) == sign_refusal(body, file)
        for m in (b"", b"\x00" * 1000, os.urandom(333)):
            assert hsm.sign(m) == file.sign(m) == hsm.sign(m)
        hsm.close()
    print("softhsm2: RFC 8032 TESTs 1-3 signed by the token as the RFC gives them; token == file signer")


def test_a_window_signed_by_the_token_serves_and_verifies(token, tmp_path):
    """The token's key signs genesis, every receipt and checkpoint; the auditor's verdict is PASS."""
    key = NoteSigner.generate("dprag-hsm")
    pkcs11_import_key(token, "dprag", PIN, "provider", key)
    (tmp_path / "pin").write_text(PIN + "\n")
    hsm = load_signer(_uri(token, "provider", **{"pin-source": f"file:{tmp_path / 'pin'}", "x-key-name": "dprag-hsm"}))
    d = tmp_path / "toy"
    svc = make_toy_directory(d, n=12, accounts=2, seed=b"\x0a" * 32, signer=hsm)
    assert not (d / "service" / "secret" / "provider.skey").exists()
    a = AccountClient.load(d / "accounts" / "alice", embedder=HashEmbedder(32))
    for i in range(3):
        a.ask(svc, f"asthma protocol inhaler patient {i}")
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    hsm.close()
    (tmp_path / "provider.vkey").write_text(key.vkey())
    v = verify(bundle, key=tmp_path / "provider.vkey", max_epsilon=1000)
    assert v.verdict == "PASS", v.reasons


def test_a_wrong_pin_or_label_is_refused_naming_the_signer(token):
    """Nothing of the token is logged in here (the tests above closed their sessions)."""
    pkcs11_import_key(token, "dprag", PIN, "provider-2", NoteSigner.generate("dprag-hsm"))
    with pytest.raises(InvalidParameterError) as e:
        load_signer(_uri(token, "provider-2", **{"pin-value": "0000"}))
    assert e.value.field == "signer" and "token 'dprag'" in str(e.value)
    with pytest.raises(InvalidParameterError, match="key 'nothere'"):
        load_signer(_uri(token, "nothere", **{"pin-value": PIN}))
