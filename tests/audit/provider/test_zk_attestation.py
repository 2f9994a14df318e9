"""Groth16 attestation of the retrieval channel for a small zk tenant (issue 11 in protocol v2): the AUDITOR runs
the (development) setup and hands the provider the proving key; the provider proves every zk-tenant query; the
verifier checks the proofs under the auditor's key with public inputs it recomputes (Z_idx from genesis, Q and
the citations from the openings, the noise from the seed). Tampering with a proof, a salt or the key fails."""

import dataclasses
import json
import shutil

import pytest

from dprag.audit.protocol import zk_attest
from dprag.audit.provider.service import ProviderService
from dprag.audit.testing.toy import HashEmbedder, ToyGenerator
from dprag.audit.testing.window import CLINIC, client, registry, toy_policy
from dprag.audit.verify import verify
from dprag.zk.formats import vk_to_json

ZK_DOCS = [f"trial {i} asthma inhaler dose ANSWER: zorvatin" for i in range(3)] + [
    f"memo {i} lunch soup" for i in range(5)
]


def _zk_service(d, seed: bytes):
    """A toy window with a zk tenant, and the proving key of the auditor's setup (development only) written beside
    its verification key ``d / "vk.json"``."""
    pol = toy_policy()
    pol = dataclasses.replace(
        pol, retrieval=dataclasses.replace(pol.retrieval, enabled_tenants=("clinic", "zk"), zk_tenants=("zk",))
    )
    emb = HashEmbedder(32)
    svc = ProviderService.create(
        d / "svc",
        policy=pol,
        embedder=emb,
        seed=seed,
        embedder_descriptor=emb.descriptor({"clinic": len(CLINIC), "zk": len(ZK_DOCS)}),
        generator=ToyGenerator(),
        tenants={"clinic": CLINIC, "zk": ZK_DOCS},
        accounts=registry({"alice": "clinic", "zara": "zk"}),
        allow_weak=True,
    )
    pk, vk = zk_attest.setup_for(svc.policy, len(ZK_DOCS), 32, svc.table.support_bound)
    (d / "vk.json").write_text(json.dumps(vk_to_json(vk)))
    return svc, pk


@pytest.fixture(scope="module")
def zk_window(tmp_path_factory):
    d = tmp_path_factory.mktemp("zk")
    svc, pk = _zk_service(d, b"\x09" * 32)  # the provider gets the proving key
    client(svc, "zara").ask(svc, "asthma inhaler dose trial")
    client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
    assert svc.attest(pk) == 1  # the zk tenant's one query
    b = svc.export_bundle(d / "bundle")
    svc.close()
    return d, b


def test_proofs_verify_under_the_auditors_key(zk_window):
    d, b = zk_window
    v = verify(b, zk_vkey=d / "vk.json")
    assert v.verdict == "PASS", v.reasons
    assert v.checked["zk_proofs"] == 1 and v.attestation["retrieval"].startswith("groth16 + replay")
    assert f"zk: N = {len(ZK_DOCS)} documents" in v.attestation["retrieval"]  # the tenant's committed size
    v = verify(b)  # without the auditor's key the proofs are not relied on, and the verdict says so
    assert v.verdict == "PASS" and v.attestation["retrieval"].startswith("replay only")


def test_tampered_proofs_and_foreign_keys_fail(zk_window, tmp_path):
    d, b = zk_window
    # v2: a proof record's `curve` could be any string (and any unknown field) and the bundle PASSed
    for what in ("salt", "proof", "missing", "curve", "extra-field"):
        bad = tmp_path / what
        shutil.copytree(b, bad)
        p = bad / "auditor" / "proofs.jsonl"
        rec = json.loads(p.read_text().splitlines()[0])
        if what == "salt":
            rec["salt_k"] = str(int(rec["salt_k"]) + 1)
        elif what == "proof":
            rec["proof"]["pi_a"], rec["proof"]["pi_c"] = rec["proof"]["pi_c"], rec["proof"]["pi_a"]
        elif what == "curve":
            rec["proof"]["curve"] = "not-a-curve"
        elif what == "extra-field":
            rec["proof"]["note"] = "unbound"
        p.write_text("" if what == "missing" else json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n")
        v = verify(bad, zk_vkey=d / "vk.json")
        assert v.verdict == "FAIL" and any(r.startswith("retrieval:") for r in v.reasons), (what, v.reasons)
    # a verification key of another setup (e.g. one the provider made for itself) does not accept the proofs
    from dprag.audit.protocol.policy import Policy

    pol = Policy.from_dict(json.loads((b / "auditor" / "policy.json").read_text())["policy"])
    from dprag.audit.protocol.retrieval import noise_table

    r = pol.retrieval
    _, other = zk_attest.setup_for(pol, len(ZK_DOCS), 32, noise_table(r.sigma, r.sampler.tail, 64).support_bound)
    (tmp_path / "other.json").write_text(json.dumps(vk_to_json(other)))
    v = verify(b, zk_vkey=tmp_path / "other.json")
    assert v.verdict == "FAIL"


@pytest.mark.integration  # a key and two Groth16 proofs (~1 CPU minute)
def test_a_batch_of_proofs_is_verified_at_once_and_a_bad_one_is_named(tmp_path):
    """The verifier checks a window's Groth16 proofs in one randomized batch (zk.verify.verify_batch); when the
    batch fails it verifies them one by one, so the FAIL names exactly the leaf whose proof is bad and counts the
    others."""
    svc, pk = _zk_service(tmp_path, b"\x0a" * 32)
    zara = client(svc, "zara")
    for q in ("asthma inhaler dose trial", "memo lunch soup"):
        zara.ask(svc, q)
    assert svc.attest(pk) == 2
    b = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(b, zk_vkey=tmp_path / "vk.json")
    assert v.verdict == "PASS" and v.checked["zk_proofs"] == 2, v.reasons
    p = b / "auditor" / "proofs.jsonl"
    recs = [json.loads(x) for x in p.read_text().splitlines()]
    recs[1]["proof"]["pi_a"], recs[1]["proof"]["pi_c"] = recs[1]["proof"]["pi_c"], recs[1]["proof"]["pi_a"]
    p.write_text("".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in recs))
    v = verify(b, zk_vkey=tmp_path / "vk.json")
    bad = [r for r in v.reasons if "Groth16 proof" in r]
    assert v.verdict == "FAIL" and bad == [
        f"retrieval: leaf {recs[1]['pos']}: the Groth16 proof of noise-then-select does not verify under the "
        "auditor's key"
    ], v.reasons
    assert v.checked["zk_proofs"] == 1
