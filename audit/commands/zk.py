"""``dprag zk demo`` / ``dprag zk verify``: the noise-then-select Groth16 circuit end to end, in snarkjs's files.

``demo`` builds the circuit for N rows and K winners on random data, runs the DEVELOPMENT setup (dprag samples the
toxic waste itself: such a key attests nothing against whoever ran it), proves, verifies, and writes
verification_key.json / proof.json / public.json (snarkjs), circuit.r1cs and witness.wtns (circom; the witness holds
the private matrix: demo data only) and demo.json into DIR. ``verify`` checks DIR's proof: exit 0 valid, 1 invalid,
2 unusable input (one line on stderr). ``snarkjs groth16 verify verification_key.json public.json proof.json`` gives
the same answer.
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import click

from dprag.errors import DpragError


@click.group()
def zk():
    """Zero-knowledge proofs (Groth16 over BN254, snarkjs-compatible files)."""


@zk.command("demo")
@click.option("--n", "n", type=click.IntRange(1, 1024), default=8, show_default=True, help="rows of the matrix (N)")
@click.option("--k", "k", type=click.IntRange(1, 14), default=2, show_default=True, help="winners (K)")
@click.option("--d", "d", type=click.IntRange(1, 4096), default=4, show_default=True, help="row dimension")
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="directory for the files")
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="local prover processes (one proof: its MSMs split; --proofs > 1: proofs in parallel)",
)
@click.option(
    "--proofs",
    "n_proofs",
    type=click.IntRange(1, 10000),
    default=1,
    show_default=True,
    help="prove this many random queries over the same index as one batch",
)
@click.option(
    "--scheduler",
    default=None,
    metavar="ADDR",
    help="prove the batch on the Dask cluster of this scheduler (e.g. tcp://host:8786; needs dprag "
    "installed on its workers) instead of local processes",
)
@click.option("--json", "as_json", is_flag=True, help="one JSON object on stdout")
def demo(n, k, d, out, workers, n_proofs, scheduler, as_json):
    """Build, set up (DEVELOPMENT ONLY), prove and verify noise-then-select on random data."""
    from dprag.zk import formats as F
    from dprag.zk.batch import connect, prove_many
    from dprag.zk.circuits import noise_then_select as nts
    from dprag.zk.setup import setup

    if k > n:
        raise click.UsageError("--k must be <= --n")
    if scheduler is not None and workers != 1:
        raise click.UsageError("--workers is for local proving; with --scheduler the cluster's workers prove")
    client = connect(scheduler) if scheduler is not None else None  # fail fast, before the setup
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    times = {}
    t = time.perf_counter()
    circ = nts.build(n, k, d)
    times["build_s"] = time.perf_counter() - t
    p = circ.params
    rnd = secrets.SystemRandom()
    vb = 1 << (p.value_bits - 1)
    E = [[rnd.randrange(-vb, vb) for _ in range(d)] for _ in range(n)]
    Q = [rnd.randrange(-vb, vb) for _ in range(d)]
    zb = 1 << (p.noise_bits - 1)
    z = [rnd.randrange(-zb, zb) for _ in range(n)]
    salt_q, salt_k = secrets.randbelow(1 << 128), secrets.randbelow(1 << 128)
    blind = secrets.randbelow(nts.R)  # the index commitment's blinding (one per index, shared by the batch)
    t = time.perf_counter()
    w = circ.witness(E, Q, z, salt_q, salt_k, blinding=blind)
    times["witness_s"] = time.perf_counter() - t
    public = circ.public(w)
    if public != circ.expected_public(E, Q, z, salt_q, salt_k, blinding=blind):
        raise DpragError("internal error: circuit commitments differ from the plain-Python ones")
    # further queries of the batch: fresh Q, z and salts over the same index E
    ws = [w]
    for _ in range(n_proofs - 1):
        Qi = [rnd.randrange(-vb, vb) for _ in range(d)]
        zi = [rnd.randrange(-zb, zb) for _ in range(n)]
        ws.append(circ.witness(E, Qi, zi, secrets.randbelow(1 << 128), secrets.randbelow(1 << 128), blinding=blind))
    t = time.perf_counter()
    pk = setup(circ.r1cs)
    times["setup_s"] = time.perf_counter() - t
    t = time.perf_counter()
    try:
        if client is None and n_proofs == 1:
            proofs = [nts.prove(pk, w, workers=workers)]
        else:
            proofs = prove_many(pk, ws, processes=1 if client else workers, scheduler=client)
    finally:
        if client is not None:
            client.close()
    times["prove_s"] = time.perf_counter() - t
    proof = proofs[0]
    vk = pk.verifying_key()
    t = time.perf_counter()
    oks = [nts.verify(vk, p, circ.public(x)) for p, x in zip(proofs, ws, strict=False)]
    ok = all(oks)
    times["verify_s"] = time.perf_counter() - t
    F.write_json(outdir / "verification_key.json", F.vk_to_json(vk))
    F.write_json(outdir / "proof.json", F.proof_to_json(proof))
    F.write_json(outdir / "public.json", F.public_to_json(public))
    F.write_r1cs(outdir / "circuit.r1cs", circ.r1cs)
    F.write_wtns(outdir / "witness.wtns", w)
    ids = nts.select(E, Q, z, p)
    info = {
        "schema": "dprag.zk.demo/1",
        "circuit": "noise_then_select",
        "params": p.__dict__,
        "constraints": circ.r1cs.n_constraints,
        "public_names": list(nts.PUBLIC_NAMES),
        "setup": "development (toxic waste known to this process: not an attestation against its runner)",
        "ids": ids,
        "valid": ok,
        "batch": {
            "proofs": n_proofs,
            "valid": sum(oks),
            "engine": "dask" if scheduler else "local",
            "workers": None if scheduler else workers,
        },
        **{key: round(v, 4) for key, v in times.items()},
    }
    F.write_json(outdir / "demo.json", info)
    if as_json:
        click.echo(json.dumps(info, sort_keys=True))
    else:
        click.echo(f"noise-then-select N={n} K={k} d={d}: {circ.r1cs.n_constraints} constraints, ids {ids}")
        batch = (
            f" ({n_proofs} proofs on {'Dask at ' + scheduler if scheduler else 'local processes'}, {sum(oks)} valid)"
            if n_proofs > 1 or scheduler
            else ""
        )
        click.echo(
            f"setup {times['setup_s']:.2f} s (DEVELOPMENT ONLY), prove {times['prove_s']:.2f} s{batch}, "
            f"verify {times['verify_s']:.2f} s: {'valid' if ok else 'INVALID'}"
        )
        click.echo(f"files in {outdir}")
    click.get_current_context().exit(0 if ok else 1)


@zk.command("verify")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="one JSON object on stdout")
def verify_cmd(directory, as_json):
    """Verify DIR/proof.json against DIR/public.json under DIR/verification_key.json (exit 0 / 1 / 2)."""
    from dprag.zk import formats as F
    from dprag.zk.verify import verify

    d = Path(directory)
    vk = F.read_vk(d / "verification_key.json")
    proof = F.read_proof(d / "proof.json")
    public = F.read_public(d / "public.json")
    if len(public) != vk.n_public:
        raise F.FormatError("public", f"the verification key has {vk.n_public} public signals", len(public))
    t = time.perf_counter()
    ok = verify(vk, proof, public)
    dt = time.perf_counter() - t
    if as_json:
        click.echo(
            json.dumps(
                {"schema": "dprag.zk.verify/1", "valid": ok, "n_public": vk.n_public, "verify_s": round(dt, 4)},
                sort_keys=True,
            )
        )
    else:
        click.echo(f"{'valid' if ok else 'INVALID'} proof ({vk.n_public} public signals, {dt:.2f} s)")
    click.get_current_context().exit(0 if ok else 1)
