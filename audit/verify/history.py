"""§8.10 ``history`` (spec/protocol.md §3.1): which log the verdict covers, and what the auditor pinned of it.

A corpus has one append-only log. Its **chain id** is hex H(genesis leaf bytes) and its **origin**, the name its
checkpoints, receipts and refusals carry, is ``dprag/<chain id>``. Accounts, documents, provider keys and
policies change by leaves of the log itself (§3.2-§3.5), which §8.3 and §8.5 check in log order; nothing is
carried between logs. This check:

- with ``--origin``, FAILs a log whose origin is not the pinned one (a fresh log under the same key, which would
  refund every budget, or an earlier log of another corpus);
- fills the verdict's ``history`` block: the origin and chain id, the last epoch, the provider's keys in order,
  the rotations, the key the auditor pinned and the keys that signed each epoch (so a verdict after a rotation
  says which key the auditor pinned and which keys it authenticated from it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..protocol.bundle import AuditorInputError, load_bundle
from ..protocol.chain import chain_id
from ..protocol.encoding import excerpt
from .inputs import AuditorInputs, check_version
from .run import Run, guarded
from .verdict import key_fingerprint


def read_bundle(
    bundle_path: str | Path, progress: Callable[[str, int], None] | None, max_read: int | None = None
) -> Run:
    """The bundle at ``bundle_path``, read within ``max_read`` bytes in all (the auditor's cap; None:
    ``bundle.DEFAULT_MAX_READ``, beside the per-file caps), as the checks' shared state."""
    if max_read is not None and (isinstance(max_read, bool) or not isinstance(max_read, int) or max_read < 1):
        raise AuditorInputError(f"--max-read must be a positive number of bytes, got {max_read!r}")
    b = load_bundle(bundle_path, max_read)
    check_version(b)
    return Run(b, progress)


def parse_origin(text: str) -> str:
    """The auditor's ``--origin``: ``dprag/<chain id>`` or the bare chain id (64 lower-case hex characters);
    returns the origin. Anything else is the auditor's exit 2, naming the flag."""
    cid = text[len("dprag/") :] if text.startswith("dprag/") else text
    if len(cid) != 64 or any(c not in "0123456789abcdef" for c in cid):
        raise AuditorInputError(
            f"--origin {excerpt(text)}: must be dprag/<chain id> (64 lower-case hex characters, the log's name)"
        )
    return "dprag/" + cid


@guarded("history")
def check_8_10_history(run: Run, given: AuditorInputs, origin: str | None) -> None:
    """§8.10 history (module docstring). ``origin``: the auditor's pinned origin (``parse_origin``), or None."""
    if not run.b.leaves:
        return
    cid = chain_id(run.b.leaves[0])
    epoch = run.epochs[-1].number if run.epochs else 0
    eras = run.keys.eras if run.keys is not None else []
    run.history_info = {  # typed as the verdict's schema says: nothing of a malformed genesis is copied out
        "origin": run.origin,
        "chain": cid,
        "epoch": epoch,
        "origin_pinned": origin is not None,
        "keys": [key_fingerprint(v.vkey()) for _, v in eras],
    }
    if run.keys is not None and run.keys.rotations():
        run.history_info["key_rotations"] = [
            {"pos": pos, "key": key_fingerprint(new.vkey())} for pos, _, new in run.keys.rotations()
        ]
        run.history_info["epoch_keys"] = _epoch_keys(run)
    if given.pinned is not None:
        run.history_info["pinned_key"] = key_fingerprint(given.pinned)
    if origin is not None and origin != run.origin:
        run.fail(
            "history",
            f"the log's origin {excerpt(run.origin)} is not the pinned {excerpt(origin)} (another log, or a fresh "
            "one under the same key: its budgets restart from zero)",
        )


def _epoch_keys(run: Run) -> list[dict[str, Any]]:
    """For each epoch, the keys that signed checkpoints of its leaves (sizes pos + 1 ... the next epoch's pos)."""
    assert run.keys is not None
    keys = run.keys
    starts = [ep.pos for ep in run.epochs] or [0]
    ends = [*starts[1:], max(run.n - 1, 0)]
    out = []
    for ep, lo, hi in zip(run.epochs, starts, ends, strict=False):
        first, last = keys.index_at(lo + 1), keys.index_at(max(hi, lo) + 1)
        out.append({"epoch": ep.number, "keys": [key_fingerprint(v.vkey()) for _, v in keys.eras[first : last + 1]]})
    return out
