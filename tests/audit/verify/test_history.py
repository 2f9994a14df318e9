"""One history per corpus (spec/protocol.md §3.1): windows chained by close records, spend and counters carried over.

Findings against v2 this answers, each as the test its finder would write: the budget reset with every window (two
windows, both PASS under the same pinned key, documents charged 4x against M = 2); the verdict never named the
window (an earlier bundle handed in for a later audit PASSed and later receipts became "rejected evidence")."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dprag.audit.protocol.chain import chain_id
from dprag.audit.protocol.encoding import encode
from dprag.audit.protocol.errors import RequestError
from dprag.audit.protocol.ledger import NoteSigner
from dprag.audit.provider.service import ProviderService
from dprag.audit.testing import window as fx
from dprag.audit.verify import verify
from dprag.errors import InvalidParameterError

NEW_DOC = {"clinic": {"new-1": "patient 99 asthma protocol inhaler drug ANSWER: newdrug"}}


def _receipts(path, clients) -> str:
    path.write_bytes(
        b"".join(encode({"receipt": e["receipt"], "top": e["top"]}) + b"\n" for c in clients for e in c.receipts)
    )
    return str(path)


def _spent(svc) -> np.ndarray:
    ten = svc.tenants["clinic"]
    return ten["filter"].spent_units(np.arange(len(ten["retriever"])))[:, 0].astype(np.int64)


def _ask_round(svc, clients, i):
    for acct, q in fx.SCRIPT:
        if acct in clients:
            clients[acct].ask(svc, f"{q} {i}")


def _move(clients, svc):
    """The accounts follow the history to its new window (its id and key)."""
    for c in clients.values():
        c.next_window(svc.policy.window, svc.signer.vkey())


@pytest.fixture(scope="module")
def three_epochs(tmp_path_factory):
    """w1; w2 adds account dave and a document; w3 rotates the provider key. Each window serves traffic."""
    d = tmp_path_factory.mktemp("history")
    w1 = fx.open_service(d / "w1", n=18)  # n: a per-account cap over the whole history
    clients = {a: fx.client(w1, a) for a in fx.ACCOUNTS}
    for i in range(2):
        _ask_round(w1, clients, i)
    spent_w1 = _spent(w1).copy()
    w2 = w1.next_window(
        d / "w2",
        policy=fx.toy_policy(window="w2", n=18),
        add_documents=NEW_DOC,
        add_accounts={"dave": ("clinic", fx.account_key("dave").vkey)},
    )
    _move(clients, w2)
    clients["dave"] = fx.client(w2, "dave")
    for i in range(2, 4):
        _ask_round(w2, clients, i)
    clients["dave"].ask(w2, "asthma protocol inhaler patient dave")
    w3 = w2.next_window(d / "w3", policy=fx.toy_policy(window="w3", n=18), signer=NoteSigner.generate("dprag-w3"))
    _move(clients, w3)
    for i in range(4, 6):
        _ask_round(w3, clients, i)
    bundle = w3.export_bundle(d / "bundle")
    receipts = _receipts(d / "receipts.jsonl", list(clients.values()))
    first_genesis = w1.ledger.leaf(0)
    out = {
        "dir": d,
        "bundle": bundle,
        "receipts": receipts,
        "clients": clients,
        "spent_w1": spent_w1,
        "spent_w3": _spent(w3).copy(),
        "chain": chain_id(first_genesis),
        "w1_key": w1.signer.vkey(),
        "w3_key": w3.signer.vkey(),
    }
    for s in (w1, w2, w3):
        s.close()
    return out


def test_three_epochs_verify_pass_with_an_epsilon_over_all_three(three_epochs, tmp_path):
    h = three_epochs
    key = tmp_path / "k"
    key.write_text(h["w1_key"])
    v = verify(h["bundle"], receipts=h["receipts"], key=key, chain=h["chain"])
    assert v.verdict == "PASS", v.reasons
    assert v.history["windows"] == ["w1", "w2", "w3"] and v.history["chain"] == h["chain"]
    assert v.checked["history_windows"] == 3 and v.checked["receipts_accepted"] > 0
    # what was checked counts over the whole history, not the head window alone (the headline's "n/m receipts")
    handed = sum(len(c.receipts) for c in h["clients"].values())
    assert v.checked["receipts_accepted"] == v.checked["receipts_handed_in"] == handed
    assert v.checked["queries"] == v.checked["queries_with_account_confirmed_q"] == handed
    assert f"{handed}/{handed} receipts, {handed}/{handed} Q confirmed" in v.headline()
    # every receipt of every window was checked against its own window: none rejected
    assert not v.rejected_evidence, v.rejected_evidence
    # ε covers all three: k_max · n releases with n the last window's per-account cap over the history (18)
    assert v.channels["retrieval"]["releases"] == 5 * 18
    assert "history " + h["chain"][:16] in v.headline() and "chain pinned" in v.headline()
    # the spend carried over: w3 holds at least w1's spend on every document of w1
    assert np.all(h["spent_w3"][: h["spent_w1"].size] >= h["spent_w1"])


def test_the_key_may_be_pinned_at_any_window_of_the_history(three_epochs, tmp_path):
    key = tmp_path / "k3"
    key.write_text(three_epochs["w3_key"])
    assert verify(three_epochs["bundle"], key=key).verdict == "PASS"
    key.write_text(NoteSigner.generate("other").vkey())
    v = verify(three_epochs["bundle"], key=key)
    assert v.verdict == "FAIL" and any("pinned provider key is the key of no window" in r for r in v.reasons)


def test_rule_counters_carry_over(three_epochs, tmp_path):
    """An account's counter continues across windows; an old counter is refused in the successor."""
    d = tmp_path
    w1 = fx.open_service(d / "a1", n=4)
    alice = fx.client(w1, "alice")
    alice.ask(w1, "asthma protocol inhaler patient 1")
    w2 = w1.next_window(d / "a2", policy=fx.toy_policy(window="w2", n=4))
    with pytest.raises(RequestError, match="closed"):
        alice.ask(w1, "asthma protocol inhaler patient 2")  # the closed window refuses (signed, not consumed)
    alice.next_window("w2", w2.signer.vkey())
    served = alice.ask(w2, "asthma protocol inhaler patient 2")
    assert served.receipt["counter"] == 2
    from dprag.audit.protocol.request import Request, make_request

    old = make_request(fx.account_key("alice"), window="w2", account="alice", counter=1, question="q", qemb=None)
    with pytest.raises(RequestError, match="earlier window"):
        w2.serve(Request(old, "q", None))
    for s in (w1, w2):
        s.close()


