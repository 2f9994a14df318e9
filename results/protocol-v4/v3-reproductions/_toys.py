"""Toy pieces for the v3 reproductions: a generator that serves another request while it generates (the idea of
``_ServesDuring`` in the v4 tests, on v3's API), and helpers to open v3 toy windows with it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from dprag.audit.provider.service import ProviderService
from dprag.audit.testing import window as fx
from dprag.audit.testing.toy import HashEmbedder, ToyGenerator


class ServesDuring(ToyGenerator):
    """The toy generator that, while generating the answer to a given question, first runs a callback (another
    account's request, served and recorded meanwhile): a long generation, with no clock."""

    def __init__(self):
        super().__init__()
        self.during: dict[str, object] = {}

    def _meanwhile(self, prompts) -> None:
        for q in sorted({p.question for p in prompts}):
            fn = self.during.pop(q, None)
            if fn is not None:
                fn()

    def start(self, prompts, *, max_new_tokens: int = 1):
        self._meanwhile(prompts)
        return super().start(prompts, max_new_tokens=max_new_tokens)

    def generate_many(self, prompts, max_new_tokens: int):
        self._meanwhile(prompts)
        return super().generate_many(prompts, max_new_tokens)


def create(directory: Path, generator=None, accounts=None, tenants=None, signer=None, seed=b"\x05" * 32, **policy_kw):
    """A v3 toy window (as ``fx.open_service``, but with a generator of our choosing)."""
    emb = HashEmbedder(32)
    tenants = tenants or {"clinic": fx.CLINIC, "legal": fx.LEGAL}
    return ProviderService.create(
        directory,
        policy=fx.toy_policy(**policy_kw),
        embedder=emb,
        seed=seed,
        signer=signer,
        embedder_descriptor=emb.descriptor({t: len(v) for t, v in tenants.items()}),
        generator=generator or ToyGenerator(),
        tenants=tenants,
        accounts=fx.registry(fx.ACCOUNTS if accounts is None else accounts),
    )


def reopen(directory: Path, generator=None) -> ProviderService:
    return ProviderService.open(directory, embedder=HashEmbedder(32), generator=generator or ToyGenerator())


def charges_per_document(*bundles_or_openings, tenant: str = "clinic", upto: int | None = None) -> Counter:
    """How many charges each document of ``tenant`` took, over the query openings of the given bundles (each a
    bundle path, or (bundle path, max pos) to count only openings below a position)."""
    out: Counter = Counter()
    for b in bundles_or_openings:
        limit = None
        if isinstance(b, tuple):
            b, limit = b
        for line in (Path(b) / "auditor" / "openings.jsonl").read_bytes().splitlines():
            op = json.loads(line)
            if limit is not None and op["pos"] >= limit:
                continue
            if op["request"]["account"] not in fx.ACCOUNTS or fx.ACCOUNTS[op["request"]["account"]] != tenant:
                continue
            for ch in op["charge"]["charges"]:
                for i in ch["ids"]:
                    out[i] += 1
    return out
