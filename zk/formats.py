"""File formats shared with snarkjs / circom.

- snarkjs JSON: ``verification_key.json``, ``proof.json``, ``public.json`` (read and write; decimal strings,
  projective coordinates with z = 1, infinity as z = 0).
- circom binary: ``.r1cs`` (iden3 "r1cs" v1) and ``.wtns`` (iden3 "wtns" v2) writers and readers.
- ``.zkey`` (snarkjs Groth16, "zkey" v1) reader: points in little-endian Montgomery form, A/B coefficients stored as
  ``c * R^2 mod r``; yields a ``ProvingKey`` our prover uses as is.

Every point read is checked on the curve, G2 points also in the subgroup (G1's cofactor is 1); public signals must be
field elements (< r). Any violation is a ``FormatError`` naming the file's field, never a crash.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, cast, overload

from dprag.errors import InvalidParameterError
from dprag.zk import curve as C
from dprag.zk.field import R
from dprag.zk.keys import Proof, ProvingKey, VerifyingKey
from dprag.zk.r1cs import R1CS, Constraint


class FormatError(InvalidParameterError):
    """A file does not follow its format (names the field and the rule)."""


# ---------------------------------------------------------------- JSON helpers
def _int(field: str, v: object, bound: int) -> int:
    if isinstance(v, bool):
        raise FormatError(field, "must be a decimal integer string", v)
    if isinstance(v, int):
        x = v
    elif isinstance(v, str) and v.isascii() and v.isdigit() and len(v) <= 100:
        x = int(v)
    else:
        raise FormatError(field, "must be a decimal integer string", str(v)[:40])
    if not 0 <= x < bound:
        raise FormatError(field, f"must be < {'r' if bound == R else 'q'}", str(v)[:80])
    return x


def _g1_from_json(field: str, v: object) -> C.G1Point:
    if not isinstance(v, list) or len(v) not in (2, 3):
        raise FormatError(field, "must be a G1 point [x, y, z]", str(v)[:80])
    x, y = _int(field, v[0], C.Q), _int(field, v[1], C.Q)
    z = _int(field, v[2], C.Q) if len(v) == 3 else 1
    if z == 0:
        return None
    if z != 1:
        raise FormatError(field, "z must be 1 (affine) or 0 (infinity)", z)
    p = (x, y)
    if not C.g1_on_curve(p):
        raise FormatError(field, "point is not on the curve", str(v)[:80])
    return p


def _f2(field: str, v: object) -> tuple[int, int]:
    if not isinstance(v, list) or len(v) != 2:
        raise FormatError(field, "must be an F_q2 element [c0, c1]", str(v)[:80])
    return (_int(field, v[0], C.Q), _int(field, v[1], C.Q))


def _g2_from_json(field: str, v: object) -> C.G2Point:
    if not isinstance(v, list) or len(v) not in (2, 3):
        raise FormatError(field, "must be a G2 point [[x0, x1], [y0, y1], [z0, z1]]", str(v)[:80])
    x, y = _f2(field, v[0]), _f2(field, v[1])
    z = _f2(field, v[2]) if len(v) == 3 else (1, 0)
    if z == (0, 0):
        return None
    if z != (1, 0):
        raise FormatError(field, "z must be [1, 0] (affine) or [0, 0] (infinity)", str(z))
    p = (x, y)
    if not C.g2_on_curve(p):
        raise FormatError(field, "point is not on the curve", str(v)[:80])
    if not C.g2_in_subgroup(p):
        raise FormatError(field, "point is not in the order-r subgroup", str(v)[:80])
    return p


def _g1_json(p: C.G1Point) -> list[str]:
    return ["0", "1", "0"] if p is None else [str(p[0]), str(p[1]), "1"]


def _g2_json(p: C.G2Point) -> list[list[str]]:
    if p is None:
        return [["0", "0"], ["1", "0"], ["0", "0"]]
    return [[str(p[0][0]), str(p[0][1])], [str(p[1][0]), str(p[1][1])], ["1", "0"]]


def _load_json(path: Path | str, what: str) -> object:
    try:
        with open(path, "rb") as f:
            raw = f.read(64 << 20)
        return json.loads(raw)
    except OSError as e:
        raise FormatError(what, f"cannot read: {e.strerror or e}", str(path)) from None
    except (ValueError, RecursionError):
        raise FormatError(what, "is not valid JSON", str(path)) from None


# ---------------------------------------------------------------- snarkjs JSON
def vk_to_json(vk: VerifyingKey) -> dict[str, object]:
    return {
        "protocol": "groth16",
        "curve": "bn128",
        "nPublic": vk.n_public,
        "vk_alpha_1": _g1_json(vk.alpha1),
        "vk_beta_2": _g2_json(vk.beta2),
        "vk_gamma_2": _g2_json(vk.gamma2),
        "vk_delta_2": _g2_json(vk.delta2),
        "IC": [_g1_json(p) for p in vk.ic],
    }


def vk_from_json(obj: object) -> VerifyingKey:
    if not isinstance(obj, dict):
        raise FormatError("verification_key", "must be a JSON object", type(obj).__name__)
    if obj.get("protocol") != "groth16":
        raise FormatError("verification_key.protocol", "must be 'groth16'", obj.get("protocol"))
    if obj.get("curve") not in ("bn128", "bn254"):
        raise FormatError("verification_key.curve", "must be 'bn128'", obj.get("curve"))
    ic = obj.get("IC")
    if not isinstance(ic, list) or not ic:
        raise FormatError("verification_key.IC", "must be a non-empty list of G1 points", type(ic).__name__)
    npub = obj.get("nPublic")
    if npub is not None and npub != len(ic) - 1:
        raise FormatError("verification_key.nPublic", "must equal len(IC) - 1", npub)
    for k in ("vk_alpha_1", "vk_beta_2", "vk_gamma_2", "vk_delta_2"):
        if k not in obj:
            raise FormatError("verification_key." + k, "is missing", None)
    return VerifyingKey(
        alpha1=_g1_from_json("verification_key.vk_alpha_1", obj["vk_alpha_1"]),
        beta2=_g2_from_json("verification_key.vk_beta_2", obj["vk_beta_2"]),
        gamma2=_g2_from_json("verification_key.vk_gamma_2", obj["vk_gamma_2"]),
        delta2=_g2_from_json("verification_key.vk_delta_2", obj["vk_delta_2"]),
        ic=[_g1_from_json(f"verification_key.IC[{i}]", p) for i, p in enumerate(ic)],
    )


def proof_to_json(proof: Proof) -> dict[str, object]:
    return {
        "pi_a": _g1_json(proof.a),
        "pi_b": _g2_json(proof.b),
        "pi_c": _g1_json(proof.c),
        "protocol": "groth16",
        "curve": "bn128",
    }


def proof_from_json(obj: object) -> Proof:
    if not isinstance(obj, dict):
        raise FormatError("proof", "must be a JSON object", type(obj).__name__)
    for k in ("pi_a", "pi_b", "pi_c"):
        if k not in obj:
            raise FormatError("proof." + k, "is missing", None)
    if obj.get("protocol", "groth16") != "groth16":
        raise FormatError("proof.protocol", "must be 'groth16'", obj.get("protocol"))
    return Proof(
        a=_g1_from_json("proof.pi_a", obj["pi_a"]),
        b=_g2_from_json("proof.pi_b", obj["pi_b"]),
        c=_g1_from_json("proof.pi_c", obj["pi_c"]),
    )


def public_to_json(public: Sequence[int]) -> list[str]:
    return [str(int(v)) for v in public]


def public_from_json(obj: object) -> list[int]:
    """Public signals; any value >= r (or not a decimal integer) is a FormatError naming its index."""
    if not isinstance(obj, list):
        raise FormatError("public", "must be a JSON list of decimal strings", type(obj).__name__)
    return [_int(f"public[{i}]", v, R) for i, v in enumerate(obj)]


def write_json(path: Path | str, obj: object) -> None:
    Path(path).write_text(json.dumps(obj, indent=1) + "\n")


def read_vk(path: Path | str) -> VerifyingKey:
    return vk_from_json(_load_json(path, "verification_key"))


def read_proof(path: Path | str) -> Proof:
    return proof_from_json(_load_json(path, "proof"))


def read_public(path: Path | str) -> list[int]:
    return public_from_json(_load_json(path, "public"))


# ---------------------------------------------------------------- iden3 binary container
def _bin_file(magic: bytes, version: int, sections: list[tuple[int, bytes]]) -> bytes:
    out = [magic, struct.pack("<II", version, len(sections))]
    for sid, body in sections:
        out.append(struct.pack("<IQ", sid, len(body)))
        out.append(body)
    return b"".join(out)


def _read_bin(data: bytes, magic: bytes, what: str) -> tuple[int, dict[int, list[bytes]]]:
    if len(data) < 12 or data[:4] != magic:
        raise FormatError(what, f"is not a {magic.decode()} file (bad magic)", data[:4].hex())
    version, n = struct.unpack_from("<II", data, 4)
    pos = 12
    sections: dict[int, list[bytes]] = {}
    for _ in range(n):
        if pos + 12 > len(data):
            raise FormatError(what, "section header truncated", pos)
        sid, size = struct.unpack_from("<IQ", data, pos)
        pos += 12
        if pos + size > len(data):
            raise FormatError(what, f"section {sid} truncated", size)
        sections.setdefault(sid, []).append(data[pos : pos + size])
        pos += size
    return version, sections


def _le(x: int, n: int = 32) -> bytes:
    return x.to_bytes(n, "little")


def _from_le(b: bytes) -> int:
    return int.from_bytes(b, "little")


def _one(sections: dict[int, list[bytes]], sid: int, what: str) -> bytes:
    s = sections.get(sid)
    if not s or len(s) != 1:
        raise FormatError(what, f"must have exactly one section {sid}", len(s or []))
    return s[0]


# ---------------------------------------------------------------- .r1cs
def r1cs_bytes(r1cs: R1CS) -> bytes:
    """circom's .r1cs: public signals are declared as outputs (wires 1..n_public), no labels beyond the wire ids."""
    m = r1cs.n_constraints
    header = struct.pack("<I", 32) + _le(R) + struct.pack("<IIIIQI", r1cs.n_vars, r1cs.n_public, 0, 0, r1cs.n_vars, m)
    parts = []
    for a, b, c in r1cs.constraints:
        for lc in (a, b, c):
            parts.append(struct.pack("<I", len(lc)))
            for k in sorted(lc):
                parts.append(struct.pack("<I", k) + _le(lc[k]))
    labels = b"".join(struct.pack("<Q", i) for i in range(r1cs.n_vars))
    return _bin_file(b"r1cs", 1, [(1, header), (2, b"".join(parts)), (3, labels)])