def test_rule_a_reset_of_spend_inside_a_history_fails(tmp_path, monkeypatch):
    """v2: a new window over the same corpus started every document's spend at zero (58 documents charged 4x
    against M = 2, both windows PASS under the same pinned key). v3: the successor carries the spend (C_carry),
    and a provider that resets it anyway FAILs."""
    w1 = fx.open_service(tmp_path / "r1", n=8, max_queries_per_doc=2)
    alice = fx.client(w1, "alice")
    for i in range(3):
        alice.ask(w1, f"asthma protocol inhaler patient {i}")
    assert _spent(w1).max() == w1.rule.limit  # some documents are spent out
    import dprag.audit.provider.succession as succession

    real_create = ProviderService.create

    def reset(*a, _history=None, **kw):  # the provider's own code: the carried spend zeroed
        if _history is not None:
            _history["carry"]["spend"] = {t: [0] * len(v) for t, v in _history["carry"]["spend"].items()}
        return real_create(*a, _history=_history, **kw)

    monkeypatch.setattr(ProviderService, "create", staticmethod(reset))
    w2 = succession.next_window(w1, tmp_path / "r2", policy=fx.toy_policy(window="w2", n=8, max_queries_per_doc=2))
    monkeypatch.undo()
    alice.next_window("w2", w2.signer.vkey())
    for i in range(3, 6):
        alice.ask(w2, f"asthma protocol inhaler patient {i}")  # the same documents charged again
    bundle = w2.export_bundle(tmp_path / "bundle")
    for s in (w1, w2):
        s.close()
    v = verify(bundle)
    assert v.verdict == "FAIL"
    assert any(r.startswith("history:") and "reset or altered" in r for r in v.reasons), v.reasons


