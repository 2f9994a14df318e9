"""Finding 3 (v3): previous/ dropped.

w1 overspends: alice's questions spend the garden notes out (M = 2), the provider empties its own spend rows and
serves the same questions again (notes charged 4 times). It closes w1 and opens w2 (an honest window, bob asks
once). The full w2 bundle FAILs on w1; the same bundle with previous/ deleted is verified alone."""

from __future__ import annotations

import json
import shutil

from _common import cli_verify, workdir
from _toys import charges_per_document, create

from dprag.audit.protocol.chain import chain_id
from dprag.audit.provider.service import ProviderService
from dprag.audit.testing import window as fx
from dprag.audit.testing.toy import HashEmbedder, ToyGenerator

d = workdir("f03")
svc = create(d / "w1", window="w1")
alice = fx.client(svc, "alice")
for i in range(2):
    alice.ask(svc, f"garden weather rain note {i}")
with svc.store.write() as s:  # the provider empties its own spend rows (as audit/testing/attacks.py does)
    s.execute("DELETE FROM budget_spend")
svc.close()
svc = ProviderService(d / "w1", embedder=HashEmbedder(32), generator=ToyGenerator())  # skips its recovery check
for i in range(2, 4):
    alice.ask(svc, f"garden weather rain note {i}")
w1_alone = svc.export_bundle(d / "bundle-w1")
w2 = svc.next_window(d / "w2", policy=fx.toy_policy(window="w2"))
svc.close()
bob = fx.client(w2, "bob")
bob.ask(w2, "asthma protocol inhaler patient")
full = w2.export_bundle(d / "bundle")
w2.close()
c = charges_per_document(w1_alone)
print(f"w1: M = 2; {sum(1 for v in c.values() if v > 2)} documents charged more than M (max {max(c.values())})")

cut = d / "bundle-without-previous"
shutil.copytree(full, cut)
shutil.rmtree(cut / "previous")
g2 = json.loads((cut / "public" / "genesis.json").read_bytes())
true_chain = chain_id((full / "previous" / "public" / "genesis.json").read_bytes())
print("w2's genesis names chain", g2["chain"], "epoch", g2["epoch"], "prev", g2["prev"]["window"], g2["prev"]["size"])
print("H(w1 genesis) (the chain id)    ", true_chain)
print("H(w2 genesis) (what v3 prints)  ", chain_id((cut / "public" / "genesis.json").read_bytes()))

show = lambda x: x.lstrip().startswith(("warning: the", "checked", "generation", "history"))  # noqa: E731
cli_verify(w1_alone, title="w1 alone (its overspend)", show=show)
print()
cli_verify(full, title="the w2 bundle as exported (previous/ holds w1)", show=show)
print()
cli_verify(cut, title="the same bundle with previous/ deleted", show=lambda x: "warning: the" in x or "checked" in x)
print()
printed = chain_id((cut / "public" / "genesis.json").read_bytes())
cli_verify(cut, "--chain", printed, title="pinning the chain id v3 printed", show=lambda x: False)
cli_verify(cut, "--chain", true_chain, title="pinning the chain id the genesis names", show=lambda x: False)
