"""``dprag provider``: the lifecycle from the command line (issue "Operations", item 3) — each command appends the
protocol's leaf through the service, refuses what the library refuses (exit 2, one line, nothing appended), and the
log it leaves verifies PASS with every leaf accounted for."""

from __future__ import annotations

import json

from dprag.audit.cli import main
from dprag.audit.protocol.encoding import encode
from dprag.audit.protocol.request import AccountKey
from dprag.audit.testing.toy import SERVE_TOY, make_toy_directory, open_toy_directory, toy_policy
from dprag.audit.verify import verify


def _cli(capsys, *args: str) -> tuple[int, dict | None, str]:
    capsys.readouterr()
    rc = main(["provider", *args])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if rc == 0 else None), out.err


def test_the_lifecycle_from_the_command_line(tmp_path, capsys):
    d = tmp_path / "toy"
    svc = make_toy_directory(d, n=12, accounts=2, seed=b"\x09" * 32)
    first_key = svc.signer.vkey()
    size = svc.ledger.size
    svc.close()
    toy = ["--dir", str(d), "--toy"]
    dave = AccountKey.generate()
    rc, out, _ = _cli(capsys, "account", "add", *toy, "dave", "--tenant", "clinic", "--key", dave.vkey)
    assert rc == 0 and out == {"account": "dave", "leaf": size}
    rc, _, err = _cli(
        capsys, "account", "add", *toy, "erin", "--tenant", "nowhere", "--key", AccountKey.generate().vkey
    )
    assert rc == 2 and "tenant" in err and len(err.strip().splitlines()) == 1
    docs = tmp_path / "docs.json"
    docs.write_text(json.dumps({"new-1": "patient 99 asthma protocol inhaler drug ANSWER: newdrug"}))
    rc, out, _ = _cli(capsys, "add-documents", *toy, "--tenant", "clinic", str(docs))
    assert rc == 0 and out == {"added": 1, "leaf": size + 1}
    rc, _, err = _cli(capsys, "add-documents", *toy, "--tenant", "clinic", str(docs))  # the same text again
    assert rc == 2 and ("same text" in err or "already in the corpus" in err)
    pol = tmp_path / "policy.json"
    pol.write_bytes(encode(toy_policy(**{**SERVE_TOY, "n": 12}).to_dict()))
    rc, _, err = _cli(capsys, "set-policy", *toy, str(pol))  # the toy policy certifies ε = 402: weak
    assert rc == 2 and "weak guarantee" in err and "allow_weak" in err
    rc, out, _ = _cli(capsys, "set-policy", *toy, "--allow-weak", str(pol))
    assert rc == 0 and out == {"epoch": 1, "leaf": size + 2}
    rc, out, _ = _cli(capsys, "rotate-key", *toy)
    assert rc == 0 and out["leaf"] == size + 3 and out["provider_key"] != first_key
    assert (d / "provider.vkey").read_text().strip() == out["provider_key"]
    rc, out, _ = _cli(capsys, "account", "revoke", *toy, "dave")
    assert rc == 0 and out == {"account": "dave", "leaf": size + 4}
    rc, _, err = _cli(capsys, "account", "revoke", *toy, "dave")  # a revoked name stays revoked
    assert rc == 2 and "account-revoke" in err
    svc = open_toy_directory(d)
    assert svc.ledger.size == size + 5 and svc.signer.vkey() == out_key(d)
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    (tmp_path / "first.vkey").write_text(first_key)
    v = verify(bundle, key=tmp_path / "first.vkey", max_epsilon=1000)
    assert v.verdict == "PASS", v.reasons
    assert v.checked["key_rotations"] == 1 and v.checked["epochs"] == 1, v.checked
    assert len(v.history["key_rotations"]) == 1
    rc, _, err = _cli(capsys, "rotate-key", "--dir", str(tmp_path / "nothing"), "--toy")
    assert rc == 2 and "holds no toy service" in err


def out_key(d) -> str:
    return (d / "provider.vkey").read_text().strip()