def test_rule_a_fork_of_the_history_fails(tmp_path):
    """Two successors of one window: the close record names one genesis; a bundle carrying the other FAILs."""
    w1 = fx.open_service(tmp_path / "f1", n=4)
    fx.client(w1, "alice").ask(w1, "asthma protocol inhaler patient 1")
    w2 = w1.next_window(tmp_path / "f2", policy=fx.toy_policy(window="w2", n=4))
    hist = json.loads((tmp_path / "f2" / "config" / "history.json").read_bytes())
    # the provider opens a second successor of the same head (another seed): a fork of the history
    fork = ProviderService.create(
        tmp_path / "f2b",
        policy=fx.toy_policy(window="w2b", n=4),
        embedder=w2.embedder,
        embedder_descriptor=None,
        generator=w2.committed_generator,
        tenants={t: dict(zip(d["ids"], d["texts"], strict=True)) for t, d in _docs(tmp_path / "f2").items()},
        accounts={a: (e.tenant, e.key) for a, e in w2.registry.entries.items()},
        signer=w2.signer,
        _history={k: hist[k] for k in ("chain", "epoch", "prev", "carry", "previous_dir")},
    )
    bundle = fork.export_bundle(tmp_path / "bundle")
    for s in (w1, w2, fork):
        s.close()
    v = verify(bundle)
    assert v.verdict == "FAIL"
    assert any("does not end with a close record naming this genesis" in r for r in v.reasons), v.reasons


def _docs(d):
    return {p.stem: json.loads(p.read_bytes()) for p in (d / "docs").glob("*.json")}


def test_rule_a_fresh_history_under_the_same_key_fails_when_the_chain_is_pinned(three_epochs, tmp_path):
    """A provider that starts over (a new first window, spend and counters from zero) under the same key over the same
    corpus: with the chain id pinned it FAILs; without, the verdict says the chain was not pinned and the trust list
    names the case."""
    w1 = fx.open_service(tmp_path / "o1")
    fx.client(w1, "alice").ask(w1, "asthma protocol inhaler patient")
    original = chain_id(w1.ledger.leaf(0))
    signer = w1.signer
    w1.close()
    fresh = ProviderService.create(
        tmp_path / "fresh",
        policy=fx.toy_policy(window="w1"),
        embedder=fx.HashEmbedder(32),
        embedder_descriptor=fx.HashEmbedder(32).descriptor({"clinic": len(fx.CLINIC), "legal": len(fx.LEGAL)}),
        generator=fx.ToyGenerator(),
        tenants={"clinic": fx.CLINIC, "legal": fx.LEGAL},
        accounts=fx.registry(fx.ACCOUNTS),
        signer=signer,
    )
    bundle = fresh.export_bundle(tmp_path / "bundle")
    fresh.close()
    v = verify(bundle, chain=original)
    assert v.verdict == "FAIL" and any("is not the pinned" in r for r in v.reasons)
    v = verify(bundle)
    assert v.verdict == "PASS" and "(1 windows, chain NOT pinned)" in v.headline()
    assert any("chain id was not pinned" in w for w in v.warnings())
    assert any("fresh history started by the same key" in t for t in v.trust)


def test_rule_a_receipt_of_another_history_under_the_same_key_is_equivocation(three_epochs, tmp_path):
    """v2: a validly signed receipt from another window became "rejected evidence". v3: signed by one of the
    history's earlier keys for a window not in the history it is a FAIL (equivocation). v4: signed by the head's
    key, it may name a window after the audited head (the head closed after the bundle was cut): INCOMPLETE."""
    h = three_epochs
    from dprag.audit.protocol.receipts import sign_receipt

    body = {k: v for k, v in h["clients"]["alice"].receipts[-1]["receipt"].items() if k != "sig"}
    p = tmp_path / "r.jsonl"
    for where, verdict in (("w1", "FAIL"), ("w3", "INCOMPLETE")):
        svc = ProviderService.open(h["dir"] / where, embedder=fx.HashEmbedder(32), generator=fx.ToyGenerator())
        other = sign_receipt({**body, "window": "w-elsewhere"}, svc.signer)  # a window this history does not hold
        svc.close()
        p.write_bytes(encode({"receipt": other}) + b"\n")
        v = verify(h["bundle"], receipts=p)
        assert v.verdict == verdict, (where, v.headline())
        if verdict == "FAIL":
            assert any("equivocation" in r for r in v.reasons), v.reasons
        else:
            assert "names window 'w-elsewhere', after the audited head" in v.headline()


def test_rule_the_chain_constants_hold(three_epochs, tmp_path):
    w1 = fx.open_service(tmp_path / "c1", n=4)
    pol = fx.toy_policy(window="w2", n=4, max_queries_per_doc=5)  # a bigger filter limit: more spend per document
    with pytest.raises(InvalidParameterError, match="filter's limit"):
        w1.next_window(tmp_path / "c2", policy=pol)
    with pytest.raises(InvalidParameterError, match="k_max"):
        w1.next_window(tmp_path / "c3", policy=fx.toy_policy(window="w2", n=4, k_max=9))
    with pytest.raises(InvalidParameterError, match="retrieval.sigma"):  # σ (calibrated for n) is a constant
        w1.next_window(tmp_path / "c4", policy=fx.toy_policy(window="w2", n=2))
    w1.close()


