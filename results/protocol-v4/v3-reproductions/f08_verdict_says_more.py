"""Finding 8 (v3): the verdict says more than was checked.

(a) w1 -> w2 with a key rotation (next_window(signer=...)); the auditor pins w1's key.
(b) one toy window, --mode sampled --samples 2 against the full audit.
(c) a provider whose index rows are E//4 (the toy embedding floor-divided by 4) but whose descriptor is the toy
    embedder's (model 'hash-bow-32'; the dprag.embedders entry point that runs it is 'toy-hash-32').
(d) an honest history whose w2 adds one document, verified with --corpus (the whole, grown corpus)."""

from __future__ import annotations

import json
from importlib.metadata import entry_points

import numpy as np

from _common import cli_verify, receipt_lines, workdir, write_lines
from _toys import create

from dprag.audit.protocol.ledger import NoteSigner
from dprag.audit.provider.service import ProviderService
from dprag.audit.testing import window as fx
from dprag.audit.testing.toy import HashEmbedder, ToyGenerator
from dprag.audit.verify import verify
from dprag.audit.verify.verdict import key_fingerprint

d = workdir("f08")

# (a) --------------------------------------------------------------------------------------------------------
w1 = create(d / "a" / "w1", window="w1")
alice = fx.client(w1, "alice")
alice.ask(w1, "asthma protocol inhaler patient")
old = w1.signer.vkey()
w2 = w1.next_window(d / "a" / "w2", policy=fx.toy_policy(window="w2"), signer=NoteSigner.generate("dprag-w2"))
alice.next_window("w2", w2.signer.vkey())
alice.ask(w2, "garden weather rain note")
bundle = w2.export_bundle(d / "a" / "bundle")
new = w2.signer.vkey()
w1.close()
w2.close()
(d / "a" / "w1.vkey").write_text(old)
print(f"(a) w1's key {key_fingerprint(old)} (the one pinned); w2's key {key_fingerprint(new)} (rotated in)")
r = write_lines(d / "a" / "receipts.jsonl", receipt_lines([alice]))
cli_verify(bundle, "--key", d / "a" / "w1.vkey", "--receipts", r, title="(a) the key of w1 pinned",
           show=lambda x: "provider key:" in x)
print()

# (b) --------------------------------------------------------------------------------------------------------
w = fx.build_window(d / "b", rounds=2)
cli_verify(w.bundle, "--receipts", w.receipts, title="(b) full", show=lambda x: False)
cli_verify(w.bundle, "--receipts", w.receipts, "--mode", "sampled", "--samples", "2", title="(b) sampled, 2 records",
           show=lambda x: "sampl" in x.lower() or "checked" in x)
full = verify(w.bundle, receipts=w.receipts)
samp = verify(w.bundle, receipts=w.receipts, mode="sampled", samples=2)
print("(b) headlines identical:", full.headline() == samp.headline(), "; sampled.guarantee =", repr(samp.guarantee))
print("    retrieval checked: full", full.checked.get("retrieval"), "sampled", samp.checked.get("retrieval"))
print()


# (c) --------------------------------------------------------------------------------------------------------
class QuarterEmbedder(HashEmbedder):
    """Describes itself as the toy embedder (HashEmbedder.descriptor) but commits E//4 (floor division of every
    coordinate; E/4 alone would quantise to the same rows, the index being normalised row-wise)."""

    def embed(self, texts):
        return np.floor_divide(super().embed(texts), 4.0)


emb = QuarterEmbedder(32)
svc = ProviderService.create(
    d / "c" / "svc",
    policy=fx.toy_policy(),
    embedder=emb,
    seed=b"\x05" * 32,
    embedder_descriptor=emb.descriptor({"clinic": len(fx.CLINIC), "legal": len(fx.LEGAL)}),
    generator=ToyGenerator(),
    tenants={"clinic": fx.CLINIC, "legal": fx.LEGAL},
    accounts=fx.registry(fx.ACCOUNTS),
)
fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
skewed = svc.export_bundle(d / "c" / "bundle")
svc.close()
corpus = d / "c" / "corpus"
corpus.mkdir()
(corpus / "clinic.json").write_text(json.dumps(fx.CLINIC))
(corpus / "legal.json").write_text(json.dumps(fx.LEGAL))
desc = json.loads((skewed / "auditor" / "embedder.json").read_bytes())
eps = sorted(ep.name for ep in entry_points(group="dprag.embedders"))
print(f"(c) committed descriptor model: {desc['model']!r}; installed dprag.embedders entry points: {eps}")
cli_verify(skewed, "--corpus", corpus, title="(c) the E//4 index, --corpus given",
           show=lambda x: "checked:" in x or "embedd" in x or "warning: the" in x)
v = verify(skewed, corpus={"clinic": fx.CLINIC, "legal": fx.LEGAL}, embedder=HashEmbedder(32))
print("(c) the same through verify(..., embedder=HashEmbedder(32)):", v.headline())
honest = fx.build_window(d / "c" / "honest", rounds=1)
print("--- (c) an honest toy bundle\n$ dprag audit verify out/f08/c/honest/bundle --corpus out/f08/c/corpus --json")
import subprocess  # noqa: E402
import os  # noqa: E402

out = subprocess.run([os.path.join(os.path.dirname(__import__("sys").executable), "dprag"), "audit", "verify",
                      str(honest.bundle), "--corpus", str(corpus), "--json"], capture_output=True, text=True,
                     env={**os.environ, "DPRAG_VERIFY_WORKERS": "1"})
j = json.loads(out.stdout)
print("(c)   checked.documents_reembedded =", j["checked"].get("documents_reembedded"),
      "; checked.corpus =", j["checked"].get("corpus"))
print()

# (d) --------------------------------------------------------------------------------------------------------
NEW = {"new-1": "patient 99 asthma protocol inhaler drug ANSWER: newdrug"}
w1 = create(d / "d" / "w1", window="w1")
alice = fx.client(w1, "alice")
alice.ask(w1, "asthma protocol inhaler patient")
w2 = w1.next_window(d / "d" / "w2", policy=fx.toy_policy(window="w2"), add_documents={"clinic": NEW})
alice.next_window("w2", w2.signer.vkey())
alice.ask(w2, "inhaler drug protocol")
bundle = w2.export_bundle(d / "d" / "bundle")
w1.close()
w2.close()
grown = d / "d" / "corpus"
grown.mkdir()
(grown / "clinic.json").write_text(json.dumps([*fx.CLINIC, *NEW.values()]))
(grown / "legal.json").write_text(json.dumps(fx.LEGAL))
cli_verify(bundle, title="(d) honest history, a document added in w2, no --corpus", show=lambda x: False)
cli_verify(bundle, "--corpus", grown, title="(d) the same with --corpus (the grown corpus)",
           show=lambda x: x.startswith(("  policy", "  history", "  commitments")))
