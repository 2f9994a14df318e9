"""The audit protocol end to end on the offline toy window: serve, export, verify (spec/protocol.md)."""

import json
import shutil

import numpy as np
import pytest

from dprag.accounting.errors import InvalidParameterError
from dprag.audit.cli import main as cli_main
from dprag.audit.encoding import decode, encode
from dprag.audit.fixtures import build_window, open_service, reopen_service, toy_policy
from dprag.audit.policy import Policy
from dprag.audit.service import RateLimitError
from dprag.audit.verifier import verify


@pytest.fixture(scope="module")
def window(tmp_path_factory):
    return build_window(tmp_path_factory.mktemp("w") / "win", rounds=4)


@pytest.mark.parametrize("algorithm", ["murag", "murag-ada"])
def test_honest_window_passes(tmp_path, algorithm):
    w = build_window(tmp_path / "w", algorithm=algorithm, rounds=3)
    v = verify(w.bundle, receipts=w.receipts)
    assert v.verdict == "PASS", v.reasons
    assert v.checked["receipts"] == 9 and v.checked["retrieval"] == 9 and v.checked["generation"] == 9
    ch = v.channels
    assert ch["relation"] == "replace-one"
    # composed ε is the sum of the two channels, each certified from the committed parameters
    assert v.epsilon == pytest.approx(ch["retrieval"]["epsilon"] + ch["generation"]["epsilon"])
    assert ch["generation"]["epsilon"] == pytest.approx(2 * ch["generation"]["epsilon_add_remove"])
    assert "Groth16" in v.attestation


def test_certified_retrieval_epsilon_is_above_the_paper_leading_term(window):
    # σ is calibrated exactly to (ε_acc, δ_acc) over n queries: the exact k-fold composition is then larger
    # than √k·ε_acc·(...) (002 eq. 5.2's leading term), which is not an upper bound.
    v = verify(window.bundle)
    r = v.channels["retrieval"]
    assert r["epsilon"] > r["paper_eq_5_2_leading"]


def test_sampled_mode_prints_guarantee(window):
    v = verify(window.bundle, mode="sampled", samples=3)
    assert v.verdict == "PASS" and v.checked["retrieval"] == 3
    assert "0.0297" in v.guarantee  # 1 - 0.99^3


def test_receipts_are_checked_against_the_ledger(window, tmp_path):
    lines = window.receipts.read_text().splitlines()
    bad = json.loads(lines[0])
    bad["receipt"]["h_q"] = "00" * 32  # the signature no longer verifies
    forged = json.loads(lines[1])
    forged["top"] = [0, 1, 2, 3, 4]  # citations the account did not receive
    p = tmp_path / "r.jsonl"
    p.write_text(encode(bad).decode() + "\n" + encode(forged).decode() + "\n" + lines[2] + "\n")
    v = verify(window.bundle, receipts=p)
    assert v.verdict == "FAIL"
    assert any(r.startswith("receipts: receipt 0") and "signature" in r for r in v.reasons)
    assert any(r.startswith("receipts: receipt 1") and "citations" in r for r in v.reasons)
    assert v.checked["receipts"] == 1


def test_rate_limit_refuses_without_recording(tmp_path):
    svc = open_service(tmp_path / "s", n=2)
    svc.query("alice", "asthma 1")
    svc.query("alice", "asthma 2")
    size = svc.ledger.size
    spent = svc.tenants["clinic"]["filter"].spent_units(np.arange(100)).sum()
    with pytest.raises(RateLimitError):
        svc.query("alice", "asthma 3")
    assert svc.ledger.size == size
    assert svc.tenants["clinic"]["filter"].spent_units(np.arange(100)).sum() == spent
    svc.close()


@pytest.mark.parametrize("account,question,field", [("mallory", "q", "account"), ("alice", "  ", "question"),
                                                     ("alice", "x" * 5000, "question")])
def test_bad_queries_are_refused_before_anything_is_recorded(tmp_path, account, question, field):
    svc = open_service(tmp_path / "s")
    size = svc.ledger.size
    with pytest.raises(InvalidParameterError, match=field):
        svc.query(account, question)
    assert svc.ledger.size == size
    svc.close()


def test_policy_refuses_delta_policy_not_above_k_max_delta_acc():
    p = toy_policy()
    d = p.to_dict()
    d["coalition"]["delta_policy"] = (5 * 1e-6).hex()  # = k_max · δ_acc
    with pytest.raises(InvalidParameterError, match="delta_policy"):
        Policy.from_dict(d).validate()


def test_policy_round_trip_is_canonical():
    p = toy_policy("murag-ada")
    assert Policy.from_dict(decode(encode(p.to_dict()))) == p


def test_filter_is_global_across_accounts(tmp_path):
    # M = 1: once alice's question charged the relevant documents, bob's identical question finds them spent
    svc = open_service(tmp_path / "s", max_queries_per_doc=1)
    a = svc.query("alice", "asthma protocol inhaler patient")
    b = svc.query("bob", "asthma protocol inhaler patient")
    assert a.answer == "zorvatin" and b.answer == "unknown"
    svc.close()


def test_reopen_resumes_and_still_passes(tmp_path):
    svc = open_service(tmp_path / "s")
    svc.query("alice", "asthma one")
    svc.close()
    svc = reopen_service(tmp_path / "s")
    svc.query("bob", "garden two")
    svc.export_bundle(tmp_path / "b")
    svc.close()
    assert verify(tmp_path / "b").verdict == "PASS"


def test_cli_verify_json_and_exit_codes(window, tmp_path, capsys):
    rc = cli_main(["audit", "verify", str(window.bundle), "--receipts", str(window.receipts), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["verdict"] == "PASS" and out["reasons"] == []
    for key in ("epsilon", "delta", "k_max", "channels", "attestation", "checked"):
        assert key in out
    bad = tmp_path / "bad"
    shutil.copytree(window.bundle, bad)
    (bad / "auditor" / "seed.hex").write_text("11" * 32)
    assert cli_main(["audit", "verify", str(bad)]) == 1
    assert "commitments" in capsys.readouterr().out
    assert cli_main(["audit", "verify", str(tmp_path / "missing")]) == 2
    assert "not a bundle" in capsys.readouterr().err


def test_cli_ledger_root_and_leaves(window, capsys):
    from dprag.audit.ledger.rfc6962 import root_from_leaves

    assert cli_main(["audit", "ledger", "leaves", str(window.bundle)]) == 0
    leaves = [bytes.fromhex(x) for x in capsys.readouterr().out.split()]
    assert cli_main(["audit", "ledger", "root", str(window.bundle), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"size": len(leaves), "root": root_from_leaves(leaves).hex()}
