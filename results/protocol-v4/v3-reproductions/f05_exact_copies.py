"""Finding 5 (v3): exact copies get their own budget.

(a) w1 serves alice's asthma questions; the provider closes it and opens w2 adding five clinic texts again under
new ids (next_window(add_documents=...) accepts them); alice's asthma questions are served again in w2.
(b) the same five copies at create() (one window), to run --corpus without the history's own --corpus defect
(finding 8)."""

from __future__ import annotations

import json
from collections import Counter

from _common import cli_verify, checked_line, workdir
from _toys import create

from dprag.audit.testing import window as fx
from dprag.audit.testing.toy import HashEmbedder
from dprag.audit.verify import verify

COPIES = {f"copy-{i}": fx.CLINIC[i] for i in range(5)}
d = workdir("f05")


def charges_per_text(bundle) -> Counter:
    """Charges per document TEXT over every window of the bundle (previous/ included)."""
    out: Counter = Counter()
    b = bundle
    while b.exists():
        docs = json.loads((b / "auditor" / "docs" / "clinic.json").read_bytes())
        for line in (b / "auditor" / "openings.jsonl").read_bytes().splitlines():
            op = json.loads(line)
            for ch in op["charge"]["charges"]:
                for i in ch["ids"]:
                    out[docs["text_sha256"][i]] += 1
        b = b / "previous"
    return out


def corpus_dir(path, texts_by_tenant):
    path.mkdir()
    for t, texts in texts_by_tenant.items():
        (path / f"{t}.json").write_text(json.dumps(texts))
    return path


def ask(svc, who, k):
    c = fx.client(svc, who) if isinstance(who, str) else who
    for i in range(k):
        c.ask(svc, f"asthma protocol inhaler patient zorvatin {i}")
    return c


# (a) the copies join in w2
w1 = create(d / "w1", window="w1")
alice = ask(w1, "alice", 3)
w2 = w1.next_window(d / "w2", policy=fx.toy_policy(window="w2"), add_documents={"clinic": COPIES})
w1.close()
print("next_window accepted the copies: w2 clinic ids", w2.tenants["clinic"]["retriever"].__len__(), "documents,",
      "last five:", json.loads((d / "w2" / "docs" / "clinic.json").read_bytes())["ids"][-5:])
alice.next_window("w2", w2.signer.vkey())
ask(w2, alice, 3)
bundle = w2.export_bundle(d / "bundle-a")
w2.close()
per_text = charges_per_text(bundle)
h0 = json.loads((bundle / "auditor" / "docs" / "clinic.json").read_bytes())["text_sha256"][0]
print(f"M = 2; the text of document 0 ('{fx.CLINIC[0]}') was charged {per_text[h0]} times (ids '0' and 'copy-0');",
      f"texts charged more than M: {sum(1 for v in per_text.values() if v > 2)}")
cli_verify(bundle, title="(a) copies added in w2, no corpus", show=lambda x: "checked" in x)
corpus = corpus_dir(d / "corpus-a", {"clinic": [*fx.CLINIC, *COPIES.values()], "legal": list(fx.LEGAL)})
cli_verify(bundle, "--corpus", corpus, title="(a) with --corpus (the grown corpus, index order)",
           show=lambda x: not x.startswith("  generation"))
v = verify(bundle, corpus={"clinic": [*fx.CLINIC, *COPIES.values()], "legal": list(fx.LEGAL)},
           embedder=HashEmbedder(32))
print("(a) verify(corpus=..., embedder=HashEmbedder(32)) in Python:", v.headline())
for r in v.reasons:
    print("   ", r)
print()

# (b) the copies at create(): one window
svc = create(d / "one", tenants={"clinic": {**{str(i): x for i, x in enumerate(fx.CLINIC)}, **COPIES},
                                 "legal": fx.LEGAL}, window="w1")
ask(svc, "alice", 4)
one = svc.export_bundle(d / "bundle-b")
svc.close()
per_text = charges_per_text(one)
print(f"(b) M = 2; the text of document 0 charged {per_text[h0]} times; texts charged more than M: "
      f"{sum(1 for v in per_text.values() if v > 2)}")
corpus = corpus_dir(d / "corpus-b", {"clinic": [*fx.CLINIC, *COPIES.values()], "legal": list(fx.LEGAL)})
cli_verify(one, "--corpus", corpus, title="(b) copies at create(), with --corpus", show=checked_line)
v = verify(one, corpus={"clinic": [*fx.CLINIC, *COPIES.values()], "legal": list(fx.LEGAL)},
           embedder=HashEmbedder(32))
print("(b) verify(corpus=..., embedder=HashEmbedder(32)) in Python:", v.headline())
print("    documents_reembedded =", v.checked.get("documents_reembedded"), "; corpus =", v.checked.get("corpus"))
print("    on trust:", [t for t in v.trust if "copies" in t])