def write_r1cs(path: Path | str, r1cs: R1CS) -> None:
    Path(path).write_bytes(r1cs_bytes(r1cs))


def read_r1cs(data: bytes) -> R1CS:
    """A constraint-only R1CS (no witness hints) from .r1cs bytes."""
    _, secs = _read_bin(data, b"r1cs", "r1cs")
    h = _one(secs, 1, "r1cs")
    if len(h) < 4 or struct.unpack_from("<I", h)[0] != 32 or _from_le(h[4:36]) != R:
        raise FormatError("r1cs.header", "must be over the BN254 scalar field (n8 = 32)", h[:4].hex())
    n_wires, n_out, n_pub_in, _n_prv, _n_labels, m = struct.unpack_from("<IIIIQI", h, 36)
    body = _one(secs, 2, "r1cs")
    pos = 0
    cons: list[Constraint] = []
    try:
        for _ in range(m):
            lcs: list[dict[int, int]] = []
            for _ in range(3):
                (n,) = struct.unpack_from("<I", body, pos)
                pos += 4
                lc: dict[int, int] = {}
                for _ in range(n):
                    (k,) = struct.unpack_from("<I", body, pos)
                    v = _from_le(body[pos + 4 : pos + 36])
                    pos += 36
                    if k >= n_wires or not 0 < v < R:
                        raise FormatError("r1cs.constraints", "wire id or coefficient out of range", k)
                    lc[k] = v
                lcs.append(lc)
            cons.append(cast(Constraint, tuple(lcs)))  # three linear combinations
    except struct.error:
        raise FormatError("r1cs.constraints", "section truncated", pos) from None
    npub = n_out + n_pub_in
    return R1CS(
        n_vars=n_wires,
        n_public=npub,
        constraints=cons,
        labels=[""] * m,
        input_names={},
        public_names=[f"public[{i}]" for i in range(npub)],
        _perm=list(range(n_wires)),
    )


