"""Finding 4 (v3): accounts re-keyed or moved between windows.

w1: alice (clinic) asks twice, carol (legal) once. The provider closes w1 with its own code: w2's registry keeps
alice's name, tenant and carried counter but under a key the provider holds, and moves carol to the clinic
tenant. In w2 the real alice is refused; the provider asks as "alice" (counter 3, continuing her carried counter)
and carol asks on the clinic. The auditor pins the key and the chain id, and gets every receipt."""

from __future__ import annotations

import json

from _common import cli_verify, receipt_lines, workdir, write_lines
from _toys import create

from dprag.audit.client.account import AccountClient
from dprag.audit.protocol.chain import chain_id
from dprag.audit.protocol.errors import RequestError
from dprag.audit.protocol.request import AccountKey
from dprag.audit.provider.service import ProviderService
from dprag.audit.testing import window as fx
from dprag.audit.testing.toy import HashEmbedder

d = workdir("f04")
w1 = create(d / "w1", window="w1")
alice, carol = fx.client(w1, "alice"), fx.client(w1, "carol")
alice.ask(w1, "asthma protocol inhaler patient 1")
alice.ask(w1, "asthma protocol inhaler patient 2")
carol.ask(w1, "contract dispute court case")

held = AccountKey.generate()  # a key the provider holds
real_create = ProviderService.create


def provider_code(*a, accounts, _history=None, **kw):  # the provider's own next_window
    if _history is not None:
        accounts = {**accounts, "alice": ("clinic", held.vkey), "carol": ("clinic", accounts["carol"][1])}
    return real_create(*a, accounts=accounts, _history=_history, **kw)


ProviderService.create = staticmethod(provider_code)
w2 = w1.next_window(d / "w2", policy=fx.toy_policy(window="w2"))
ProviderService.create = real_create
print("w1 registry:", {a: (v["tenant"], v["key"][:12]) for a, v in w1.accounts.items() if a != "bob"})
print("w2 registry:", {a: (v["tenant"], v["key"][:12]) for a, v in w2.accounts.items() if a != "bob"})
print("carried counters:", json.loads((d / "w2" / "config" / "history.json").read_bytes())["carry"]["counters"])
w1.close()

for c in (alice, carol):
    c.next_window("w2", w2.signer.vkey())
try:
    alice.ask(w2, "asthma protocol inhaler patient 3")
except RequestError as e:
    print("the real alice in w2:", e)
fake = AccountClient("alice", "w2", held, provider_vkey=w2.signer.vkey(), embedder=HashEmbedder(32),
                     embedding_scale=w2.embedder_descriptor["embedding_scale"])
fake.counter = 2  # alice's carried counter
served = fake.ask(w2, "asthma protocol inhaler patient 3")
print("'alice' under the provider's key served in w2: counter", served.receipt["counter"], "tenant",
      served.receipt["tenant"])
served = carol.ask(w2, "asthma protocol inhaler patient zorvatin")
print("carol served in w2 on tenant", served.receipt["tenant"], "with citations", served.citations)
bundle = w2.export_bundle(d / "bundle")
(d / "provider.vkey").write_text(w2.signer.vkey())
w2.close()

refusals = [{"refusal": x["refusal"]} for x in alice.kept.get("refusals.jsonl", [])]
print("the real alice keeps", len(refusals), "signed refusal(s); handed in below with every receipt")
r = write_lines(d / "receipts.jsonl", [*receipt_lines([alice, carol, fake]), *refusals])
chain = chain_id((bundle / "previous" / "public" / "genesis.json").read_bytes())
cli_verify(bundle, "--receipts", r, "--key", d / "provider.vkey", "--chain", chain,
           show=lambda x: "warning: the" in x or "checked" in x or "rejected" in x)
