"""The attacks of spec/threat-model.md §3, each performed as the party it names would perform it.

A provider attack uses the provider's own service directory: its note key (``svc.signer``), its ledger
(``svc.ledger``), its auditor store (``svc.aud``), its budget stores and its seed — everything a dishonest
provider controls — and hands over a bundle it exported itself. An account attack uses only what an account
holds (its receipts file). Each returns an ``AttackResult``: the bundle, the receipts, any auditor inputs
(pinned key, trusted checkpoint), and what the verifier must conclude (FAIL naming ``check``, or PASS with
the framing attempt listed as rejected evidence).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..protocol.encoding import digest, encode
from ..protocol.policy import Policy, SamplerSpec
from ..protocol.receipts import sign_receipt
from ..protocol.request import AccountKey, Request, make_request
from ..provider.service import ProviderService
from .window import ACCOUNTS, SCRIPT, client, open_service, registry


@dataclass
class AttackResult:
    bundle: Path
    receipts: Path | None = None
    expect: str = "FAIL"  # the verdict the verifier must reach
    check: str | None = None  # the check that must name it (FAIL) / None
    verify_kwargs: dict = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class Attack:
    name: str
    party: str  # "provider" | "account" | "file"
    item: int  # the item of spec/threat-model.md §3
    run: Callable[[Path], AttackResult]


# ---------------------------------------------------------------------------------------------------------
# helpers: an honest start, then the provider's own hands on its state
# ---------------------------------------------------------------------------------------------------------
def _honest(d: Path, rounds: int = 2, **kw):
    shutil.rmtree(d, ignore_errors=True)
    svc = open_service(d / "svc", **kw)
    clients = {a: client(svc, a) for a in svc.registry}
    for i in range(rounds):
        for acct, q in SCRIPT:
            if acct in clients:
                clients[acct].ask(svc, f"{q} {i}")
    return svc, clients


def _receipts(d: Path, clients: dict, extra: list[bytes] = ()) -> Path:
    lines = [encode(e) for c in clients.values() for e in c.receipts] + list(extra)
    p = d / "receipts.jsonl"
    p.write_bytes(b"".join(x + b"\n" for x in lines))
    return p


def _raw(obj) -> bytes:
    """JSON as a cheating provider may write it: sorted and compact, but with no range or type rules."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _raw_digest(obj) -> str:
    return hashlib.sha256(_raw(obj)).hexdigest()


def _append(svc: ProviderService, leaf: bytes, opening: dict | None) -> int:
    """The provider writes a record of its own making: opening, leaf, a freshly signed checkpoint."""
    pos = svc.ledger.size
    if opening is not None:
        svc.aud.put_opening(pos, _raw({**opening, "pos": pos}))
    svc.ledger.append(leaf)
    svc.checkpoint_now()
    return pos


def _openings(svc: ProviderService) -> dict[int, dict]:
    return {pos: json.loads(body) for pos, body in svc.aud.openings(svc.ledger.size)}


def _wipe_budgets(svc: ProviderService) -> ProviderService:
    d = svc.dir
    with svc.store.write() as s:  # the provider empties its own spend rows
        s.execute("DELETE FROM budget_spend")
    svc.close()
    # constructed directly: the provider skips its own recovery check, which would refuse this state
    from dprag.audit.testing.toy import ToyGenerator

    from .toy import HashEmbedder

    return ProviderService(d, embedder=HashEmbedder(32), generator=ToyGenerator())


def _export(svc: ProviderService, d: Path) -> Path:
    return svc.export_bundle(d / "bundle")


