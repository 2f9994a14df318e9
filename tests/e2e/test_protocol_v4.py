"""Protocol v4 (spec/protocol.md): each finding against v3, as the test the party that found it would write.

Each test here fails on the v3 code by an assertion (the closing note of the session that landed it quotes the v3
output) and passes on v4."""

from __future__ import annotations

import hashlib
import itertools
import json

import pytest

from dprag.audit.protocol import commitments as cm
from dprag.audit.protocol.encoding import encode
from dprag.audit.protocol.errors import RateLimitError, RequestError
from dprag.audit.protocol.ledger import NoteSigner
from dprag.audit.provider import serving
from dprag.audit.provider.service import ProviderService
from dprag.audit.testing import window as fx
from dprag.audit.testing.toy import HashEmbedder, ToyGenerator
from dprag.audit.verify import verify
from dprag.errors import InvalidParameterError


def _write(path, lines) -> str:
    path.write_bytes(b"".join(encode(x) + b"\n" for x in lines))
    return str(path)


# ------------------------------------------------------------------------------------------------------------
# refusals sign the log they read: an account cannot frame an honest provider
# ------------------------------------------------------------------------------------------------------------
def test_rule_a_refused_request_served_later_does_not_frame_the_provider(tmp_path):
    """An account sends counter 2 first (signed refusal: "must be the next counter 1"), then counter 1, then the same
    counter-2 bytes, which are served. v3 FAILed the honest provider when the account handed the refusal in ("the
    provider signed a refusal of the request it recorded"); v4's refusal names the log size its decision read, and
    the request sits above it: PASS, the refusal checked."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    r1 = alice.request("asthma protocol inhaler patient")
    r2 = alice.request("inhaler drug protocol")
    with pytest.raises(RequestError, match="must be the next counter 1") as exc:
        svc.serve(r2)  # the account's own doing: counter 2 before counter 1
    refusal = exc.value.refusal
    assert refusal is not None and refusal["code"] == "counter" and refusal["size"] == svc.ledger.size
    s1 = alice.send(svc, r1)
    s2 = alice.send(svc, r2)  # the same signed bytes, now the next counter: served
    assert s2.pos > s1.pos >= refusal["size"]
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    receipts = _write(
        tmp_path / "r.jsonl",
        [
            {"receipt": s1.receipt, "top": s1.citations, "request": r1.signed},
            {"receipt": s2.receipt, "top": s2.citations, "request": r2.signed},
            {"refusal": refusal, "request": r2.signed},  # handed in to frame the provider
        ],
    )
    v = verify(bundle, receipts=receipts)
    assert v.verdict == "PASS", v.reasons
    assert v.checked["refusals"] == 1 and v.checked["receipts_accepted"] == 2 and not v.rejected_evidence


def test_rule_a_refusal_whose_rule_is_false_of_the_log_fails(tmp_path):
    """A provider refusing a request with a rule that does not hold (alice's counter 1 refused as "not the next
    counter", or as over the rate limit, on a log where it was the next and within n) denies service and says the
    log made it: the refusal, with the request it names, FAILs naming the rule. Without the request the rule cannot
    be checked (the refusal is still checked against the log)."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    alice.ask(svc, "garden weather rain")
    req = alice.request("asthma protocol inhaler patient")  # counter 2, the next one
    lies = []
    for exc, code in (
        (RequestError("request.counter", "must be the next counter 7 (gapless)"), "counter"),
        (RateLimitError("account 'alice' has used its queries"), "rate"),
    ):
        exc.code, exc.snapshot = code, svc.ledger.size
        lies.append(svc._refuse(exc, req.signed).refusal)  # signed with the provider's own key
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    for lie, why in zip(lies, ("not the account's next, which it was", "over the policy's n"), strict=True):
        v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", [{"refusal": lie, "request": req.signed}]))
        assert v.verdict == "FAIL" and any("rule is false of the log" in r and why in r for r in v.reasons), v.reasons
        v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", [{"refusal": lie}]))
        assert v.verdict == "PASS" and v.checked["refusals"] == 1, v.reasons


def test_rule_a_refusal_signed_at_another_root_is_a_fork(tmp_path):
    """A refusal carries the root of the log its decision read; one whose root is not the ledger's at its size shows
    the provider served the account from another log (a fork): FAIL."""
    svc = fx.open_service(tmp_path / "svc")
    alice = fx.client(svc, "alice")
    alice.ask(svc, "garden weather rain")
    req = alice.request("asthma protocol inhaler patient")
    honest = svc._refuse(RequestError("question", "must be at most 4096 characters"), req.signed).refusal
    body = {k: v for k, v in honest.items() if k != "sig"}
    from dprag.audit.protocol.receipts import sign_refusal

    forked = sign_refusal({**body, "root": hashlib.sha256(b"another log").hexdigest()}, svc.signer)
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", [{"refusal": honest}]))
    assert v.verdict == "PASS" and v.checked["refusals"] == 1, v.reasons
    v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", [{"refusal": forked}]))
    assert v.verdict == "FAIL" and any("refusal's root is not the ledger's root" in r for r in v.reasons), v.reasons


# ------------------------------------------------------------------------------------------------------------
# no signed byte tells when the work ended
# ------------------------------------------------------------------------------------------------------------
class _ServesDuring(ToyGenerator):
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

    def generate_many(self, prompts, max_new_tokens: int) -> list[str]:
        self._meanwhile(prompts)
        return super().generate_many(prompts, max_new_tokens)


def _run(tmp_path, monkeypatch, bob_lands_meanwhile: bool) -> tuple[bytes, bytes, list[int]]:
    """One toy window with every random choice fixed (the seed, the salts, the provider key, the nonces): alice
    asks, then bob — either after alice's answer is stored, or while it is being generated. Returns alice's and
    bob's receipts (bytes) and the sizes of the checkpoints signed."""
    counter = itertools.count()

    def fixed(n: int = 32) -> bytes:
        return hashlib.shake_256(b"fixed %d" % next(counter)).digest(n)

    monkeypatch.setattr(serving.secrets, "token_bytes", fixed)
    monkeypatch.setattr(serving.secrets, "token_hex", lambda n=32: fixed(n).hex())
    monkeypatch.setattr(cm.os, "urandom", fixed)
    gen = _ServesDuring()
    emb = HashEmbedder(32)
    svc = ProviderService.create(
        tmp_path / ("b" if bob_lands_meanwhile else "a"),
        policy=fx.toy_policy("murag"),
        embedder=emb,
        seed=b"\x05" * 32,
        signer=NoteSigner("provider", b"\x07" * 32),
        embedder_descriptor=emb.descriptor({"clinic": len(fx.CLINIC), "legal": len(fx.LEGAL)}),
        generator=gen,
        tenants={"clinic": fx.CLINIC, "legal": fx.LEGAL},
        accounts=fx.registry(fx.ACCOUNTS),
        allow_weak=True,
    )
    alice, bob = fx.client(svc, "alice"), fx.client(svc, "bob")
    bob_req = bob.request("inhaler drug protocol")
    got = {}
    if bob_lands_meanwhile:
        gen.during["asthma protocol inhaler patient"] = lambda: got.setdefault("bob", bob.send(svc, bob_req))
    got["alice"] = alice.ask(svc, "asthma protocol inhaler patient")
    if not bob_lands_meanwhile:
        got["bob"] = bob.send(svc, bob_req)
    sizes = [s for s, _ in svc.aud.checkpoints(svc.ledger.size)]
    svc.close()
    monkeypatch.undo()
    return encode(got["alice"].receipt), encode(got["bob"].receipt), sizes


def test_rule_a_receipt_does_not_tell_how_long_its_answer_took(tmp_path, monkeypatch):
    """v3 signed a receipt at the log head read when its answer was stored: alice's receipt said size 3 when bob's
    request landed while her answer was generated, size 2 when it did not (a signed timing channel: how long the
    generation took depends on the documents). v4 signs it at the log its leaf made (size pos + 1): the same bytes."""
    a_alone, b_alone, _ = _run(tmp_path, monkeypatch, bob_lands_meanwhile=False)
    a_meanwhile, b_meanwhile, _ = _run(tmp_path, monkeypatch, bob_lands_meanwhile=True)
    alone, meanwhile = json.loads(a_alone), json.loads(a_meanwhile)
    assert (alone["pos"], alone["size"]) == (1, 2), alone
    assert (meanwhile["pos"], meanwhile["size"]) == (1, 2), meanwhile
    assert a_alone == a_meanwhile
    assert b_alone == b_meanwhile


# ------------------------------------------------------------------------------------------------------------
# one text, one budget
# ------------------------------------------------------------------------------------------------------------
def test_rule_release_timing_is_in_the_protocol(tmp_path, monkeypatch):
    """With the policy's release period (protocol §5.6) an answer is stored with a release time fixed at its
    record; until then nothing an account or observer reads tells that its work ended: the answer endpoint has
    nothing, storing it signed no checkpoint, and a retry of the POST waits for it. Checked on a fake clock,
    from what is signed and released (counts), never from wall-clock thresholds."""
    from dprag.audit.provider import release as rel

    now = [1_000.0]
    seen: dict = {}

    def clock():
        now[0] += 1e-6
        return now[0]

    def sleep(s):  # the first wait of the release hold: the answer is stored and not yet released
        if "stored" not in seen:
            seen["stored"] = now[0]
            seen["answer"] = svc.released_answer("alice", 1)
            seen["checkpoints"] = [z for z, _ in svc.aud.checkpoints(2**62)]
            seen["retry"] = svc.serve(req).to_dict()  # the same signed request again, before release_at
            seen["retry_left"] = now[0]
        now[0] += s

    monkeypatch.setattr(rel, "now", clock)
    monkeypatch.setattr(rel, "sleep", sleep)
    svc = fx.open_service(tmp_path / "w1", release_period=10.0)
    alice = fx.client(svc, "alice")
    before = [z for z, _ in svc.aud.checkpoints(2**62)]
    req = alice.request("asthma protocol inhaler patient")
    served = alice.send(svc, req)
    record = json.loads(svc.aud.served("alice", 1))
    release_at = record["release_at_ms"] / 1000
    assert release_at == 1_020.0  # recorded just after 1,000 s: the first multiple of 10 s at or after t + 10 s
    assert seen["answer"] is None and seen["checkpoints"] == before, seen  # silent until release_at
    assert seen["retry"] == served.to_dict() and seen["retry_left"] >= release_at  # the retry waited for it
    assert now[0] >= release_at and svc.release.overruns == 0
    assert svc.released_answer("alice", 1) == served.to_dict()
    assert [z for z, _ in svc.aud.checkpoints(2**62)] == before  # still none: checkpoints come on the grid
    assert svc.scheduled_checkpoint() == svc.ledger.size == served.pos + 1
    assert [z for z, _ in svc.aud.checkpoints(2**62)] == [*before, svc.ledger.size]
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    monkeypatch.undo()
    v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", [{"receipt": served.receipt}]))
    assert v.verdict == "PASS", v.reasons
    assert v.attestation["timing"].startswith("release period committed (epoch 0: 10 s)"), v.attestation
    plain = fx.open_service(tmp_path / "w2")
    pb = plain.export_bundle(tmp_path / "b2")
    plain.close()
    assert verify(pb).attestation["timing"].startswith("no release period committed"), "off is said"


def test_rule_a_tenant_holds_each_text_once_at_creation_and_when_documents_join(tmp_path):
    """A copy of a document under another id would get a filter of its own (its text charged M times more). The
    provider refuses it, naming both ids: at create(), and when documents join the log."""
    with pytest.raises(InvalidParameterError, match=r"tenants\[clinic\].*documents '3' and '100' have the same text"):
        ProviderService.create(
            tmp_path / "copy",
            policy=fx.toy_policy("murag"),
            embedder=HashEmbedder(32),
            seed=b"\x05" * 32,
            embedder_descriptor=HashEmbedder(32).descriptor({"clinic": 101}),
            generator=ToyGenerator(),
            tenants={"clinic": {**{str(i): x for i, x in enumerate(fx.CLINIC)}, "100": fx.CLINIC[3]}},
            accounts=fx.registry({"alice": "clinic"}),
            allow_weak=True,
        )
    assert not (tmp_path / "copy" / "state").exists()  # refused before anything was written
    svc = fx.open_service(tmp_path / "w1")
    size = svc.ledger.size
    with pytest.raises(InvalidParameterError, match=r"documents.*'7' and 'again-7'.*same text"):
        svc.add_documents("clinic", {"again-7": fx.CLINIC[7]})
    assert svc.ledger.size == size  # refused before anything was written
    served = fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
    assert served.receipt["size"] == served.pos + 1
    svc.close()


def test_rule_exact_copies_under_new_ids_fail_without_the_corpus(tmp_path, monkeypatch):
    """A provider running its own code adds five texts again under new ids, so each is charged to M twice over.
    v3 PASSed, even with --corpus (no code compared the text hashes); v4's auditor FAILs it from the committed
    text hashes alone (auditor/docs), naming the two ids, without the corpus."""
    monkeypatch.setattr(cm, "one_text_one_budget", lambda *a: None)  # the provider runs its own code
    svc = fx.open_service(tmp_path / "w1")
    svc.add_documents("clinic", {f"copy-{i}": fx.CLINIC[i] for i in range(5)})
    monkeypatch.undo()
    fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle)
    assert v.verdict == "FAIL", v.headline()
    dup = [r for r in v.reasons if "have the same text" in r]
    assert len(dup) == 5 and dup[0].startswith("commitments: tenant 'clinic': documents '0' and 'copy-0'"), v.reasons


