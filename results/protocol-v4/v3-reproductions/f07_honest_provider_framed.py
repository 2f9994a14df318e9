"""Finding 7 (v3): an honest provider framed.

(a) alice signs counter 1 and counter 2, sends counter 2 first (the honest provider refuses it, signed: "must be
the next counter 1"), then counter 1, then the same counter-2 bytes (served). She hands the refusal in with her
receipts.
(b) an auditor fetches w1 while it is open; the honest provider later closes w1 and opens w2 (same key); alice's
w2 receipt is handed in to the audit of the w1 bundle."""

from __future__ import annotations

from _common import cli_verify, receipt_lines, workdir, write_lines
from _toys import create

from dprag.audit.protocol.errors import RequestError
from dprag.audit.testing import window as fx

d = workdir("f07")
svc = create(d / "a" / "w1", window="w1")
alice = fx.client(svc, "alice")
r1 = alice.request("asthma protocol inhaler patient")
r2 = alice.request("inhaler drug protocol")
try:
    svc.serve(r2)  # counter 2 before counter 1: the account's own doing
except RequestError as e:
    refusal = e.refusal
    print("(a) counter 2 sent first:", e)
s1 = alice.send(svc, r1)
s2 = alice.send(svc, r2)  # the same signed counter-2 bytes, now the next counter
print("(a) then served: counter 1 at pos", s1.pos, "; the same counter-2 bytes at pos", s2.pos)
bundle = svc.export_bundle(d / "a" / "bundle")
svc.close()
r = write_lines(d / "a" / "receipts.jsonl", [*receipt_lines([alice]), {"refusal": refusal}])
cli_verify(bundle, "--receipts", r, title="(a) the refusal handed in with alice's receipts",
           show=lambda x: x.startswith("  receipts") or "checked" in x)
r = write_lines(d / "a" / "receipts-only.jsonl", receipt_lines([alice]))
cli_verify(bundle, "--receipts", r, title="(a) control: the receipts alone", show=lambda x: False)

# (a') the same sequence through the client's own send(), and the file its own export_receipts() writes
svc = create(d / "a2" / "w1", window="w1")
alice = fx.client(svc, "alice")
r1 = alice.request("asthma protocol inhaler patient")
r2 = alice.request("inhaler drug protocol")
try:
    alice.send(svc, r2)
except RequestError:
    pass
alice.send(svc, r1)
alice.send(svc, r2)
bundle = svc.export_bundle(d / "a2" / "bundle")
svc.close()
r = alice.export_receipts(d / "a2" / "export.jsonl")
cli_verify(bundle, "--receipts", r, title="(a') the client's own export_receipts() file, same sequence via send()",
           show=lambda x: x.startswith("  receipts"))
print()

# (b)
w1 = create(d / "b" / "w1", window="w1")
alice = fx.client(w1, "alice")
alice.ask(w1, "garden weather rain note")
early = w1.export_bundle(d / "b" / "bundle-w1-open")  # fetched while w1 is open
w2 = w1.next_window(d / "b" / "w2", policy=fx.toy_policy(window="w2"))  # honest, same key
alice.next_window("w2", w2.signer.vkey())
alice.ask(w2, "asthma protocol inhaler patient")
later = w2.export_bundle(d / "b" / "bundle-w2")
w1.close()
w2.close()
r = write_lines(d / "b" / "receipts.jsonl", receipt_lines([alice]))
cli_verify(early, "--receipts", r, title="(b) the bundle fetched while w1 was open, with alice's receipts",
           show=lambda x: x.startswith("  receipts") or "checked" in x)
cli_verify(later, "--receipts", r, title="(b) control: the w2 bundle with the same receipts", show=lambda x: False)