# ---------------------------------------------------------------------------------------------------------
# 1. refunds: a record that gives budget back (v2: a recovery record; v3 has no such type, so the provider reuses
#    an answered request for a query leaf of its own), then the documents are served again
# ---------------------------------------------------------------------------------------------------------
def _refund(units_of: Callable[[int], object]) -> Callable[[Path], AttackResult]:
    def run(d: Path) -> AttackResult:
        svc, clients = _honest(d)
        ops = _openings(svc)
        pos, op = next((p, o) for p, o in ops.items() if o["charge"]["charges"][0]["ids"])
        ch = op["charge"]["charges"][0]
        charge = {
            "nonce": "00" * 16,
            "algorithm": svc.policy.generation.algorithm,
            "bins_released": None,
            "charges": [
                {"cost": {"kind": "pure", "epsilon_units": units_of(ch["cost"]["epsilon_units"])}, "ids": ch["ids"]}
            ],
        }
        leaf = json.loads(svc.ledger.leaf(pos))
        _append(
            svc,
            encode({**leaf, "h_charge": _raw_digest(charge)}),
            {
                "kind": "query",
                "request": op["request"],
                "qemb": op["qemb"],
                "top": op["top"],
                "nonce_top": op["nonce_top"],
                "charge": charge,
            },
        )
        svc = _wipe_budgets(svc)
        for acct, q in SCRIPT:
            clients[acct].ask(svc, f"{q} 0")  # the same questions, charged again from a wiped store
        return AttackResult(_export(svc, d), _receipts(d, clients), check="generation")

    return run


# ---------------------------------------------------------------------------------------------------------
# 2. noise grinding: records that move the ledger position, or requests under invented accounts
# ---------------------------------------------------------------------------------------------------------
def grind_empty_records(d: Path) -> AttackResult:
    svc, clients = _honest(d, rounds=1)
    for _ in range(5):
        charge = {"nonce": "00" * 16, "algorithm": "recovery", "bins_released": None, "charges": []}
        _append(
            svc,
            encode({"type": "recovery", "tenant": "clinic", "h_charge": digest(charge)}),
            {"kind": "recovery", "charge": charge},
        )
    clients["alice"].ask(svc, "asthma protocol inhaler patient 9")
    return AttackResult(
        _export(svc, d),
        _receipts(d, clients),
        check="canonical",
        note="position no longer enters the noise label; empty records are malformed",
    )


def grind_invented_account(d: Path) -> AttackResult:
    svc, clients = _honest(d, rounds=1)
    mallory = AccountKey(hashlib.sha256(b"mallory").digest())  # a key the provider made for itself
    req = Request(
        make_request(
            mallory, window=svc.policy.window, account="mallory", counter=1, question="asthma protocol", qemb=None
        ),
        "asthma protocol",
        None,
    )
    from ..protocol.registry import AccountEntry

    svc.registry.entries["mallory"] = AccountEntry("clinic", [(0, mallory.vkey)], 0)  # only in its own memory
    svc.serve(req)
    return AttackResult(_export(svc, d), _receipts(d, clients), check="requests")