# ------------------------------------------------------------------------------------------------------------
# what the auditor reads: --corpus over a history whose corpus grew
# ------------------------------------------------------------------------------------------------------------
def test_rule_the_corpus_checks_each_epoch_against_the_prefix_it_committed(tmp_path):
    """An honest log adds a document and opens a new epoch. v3 checked every window against the whole (grown)
    corpus: three false reasons and a FAIL. v4 checks the index each documents leaf committed against the corpus
    prefix it covers, and re-embeds it: PASS; a corpus whose prefix differs, or that lacks the added document,
    still FAILs."""
    svc = fx.open_service(tmp_path / "w1")
    alice = fx.client(svc, "alice")
    alice.ask(svc, "asthma protocol inhaler patient")
    new = {"new-1": "patient 99 asthma protocol inhaler drug ANSWER: newdrug"}
    svc.add_documents("clinic", new)
    svc.set_policy(fx.toy_policy(), allow_weak=True)
    alice.ask(svc, "inhaler drug protocol")
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    corpus = {"clinic": [*fx.CLINIC, *new.values()], "legal": list(fx.LEGAL)}
    v = verify(bundle, corpus=corpus, embedder=HashEmbedder(32))
    assert v.verdict == "PASS", v.reasons
    assert v.checked["documents_reembedded"] >= len(fx.CLINIC) + 1 + len(fx.LEGAL), v.checked
    altered = {**corpus, "clinic": [fx.CLINIC[1], fx.CLINIC[0], *corpus["clinic"][2:]]}
    v = verify(bundle, corpus=altered, embedder=HashEmbedder(32))
    assert v.verdict == "FAIL" and any("is not the committed one" in r for r in v.reasons), v.reasons
    v = verify(bundle, corpus={**corpus, "clinic": list(fx.CLINIC)}, embedder=HashEmbedder(32))  # the added one lacks
    assert v.verdict == "FAIL" and any("is not the committed one" in r for r in v.reasons), v.reasons


