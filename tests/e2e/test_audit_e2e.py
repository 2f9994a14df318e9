"""The audit protocol end to end on the offline toy window: serve, export, verify (spec/protocol.md)."""

import json
import shutil

import numpy as np
import pytest

from dprag.audit.cli import main as cli_main
from dprag.audit.protocol.encoding import decode, encode
from dprag.audit.protocol.errors import RateLimitError, RequestError
from dprag.audit.protocol.policy import Policy
from dprag.audit.protocol.request import AccountKey, Request, make_request
from dprag.audit.testing.window import account_key, build_window, client, open_service, reopen_service, toy_policy
from dprag.audit.verify import verify
from dprag.errors import BudgetExhaustedError, InvalidParameterError


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
    assert "no zero-knowledge proof" in v.attestation["retrieval"]
    assert v.checked["queries_with_account_confirmed_q"] == 9


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


def test_receipts_an_account_cannot_have_been_given_are_rejected_evidence(window, tmp_path):
    # an altered receipt (signature no longer verifies) and citations the account did not receive are the
    # account's claims, not the provider's signature: they are listed, and never fail an honest provider
    lines = window.receipts.read_text().splitlines()
    bad = json.loads(lines[0])
    bad["receipt"]["h_req"] = "00" * 32
    forged = json.loads(lines[0])
    forged["top"] = [0, 1, 2, 3, 4]
    p = tmp_path / "r.jsonl"
    p.write_text(encode(bad).decode() + "\n" + encode(forged).decode() + "\n" + lines[2] + "\n")
    v = verify(window.bundle, receipts=p)
    assert v.verdict == "PASS", v.reasons
    assert any(r.startswith("receipt 0") and "signature" in r for r in v.rejected_evidence)
    assert any(r.startswith("receipt 1") and "citations" in r for r in v.rejected_evidence)
    assert v.checked["receipts"] == 2


def test_a_provider_signed_receipt_that_contradicts_the_bundle_fails(window, tmp_path):
    # the provider signed a receipt for a leaf that the bundle it hands over does not hold
    from dprag.audit.protocol.ledger import NoteSigner
    from dprag.audit.protocol.receipts import sign_receipt

    skey = (window.directory / "svc" / "secret" / "provider.skey").read_text()
    entry = json.loads(window.receipts.read_text().splitlines()[0])
    body = {k: v for k, v in entry["receipt"].items() if k != "sig"}
    body["leaf_hash"] = "11" * 32
    p = tmp_path / "r.jsonl"
    p.write_text(encode({"receipt": sign_receipt(body, NoteSigner.from_skey(skey))}).decode() + "\n")
    v = verify(window.bundle, receipts=p)
    assert v.verdict == "FAIL" and v.epsilon is None and v.delta is None
    assert any(r.startswith("receipts: receipt 0") and "not the one it was signed for" in r for r in v.reasons)


def test_rate_limit_refuses_without_recording(tmp_path):
    svc = open_service(tmp_path / "s", n=2)
    alice = client(svc, "alice")
    alice.ask(svc, "asthma 1")
    alice.ask(svc, "asthma 2")
    size = svc.ledger.size
    spent = svc.tenants["clinic"].filter.spent_units(np.arange(100)).sum()
    with pytest.raises(RateLimitError) as e:
        alice.ask(svc, "asthma 3")
    assert isinstance(e.value, BudgetExhaustedError)
    assert svc.ledger.size == size
    assert svc.tenants["clinic"].filter.spent_units(np.arange(100)).sum() == spent
    svc.close()


def _request(svc, account, question, counter=1, key=None, window=None, qemb=None):
    key = key or account_key(account)
    return Request(
        make_request(
            key, window=window or svc.policy.window, account=account, counter=counter, question=question, qemb=qemb
        ),
        question,
        qemb,
    )


