"""Cutting a bundle into the bundles of an auditor's successive runs (spec/protocol.md §8.14), for tests.

``cut_bundle(src, out, since, upto, signer, sign_at)`` writes the bundle a provider would have exported at size
``upto`` with ``dprag audit fetch --since since``: the leaves ``[since, upto)``, their openings and proofs, the
checkpoints of sizes in ``(since, upto]`` (``since`` 0: all up to ``upto``), and ``public/range.json`` when
``since`` > 0. ``sign_at``: sizes at which the provider (holding ``signer``) signs a checkpoint if the source has
none — a forger re-signing its own log can always do that, so the cut tests what the verifier checks, not what
the source happened to sign."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from ..protocol.bundle import parse_leaves
from ..protocol.chain import origin_of
from ..protocol.encoding import decode, encode
from ..protocol.ledger import NoteSigner
from ..protocol.ledger.checkpoint import Checkpoint, parse_note, sign_checkpoint
from ..protocol.ledger.rfc6962 import root_from_leaves


def _size(note: bytes) -> int:
    return Checkpoint.parse(parse_note(note)[0]).size


def cut_bundle(
    src: Path, out: Path, since: int, upto: int, signer: NoteSigner | None, sign_at: Iterable[int] = ()
) -> Path:
    """Write the cut (module docstring) to ``out`` (replaced) and return it."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out)
    leaves = parse_leaves((src / "public" / "leaves.bin").read_bytes())
    if not 0 <= since <= upto <= len(leaves):
        raise ValueError(f"a cut [{since}, {upto}) of a log of {len(leaves)} leaves")
    tail = leaves[since:upto]
    (out / "public" / "leaves.bin").write_bytes(b"".join(len(x).to_bytes(4, "big") + x for x in tail))
    if since:
        (out / "public" / "range.json").write_bytes(encode({"from": since}))
    notes = [n for n in (src / "public" / "checkpoints.txt").read_bytes().split(b"~~~\n") if n]
    by_size = {_size(n): n for n in notes}
    origin = origin_of(leaves[0])
    for s in sign_at:
        if s <= len(leaves) and s not in by_size and signer is not None:
            by_size[s] = sign_checkpoint(Checkpoint(origin, s, root_from_leaves(leaves[:s]), ()), signer)
    kept = [by_size[s] for s in sorted(by_size) if (s > since or not since) and s <= upto]
    (out / "public" / "checkpoints.txt").write_bytes(b"~~~\n".join(kept))
    for name in ("openings.jsonl", "proofs.jsonl"):
        p = out / "auditor" / name
        if p.exists():
            lines = [x for x in p.read_bytes().splitlines() if x and since <= decode(x)["pos"] < upto]
            p.write_bytes(b"".join(x + b"\n" for x in lines))
    return out