# ---------------------------------------------------------------- .wtns
def wtns_bytes(witness: Sequence[int]) -> bytes:
    header = struct.pack("<I", 32) + _le(R) + struct.pack("<I", len(witness))
    return _bin_file(b"wtns", 2, [(1, header), (2, b"".join(_le(v % R) for v in witness))])


def write_wtns(path: Path | str, witness: Sequence[int]) -> None:
    Path(path).write_bytes(wtns_bytes(witness))


def read_wtns(data: bytes) -> list[int]:
    _, secs = _read_bin(data, b"wtns", "wtns")
    h = _one(secs, 1, "wtns")
    if len(h) < 40 or struct.unpack_from("<I", h)[0] != 32 or _from_le(h[4:36]) != R:
        raise FormatError("wtns.header", "must be over the BN254 scalar field (n8 = 32)", h[:4].hex())
    (n,) = struct.unpack_from("<I", h, 36)
    body = _one(secs, 2, "wtns")
    if len(body) != 32 * n:
        raise FormatError("wtns.witness", f"must hold {n} values of 32 bytes", len(body))
    out = [_from_le(body[i : i + 32]) for i in range(0, len(body), 32)]
    for i, v in enumerate(out):
        if v >= R:
            raise FormatError(f"wtns.witness[{i}]", "must be < r", v)
    return out


