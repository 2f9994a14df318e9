"""Noise-then-select: the released ids are the top-K of clip(E.Q) + z, over a committed matrix E.

Statement (all N scores are recomputed in the circuit; see spec/zk.md):
  private: E (N x d signed ``value_bits``-bit integers), Q (d signed ``value_bits``-bit integers), z (N signed
           ``noise_bits``-bit integers), salt_q, salt_k, blind_idx (field elements), ids (K integers)
  public:  [index_commitment, q_commitment, noise_commitment, topk_commitment] (snarkjs public.json order)
  where
    leaf_i           = poseidon_chain([TAG_ROW, *pack(E_i, value_bits)])
    index_commitment = Poseidon(TAG_INDEX, merkle_root(leaf_0..leaf_{N-1}), N, blind_idx)
    q_commitment     = poseidon_chain([TAG_Q, salt_q, *pack(Q, value_bits)])
    noise_commitment = poseidon_chain([TAG_NOISE, *pack(z, noise_bits)])
    topk_commitment  = Poseidon(TAG_TOPK, salt_k, ids[0], ..., ids[K-1])
    score_i          = clip(floor((E_i . Q) / 2^frac_bits), clip_lo, clip_hi) + z_i
    ids              = the K indices with the largest score, largest first, ties broken by the smaller index
  pack(v, b): the values shifted to u = v + 2^(b-1) in [0, 2^b), floor(248 / b) per field element, little-endian.

Every id is < N (a one-hot position among the N committed rows): containment in the committed matrix.
The index commitment is hiding: with ``blind_idx`` a uniformly random field element, known only to the prover and to
whoever must recompute the commitment from the opened rows, the published value cannot be tested against a guessed E.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dprag.errors import InvalidParameterError
from dprag.zk.field import R
from dprag.zk.gadgets.bits import from_bits, signed_range_check
from dprag.zk.gadgets.fixed_point import clip, clip_int, rescale
from dprag.zk.gadgets.merkle import merkle_root, root_gadget
from dprag.zk.gadgets.poseidon import poseidon, poseidon_chain, poseidon_chain_gadget, poseidon_hash
from dprag.zk.gadgets.topk import topk_gadget
from dprag.zk.keys import Proof, ProvingKey, VerifyingKey
from dprag.zk.r1cs import LC, R1CS, ConstraintSystem, lc_sum

TAG_ROW, TAG_Q, TAG_NOISE, TAG_TOPK, TAG_INDEX = 1, 2, 3, 4, 5
PUBLIC_NAMES = ("index_commitment", "q_commitment", "noise_commitment", "topk_commitment")


@dataclass(frozen=True)
class Params:
    n: int
    k: int
    d: int
    value_bits: int = 8
    frac_bits: int = 4
    clip_lo: int = -(1 << 11)
    clip_hi: int = (1 << 11) - 1
    noise_bits: int = 12

    def validate(self) -> None:
        for f in ("n", "k", "d"):
            if getattr(self, f) < 1:
                raise InvalidParameterError(f, "must be >= 1", getattr(self, f))
        if self.k > self.n:
            raise InvalidParameterError("k", "must be <= n", self.k)
        if self.k > 14:
            raise InvalidParameterError("k", "must be <= 14 (one Poseidon over salt, tag and ids)", self.k)
        if not 2 <= self.value_bits <= 32:
            raise InvalidParameterError("value_bits", "must be in [2, 32]", self.value_bits)
        if not 2 <= self.noise_bits <= 64:
            raise InvalidParameterError("noise_bits", "must be in [2, 64]", self.noise_bits)
        if not 0 <= self.frac_bits <= self.dot_bits - 2:
            raise InvalidParameterError("frac_bits", f"must be in [0, {self.dot_bits - 2}]", self.frac_bits)
        if not -(1 << (self.score_bits - 1)) <= self.clip_lo <= self.clip_hi < (1 << (self.score_bits - 1)):
            raise InvalidParameterError(
                "clip_lo",
                f"need -2^{self.score_bits - 1} <= clip_lo <= clip_hi < 2^{self.score_bits - 1}",
                (self.clip_lo, self.clip_hi),
            )

    @property
    def dot_bits(self) -> int:
        """Signed width of E_i . Q: |E_i . Q| <= d * 2^(2b-2)."""
        return 2 * self.value_bits - 1 + max(self.d - 1, 1).bit_length() + 1

    @property
    def score_bits(self) -> int:
        return self.dot_bits - self.frac_bits

    @property
    def key_bits(self) -> int:
        span = (self.clip_hi - self.clip_lo) + (1 << self.noise_bits)
        return (span * self.n).bit_length()


def pack(values: Sequence[int], bits: int) -> list[int]:
    per = 248 // bits
    off = 1 << (bits - 1)
    out = []
    for s in range(0, len(values), per):
        acc = 0
        for j, v in enumerate(values[s : s + per]):
            if not -off <= v < off:
                raise InvalidParameterError("values", f"must be signed {bits}-bit integers", v)
            acc |= (v + off) << (bits * j)
        out.append(acc)
    return out


def _pack_gadget(bit_groups: list[list[LC]], bits: int) -> list[LC]:
    per = 248 // bits
    out = []
    for s in range(0, len(bit_groups), per):
        terms = []
        for j, grp in enumerate(bit_groups[s : s + per]):
            terms.append(from_bits(grp) * (1 << (bits * j)))
        out.append(lc_sum(terms))
    return out


# ---------------------------------------------------------------- plain-Python side (auditor / provider)
def row_leaf(row: Sequence[int], value_bits: int) -> int:
    return poseidon_chain([TAG_ROW, *pack(row, value_bits)])


def index_commitment(E: Sequence[Sequence[int]], blinding: int, value_bits: int = 8) -> int:
    """Hiding commitment to the rows of E: Poseidon(TAG_INDEX, Merkle root of the row leaves, N, blinding mod r)."""
    return poseidon_hash([TAG_INDEX, merkle_root([row_leaf(r, value_bits) for r in E]), len(E), blinding % R])


def q_commitment(salt: int, Q: Sequence[int], value_bits: int = 8) -> int:
    return poseidon_chain([TAG_Q, salt % R, *pack(Q, value_bits)])


def noise_commitment(z: Sequence[int], noise_bits: int = 12) -> int:
    return poseidon_chain([TAG_NOISE, *pack(z, noise_bits)])


def topk_commitment(salt: int, ids: Sequence[int]) -> int:
    return poseidon_hash([TAG_TOPK, salt % R, *ids])


def noisy_scores(E: Sequence[Sequence[int]], Q: Sequence[int], z: Sequence[int], p: Params) -> list[int]:
    return [
        clip_int(sum(e * q for e, q in zip(row, Q, strict=False)) >> p.frac_bits, p.clip_lo, p.clip_hi) + zi
        for row, zi in zip(E, z, strict=False)
    ]


def select(E: Sequence[Sequence[int]], Q: Sequence[int], z: Sequence[int], p: Params) -> list[int]:
    """The reference answer: top-K of the noisy scores, ties by the smaller id."""
    s = noisy_scores(E, Q, z, p)
    return sorted(range(len(s)), key=lambda i: (-s[i], i))[: p.k]


# ---------------------------------------------------------------- circuit
@dataclass
class Circuit:
    params: Params
    r1cs: R1CS

    def witness(
        self,
        E: Sequence[Sequence[int]],
        Q: Sequence[int],
        z: Sequence[int],
        salt_q: int,
        salt_k: int,
        *,
        blinding: int,
    ) -> list[int]:
        """The full witness; ``blinding`` is the index commitment's blinding scalar (the ``blind_idx`` input)."""
        p = self.params
        if len(E) != p.n or any(len(r) != p.d for r in E):
            raise InvalidParameterError("E", f"must be {p.n} rows of {p.d} integers", len(E))
        if len(Q) != p.d:
            raise InvalidParameterError("Q", f"must have {p.d} entries", len(Q))
        if len(z) != p.n:
            raise InvalidParameterError("z", f"must have {p.n} entries", len(z))
        pack(Q, p.value_bits)
        pack(z, p.noise_bits)
        for r in E:
            pack(r, p.value_bits)
        return self.r1cs.witness(
            {
                "E": [v for r in E for v in r],
                "Q": list(Q),
                "z": list(z),
                "salt_q": salt_q % R,
                "salt_k": salt_k % R,
                "blind_idx": blinding % R,
            }
        )

    def public(self, w: Sequence[int]) -> list[int]:
        return self.r1cs.public_values(w)

    def expected_public(
        self,
        E: Sequence[Sequence[int]],
        Q: Sequence[int],
        z: Sequence[int],
        salt_q: int,
        salt_k: int,
        *,
        blinding: int,
    ) -> list[int]:
        """The public signals computed outside the circuit (what an auditor recomputes from the openings)."""
        p = self.params
        return [
            index_commitment(E, blinding, p.value_bits),
            q_commitment(salt_q, Q, p.value_bits),
            noise_commitment(z, p.noise_bits),
            topk_commitment(salt_k, select(E, Q, z, p)),
        ]


