"""Reading a bundle (spec/protocol.md §7) that a possibly hostile provider wrote.

Every file is read through ``bundlefs.BundleDir``: path components opened relative to the bundle's
directory descriptor with O_NOFOLLOW | O_NONBLOCK, regular files only, at most a cap of bytes, content never
echoed. A defect *inside* the bundle (missing, oversized, a symlink, unparsable) is recorded as a FAIL
reason naming the file — never "unusable input", so a cheating provider cannot turn FAIL into exit 2. Only
the auditor's own inputs (a bundle path that is not a directory, an unsupported protocol version) raise
``AuditorInputError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dprag.errors import DpragError

from .bundlefs import BundleDir, BundleFileError, FramingError, ReadBudgetError, show
from .encoding import loads_bounded

MAX_LEAF_BYTES = 1 << 24
#: the bytes a verification reads in all when the auditor gives no ``--max-read`` (16 GiB: a 3·10^6-query log with
#: its openings fits; every file is also under its own cap, ``CAPS``)
DEFAULT_MAX_READ = 1 << 34
CAPS = {  # bytes; generous for a 10^6-query window, bounded for any input
    "public/genesis.json": 1 << 26,
    "public/leaves.bin": 1 << 34,
    "public/checkpoints.txt": 1 << 32,
    "public/provider.vkey": 1 << 12,
    "auditor/seed.hex": 1 << 8,
    "auditor/policy.json": 1 << 20,
    "auditor/embedder.json": 1 << 20,
    "auditor/openings.jsonl": 1 << 36,
    "index": 1 << 34,
    "docs": 1 << 30,
    "auditor/epochs.json": 1 << 26,
    "auditor/consistency.jsonl": 1 << 30,
    "auditor/rotations.jsonl": 1 << 26,
    "public/range.json": 1 << 10,
}
MAX_TENANTS = 10_000


class AuditorInputError(DpragError):
    """The auditor's own input is unusable (exit 2): no bundle directory, an unsupported protocol version,
    an unreadable receipts / key / checkpoint file."""


BundleError = AuditorInputError  # the name version 1 used


def parse_leaves(data: bytes) -> list[bytes]:
    """leaves.bin: u32be(len) || bytes, repeated. Raises ValueError naming the defect."""
    out: list[bytes] = []
    i = 0
    while i < len(data):
        if i + 4 > len(data):
            raise ValueError("truncated length prefix")
        n = int.from_bytes(data[i : i + 4], "big")
        if n == 0:  # a record is a JSON object; stopping here keeps a file of zeros from becoming 10^5+ records
            raise ValueError(f"leaf {len(out)} is empty")
        if n > MAX_LEAF_BYTES or i + 4 + n > len(data):
            raise ValueError(f"leaf {len(out)} runs past the end of the file")
        out.append(data[i + 4 : i + 4 + n])
        i += 4 + n
    if not out:
        raise ValueError("empty ledger (no genesis leaf)")
    return out


@dataclass
class Bundle:
    root: Path
    leaves: Sequence[bytes] = field(default_factory=list)
    genesis_file: bytes | None = None
    checkpoints: list[bytes] = field(default_factory=list)
    vkey: str | None = None
    seed_hex: str | None = None
    policy_bytes: bytes | None = None
    embedder_bytes: bytes | None = None
    #: auditor/openings.jsonl's lines, spooled out of memory (``spool.SpooledLines``; a list where built by hand)
    openings_lines: Sequence[bytes] = field(default_factory=list)
    proofs_lines: list[bytes] | None = None  # auditor/proofs.jsonl (zk tenants only), None if absent
    #: auditor/consistency.jsonl: consistency proofs from the bundle's size to later receipts' (the fetch's)
    consistency_lines: list[bytes] = field(default_factory=list)
    #: auditor/rotations.jsonl: the provider key rotations beyond the bundle's size, ``{"rotation": proof}`` lines
    #: (``GET /v1/keys``, the fetch's): self-verifying, whoever supplies them (spec/protocol.md §3.3, §8.6)
    rotation_lines: list[bytes] = field(default_factory=list)
    index_files: dict[str, bytes] = field(default_factory=dict)
    docs_files: dict[str, bytes] = field(default_factory=dict)
    epochs_bytes: bytes | None = None  # auditor/epochs.json (a log with policy leaves, §3.4), None if absent
    defects: list[str] = field(default_factory=list)  # "files: ..." reasons
    #: the ledger position of ``leaves[0]``: 0 for a whole bundle; F for a bundle cut from size F on
    #: (``public/range.json``, ``dprag audit fetch --since F``), which only an auditor's state can verify (§8.14)
    first: int = 0

    @property
    def version(self) -> object:
        try:
            src = self.leaves[0] if self.leaves and not self.first else self.genesis_file
            g = loads_bounded(src, what="genesis") if src else None
        except (ValueError, RecursionError):
            return None
        return g.get("version") if isinstance(g, dict) else None


def load_bundle(path: str | Path, max_read: int | None = None) -> Bundle:
    """Read the files the spec names (§7); defects become ``Bundle.defects`` (FAIL reasons), never exceptions.
    ``max_read``: the auditor's cap on the bytes read in all (``--max-read``; default ``DEFAULT_MAX_READ``); a
    bundle that needs more is the auditor's exit 2 (raise the cap), not a FAIL."""
    p = Path(path)
    try:
        d = BundleDir.open(p, budget=DEFAULT_MAX_READ if max_read is None else max_read)
    except BundleFileError as e:
        raise AuditorInputError(f"{p}: not a readable bundle directory ({e})") from None
    try:
        return _load(d, p)
    finally:
        d.close()


