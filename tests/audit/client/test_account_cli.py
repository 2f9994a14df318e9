"""``dprag account``: an account that lives outside the provider — a key of its own, signed requests sent as
JSON, the provider's responses checked against the pinned key before they are kept, receipts exported to
the auditor, whose verdict then counts them."""

import json

from dprag.audit.cli import main
from dprag.audit.protocol.request import Request
from dprag.audit.testing.window import open_service
from dprag.audit.verify import verify


def test_account_round_trip(tmp_path, capsys):
    svc = open_service(tmp_path / "svc")
    vk = tmp_path / "provider.vkey"
    vk.write_text(svc.signer.vkey())
    a = tmp_path / "dave"
    assert (
        main(
            ["account", "new", str(a), "--account", "dave", "--window", "w1", "--provider-key", str(vk), "--q-on-trust"]
        )
        == 0
    )
    dave_vkey = capsys.readouterr().out.strip()
    assert (a / "account.key").stat().st_mode & 0o077 == 0
    # the provider registered dave at genesis: a fresh window with him in the registry
    from dprag.audit.provider.service import ProviderService
    from dprag.audit.testing.toy import HashEmbedder, ToyGenerator
    from dprag.audit.testing.window import CLINIC, LEGAL, registry, toy_policy

    svc.close()
    emb = HashEmbedder(32)
    svc = ProviderService.create(
        tmp_path / "svc2",
        policy=toy_policy(),
        embedder=emb,
        embedder_descriptor=emb.descriptor({"clinic": len(CLINIC), "legal": len(LEGAL)}),
        generator=ToyGenerator(),
        tenants={"clinic": CLINIC, "legal": LEGAL},
        accounts={**registry({"alice": "clinic"}), "dave": ("clinic", dave_vkey)},
        allow_weak=True,
    )
    vk.write_text(svc.signer.vkey())
    cfg = json.loads((a / "config.json").read_text())
    cfg["provider_key"] = svc.signer.vkey()
    (a / "config.json").write_text(json.dumps(cfg))
    last_size = None
    for q in ("asthma protocol inhaler patient", "garden weather rain"):
        assert main(["account", "request", str(a), q]) == 0
        msg = json.loads(capsys.readouterr().out)
        served = svc.serve(Request.from_json(msg))
        resp = tmp_path / "resp.json"
        out = served.to_dict()
        if q != "asthma protocol inhaler patient":  # the provider proves the new checkpoint extends the last one
            out["consistency"] = svc.consistency(last_size, served.receipt["size"])
        last_size = served.receipt["size"]
        resp.write_text(json.dumps(out))
        assert main(["account", "check-receipt", str(a), str(resp)]) == 0
        assert "ACCEPTED" in capsys.readouterr().out
    # a later receipt without the proof that its checkpoint extends the last one is refused (the pending request
    # stays); the same response with the proof is accepted
    assert main(["account", "request", str(a), "inhaler drug protocol"]) == 0
    served = svc.serve(Request.from_json(json.loads(capsys.readouterr().out)))
    resp.write_text(json.dumps(served.to_dict()))
    assert main(["account", "check-receipt", str(a), str(resp)]) == 1
    assert "REJECTED" in (o := capsys.readouterr().out) and "consistent" in o, o
    resp.write_text(json.dumps({**served.to_dict(), "consistency": svc.consistency(last_size, served.receipt["size"])}))
    assert main(["account", "check-receipt", str(a), str(resp)]) == 0
    assert "ACCEPTED" in capsys.readouterr().out
    # a response whose receipt was altered (or signed by another key) is rejected and not kept
    assert main(["account", "request", str(a), "a third question"]) == 0
    served = svc.serve(Request.from_json(json.loads(capsys.readouterr().out)))
    bad = served.to_dict()
    bad["receipt"]["h_answer"] = "00" * 32
    resp.write_text(json.dumps(bad))
    assert main(["account", "check-receipt", str(a), str(resp)]) == 1
    assert "REJECTED" in capsys.readouterr().out
    out = tmp_path / "dave.jsonl"
    assert main(["account", "export-receipts", str(a), str(out)]) == 0
    assert len(out.read_text().splitlines()) == 3
    v = verify(svc.export_bundle(tmp_path / "b"), receipts=out)
    assert v.verdict == "PASS" and v.checked["receipts_accepted"] == 3
    assert main(["account", "request", str(tmp_path / "nobody"), "q"]) == 2
    svc.close()


def test_ask_sends_nothing_until_the_key_and_the_origin_are_pinned(tmp_path, capsys):
    """v3's CLI account asked with nothing pinned: the first ask was charged, then its receipt rejected. `account
    ask` now refuses (exit 2, one line naming what is missing and the command that pins it) before it signs
    anything; `account new --origin` pins the log's name beside the key, and refuses a malformed one."""
    svc = open_service(tmp_path / "svc")
    vk = tmp_path / "provider.vkey"
    vk.write_text(svc.signer.vkey())
    origin = svc.origin
    svc.close()
    a = tmp_path / "dave"
    bad = ["account", "new", str(tmp_path / "x"), "--account", "x", "--window", "w1", "--origin", "w1", "--q-on-trust"]
    assert main(bad) == 2
    assert "--origin w1" in capsys.readouterr().err and not (tmp_path / "x").exists()
    new = ["account", "new", str(a), "--account", "dave", "--window", "w1", "--q-on-trust"]
    assert main([*new, "--provider-key", str(vk)]) == 0
    capsys.readouterr()
    assert main(["account", "ask", str(a), "asthma", "--url", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert "origin is not pinned" in err and "--origin dprag/ID" in err and len(err.strip().splitlines()) == 1
    assert not (a / "sent").exists() and not (a / "counter").exists()  # nothing signed
    cfg = json.loads((a / "config.json").read_text())
    assert cfg["origin"] is None
    b = tmp_path / "erin"
    assert (
        main(
            [
                "account",
                "new",
                str(b),
                "--account",
                "erin",
                "--window",
                "w1",
                "--q-on-trust",
                "--origin",
                origin.removeprefix("dprag/"),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert json.loads((b / "config.json").read_text())["origin"] == origin
    assert main(["account", "ask", str(b), "asthma", "--url", "http://127.0.0.1:9"]) == 2
    assert "key is not pinned" in capsys.readouterr().err
