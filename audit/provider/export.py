"""The bundle a service exports (spec/protocol.md §7): ``public/`` and the confidential ``auditor/``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from dprag.errors import InvalidParameterError

from ..protocol import commitments as cm
from ..protocol.encoding import decode, encode
from .atomic_files import write_atomically

if TYPE_CHECKING:
    from .window import Window


def export_bundle(svc: Window, out: str | os.PathLike[str], *, since: int = 0) -> Path:
    """Write the bundle (spec/protocol.md §7): ``public/`` and the confidential ``auditor/``, cut at one committed
    size. ``since`` > 0: only the leaves, openings and proofs from position ``since`` on and the checkpoints of
    sizes above it, with ``public/range.json`` naming ``since`` (an auditor's state verifies the rest, §8.14)."""
    out = Path(out)
    with svc.store.snapshot():  # one snapshot: the bundle is cut at a committed size
        size = svc.ledger.size
        if isinstance(since, bool) or not isinstance(since, int) or not 0 <= since <= size:
            raise InvalidParameterError("since", f"must be a ledger size in [0, {size}] (the log's size now)", since)
        (out / "public").mkdir(parents=True, exist_ok=True)
        (out / "auditor" / "index").mkdir(parents=True, exist_ok=True)
        (out / "auditor" / "docs").mkdir(parents=True, exist_ok=True)
        leaves = list(svc.ledger.leaves(0, size))
        write_atomically(out / "public" / "genesis.json", leaves[0])
        tail = leaves[since:]
        write_atomically(out / "public" / "leaves.bin", b"".join(len(x).to_bytes(4, "big") + x for x in tail))
        if since:
            write_atomically(out / "public" / "range.json", encode({"from": since}))
        notes = [note for at, note in svc.aud.checkpoints(size) if at > since or not since]
        write_atomically(out / "public" / "checkpoints.txt", b"~~~\n".join(notes))
        write_atomically(out / "public" / "provider.vkey", svc.signer.vkey().encode())
        salts = decode((svc.dir / "secret" / "salts.json").read_bytes(), what="salts")
        genesis = svc.epochs[0]  # genesis's policy and seed; the later epochs' go to auditor/epochs.json
        write_atomically(out / "auditor" / "seed.hex", genesis.seed.hex().encode(), private=True)
        write_atomically(
            out / "auditor" / "policy.json",
            encode({"policy": genesis.policy.to_dict(), "salt": salts["policy"]}),
            private=True,
        )
        write_atomically(out / "auditor" / "embedder.json", (svc.dir / "config" / "embedder.json").read_bytes())
        later = [ep for ep in svc.epochs[1:] if ep.pos < size]  # the epochs the cut holds (§3.4)
        if later:
            sec = {e["epoch"]: e for e in decode(svc.stored_file("secret/epochs.json"), what="epochs")}
            write_atomically(
                out / "auditor" / "epochs.json",
                encode(
                    [
                        {
                            "epoch": ep.number,
                            "pos": ep.pos,
                            "policy": ep.policy.to_dict(),
                            "salt": sec[ep.number]["salt"],
                            "seed": ep.seed.hex(),
                        }
                        for ep in later
                    ]
                ),
                private=True,
            )
        # each tenant as the cut holds it: genesis's documents, then those of the documents leaves below ``size``
        count = {x["tenant"]: x["n_docs"] for x in decode(leaves[0], what="genesis")["tenants"]}
        for leaf in leaves[1:]:
            if b'"type":"documents"' in leaf:  # a documents leaf (§3.5)
                rec = decode(leaf, what="leaf")
                if rec.get("type") == "documents":
                    count[rec["tenant"]] += rec["count"]
        salts = decode(svc.stored_file("secret/salts.json"), what="salts")
        for t in svc.tenants:
            n, dim = count[t], int(svc.tenants[t].q.shape[1])
            index = svc.stored_file(f"index/{t}.i16")[: 2 * n * dim]
            write_atomically(out / "auditor" / "index" / f"{t}.i16", index)
            docs = decode(svc.stored_file(f"docs/{t}.json"), what="documents")
            additions = [a for a in (salts.get("index_additions") or {}).get(t, []) if a["pos"] < size]
            write_atomically(
                out / "auditor" / "docs" / f"{t}.json",
                encode(
                    {
                        "ids": docs["ids"][:n],
                        "salts": salts["documents"][t][:n],
                        "text_sha256": [cm.text_hash(x).hex() for x in docs["texts"][:n]],
                        "index_salt": salts["index"][t],
                        **({"additions": additions} if additions else {}),
                        **({"zk_blinding": salts["zk"][t]} if t in salts.get("zk", {}) else {}),
                    }
                ),
                private=True,
            )
        lines = [body for _, body in svc.aud.openings(size, since)]
        write_atomically(out / "auditor" / "openings.jsonl", b"".join(b + b"\n" for b in lines), private=True)
        proofs = [body for pos, body in svc.aud.proofs() if since <= pos < size]
        if svc.policy.retrieval.zk_tenants:
            write_atomically(out / "auditor" / "proofs.jsonl", b"".join(b + b"\n" for b in proofs), private=True)
    return out