def test_a_symlinked_previous_window_is_a_files_fail(three_epochs, tmp_path):
    import shutil

    b = tmp_path / "b"
    shutil.copytree(three_epochs["bundle"], b, symlinks=True)
    shutil.move(b / "previous", tmp_path / "elsewhere")
    (b / "previous").symlink_to(tmp_path / "elsewhere")
    v = verify(b)
    assert v.verdict == "FAIL" and any(r.startswith("files:") for r in v.reasons)


def test_rule_an_earlier_windows_bundle_cannot_stand_in_for_a_later_audit(three_epochs, tmp_path):
    """v2: an earlier window's bundle handed in for a later audit PASSed (the verdict never named the window) and the
    later, validly signed receipts became "rejected evidence". v3: the verdict names the head window and epoch, the
    auditor may pin the window it expects, and receipts of the (closed) head's successor signed by its key are
    not rejected: v4 makes the verdict INCOMPLETE on them (a later bundle checks them), where v3 PASSed."""
    h = three_epochs
    w1 = ProviderService.open(h["dir"] / "w1", embedder=fx.HashEmbedder(32), generator=fx.ToyGenerator())
    old = w1.export_bundle(tmp_path / "w1-bundle")
    w1.close()
    v = verify(old, receipts=h["receipts"])  # v4: never a PASS with later receipts left unchecked
    assert v.verdict == "INCOMPLETE" and v.history["window"] == "w1", v.headline()
    assert "names window 'w2', after the audited head (its successor, not handed over)" in v.headline()
    assert not any("names window" in r for r in v.rejected_evidence)
    v = verify(old, receipts=h["receipts"], window="w3")
    assert v.verdict == "FAIL" and any("not the 'w3' the auditor expects" in r for r in v.reasons), v.reasons


class _OwnEmbedder:
    """A provider's own embedder: ``embed`` only (no ``descriptor``), counting what it is asked to embed."""

    def __init__(self):
        from dprag.audit.testing.toy import HashEmbedder

        self.inner, self.embedded = HashEmbedder(32), []

    def embed(self, texts):
        self.embedded += list(texts)
        return self.inner.embed(texts)


def test_rule_a_successor_keeps_the_committed_rows_and_embeds_only_what_joined(tmp_path):
    """next_window with an embedder that has no descriptor (described once at create) continues the history; the
    successor's index is the predecessor's committed rows plus the joined document's row, and only the joined
    document is embedded again (a real embedder re-run over the corpus costs minutes and may differ by batch)."""
    from dprag.audit.testing.toy import ToyGenerator

    own = _OwnEmbedder()
    w1 = ProviderService.create(
        tmp_path / "w1",
        policy=fx.toy_policy(window="w1", n=4),
        embedder=own,
        embedder_descriptor=own.inner.descriptor({"clinic": len(fx.CLINIC), "legal": len(fx.LEGAL)}),
        generator=ToyGenerator(),
        tenants={"clinic": fx.CLINIC, "legal": fx.LEGAL},
        accounts=fx.registry(fx.ACCOUNTS),
    )
    assert len(own.embedded) == len(fx.CLINIC) + len(fx.LEGAL)
    own.embedded.clear()
    w2 = w1.next_window(tmp_path / "w2", policy=fx.toy_policy(window="w2", n=4), add_documents=NEW_DOC)
    assert own.embedded == [NEW_DOC["clinic"]["new-1"]]
    old = np.frombuffer((tmp_path / "w1" / "index" / "clinic.i16").read_bytes(), dtype="<i2").reshape(-1, 32)
    new = np.frombuffer((tmp_path / "w2" / "index" / "clinic.i16").read_bytes(), dtype="<i2").reshape(-1, 32)
    assert new.shape == (old.shape[0] + 1, 32) and np.array_equal(new[:-1], old)
    from dprag.audit.protocol.commitments import quantise_embeddings

    assert np.array_equal(new[-1], quantise_embeddings(own.inner.embed([NEW_DOC["clinic"]["new-1"]]))[0])
    assert w2.embedder_descriptor["schema"] == {"clinic": len(fx.CLINIC) + 1, "legal": len(fx.LEGAL)}
    alice = fx.client(w2, "alice")
    alice.ask(w2, "asthma protocol inhaler patient 1")
    bundle = w2.export_bundle(tmp_path / "bundle")
    for s in (w1, w2):
        s.close()
    assert verify(bundle).verdict == "PASS"


