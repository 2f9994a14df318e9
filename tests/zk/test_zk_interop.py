"""zk interoperability with snarkjs 0.7.6, both ways (Node + npm needed; skipped, saying so, when they are absent).

snarkjs is installed at test time with ``npm install --prefix <repo>/.cache/snarkjs snarkjs@0.7.6`` (GPL-3.0: a test
oracle run as a separate process, never imported by dprag). The powers-of-tau file is a small development one
(power 8, one contribution with fixed entropy), cached in .cache/ptau.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from dprag.zk import formats as F
from dprag.zk.circuits import noise_then_select as nts
from dprag.zk.field import R
from dprag.zk.gadgets.bits import range_check
from dprag.zk.prove import prove
from dprag.zk.r1cs import ConstraintSystem
from dprag.zk.setup import setup
from dprag.zk.verify import verify

pytestmark = pytest.mark.integration  # starts servers or processes (CONTRIBUTING.md)

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"
SNARKJS_VERSION = "0.7.6"
PTAU_POWER = 8
NTS_BLIND = 0xB11D_1DC0_FFEE  # the noise-then-select index commitment's blinding scalar


@pytest.fixture(scope="module")
def snarkjs():
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip(f"snarkjs interop needs Node.js and npm on PATH (node: {node}, npm: {npm})")
    prefix = CACHE / "snarkjs"
    exe = prefix / "node_modules" / ".bin" / "snarkjs"
    pkg = prefix / "node_modules" / "snarkjs" / "package.json"
    if not exe.exists() or json.loads(pkg.read_text()).get("version") != SNARKJS_VERSION:
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), f"snarkjs@{SNARKJS_VERSION}"],
            check=True,
            capture_output=True,
            timeout=600,
        )
    return str(exe)


def _run(exe, *args, cwd, check=True):
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=check)


@pytest.fixture(scope="module")
def ptau(snarkjs):
    d = CACHE / "ptau"
    d.mkdir(parents=True, exist_ok=True)
    final = d / f"pot{PTAU_POWER}_final.ptau"
    if not final.exists():
        p0, p1 = d / f"pot{PTAU_POWER}_0.ptau", d / f"pot{PTAU_POWER}_1.ptau"
        _run(snarkjs, "powersoftau", "new", "bn128", str(PTAU_POWER), str(p0), cwd=d)
        _run(snarkjs, "powersoftau", "contribute", str(p0), str(p1), "--name=dprag-dev", "-e=dprag dev only", cwd=d)
        tmp = d / f"pot{PTAU_POWER}_final.tmp"
        _run(snarkjs, "powersoftau", "prepare", "phase2", str(p1), str(tmp), cwd=d)
        tmp.rename(final)
    return final


def _snarkjs_verify(exe, d: Path, vk="verification_key.json", pub="public.json", proof="proof.json") -> bool:
    res = _run(exe, "groth16", "verify", vk, pub, proof, cwd=d, check=False)
    out = res.stdout + res.stderr
    if res.returncode == 0 and "OK!" in out:
        return True
    assert "Invalid proof" in out or res.returncode != 0, out
    return False


def test_snarkjs_verifies_our_noise_then_select_proof(snarkjs, tmp_path):
    circ = nts.build(2, 1, 1)
    rng = random.Random(4)
    E = [[rng.randrange(-128, 128)] for _ in range(2)]
    Q = [rng.randrange(-128, 128)]
    z = [rng.randrange(-2048, 2048) for _ in range(2)]
    w = circ.witness(E, Q, z, 7, 8, blinding=NTS_BLIND)
    pk = setup(circ.r1cs)
    proof = prove(pk, w)
    pub = circ.public(w)
    assert pub == circ.expected_public(E, Q, z, 7, 8, blinding=NTS_BLIND)
    F.write_json(tmp_path / "verification_key.json", F.vk_to_json(pk.verifying_key()))
    F.write_json(tmp_path / "proof.json", F.proof_to_json(proof))
    F.write_json(tmp_path / "public.json", F.public_to_json(pub))
    assert _snarkjs_verify(snarkjs, tmp_path)
    bad = list(pub)
    bad[3] = (bad[3] + 1) % R  # another top-K commitment
    F.write_json(tmp_path / "public.json", F.public_to_json(bad))
    assert not _snarkjs_verify(snarkjs, tmp_path)
    # the same index under another blinding: snarkjs rejects the proof too
    bad = [nts.index_commitment(E, NTS_BLIND + 1, circ.params.value_bits), *pub[1:]]
    F.write_json(tmp_path / "public.json", F.public_to_json(bad))
    assert not _snarkjs_verify(snarkjs, tmp_path)
    # our .r1cs and .wtns are what circom would write: snarkjs checks the witness against the constraints
    F.write_r1cs(tmp_path / "c.r1cs", circ.r1cs)
    F.write_wtns(tmp_path / "c.wtns", w)
    res = _run(snarkjs, "wtns", "check", "c.r1cs", "c.wtns", cwd=tmp_path, check=False)
    assert "WITNESS IS CORRECT" in res.stdout + res.stderr

    # the other way: snarkjs proves the circuit from our .wtns with our key written as a .zkey; its public.json
    # carries the blinded index commitment, and both verifiers accept its proof for that Z_idx only
    F.write_zkey(tmp_path / "dev.zkey", pk)
    _run(snarkjs, "groth16", "prove", "dev.zkey", "c.wtns", "sj_proof.json", "sj_public.json", cwd=tmp_path)
    assert F.read_public(tmp_path / "sj_public.json") == pub
    assert _snarkjs_verify(snarkjs, tmp_path, pub="sj_public.json", proof="sj_proof.json")
    sj_proof = F.read_proof(tmp_path / "sj_proof.json")
    assert verify(pk.verifying_key(), sj_proof, pub)
    assert not verify(pk.verifying_key(), sj_proof, bad)


def _small():
    cs = ConstraintSystem()
    a = cs.input("a")
    b = cs.input("b", public=True)
    range_check(cs, a, 16)
    x = cs.mul(a, b)
    y = cs.mul(x, x + 5)
    cs.public("y", y)
    cs.public("x", x)
    return cs.compile()


def test_snarkjs_zkey_both_ways(snarkjs, ptau, tmp_path):
    r = _small()
    w = r.witness({"a": 4321, "b": 17})
    pub = r.public_values(w)
    F.write_r1cs(tmp_path / "c.r1cs", r)
    F.write_wtns(tmp_path / "c.wtns", w)
    _run(snarkjs, "groth16", "setup", "c.r1cs", str(ptau), "c0.zkey", cwd=tmp_path)
    _run(snarkjs, "zkey", "contribute", "c0.zkey", "c.zkey", "--name=dev", "-e=dprag dev only", cwd=tmp_path)
    _run(snarkjs, "zkey", "export", "verificationkey", "c.zkey", "verification_key.json", cwd=tmp_path)
    vk = F.read_vk(tmp_path / "verification_key.json")

    # snarkjs proves (from our .r1cs / .wtns); our verifier accepts, and rejects it tampered
    _run(snarkjs, "groth16", "prove", "c.zkey", "c.wtns", "sj_proof.json", "sj_public.json", cwd=tmp_path)
    sj_proof, sj_pub = F.read_proof(tmp_path / "sj_proof.json"), F.read_public(tmp_path / "sj_public.json")
    assert sj_pub == pub
    assert verify(vk, sj_proof, sj_pub)
    assert not verify(vk, sj_proof, [pub[0] + 1, *pub[1:]])
    obj = json.loads((tmp_path / "sj_proof.json").read_text())
    obj["pi_a"], obj["pi_c"] = obj["pi_c"], obj["pi_a"]
    assert not verify(vk, F.proof_from_json(obj), sj_pub)
    # a public value >= r: a typed error from the reader, as snarkjs refuses it
    (tmp_path / "big_public.json").write_text(json.dumps([str(pub[0] + R), *map(str, pub[1:])]))
    with pytest.raises(F.FormatError):
        F.read_public(tmp_path / "big_public.json")
    assert not _snarkjs_verify(snarkjs, tmp_path, pub="big_public.json", proof="sj_proof.json")

    # our prover on the imported snarkjs zkey (its witness map, domain and H points); snarkjs verifies
    pk = F.load_zkey(tmp_path / "c.zkey")
    assert (pk.n_vars, pk.n_public) == (r.n_vars, r.n_public)
    proof = prove(pk, w)
    F.write_json(tmp_path / "proof.json", F.proof_to_json(proof))
    F.write_json(tmp_path / "public.json", F.public_to_json(pub))
    assert _snarkjs_verify(snarkjs, tmp_path)
    assert verify(vk, proof, pub)
    F.write_json(tmp_path / "public.json", F.public_to_json([pub[0], pub[1], (pub[2] + 1) % R]))
    assert not _snarkjs_verify(snarkjs, tmp_path)


def test_snarkjs_proves_with_our_zkey(snarkjs, tmp_path):
    """Our development key written as a .zkey: snarkjs proves with it, both verifiers accept the proof."""
    r = _small()
    w = r.witness({"a": 99, "b": 3})
    pk = setup(r)
    F.write_zkey(tmp_path / "dev.zkey", pk)
    back = F.load_zkey(tmp_path / "dev.zkey")
    assert (back.a_rows, back.b_rows, back.h_points, back.b2_points, back.ic) == (
        pk.a_rows,
        pk.b_rows,
        pk.h_points,
        pk.b2_points,
        pk.ic,
    )
    F.write_wtns(tmp_path / "c.wtns", w)
    F.write_json(tmp_path / "verification_key.json", F.vk_to_json(pk.verifying_key()))
    _run(snarkjs, "groth16", "prove", "dev.zkey", "c.wtns", "proof.json", "public.json", cwd=tmp_path)
    assert F.read_public(tmp_path / "public.json") == r.public_values(w)
    assert verify(pk.verifying_key(), F.read_proof(tmp_path / "proof.json"), r.public_values(w))
    assert _snarkjs_verify(snarkjs, tmp_path)


def test_backends_interchangeable(snarkjs):
    """One interface, two backends: proofs from either verify under the same key, with either verifier."""
    from dprag.zk.backends import BackendError, ReferenceBackend, SnarkjsBackend, get_backend

    r = _small()
    w = r.witness({"a": 65535, "b": 2})
    ref, sj = get_backend("reference"), SnarkjsBackend(snarkjs)
    pk = ref.setup(r)
    vk = pk.verifying_key()
    pub = r.public_values(w)
    proofs = [ref.prove(pk, w), sj.prove(pk, w)]
    assert proofs[0] != proofs[1]
    for proof in proofs:
        assert ref.verify(vk, proof, pub) and sj.verify(vk, proof, pub)
        assert not ref.verify(vk, proof, [pub[0], pub[1] + 1, pub[2]])
        assert not sj.verify(vk, proof, [pub[0], pub[1] + 1, pub[2]])
    bad = list(w)
    bad[-1] = (bad[-1] + 1) % R
    # a witness that violates the R1CS: whichever backend proves it, the proof does not verify
    for backend in (ref, sj):
        try:
            assert not ref.verify(vk, backend.prove(pk, bad), r.public_values(bad))
        except BackendError:
            pass  # refusing to prove is fine too
    with pytest.raises(BackendError):
        SnarkjsBackend("/nonexistent/snarkjs").prove(pk, w)
    assert isinstance(get_backend("reference"), ReferenceBackend)


def _eth_proof(blob: bytes):
    """groth16py's Ethereum proof bytes: a.x a.y | b.x1 b.x0 b.y1 b.y0 | c.x c.y, 32-byte big-endian each."""
    from dprag.zk.keys import Proof

    v = [int.from_bytes(blob[i : i + 32], "big") for i in range(0, 256, 32)]
    return Proof(a=(v[0], v[1]), b=((v[3], v[2]), (v[5], v[4])), c=(v[6], v[7]))


def test_groth16py_proves_with_our_zkey(tmp_path):
    """groth16py (arkworks; GPL-3.0, dev extra, test oracle only) imports the .zkey of our development key and proves
    from our .wtns; dprag's verifier accepts the proof and rejects it for altered public signals."""
    groth16py = pytest.importorskip("groth16py", reason="groth16py (dev extra) is not installed")
    r = _small()
    w = r.witness({"a": 31337, "b": 5})
    pk = setup(r)
    F.write_zkey(tmp_path / "c.zkey", pk)
    F.write_wtns(tmp_path / "c.wtns", w)
    gpk, _ = groth16py.import_zkey(str(tmp_path / "c.zkey"))
    proof = _eth_proof(groth16py.prove_wtns(gpk, str(tmp_path / "c.wtns")))
    pub = r.public_values(w)
    assert verify(pk.verifying_key(), proof, pub)
    assert not verify(pk.verifying_key(), proof, [pub[0], pub[1], (pub[2] + 1) % R])
