"""Finding 10a (v3): C_emb is an unsalted hash.

An observer holding only the public genesis (public/genesis.json: it names each tenant's n_docs, i.e. the
descriptor's schema) hashes the descriptors of the embedders it guesses and compares with C_emb."""

from __future__ import annotations

import hashlib
import json

from _common import workdir
from _toys import create

from dprag.audit.protocol.encoding import encode
from dprag.audit.testing.toy import HashEmbedder

d = workdir("f10a")
svc = create(d / "svc", window="w1")
bundle = svc.export_bundle(d / "bundle")
svc.close()
genesis = json.loads((bundle / "public" / "genesis.json").read_bytes())  # public
schema = {t["tenant"]: t["n_docs"] for t in genesis["tenants"]}
print("public genesis: C_emb =", genesis["C_emb"], "; tenants' n_docs =", schema)
for name, emb, tmpl in (
    ("hash-bow-16, template 'toy'", HashEmbedder(16), "toy"),
    ("hash-bow-32, template 'dprag.audit.toy.ToyGenerator'", HashEmbedder(32), "dprag.audit.toy.ToyGenerator"),
    ("hash-bow-32, template 'toy'", HashEmbedder(32), "toy"),
):
    guess = hashlib.sha256(encode(emb.descriptor(schema, prompt_template=tmpl).to_dict())).hexdigest()
    print(f"guess {name:52s} H(canonical(descriptor)) = {guess[:16]}…  matches C_emb: {guess == genesis['C_emb']}")