@pytest.mark.parametrize(
    "case,field",
    [
        ("unregistered", "request.account"),
        ("blank", "question"),
        ("long", "question"),
        ("forged_signature", "request"),
        ("other_window", "request.window"),
        ("gap", "request.counter"),
        ("wrong_question", "question"),
        ("wrong_qemb", "qemb"),
    ],
)
def test_bad_requests_are_refused_before_anything_is_recorded(tmp_path, case, field):
    svc = open_service(tmp_path / "s")
    size = svc.ledger.size
    if case == "unregistered":
        req = _request(svc, "mallory", "q", key=AccountKey.generate())
    elif case == "blank":
        req = _request(svc, "alice", "q")
        req.question = "  "
    elif case == "long":
        req = _request(svc, "alice", "x" * 5000)
    elif case == "forged_signature":
        req = _request(svc, "alice", "q", key=AccountKey.generate())  # a key that is not alice's registered key
    elif case == "other_window":
        req = _request(svc, "alice", "q", window="another")
    elif case == "gap":
        req = _request(svc, "alice", "q", counter=2)
    elif case == "wrong_question":
        req = _request(svc, "alice", "q")
        req.question = "another question"
    else:
        req = _request(svc, "alice", "q", qemb=b"\x00\x01" * 32)
        req.qemb = b"\x00\x02" * 32
    with pytest.raises(RequestError, match=field):
        svc.serve(req)
    assert svc.ledger.size == size
    assert svc.tenants["clinic"].filter.spent_units(np.arange(100)).sum() == 0
    svc.close()


def test_a_retry_of_the_same_request_returns_the_same_outputs(tmp_path):
    # the noise and the answer's randomness come from the committed seed and the signed request: a retry
    # (the same signed request) yields nothing fresh, and is neither recorded nor charged again
    svc = open_service(tmp_path / "s")
    alice = client(svc, "alice")
    req = alice.request("asthma protocol inhaler patient")
    first = svc.serve(req)
    size = svc.ledger.size
    spent = svc.tenants["clinic"].filter.spent_units(np.arange(100)).sum()
    again = svc.serve(req)
    assert again == first and svc.ledger.size == size
    assert svc.tenants["clinic"].filter.spent_units(np.arange(100)).sum() == spent
    # the same counter with another request is refused
    other = _request(svc, "alice", "garden weather", counter=1)
    with pytest.raises(RequestError, match="counter"):
        svc.serve(other)
    svc.close()


def test_noise_does_not_depend_on_the_ledger_position(tmp_path):
    # the same signed request served at position 1 in one window and after 5 other queries in a copy of the
    # window (same seed): the same citations; the provider has no position to grind
    from dprag.audit.provider.service import ProviderService
    from dprag.audit.testing.toy import HashEmbedder, ToyGenerator
    from dprag.audit.testing.window import CLINIC, LEGAL, registry

    def make(d):
        emb = HashEmbedder(32)
        return ProviderService.create(
            d,
            policy=toy_policy(),
            embedder=emb,
            seed=b"\x07" * 32,
            embedder_descriptor=emb.descriptor({"clinic": len(CLINIC), "legal": len(LEGAL)}),
            generator=ToyGenerator(),
            tenants={"clinic": CLINIC, "legal": LEGAL},
            accounts=registry({"alice": "clinic", "bob": "clinic"}),
            allow_weak=True,
        )

    a, b = make(tmp_path / "a"), make(tmp_path / "b")
    req = client(a, "alice").request("asthma protocol inhaler patient")
    bob = client(b, "bob")
    for i in range(5):
        bob.ask(b, f"garden weather {i}")
    ra, rb = a.serve(req), b.serve(req)
    assert ra.pos == 1 and rb.pos == 6
    assert ra.citations == rb.citations and ra.answer == rb.answer


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
    # (asserted on the charges: alice's answer itself is a DP release and may differ from "zorvatin")
    svc = open_service(tmp_path / "s", max_queries_per_doc=1)
    flt = svc.tenants["clinic"].filter
    client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
    after_alice = flt.spent_units(np.arange(100))[:, 0].copy()
    b = client(svc, "bob").ask(svc, "asthma protocol inhaler patient")
    assert (after_alice > 0).sum() >= 20  # the relevant records paid once ...
    assert np.array_equal(flt.spent_units(np.arange(100))[:, 0], after_alice)  # ... and cannot pay again
    ops = [json.loads(x) for _, x in svc.aud.openings(svc.ledger.size)]
    assert ops[0]["charge"]["charges"][0]["ids"] and ops[1]["charge"]["charges"][0]["ids"] == []
    assert b.answer == "unknown"  # bob's voters saw no document
    svc.close()


