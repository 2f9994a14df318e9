"""The auditor's Groth16 key for the zk tenant (spec/zk.md's trust rule): the demo plays the auditor, runs the
development setup and hands the provider only the proving key."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from dprag.audit.protocol.policy import Policy
from dprag.errors import InvalidParameterError
from dprag.lab.demo.config import DemoConfig


@dataclass
class AuditorZk:
    """The AUDITOR's Groth16 key for the zk tenant's noise-then-select circuit. The demo plays the auditor
    here: it runs the DEVELOPMENT setup (``zk_attest.setup_for``; whoever runs it knows the toxic waste), keeps
    ``verification_key.json`` and hands the provider only the proving key. A setup the provider made would leave
    the verdict's attestation at replay (spec/zk.md); a multi-party ceremony ``.zkey`` replaces this setup in a
    real deployment."""

    pk: object
    vk_path: Path
    key_file: Path
    tenant: str
    n: int
    dim: int
    constraints: int
    domain: int
    cached: bool
    seconds: float


def auditor_zk_setup(cfg: DemoConfig, policy: Policy, schema: dict, dim: int, out_dir: Path) -> AuditorZk:
    """Make (or reuse from the auditor's key cache) the development key of the zk tenant's circuit; write the
    verification key to ``out_dir/verification_key.json``. The auditor derives every circuit parameter from the
    policy and the public schema (N documents, dimension), never from the provider's state."""
    import hashlib
    import pickle

    from dprag.audit.protocol import zk_attest
    from dprag.audit.protocol.retrieval import noise_table
    from dprag.rag_adapters.common import cache_dir
    from dprag.zk.circuits.noise_then_select import PUBLIC_NAMES
    from dprag.zk.formats import vk_to_json, write_json

    t0 = time.perf_counter()
    r = policy.retrieval
    sizes = {t: schema[t] for t in r.zk_tenants}
    if len(set(sizes.values())) != 1:
        raise InvalidParameterError(
            "tenants", "the zk tenants must hold the same number of documents (one verification key per window)", sizes
        )
    tenant = sorted(sizes)[0]
    n = sizes[tenant]
    bound = noise_table(r.sigma, r.sampler.tail, r.sampler.precision_bits).support_bound
    params = zk_attest.circuit_params(policy, n, dim, bound)
    circ = zk_attest.circuit(policy, n, dim, bound)
    # the circuit's shape is part of the key's name: a changed circuit (v3 blinds Z_idx) needs a new setup
    shape = {"n_vars": circ.r1cs.n_vars, "n_constraints": circ.r1cs.n_constraints, "public": list(PUBLIC_NAMES)}
    name = hashlib.sha256(json.dumps({**params, **shape}, sort_keys=True).encode()).hexdigest()[:24]
    cache = Path(cfg.zk_key_cache) if cfg.zk_key_cache else cache_dir() / "demo-auditor-zk"
    # the auditor's own private cache (0600 files in its cache directory; a pickle, since parsing and re-checking
    # every point of a .zkey takes longer than the setup): the auditor reuses its key across windows, as it
    # would a ceremony key
    key_file = cache / f"noise-then-select-{name}.pk.pickle"
    pk = None
    if key_file.is_file():
        try:
            pk = pickle.loads(key_file.read_bytes())
        except Exception:  # a damaged cache entry is made again
            pk = None
    cached = pk is not None
    if pk is None:
        pk, _ = zk_attest.setup_for(policy, n, dim, bound)
        cache.mkdir(parents=True, exist_ok=True)
        tmp = key_file.with_name(key_file.name + f".{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            pickle.dump(pk, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, key_file)
    out_dir.mkdir(parents=True, exist_ok=True)
    vk_path = out_dir / "verification_key.json"
    write_json(vk_path, vk_to_json(pk.verifying_key()))
    (out_dir / "README.txt").write_text(
        "The AUDITOR's Groth16 verification key for the zk tenant's noise-then-select circuit.\n"
        "DEVELOPMENT ONLY: made by dprag's development setup, run by the demo acting as the auditor (not by the\n"
        f"provider); the provider received only the proving key ({key_file}). Whoever ran the setup knows the toxic\n"
        "waste, so in a real deployment the auditor makes it (or imports a multi-party ceremony .zkey) and a\n"
        "provider-made key leaves the attestation at replay (spec/zk.md).\n"
        f"Verify: dprag audit verify <bundle> --zk-vkey {vk_path}\n"
    )
    return AuditorZk(
        pk=pk,
        vk_path=vk_path,
        key_file=key_file,
        tenant=tenant,
        n=n,
        dim=dim,
        constraints=circ.r1cs.n_constraints,
        domain=pk.domain_size,
        cached=cached,
        seconds=time.perf_counter() - t0,
    )