# ---------------------------------------------------------------------------------------------------------
# 3. unbound query embeddings: the provider scores Q/4, so nothing clears τ
# ---------------------------------------------------------------------------------------------------------
class _ScaledQ(ProviderService):
    def _embed(self, req):
        return (super()._embed(req) // 4).astype(np.int16)


def unbound_q(d: Path) -> AttackResult:
    shutil.rmtree(d, ignore_errors=True)
    honest = open_service(d / "svc")
    honest.close()
    from dprag.audit.testing.toy import ToyGenerator

    from .toy import HashEmbedder

    svc = _ScaledQ(d / "svc", embedder=HashEmbedder(32), generator=ToyGenerator())
    clients = {a: client(svc, a) for a in svc.registry}
    for acct, q in SCRIPT:
        clients[acct].ask(svc, q)
    return AttackResult(_export(svc, d), _receipts(d, clients), check="requests")


# ---------------------------------------------------------------------------------------------------------
# 4. one leaf, many releases: fresh answers, one charge, five receipts for one position
# ---------------------------------------------------------------------------------------------------------
def many_releases(d: Path) -> AttackResult:
    svc, clients = _honest(d, rounds=1)
    entry = clients["alice"].receipts[0]
    body = {k: v for k, v in entry["receipt"].items() if k != "sig"}
    extra = []
    for i in range(4):
        fresh = dict(body, h_answer=hashlib.sha256(f"another answer {i}".encode()).hexdigest())
        extra.append(encode({"receipt": sign_receipt(fresh, svc.signer), "top": entry["top"]}))
    return AttackResult(_export(svc, d), _receipts(d, clients, extra), check="receipts")


class _Resampling(ProviderService):
    def _generate(self, question, top, retriever, h_req, ep):
        """Re-sample with fresh randomness until the answer differs from the committed one (up to 400 draws)."""
        from dprag.accounting.noise.source import RandomSource

        committed = super()._generate(question, top, retriever, h_req, ep)
        for _ in range(400):
            other = ep.rag_params.respond(question, top, retriever, ep.generator, source=RandomSource.system())
            if other.text != committed.text:
                return other
        return committed


def resampled_answers(d: Path) -> AttackResult:
    from dprag.audit.testing.toy import ToyGenerator

    from .toy import HashEmbedder
    from .window import CLINIC, LEGAL

    shutil.rmtree(d, ignore_errors=True)
    open_service(d / "svc").close()
    svc = _Resampling(d / "svc", embedder=HashEmbedder(32), generator=ToyGenerator())
    clients = {a: client(svc, a) for a in svc.registry}
    for i in range(3):
        for acct, q in SCRIPT:
            clients[acct].ask(svc, f"{q} {i}")
    p = d / "receipts.jsonl"  # the accounts hand over their questions too, so answers can be replayed
    p.write_bytes(b"".join(encode(e) + b"\n" for c in clients.values() for e in c.receipts))
    return AttackResult(
        _export(svc, d),
        p,
        check="generation",
        verify_kwargs={"corpus": {"clinic": CLINIC, "legal": LEGAL}, "replay_generator": ToyGenerator()},
        note="caught by answer replay; without it the answer text is bound only by receipts",
    )


# ---------------------------------------------------------------------------------------------------------
# answer-level voting (spec/accounting/rag.md §5) under the seen selection, served under other parameters than committed
# ---------------------------------------------------------------------------------------------------------
SEEN = dict(mechanism="answer-vote", vote_selection="seen", vote_delta=1e-6)


def _served_as(d: Path, committed: dict, served: Callable, replay: bool) -> tuple[Path, Path, dict]:
    """A toy window committed under ``toy_policy(**committed)`` whose provider serves ``served(rag_params)``
    instead (its own service, its own state); the accounts hand over their questions."""
    from dprag.audit.testing.toy import ToyGenerator

    from .window import CLINIC, LEGAL

    shutil.rmtree(d, ignore_errors=True)
    svc = open_service(d / "svc", **committed)
    svc.rag_params = svc.epochs[-1].rag_params = served(svc.rag_params)
    clients = {a: client(svc, a) for a in svc.registry}
    for i in range(2):
        for acct, q in SCRIPT:
            clients[acct].ask(svc, f"{q} {i}")
    kw = {"corpus": {"clinic": CLINIC, "legal": LEGAL}, "replay_generator": ToyGenerator()} if replay else {}
    return _export(svc, d), _receipts(d, clients), kw


def seen_cheaper_charges(d: Path) -> AttackResult:
    """Item 1 (under-charging): the policy commits the seen selection at ε_q = 4, δ_q = 1e-6; the provider runs
    it at ε = 2, so each RAG charge costs half the committed units and every document can be charged twice as
    often — its verdict would still claim the committed (ε, δ)."""
    import dataclasses

    b, r, _ = _served_as(d, SEEN, lambda p: dataclasses.replace(p, epsilon=2.0), replay=False)
    return AttackResult(b, r, check="generation", note="caught by the charge replay (units differ from the policy)")


def seen_selection_undeclared(d: Path) -> AttackResult:
    """Item 4 (answers): the policy commits the universal selection (pure ε: the verdict reports no generation
    δ) while the provider serves the seen selection (δ = 1e-6 per charge, and it releases keys the universal one
    would not): the charges are identical (both charge ε_q = 4), so only the answer replay can see it."""
    import dataclasses

    b, r, kw = _served_as(
        d, {"mechanism": "answer-vote"}, lambda p: dataclasses.replace(p, selection="seen", delta=1e-6), replay=True
    )
    return AttackResult(
        b,
        r,
        check="generation",
        verify_kwargs=kw,
        note="caught by answer replay; without it the answer text is bound only by receipts",
    )


# ---------------------------------------------------------------------------------------------------------
# 5. a false sampler claim: a table truncated at 0.5σ declared to be exact (TV = 0)
# ---------------------------------------------------------------------------------------------------------
@contextmanager
def _no_claim_check():
    saved = Policy.check_claims
    Policy.check_claims = lambda self, **_: self  # the provider skips its own check
    try:
        yield
    finally:
        Policy.check_claims = saved


def false_sampler_claim(d: Path) -> AttackResult:
    import dataclasses

    from .window import toy_policy

    shutil.rmtree(d, ignore_errors=True)
    pol = toy_policy()
    bad = dataclasses.replace(pol, retrieval=dataclasses.replace(pol.retrieval, sampler=SamplerSpec(0.5, 64, 0.0)))
    from dprag.audit.testing.toy import ToyGenerator

    from .toy import HashEmbedder
    from .window import CLINIC, LEGAL

    emb = HashEmbedder(32)
    with _no_claim_check():
        svc = ProviderService.create(
            d / "svc",
            policy=bad,
            embedder=emb,
            embedder_descriptor=emb.descriptor({"clinic": len(CLINIC), "legal": len(LEGAL)}),
            generator=ToyGenerator(),
            tenants={"clinic": CLINIC, "legal": LEGAL},
            accounts=registry(ACCOUNTS),
            allow_weak=True,
        )
        clients = {a: client(svc, a) for a in svc.registry}
        for acct, q in SCRIPT:
            clients[acct].ask(svc, q)
    return AttackResult(_export(svc, d), _receipts(d, clients), check="policy")


# ---------------------------------------------------------------------------------------------------------
# 6. coalitions over k_max: 8 colluders against k_max = 5, adjacent or spaced 100 ledger entries apart
# ---------------------------------------------------------------------------------------------------------
def _coalition(spacing: int) -> Callable[[Path], AttackResult]:
    def run(d: Path) -> AttackResult:
        shutil.rmtree(d, ignore_errors=True)
        colluders = [f"c{i}" for i in range(8)]
        n_honest = max(1, (spacing * 8 + 19) // 20)
        honest = [f"h{i}" for i in range(n_honest)]
        svc = open_service(d / "svc", accounts={**{a: "clinic" for a in colluders + honest}}, k_max=5)
        clients = {a: client(svc, a) for a in svc.registry}
        words = ["garden", "weather", "rain", "note", "soup", "lunch", "menu", "court", "memo", "case"]
        h = 0
        for i, a in enumerate(colluders):
            # jittered probes: an exact repeat would get the first release's citations again (noise keyed by Q)
            clients[a].ask(svc, "asthma protocol inhaler patient zorvatin " * 5 + "x" * (i + 1))
            for _ in range(spacing):
                acct = honest[h // 20]
                clients[acct].ask(svc, " ".join(words[(h * 7 + j * 3) % len(words)] for j in range(4)) + f" {h}")
                h += 1
        return AttackResult(_export(svc, d), _receipts(d, clients), check="coalition")

    return run


# ---------------------------------------------------------------------------------------------------------
# 7. inputs that crashed the version-1 verifier, written by the provider into its own ledger
# ---------------------------------------------------------------------------------------------------------
def _raw_leaf(raw: bytes, check: str) -> Callable[[Path], AttackResult]:
    def run(d: Path) -> AttackResult:
        svc, clients = _honest(d, rounds=1)
        _append(svc, raw, None)
        return AttackResult(_export(svc, d), _receipts(d, clients), check=check)

    return run


def _opening_field(mutate: Callable[[dict], None], check: str) -> Callable[[Path], AttackResult]:
    def run(d: Path) -> AttackResult:
        svc, clients = _honest(d, rounds=1)
        b = _export(svc, d)
        lines = (b / "auditor" / "openings.jsonl").read_bytes().splitlines()
        op = json.loads(lines[0])
        mutate(op)
        lines[0] = json.dumps(op, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
        (b / "auditor" / "openings.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
        return AttackResult(b, _receipts(d, clients), check=check)

    return run


def _set_units(op, value):
    op["charge"]["charges"][0]["cost"]["epsilon_units"] = value


# ---------------------------------------------------------------------------------------------------------
# 8. files that are not files
# ---------------------------------------------------------------------------------------------------------
def _file_attack(kind: str) -> Callable[[Path], AttackResult]:
    def run(d: Path) -> AttackResult:
        svc, clients = _honest(d, rounds=1)
        b = _export(svc, d)
        secret = d / "secret.txt"
        secret.write_text("TOP-SECRET-CONTENT-OUTSIDE-THE-BUNDLE")
        if kind == "symlink":
            (b / "auditor" / "seed.hex").unlink()
            os.symlink(secret, b / "auditor" / "seed.hex")
        elif kind == "dev_zero":
            (b / "public" / "leaves.bin").unlink()
            os.symlink("/dev/zero", b / "public" / "leaves.bin")
        elif kind == "fifo":
            (b / "auditor" / "openings.jsonl").unlink()
            os.mkfifo(b / "auditor" / "openings.jsonl")
        elif kind == "dir_symlink":
            shutil.move(str(b / "auditor" / "index"), str(d / "index-elsewhere"))
            os.symlink(d / "index-elsewhere", b / "auditor" / "index")
        return AttackResult(b, _receipts(d, clients), check="files", note="content must never be echoed")

    return run


def equivocation_other_log(d: Path) -> AttackResult:
    """The provider signs, under the audited log's key, a receipt for another log (a second log it keeps for other
    accounts, hidden from the auditor): v2 listed it as rejected evidence; v3 routed it by window name and made it
    INCOMPLETE. v4: a provider key signs for one log (its origin, ``dprag/<chain id>``, is in every receipt), so
    this key's signature over another origin is equivocation: FAIL. An honest provider is never framed by it: the
    account cannot make that signature."""
    svc, clients = _honest(d, rounds=1)
    entry = clients["alice"].receipts[0]
    body = {k: v for k, v in entry["receipt"].items() if k not in ("sig", "key")}
    other = dict(body, origin="dprag/" + "ab" * 32)
    extra = [encode({"receipt": sign_receipt(other, svc.signer), "top": entry["top"]})]
    return AttackResult(_export(svc, d), _receipts(d, clients, extra), check="receipts")


# ---------------------------------------------------------------------------------------------------------
# 11. framing by an account: receipts it cannot have been given
# ---------------------------------------------------------------------------------------------------------
def _framing(kind: str) -> Callable[[Path], AttackResult]:
    def run(d: Path) -> AttackResult:
        svc, clients = _honest(d, rounds=1)
        entry = clients["alice"].receipts[0]
        if kind == "duplicate":
            extra = [encode(entry)]
        elif kind == "other_key":
            from ..protocol.ledger import NoteSigner

            body = {k: v for k, v in entry["receipt"].items() if k != "sig"}
            extra = [
                encode(
                    {
                        "receipt": sign_receipt(dict(body, h_answer="00" * 32), NoteSigner.generate("forger")),
                        "top": entry["top"],
                    }
                )
            ]
        elif kind == "other_log":  # the account relabels its genuine receipt's origin (it cannot re-sign it)
            extra = [encode({"receipt": dict(entry["receipt"], origin="dprag/" + "ab" * 32), "top": entry["top"]})]
        elif kind == "false_citations":
            extra = [encode({"receipt": clients["bob"].receipts[0]["receipt"], "top": [0, 1, 2, 3, 4]})]
            return AttackResult(
                _export(svc, d),
                _receipts(d, {"alice": clients["alice"], "carol": clients["carol"]}, extra),
                expect="PASS",
            )
        else:
            extra = [b"{not json"]
        return AttackResult(
            _export(svc, d),
            _receipts(d, clients, extra),
            expect="PASS",
            note="rejected evidence, never a FAIL of an honest provider",
        )

    return run


# ---------------------------------------------------------------------------------------------------------
# 12. the key comes from the bundle: a wholesale rewrite, or a truncated history
# ---------------------------------------------------------------------------------------------------------
def rewrite_with_new_key(d: Path) -> AttackResult:
    svc, clients = _honest(d / "real", rounds=1)
    key_file = d / "pinned.vkey"
    key_file.write_text(svc.signer.vkey())
    svc.close()
    fake, fake_clients = _honest(d / "fake", rounds=1)  # new key, new seed, a history of its choosing
    return AttackResult(
        _export(fake, d / "fake"),
        _receipts(d / "fake", fake_clients),
        check="commitments",
        verify_kwargs={"key": key_file},
    )


def truncate_history(d: Path) -> AttackResult:
    svc, clients = _honest(d, rounds=2)
    cp = d / "seen.checkpoint"
    cp.write_bytes(svc.ledger.checkpoint(svc.signer, svc.origin, size=svc.ledger.size))
    # the provider now shows an auditor a history that stops early (the same key, a shorter ledger)
    b = _export(svc, d)
    leaves = list(svc.ledger.leaves(0, svc.ledger.size - 2))
    (b / "public" / "leaves.bin").write_bytes(b"".join(len(x).to_bytes(4, "big") + x for x in leaves))
    notes = [n for s, n in svc.aud.checkpoints(len(leaves))]
    (b / "public" / "checkpoints.txt").write_bytes(b"~~~\n".join(notes))
    lines = [
        ln for ln in (b / "auditor" / "openings.jsonl").read_bytes().splitlines() if json.loads(ln)["pos"] < len(leaves)
    ]
    (b / "auditor" / "openings.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
    return AttackResult(b, None, check="ledger", verify_kwargs={"trusted_checkpoint": cp})


ATTACKS: dict[str, Attack] = {
    a.name: a
    for a in [
        Attack("refund_negative_units", "provider", 1, _refund(lambda u: -u)),
        Attack("refund_wrapping_int64", "provider", 1, _refund(lambda u: (1 << 64) - u)),
        Attack("refund_units_as_string", "provider", 1, _refund(lambda u: str(-u))),
        Attack("grind_empty_records", "provider", 2, grind_empty_records),
        Attack("grind_invented_account", "provider", 2, grind_invented_account),
        Attack("unbound_query_embedding", "provider", 3, unbound_q),
        Attack("one_leaf_many_releases", "provider", 4, many_releases),
        Attack("resampled_answers", "provider", 4, resampled_answers),
        Attack("seen_cheaper_charges", "provider", 1, seen_cheaper_charges),
        Attack("seen_selection_undeclared", "provider", 4, seen_selection_undeclared),
        Attack("false_sampler_claim", "provider", 5, false_sampler_claim),
        Attack("coalition_adjacent", "provider", 6, _coalition(0)),
        Attack("coalition_spaced_100", "provider", 6, _coalition(100)),
        Attack("crash_lone_surrogate", "provider", 7, _raw_leaf(b'{"account":"\\ud800","type":"query"}', "canonical")),
        Attack(
            "crash_huge_integer",
            "provider",
            7,
            _raw_leaf(b'{"type":"query","counter":' + b"9" * 5000 + b"}", "canonical"),
        ),
        Attack(
            "crash_odd_length_qemb",
            "provider",
            7,
            _opening_field(lambda op: op.update(qemb=op["qemb"][:-1]), "requests"),
        ),
        Attack("crash_huge_charge", "provider", 7, _opening_field(lambda op: _set_units(op, 1 << 80), "canonical")),
        Attack("file_symlink", "file", 8, _file_attack("symlink")),
        Attack("file_dev_zero", "file", 8, _file_attack("dev_zero")),
        Attack("file_fifo", "file", 8, _file_attack("fifo")),
        Attack("file_dir_symlink", "file", 8, _file_attack("dir_symlink")),
        Attack("framing_duplicate_receipt", "account", 11, _framing("duplicate")),
        Attack("framing_other_key", "account", 11, _framing("other_key")),
        Attack("framing_other_log", "account", 11, _framing("other_log")),
        Attack("framing_false_citations", "account", 11, _framing("false_citations")),
        Attack("framing_garbage_line", "account", 11, _framing("garbage")),
        Attack("rewrite_with_new_key", "provider", 12, rewrite_with_new_key),
        Attack("equivocation_other_log", "provider", 22, equivocation_other_log),
        Attack("truncate_history", "provider", 12, truncate_history),
    ]
}


def run_attacks(workdir: str | os.PathLike, names=None) -> list[dict]:
    """Run the attacks (all, or ``names``) in ``workdir``; one row each: caught or not, and the reasons."""
    from ..verify import verify

    rows = []
    for name in names or ATTACKS:
        a = ATTACKS[name]
        res = a.run(Path(workdir) / name)
        v = verify(res.bundle, receipts=res.receipts, **res.verify_kwargs)
        named = any(r.startswith(f"{res.check}:") for r in v.reasons) if res.check else True
        rows.append(
            {
                "attack": name,
                "party": a.party,
                "item": a.item,
                "verdict": v.verdict,
                "expect": res.expect,
                "caught": v.verdict == res.expect and (res.expect != "FAIL" or named),
                "reasons": v.reasons[:3],
                "rejected_evidence": v.rejected_evidence[:3],
            }
        )
    return rows