def test_rule_a_named_file_is_read_within_the_default_budget_and_parsed_as_it_arrives(tmp_path, monkeypatch):
    """v3 read a named bundle file whole unless --max-read was given: 1 GiB of zeros behind public/leaves.bin took
    1.1 GiB of memory before the FAIL. v4 parses leaves.bin as it reads it (the first empty record stops the read)
    and reads every bundle within a default total budget (bundle.DEFAULT_MAX_READ)."""
    import os
    import tracemalloc

    from dprag.audit.protocol import bundle as bundle_mod

    w = fx.build_window(tmp_path / "w", rounds=1)
    leaves = w.bundle / "public" / "leaves.bin"
    genesis_len = int.from_bytes(leaves.read_bytes()[:4], "big")
    with open(leaves, "r+b") as f:  # the genesis leaf, then 1 GiB of zeros (a sparse file: no disk)
        f.truncate(4 + genesis_len)
        f.truncate(4 + genesis_len + (1 << 30))
    tracemalloc.start()
    try:
        b = bundle_mod.load_bundle(w.bundle)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "files: public/leaves.bin: leaf 1 is empty" in b.defects
    assert peak < 64 << 20, peak  # one chunk, not the file
    monkeypatch.setenv("DPRAG_VERIFY_WORKERS", "1")  # in process (the unit tier starts no process)
    v = verify(w.bundle)
    assert v.verdict == "FAIL" and any("leaf 1 is empty" in r for r in v.reasons)
    assert bundle_mod.DEFAULT_MAX_READ == 1 << 34 and os.path.getsize(leaves) > 1 << 30