def test_reopen_resumes_and_still_passes(tmp_path):
    svc = open_service(tmp_path / "s")
    client(svc, "alice").ask(svc, "asthma one")
    svc.close()
    svc = reopen_service(tmp_path / "s")
    client(svc, "bob").ask(svc, "garden two")
    svc.export_bundle(tmp_path / "b")
    svc.close()
    assert verify(tmp_path / "b").verdict == "PASS"


def test_a_vacuous_guarantee_is_said_and_has_its_own_exit_code(tmp_path, capsys):
    """A policy whose certified δ is at least 1 (answer-vote's seen selection with a per-charge δ of 0.01 and M = 2:
    δ_gen = n·δ·(1 + e^{M·ε_q}) with ε_q = 4) certifies nothing: the verifier says PASS (vacuous), exit 5, grey on
    the page, never a green PASS; the certified δ itself is printed as it is (no clipping at 1)."""
    import math

    from dprag.audit.verify.html import render_html

    w = build_window(tmp_path / "w", rounds=1, mechanism="answer-vote", vote_selection="seen", vote_delta=0.01)
    v = verify(w.bundle, max_epsilon=1000)
    assert v.verdict == "PASS" and v.delta >= 2 * 0.01 * (1 + math.exp(2 * 4.0)) * 0.999, v.delta  # 59.6
    assert v.strength == "vacuous" and v.headline().startswith("PASS (vacuous) ")
    assert v.warnings()[0].startswith("the guarantee is vacuous: δ = ")
    page = render_html(v, public=False)
    assert 'class="banner vacuous"' in page and 'class="banner pass"' not in page
    assert cli_main(["audit", "verify", str(w.bundle), "--max-epsilon", "1000"]) == 5
    assert capsys.readouterr().out.startswith("PASS (vacuous) ")


