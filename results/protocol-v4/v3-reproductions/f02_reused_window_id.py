"""Finding 2 (v3): a reused window id (w1 -> w2 -> w1, which next_window allows).

w1: bob asks once; the provider snapshots; alice asks four questions (sizes 3..6); the provider restores the
snapshot (alice's four answers and charges erased) and serves bob five more times, so w1 grows past her receipts'
sizes. It closes w1 and opens w2 (bob asks once). The auditor gets the w2 bundle and alice's four receipts: FAIL
(her receipts' roots are not w1's). The provider then closes w2 and opens a third window it names "w1" again; the
auditor gets that bundle (w2 and the first w1 under previous/) and the same four receipts."""

from __future__ import annotations

import shutil

from _common import cli_verify, receipt_lines, workdir, write_lines
from _toys import create, reopen

from dprag.audit.testing import window as fx

d = workdir("f02")
svc = create(d / "w1", window="w1")
alice, bob = fx.client(svc, "alice"), fx.client(svc, "bob")
bob.ask(svc, "garden weather rain note 0")
svc.close()
shutil.copytree(d / "w1", d / "snapshot")
svc = reopen(d / "w1")
for i in range(4):
    alice.ask(svc, f"asthma protocol inhaler patient {i}")
print("alice's receipts (window, pos, size):",
      [(r["receipt"]["window"], r["receipt"]["pos"], r["receipt"]["size"]) for r in alice.receipts])
svc.close()
shutil.rmtree(d / "w1")
shutil.copytree(d / "snapshot", d / "w1")  # the rollback
svc = reopen(d / "w1")
for i in range(1, 6):
    bob.ask(svc, f"garden weather rain note {i}")
w2 = svc.next_window(d / "w2", policy=fx.toy_policy(window="w2"))
print("first w1 closed at size", svc.ledger.size)
svc.close()
bob.next_window("w2", w2.signer.vkey())
bob.ask(w2, "garden weather rain note w2")
b12 = w2.export_bundle(d / "bundle-w1-w2")
w1b = w2.next_window(d / "w1-again", policy=fx.toy_policy(window="w1"))  # the id reused: accepted
print("next_window accepted a third window named", repr(w1b.policy.window), "; its size:", w1b.ledger.size)
b121 = w1b.export_bundle(d / "bundle-w1-w2-w1")
w2.close()
w1b.close()

r = write_lines(d / "alice.jsonl", receipt_lines([alice]))
show = lambda x: x.lstrip().startswith(("warning", "checked", "receipt", "history"))  # noqa: E731
cli_verify(b12, "--receipts", r, title="history w1 -> w2 (the rollback, ids not reused)", show=show)
print()
cli_verify(b121, "--receipts", r, title="history w1 -> w2 -> w1 (the same rollback, the id reused)",
           show=lambda x: "warning" in x or "checked" in x)
