"""``dprag serve --toy``: a service directory that starts in seconds (hash embedder, toy generator, two tenants,
accounts whose keys it writes), for tests and smoke checks of the HTTP API.

Layout it writes under DIR, besides the service directory itself: ``accounts/<name>/`` an account directory as
``dprag account new`` makes it (``account.key`` 0600, ``account.vkey``, ``config.json`` pinning the provider key and
the toy embedder, so the account computes Q itself); ``auditor.key`` (0600) and ``auditor.vkey``: the key the
confidential bundle export is authenticated with; ``provider.vkey`` and ``chain.id``: what an auditor pins.

TEST ONLY: with ``DPRAG_TEST_TOY_HOLD`` set in its environment, ``dprag serve --toy`` generates with
``HoldingToyGenerator`` (``toy_generator``), which holds the answer of chosen requests after their record committed,
so a fault test can kill a replica in exactly that state (tests/audit/test_replicas.py). Never set it in production.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path

from dprag.errors import InvalidParameterError

from ..encoding import loads_bounded
from ..policy import Policy
from ..request import AccountKey
from ..toy import CLINIC, LEGAL, HashEmbedder, ToyGenerator
from ..toy import toy_policy as _window_policy

#: TEST ONLY (see module docstring): the environment variable ``toy_generator`` reads
HOLD_ENV = "DPRAG_TEST_TOY_HOLD"


class HoldingToyGenerator(ToyGenerator):
    """TEST ONLY. The toy generator that, before generating the answer to a question ``match`` (a regular expression)
    finds, writes ``DIR/<first 16 hex of SHA-256(question)>.held`` (JSON: the question, this process's id, the time)
    and then holds ``seconds``. Generation runs after the request's record committed and before its answer is stored
    (spec/provider.md §6), so while the file exists and the hold lasts, the request is recorded — charged, its query
    leaf appended — and has no stored answer. It commits to what ``ToyGenerator`` commits to: the answers are the
    same, only later."""

    prompt_template = f"{ToyGenerator.__module__}.{ToyGenerator.__qualname__}"  # what a ToyGenerator window binds

    def __init__(self, match: str, seconds: float, directory: str | os.PathLike):
        super().__init__()
        self.match, self.seconds, self.dir = re.compile(match), float(seconds), Path(directory)

    def _hold(self, questions) -> None:
        for q in questions:
            if self.match.search(q):
                self.dir.mkdir(parents=True, exist_ok=True)
                name = hashlib.sha256(q.encode("utf-8")).hexdigest()[:16]
                tmp = self.dir / f"{name}.{os.getpid()}.tmp"
                tmp.write_text(json.dumps({"question": q, "pid": os.getpid(), "time": time.time()}))
                os.replace(tmp, self.dir / f"{name}.held")  # whole or absent
                time.sleep(self.seconds)
                return

    def start(self, prompts, *, max_new_tokens: int = 1):
        self._hold(sorted({p.question for p in prompts}))
        return super().start(prompts, max_new_tokens=max_new_tokens)

    def generate_many(self, prompts, max_new_tokens: int) -> list[str]:
        self._hold(sorted({p.question for p in prompts}))
        return super().generate_many(prompts, max_new_tokens)


def toy_generator() -> ToyGenerator:
    """The toy window's generator: ``ToyGenerator``, or, TEST ONLY, with ``DPRAG_TEST_TOY_HOLD`` set to JSON
    ``{"match": REGEX, "seconds": S, "dir": DIR}``, a ``HoldingToyGenerator`` (see its docstring)."""
    raw = os.environ.get(HOLD_ENV)
    if not raw:
        return ToyGenerator()
    try:
        cfg = loads_bounded(raw, what=HOLD_ENV)
        gen = HoldingToyGenerator(cfg["match"], cfg["seconds"], cfg["dir"])
    except (ValueError, KeyError, TypeError, re.error) as e:
        raise InvalidParameterError(HOLD_ENV, 'must be JSON {"match": REGEX, "seconds": S, "dir": DIR}', raw) from e
    if not 0 <= gen.seconds <= 3600:
        raise InvalidParameterError(HOLD_ENV, "seconds must lie in [0, 3600]", raw)
    return gen


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
    d: Path,
    *,
    store: str | None = None,
    n: int = 200,
    accounts: int = 4,
    seed: bytes | None = None,
    generator: ToyGenerator | None = None,
):
    """Create the toy service directory at ``d`` (see module docstring); returns the open ProviderService
    (``generator``: a ``ToyGenerator`` to serve with, ``toy_generator()`` for ``dprag serve --toy``)."""
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
        generator=ToyGenerator() if generator is None else generator,
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


def open_toy_directory(d: Path, *, store: str | None = None, generator: ToyGenerator | None = None):
    from ..service import ProviderService

    gen = ToyGenerator() if generator is None else generator
    return ProviderService.open(Path(d) / "service", embedder=HashEmbedder(32), generator=gen, store=store)