def test_cli_verify_json_and_exit_codes(window, tmp_path, capsys):
    rc = cli_main(["audit", "verify", str(window.bundle), "--receipts", str(window.receipts), "--json"])
    out = json.loads(capsys.readouterr().out)
    # the toy policy certifies ε = 42.1 > the default --max-epsilon 10: a weak PASS, exit 4 (never FAIL's 1)
    assert rc == 4 and out["verdict"] == "PASS" and out["strength"] == "weak" and out["reasons"] == []
    from dprag.audit.testing.toy import CLINIC, LEGAL

    assert out["epsilon"] > 10 and out["max_documents"] == max(len(CLINIC), len(LEGAL)) and out["max_epsilon"] == 10
    assert any(w.startswith("the guarantee is weak: ε = 42.12 > --max-epsilon 10") for w in out["warnings"])
    args = ["audit", "verify", str(window.bundle), "--receipts", str(window.receipts), "--max-epsilon", "50"]
    assert cli_main([*args, "--json"]) == 0
    strong = json.loads(capsys.readouterr().out)
    assert strong["strength"] == "strong" and not any("guarantee is" in w for w in strong["warnings"])
    assert cli_main(args) == 0 and capsys.readouterr().out.startswith("PASS 42.")
    assert cli_main(args[:-2]) == 4 and capsys.readouterr().out.startswith("PASS (weak) 42.")
    assert cli_main([*args[:-2], "--max-epsilon", "0"]) == 2 and "--max-epsilon" in capsys.readouterr().err
    for key in (
        "epsilon",
        "delta",
        "k_max",
        "channels",
        "attestation",
        "checked",
        "schema",
        "rejected_evidence",
        "provider_key",
        "key_pinned",
        "trust",
    ):
        assert key in out
    assert out["schema"] == "dprag.verdict/3" and out["key_pinned"] is False
    bad = tmp_path / "bad"
    shutil.copytree(window.bundle, bad)
    (bad / "auditor" / "seed.hex").write_text("11" * 32)
    assert cli_main(["audit", "verify", str(bad)]) == 1
    assert "commitments" in capsys.readouterr().out
    assert cli_main(["audit", "verify", str(bad), "--json"]) == 1
    failed = json.loads(capsys.readouterr().out)
    assert failed["verdict"] == "FAIL" and failed["epsilon"] is None and failed["delta"] is None
    # a defect inside the bundle is FAIL (1), in every subcommand; only the auditor's own input is 2
    (bad / "public" / "leaves.bin").write_bytes(b"\x00\x00")
    assert cli_main(["audit", "verify", str(bad)]) == 1
    assert cli_main(["audit", "ledger", "root", str(bad)]) == 1
    capsys.readouterr()
    assert cli_main(["audit", "verify", str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert cli_main(["audit", "verify", str(window.bundle), "--samples", "3"]) == 2
    assert "--samples" in capsys.readouterr().err
    assert cli_main(["audit", "verify", str(window.bundle), "--receipts", str(tmp_path / "none.jsonl")]) == 2
    assert "--receipts" in capsys.readouterr().err


def test_receipts_of_several_accounts_in_several_files(window, tmp_path, capsys):
    """`--receipts` repeated: each account hands in its own file; the verifier reads them as one, every receipt
    counted once (a line in two files is a duplicate, rejected evidence, never a second piece of evidence)."""
    lines = window.receipts.read_text().splitlines()
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("\n".join(lines[:2]) + "\n")
    b.write_text("\n".join(lines[2:]))  # no final newline: the files are still read line by line
    v = verify(window.bundle, receipts=[a, b])
    assert v.verdict == "PASS" and v.checked["receipts_handed_in"] == len(lines), v.checked
    assert v.checked["receipts_accepted"] == len(lines)
    args = ["audit", "verify", "--max-epsilon", "50", str(window.bundle), "--receipts", str(a), "--receipts", str(b)]
    assert cli_main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checked"]["receipts_accepted"] == len(lines)
    v = verify(window.bundle, receipts=[a, a])
    assert v.checked["receipts_accepted"] == 2 and len(v.rejected_evidence) == 2, v.rejected_evidence


def test_pinned_key_and_trusted_checkpoint(window, tmp_path, capsys):
    key = tmp_path / "provider.vkey"
    key.write_text((window.bundle / "public" / "provider.vkey").read_text())
    cps = (window.bundle / "public" / "checkpoints.txt").read_bytes().split(b"~~~\n")
    cp = tmp_path / "seen.cp"
    cp.write_bytes(cps[3])
    v = verify(window.bundle, receipts=window.receipts, key=key, trusted_checkpoint=cp)
    assert v.verdict == "PASS" and v.key_pinned and v.trusted_checkpoint == 4
    assert cli_main(["audit", "verify", "--max-epsilon", "50", str(window.bundle), "--key", str(key)]) == 0
    assert "pinned by the auditor" in capsys.readouterr().out
    other = tmp_path / "other.vkey"
    from dprag.audit.protocol.ledger import NoteSigner

    other.write_text(NoteSigner.generate("dprag-w1").vkey())
    v = verify(window.bundle, key=other)
    assert v.verdict == "FAIL" and any(
        r.startswith("commitments: the provider key is not the pinned one") for r in v.reasons
    )


def test_empty_receipts_file_is_reported(window, tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_text("")
    v = verify(window.bundle, receipts=p)
    assert v.verdict == "PASS" and "the receipts file holds no receipt" in v.rejected_evidence


def _with_genesis_version(window, tmp_path, version, name):
    bad = tmp_path / name
    shutil.copytree(window.bundle, bad)
    leaves = (bad / "public" / "leaves.bin").read_bytes()
    g = json.loads(leaves[4 : 4 + int.from_bytes(leaves[:4], "big")])
    g["version"] = version
    raw = encode(g)
    rest = leaves[4 + int.from_bytes(leaves[:4], "big") :]
    (bad / "public" / "leaves.bin").write_bytes(len(raw).to_bytes(4, "big") + raw + rest)
    (bad / "public" / "genesis.json").write_bytes(raw)
    return bad


@pytest.mark.parametrize("version", [1, 2])
def test_rule_an_older_protocol_version_is_a_fail_not_unusable(window, tmp_path, capsys, version):
    # a provider downgrading its bundle to an older version must not turn FAIL into "unusable" (exit 2)
    bad = _with_genesis_version(window, tmp_path, version, f"v{version}")
    assert cli_main(["audit", "verify", str(bad)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL") and f"protocol version {version}: older versions are refused" in out


def test_rule_a_newer_protocol_version_is_exit_2_naming_the_version(window, tmp_path, capsys):
    bad = _with_genesis_version(window, tmp_path, 5, "v5")
    assert cli_main(["audit", "verify", str(bad)]) == 2
    assert "protocol version 5, newer than this verifier's 4" in capsys.readouterr().err


def test_rule_a_version_3_bundle_is_exit_2_naming_the_release_that_reads_it(window, tmp_path, capsys):
    """Version 3 (a chain of window logs, receipts signed at the head) is not read by a version-4 verifier: the
    auditor's problem (exit 2, one line naming the version and the release that reads it), not a verdict."""
    bad = _with_genesis_version(window, tmp_path, 3, "v3")
    assert cli_main(["audit", "verify", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "protocol version 3" in err and "dprag 0.3.0" in err and len(err.strip().splitlines()) == 1


def test_cli_ledger_root_and_leaves(window, capsys):
    from dprag.audit.protocol.ledger.rfc6962 import root_from_leaves

    assert cli_main(["audit", "ledger", "leaves", str(window.bundle)]) == 0
    leaves = [bytes.fromhex(x) for x in capsys.readouterr().out.split()]
    assert cli_main(["audit", "ledger", "root", str(window.bundle), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"schema": "dprag.ledger-root/1", "size": len(leaves), "root": root_from_leaves(leaves).hex()}


def test_answers_replay_from_the_seed_corpus_and_question(tmp_path, capsys):
    # accounts hand over their questions (they open h_q); the auditor replays every answer with the committed
    # corpus and the toy generator and compares the signed h_answer — honest: all match
    from dprag.audit.testing.window import CLINIC, LEGAL

    w = build_window(tmp_path / "w", rounds=2)
    p = tmp_path / "with_questions.jsonl"
    p.write_bytes(b"".join(encode(e) + b"\n" for c in w.clients.values() for e in c.receipts))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "clinic.json").write_text(json.dumps(CLINIC))
    (corpus / "legal.json").write_text(json.dumps(LEGAL))
    rc = cli_main(
        [
            "audit",
            "verify",
            str(w.bundle),
            "--receipts",
            str(p),
            "--corpus",
            str(corpus),
            "--replay-answers",
            "toy",
            "--json",
            "--max-epsilon",
            "50",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["checked"]["answers_replayed"] == 6 and out["checked"]["corpus"] == 2
    # a corpus that is not the committed one
    (corpus / "legal.json").write_text(json.dumps(LEGAL[:-1] + ["another memo"]))
    assert cli_main(["audit", "verify", str(w.bundle), "--corpus", str(corpus)]) == 1
    assert "not the committed one" in capsys.readouterr().out
    assert cli_main(["audit", "verify", str(w.bundle), "--replay-answers", "toy"]) == 2
    assert "--corpus" in capsys.readouterr().err


@pytest.mark.parametrize("algorithm", ["murag", "murag-ada"])
def test_answer_vote_window_passes_and_replays(tmp_path, algorithm):
    # answer-level voting (issue 13) as the committed mechanism: charges replayed like 000 Alg. 5's, the
    # generation ε is 2·M·ε_vote, and the answers replay from the seed
    from dprag.audit.testing.toy import ToyGenerator
    from dprag.audit.testing.window import CLINIC, LEGAL

    w = build_window(tmp_path / "w", algorithm=algorithm, rounds=2, mechanism="answer-vote")
    p = tmp_path / "r.jsonl"
    p.write_bytes(b"".join(encode(e) + b"\n" for c in w.clients.values() for e in c.receipts))
    v = verify(w.bundle, receipts=p, corpus={"clinic": CLINIC, "legal": LEGAL}, replay_generator=ToyGenerator())
    assert v.verdict == "PASS", v.reasons
    assert v.checked["answers_replayed"] == 6 and v.checked["generation"] == 6
    # replace-one: 2 · M · ε_q with M = 2 and ε_q = ε_vote (+ ε_thr = 1 for MuRAG-Ada); certified, never below
    exact = 2 * 2 * (4.0 + (0.0 if algorithm == "murag" else 1.0))
    assert exact <= v.channels["generation"]["epsilon"] <= exact * (1 + 1e-6)
