"""zk noise-then-select circuit: the circuit agrees with plain Python, and a wrong top-K, a wrong tenant (matrix),
a wrong index blinding, altered noise, altered scores or altered public inputs fail (at the R1CS level on many cases,
through Groth16 on a few); the index commitment is blinded (hiding)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprag.errors import InvalidParameterError
from dprag.zk.circuits import noise_then_select as nts
from dprag.zk.field import R
from dprag.zk.gadgets import topk
from dprag.zk.gadgets.merkle import merkle_root
from dprag.zk.gadgets.poseidon import poseidon_hash
from dprag.zk.r1cs import UnsatisfiedError
from dprag.zk.setup import setup

BLIND = 0x5EED_B11D_0123_4567_89AB_CDEF_0F1E_2D3C  # the index commitment's blinding scalar in these tests


def _data(rng, p):
    vb, zb = 1 << (p.value_bits - 1), 1 << (p.noise_bits - 1)
    E = [[rng.randrange(-vb, vb) for _ in range(p.d)] for _ in range(p.n)]
    Q = [rng.randrange(-vb, vb) for _ in range(p.d)]
    z = [rng.randrange(-zb, zb) for _ in range(p.n)]
    return E, Q, z


@pytest.fixture(scope="module")
def small():
    return nts.build(5, 2, 3)


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2**32), st.booleans())
def test_circuit_matches_plain_python(small, seed, ties):
    rng = random.Random(seed)
    p = small.params
    E, Q, z = _data(rng, p)
    if ties:  # equal noisy scores everywhere: ties go to the smaller id
        E = [list(E[0]) for _ in E]
        z = [z[0]] * p.n
    w = small.witness(E, Q, z, 11, 22, blinding=BLIND)
    small.r1cs.check(w)
    assert small.public(w) == small.expected_public(E, Q, z, 11, 22, blinding=BLIND)
    ids = nts.select(E, Q, z, p)
    if ties:
        assert ids == [0, 1]
    s = nts.noisy_scores(E, Q, z, p)
    assert sorted(ids, key=lambda i: (-s[i], i)) == ids and len(set(ids)) == p.k


def test_clipping_binds(small):
    p = small.params
    big = (1 << (p.value_bits - 1)) - 1
    E = [[big] * p.d for _ in range(p.n)]
    Q = [big] * p.d
    z = [0] * p.n
    assert nts.noisy_scores(E, Q, z, p)[0] == p.clip_hi  # (127 * 127 * 3) >> 4 = 3024 > 2047
    small.r1cs.check(small.witness(E, Q, z, 1, 2, blinding=BLIND))


def test_wrong_topk_rule_fails(small, monkeypatch):
    E, Q, z = _data(random.Random(5), small.params)
    monkeypatch.setattr(topk, "topk_indices", lambda ks, k: sorted(range(len(ks)), key=lambda i: ks[i])[:k])
    with pytest.raises(UnsatisfiedError) as e:
        small.r1cs.check(small.witness(E, Q, z, 1, 2, blinding=BLIND))
    assert "topk" in e.value.label


def test_any_single_tampered_private_value_fails(small):
    """Altering any one private witness value (a score, a bit, a hash state, a one-hot entry...) breaks the R1CS:
    every private variable is tried (only the constraints that mention it are re-evaluated)."""
    E, Q, z = _data(random.Random(9), small.params)
    w = small.witness(E, Q, z, 3, 4, blinding=BLIND)
    r = small.r1cs
    r.check(w)
    uses: dict[int, list[int]] = {}
    for ci, (a, b, c) in enumerate(r.constraints):
        for v in set(a) | set(b) | set(c):
            uses.setdefault(v, []).append(ci)

    def holds(ci, ww):
        a, b, c = r.constraints[ci]
        ev = lambda lc: sum(k * ww[v] for v, k in lc.items())  # noqa: E731
        return (ev(a) * ev(b) - ev(c)) % R == 0

    free = []
    for i in range(r.n_public + 1, r.n_vars):
        bad = list(w)
        bad[i] = (bad[i] + 1) % R
        if all(holds(ci, bad) for ci in uses.get(i, [])):
            free.append(i)
    assert free == [], free


def test_input_validation(small):
    p = small.params
    E, Q, z = _data(random.Random(1), p)
    with pytest.raises(InvalidParameterError):
        small.witness(E[:-1], Q, z, 1, 2, blinding=BLIND)
    with pytest.raises(InvalidParameterError):
        small.witness(E, Q + [0], z, 1, 2, blinding=BLIND)
    bad = [list(r) for r in E]
    bad[0][0] = 1 << (p.value_bits - 1)
    with pytest.raises(InvalidParameterError):
        small.witness(bad, Q, z, 1, 2, blinding=BLIND)
    with pytest.raises(InvalidParameterError) as e:
        nts.build(3, 4, 2)
    assert e.value.field == "k"


def _unblinded_index_commitment(E, value_bits):
    """The protocol-v2 index commitment (no blinding): Poseidon(merkle_root(leaves), N)."""
    return poseidon_hash([merkle_root([nts.row_leaf(r, value_bits) for r in E]), len(E)])


def test_index_commitment_is_blinded(small):
    """The blinding enters Z_idx, in plain Python and in the circuit alike: two blindings of the same E give two
    commitments, neither equal to the old deterministic (guess-testable) one; only Z_idx depends on the blinding."""
    p = small.params
    E, Q, z = _data(random.Random(7), p)
    old = _unblinded_index_commitment(E, p.value_bits)
    rng = random.Random(8)
    blinds = [0, 1, BLIND, *(rng.randrange(R) for _ in range(5))]
    zs = [nts.index_commitment(E, b, p.value_bits) for b in blinds]
    assert len(set(zs)) == len(blinds) and old not in zs
    assert nts.index_commitment(E, BLIND + R, p.value_bits) == zs[2]  # reduced mod r, like the salts
    w1 = small.witness(E, Q, z, 11, 22, blinding=BLIND)
    w2 = small.witness(E, Q, z, 11, 22, blinding=BLIND + 1)
    pub1, pub2 = small.public(w1), small.public(w2)
    assert pub1[0] == zs[2] != old and pub2[0] == nts.index_commitment(E, BLIND + 1, p.value_bits)
    assert pub1[0] != pub2[0] and pub1[1:] == pub2[1:]
    with pytest.raises(TypeError):
        small.witness(E, Q, z, 11, 22)  # the blinding is a required keyword argument


def test_constraint_count_grows_linearly_in_n_and_d():
    c = {(n, d): nts.build(n, 1, d).r1cs.n_constraints for n, d in ((4, 2), (8, 2), (4, 4))}
    assert c[(8, 2)] > c[(4, 2)] and c[(4, 4)] > c[(4, 2)]


@pytest.fixture(scope="module")
def proved():
    circ = nts.build(3, 2, 2)
    pk = setup(circ.r1cs)
    rng = random.Random(2)
    E, Q, z = _data(rng, circ.params)
    w = circ.witness(E, Q, z, 101, 202, blinding=BLIND)
    proof = nts.prove(pk, w)
    return circ, pk, (E, Q, z), w, proof


def test_groth16_soundness_end_to_end(proved, monkeypatch):
    circ, pk, (E, Q, z), w, proof = proved
    vk = pk.verifying_key()
    honest = circ.expected_public(E, Q, z, 101, 202, blinding=BLIND)
    assert circ.public(w) == honest
    assert nts.verify(vk, proof, honest)
    p = circ.params
    # wrong tenant: the same proof against another matrix's index commitment
    E2 = [list(r) for r in E]
    E2[0][0] = E2[0][0] + 1 if E2[0][0] < 127 else E2[0][0] - 1
    assert not nts.verify(vk, proof, [nts.index_commitment(E2, BLIND, p.value_bits), *honest[1:]])
    # the same matrix under another blinding (or unblinded, as in protocol v2): the proof does not verify
    assert not nts.verify(vk, proof, [nts.index_commitment(E, BLIND + 1, p.value_bits), *honest[1:]])
    assert not nts.verify(vk, proof, [_unblinded_index_commitment(E, p.value_bits), *honest[1:]])
    # wrong top-K: a different released list (commitment) does not verify
    ids = nts.select(E, Q, z, p)
    for other in ([ids[1], ids[0]], [i for i in range(p.n) if i not in ids][:1] + ids[:1]):
        assert not nts.verify(vk, proof, honest[:3] + [nts.topk_commitment(202, other)])


def test_groth16_proof_is_bound_to_its_blinding(proved):
    """A proof made with blinding b' verifies against Z_idx(E, b') only, not against Z_idx(E, b) for b != b'."""
    circ, pk, (E, Q, z), w, proof = proved
    vk = pk.verifying_key()
    other = BLIND ^ (1 << 100)
    w2 = circ.witness(E, Q, z, 101, 202, blinding=other)
    proof2 = nts.prove(pk, w2)
    pub2 = circ.expected_public(E, Q, z, 101, 202, blinding=other)
    honest = circ.expected_public(E, Q, z, 101, 202, blinding=BLIND)
    assert circ.public(w2) == pub2 and pub2[1:] == honest[1:] and pub2[0] != honest[0]
    assert nts.verify(vk, proof2, pub2)
    assert not nts.verify(vk, proof2, honest)
    assert not nts.verify(vk, proof, pub2)