# ---------------------------------------------------------------- .zkey (snarkjs Groth16)
_RQ_INV = pow(pow(2, 256, C.Q), -1, C.Q)  # Montgomery form -> standard, base field
_RR_INV2 = pow(pow(2, 256, R), -2, R)  # zkey coefficients are stored as c * R^2 mod r


def _fq_lem(b: bytes, field: str) -> int:
    v = _from_le(b)
    if v >= C.Q:
        raise FormatError(field, "coordinate is not reduced mod q", v)
    return v * _RQ_INV % C.Q


def _g1_lem(b: bytes, field: str) -> C.G1Point:
    if not any(b):
        return None
    p = (_fq_lem(b[:32], field), _fq_lem(b[32:64], field))
    if not C.g1_on_curve(p):
        raise FormatError(field, "G1 point is not on the curve", None)
    return p


def _g2_lem(b: bytes, field: str, subgroup: bool = True) -> C.G2Point:
    if not any(b):
        return None
    p = ((_fq_lem(b[:32], field), _fq_lem(b[32:64], field)), (_fq_lem(b[64:96], field), _fq_lem(b[96:128], field)))
    if not C.g2_on_curve(p):
        raise FormatError(field, "G2 point is not on the curve", None)
    if subgroup and not C.g2_in_subgroup(p):
        raise FormatError(field, "G2 point is not in the order-r subgroup", None)
    return p