def _exists(d: BundleDir, b: Bundle, rel: str) -> bool:
    try:
        return d.exists(rel)
    except BundleFileError as e:
        b.defects.append(f"files: {e}")
        return False


def _load(d: BundleDir, p: Path) -> Bundle:
    b = Bundle(root=p)

    def read(rel: str, cap: int, framed: bool = False, lines: bool = False) -> Any:
        """The file's bytes (``framed``: its records, parsed as they are read; ``lines``: its non-empty lines,
        spooled out of memory), or None with its defect kept."""
        try:
            if lines:
                return d.read_lines(rel, cap)
            return d.read_framed(rel, cap, MAX_LEAF_BYTES) if framed else d.read(rel, cap)
        except FramingError as e:
            b.defects.append(f"files: {rel}: {e}")
            return None
        except ReadBudgetError as e:
            raise AuditorInputError(
                f"--max-read {d.budget}: the bundle needs more bytes than the auditor's cap ({e}); raise the cap"
            ) from None
        except BundleFileError as e:
            b.defects.append(f"files: {e}")
            return None

    if _exists(d, b, "public/range.json"):  # a bundle cut from a later size (§7, §8.14)
        b.first = _range_from(read("public/range.json", CAPS["public/range.json"]), b)
    # parsed as it is read: a framing defect stops the reading (a file of zeros costs one chunk)
    leaves = read("public/leaves.bin", CAPS["public/leaves.bin"], framed=True)
    if leaves == [] and not b.first:  # a cut bundle may hold no new leaf
        b.defects.append("files: public/leaves.bin: empty ledger (no genesis leaf)")
    b.leaves = leaves or []
    b.genesis_file = read("public/genesis.json", CAPS["public/genesis.json"])
    cps = read("public/checkpoints.txt", CAPS["public/checkpoints.txt"])
    b.checkpoints = [c for c in cps.split(b"~~~\n") if c] if cps is not None else []
    vk = read("public/provider.vkey", CAPS["public/provider.vkey"])
    b.vkey = None if vk is None else vk.decode("latin-1")
    seed = read("auditor/seed.hex", CAPS["auditor/seed.hex"])
    b.seed_hex = None if seed is None else seed.decode("latin-1")
    b.policy_bytes = read("auditor/policy.json", CAPS["auditor/policy.json"])
    b.embedder_bytes = read("auditor/embedder.json", CAPS["auditor/embedder.json"])
    ops = read("auditor/openings.jsonl", CAPS["auditor/openings.jsonl"], lines=True)  # spooled: kB per leaf
    b.openings_lines = ops if ops is not None else []
    if _exists(d, b, "auditor/epochs.json"):  # the epochs after genesis's (§3.4)
        b.epochs_bytes = read("auditor/epochs.json", CAPS["auditor/epochs.json"])
    if _exists(d, b, "auditor/consistency.jsonl"):  # collected by the auditor's fetch (§8.6)
        cons = read("auditor/consistency.jsonl", CAPS["auditor/consistency.jsonl"])
        b.consistency_lines = [ln for ln in cons.split(b"\n") if ln] if cons is not None else []
    if _exists(d, b, "auditor/rotations.jsonl"):  # collected by the auditor's fetch (§3.3)
        rot = read("auditor/rotations.jsonl", CAPS["auditor/rotations.jsonl"])
        b.rotation_lines = [ln for ln in rot.split(b"\n") if ln] if rot is not None else []
    if _exists(d, b, "auditor/proofs.jsonl"):
        pr = read("auditor/proofs.jsonl", CAPS["auditor/openings.jsonl"])
        b.proofs_lines = [ln for ln in pr.split(b"\n") if ln] if pr is not None else []
    # the tenants' files: only those genesis names, each at most the size genesis implies (spec/protocol.md §7)
    named, dim = _named_tenants(b), _dimension(b.embedder_bytes)
    for sub, suffix, target in (("auditor/index", ".i16", b.index_files), ("auditor/docs", ".json", b.docs_files)):
        try:
            names = d.listdir(sub)
        except BundleFileError as e:
            b.defects.append(f"files: {e}")
            continue
        present = set(names)
        stray = [n for n in names if not (n.endswith(suffix) and n[: -len(suffix)] in named)]
        if stray:
            b.defects.append(
                f"files: {sub}: holds {len(stray)} entr{'y' if len(stray) == 1 else 'ies'} genesis does not name "
                f"({', '.join(show(n, 40) for n in stray[:3])}{', ...' if len(stray) > 3 else ''}; not read)"
            )
        for t, n_docs in named.items():
            if t + suffix not in present:
                continue  # the commitments check names what is missing
            if b.first:  # a cut bundle: the documents leaves before its first leaf are the auditor's state's
                cap = CAPS["index"] if suffix == ".i16" else CAPS["docs"]
            elif suffix == ".i16":
                cap = 2 * n_docs * dim if dim is not None else CAPS["index"]
            else:
                cap = min(CAPS["docs"], n_docs * MAX_DOCUMENT_BYTES + DOCS_OVERHEAD)
            data = read(f"{sub}/{t}{suffix}", min(cap, CAPS["index"]))
            if data is not None:
                target[t] = data
    return b


