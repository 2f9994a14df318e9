"""§8.5 ``ledger`` (spec/protocol.md): the roots recomputed from ``leaves.bin`` (one pass for every size needed);
every checkpoint signed by the provider key, increasing, within and consistent with the ledger, the last one
covering it; with ``--trusted-checkpoint``, the ledger extends it; with ``--witness`` keys, the checkpoint of
the whole ledger carries at least ``--min-witnesses`` valid witness cosignatures (c2sp.org/tlog-cosignature)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dprag.errors import DpragError

from ..protocol.encoding import EncodingError, excerpt
from ..protocol.ledger import Checkpoint, NoteVerifier, open_checkpoint
from ..protocol.ledger.checkpoint import parse_note
from ..protocol.ledger.rfc6962 import CompactRange, hash_leaf
from ..protocol.provider_keys import KeyChain
from .run import Run, guarded

if TYPE_CHECKING:
    from ..protocol.ledger.witness import WitnessVerifier


def _prefix_roots(run: Run, sizes: set[int]) -> dict[int, bytes]:
    """RFC 6962 roots of the ledger prefixes of the given sizes, in one pass: from the state's compact range at
    ``run.base`` when every size is at least that (§8.14), else from the first leaf (the state's leaf hashes)."""
    out: dict[int, bytes] = {}
    prior, base = run.prior, run.base
    if prior is not None and base and min(sizes, default=base) >= base:
        cr = CompactRange(base, prior.frontier)
        start = base
    else:
        cr, start = CompactRange(), 0
    if start in sizes:
        out[start] = cr.root()
    top = max(sizes) if sizes else 0
    for k in range(start, top):
        cr.append_leaf_hash(run.leaf_hash(k))
        if k + 1 in sizes:
            out[k + 1] = cr.root()
    return out


def _claimed(note: bytes) -> Checkpoint | None:
    """The checkpoint a note claims, unverified (its size picks the key to verify it with, §3.3; its origin names
    the log it is of), or None if it does not parse."""
    try:
        return Checkpoint.parse(parse_note(note)[0])
    except (DpragError, EncodingError, ValueError, UnicodeError):
        return None


def _note_size(note: bytes) -> int | None:
    cp = _claimed(note)
    return None if cp is None else cp.size


def open_under(keys: KeyChain, note: bytes, origin: str) -> Checkpoint:
    """The checkpoint ``note`` opened under a key valid at its size (§3.3); EncodingError otherwise."""

    def check(key: NoteVerifier) -> Checkpoint:
        try:
            return open_checkpoint(note, origin, key)[0]
        except (DpragError, ValueError, UnicodeError) as e:
            raise EncodingError(str(e)) from None

    return keys.verifying(_note_size(note), check, "checkpoint")


def _open_checkpoints(run: Run, notes: list[bytes], origin: str, keys: KeyChain, what: str) -> list[Checkpoint]:
    opened: list[Checkpoint] = []
    for k, note in enumerate(notes):
        try:
            opened.append(open_under(keys, note, origin))
        except (DpragError, EncodingError, ValueError, UnicodeError) as e:
            run.fail("ledger", f"{what} {k}: {e}")
    return opened


def _check_rotations(run: Run, keys: KeyChain, origin: str) -> None:
    """§3.3: the first checkpoint covering each rotation leaf (size p + 1) is in the bundle, signed by both keys."""
    for pos, old, new in keys.rotations():
        if pos < run.base:
            continue  # checked by the run that verified that leaf (§8.14)
        both = False
        for note in run.b.checkpoints:
            if _note_size(note) != pos + 1:
                continue
            try:
                open_checkpoint(note, origin, old)
                open_checkpoint(note, origin, new)
                both = True
            except (DpragError, ValueError, UnicodeError):
                continue
        if both:
            run.ok("key_rotations")
        else:
            run.fail(
                "ledger",
                f"the provider key rotation at leaf {pos} has no checkpoint of size {pos + 1} signed by both the "
                "outgoing and the incoming key",
            )


def _opens(note: bytes, origin: str, vkey: str) -> bool:
    try:
        open_checkpoint(note, origin, NoteVerifier.from_vkey(vkey))
        return True
    except Exception:  # noqa: BLE001 - any defect: it does not open under that key
        return False


def _receipt_checkpoint(run: Run, keys: KeyChain, data: bytes, origin: str) -> Checkpoint | None:
    """A receipt kept from an earlier audit (``{"receipt": ...}`` or the bare receipt) as the trusted checkpoint:
    its size and root are signed by the log's key valid at that size, for this log's origin (§8.5). One that does
    not verify, or names another origin, FAILs ``ledger`` naming why."""
    from ..protocol.encoding import decode_content
    from ..protocol.receipts import verify_receipt

    try:
        obj = decode_content(data.strip(), what="trusted receipt")
        rc = obj.get("receipt", obj) if isinstance(obj, dict) else obj
        size = rc.get("size") if isinstance(rc, dict) else None
        body = keys.verifying(size, lambda key: verify_receipt(rc, key), "trusted receipt")
    except (DpragError, EncodingError, ValueError, UnicodeError) as e:
        run.fail("ledger", f"trusted checkpoint (a receipt): {e}")
        return None
    if body["origin"] != origin:
        run.fail(
            "ledger",
            f"the trusted receipt names the log {excerpt(body['origin'])}, not this one {excerpt(origin)}: the history "
            "was rewritten (a fresh log restarts every budget) or the bundle is of another log",
        )
        return None
    return Checkpoint(origin, int(body["size"]), bytes.fromhex(body["root"]), ())


@guarded("ledger")
def check_8_5_witnesses(run: Run, witnesses: list[WitnessVerifier], min_witnesses: int) -> None:
    """§8.5: the checkpoint covering the whole ledger carries >= min_witnesses valid witness cosignatures."""
    if not min_witnesses or run.genesis is None or run.keys is None:
        return
    from ..protocol.ledger.witness import cosignatures

    full = None
    for note in run.b.checkpoints:
        try:
            cp = open_under(run.keys, note, run.origin)
        except (DpragError, EncodingError, ValueError, UnicodeError):
            continue
        if cp.size == run.n:
            full = note
    if full is None:
        run.fail("ledger", "no checkpoint of the whole ledger to check witness cosignatures on")
        return
    try:
        got = cosignatures(full, witnesses)
    except (DpragError, ValueError, UnicodeError) as e:
        run.fail("ledger", f"witness cosignature: {e}")
        return
    run.checked["witness_cosignatures"] = len(got)
    if len(got) < min_witnesses:
        run.fail(
            "ledger",
            f"the last checkpoint carries {len(got)} valid cosignatures of the given witnesses, "
            f"fewer than --min-witnesses {min_witnesses}",
        )


@guarded("ledger")
def check_8_5_ledger(run: Run, receipt_sizes: set[int], trusted: bytes | None, pinned: str | None = None) -> int | None:
    """§8.5: the ledger, its checkpoints and the trusted checkpoint (whose size it returns, if given); the
    roots of every prefix a checkpoint or receipt names go to ``run.prefix_roots`` for §8.6. A trusted checkpoint
    that does not open under the bundle's key but does under the auditor's ``pinned`` key is a rewrite."""
    n = run.n
    run.leaf_hashes = b"".join(map(hash_leaf, run.b.leaves[run.base :]))  # 32 B each; the state's below base
    run.progress("ledger", n)
    if run.keys is None or run.genesis is None:
        return None
    origin = run.origin
    cps = _open_checkpoints(run, run.b.checkpoints, origin, run.keys, "checkpoint")
    _check_rotations(run, run.keys, origin)
    trusted_cp = None
    if trusted is not None and trusted.lstrip()[:1] == b"{":  # a receipt the auditor kept (§8.5)
        trusted_cp = _receipt_checkpoint(run, run.keys, trusted, origin)
        if trusted_cp is None:
            return None
    elif trusted is not None:
        claimed = _claimed(trusted)
        named = None if claimed is None else claimed.origin
        if named is not None and named != origin:
            rewrite = pinned is not None and _opens(trusted, named, pinned)
            under = " and verifies under the pinned key" if rewrite else ""
            run.fail(
                "ledger",
                f"the trusted checkpoint names the log {excerpt(named)}{under}, not this one {excerpt(origin)}: the "
                "history was rewritten (a fresh log restarts every budget) or the bundle is of another log",
            )
            return None
        if pinned is not None and pinned != run.genesis["provider_key"] and _opens(trusted, origin, pinned):
            run.fail(
                "ledger",
                "the trusted checkpoint verifies under the pinned key but not under the bundle's: the history was "
                "rewritten under another key",
            )
            return None
        got = _open_checkpoints(run, [trusted], origin, run.keys, "trusted checkpoint")
        trusted_cp = got[0] if got else None
    sizes = {c.size for c in cps if c.size <= n} | {n} | {s for s in receipt_sizes if s <= n}
    if trusted_cp is not None and trusted_cp.size <= n:
        sizes.add(trusted_cp.size)
    run.prefix_roots = _prefix_roots(run, sizes)
    last = -1
    for c in cps:
        if c.size > n:
            run.fail("ledger", f"checkpoint of size {c.size} exceeds the ledger size {n}")
        elif c.size <= last:
            run.fail("ledger", f"checkpoint of size {c.size} does not increase")
        elif run.prefix_roots[c.size] != c.root:
            since = f" as extended from the auditor's state at size {run.base} (a fork)" if run.base else ""
            run.fail("ledger", f"checkpoint of size {c.size} is not consistent with the ledger{since}")
        else:
            run.ok("ledger")
        last = max(last, c.size)
    if n not in {c.size for c in cps} and not (run.base and n == run.base):  # else the state's checkpoint covers it
        run.fail("ledger", f"no signed checkpoint covers the whole ledger (size {n})")
    if trusted_cp is not None:
        if trusted_cp.size > n:
            run.fail(
                "ledger",
                f"the ledger (size {n}) is shorter than the trusted checkpoint (size "
                f"{trusted_cp.size}): history was truncated",
            )
        elif run.prefix_roots[trusted_cp.size] != trusted_cp.root:
            run.fail(
                "ledger", f"the ledger is not consistent with the trusted checkpoint of size {trusted_cp.size} (a fork)"
            )
        else:
            run.ok("trusted_checkpoint")
        return trusted_cp.size
    return None
