"""The void end to end through the CLI over HTTP (spec/protocol.md §5.1): `dprag account ask` resends the pending
request, keeps the provider's signed void and is answered on the next counter; `dprag account resend` names the void;
the auditor accepts the account's evidence, and no request is charged twice."""

from __future__ import annotations

import json

import pytest

from dprag.audit.cli import main
from dprag.audit.commands.account import account_client
from dprag.audit.protocol.request import AccountKey
from dprag.audit.provider.http.app import create_app
from dprag.audit.testing.toy import make_toy_directory
from dprag.audit.verify import verify
from tests.support.live import LiveServer

pytestmark = pytest.mark.integration


def _cli(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_account_ask_moves_on_after_a_void_and_the_audit_passes(tmp_path, capsys, monkeypatch):
    svc = make_toy_directory(tmp_path / "toy", n=12, accounts=2, seed=b"\x0d" * 32)
    alice = tmp_path / "toy" / "accounts" / "alice"
    with LiveServer(create_app(svc)) as url:
        rc, out, err = _cli(capsys, "account", "ask", str(alice), "asthma protocol inhaler patient", "--url", url)
        assert rc == 0, err
        with monkeypatch.context() as m:  # the generator fails after the charge: request 2 recorded, not answered
            m.setattr(svc, "_generate", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("down (test)")))
            rc, out, err = _cli(
                capsys, "account", "ask", str(alice), "inhaler drug protocol", "--url", url, "--attempts", "1"
            )
        assert rc == 1 and "pending" in err, err
        # the account re-keys (its own signature under its current key); its directory holds the new key
        c = account_client(alice)
        new = AccountKey.generate()
        svc.rotate_account_key(c.rotation_leaf(new))
        (alice / "account.key").write_text(new.to_hex())
        rc, out, err = _cli(capsys, "account", "ask", str(alice), "garden weather rain", "--url", url)
        assert rc == 0, err
        assert "VOIDED request 2" in err and json.loads(out)["pos"] >= 1
    rc, out, err = _cli(capsys, "account", "resend", str(alice), "2")
    assert rc == 1 and "VOIDED request 2" in err and out == ""
    counters = [json.loads(x)["receipt"]["counter"] for x in (alice / "receipts.jsonl").read_text().splitlines()]
    assert counters == [1, 3] and (alice / "counter").read_text().strip() == "3"
    leaves = [svc.ledger.leaf(p) for p in range(svc.ledger.size)]
    assert sum(b'"query"' in x for x in leaves) == 3  # one charge per request, none for the void or the resends
    rc, out, err = _cli(capsys, "account", "export-receipts", str(alice), str(tmp_path / "r.jsonl"))
    assert rc == 0, err
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle, receipts=tmp_path / "r.jsonl")
    assert v.verdict == "PASS" and v.checked["voids"] == 1 and v.checked["receipts_accepted"] == 2, v.reasons
