"""Finding 9 (v3): timing reaches signed bytes.

Two toy windows with every random choice fixed (seed, salts, the provider key, the record nonces, the accounts'
request nonces): alice asks, then bob — in run A after alice's answer is stored, in run B while it is being
generated (the toy generator serves bob's request before it answers alice: a long generation, with no clock).
Bob's request is signed before either run, so both runs hold the same request bytes. The two runs differ in
nothing but when bob's request landed."""

from __future__ import annotations

import hashlib
import itertools
import json

from _common import workdir
from _toys import ServesDuring, create

from dprag.audit.protocol import commitments as cm
from dprag.audit.protocol.encoding import encode
from dprag.audit.protocol.ledger import NoteSigner
from dprag.audit.provider import serving
from dprag.audit.testing import window as fx

d = workdir("f09")
REAL = (serving.secrets.token_bytes, serving.secrets.token_hex, cm.os.urandom)


def run(bob_lands_meanwhile: bool):
    counter = itertools.count()

    def fixed(n: int = 32) -> bytes:
        return hashlib.shake_256(b"fixed %d" % next(counter)).digest(n)

    serving.secrets.token_bytes = fixed
    serving.secrets.token_hex = lambda n=32: fixed(n).hex()
    cm.os.urandom = fixed
    try:
        gen = ServesDuring()
        svc = create(d / ("B" if bob_lands_meanwhile else "A"), generator=gen,
                     signer=NoteSigner("provider", b"\x07" * 32), window="w1")
        alice, bob = fx.client(svc, "alice"), fx.client(svc, "bob")
        bob_req = bob.request("inhaler drug protocol")
        got = {}
        if bob_lands_meanwhile:
            gen.during["asthma protocol inhaler patient"] = lambda: got.setdefault("bob", bob.send(svc, bob_req))
        got["alice"] = alice.ask(svc, "asthma protocol inhaler patient")
        if not bob_lands_meanwhile:
            got["bob"] = bob.send(svc, bob_req)
        sizes = [s for s, _ in svc.aud.checkpoints(svc.ledger.size)]
        genesis = svc.ledger.leaf(0)
        svc.close()
    finally:
        serving.secrets.token_bytes, serving.secrets.token_hex, cm.os.urandom = REAL
    return got, sizes, genesis


A, sizes_a, g_a = run(False)
B, sizes_b, g_b = run(True)
print("same genesis bytes in both runs:", g_a == g_b)
for who in ("alice", "bob"):
    ra, rb = A[who].receipt, B[who].receipt
    print(f"{who}: run A (pos, size) = ({ra['pos']}, {ra['size']}), run B = ({rb['pos']}, {rb['size']}); "
          f"receipt bytes identical: {encode(ra) == encode(rb)}; answers identical: {A[who].answer == B[who].answer}")
    diff = {k: (ra[k], rb[k]) for k in ra if ra[k] != rb[k]}
    print(f"  fields that differ: {json.dumps({k: [str(x)[:16] for x in v] for k, v in diff.items()})}")
print("checkpoint sizes signed: run A", sizes_a, "; run B", sizes_b)
print("alice's receipt, run A:", encode({k: A['alice'].receipt[k] for k in ('pos', 'size', 'root')}).decode())
print("alice's receipt, run B:", encode({k: B['alice'].receipt[k] for k in ('pos', 'size', 'root')}).decode())


# Neighbouring corpora: the generation is slow (bob's request lands meanwhile) exactly when a voter's context holds
# a long record, as a real model's generation time grows with its prompt. Corpus D holds document 24 padded with 100
# " ." (a long record with the same words: the same embedding, the same selection, the same answer); its
# neighbour D' holds the ordinary record there.
class SlowOnLongRecord(ServesDuring):
    def _meanwhile(self, prompts) -> None:
        if any(len(c) > 200 for p in prompts for c in p.contexts):
            for fn in list(self.during.values()):
                fn()
            self.during.clear()


def neighbour(with_record: bool):
    counter = itertools.count()

    def fixed(n: int = 32) -> bytes:
        return hashlib.shake_256(b"fixed %d" % next(counter)).digest(n)

    serving.secrets.token_bytes = fixed
    serving.secrets.token_hex = lambda n=32: fixed(n).hex()
    cm.os.urandom = fixed
    try:
        clinic = list(fx.CLINIC)
        if with_record:
            clinic[24] = clinic[24] + " ." * 100
        gen = SlowOnLongRecord()
        svc = create(d / ("D" if with_record else "D-neighbour"), generator=gen,
                     signer=NoteSigner("provider", b"\x07" * 32), tenants={"clinic": clinic, "legal": fx.LEGAL},
                     window="w1")
        alice, bob = fx.client(svc, "alice"), fx.client(svc, "bob")
        bob_req = bob.request("inhaler drug protocol")
        got = {}
        gen.during["bob"] = lambda: got.setdefault("bob", bob.send(svc, bob_req))  # runs only if generation is slow
        got["alice"] = alice.ask(svc, "asthma protocol inhaler patient")
        if "bob" not in got:
            got["bob"] = bob.send(svc, bob_req)
        svc.close()
    finally:
        serving.secrets.token_bytes, serving.secrets.token_hex, cm.os.urandom = REAL
    return got


print()
print("neighbouring corpora (document 24 long in D, ordinary in D'):")
out = {}
for name, flag in (("D ", True), ("D'", False)):
    g = out[name] = neighbour(flag)
    r = g["alice"].receipt
    print(f"  corpus {name}: alice's receipt pos {r['pos']} size {r['size']}, answer {g['alice'].answer!r}, "
          f"citations {g['alice'].citations}; bob's pos {g['bob'].receipt['pos']}")