@overload
def _points(body: bytes, count: int, g2: Literal[False], field: str) -> list[C.G1Point]: ...
@overload
def _points(body: bytes, count: int, g2: Literal[True], field: str) -> list[C.G2Point]: ...
def _points(body: bytes, count: int, g2: bool, field: str) -> list[C.G1Point] | list[C.G2Point]:
    size = 128 if g2 else 64
    if len(body) != count * size:
        raise FormatError(field, f"must hold {count} points of {size} bytes", len(body))
    if g2:
        # every B2 point is checked on the curve; subgroup membership (a 254-bit multiplication per point) is checked
        # on random linear combinations sum(rho_i P_i) instead. A point with a component of order p in the twist's
        # cofactor group (smallest prime factor of the G2 cofactor: 10069) survives one combination with probability
        # <= 1/10069, so two independent ones miss it with probability <= 1e-8; the prover also refuses to output a
        # pi_B outside the subgroup (zk.prove), so a bad key cannot leak witness residues through pi_B.
        pts = [_g2_lem(body[i : i + size], f"{field}[{i // size}]", subgroup=False) for i in range(0, len(body), size)]
        import secrets

        for _ in range(2):
            comb = C.g2_msm(pts, [1 + secrets.randbelow(R - 1) for _ in pts])
            if not C.g2_in_subgroup(comb):
                raise FormatError(field, "a G2 point is not in the order-r subgroup", None)
        return pts
    return [_g1_lem(body[i : i + size], f"{field}[{i // size}]") for i in range(0, len(body), size)]


def read_zkey(data: bytes) -> ProvingKey:
    """A snarkjs Groth16 ``.zkey`` (e.g. from a multi-party ceremony) as a ProvingKey for ``prove``."""
    _, secs = _read_bin(data, b"zkey", "zkey")
    s1 = _one(secs, 1, "zkey")
    if struct.unpack_from("<I", s1)[0] != 1:
        raise FormatError("zkey.protocol", "must be 1 (groth16)", struct.unpack_from("<I", s1)[0])
    h = _one(secs, 2, "zkey")
    try:
        n8q = struct.unpack_from("<I", h, 0)[0]
        q = _from_le(h[4 : 4 + n8q])
        n8r = struct.unpack_from("<I", h, 4 + n8q)[0]
        r = _from_le(h[8 + n8q : 8 + n8q + n8r])
        if (n8q, q, n8r, r) != (32, C.Q, 32, R):
            raise FormatError("zkey.header", "must be a BN254 (bn128) key", n8q)
        pos = 8 + 64
        n_vars, n_public, dom = struct.unpack_from("<III", h, pos)
        pos += 12
        alpha1 = _g1_lem(h[pos : pos + 64], "zkey.alpha1")
        pos += 64  # noqa: E702
        beta1 = _g1_lem(h[pos : pos + 64], "zkey.beta1")
        pos += 64  # noqa: E702
        beta2 = _g2_lem(h[pos : pos + 128], "zkey.beta2")
        pos += 128  # noqa: E702
        gamma2 = _g2_lem(h[pos : pos + 128], "zkey.gamma2")
        pos += 128  # noqa: E702
        delta1 = _g1_lem(h[pos : pos + 64], "zkey.delta1")
        pos += 64  # noqa: E702
        delta2 = _g2_lem(h[pos : pos + 128], "zkey.delta2")
        pos += 128  # noqa: E702
    except struct.error:
        raise FormatError("zkey.header", "truncated", len(h)) from None
    if dom <= 0 or dom & (dom - 1) or n_public >= n_vars:
        raise FormatError("zkey.header", "domain size must be a power of two and nPublic < nVars", dom)
    ic = _points(_one(secs, 3, "zkey"), n_public + 1, False, "zkey.IC")
    s4 = _one(secs, 4, "zkey")
    (ncoef,) = struct.unpack_from("<I", s4, 0)
    if len(s4) != 4 + ncoef * 44:
        raise FormatError("zkey.coeffs", f"must hold {ncoef} coefficients of 44 bytes", len(s4))
    a_rows: list[list[tuple[int, int]]] = [[] for _ in range(dom)]
    b_rows: list[list[tuple[int, int]]] = [[] for _ in range(dom)]
    for i in range(ncoef):
        o = 4 + 44 * i
        mtx, row, sig = struct.unpack_from("<III", s4, o)
        if mtx > 1 or row >= dom or sig >= n_vars:
            raise FormatError(f"zkey.coeffs[{i}]", "matrix, row or signal out of range", (mtx, row, sig))
        v = _from_le(s4[o + 12 : o + 44])
        if v >= R:
            raise FormatError(f"zkey.coeffs[{i}]", "value must be < r", v)
        (a_rows if mtx == 0 else b_rows)[row].append((sig, v * _RR_INV2 % R))
    return ProvingKey(
        n_vars=n_vars,
        n_public=n_public,
        domain_size=dom,
        alpha1=alpha1,
        beta1=beta1,
        beta2=beta2,
        gamma2=gamma2,
        delta1=delta1,
        delta2=delta2,
        ic=ic,
        a_rows=a_rows,
        b_rows=b_rows,
        a_points=_points(_one(secs, 5, "zkey"), n_vars, False, "zkey.A"),
        b1_points=_points(_one(secs, 6, "zkey"), n_vars, False, "zkey.B1"),
        b2_points=_points(_one(secs, 7, "zkey"), n_vars, True, "zkey.B2"),
        c_points=_points(_one(secs, 8, "zkey"), n_vars - n_public - 1, False, "zkey.C"),
        h_points=_points(_one(secs, 9, "zkey"), dom, False, "zkey.H"),
        development=False,
    )


