"""Finding 1 (v3): truncation before a close.

w1: alice asks once (pos 1). The provider snapshots its window directory. alice asks two more questions (pos 2
and pos 4; bob's request lands while her first answer is generated, pos 3), so her receipts are signed at sizes 4
and 5. The provider restores the snapshot (alice's two answers, bob's, and their charges erased), closes w1 (close
record at pos 2: w1 ends at size 3), opens w2 from the rolled-back carry and serves alice's erased questions again.
alice's client, following the history to w2, is refused with a signed refusal (counter 4, the provider expects 2);
she asks again from a second device whose counter the provider's refusal told her (counter 2, 3).
The auditor gets the w2 bundle (w1 under previous/) and every receipt alice and bob hold."""

from __future__ import annotations

import shutil

from _common import cli_verify, receipt_lines, workdir, write_lines
from _toys import ServesDuring, charges_per_document, create, reopen

from dprag.audit.client.account import AccountClient
from dprag.audit.protocol.errors import RequestError
from dprag.audit.testing import window as fx

d = workdir("f01")
gen = ServesDuring()
svc = create(d / "w1", generator=gen, window="w1")  # M = max_queries_per_doc = 2 (toy_policy default)
M = svc.policy.generation.max_queries_per_doc
alice, bob = fx.client(svc, "alice"), fx.client(svc, "bob")
alice.ask(svc, "garden weather rain note one")
svc.close()
shutil.copytree(d / "w1", d / "snapshot")  # the provider's snapshot (size 2)

svc = reopen(d / "w1", gen)
gen.during["garden weather rain note two"] = lambda: bob.ask(svc, "garden weather rain note bob")
erased = [alice.ask(svc, q) for q in ("garden weather rain note two", "garden weather rain note three")]
print("alice's receipts in w1 (pos, size):", [(r["receipt"]["pos"], r["receipt"]["size"]) for r in alice.receipts])
print("bob's receipt in w1 (pos, size):", [(r["receipt"]["pos"], r["receipt"]["size"]) for r in bob.receipts])
before = svc.export_bundle(d / "w1-before-rollback")  # kept only to count what was really charged
svc.close()

shutil.rmtree(d / "w1")
shutil.copytree(d / "snapshot", d / "w1")  # the rollback
svc = reopen(d / "w1", gen)
w2 = svc.next_window(d / "w2", policy=fx.toy_policy(window="w2"))
print("w1 closed at size", svc.ledger.size, "(genesis, alice's first answer, the close record)")
svc.close()

alice.next_window("w2", w2.signer.vkey())
bob.next_window("w2", w2.signer.vkey())
try:
    alice.ask(w2, "garden weather rain note four")
except RequestError as e:
    print(f"alice's client (counter {alice.counter + 1}) refused in w2: {e}")
refusal = alice.kept["refusals.jsonl"][0]["refusal"]
print("the signed refusal alice keeps:", {k: refusal[k] for k in ("window", "field", "rule")})

alice2 = AccountClient(  # alice on a second device, at the counter the refusal names
    "alice", "w2", fx.account_key("alice"), provider_vkey=w2.signer.vkey(),
    embedder=fx.HashEmbedder(32), embedding_scale=w2.embedder_descriptor["embedding_scale"],
)
alice2.counter = 1
again = [alice2.ask(w2, q) for q in ("garden weather rain note two", "garden weather rain note three")]
print("alice served again in w2 (counter, pos):", [(a.receipt["counter"], a.pos) for a in again])
bundle = w2.export_bundle(d / "bundle")
w2.close()

# the before-rollback bundle holds w1's pos 1..4 (pos 1 survives the rollback, in previous/)
kept_w1 = charges_per_document((bundle / "previous", 10**9))
real = charges_per_document(before) + charges_per_document(bundle)
ledger = kept_w1 + charges_per_document(bundle)
worst = max(real, key=lambda i: real[i])
print(f"M = {M}; document {worst} ('{fx.CLINIC[worst]}') was really charged {real[worst]} times; "
      f"the audited history shows {ledger[worst]}; documents really charged more than M: "
      f"{sum(1 for v in real.values() if v > M)}")
refunded = charges_per_document(before) - kept_w1
print(f"charges erased by the rollback: {sum(refunded.values())} over {len(refunded)} documents")

r = write_lines(d / "receipts.jsonl", receipt_lines([alice, bob, alice2]))
cli_verify(bundle, "--receipts", r, show=lambda x: "checked:" in x or "warning" in x)
print()
r2 = write_lines(d / "receipts+refusal.jsonl", [*receipt_lines([alice, bob, alice2]), {"refusal": refusal}])
cli_verify(bundle, "--receipts", r2, title="the same, with alice's signed refusal handed in too",
           show=lambda x: "checked:" in x or "warning" in x or "rejected" in x)
print()
from dprag.audit.protocol.chain import chain_id  # noqa: E402

(d / "provider.vkey").write_text(alice.provider_vkey)  # the key alice's client pinned
chain = chain_id((bundle / "previous" / "public" / "genesis.json").read_bytes())
cli_verify(bundle, "--receipts", r, "--key", d / "provider.vkey", "--chain", chain,
           title="the same, with the key and the chain id pinned", show=lambda x: "checked:" in x or "warning" in x)