def build(n: int, k: int, d: int, **kw: int) -> Circuit:
    """The noise-then-select circuit for an n x d matrix and K = k winners (see the module docstring)."""
    p = Params(n=n, k=k, d=d, **kw)
    p.validate()
    cs = ConstraintSystem()
    E = cs.input("E", n * d)
    Q = cs.input("Q", d)
    z = cs.input("z", n)
    salt_q = cs.input("salt_q")
    salt_k = cs.input("salt_k")
    blind_idx = cs.input("blind_idx")
    vb = p.value_bits
    with cs.label("E range"):
        e_bits = [signed_range_check(cs, x, vb) for x in E]
    with cs.label("Q range"):
        q_bits = [signed_range_check(cs, x, vb) for x in Q]
    with cs.label("z range"):
        z_bits = [signed_range_check(cs, x, p.noise_bits) for x in z]
    with cs.label("index commitment"):
        leaves = [
            poseidon_chain_gadget(cs, [LC.const(TAG_ROW), *_pack_gadget(e_bits[i * d : (i + 1) * d], vb)])
            for i in range(n)
        ]
        root = root_gadget(cs, leaves)
        c_index = poseidon(cs, [LC.const(TAG_INDEX), root, LC.const(n), blind_idx])
    with cs.label("q commitment"):
        c_q = poseidon_chain_gadget(cs, [LC.const(TAG_Q), salt_q, *_pack_gadget(q_bits, vb)])
    with cs.label("noise commitment"):
        c_z = poseidon_chain_gadget(cs, [LC.const(TAG_NOISE), *_pack_gadget(z_bits, p.noise_bits)])
    keys = []
    off = (1 << (p.noise_bits - 1)) - p.clip_lo
    for i in range(n):
        with cs.label(f"score {i}"):
            dot = lc_sum(cs.mul(E[i * d + j], Q[j], "dot") for j in range(d))
            s = rescale(cs, dot, p.frac_bits, p.score_bits)
            c = clip(cs, s, p.clip_lo, p.clip_hi, p.score_bits)
            # key = (noisy score + off) * N + (N - 1 - i): distinct, larger is better, ties -> smaller id
            keys.append((c + z[i] + off) * n + (n - 1 - i))
    with cs.label("top-k"):
        ids = topk_gadget(cs, keys, k, p.key_bits)
    with cs.label("top-k commitment"):
        c_k = poseidon(cs, [LC.const(TAG_TOPK), salt_k, *ids])
    for name, v in zip(PUBLIC_NAMES, (c_index, c_q, c_z, c_k), strict=False):
        cs.public(name, v)
    return Circuit(params=p, r1cs=cs.compile())


def prove(pk: ProvingKey, witness: Sequence[int], *, workers: int = 1) -> Proof:
    from dprag.zk.prove import prove as _prove

    return _prove(pk, witness, workers=workers)


def verify(vk: VerifyingKey, proof: Proof, public: Sequence[int]) -> bool:
    from dprag.zk.verify import verify as _verify

    return _verify(vk, proof, public)


def verify_batch(vk: VerifyingKey, items: Sequence[tuple[Proof, Sequence[int]]]) -> bool:
    """All of ``items`` at once, with random weights (``dprag.zk.verify.verify_batch``)."""
    from dprag.zk.verify import verify_batch as _verify_batch

    return _verify_batch(vk, items)
