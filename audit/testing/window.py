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

from dprag.accounting.collusion import exact_sigma
from dprag.accounting.noise.source import RandomSource

from ..account import AccountClient, AccountKey
from ..encoding import encode
from ..policy import CoalitionPolicy, GenerationPolicy, Policy, RetrievalPolicy, SamplerSpec
from ..service import ProviderService
from ..toy import HashEmbedder, ToyGenerator, ToyTextGenerator

CLINIC = [f"patient {i} asthma protocol inhaler drug ANSWER: zorvatin" for i in range(30)] + [
    f"note {i} garden weather rain" for i in range(70)
]
LEGAL = [f"case {i} contract dispute court ANSWER: settled" for i in range(20)] + [
    f"memo {i} lunch menu soup" for i in range(30)
]


def toy_policy(
    algorithm: str = "murag",
    *,
    n: int = 20,
    k_max: int = 5,
    window: str = "w1",
    max_queries_per_doc: int = 2,
    mechanism: str = "pure-dp-rag",
    replayable: bool = True,
    vote_selection: str = "universal",
    vote_delta: float | None = None,
    abstain_empty: bool = False,
) -> Policy:
    sens = ((1 << 20) >> 10) + 1
    if algorithm == "murag":
        gen = GenerationPolicy(
            algorithm="murag",
            m=10,
            epsilon_token=4.0,
            max_private_tokens=3,
            max_queries_per_doc=max_queries_per_doc,
            tau=300,
        )
    else:
        gen = GenerationPolicy(
            algorithm="murag-ada",
            m=10,
            epsilon_token=4.0,
            max_private_tokens=3,
            max_queries_per_doc=max_queries_per_doc,
            edges=(1024, 800, 600, 400, 200),
            epsilon_thr=1.0,
        )
    if mechanism == "dp-ksa":
        import dataclasses

        # 20 voters (Top-20 of the charged documents) agree on the toy answer word when they read the clinic's
        # answer documents (gap d_1 = 20): the PTR offset at ε_ptr = 4 (discrete Laplace scale 1/2, δ = 1e-12) is
        # c = 13, so the test passes unless the noise is <= -5 (probability e^-10/(1+e^-2) = 4.0e-5)
        gen = dataclasses.replace(
            gen,
            m=20,
            mechanism="dp-ksa",
            ksa_epsilon_em=2.0,
            ksa_epsilon_ptr=4.0,
            ksa_delta=1e-12,
            ksa_max_keywords=5,
            ksa_response_tokens=8,
            ksa_replayable=replayable,
        )
    if mechanism == "answer-vote":
        import dataclasses

        gen = dataclasses.replace(
            gen,
            mechanism="answer-vote",
            vote_epsilon=4.0,
            vote_threshold=2.0,
            key_words=2,
            normalizer="basic",
            vote_selection=vote_selection,
            vote_delta=vote_delta,
            abstain_empty=abstain_empty,
        )
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
        generation=gen,
    )


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
    **kw,
) -> ProviderService:
    """A fresh toy window (every random choice from its committed seed and the signed requests). Tests fix
    the seed and the clients' nonces, so a window is reproducible; ``seed=None`` draws a real one. ``store``:
    None for the window's SQLite file, else a ``postgresql://`` URL (default: ``$DPRAG_TEST_STORE`` if set, so the
    whole suite can run against PostgreSQL)."""
    emb = HashEmbedder(32)
    store = store if store is not None else (os.environ.get("DPRAG_TEST_STORE") or None)
    return ProviderService.create(
        directory,
        policy=toy_policy(algorithm, **kw),
        embedder=emb,
        seed=seed,
        embedder_descriptor=emb.descriptor({"clinic": len(CLINIC), "legal": len(LEGAL)}),
        generator=ToyGenerator(),
        tenants={"clinic": CLINIC, "legal": LEGAL},
        accounts=registry(ACCOUNTS if accounts is None else accounts),
        store=store,
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
    )


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