def _vote_policy(window: str, eps_q: float, m: int):
    """Answer-level voting, seen selection, δ_q = 1e-6; filter limit L = m·eps_q = 1 nat in every window."""
    return fx.toy_policy(window=window, **_vote_kw(eps_q, m))


def test_the_generation_delta_is_certified_over_every_windows_policy_not_the_last(tmp_path):
    """v3 finding: a history keeps the filter limit L and the per-charge δ_q; ε_q and M may change with M·ε_q = L. The
    verdict took max_charges_per_doc = L // ε_q of the LAST window: (ε_q, M) = (1/16, 16) -> (1/2, 2) -> (1, 1) printed
    a generation δ of 1·δ_q·(1 + e) = 3.7e-6 although a document can take 16 charges in w1. The certificate must come
    from the largest L // ε_q any window allows (a function of the public policies, never of actual charges).

    References, independent of the verifier, in mpmath at 50 digits:
    - the certificate: 16·δ_q (add/remove) and 16·δ_q·(1 + e^L) (replace-one: remove then add), L = 1 nat;
    - a lower bound on the true δ it must cover: on the corpus where the only charged record is absent every voter
      abstains; with it, each of its 16 answers is released with probability at least p = 1 / (1 + e^{2^-30}/δ_q)
      (the seen selection's release of a lone key), so δ(ε) >= 1 - (1 - p)^16 at every ε."""
    import mpmath as mp

    w1 = fx.open_service(tmp_path / "w1", **_vote_kw(1 / 16, 16))
    clients = {a: fx.client(w1, a) for a in fx.ACCOUNTS}
    for i in range(2):
        _ask_round(w1, clients, i)
    w2 = w1.next_window(
        tmp_path / "w2",
        policy=_vote_policy("w2", 0.5, 2),
        add_documents=NEW_DOC,
        add_accounts={"dave": ("clinic", fx.account_key("dave").vkey)},
    )
    _move(clients, w2)
    clients["dave"] = fx.client(w2, "dave")
    _ask_round(w2, clients, 2)
    clients["dave"].ask(w2, "asthma protocol inhaler patient dave")
    w3 = w2.next_window(tmp_path / "w3", policy=_vote_policy("w3", 1.0, 1), signer=NoteSigner.generate("dprag-w3"))
    _move(clients, w3)
    _ask_round(w3, clients, 3)
    bundle = w3.export_bundle(tmp_path / "bundle")
    receipts = _receipts(tmp_path / "receipts.jsonl", list(clients.values()))
    for s in (w1, w2, w3):
        s.close()
    v = verify(bundle, receipts=receipts)
    assert v.verdict == "PASS", v.reasons
    gen = v.channels["generation"]
    mp.mp.dps = 50
    dq, limit = mp.mpf("1e-6"), mp.mpf(1)
    ref_ar = 16 * dq
    ref = ref_ar + mp.e**limit * ref_ar
    p = 1 / (1 + mp.exp(mp.mpf(2) ** -30) / dq)
    lower = 1 - (1 - p) ** 16
    assert gen["max_charges_per_doc"] == 16
    assert gen["delta_add_remove"] >= ref_ar and gen["delta_add_remove"] <= ref_ar * (1 + mp.mpf("1e-12"))
    assert gen["delta_add_remove"] >= lower
    assert gen["delta"] >= ref and gen["delta"] <= ref * (1 + mp.mpf("1e-12"))
    assert f"{gen['delta']:.3g}" == "5.95e-05"  # the figure: 16·δ_q·(1 + e^1) = 5.9493e-5
    # the composed δ adds the retrieval channel's δ_policy to the generation δ, both rounded up
    assert v.delta >= v.channels["retrieval"]["delta"] + gen["delta"]
    assert gen["epsilon_add_remove"] == pytest.approx(1.0, abs=1e-9)  # the limit L: unchanged along the history


def _vote_kw(eps_q: float, m: int) -> dict:
    return dict(
        n=18, mechanism="answer-vote", vote_selection="seen", vote_delta=1e-6, max_queries_per_doc=m, vote_epsilon=eps_q
    )