def load_zkey(path: Path | str) -> ProvingKey:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise FormatError("zkey", f"cannot read: {e.strerror or e}", str(path)) from None
    return read_zkey(data)


_RQ = pow(2, 256, C.Q)
_RR2 = pow(2, 512, R)


def _g1_lem_bytes(p: C.G1Point) -> bytes:
    if p is None:
        return b"\0" * 64
    return _le(p[0] * _RQ % C.Q) + _le(p[1] * _RQ % C.Q)


def _g2_lem_bytes(p: C.G2Point) -> bytes:
    if p is None:
        return b"\0" * 128
    return b"".join(_le(c * _RQ % C.Q) for c in (*p[0], *p[1]))


def zkey_bytes(pk: ProvingKey) -> bytes:
    """A snarkjs Groth16 ``.zkey`` for ``pk`` (so ``snarkjs groth16 prove`` runs on a dprag key). The
    contributions section is empty: such a key comes from dprag's DEVELOPMENT setup or an imported ceremony."""
    header = (
        struct.pack("<I", 32)
        + _le(C.Q)
        + struct.pack("<I", 32)
        + _le(R)
        + struct.pack("<III", pk.n_vars, pk.n_public, pk.domain_size)
        + _g1_lem_bytes(pk.alpha1)
        + _g1_lem_bytes(pk.beta1)
        + _g2_lem_bytes(pk.beta2)
        + _g2_lem_bytes(pk.gamma2)
        + _g1_lem_bytes(pk.delta1)
        + _g2_lem_bytes(pk.delta2)
    )
    coefs = []
    for mtx, rows in ((0, pk.a_rows), (1, pk.b_rows)):
        for row_i, row in enumerate(rows):
            for sig, v in row:
                coefs.append(struct.pack("<III", mtx, row_i, sig) + _le(v * _RR2 % R))
    sections = [
        (1, struct.pack("<I", 1)),
        (2, header),
        (3, b"".join(_g1_lem_bytes(p) for p in pk.ic)),
        (4, struct.pack("<I", len(coefs)) + b"".join(coefs)),
        (5, b"".join(_g1_lem_bytes(p) for p in pk.a_points)),
        (6, b"".join(_g1_lem_bytes(p) for p in pk.b1_points)),
        (7, b"".join(_g2_lem_bytes(p) for p in pk.b2_points)),
        (8, b"".join(_g1_lem_bytes(p) for p in pk.c_points)),
        (9, b"".join(_g1_lem_bytes(p) for p in pk.h_points)),
        (10, b"\0" * 64 + struct.pack("<I", 0)),
    ]
    return _bin_file(b"zkey", 1, sections)


def write_zkey(path: Path | str, pk: ProvingKey) -> None:
    Path(path).write_bytes(zkey_bytes(pk))