def _range_from(data: bytes | None, b: Bundle) -> int:
    """``public/range.json`` = ``{"from": F}``: the position of the bundle's first leaf; a defect is a FAIL."""
    try:
        obj = loads_bounded(data or b"", what="public/range.json")
        first = obj.get("from") if isinstance(obj, dict) and set(obj) == {"from"} else None
        if not isinstance(first, int) or isinstance(first, bool) or first < 0:
            raise ValueError('must be {"from": F}, F the position of the first leaf')
        return first
    except (ValueError, RecursionError) as e:
        b.defects.append(f"files: public/range.json: {e}")
        return 0


#: the most bytes one document's entry (id, text, salt) may take in auditor/docs/<tenant>.json, and the file's
#: fixed part: with genesis' n_docs they bound what the verifier reads for a tenant's documents
MAX_DOCUMENT_BYTES = 1 << 20
DOCS_OVERHEAD = 1 << 16


def _named_tenants(b: Bundle) -> dict[str, int]:
    """Tenant -> its documents as leaf 0 (genesis) names them plus the documents leaves' counts; names that are not
    identifiers are left out (the commitments check FAILs them), and nothing when leaf 0 is unusable (nothing of a
    tenant is read)."""
    from .encoding import is_identifier

    try:
        src = b.leaves[0] if b.leaves and not b.first else b.genesis_file
        g = loads_bounded(src, what="genesis") if src else None
        tenants = g.get("tenants") if isinstance(g, dict) else None
        out: dict[str, int] = {}
        for t in tenants if isinstance(tenants, list) else []:
            name, n = (t.get("tenant"), t.get("n_docs")) if isinstance(t, dict) else (None, None)
            if is_identifier(name) and isinstance(n, int) and not isinstance(n, bool) and 0 < n < (1 << 31):
                out[name] = n
            if len(out) >= MAX_TENANTS:
                break
        for leaf in b.leaves[1:]:  # the documents leaves add to a tenant's size (§3.5)
            if b'"type":"documents"' not in leaf:
                continue
            rec = loads_bounded(leaf, what="leaf")
            name, count = (rec.get("tenant"), rec.get("count")) if isinstance(rec, dict) else (None, None)
            if name in out and isinstance(count, int) and not isinstance(count, bool) and 0 < count < (1 << 31):
                out[name] = min(out[name] + count, (1 << 31) - 1)
        return out
    except (ValueError, RecursionError):
        return {}


def _dimension(embedder_bytes: bytes | None) -> int | None:
    """The committed embedding dimension (auditor/embedder.json), if readable: it sizes each index file."""
    try:
        opening = loads_bounded(embedder_bytes, what="embedder") if embedder_bytes else None
        desc = opening.get("descriptor") if isinstance(opening, dict) else None
        dim = desc.get("dimension") if isinstance(desc, dict) else None
    except (ValueError, RecursionError, AttributeError):
        return None
    return dim if isinstance(dim, int) and not isinstance(dim, bool) and 0 < dim <= (1 << 16) else None
