"""A small, fully offline audit window (toy embedder and generator) for tests, fuzzing and the quick demo.

``build_window(directory, ...)`` creates a provider with two tenants (citations on for one), several
accounts, serves a fixed script of questions and exports the bundle; returns paths and the receipts.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from dprag.accounting.noise.source import RandomSource

from ..client.account import AccountClient
from ..protocol.encoding import encode
from ..protocol.ledger import NoteSigner
from ..protocol.request import AccountKey
from ..provider.service import ProviderService
from .toy import CLINIC, LEGAL, HashEmbedder, ToyGenerator, ToyTextGenerator, toy_policy

ACCOUNTS = {"alice": "clinic", "bob": "clinic", "carol": "legal"}
SCRIPT = [
    ("alice", "asthma protocol inhaler patient"),
    ("bob", "garden weather rain note"),
    ("carol", "contract dispute court case"),
]


@dataclass
class Window:
    directory: Path
    bundle: Path
    receipts: Path
    service: ProviderService | None
    clients: dict | None = None


def account_key(name: str) -> AccountKey:
    """A fixed test key per account name (tests only: real accounts use AccountKey.generate())."""
    return AccountKey(hashlib.sha256(b"dprag-test-account\x00" + name.encode()).digest())


def registry(accounts: dict[str, str]) -> dict[str, tuple[str, str]]:
    return {a: (t, account_key(a).vkey) for a, t in accounts.items()}


def client(svc: ProviderService, account: str, directory: Path | None = None, confirm_q: bool = True) -> AccountClient:
    """The account's client for a toy window (computing Q itself with the committed toy embedder)."""
    return AccountClient(
        account,
        svc.policy.window,
        account_key(account),
        provider_vkey=svc.signer.vkey(),
        origin=svc.origin,
        embedder=HashEmbedder(32) if confirm_q else None,
        embedding_scale=svc.embedder_descriptor["embedding_scale"],
        directory=directory,
        nonces=RandomSource.from_seed(b"dprag-test-nonces", account.encode()),
    )


def open_service(
    directory: Path,
    algorithm: str = "murag",
    accounts: dict | None = None,
    seed: bytes | None = b"\x05" * 32,
    store: str | None = None,
    signer: NoteSigner | None = None,
    generator: ToyGenerator | None = None,
    allow_weak: bool = True,
    **kw,
) -> ProviderService:
    """A fresh toy window (every random choice from its committed seed and the signed requests). Tests fix
    the seed and the clients' nonces, so a window is reproducible; ``seed=None`` draws a real one. ``store``:
    None for the window's SQLite file, else a ``postgresql://`` URL (default: ``$DPRAG_TEST_STORE`` if set, so the
    whole suite can run against PostgreSQL).
    ``signer``: the provider key, ``generator``: a toy generator (default: fresh ones). ``allow_weak``: the toy
    policies certify ε = 42 (weak under the auditor's default limit), so they are served with it by default."""
    emb = HashEmbedder(32)
    store = store if store is not None else (os.environ.get("DPRAG_TEST_STORE") or None)
    return ProviderService.create(
        directory,
        policy=toy_policy(algorithm, **kw),
        embedder=emb,
        seed=seed,
        embedder_descriptor=emb.descriptor({"clinic": len(CLINIC), "legal": len(LEGAL)}),
        generator=generator if generator is not None else ToyGenerator(),
        tenants={"clinic": CLINIC, "legal": LEGAL},
        accounts=registry(ACCOUNTS if accounts is None else accounts),
        store=store,
        signer=signer,
        allow_weak=allow_weak,
    )


def serve_loop(directory: str, account: str, count: int, released: str, start: int = 0) -> None:
    """Reopen the service at ``directory`` and serve ``count`` clinic questions for ``account``, appending each
    receipt to ``released`` only after ``query`` returned (what has been released). Used by the crash and
    concurrency tests, which run it in child processes."""
    svc = reopen_service(Path(directory))
    acct = client(svc, account, directory=Path(directory) / "accounts" / account)
    with open(released, "ab") as out:
        for i in range(start, start + count):
            q = ["asthma protocol inhaler patient", "inhaler drug protocol", "garden weather rain"][i % 3]
            r = acct.ask(svc, f"{q} {i}")
            out.write(encode({"receipt": r.receipt, "top": r.citations}) + b"\n")
            out.flush()
            os.fsync(out.fileno())
    svc.close()


def open_text_service(
    directory: Path,
    generator=None,
    *,
    algorithm: str = "murag",
    replayable: bool = True,
    seed: bytes | None = b"\x05" * 32,
    **kw,
) -> ProviderService:
    """A fresh toy window whose generator only returns text (policy mechanism 'dp-ksa'), the embedder named
    by object; ``generator`` defaults to the replayable ``ToyTextGenerator``."""
    emb = HashEmbedder(32)
    return ProviderService.create(
        directory,
        policy=toy_policy(algorithm, mechanism="dp-ksa", replayable=replayable, **kw),
        embedder=emb,
        seed=seed,
        generator=generator or ToyTextGenerator(),
        tenants={"clinic": CLINIC, "legal": LEGAL},
        accounts=registry(ACCOUNTS),
        allow_weak=True,
    )


def export_and_verify(svc: ProviderService, out: Path, clients: dict):
    """Export ``svc``'s bundle to ``out / "bundle"``, write every client's receipts to ``out / "receipts.jsonl"``,
    close ``svc``, and verify the bundle against those receipts; returns the verdict."""
    from ..verify import verify

    bundle = svc.export_bundle(out / "bundle")
    svc.close()
    receipts = out / "receipts.jsonl"
    receipts.write_bytes(b"".join(encode(e) + b"\n" for c in clients.values() for e in c.receipts))
    return verify(bundle, receipts=receipts)


def reopen_service(directory: Path) -> ProviderService:
    return ProviderService.open(directory, embedder=HashEmbedder(32), generator=ToyGenerator())


def build_window(directory: str | Path, algorithm: str = "murag", rounds: int = 4, close: bool = True, **kw) -> Window:
    d = Path(directory)
    shutil.rmtree(d, ignore_errors=True)
    svc = open_service(d / "svc", algorithm, **kw)
    clients = {a: client(svc, a) for a in ACCOUNTS}
    lines = []
    for i in range(rounds):
        for acct, q in SCRIPT:
            r = clients[acct].ask(svc, f"{q} {i}")
            lines.append(encode({"receipt": r.receipt, "top": r.citations}).decode())
    bundle = svc.export_bundle(d / "bundle")
    receipts = d / "receipts.jsonl"
    receipts.write_text("".join(x + "\n" for x in lines))
    if close:
        svc.close()
        svc = None
    return Window(d, bundle, receipts, svc, clients)