@pytest.mark.slow
def test_groth16_soundness_cheating_witnesses(proved, monkeypatch):
    """Proofs made from cheating witnesses (other noise, wrong selection rule, altered score path) fail."""
    circ, pk, (E, Q, z), w, proof = proved
    vk = pk.verifying_key()
    p = circ.params
    honest = circ.expected_public(E, Q, z, 101, 202, blinding=BLIND)
    # altered noise: the auditor recomputes the noise commitment from its seed; a proof made with other noise fails
    z2 = list(z)
    z2[1] += 1
    w2 = circ.witness(E, Q, z2, 101, 202, blinding=BLIND)
    proof2 = nts.prove(pk, w2)
    assert nts.verify(vk, proof2, circ.public(w2))  # valid for its own noise ...
    assert not nts.verify(vk, proof2, honest[:2] + [nts.noise_commitment(z, p.noise_bits)] + circ.public(w2)[3:])
    # a witness built with a wrong selection rule (prover cheats on top-K): the proof fails
    monkeypatch.setattr(topk, "topk_indices", lambda ks, k: sorted(range(len(ks)), key=lambda i: ks[i])[:k])
    w3 = circ.witness(E, Q, z, 101, 202, blinding=BLIND)
    assert not nts.verify(vk, nts.prove(pk, w3), circ.public(w3))
    # altered scores: change one private value on the score path (a dot-product variable) and prove
    bad = list(w)
    bad[-1] = (bad[-1] + 1) % R
    assert not nts.verify(vk, nts.prove(pk, bad), honest)
