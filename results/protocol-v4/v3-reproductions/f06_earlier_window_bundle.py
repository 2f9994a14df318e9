"""Finding 6 (v3): an earlier window's bundle handed in for a later audit.

An honest history w1 -> w2 (alice and bob ask in both). The auditor, auditing w2, is handed w1's bundle (exported
after w1 closed) and every receipt; the key and the chain id are pinned, the window is not."""

from __future__ import annotations

from _common import cli_verify, receipt_lines, workdir, write_lines
from _toys import create, reopen

from dprag.audit.protocol.chain import chain_id
from dprag.audit.testing import window as fx

d = workdir("f06")
w1 = create(d / "w1", window="w1")
clients = {a: fx.client(w1, a) for a in ("alice", "bob")}
for a, c in clients.items():
    c.ask(w1, f"asthma protocol inhaler patient {a} 1")
w2 = w1.next_window(d / "w2", policy=fx.toy_policy(window="w2"))
for a, c in clients.items():
    c.next_window("w2", w2.signer.vkey())
    c.ask(w2, f"garden weather rain note {a} 2")
later = w2.export_bundle(d / "bundle-w2")
w1.close()
w2.close()
w1 = reopen(d / "w1")
earlier = w1.export_bundle(d / "bundle-w1")
(d / "provider.vkey").write_text(w1.signer.vkey())
chain = chain_id(w1.ledger.leaf(0))
w1.close()

r = write_lines(d / "receipts.jsonl", receipt_lines(clients.values()))
pins = ["--receipts", r, "--key", d / "provider.vkey", "--chain", chain]
show = lambda x: "warning" in x or "checked" in x or "FAIL" in x  # noqa: E731
cli_verify(later, *pins, title="the w2 bundle (what the audit is for)", show=lambda x: "warning" in x)
print()
cli_verify(earlier, *pins, title="w1's bundle handed in instead, no --window", show=show)
print()
cli_verify(earlier, *pins, "--window", "w2", title="the same with --window w2", show=lambda x: False)