# ------------------------------------------------------------------------------------------------------------
# the verdict says what was checked
# ------------------------------------------------------------------------------------------------------------
def test_rule_a_sampled_audit_says_so_in_its_headline(tmp_path, monkeypatch):
    """v3's --mode sampled printed the full audit's headline word for word. v4's headline says SAMPLED with the
    sample's detection bound; the full audit's does not."""
    monkeypatch.setenv("DPRAG_VERIFY_WORKERS", "1")
    w = fx.build_window(tmp_path / "w", rounds=1)
    full = verify(w.bundle, receipts=w.receipts)
    sampled = verify(w.bundle, receipts=w.receipts, mode="sampled", samples=2)
    assert full.verdict == sampled.verdict == "PASS"
    assert "SAMPLED" not in full.headline()
    head = sampled.headline()
    q = full.checked["queries"]
    assert f"SAMPLED (sampled 2 of {q} query records" in head and f"{1 - 0.99**2:.4f} (β=0.01)" in head, head
    assert head.split(" — ")[0] == full.headline().split(" — ")[0]  # the same PASS ε δ


def test_the_sampling_bound_over_windows_holds_against_every_placement():
    """The detection bound over several windows (``detection_bound``) is a lower bound on the exact probability that
    a uniform sample without replacement per window catches a bad record, for every placement of ⌈βN⌉ bad records
    over the windows (exact hypergeometric miss probabilities, in rationals)."""
    from fractions import Fraction
    from math import ceil, comb

    from dprag.audit.verify.verdict import detection_bound

    def placements(sampled, i, left):
        """Every way to put ``left`` bad records into windows i.. of ``sampled`` (at most N_w in window w)."""
        if i == len(sampled) - 1:
            if left <= sampled[i][1]:
                yield (left,)
            return
        for b in range(min(left, sampled[i][1]) + 1):
            for rest in placements(sampled, i + 1, left - b):
                yield (b, *rest)

    for sampled in ([(3, 10), (2, 30)], [(5, 20), (5, 20), (1, 7)], [(4, 12), (9, 40)]):
        total = sum(n for _, n in sampled)
        for beta in (0.05, 0.1, 0.3):
            bad = ceil(beta * total)
            worst = Fraction(0)
            for place in placements(sampled, 0, bad):
                miss = Fraction(1)
                for (s, n), b in zip(sampled, place, strict=True):
                    miss *= Fraction(comb(n - b, s), comb(n, s))
                worst = max(worst, miss)
            assert detection_bound(beta, sampled) <= 1 - worst + 1e-12, (sampled, beta)


