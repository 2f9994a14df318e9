"""zk Groth16 (reference backend) and the snarkjs / circom formats, without Node.

Soundness here: a witness that violates the R1CS, altered public inputs and tampered proof points all fail.
"""

from __future__ import annotations

import pytest

from dprag.errors import InvalidParameterError
from dprag.zk import curve as C
from dprag.zk import formats as F
from dprag.zk.field import R
from dprag.zk.gadgets.bits import range_check
from dprag.zk.gadgets.poseidon import poseidon, poseidon_hash
from dprag.zk.keys import Proof
from dprag.zk.prove import prove
from dprag.zk.qap import domain_size
from dprag.zk.r1cs import ConstraintSystem
from dprag.zk.setup import setup
from dprag.zk.verify import verify


def _circuit():
    cs = ConstraintSystem()
    a = cs.input("a")
    b = cs.input("b", public=True)
    range_check(cs, a, 16)
    cs.public("h", poseidon(cs, [a, b]))
    cs.public("ab", cs.mul(a, b))
    return cs.compile()


@pytest.fixture(scope="module")
def keyed():
    r = _circuit()
    pk = setup(r)
    w = r.witness({"a": 1234, "b": 99})
    r.check(w)
    return r, pk, w


def test_honest_proof_verifies_and_public_order(keyed):
    r, pk, w = keyed
    pub = r.public_values(w)
    assert pub == [99, poseidon_hash([1234, 99]), 1234 * 99]
    assert r.public_names == ["b", "h", "ab"]
    proof = prove(pk, w)
    assert verify(pk.verifying_key(), proof, pub)
    # randomised (r, s from the CSPRNG): two proofs of the same witness differ and both verify
    proof2 = prove(pk, w)
    assert proof2 != proof and verify(pk.verifying_key(), proof2, pub)  # equal with probability ~2^-253


def test_altered_public_inputs_fail(keyed):
    r, pk, w = keyed
    pub = r.public_values(w)
    proof = prove(pk, w)
    vk = pk.verifying_key()
    for i in range(len(pub)):
        bad = list(pub)
        bad[i] = (bad[i] + 1) % R
        assert not verify(vk, proof, bad)


def test_wrong_witness_fails(keyed):
    r, pk, w = keyed
    bad = list(w)
    bad[-1] = (bad[-1] + 1) % R  # a private variable
    assert not r.is_satisfied(bad)
    assert not verify(pk.verifying_key(), prove(pk, bad), r.public_values(bad))


def test_tampered_proof_points_fail(keyed):
    r, pk, w = keyed
    pub = r.public_values(w)
    p = prove(pk, w)
    vk = pk.verifying_key()
    assert not verify(vk, Proof(a=C.g1_add(p.a, C.G1_GEN), b=p.b, c=p.c), pub)
    assert not verify(vk, Proof(a=p.a, b=p.b, c=C.g1_neg(p.c)), pub)
    assert not verify(vk, Proof(a=p.a, b=C.g2_add(p.b, C.G2_GEN), c=p.c), pub)
    assert not verify(vk, Proof(a=None, b=p.b, c=p.c), pub)


def test_public_input_not_below_r_is_a_typed_error(keyed):
    r, pk, w = keyed
    pub = r.public_values(w)
    proof = prove(pk, w)
    with pytest.raises(InvalidParameterError) as e:
        verify(pk.verifying_key(), proof, [pub[0] + R, *pub[1:]])
    assert e.value.field == "public[0]"
    with pytest.raises(InvalidParameterError):
        verify(pk.verifying_key(), proof, pub[:-1])


def test_json_roundtrip_and_checks(keyed, tmp_path):
    r, pk, w = keyed
    vk = pk.verifying_key()
    proof = prove(pk, w)
    pub = r.public_values(w)
    F.write_json(tmp_path / "vk.json", F.vk_to_json(vk))
    F.write_json(tmp_path / "proof.json", F.proof_to_json(proof))
    F.write_json(tmp_path / "public.json", F.public_to_json(pub))
    vk2, proof2, pub2 = (
        F.read_vk(tmp_path / "vk.json"),
        F.read_proof(tmp_path / "proof.json"),
        F.read_public(tmp_path / "public.json"),
    )
    assert (vk2.ic, vk2.alpha1, vk2.beta2, proof2, pub2) == (vk.ic, vk.alpha1, vk.beta2, proof, pub)
    assert verify(vk2, proof2, pub2)
    # public >= r: FormatError naming the index (snarkjs: "Public inputs are not valid")
    with pytest.raises(F.FormatError) as e:
        F.public_from_json([str(pub[0]), str(R), "1"])
    assert e.value.field == "public[1]"
    for junk in (["-1"], ["1e5"], [1.5], ["0x10"], {"a": 1}, ["9" * 200]):
        with pytest.raises(F.FormatError):
            F.public_from_json(junk)
    # a point off the curve, a twist point outside the subgroup, a truncated point
    obj = F.proof_to_json(proof)
    obj["pi_a"] = [obj["pi_a"][0], str((int(obj["pi_a"][1]) + 1) % C.Q), "1"]
    with pytest.raises(F.FormatError, match="not on the curve"):
        F.proof_from_json(obj)
    from tests.zk.test_zk_curve import twist_point_outside_subgroup

    q = twist_point_outside_subgroup()
    obj = F.proof_to_json(Proof(a=proof.a, b=q, c=proof.c))
    with pytest.raises(F.FormatError, match="subgroup"):
        F.proof_from_json(obj)
    with pytest.raises(F.FormatError):
        F.proof_from_json({"pi_a": ["1"], "pi_b": [], "pi_c": []})
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(F.FormatError):
        F.read_vk(tmp_path / "bad.json")
    with pytest.raises(F.FormatError):
        F.read_vk(tmp_path / "missing.json")


