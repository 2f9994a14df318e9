"""``dprag serve --toy``: a service directory that starts in seconds (hash embedder, toy generator, two tenants,
accounts whose keys it writes), for tests and smoke checks of the HTTP API.

Layout it writes under DIR, besides the service directory itself: ``accounts/<name>/`` an account directory as
``dprag account new`` makes it (``account.key`` 0600, ``account.vkey``, ``config.json`` pinning the provider key and
the toy embedder, so the account computes Q itself); ``auditor.key`` (0600) and ``auditor.vkey``: the key the
confidential bundle export is authenticated with; ``provider.vkey`` and ``chain.id``: what an auditor pins.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dprag.accounting.collusion import exact_sigma

from ..account import AccountKey
from ..policy import CoalitionPolicy, GenerationPolicy, Policy, RetrievalPolicy, SamplerSpec
from ..toy import HashEmbedder, ToyGenerator

CLINIC = [f"patient {i} asthma protocol inhaler drug ANSWER: zorvatin" for i in range(30)] + [
    f"note {i} garden weather rain" for i in range(70)
]
LEGAL = [f"case {i} contract dispute court ANSWER: settled" for i in range(20)] + [
    f"memo {i} lunch menu soup" for i in range(30)
]


def toy_policy(window: str = "toy-1", n: int = 200, k_max: int = 4) -> Policy:
    """MuRAG over the toy corpora; citations on for the clinic; ``n`` queries per account."""
    sens = ((1 << 20) >> 10) + 1
    return Policy(
        window=window,
        retrieval=RetrievalPolicy(
            enabled_tenants=("clinic",),
            K=5,
            n=n,
            epsilon_acc=1.0,
            delta_acc=1e-6,
            sigma=exact_sigma(1.0, 1e-6, n, sens),
            sensitivity=sens,
            score_clip=(0, 1 << 20),
            score_shift=10,
            sampler=SamplerSpec(9.5, 64, 1e-12),
        ),
        coalition=CoalitionPolicy(k_max=k_max, delta_policy=1e-5),
        generation=GenerationPolicy(
            algorithm="murag", m=10, epsilon_token=4.0, max_private_tokens=3, max_queries_per_doc=20, tau=300
        ),
    )


def toy_accounts(count: int) -> dict[str, str]:
    """``count`` accounts: alice, bob, carol, dave, then a05, a06, ... (carol on the legal tenant, the rest clinic)."""
    names = ["alice", "bob", "carol", "dave"][:count] + [f"a{i:02d}" for i in range(5, count + 1)]
    return {a: ("legal" if a == "carol" else "clinic") for a in names}


def _private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def make_toy_directory(
    d: Path, *, store: str | None = None, n: int = 200, accounts: int = 4, seed: bytes | None = None
):
    """Create the toy service directory at ``d`` (see module docstring); returns the open ProviderService."""
    from ..service import ProviderService

    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    registry = toy_accounts(accounts)
    keys = {a: AccountKey.generate() for a in registry}
    auditor = AccountKey.generate()
    emb = HashEmbedder(32)
    svc = ProviderService.create(
        d / "service",
        policy=toy_policy(n=n),
        embedder=emb,
        embedder_descriptor=emb.descriptor({"clinic": len(CLINIC), "legal": len(LEGAL)}),
        generator=ToyGenerator(),
        tenants={"clinic": CLINIC, "legal": LEGAL},
        accounts={a: (t, keys[a].vkey) for a, t in registry.items()},
        store=store,
        seed=seed,
    )
    for a, k in keys.items():
        ad = d / "accounts" / a
        ad.mkdir(parents=True, exist_ok=True)
        _private(ad / "account.key", k.to_hex() + "\n")
        (ad / "account.vkey").write_text(k.vkey + "\n")
        cfg = {
            "account": a,
            "window": svc.policy.window,
            "provider_key": svc.signer.vkey(),
            "embedder": "toy-hash-32",
            "embedding_scale": int(svc.embedder_descriptor["embedding_scale"]),
        }
        (ad / "config.json").write_text(json.dumps(cfg, sort_keys=True) + "\n")
    _private(d / "auditor.key", auditor.to_hex() + "\n")
    (d / "auditor.vkey").write_text(auditor.vkey + "\n")
    (d / "provider.vkey").write_text(svc.signer.vkey() + "\n")
    (d / "chain.id").write_text(svc.chain_id + "\n")
    return svc


def open_toy_directory(d: Path, *, store: str | None = None):
    from ..service import ProviderService

    return ProviderService.open(Path(d) / "service", embedder=HashEmbedder(32), generator=ToyGenerator(), store=store)
