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

from ..account import AccountKey
from ..policy import Policy
from ..toy import CLINIC, LEGAL, HashEmbedder, ToyGenerator
from ..toy import toy_policy as _window_policy


def toy_policy(window: str = "toy-1", n: int = 200, k_max: int = 4) -> Policy:
    """The test windows' MuRAG policy (``audit.testing.window.toy_policy``) with room for load: citations on for the
    clinic, ``n`` queries per account, 20 queries per document."""
    return _window_policy("murag", n=n, k_max=k_max, window=window, max_queries_per_doc=20)


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