def test_r1cs_and_wtns_roundtrip(keyed):
    r, pk, w = keyed
    r2 = F.read_r1cs(F.r1cs_bytes(r))
    assert (r2.n_vars, r2.n_public, r2.constraints) == (r.n_vars, r.n_public, r.constraints)
    assert r2.is_satisfied(w)
    assert F.read_wtns(F.wtns_bytes(w)) == w
    with pytest.raises(F.FormatError):
        F.read_wtns(b"wtns" + b"\0" * 4)
    with pytest.raises(F.FormatError):
        F.read_r1cs(b"zkey" + b"\0" * 20)
    data = bytearray(F.r1cs_bytes(r))
    with pytest.raises(F.FormatError):
        F.read_r1cs(bytes(data[:-10]))


def test_domain_size_is_snarkjs_rule():
    # snarkjs zkey_new: 2^(log2(nConstraints + nPublic) + 1) with floor log2
    assert domain_size(1, 0) == 2
    assert domain_size(3, 1) == 8
    assert domain_size(255, 1) == 512
    assert domain_size(254, 1) == 256


def test_witness_input_errors():
    r = _circuit()
    with pytest.raises(InvalidParameterError) as e:
        r.witness({"a": 1})
    assert e.value.field == "inputs"
    with pytest.raises(InvalidParameterError):
        r.witness({"a": 1, "b": R})
    with pytest.raises(InvalidParameterError):
        r.witness({"a": 1, "b": 2, "c": 3})


def test_setup_docstring_says_development_only():
    from dprag.zk import setup as S

    assert "DEVELOPMENT ONLY" in S.__doc__ and "DEVELOPMENT-ONLY" in S.setup.__doc__
    assert setup(_circuit()).development is True


@pytest.mark.integration
def test_prove_many_in_processes(keyed):
    from dprag.zk.batch import prove_many

    r, pk, w = keyed
    w2 = r.witness({"a": 7, "b": 8})
    proofs = prove_many(pk, [w, w2, w], processes=2)
    vk = pk.verifying_key()
    assert [verify(vk, p, r.public_values(x)) for p, x in zip(proofs, [w, w2, w], strict=False)] == [True] * 3
    assert proofs[0] != proofs[2]  # fresh r, s in each worker
    assert not verify(vk, proofs[1], r.public_values(w))
    with pytest.raises(InvalidParameterError):
        prove_many(pk, [w], processes=0)


def test_key_with_a_g2_point_outside_the_subgroup_is_refused(keyed):
    """A .zkey whose B2 point has a cofactor component is refused at import (miss probability <= 1e-8: two random
    combinations, smallest cofactor prime 10069), and the prover never releases a pi_B outside the subgroup."""
    import dataclasses

    from tests.zk.test_zk_curve import twist_point_outside_subgroup

    r, pk, w = keyed
    bad_pt = twist_point_outside_subgroup()
    b2 = list(pk.b2_points)
    i = next(j for j in range(1, len(w)) if w[j] not in (0,))  # a variable with a nonzero witness value
    b2[i] = C.g2_add(b2[i], bad_pt) if b2[i] is not None else bad_pt
    bad = dataclasses.replace(pk, b2_points=b2)
    with pytest.raises(F.FormatError, match="subgroup"):
        F.read_zkey(F.zkey_bytes(bad))
    with pytest.raises(InvalidParameterError) as e:
        prove(bad, w)
    assert e.value.field == "pk.b2_points"


def test_a_batch_verifies_iff_every_proof_does_and_random_weights_stop_cancelling_forgeries(keyed):
    """``verify_batch`` (spec/zk.md, randomized batch verification): valid proofs of several witnesses pass at once;
    one tampered proof fails the batch. A forger who shifts A by +X in one proof and by −X in another proof with
    the same B makes the two errors cancel when every weight is 1 (the unweighted product passes: shown), and the
    random weights catch it (a false pass has probability ≤ 2^-128)."""
    from dprag.zk.verify import verify_batch

    r, pk, _ = keyed
    vk = pk.verifying_key()
    ws = [r.witness({"a": a, "b": b}) for a, b in ((1, 2), (300, 7), (65535, 11))]
    items = [(prove(pk, w), r.public_values(w)) for w in ws]
    assert all(verify(vk, p, pub) for p, pub in items)
    assert verify_batch(vk, items)
    bad = Proof(C.g1_add(items[1][0].a, C.G1_GEN), items[1][0].b, items[1][0].c)
    assert not verify_batch(vk, [items[0], (bad, items[1][1]), items[2]])
    # two proofs of one witness share B only if the forger makes them so: take one proof and shift its A both ways
    p, pub = items[0]
    x = C.g1_mul(C.G1_GEN, 12345)
    plus, minus = Proof(C.g1_add(p.a, x), p.b, p.c), Proof(C.g1_add(p.a, C.g1_neg(x)), p.b, p.c)
    assert not verify(vk, plus, pub) and not verify(vk, minus, pub)
    assert verify_batch(vk, [(plus, pub), (minus, pub)], weights=[1, 1])  # unweighted: the errors cancel
    assert not verify_batch(vk, [(plus, pub), (minus, pub)])  # random weights: caught
