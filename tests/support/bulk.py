"""A large honest window, written fast: for verifier benchmarks and fuzzing at scale.

``bulk_window`` opens a real window with ``ProviderService.create`` (the same commitments, keys, registry
and genesis), then serves ``n_queries`` account-signed requests by the rules of spec/protocol.md §5.3 —
the same functions the service uses (``retrieval``, ``charges``, ``receipts``, ``encoding``) — but appends
the leaves in one batch and signs one checkpoint at the end, instead of a durable commit and a checkpoint
per query. Each receipt names its leaf's size (pos + 1) and that prefix's root (§5.4). The bundle must PASS.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np

from dprag.accounting.collusion import exact_sigma
from dprag.audit.protocol import commitments as cm
from dprag.audit.protocol.charges import ChargeRule, expected_charges
from dprag.audit.protocol.encoding import digest, encode
from dprag.audit.protocol.ledger.rfc6962 import CompactRange, hash_leaf
from dprag.audit.protocol.policy import CoalitionPolicy, GenerationPolicy, Policy, RetrievalPolicy, SamplerSpec
from dprag.audit.protocol.receipts import receipt_body, sign_receipt
from dprag.audit.protocol.request import AccountKey, make_request, request_hash
from dprag.audit.protocol.retrieval import noisy_top_k, request_source, retrieval_source, top_commitment
from dprag.audit.provider.service import ProviderService
from dprag.audit.testing.toy import ToyGenerator


class RandomEmbedder:
    """Unit Gaussian embeddings keyed by text (no model): documents and queries alike."""

    def __init__(self, dimension: int):
        self.dimension = dimension

    def embed(self, texts):
        out = np.empty((len(texts), self.dimension))
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
            out[i] = np.random.default_rng(seed).standard_normal(self.dimension)
        return out

    def descriptor(self, schema):
        h = hashlib.sha256(f"random-{self.dimension}".encode()).hexdigest()
        return cm.EmbedderDescriptor(
            model=f"random-{self.dimension}",
            weights_sha256=h,
            dimension=self.dimension,
            prompt_template="bench",
            tokenizer_sha256=h,
            schema=schema,
        )


def bulk_policy(n_per_account: int, k_max: int = 5) -> Policy:
    sens = ((1 << 20) >> 10) + 1
    return Policy(
        window="bulk",
        retrieval=RetrievalPolicy(
            enabled_tenants=("t",),
            K=5,
            n=n_per_account,
            epsilon_acc=1.0,
            delta_acc=1e-6,
            sigma=exact_sigma(1.0, 1e-6, n_per_account, sens),
            sensitivity=sens,
            score_clip=(0, 1 << 20),
            score_shift=10,
            sampler=SamplerSpec(9.5, 64, 1e-12),
        ),
        coalition=CoalitionPolicy(k_max=k_max, delta_policy=1e-5),
        generation=GenerationPolicy(
            algorithm="murag", m=10, epsilon_token=4.0, max_private_tokens=3, max_queries_per_doc=4, tau=60
        ),
    )


def bulk_window(
    directory: str | Path,
    *,
    n_queries: int,
    n_docs: int = 1000,
    dim: int = 384,
    accounts: int = 1000,
    checkpoints_at: tuple[int, ...] = (),
) -> tuple[Path, Path]:
    """Write an honest window of ``n_queries`` over one tenant of ``n_docs``; return (bundle, receipts).
    ``checkpoints_at``: ledger sizes at which a checkpoint is signed too (where an auditor's earlier run cut it)."""
    d = Path(directory)
    shutil.rmtree(d, ignore_errors=True)
    per = -(-n_queries // accounts)
    names = [f"a{i:05d}" for i in range(accounts)]
    keys = {a: AccountKey(hashlib.sha256(a.encode()).digest()) for a in names}
    emb = RandomEmbedder(dim)
    docs = [f"document {i}" for i in range(n_docs)]
    svc = ProviderService.create(
        d / "svc",
        policy=bulk_policy(per),
        embedder=emb,
        embedder_descriptor=emb.descriptor({"t": n_docs}),
        generator=ToyGenerator(),
        tenants={"t": docs},
        accounts={a: ("t", keys[a].vkey) for a in names},
        allow_weak=True,
    )
    pol, ten = svc.policy, svc.tenants["t"]
    rule = ChargeRule.of(pol)
    spent = np.zeros(n_docs, dtype=np.int64)
    counters = dict.fromkeys(names, 0)
    leaves, openings, pending = [], [], []
    base = svc.ledger.size
    qemb_all = cm.quantise_embeddings(np.random.default_rng(1).standard_normal((n_queries, dim)))
    for j in range(n_queries):
        a = names[j % accounts]
        counters[a] += 1
        qb = cm.embedding_bytes(qemb_all[j])
        signed = make_request(
            keys[a],
            window=pol.window,
            account=a,
            counter=counters[a],
            question=f"question {j}",
            qemb=qb,
            nonce=hashlib.sha256(b"n%d" % j).digest()[:16],
        )
        h_req = request_hash(signed)
        scores = ten.retriever.for_query(f"question {j}", qemb_all[j]).scores(f"question {j}")
        z = svc.table.sample(n_docs, retrieval_source(svc.seed, "t", qb))
        top = noisy_top_k(scores, z, pol.retrieval.K)
        nonce = hashlib.sha256(b"t%d" % j).digest()[:16]
        h_top = top_commitment(top, nonce)
        charges, bins = expected_charges(pol, rule, scores, spent, request_source(svc.seed, "select", h_req))
        for units, ids in charges:
            spent[ids] += units
        charge = {
            "nonce": nonce.hex(),
            "algorithm": pol.generation.algorithm,
            "bins_released": bins,
            "charges": [
                {"cost": {"kind": "pure", "epsilon_units": int(u)}, "ids": [int(i) for i in ids]} for u, ids in charges
            ],
        }
        pos = base + j
        openings.append(
            (
                pos,
                encode(
                    {
                        "pos": pos,
                        "kind": "query",
                        "request": signed,
                        "qemb": qb.hex(),
                        "top": [int(i) for i in top],
                        "nonce_top": nonce.hex(),
                        "charge": charge,
                    }
                ),
            )
        )
        leaf = encode(
            {
                "type": "query",
                "h_req": h_req.hex(),
                "h_top": h_top,
                "h_charge": digest(charge),
            }
        )
        leaves.append(leaf)
        pending.append((a, counters[a], h_req.hex(), h_top, nonce.hex(), pos, hash_leaf(leaf).hex()))
    # (the provider's budget store is not charged: the service directory is scaffolding for the bundle only)
    with svc.store.write():
        for pos, body in openings:
            svc.aud.put_opening(pos, body)
        svc.ledger.append_many(leaves)
    svc.checkpoint_now()
    for size in checkpoints_at:
        svc.aud.put_checkpoint(size, svc.ledger.checkpoint(svc.signer, svc.origin, size=size))
    # every receipt at its leaf's size (pos + 1, spec/protocol.md §5.4): the prefix roots in one pass
    cr = CompactRange()
    for leaf in svc.ledger.leaves(0, base):
        cr.append_leaf_hash(hash_leaf(leaf))
    lines = []
    for a, c, h_req, h_top, nonce_top, pos, lh in pending:
        cr.append_leaf_hash(bytes.fromhex(lh))
        size, root = cr.size, cr.root()
        body = receipt_body(
            origin=svc.origin,
            account=a,
            tenant="t",
            counter=c,
            h_req=h_req,
            h_top=h_top,
            nonce_top=nonce_top,
            h_answer=hashlib.sha256(b"answer").hexdigest(),
            pos=pos,
            leaf_hash=lh,
            size=size,
            root=root.hex(),
        )
        lines.append(encode({"receipt": sign_receipt(body, svc.signer)}))
    bundle = svc.export_bundle(d / "bundle")
    svc.close()
    receipts = d / "receipts.jsonl"
    receipts.write_bytes(b"".join(x + b"\n" for x in lines))
    return bundle, receipts