class _SkewedEmbedder(HashEmbedder):
    """A provider's embedder that describes itself as the toy embedder but commits other rows (every vector with
    its first half zeroed): the index is not the committed embedder's output."""

    def embed(self, texts):
        out = super().embed(texts).copy()
        out[:, : self.dimension // 2] = 0.0
        return out


def _corpus_dir(tmp_path) -> str:
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "clinic.json").write_text(json.dumps(list(fx.CLINIC)))
    (d / "legal.json").write_text(json.dumps(list(fx.LEGAL)))
    return str(d)


def test_rule_the_descriptor_names_the_entry_point_that_re_embeds_it(tmp_path, monkeypatch, capsys):
    """v3's descriptor named the model, not the dprag.embedders entry point that runs it, so `audit verify --corpus`
    found no embedder to load and skipped the re-embedding silently: an index that is not the embedder's output
    PASSed. v4's descriptor names the entry point: the CLI re-embeds and FAILs it; an honest index PASSes with every
    document re-embedded; an entry point that is not installed is said in a warning (documents_reembedded: 0)."""
    from dprag.audit.cli import main

    monkeypatch.setenv("DPRAG_VERIFY_WORKERS", "1")
    corpus = _corpus_dir(tmp_path)
    honest = fx.build_window(tmp_path / "honest", rounds=1)
    assert main(["audit", "verify", "--max-epsilon", "50", str(honest.bundle), "--corpus", corpus, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["checked"]["documents_reembedded"] == len(fx.CLINIC) + len(fx.LEGAL)
    emb = _SkewedEmbedder(32)
    svc = ProviderService.create(
        tmp_path / "skewed",
        policy=fx.toy_policy("murag"),
        embedder=emb,
        seed=b"\x05" * 32,
        embedder_descriptor=emb.descriptor({"clinic": len(fx.CLINIC), "legal": len(fx.LEGAL)}),
        generator=ToyGenerator(),
        tenants={"clinic": fx.CLINIC, "legal": fx.LEGAL},
        accounts=fx.registry(fx.ACCOUNTS),
        allow_weak=True,
    )
    bundle = svc.export_bundle(tmp_path / "skewed-bundle")
    svc.close()
    assert main(["audit", "verify", "--max-epsilon", "50", str(bundle)]) == 0  # without the corpus nothing can tell
    capsys.readouterr()
    assert main(["audit", "verify", str(bundle), "--corpus", corpus]) == 1
    assert "committed index rows are not the committed embedder's output" in capsys.readouterr().out
    monkeypatch.setattr("dprag.audit.provider.models.load_embedder", _not_installed)
    assert main(["audit", "verify", "--max-epsilon", "50", str(honest.bundle), "--corpus", corpus]) == 0
    printed = capsys.readouterr().out
    assert "no document was re-embedded (documents_reembedded: 0)" in printed, printed


def _not_installed(name):
    from dprag.errors import DpragError

    raise DpragError(f"no dprag.embedders entry point {name!r}")


def test_rule_the_embedder_commitment_is_salted(tmp_path):
    """v3's C_emb was H(canonical(descriptor)): an observer holding the public genesis confirmed a guessed embedder
    (the descriptor of a public model is public). v4 salts it like the other public commitments; the salt is the
    auditor's (auditor/embedder.json)."""
    svc = fx.open_service(tmp_path / "svc")
    genesis = json.loads(svc.ledger.leaf(0))
    guess = HashEmbedder(32).descriptor({"clinic": len(fx.CLINIC), "legal": len(fx.LEGAL)})
    assert hashlib.sha256(encode(guess.to_dict())).hexdigest() != genesis["C_emb"]  # the observer's guess fails
    opening = json.loads((svc.dir / "config" / "embedder.json").read_bytes())
    assert set(opening) == {"descriptor", "salt"} and opening["descriptor"] == guess.to_dict()
    assert cm.embedder_commitment(bytes.fromhex(opening["salt"]), guess.to_dict()) == genesis["C_emb"]
    svc.close()


# ------------------------------------------------------------------------------------------------------------
# receipts beyond the bundle: checked, or INCOMPLETE; never PASS unchecked
# ------------------------------------------------------------------------------------------------------------
def test_rule_a_rollback_before_an_epoch_boundary_fails_on_the_receipts_it_erased(tmp_path):
    """The provider restores its store to a snapshot (two of alice's answers and their charges erased), then opens a
    new epoch. In v3, alice's receipts were signed at the head when each answer was stored — sizes 4 and 5 here,
    bob's request having landed while her first answer was generated — and a window closed at size 3 filed both as
    "newer than the bundle": PASS. v4 receipts are signed at the log their leaf made: the one at size 3 names
    another root than the log's there (the policy leaf's): a fork. FAIL."""
    import shutil

    d = tmp_path
    gen = _ServesDuring()
    svc = fx.open_service(d / "w1", generator=gen)
    alice, bob = fx.client(svc, "alice"), fx.client(svc, "bob")
    bob.ask(svc, "garden weather rain")
    svc.close()
    shutil.copytree(d / "w1", d / "snapshot")
    svc = ProviderService.open(d / "w1", embedder=HashEmbedder(32), generator=gen)
    gen.during["asthma protocol inhaler patient"] = lambda: bob.ask(svc, "contract dispute court case")
    erased = [alice.ask(svc, q) for q in ("asthma protocol inhaler patient", "inhaler drug protocol")]
    assert [(e.pos, e.receipt["size"]) for e in erased] == [(2, 3), (4, 5)]
    svc.close()
    shutil.rmtree(d / "w1")
    shutil.copytree(d / "snapshot", d / "w1")  # the rollback: alice's two answers and their charges are gone
    svc = fx.reopen_service(d / "w1")
    svc.set_policy(fx.toy_policy(), allow_weak=True)
    assert svc.ledger.size == 3  # genesis, bob's first answer, the policy leaf
    bundle = svc.export_bundle(d / "bundle")
    svc.close()
    v = verify(bundle, receipts=_write(d / "r.jsonl", [{"receipt": r["receipt"]} for r in alice.receipts]))
    assert v.verdict == "FAIL", v.headline()
    assert any("receipt 0: its signed root is not the ledger's root at size 3" in r for r in v.reasons), v.reasons


def test_rule_an_honest_provider_audited_mid_epoch_is_incomplete_not_equivocating(tmp_path):
    """An auditor fetched the log mid-epoch; the provider then opened a new epoch (same key) and served alice. v3
    FAILed the honest provider for "equivocation" when alice's later receipt was handed in; v4's verdict is
    INCOMPLETE (a receipt beyond the audited size without a consistency proof), and the later bundle PASSes."""
    svc = fx.open_service(tmp_path / "w1")
    alice = fx.client(svc, "alice")
    alice.ask(svc, "garden weather rain")
    early = svc.export_bundle(tmp_path / "early")  # mid-epoch
    n = svc.ledger.size
    svc.set_policy(fx.toy_policy(), allow_weak=True)
    later_served = alice.ask(svc, "asthma protocol inhaler patient")
    later = svc.export_bundle(tmp_path / "later")
    svc.close()
    receipts = _write(tmp_path / "r.jsonl", [{"receipt": r["receipt"], "top": r["top"]} for r in alice.receipts])
    v = verify(early, receipts=receipts)
    assert v.verdict == "INCOMPLETE" and not v.reasons, v.reasons
    assert f"signed at size {later_served.receipt['size']}, beyond the bundle's size {n}" in v.headline()
    v = verify(later, receipts=receipts)
    assert v.verdict == "PASS" and v.checked["receipts_accepted"] == 2, v.reasons


# ------------------------------------------------------------------------------------------------------------
# one log: its origin names it, receipts name the origin and the key, the auditor pins the origin
# ------------------------------------------------------------------------------------------------------------
def test_rule_the_origin_is_the_genesis_and_receipts_name_it_and_their_key(tmp_path):
    """The log's name is dprag/H(leaf 0): checkpoints, receipts and refusals carry it, and each receipt and refusal
    names the id of the key that signed it; the bundle holds no window chain (no previous/, no carry)."""
    from dprag.audit.protocol.chain import origin_of
    from dprag.audit.protocol.receipts import key_id

    svc = fx.open_service(tmp_path / "w1")
    alice = fx.client(svc, "alice")
    served = alice.ask(svc, "asthma protocol inhaler patient")
    origin = origin_of(svc.ledger.leaf(0))
    assert origin == "dprag/" + hashlib.sha256(svc.ledger.leaf(0)).hexdigest()
    assert served.receipt["origin"] == origin and "window" not in served.receipt
    assert served.receipt["key"] == hashlib.sha256(svc.signer.vkey().encode()).hexdigest() == key_id(svc.signer.vkey())
    assert svc.checkpoint_note().decode().splitlines()[0] == origin
    pins = tmp_path / "w1" / "pins"  # what create() leaves the provider to hand its auditor and accounts
    assert (pins / "origin.txt").read_text() == origin + "\n"
    assert (pins / "provider.vkey").read_text() == svc.signer.vkey() + "\n"
    alice.request("a skipped counter")
    with pytest.raises(RequestError) as exc:
        alice.send(svc, alice.request("again"))  # counter + 2: a signed refusal
    assert exc.value.refusal["origin"] == origin and exc.value.refusal["key"] == served.receipt["key"]
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    assert not (bundle / "previous").exists() and not (bundle / "auditor" / "carry.json").exists()


def test_rule_a_receipt_of_another_log_under_this_key_is_equivocation(tmp_path):
    """One provider key signs for one log. A provider that runs a second log over the same corpus under the same
    key (its budgets restart from zero) and serves alice there has signed, under this log's key, a receipt for
    another origin: handed in to this log's audit it is equivocation, a FAIL; a receipt whose origin field was
    edited by an account (no provider signature over it) is only rejected evidence."""
    svc = fx.open_service(tmp_path / "a", seed=b"\x05" * 32)
    alice = fx.client(svc, "alice")
    alice.ask(svc, "asthma protocol inhaler patient")
    bundle = svc.export_bundle(tmp_path / "bundle")
    other = fx.open_service(tmp_path / "b", seed=b"\x06" * 32, signer=svc.signer)  # a fresh log, the same key
    there = fx.client(other, "alice").ask(other, "asthma protocol inhaler patient")
    assert there.receipt["origin"] != alice.receipts[0]["receipt"]["origin"]
    svc.close()
    other.close()
    v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", [{"receipt": there.receipt}]))
    assert v.verdict == "FAIL" and any("equivocation" in r for r in v.reasons), v.reasons
    edited = {**alice.receipts[0]["receipt"], "origin": there.receipt["origin"]}  # an account's edit: sig breaks
    v = verify(bundle, receipts=_write(tmp_path / "e.jsonl", [{"receipt": edited}]))
    assert v.verdict == "PASS" and v.rejected_evidence, (v.reasons, v.rejected_evidence)


def test_rule_a_fresh_log_under_the_same_key_fails_when_the_auditor_pins_the_origin(tmp_path, monkeypatch, capsys):
    """v3 verified an earlier window's bundle, or a history whose start was dropped, as PASS without a warning. In
    one log the auditor pins the origin: a fresh log under the same key (every budget refunded) FAILs `history`
    naming both origins; without --origin the verdict warns that the origin was not pinned; a malformed --origin
    is the auditor's exit 2 naming the flag."""
    from dprag.audit.cli import main
    from dprag.audit.protocol.chain import origin_of

    monkeypatch.setenv("DPRAG_VERIFY_WORKERS", "1")
    svc = fx.open_service(tmp_path / "a", seed=b"\x05" * 32)
    pinned = origin_of(svc.ledger.leaf(0))
    fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
    first = svc.export_bundle(tmp_path / "first")
    fresh = fx.open_service(tmp_path / "b", seed=b"\x06" * 32, signer=svc.signer)
    fx.client(fresh, "alice").ask(fresh, "asthma protocol inhaler patient")
    second = fresh.export_bundle(tmp_path / "second")
    key = tmp_path / "provider.vkey"
    key.write_text(svc.signer.vkey())
    svc.close()
    fresh.close()
    v = verify(second, origin=pinned)
    assert v.verdict == "FAIL" and any(r.startswith("history: the log's origin") for r in v.reasons), v.reasons
    assert verify(first, origin=pinned).verdict == "PASS"
    assert main(["audit", "verify", "--max-epsilon", "50", str(second), "--key", str(key)]) == 0
    out = capsys.readouterr().out
    assert "origin NOT pinned" in out and "--origin" in out, out
    assert main(["audit", "verify", "--max-epsilon", "50", str(first), "--key", str(key), "--origin", pinned]) == 0
    out = capsys.readouterr().out
    assert "origin pinned" in out and "origin NOT pinned" not in out, out
    assert main(["audit", "verify", str(second), "--key", str(key), "--origin", pinned]) == 1
    assert main(["audit", "verify", str(first), "--origin", "w1"]) == 2
    err = capsys.readouterr().err
    assert "--origin" in err and len(err.strip().splitlines()) == 1, err


def test_rule_the_verdict_names_the_key_the_auditor_pinned_after_a_rotation(tmp_path, monkeypatch, capsys):
    """After a rotation v3 printed the new key as "(pinned by the auditor)". v4 names the key the auditor pinned,
    the rotation leaves that authenticated the current key, and the keys that signed each epoch."""
    from dprag.audit.cli import main
    from dprag.audit.protocol.chain import origin_of
    from dprag.audit.verify.verdict import key_fingerprint

    monkeypatch.setenv("DPRAG_VERIFY_WORKERS", "1")
    svc = fx.open_service(tmp_path / "w1")
    old = svc.signer.vkey()
    fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
    new = NoteSigner("w1-2", b"\x09" * 32)
    pos = svc.rotate_key(new)
    svc.set_policy(fx.toy_policy(), allow_weak=True)
    origin = origin_of(svc.ledger.leaf(0))
    bundle = svc.export_bundle(tmp_path / "bundle")
    key = tmp_path / "w1.vkey"
    key.write_text(old)
    svc.close()
    assert main(["audit", "verify", "--max-epsilon", "50", str(bundle), "--key", str(key), "--origin", origin]) == 0
    out = capsys.readouterr().out
    f_old, f_new = key_fingerprint(old), key_fingerprint(new.vkey())
    assert f"NOT the pinned key: the auditor pinned {f_old}" in out and "pinned by the auditor)" not in out, out
    assert f"leaf {pos}: {f_new}" in out and f"epoch 0: {f_old}" in out and f"epoch 1: {f_new}" in out, out


def test_rule_an_answer_stored_after_a_rotation_is_signed_by_the_key_of_its_size(tmp_path):
    """A request recorded before a key rotation and answered after it: its receipt is signed at size pos + 1 by the
    key in effect there (the outgoing one), so its bytes do not depend on when the answer finished, and it
    verifies."""
    from dprag.audit.protocol.receipts import key_id

    gen = _ServesDuring()
    svc = fx.open_service(tmp_path / "w1", generator=gen)
    old = svc.signer.vkey()
    alice = fx.client(svc, "alice")
    gen.during["asthma protocol inhaler patient"] = lambda: svc.rotate_key(NoteSigner("w1-2", b"\x0a" * 32))
    served = alice.ask(svc, "asthma protocol inhaler patient")
    assert svc.signer.vkey() != old  # rotated while the answer was generated
    assert served.receipt["size"] == served.pos + 1 and served.receipt["key"] == key_id(old)
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    v = verify(bundle, receipts=_write(tmp_path / "r.jsonl", [{"receipt": r["receipt"]} for r in alice.receipts]))
    assert v.verdict == "PASS" and v.checked["receipts_accepted"] == 1, v.reasons


def test_rule_a_rotation_proof_of_another_log_is_not_followed(tmp_path):
    """A client follows a key rotation only by a proof that names its own log: the same proof relabelled with
    another chain id is refused, naming the chain."""
    from dprag.audit.protocol import provider_keys
    from dprag.audit.protocol.chain import origin_of
    from dprag.audit.protocol.encoding import EncodingError

    svc = fx.open_service(tmp_path / "w1")
    old = svc.signer.verifier()
    origin = origin_of(svc.ledger.leaf(0))
    svc.rotate_key()
    proof = svc.key_history()["rotations"][0]
    svc.close()
    pos, new = provider_keys.follow(old, origin, proof)
    assert pos == proof["pos"] and new.vkey() != old.vkey()
    with pytest.raises(EncodingError, match="names chain"):
        provider_keys.follow(old, origin, {**proof, "chain": "ab" * 32})
