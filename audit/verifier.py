"""Phase D: the verifier (spec/protocol.md §8), protocol version 2.

``verify(bundle, receipts=..., mode=..., key=..., trusted_checkpoint=...) -> Verdict``. One function per
check, each named after its section of spec/protocol.md §8, run in that order by ``verify``; each appends
reasons ``"<check>: <what>"`` and counts what it checked. The verdict is PASS iff no check found a reason;
a FAIL carries no ε. Only the auditor's own inputs raise ``AuditorInputError`` (exit 2); every defect of the
bundle is a FAIL. Nothing here spends budget or writes anything.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import multiprocessing as mp
import os
import resource
import secrets
import stat
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np

from dprag.accounting.errors import DpragError

from . import commitments as cm
from .account import qemb_commitment, question_commitment, request_hash, verify_request
from .bundle import AuditorInputError, Bundle, BundleError, load_bundle, parse_leaves  # noqa: F401 (re-exported)
from .charges import ChargeRule, expected_charges
from .encoding import EncodingError, decode, digest, excerpt, hexbytes
from .estimator import DEFAULT_THETA, DEFAULT_WINDOW, coalition_size, resolve_window
from .ledger import NoteVerifier, open_checkpoint
from .ledger.rfc6962 import CompactRange, hash_leaf
from .policy import Policy
from .receipts import verify_receipt
from .retrieval import (noise_table, noisy_top_k, noisy_top_k_rows, noisy_top_k_words, request_source, sample_words,
                        top_commitment)

SCHEMA = "dprag.verdict/2"
PROTOCOL_VERSION = cm.PROTOCOL_VERSION
MAX_REASONS = 1000
MAX_UNITS = 1 << 62

ATTESTATION_RETRIEVAL = (
    "replay: the auditor re-executed noise-then-select for every checked query from the committed index, the "
    "committed seed and the account-signed request; no zero-knowledge proof attached. On trust: that the committed "
    "embeddings are the embedder's outputs on the documents (checkable with the corpus), and Q for queries whose "
    "account did not commit to it.")
ATTESTATION_GENERATION = (
    "replay of charges: every charge was recomputed from the exact scores, the replayed per-document filter and the "
    "committed seed; the answer's randomness is drawn from the committed seed, so it cannot be re-sampled, but the "
    "answer text is bound only by the receipts the accounts hand over (an auditor holding the corpus and the model "
    "can replay it).")
TRUST = (
    "k_max: the retrieval ε assumes at most k_max colluding accounts; sybil accounts the provider registers itself "
    "are indistinguishable from real ones, and the coalition estimator only flags coalitions whose probes are "
    "similar within the auditor's θ and window.",
    "answers released off the ledger to accounts that keep their receipts back are invisible to any verifier.",
    "a fork shown to auditors who never compare checkpoints (pin --trusted-checkpoint, or use witnesses).",
)


@dataclass
class Verdict:
    verdict: str
    epsilon: float | None
    delta: float | None
    k_max: int | None
    channels: dict
    attestation: dict
    reasons: list[str]
    checked: dict
    mode: str
    guarantee: str | None = None
    rejected_evidence: list[str] = field(default_factory=list)
    provider_key: str | None = None
    key_pinned: bool = False
    trusted_checkpoint: int | None = None
    trust: tuple = TRUST
    timings: dict = field(default_factory=dict)
    #: CPU seconds per check (this process and its workers): for benchmarks on a shared machine, not in the JSON
    cpu_seconds: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "protocol_version": PROTOCOL_VERSION, "verdict": self.verdict,
                "epsilon": self.epsilon, "delta": self.delta, "k_max": self.k_max, "channels": self.channels,
                "attestation": self.attestation, "reasons": self.reasons, "checked": self.checked,
                "mode": self.mode, "guarantee": self.guarantee, "rejected_evidence": self.rejected_evidence,
                "provider_key": self.provider_key, "key_pinned": self.key_pinned,
                "trusted_checkpoint": self.trusted_checkpoint, "trust": list(self.trust),
                "seconds": {k: round(v, 3) for k, v in sorted(self.timings.items())}}


class _Run:
    """What the checks share: the parsed bundle, the reasons, the counts."""

    def __init__(self, b: Bundle, progress: Callable[[str, int], None] | None):
        self.b = b
        self.reasons: list[str] = []
        self.rejected: list[str] = []
        self.checked: Counter = Counter()
        self.progress = progress or (lambda step, n: None)
        self.records: list[dict | None] = []
        self.genesis: dict | None = None
        self.policy: Policy | None = None
        self.seed: bytes | None = None
        self.key: NoteVerifier | None = None
        self.tenants: dict[str, dict] = {}
        self.accounts: dict[str, dict] = {}
        self.openings = _Openings(b.openings_lines)  # pos -> the opening, parsed on demand from its line
        self.qembs: dict[int, bytes] = {}  # pos -> Q (int16 little-endian) of the leaves §8.7 accepted
        self.queries: list[int] = []  # positions of well-formed query / recovery leaves with a valid request
        self.scores: _ScoreCache | None = None
        self.leaf_hashes: list[bytes] = []
        self.prefix_roots: dict[int, bytes] = {}
        self.timings: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def fail(self, check: str, what: str) -> None:
        if len(self.reasons) < MAX_REASONS:
            self.reasons.append(f"{check}: {what}")

    def ok(self, check: str, n: int = 1) -> None:
        self.checked[check] += n

    @property
    def n(self) -> int:
        return len(self.b.leaves)


def _is_hex(v, length: int) -> bool:
    try:
        hexbytes(v, "h", length)
        return True
    except EncodingError:
        return False


def _is_int(v, lo: int = 0, hi: int = MAX_UNITS) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


# ------------------------------------------------------------------------------------------------------------
# §8.1 files and §8.2 canonical records
# ------------------------------------------------------------------------------------------------------------
def check_8_1_files(run: _Run) -> None:
    for d in run.b.defects:
        run.fail("files", d.removeprefix("files: "))
    if not run.b.defects:
        run.ok("files")


def _decode_error(item: tuple[bytes, str]) -> str | None:
    """None if the bytes are canonical JSON (§2), else the rule they break (run in the forked workers)."""
    raw, what = item
    try:
        decode(raw, what=what)
        return None
    except EncodingError as e:
        return str(e)


def _decode_all(raws: list[bytes], what: str) -> list[Any]:
    """``decode`` of every record, each either its value or the EncodingError it raises. The canonical-form
    check runs in the forked workers; the parent then parses the records they accepted with the same C
    parser (``json.loads``: equal values, since canonical bytes hold no float and no duplicate key)."""
    items = [(raw, what % k) for k, raw in enumerate(raws)]
    errors = _fork_map(_decode_error, items, serial=None)
    if errors is None:  # not forked: decode here, once
        out = []
        for raw, w in items:
            try:
                out.append(decode(raw, what=w))
            except EncodingError as e:
                out.append(e)
        return out
    return [json.loads(raw) if err is None else EncodingError(err) for raw, err in zip(raws, errors)]


class _Openings:
    """pos -> the opening at ledger position pos, parsed on demand from its line of auditor/openings.jsonl
    (``json.loads`` of bytes the canonical check accepted: the values ``decode`` gives). The parsed openings
    of a 10^5-query window would take ~540 MB, their lines take ~210 MB; the hot paths (requests, retrieval)
    parse the lines in the workers, the generation check parses each one once, in ledger order."""

    def __init__(self, lines: list[bytes]):
        self.lines = lines
        self.line_of: dict[int, int] = {}  # pos -> its line in auditor/openings.jsonl

    def line(self, pos: int) -> bytes | None:
        k = self.line_of.get(pos)
        return None if k is None else self.lines[k]

    def get(self, pos: int, default=None):
        line = self.line(pos)
        return default if line is None else json.loads(line)

    def __getitem__(self, pos: int) -> dict:
        return json.loads(self.lines[self.line_of[pos]])

    def __contains__(self, pos: int) -> bool:
        return pos in self.line_of

    def drop(self) -> None:
        """No reader is left: let the lines go (memory at scale)."""
        self.lines, self.line_of = [], {}


def _opening_pos(item: tuple[bytes, str]) -> tuple[str | None, Any]:
    """(None, its "pos" if an int else None) if the opening line is canonical JSON (§2), else (the rule it
    breaks, None) (run in the forked workers: the parent keeps the line, not the parsed value)."""
    raw, what = item
    try:
        op = decode(raw, what=what)
    except EncodingError as e:
        return str(e), None
    pos = op.get("pos") if isinstance(op, dict) else None
    return None, pos if isinstance(pos, int) and not isinstance(pos, bool) else None


def check_8_2_canonical(run: _Run) -> None:
    for i, rec in enumerate(_decode_all(run.b.leaves, "leaf %d")):
        try:
            if isinstance(rec, EncodingError):
                raise rec
            if not isinstance(rec, dict) or not isinstance(rec.get("type"), str):
                raise EncodingError(f"leaf {i}: not a typed record")
            run.records.append(rec)
            run.ok("canonical")
        except EncodingError as e:
            run.records.append(None)
            run.fail("canonical", str(e))
    last = 0
    got = _fork_map(_opening_pos, [(raw, f"opening line {k}") for k, raw in enumerate(run.b.openings_lines)])
    for k, (err, pos) in enumerate(got):
        if err is not None:
            run.fail("canonical", err)
        elif not _is_int(pos, 1, run.n - 1) or pos <= last:
            run.fail("canonical", f"opening line {k}: pos must increase and lie in [1, {run.n})")
        else:
            last = pos
            run.openings.line_of[pos] = k
    run.progress("canonical", len(run.b.leaves) + len(run.b.openings_lines))


# ------------------------------------------------------------------------------------------------------------
# §8.3 commitments
# ------------------------------------------------------------------------------------------------------------
def check_8_3_commitments(run: _Run, corpus: dict[str, list[str]] | None) -> None:
    b = run.b
    g = run.records[0] if run.records else None
    if b.genesis_file is not None and run.b.leaves and b.genesis_file != b.leaves[0]:
        run.fail("commitments", "public/genesis.json differs from ledger leaf 0")
    gkeys = {"type", "version", "window", "provider_key", "C_emb", "C_policy", "C_seed", "tenants", "accounts"}
    if not isinstance(g, dict) or g.get("type") != "genesis" or set(g) != gkeys or \
            not all(_is_hex(g[k], 32) for k in ("C_emb", "C_policy", "C_seed")) or \
            not isinstance(g["tenants"], list) or not isinstance(g["accounts"], list) or \
            not isinstance(g["window"], str) or not isinstance(g["provider_key"], str):
        run.fail("commitments", "ledger leaf 0 is not a well-formed version-2 genesis record")
        return
    run.genesis = g
    try:
        run.key = NoteVerifier.from_vkey(g["provider_key"])
    except (DpragError, TypeError, ValueError) as e:
        run.fail("commitments", f"genesis provider_key unusable ({e})")
    if b.vkey is not None and b.vkey != g["provider_key"]:
        run.fail("commitments", "public/provider.vkey differs from the genesis provider_key")
    # the seed
    try:
        run.seed = hexbytes(b.seed_hex, "auditor/seed.hex", cm.SEED_BYTES) if b.seed_hex is not None else None
        if run.seed is not None and cm.seed_commitment(run.seed) != g["C_seed"]:
            run.fail("commitments", "auditor/seed.hex does not open C_seed")
            run.seed = None
    except EncodingError as e:
        run.fail("commitments", str(e))
    # the policy (salted)
    if b.policy_bytes is not None:
        try:
            wrapped = decode(b.policy_bytes, what="auditor/policy.json")
            if not isinstance(wrapped, dict) or set(wrapped) != {"policy", "salt"}:
                raise EncodingError("auditor/policy.json: must be {\"policy\", \"salt\"}")
            salt = hexbytes(wrapped["salt"], "policy salt", cm.SALT_BYTES)
            pol = Policy.from_dict(wrapped["policy"])
            if cm.policy_commitment(salt, pol.to_bytes()) != g["C_policy"]:
                raise EncodingError("the policy does not open C_policy")
            if pol.window != g["window"]:
                raise EncodingError("the policy names another window than genesis")
            run.policy = pol
        except (EncodingError, DpragError) as e:
            run.fail("commitments", f"auditor/policy.json: {e}")
    # the embedder
    embedder = None
    if b.embedder_bytes is not None:
        try:
            embedder = decode(b.embedder_bytes, what="auditor/embedder.json")
            if not isinstance(embedder, dict) or digest(embedder) != g["C_emb"]:
                raise EncodingError("the embedder descriptor does not open C_emb")
        except EncodingError as e:
            run.fail("commitments", f"auditor/embedder.json: {e}")
            embedder = None
    dim = embedder.get("dimension") if isinstance(embedder, dict) else None
    # tenants: index (C_idx) and document ids / salts (C_docs, checked against a corpus when given)
    for t in g["tenants"]:
        try:
            if not isinstance(t, dict) or set(t) - {"Z_idx"} != {"tenant", "n_docs", "C_idx", "C_docs"} or \
                    ("Z_idx" in t and not (isinstance(t["Z_idx"], str) and t["Z_idx"].isdigit()
                                           and len(t["Z_idx"]) <= 80)):
                raise EncodingError("malformed tenant entry in genesis")
            name, n_docs = t["tenant"], t["n_docs"]
            if not isinstance(name, str) or not _is_int(n_docs, 1, 1 << 31):
                raise EncodingError("malformed tenant entry in genesis")
            data = b.index_files.get(name)
            if data is None:
                raise EncodingError(f"auditor/index/{name}.i16 is missing")
            if not _is_int(dim, 1, 1 << 16) or len(data) != 2 * n_docs * dim:
                raise EncodingError(f"auditor/index/{name}.i16 has the wrong size")
            q = np.frombuffer(data, dtype="<i2").reshape(n_docs, dim)
            if cm.index_commitment(q) != t["C_idx"]:
                raise EncodingError(f"auditor/index/{name}.i16 does not open C_idx")
            docs = decode(b.docs_files.get(name, b"null"), what=f"auditor/docs/{name}.json")
            if not isinstance(docs, dict) or set(docs) != {"ids", "salts", "text_sha256"} or any(
                    not isinstance(docs[k], list) or len(docs[k]) != n_docs for k in docs) or \
                    not all(isinstance(x, str) for x in docs["ids"]) or \
                    not all(_is_hex(s, cm.SALT_BYTES) for s in docs["salts"]) or \
                    not all(_is_hex(h, 32) for h in docs["text_sha256"]):
                raise EncodingError(f"auditor/docs/{name}.json: must hold n_docs ids, salts and text hashes")
            hashes = [bytes.fromhex(h) for h in docs["text_sha256"]]
            if cm.documents_commitment([bytes.fromhex(s) for s in docs["salts"]], docs["ids"], hashes) != t["C_docs"]:
                raise EncodingError(f"auditor/docs/{name}.json does not open C_docs")
            if corpus is not None and name in corpus:
                texts = corpus[name]
                if len(texts) != n_docs or any(cm.text_hash(x) != h for x, h in zip(texts, hashes)):
                    raise EncodingError(f"the corpus given for tenant {name!r} is not the committed one (C_docs)")
                run.ok("corpus")
            run.tenants[name] = {"q": q, "qf": q.astype(np.float64), "n": n_docs, "dim": dim, "ids": docs["ids"],
                                 "Z_idx": int(t["Z_idx"]) if "Z_idx" in t else None}
            run.ok("commitments")
        except EncodingError as e:
            run.fail("commitments", str(e))
    names = {t.get("tenant") for t in g["tenants"] if isinstance(t, dict) and isinstance(t.get("tenant"), str)}
    for a in g["accounts"]:
        if not isinstance(a, dict) or set(a) != {"account", "tenant", "key"} or not isinstance(a["account"], str) \
                or not isinstance(a["tenant"], str) or a["tenant"] not in names \
                or not _is_hex(a["key"], 32) or a["account"] in run.accounts:
            run.fail("commitments", "malformed or duplicate account in the genesis registry")
            continue
        run.accounts[a["account"]] = a


# ------------------------------------------------------------------------------------------------------------
# §8.4 policy
# ------------------------------------------------------------------------------------------------------------
def check_8_4_policy(run: _Run) -> None:
    if run.policy is None:
        return
    try:
        run.policy.validate().check_claims()
        for t in run.policy.retrieval.enabled_tenants:
            if t not in run.tenants:
                raise DpragError(f"retrieval.enabled_tenants names {t!r}, which genesis does not commit")
        for t, v in run.tenants.items():
            if (v["Z_idx"] is not None) != (t in run.policy.retrieval.zk_tenants):
                raise DpragError(f"tenant {t!r}: genesis carries Z_idx exactly for the policy's zk tenants")
            if v["Z_idx"] is not None:
                from .zk_attest import index_commitment

                if int(index_commitment(v["q"])) != v["Z_idx"]:
                    raise DpragError(f"tenant {t!r}: Z_idx does not commit to the same index as C_idx")
        run.ok("policy")
    except DpragError as e:
        run.fail("policy", str(e))
        run.policy = None


# ------------------------------------------------------------------------------------------------------------
# §8.5 ledger: prefix roots, checkpoints, pinned key, trusted checkpoint
# ------------------------------------------------------------------------------------------------------------
def _prefix_roots(leaf_hashes: list[bytes], sizes: set[int]) -> dict[int, bytes]:
    """RFC 6962 roots of the ledger prefixes of the given sizes, in one pass."""
    out, cr = {}, CompactRange()
    if 0 in sizes:
        out[0] = cr.root()
    top = max(sizes) if sizes else 0
    for k, h in enumerate(leaf_hashes[:top], start=1):
        cr.append_leaf_hash(h)
        if k in sizes:
            out[k] = cr.root()
    return out


def _open_checkpoints(run: _Run, notes: list[bytes], origin: str, key: NoteVerifier, what: str):
    opened = []
    for k, note in enumerate(notes):
        try:
            cp, _ = open_checkpoint(note, origin, key)
            opened.append(cp)
        except (DpragError, EncodingError, ValueError, UnicodeError) as e:
            run.fail("ledger", f"{what} {k}: {e}")
    return opened


def _check_witnesses(run: _Run, witnesses: list, min_witnesses: int) -> None:
    """§8.5: the checkpoint covering the whole ledger carries >= min_witnesses valid witness cosignatures."""
    from .ledger.witness import cosignatures

    full = None
    for note in run.b.checkpoints:
        try:
            cp, _ = open_checkpoint(note, f"dprag/{run.genesis['window']}", run.key)
        except (DpragError, ValueError, UnicodeError):
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
        run.fail("ledger", f"the last checkpoint carries {len(got)} valid cosignatures of the given witnesses, "
                           f"fewer than --min-witnesses {min_witnesses}")


def check_8_5_ledger(run: _Run, receipt_sizes: set[int], trusted: bytes | None) -> int | None:
    n = run.n
    run.leaf_hashes = [hash_leaf(x) for x in run.b.leaves]
    run.progress("ledger", n)
    if run.key is None or run.genesis is None:
        return None
    origin = f"dprag/{run.genesis['window']}"
    cps = _open_checkpoints(run, run.b.checkpoints, origin, run.key, "checkpoint")
    trusted_cp = None
    if trusted is not None:
        got = _open_checkpoints(run, [trusted], origin, run.key, "trusted checkpoint")
        trusted_cp = got[0] if got else None
    sizes = {c.size for c in cps if c.size <= n} | {n} | {s for s in receipt_sizes if s <= n}
    if trusted_cp is not None and trusted_cp.size <= n:
        sizes.add(trusted_cp.size)
    run.prefix_roots = _prefix_roots(run.leaf_hashes, sizes)
    last = -1
    for c in cps:
        if c.size > n:
            run.fail("ledger", f"checkpoint of size {c.size} exceeds the ledger size {n}")
        elif c.size <= last:
            run.fail("ledger", f"checkpoint of size {c.size} does not increase")
        elif run.prefix_roots[c.size] != c.root:
            run.fail("ledger", f"checkpoint of size {c.size} is not consistent with the ledger")
        else:
            run.ok("ledger")
        last = max(last, c.size)
    if n not in {c.size for c in cps}:
        run.fail("ledger", f"no signed checkpoint covers the whole ledger (size {n})")
    if trusted_cp is not None:
        if trusted_cp.size > n:
            run.fail("ledger", f"the ledger (size {n}) is shorter than the trusted checkpoint (size "
                               f"{trusted_cp.size}): history was truncated")
        elif run.prefix_roots[trusted_cp.size] != trusted_cp.root:
            run.fail("ledger", f"the ledger is not consistent with the trusted checkpoint of size {trusted_cp.size}"
                               " (a fork)")
        else:
            run.ok("trusted_checkpoint")
        return trusted_cp.size
    return None


# ------------------------------------------------------------------------------------------------------------
# §8.6 receipts: evidence against the provider that signed them
# ------------------------------------------------------------------------------------------------------------
class _ReceiptCtx:
    """What ``_one_receipt`` reads of the run (the genesis and the provider's key), pickled to the workers:
    the key travels as its vkey (its Ed25519 key object does not pickle) and is parsed again there."""

    def __init__(self, run: _Run):
        self.genesis, self.key = run.genesis, run.key

    def __getstate__(self) -> dict:
        return {"genesis": self.genesis, "vkey": None if self.key is None else self.genesis["provider_key"]}

    def __setstate__(self, state: dict) -> None:
        self.genesis = state["genesis"]
        self.key = None if state["vkey"] is None else NoteVerifier.from_vkey(state["vkey"])


def _one_receipt(run: _Run | _ReceiptCtx, line: bytes) -> tuple[dict, list | None, str | None] | str:
    """One receipt line: (body, citations) if it is valid provider-signed evidence, else the rejection."""
    try:
        obj = decode(line, what="receipt line")
        extra = {}
        if isinstance(obj, dict) and "receipt" in obj:
            if set(obj) - {"receipt", "top", "request", "question"}:
                raise EncodingError("unknown fields beside receipt / top / request / question")
            rc, top = obj["receipt"], obj.get("top")
            extra = {k: obj[k] for k in ("request", "question") if k in obj}
        else:
            rc, top = obj, None
        if run.key is None or run.genesis is None:
            raise EncodingError("no provider key to check it against")
        body = verify_receipt(rc, run.key)
        if body["window"] != run.genesis["window"]:
            raise EncodingError(f"names window {excerpt(body['window'])}, not this one")
        if top is not None and (not isinstance(top, list) or not all(_is_int(x, 0, (1 << 32) - 1) for x in top)):
            raise EncodingError("the account's citations are malformed")
        if "request" in extra and (not isinstance(extra["request"], dict) or
                                   request_hash(extra["request"]).hex() != body["h_req"]):
            raise EncodingError("the request the account supplied is not the one the receipt names")
        if "question" in extra:
            req = extra.get("request")
            if not isinstance(extra["question"], str) or not isinstance(req, dict) or \
                    not _is_hex(req.get("nonce"), 16) or \
                    question_commitment(bytes.fromhex(req["nonce"]), extra["question"]) != req.get("h_q"):
                raise EncodingError("the question the account supplied does not open the request's h_q")
        return body, top, extra.get("question")
    except EncodingError as e:
        return str(e)


def _parse_receipts(run: _Run, data: bytes) -> list[tuple[int, dict, list | None, str | None]]:
    """Valid provider-signed receipts of this window; everything else is rejected evidence, never a FAIL."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    seen: dict[bytes, int] = {}
    todo = []
    for k, line in enumerate(lines):
        if line in seen:
            run.rejected.append(f"receipt {k}: duplicates receipt {seen[line]}")
        else:
            seen[line] = k
            todo.append(k)
    valid = []
    for k, res in zip(todo, _fork_map(partial(_one_receipt, _ReceiptCtx(run)), [lines[k] for k in todo])):
        if isinstance(res, str):
            run.rejected.append(f"receipt {k}: {res}")
        else:
            valid.append((k, *res))
    run.progress("receipts", len(lines))
    return valid


def check_8_6_receipts(run: _Run, valid: list[tuple[int, dict, list | None, str | None]]) -> None:
    n = run.n
    by_pos: dict[int, tuple[int, dict]] = {}
    by_request: dict[tuple[str, int], tuple[int, int]] = {}
    for k, body, top, _ in valid:
        pos, size = body["pos"], body["size"]
        if size > n:
            run.fail("receipts", f"receipt {k}: signed for ledger size {size} > the bundle's {n} (truncated or forked)")
            continue
        if run.prefix_roots.get(size) != bytes.fromhex(body["root"]):
            run.fail("receipts", f"receipt {k}: its signed root is not the ledger's root at size {size} (a fork)")
            continue
        if run.leaf_hashes[pos] != bytes.fromhex(body["leaf_hash"]):
            run.fail("receipts", f"receipt {k}: the leaf at {pos} is not the one it was signed for")
            continue
        rec = run.records[pos]
        if rec is None or rec.get("type") != "query" or any(
                rec.get(f) != body[f] for f in ("account", "tenant", "counter", "h_req", "h_top")):
            run.fail("receipts", f"receipt {k}: contradicts the ledger record at {pos}")
            continue
        prev = by_pos.get(pos)
        if prev is not None and prev[1] != body:
            run.fail("receipts", f"receipts {prev[0]} and {k}: two different releases signed for one leaf ({pos})")
            continue
        by_pos[pos] = (k, body)
        key = (body["account"], body["counter"])
        if key in by_request and by_request[key][1] != pos:
            run.fail("receipts", f"receipt {k}: one request counter released at two positions")
            continue
        by_request[key] = (k, pos)
        if top is not None:
            if body["nonce_top"] is None or top_commitment(np.asarray(top, dtype=np.int64),
                                                           bytes.fromhex(body["nonce_top"])) != body["h_top"]:
                run.rejected.append(f"receipt {k}: the citations the account supplied do not match h_top "
                                    "(the account's claim, not the provider's signature)")
        run.ok("receipts")
    run.checked["receipts_accepted"] = len(by_pos)


# ------------------------------------------------------------------------------------------------------------
# §8.7 requests, counters and the rate limit
# ------------------------------------------------------------------------------------------------------------
LEAF_KEYS = {"type", "account", "tenant", "counter", "h_req", "h_top", "h_charge"}
OPENING_KEYS = {"pos", "kind", "request", "qemb", "top", "nonce_top", "charge"}


def _request_leaf(run: _Run, i: int) -> tuple[str, str] | tuple[bool, bytes] | None:
    """§8.7 for one leaf, without shared state (run in the forked workers). Returns None (no record),
    (check, reason) on a defect, else (whether the account committed to Q, Q's bytes)."""
    rec = run.records[i]
    if rec is None:
        return None
    if rec.get("type") not in ("query", "recovery") or set(rec) != LEAF_KEYS or \
            not all(_is_hex(rec[k], 32) for k in ("h_req", "h_charge")) or \
            not (rec["h_top"] is None or _is_hex(rec["h_top"], 32)) or not _is_int(rec["counter"], 1) or \
            not isinstance(rec["account"], str):
        return "canonical", f"leaf {i}: not a well-formed query or recovery record"
    acct = run.accounts.get(rec["account"])
    if acct is None:
        return "requests", f"leaf {i}: account {rec['account']!r} is not in the genesis registry"
    if rec["tenant"] != acct["tenant"] or rec["tenant"] not in run.tenants:
        return "requests", f"leaf {i}: tenant differs from the account's registered tenant"
    op = run.openings.get(i)
    if op is None:
        return "requests", f"leaf {i}: no opening in auditor/openings.jsonl"
    if set(op) != OPENING_KEYS:
        return "canonical", f"leaf {i}: the opening's fields are not {sorted(OPENING_KEYS)}"
    released = rec["type"] == "query" and rec["tenant"] in run.policy.retrieval.enabled_tenants
    if not released and (rec["h_top"] is not None or op["top"] is not None or op["nonce_top"] is not None):
        return "retrieval", f"leaf {i}: citations recorded where the retrieval channel is off"
    try:
        req = verify_request(op.get("request"), acct["key"])
        if req["window"] != run.genesis["window"] or req["account"] != rec["account"] or \
                req["counter"] != rec["counter"]:
            raise EncodingError("the request names another window, account or counter than its leaf")
        if request_hash(req).hex() != rec["h_req"]:
            raise EncodingError("h_req does not match the opened request")
        if op.get("kind") != rec["type"]:
            raise EncodingError("the opening's kind differs from the leaf's type")
        qb = hexbytes(op.get("qemb"), "qemb", 2 * run.tenants[rec["tenant"]]["dim"])
        if req["h_qemb"] is None:
            return False, qb
        if qemb_commitment(bytes.fromhex(req["nonce"]), qb) != req["h_qemb"]:
            raise EncodingError("the opened Q is not the one the account committed to (h_qemb)")
        return True, qb
    except EncodingError as e:
        return "requests", f"leaf {i}: {e}"


class _RequestCtx:
    """What ``_request_leaf`` reads of the run besides the leaf (pickled to the workers): the registry, each
    tenant's dimension, the policy, the genesis."""

    def __init__(self, run: _Run):
        self.accounts, self.policy, self.genesis = run.accounts, run.policy, run.genesis
        self.tenants = {t: {"dim": v["dim"]} for t, v in run.tenants.items()}


class _LeafView:
    """What ``_request_leaf`` reads of the run, for one leaf parsed in a worker from its canonical bytes (the
    parent accepted them, so ``json.loads`` gives the values the parent holds)."""

    def __init__(self, ctx: _RequestCtx, i: int, rec: dict | None, op: dict | None):
        self.records = {i: rec}
        self.openings = {} if op is None else {i: op}
        self.accounts, self.tenants, self.policy, self.genesis = ctx.accounts, ctx.tenants, ctx.policy, ctx.genesis


def _request_in_worker(ctx: _RequestCtx, item: tuple[int, bytes | None, bytes | None]):
    """§8.7 for one leaf from its raw leaf and opening line (in a worker)."""
    i, leaf, line = item
    view = _LeafView(ctx, i, None if leaf is None else json.loads(leaf), None if line is None else json.loads(line))
    return _request_leaf(view, i)


_TASK: Callable | None = None
#: below this many items a map runs in this process (forking costs ~0.1 s)
FORK_MIN_ITEMS = 4096
_FORK_CHUNK = 512
#: retrieval jobs (up to 256 leaves each) below which the replay runs in this process
FORK_MIN_JOBS = 8
#: tenants of at least this many documents: the replay maps only the noise words that can reach the top K
LARGE_TENANT = 1 << 14


def _worker_init() -> None:
    """One BLAS thread per worker: the workers already fill the cores (threadpoolctl when installed)."""
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except Exception:  # noqa: BLE001 — an optimisation only
        pass


def _run_chunk(chunk: list) -> tuple[bool, list]:
    try:
        return True, [_TASK(x) for x in chunk]
    except BaseException:  # noqa: BLE001 — the parent redoes the map in-process, which raises the same error
        return False, []


def _workers() -> int:
    env = os.environ.get("DPRAG_VERIFY_WORKERS")
    if env is not None and env.strip().isdigit():
        return max(1, int(env))
    return max(1, min(8, os.cpu_count() or 1))


#: a task (function and context, pickled) larger than this is not sent to the pool: workers forked at that
#: moment share it with the verifier instead (e.g. the index of a 10^6-document tenant)
POOL_TASK_MAX = 64 << 20
#: per thread: ``pool``, the worker pool of the running ``verify`` (None: none started, or closed), and
#: ``depth``, how many calls of ``verify`` are running (the outermost owns the pool)
_LOCAL = threading.local()


def _pool() -> _WorkerPool | None:
    return getattr(_LOCAL, "pool", None)


def _pool_worker(conn, inherited: list) -> None:
    """A worker of ``_WorkerPool``: receives a task (b"t" + pickled callable), then chunks (b"c" + pickled
    items), answering each with the pickled ((ok, results), its CPU seconds so far); b"x" or EOF ends it."""
    import pickle

    for c in inherited:  # the verifier's ends of the workers started before this one
        c.close()
    _worker_init()
    fn = None
    while True:
        try:
            msg = conn.recv_bytes()
        except (EOFError, OSError):
            return
        kind = msg[:1]
        if kind == b"x":
            return
        if kind == b"t":
            fn = None  # the previous task's context goes first
            try:
                fn = pickle.loads(memoryview(msg)[1:])  # (no copy of a message of tens of MB: the noise table)
            except BaseException:  # noqa: BLE001 — every chunk then fails: the map reruns in the verifier
                fn = None
            del msg
            continue
        try:
            items = pickle.loads(memoryview(msg)[1:])
            del msg
            out = pickle.dumps(((True, [fn(x) for x in items]), time.process_time()), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:  # noqa: BLE001 — the verifier redoes the map in-process, raising the same error
            out = pickle.dumps(((False, None), time.process_time()), protocol=pickle.HIGHEST_PROTOCOL)
        items = None
        try:
            conn.send_bytes(out)
        except OSError:
            return


class _WorkerPool:
    """Worker processes forked when ``verify`` starts, before the bundle is read: they share with the
    verifier only the pages of the interpreter and the imported modules, so nothing the verifier parses or
    writes later is copied into them (a pool forked from the parsed bundle keeps the old copy of every page
    the verifier writes while it runs: ~0.4 GiB more PSS at 10^5 queries). A map sends each worker the
    function once (pickled, with the context it reads: a ``functools.partial`` of a module-level function),
    then one chunk of items at a time (one in flight per worker, so neither side can block the other on a
    full pipe); results come back pickled, in order."""

    def __init__(self, workers: int):
        ctx = mp.get_context("fork")
        self.conns: list = []
        self.procs: list = []
        self.cpu: dict[int, float] = {}  # worker -> its CPU seconds at its last answer
        gc.freeze()  # the workers' collector never walks (so never writes) the inherited heap
        try:
            for _ in range(workers):
                a, b = ctx.Pipe(duplex=True)
                proc = ctx.Process(target=_pool_worker, args=(b, list(self.conns)), daemon=True)
                proc.start()
                b.close()
                self.conns.append(a)
                self.procs.append(proc)
        finally:
            gc.unfreeze()

    def map(self, fn, items: list, size: int) -> tuple[str, list | None]:
        """("ok", results), ("unfit", None) if the task does not pickle or exceeds ``POOL_TASK_MAX``, or
        ("failed", None) if a worker raised or died (a dead worker closes the pool)."""
        import pickle
        from multiprocessing.connection import wait

        if not self.conns:
            return "unfit", None
        try:
            task = b"t" + pickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 — e.g. a closure: the caller forks workers now instead
            return "unfit", None
        if len(task) > POOL_TASK_MAX:
            return "unfit", None
        try:
            for c in self.conns:
                c.send_bytes(task)
            del task
            starts = iter(enumerate(range(0, len(items), size)))
            out: list = [None] * (-(-len(items) // size))
            busy: dict = {}  # connection -> (worker, chunk number)
            failed = False

            def feed(w: int, c) -> None:
                nxt = None if failed else next(starts, None)
                if nxt is not None:
                    k, a = nxt
                    c.send_bytes(b"c" + pickle.dumps(items[a:a + size], protocol=pickle.HIGHEST_PROTOCOL))
                    busy[c] = (w, k)

            for w, c in enumerate(self.conns):
                feed(w, c)
            while busy:
                for c in wait(list(busy)):
                    (ok, part), cpu = pickle.loads(c.recv_bytes())
                    w, k = busy.pop(c)
                    self.cpu[w] = cpu
                    if ok:
                        out[k] = part
                    else:
                        failed = True
                    feed(w, c)
            return ("failed", None) if failed else ("ok", [x for part in out for x in part])
        except Exception:  # noqa: BLE001 — a worker died or a pipe broke: no pool from here on
            self.close()
            return "failed", None

    def close(self) -> None:
        for c in self.conns:
            try:
                c.send_bytes(b"x")
            except OSError:
                pass
            c.close()
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join()
        self.conns, self.procs, self.cpu = [], [], {}  # reaped: their CPU is now in RUSAGE_CHILDREN


def _start_pool(bundle_path, receipts) -> _WorkerPool | None:
    """The worker pool, if a map may fork: several workers, ``fork`` available, and a bundle or receipts file
    of at least ``FORK_MIN_ITEMS`` short records (sizes from ``stat``, nothing read: a guess that decides
    where the work runs, never what it finds)."""
    if _workers() < 2 or "fork" not in mp.get_all_start_methods():
        return None
    sizes = []
    for path, follow in ((Path(bundle_path) / "public" / "leaves.bin", False),
                         (Path(bundle_path) / "auditor" / "openings.jsonl", False),
                         (receipts, True)):  # (the auditor may keep its receipts behind a link)
        try:
            sizes.append(os.stat(path, follow_symlinks=follow).st_size if path is not None else 0)
        except (OSError, TypeError, ValueError):
            sizes.append(0)
    if max(sizes) < FORK_MIN_ITEMS * 64:
        return None
    try:
        return _WorkerPool(_workers())
    except Exception:  # noqa: BLE001 — no processes: every map runs as without the pool
        return None


def _close_pool() -> None:
    pool = _pool()
    if pool is not None:
        _LOCAL.pool = None
        pool.close()


def _fork_map(fn, items: list, *, serial=..., chunk: int | None = None, min_items: int | None = None) -> list | None:
    """``[fn(x) for x in items]`` on the machine's cores, in forked worker processes (Ed25519 verification,
    canonical decoding and hashing hold the GIL, so threads do not help): those of the pool ``verify``
    started before reading the bundle (``_WorkerPool``: ``fn`` is pickled to them, with the context it
    carries), else — no pool, or ``fn`` too large to pickle to each worker — workers forked now, which
    inherit everything at fork, with the garbage collector's heap frozen. Items and results travel pickled
    through pipes (small: bytes, tuples). ``DPRAG_VERIFY_WORKERS=1`` (or few items,
    or no ``fork``) runs in this process: ``[serial(x) for x in items]`` (``serial`` defaults to ``fn``;
    ``serial=None`` returns None then, for a caller with a cheaper in-process path). Any failure inside a
    worker makes the whole map rerun in this process, so errors are exactly the in-process ones."""
    if serial is ...:
        serial = fn
    workers = _workers()
    forked = None
    if workers > 1 and len(items) >= (FORK_MIN_ITEMS if min_items is None else min_items) and \
            "fork" in mp.get_all_start_methods():
        status, pool = "unfit", _pool()
        if pool is not None:
            status, forked = pool.map(fn, items, chunk or _FORK_CHUNK)
        if status == "unfit":
            forked = _forked(fn, items, workers, chunk or _FORK_CHUNK)
    if forked is not None:
        return forked
    return None if serial is None else [serial(x) for x in items]


def _background(task: str, *args) -> Callable[[], Any]:
    """Start ``_TASKS[task](*args)`` in a fresh Python process (not a fork: a long-lived fork would end up
    holding a copy of every page the verifier touches meanwhile); the arguments go pickled through its stdin
    (fed by a thread, so this returns at once) and the result comes back pickled through its stdout. Returns
    a function that waits for the result: ``(value,)``, or None if the child failed in any way (the caller
    then computes it in-process, raising what it raises)."""
    if _workers() < 2:
        return lambda: None
    import pickle
    import subprocess
    import sys
    import threading

    try:
        payload = [pickle.dumps((task, args), protocol=pickle.HIGHEST_PROTOCOL)]  # dropped once written
        proc = subprocess.Popen([sys.executable, "-c", "from dprag.audit.verifier import _task_main; _task_main()"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except Exception:  # noqa: BLE001
        return lambda: None

    def feed():
        try:
            proc.stdin.write(payload.pop())
            proc.stdin.close()
        except OSError:
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    done: list = []

    def result():
        if done:
            return done[0]
        out = None
        try:
            data = proc.stdout.read()
            proc.stdout.close()
            writer.join()
            if proc.wait() == 0 and data:
                out = pickle.loads(data)
        except Exception:  # noqa: BLE001
            out = None
        done.append(out)
        return out

    return result


def _certify_task(policy) -> dict:
    return policy.certified_epsilons()


def _coalition_task(embs, accts, poss, theta, window) -> tuple[int, int]:
    w = resolve_window(window, poss, embs.shape[1])
    return coalition_size(embs, accts, theta, w, positions=poss), w


_TASKS = {"certify": _certify_task, "coalition": _coalition_task}


def _task_main() -> None:
    """The child side of ``_background``."""
    import pickle
    import sys

    task, args = pickle.loads(sys.stdin.buffer.read())
    out = (_TASKS[task](*args),)
    sys.stdout.buffer.write(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()


def _forked(fn, items: list, workers: int, size: int) -> list | None:
    global _TASK
    _TASK = fn
    gc.freeze()
    try:
        with mp.get_context("fork").Pool(workers, initializer=_worker_init) as pool:
            out: list = []
            chunks = [items[a:a + size] for a in range(0, len(items), size)]
            for ok, part in pool.imap(_run_chunk, chunks):
                if not ok:
                    return None
                out.extend(part)
            return out
    except Exception:  # noqa: BLE001 — no fork, no pipe, an unpicklable result: do it in-process
        return None
    finally:
        gc.unfreeze()
        _TASK = None


def check_8_7_requests(run: _Run) -> None:
    last_counter: dict[str, int] = {}
    n_limit = run.policy.retrieval.n if run.policy else None
    confirmed = 0
    positions = list(range(1, run.n))

    def raw(i: int) -> tuple[int, bytes | None, bytes | None]:
        return i, None if run.records[i] is None else run.b.leaves[i], run.openings.line(i)

    results = _fork_map(partial(_request_in_worker, _RequestCtx(run)), [raw(i) for i in positions],
                        serial=lambda item: _request_leaf(run, item[0]))
    for i, res in zip(positions, results):
        if res is None:
            continue
        if isinstance(res[0], str):
            run.fail(*res)
            continue
        confirmed += res[0]
        run.qembs[i] = res[1]
        rec = run.records[i]
        expected = last_counter.get(rec["account"], 0) + 1
        if rec["counter"] != expected:
            run.fail("requests", f"leaf {i}: account {rec['account']!r} counter {rec['counter']} where {expected} "
                                 "was next (counters are gapless and increasing)")
        last_counter[rec["account"]] = rec["counter"]
        if n_limit is not None and rec["counter"] > n_limit:
            run.fail("rate", f"account {rec['account']!r} made more than n = {n_limit} queries")
        run.queries.append(i)
        run.ok("requests")
    run.progress("requests", len(positions))
    run.checked["queries_with_account_confirmed_q"] = confirmed
    run.checked["queries"] = sum(1 for i in run.queries if run.records[i]["type"] == "query")


class _Scorer:
    """The exact integer scores of §4 of blocks of queries of one tenant, in one float64 matrix product
    (exact: |Σ E·Q| <= d·2^30 < 2^53, so any summation order gives the integers), and their compact form:
    the smallest unsigned type that holds the clipped range, offset by its low end. Picklable (the retrieval
    replay's workers get one holding the index of the tenants they score)."""

    def __init__(self, policy: Policy, qf: dict[str, np.ndarray]):
        r = policy.retrieval
        self.qf = qf  # tenant -> its index as float64
        self.clip, self.shift = r.score_clip, r.score_shift
        self.base = self.clip[0] >> self.shift
        span = (self.clip[1] >> self.shift) - self.base
        self.dtype = np.uint16 if span < 1 << 16 else np.uint32 if span < 1 << 32 else None

    def score_rows(self, tenant: str, qembs: list[bytes]) -> np.ndarray:
        """int64 scores of the given query embeddings (bytes of Q, already checked by §8.7), computed now."""
        qs = np.frombuffer(b"".join(qembs), dtype="<i2")
        dots = qs.reshape(len(qembs), -1).astype(np.float64) @ self.qf[tenant].T
        return np.right_shift(np.clip(dots.astype(np.int64), *self.clip), self.shift)

    def compact(self, s: np.ndarray) -> np.ndarray:
        return s if self.dtype is None else (s - self.base).astype(self.dtype)


class _ScoreCache(_Scorer):
    """The scores of §4 (``_Scorer``), each query scored once: kept compact within ``budget`` bytes; beyond it
    the oldest blocks are dropped and re-scored on demand (bounded memory at any window size)."""

    BLOCK = 256
    BUDGET = 384 << 20

    def __init__(self, run: _Run, budget: int | None = None):
        super().__init__(run.policy, {t: v["qf"] for t, v in run.tenants.items()})
        self.run = run
        self.budget = self.BUDGET if budget is None else budget
        self.rows: dict[int, tuple[int, int]] = {}   # pos -> (block id, row)
        self.blocks: dict[int, np.ndarray] = {}      # block id -> compact matrix (insertion order = age)
        self.held = 0
        self.next_id = 0
        self.order = {p: k for k, p in enumerate(run.queries)}

    def _score(self, positions: list[int]) -> np.ndarray:
        """int64 scores of the given positions (one tenant), computed now."""
        run = self.run
        return self.score_rows(run.records[positions[0]]["tenant"], [run.qembs[p] for p in positions])

    def _keep(self, positions: list[int], s: np.ndarray) -> None:
        self.keep_compact(positions, self.compact(s))

    def keep_compact(self, positions: list[int], m: np.ndarray) -> None:
        bid = self.next_id
        self.next_id += 1
        self.blocks[bid] = m
        self.held += m.nbytes
        for k, p in enumerate(positions):
            self.rows[p] = (bid, k)
        while self.held > self.budget and len(self.blocks) > 1:
            old = next(iter(self.blocks))
            self.held -= self.blocks.pop(old).nbytes

    def _row(self, p: int) -> np.ndarray | None:
        got = self.rows.get(p)
        if got is None or got[0] not in self.blocks:
            return None
        m = self.blocks[got[0]][got[1]]
        return m if self.dtype is None else m.astype(np.int64) + self.base

    def rows_for(self, n_docs: int) -> int:
        """Queries scored per block for a tenant of ``n_docs``: at most 2^22 scores (32 MiB of float64)."""
        return max(1, min(self.BLOCK, (1 << 22) // max(1, n_docs)))

    def many(self, positions: list[int]) -> np.ndarray:
        """int64 scores of ``positions`` (all of one tenant) as a matrix, scoring the missing ones at once."""
        n = self.run.tenants[self.run.records[positions[0]]["tenant"]]["n"]
        out = np.empty((len(positions), n), dtype=np.int64)
        missing = []
        for k, p in enumerate(positions):
            row = self._row(p)
            if row is None:
                missing.append(k)
            else:
                out[k] = row
        step = self.rows_for(n)
        for a in range(0, len(missing), step):
            ks = missing[a:a + step]
            part = [positions[k] for k in ks]
            s = self._score(part)
            out[ks] = s
            self._keep(part, s)
        return out

    def one(self, p: int) -> np.ndarray:
        row = self._row(p)
        if row is None:
            # score the block of queries of this tenant that follow p in ledger order (the order the checks
            # consume them in), so that a sequential pass scores each block once
            run, t = self.run, self.run.records[p]["tenant"]
            k = self.order.get(p)
            step = self.rows_for(run.tenants[t]["n"])
            nxt = [p] if k is None else [q for q in run.queries[k:k + step]
                                        if run.records[q]["tenant"] == t and self._row(q) is None]
            if nxt[0] != p:
                nxt.insert(0, p)
            self._keep(nxt, self._score(nxt))
            row = self._row(p)
        return row


def _scores(run: _Run, i: int) -> np.ndarray:
    """The exact integer scores of query leaf ``i`` (int64), from the shared cache."""
    if run.scores is None:
        run.scores = _ScoreCache(run)
    return run.scores.one(i)


# ------------------------------------------------------------------------------------------------------------
# §8.8 retrieval replay
# ------------------------------------------------------------------------------------------------------------
def check_8_8_retrieval(run: _Run, chosen: list[int]) -> None:
    """Per chosen leaf: the citations are the top-K of the exact scores plus the committed-seed noise and open
    h_top. Vectorised over jobs of up to 256 leaves of one tenant (one matrix product for the scores, one
    pass of the table's sampler over the concatenated streams, a row-wise top-K), run in the forked workers;
    the reasons come out in ledger order, exactly as the leaf-by-leaf replay words them. The workers hand
    back the scores (compact) while the cache has room, so the generation check does not score again."""
    r = run.policy.retrieval
    table = noise_table(r.sigma, r.sampler.tail, r.sampler.precision_bits) if chosen else None
    if chosen and run.scores is None:
        run.scores = _ScoreCache(run)
    cache = run.scores
    plans, jobs, room = [], [], cache.budget if cache is not None else 0
    for a in range(0, len(chosen), _ScoreCache.BLOCK):
        block = chosen[a:a + _ScoreCache.BLOCK]
        found: list[tuple[int, str | None]] = []
        groups: dict[str, list[int]] = {}
        for i in block:
            rec = run.records[i]
            if rec["tenant"] not in r.enabled_tenants or rec["type"] != "query":
                found.append((i, None))  # no citations released (§8.7 already refused any recorded here)
            else:  # missing citations are found in the job (the opening is parsed there)
                groups.setdefault(rec["tenant"], []).append(i)
        ids = []
        for t, group in groups.items():
            n = run.tenants[t]["n"]
            step = cache.rows_for(n)
            for c in range(0, len(group), step):
                ps = group[c:c + step]
                size = len(ps) * n * (cache.dtype(0).itemsize if cache.dtype else 8)
                keep = size <= room
                room -= size if keep else 0
                ids.append(len(jobs))
                jobs.append((t, keep, [(i, run.records[i]["h_req"], run.records[i]["h_top"], run.openings.line(i))
                                       for i in ps]))
        plans.append((block, found, ids))
    ctx = _RetrievalCtx(run, table, {job[0] for job in jobs})
    results = _fork_map(partial(_retrieval_job, ctx), jobs, chunk=1, min_items=FORK_MIN_JOBS)
    del ctx
    for block, found, ids in plans:
        if any(results[j] is None for j in ids):
            _retrieval_one_by_one(run, block, table)  # anything unexpected: the plain replay, its reasons or error
        else:
            for j in ids:
                got, compact = results[j]
                found.extend(got)
                if compact is not None:
                    cache.keep_compact([x[0] for x in jobs[j][2]], compact)
                results[j] = None
            for i, what in sorted(found, key=lambda x: x[0]):
                if what is None:
                    run.ok("retrieval")
                else:
                    run.fail("retrieval", f"leaf {i}: {what}")
        run.progress("retrieval", len(block))


class _RetrievalCtx:
    """What ``_retrieval_job`` reads of the run (pickled to the workers): the policy, the seed, the noise
    table, each tenant's size, and a ``_Scorer`` holding the index of the tenants the jobs score."""

    def __init__(self, run: _Run, table, tenants: set[str]):
        self.policy, self.seed, self.table = run.policy, run.seed, table
        self.tenants = {t: {"n": run.tenants[t]["n"]} for t in tenants}
        self.scores = _Scorer(run.policy, {t: run.tenants[t]["qf"] for t in tenants})


def _retrieval_job(run: _RetrievalCtx, job) -> tuple[list[tuple[int, str | None]], np.ndarray | None] | None:
    """§8.8 for up to 256 leaves of one tenant (in a worker), each (pos, h_req, h_top, its opening line):
    [(pos, reason or None)] and, if asked, their compact scores; None on anything unexpected (the parent then
    replays those leaves one by one)."""
    try:
        t, keep, leaves = job
        r, cache, table = run.policy.retrieval, run.scores, run.table
        n = run.tenants[t]["n"]
        ops = [json.loads(x[3]) for x in leaves]  # canonical lines (§8.2), whose Q §8.7 checked
        scores = cache.score_rows(t, [bytes.fromhex(op["qemb"]) for op in ops])
        words = np.empty((len(leaves), n), dtype=np.uint64)
        for k, x in enumerate(leaves):
            words[k] = request_source(run.seed, "retrieval", bytes.fromhex(x[1])).uint64(n)
        if n >= LARGE_TENANT:  # map only the words that can reach the top K (bit-identical, retrieval.py)
            span = (r.score_clip[0] >> r.score_shift, r.score_clip[1] >> r.score_shift)
            expected = np.stack([noisy_top_k_words(scores[k], words[k], table, r.K, score_range=span)
                                 for k in range(len(leaves))])
        else:
            expected = noisy_top_k_rows(scores, sample_words(table, words), r.K)
        out = [(x[0], "citations missing for a tenant with the retrieval channel on"
                if op.get("top") is None or x[2] is None else _retrieval_leaf({"h_top": x[2]}, op, expected[k]))
               for k, (x, op) in enumerate(zip(leaves, ops))]
        return out, (cache.compact(scores) if keep else None)
    except Exception:  # noqa: BLE001 — see the docstring
        return None


def _retrieval_one_by_one(run: _Run, block: list[int], table) -> None:
    """§8.8 leaf by leaf (the plain replay; the vectorised path falls back to it on anything unexpected)."""
    r = run.policy.retrieval
    for i in block:
        rec, op = run.records[i], run.openings[i]
        try:
            if rec["tenant"] not in r.enabled_tenants or rec["type"] != "query":
                run.ok("retrieval")
                continue
            if op.get("top") is None or rec["h_top"] is None:
                raise EncodingError("citations missing for a tenant with the retrieval channel on")
            z = table.sample(run.tenants[rec["tenant"]]["n"],
                             request_source(run.seed, "retrieval", bytes.fromhex(rec["h_req"])))
            what = _retrieval_leaf(rec, op, noisy_top_k(_scores(run, i), z, r.K))
            if what is not None:
                raise EncodingError(what)
            run.ok("retrieval")
        except EncodingError as e:
            run.fail("retrieval", f"leaf {i}: {e}")


def _retrieval_leaf(rec: dict, op: dict, expected: np.ndarray) -> str | None:
    """§8.8 for one leaf, given the replayed top-K: None if it conforms, else what is wrong."""
    top = op["top"]
    if not isinstance(top, list) or len(top) != expected.size or \
            not all(_is_int(x, 0, (1 << 32) - 1) for x in top) or top != expected.tolist():
        return "citations are not the top-K of the committed-seed noisy scores"
    try:
        if top_commitment(top, hexbytes(op.get("nonce_top"), "nonce_top", 16)) != rec["h_top"]:  # top == expected
            return "h_top does not match the opened citations"
    except EncodingError as e:
        return str(e)
    return None


def check_8_8_proofs(run: _Run, vk) -> None:
    """§8.8 (zk): every query of a zk tenant carries a Groth16 proof of noise-then-select that verifies under the
    auditor's key with public inputs recomputed here (Z_idx of genesis, Q and the citations from the opening,
    the noise from the seed)."""
    from . import zk_attest

    r = run.policy.retrieval
    table = noise_table(r.sigma, r.sampler.tail, r.sampler.precision_bits)
    records = {}
    for k, line in enumerate(run.b.proofs_lines or []):
        try:
            rec = decode(line, what=f"proof line {k}")
            pos = rec.get("pos") if isinstance(rec, dict) else None
            if not _is_int(pos, 1, run.n - 1) or pos in records:
                raise EncodingError(f"proof line {k}: pos must be a distinct ledger position")
            records[pos] = rec
        except EncodingError as e:
            run.fail("retrieval", str(e))
    done = 0
    for i in run.queries:
        rec = run.records[i]
        if rec["type"] != "query" or rec["tenant"] not in r.zk_tenants:
            continue
        ten, op = run.tenants[rec["tenant"]], run.openings[i]
        if i not in records:
            run.fail("retrieval", f"leaf {i}: no Groth16 proof for a query of zk tenant {rec['tenant']!r}")
            continue
        Q = np.frombuffer(bytes.fromhex(op["qemb"]), dtype="<i2")
        z = table.sample(ten["n"], request_source(run.seed, "retrieval", bytes.fromhex(rec["h_req"])))
        try:
            ok = zk_attest.check(vk, run.policy, ten["Z_idx"], records[i], Q, z, op["top"], ten["n"],
                                 ten["q"].shape[1], table.support_bound)
        except (DpragError, ValueError, TypeError, KeyError):
            ok = False
        if not ok:
            run.fail("retrieval", f"leaf {i}: the Groth16 proof of noise-then-select does not verify under the "
                                  "auditor's key")
        else:
            done += 1
    run.checked["zk_proofs"] = done


# ------------------------------------------------------------------------------------------------------------
# §8.9 generation: every charge replayed, in ledger order
# ------------------------------------------------------------------------------------------------------------
def _opened_charges(charge: Any, n_docs: int) -> tuple[list[tuple[int, np.ndarray]], Any]:
    if not isinstance(charge, dict) or set(charge) != {"nonce", "algorithm", "bins_released", "charges"} or \
            not isinstance(charge["charges"], list):
        raise EncodingError("malformed charge opening")
    out = []
    for c in charge["charges"]:
        if not isinstance(c, dict) or set(c) != {"cost", "ids"} or not isinstance(c["cost"], dict) or \
                set(c["cost"]) != {"kind", "epsilon_units"} or c["cost"]["kind"] != "pure":
            raise EncodingError("malformed charge")
        units = c["cost"]["epsilon_units"]
        if not _is_int(units, 0, MAX_UNITS):
            raise EncodingError("a charge's epsilon_units must be an integer in [0, 2^62] (spends only add)")
        ids = c["ids"]
        if not isinstance(ids, list) or not all(_is_int(x, 0, n_docs - 1) for x in ids) or \
                any(a >= b for a, b in zip(ids, ids[1:])):
            raise EncodingError("a charge's ids must be strictly increasing ids of the tenant's corpus")
        out.append((units, np.asarray(ids, dtype=np.int64)))
    return out, charge["bins_released"]


def check_8_9_generation(run: _Run) -> None:
    pol = run.policy
    rule = ChargeRule.of(pol)
    spent = {t: np.zeros(v["n"], dtype=np.int64) for t, v in run.tenants.items()}
    for done, i in enumerate(run.queries):
        rec, op = run.records[i], run.openings[i]
        t = rec["tenant"]
        try:
            if digest(op.get("charge")) != rec["h_charge"]:
                raise EncodingError("h_charge does not match the opened charges")
            got, bins = _opened_charges(op["charge"], run.tenants[t]["n"])
            if op["charge"]["algorithm"] != pol.generation.algorithm:
                raise EncodingError("the charge's algorithm differs from the policy")
            want, want_bins = expected_charges(pol, rule, _scores(run, i), spent[t],
                                               request_source(run.seed, "select", bytes.fromhex(rec["h_req"])))
            if bins != want_bins:
                raise EncodingError(f"bins_released {bins!r} differs from the committed-seed release {want_bins}")
            if len(got) != len(want) or any(gu != wu or not np.array_equal(gi, wi)
                                            for (gu, gi), (wu, wi) in zip(got, want)):
                raise EncodingError("the charges differ from the policy's rule on the replayed filter "
                                    f"(expected {[(u, int(x.size)) for u, x in want]} (units, documents))")
            for units, ids in want:
                spent[t][ids] += units
            run.ok("generation")
        except (EncodingError, KeyError, TypeError, ValueError) as e:
            run.fail("generation", f"leaf {i}: {e}")
        if done % 1000 == 999:
            run.progress("generation", 1000)
    for t, s in spent.items():
        over = np.flatnonzero(s > rule.limit)
        if over.size:
            run.fail("generation", f"tenant {t}: {over.size} documents over budget")
        run.checked["documents_within_budget"] += int((s <= rule.limit).sum())


def check_8_9_answers(run: _Run, valid: list, generator, corpus: dict[str, list[str]]) -> None:
    """§8.9 (answers, optional): replay the answer of every receipt whose account handed over its question,
    with the committed corpus and the auditor's generator, and compare it with the signed h_answer."""
    from .replay import answer_hash, replay_answer

    if not run.policy.generation.replayable:
        # a hosted text generator (dp-ksa, replayable: false): nobody can re-run it, so no answer is compared
        # (a mismatch would FAIL an honest provider); the verdict's trust list says what that leaves on trust
        run.checked["answers_replayed"] = 0
        run.checked["answers_not_replayable"] = sum(1 for _, _, _, q in valid if q is not None)
        return
    done = 0
    for k, body, _, question in valid:
        pos = body["pos"]
        rec, op = run.records[pos], run.openings.get(pos)
        texts = corpus.get(body["tenant"]) if corpus else None
        if question is None or op is None or texts is None or pos not in run.queries or \
                rec.get("h_req") != body["h_req"]:
            continue
        got = answer_hash(replay_answer(run.policy, run.seed, op, _scores(run, pos), texts, question, generator))
        if got != body["h_answer"]:
            run.fail("generation", f"receipt {k}: the signed answer is not the committed mechanism's answer "
                                   f"(replayed from the seed, the corpus and the question)")
        done += 1
    run.checked["answers_replayed"] = done


TRUST_TEXT_ONLY = (
    "answer text: the policy's generator only returns text and cannot be replayed (a hosted LLM; dp-ksa with "
    "replayable: false). The charges and the ε are verified from the committed parameters, but that each released "
    "answer is the committed mechanism's output — every voter answering from the question and its own documents "
    "only, the keyword release drawn from the committed seed, the final answer generated from the question and "
    "the released keywords only — is on trust, and no answer of this window is replayed (--replay-answers).")
ATTESTATION_GENERATION_TEXT_ONLY = (
    "replay of charges: every charge was recomputed from the exact scores, the replayed per-document filter and the "
    "committed seed; the answers come from a text-only generator nobody can re-run, so their text is bound only by "
    "the receipts and is not attested (see trust).")


def answer_vote_statement(policy) -> str:
    """Which answer-vote selection the committed policy runs, and where its δ is (the verdict's wording)."""
    g = policy.generation
    empty = (" Voters whose documents are all the empty padding abstain (abstain_empty)." if g.abstain_empty
             else "")
    if g.vote_selection != "seen":
        return ("Mechanism: answer-level voting, universal selection (the exponential mechanism over {⊥} ∪ Σ* with "
                f"threshold t = {g.vote_threshold:g} nats): pure ε_q = {g.vote_epsilon:g} per query, no δ." + empty)
    rule = ChargeRule.of(policy)
    return ("Mechanism: answer-level voting, seen selection (the exponential mechanism over the keys the voters "
            "wrote and ⊥ at T = 1 + 2·ln(1/δ)/ε votes): (ε_q, δ_q) = "
            f"({g.vote_epsilon:g}, {g.vote_delta:g}) per query; the filter counts ε_q and every RAG charge of a "
            f"document adds δ_q outside it (n_z = {rule.limit // rule.rag_units}: the most RAG charges a document "
            "can take), so the generation δ is n_z·δ_q add/remove and n_z·δ_q·(1 + e^ε_B) replace-one, included in "
            "the composed δ." + empty)


def generation_trust(policy) -> tuple[tuple, str | None]:
    """(extra trust statements, generation attestation or None) for the committed generation mechanism."""
    if policy is not None and not policy.generation.replayable:
        return (TRUST_TEXT_ONLY,), ATTESTATION_GENERATION_TEXT_ONLY
    if policy is not None and policy.generation.mechanism == "answer-vote":
        return (), ATTESTATION_GENERATION + " " + answer_vote_statement(policy)
    return (), None


# ------------------------------------------------------------------------------------------------------------
# §8.10 coalition estimate (the auditor's θ and window)
# ------------------------------------------------------------------------------------------------------------
def _coalition_inputs(run: _Run) -> tuple[np.ndarray, list, list] | None:
    """(Q of every query leaf as an int16 matrix, their accounts, their positions), or None if there is nothing
    to estimate (no query, or Q of several dimensions)."""
    accts, poss, dims = [], [], set()
    for i in run.queries:
        if run.records[i]["type"] != "query":
            continue
        dims.add(len(run.qembs[i]) // 2)  # int16 entries (§8.7 checked them)
        accts.append(run.records[i]["account"])
        poss.append(i)
    if not poss or len(dims) != 1:
        return None
    embs = np.empty((len(poss), dims.pop()), dtype="<i2")  # filled in place: no per-query arrays (memory at scale)
    for k, i in enumerate(poss):
        embs[k] = np.frombuffer(run.qembs[i], dtype="<i2")
    return embs, accts, poss


def _coalition_estimate(run: _Run, theta: float, window: int | None) -> tuple[int, int] | None:
    """(ĉ, the window used) from the opened Q of every query leaf, or None if there is nothing to estimate."""
    got = _coalition_inputs(run)
    return None if got is None else _coalition_task(*got, theta, window)


def check_8_10_coalition(run: _Run, theta: float, window: int | None, background=None) -> int | None:
    """ĉ <= k_max. ``background``: the estimate started in a forked child beside the other checks (its
    (ĉ, window), or None if the child failed: then it is computed here, raising what it raises)."""
    got = background() if background is not None else None
    est = got[0] if got is not None else _coalition_estimate(run, theta, window)
    if est is None:
        return None
    c_hat, w = est
    k_max = run.policy.coalition.k_max
    if c_hat > k_max:
        run.fail("coalition", f"estimated coalition size {c_hat} > k_max = {k_max} (θ = {theta}, window = {w})")
    else:
        run.ok("coalition")
    run.checked["coalition_estimate"] = c_hat
    return c_hat


# ------------------------------------------------------------------------------------------------------------
def _sample(items: list[int], k: int) -> list[int]:
    """k items uniformly without replacement, by the verifier's own CSPRNG."""
    pool = list(items)
    for i in range(k):
        j = i + secrets.randbelow(len(pool) - i)
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:k]


def _read_auditor_file(path, what: str, cap: int) -> bytes:
    """The auditor's own file (``--receipts``, ``--key``, ``--trusted-checkpoint``): a regular file (the auditor
    may keep it behind a link), read without blocking and at most ``cap`` bytes; else exit 2 naming the flag."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise AuditorInputError(f"{what} {path}: cannot read ({e.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise AuditorInputError(f"{what} {path}: not a regular file")
        chunks, total = [], 0
        while total <= cap:
            c = os.read(fd, min(1 << 24, cap + 1 - total))
            if not c:
                break
            chunks.append(c)
            total += len(c)
    except OSError as e:
        raise AuditorInputError(f"{what} {path}: cannot read ({e.strerror})") from None
    finally:
        os.close(fd)
    if total > cap:
        raise AuditorInputError(f"{what} {path}: larger than {cap} bytes")
    return b"".join(chunks)


def _guarded(run: _Run, check: str, fn, *args):
    """Run one check; an exception it did not anticipate is a FAIL of that check, never a crash (the input
    is the provider's, so a crash would let it turn FAIL into 'unusable')."""
    t0, c0 = time.perf_counter(), _cpu()
    try:
        return fn(run, *args)
    except Exception as e:  # noqa: BLE001 — deliberately total: see the docstring
        run.fail(check, f"unexpected {type(e).__name__} while checking (the bundle is malformed)")
        return None
    finally:
        run.timings[check] = run.timings.get(check, 0.0) + time.perf_counter() - t0
        run.cpu[check] = run.cpu.get(check, 0.0) + _cpu() - c0


def _cpu() -> float:
    """CPU seconds of this process, of its finished children (workers forked by ``_fork_map``, background
    processes) and of the pool's workers so far (as each last reported it)."""
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    pool = _pool()
    return time.process_time() + c.ru_utime + c.ru_stime + (sum(pool.cpu.values()) if pool is not None else 0.0)


def key_fingerprint(vkey: str) -> str:
    return hashlib.sha256(vkey.encode()).hexdigest()[:16]


def verify(bundle_path: str | Path, *, receipts: str | Path | None = None, mode: str = "full",
           samples: int | None = None, key: str | Path | None = None, trusted_checkpoint: str | Path | None = None,
           corpus: dict[str, list[str]] | None = None, witnesses: list[str | Path] = (),
           min_witnesses: int | None = None, replay_generator=None, zk_vkey: str | Path | None = None,
           theta: float = DEFAULT_THETA,
           coalition_window: int | None = DEFAULT_WINDOW,
           progress: Callable[[str, int], None] | None = None) -> Verdict:
    """Run every check of spec/protocol.md §8 on the bundle at ``bundle_path``.

    ``key``: a file holding the provider's note verifier key, pinned by the auditor (else the bundle's own
    key is used and the verdict says it was not pinned). ``trusted_checkpoint``: a checkpoint note seen
    earlier; the ledger must extend it. ``corpus``: tenant -> document texts, to check C_docs.
    ``theta`` / ``coalition_window`` (None = the whole window): the coalition estimator's parameters.
    """
    depth = getattr(_LOCAL, "depth", 0)
    if depth == 0:  # (a nested verify, e.g. from a progress callback, uses the running pool)
        _LOCAL.pool = _start_pool(bundle_path, receipts)
    _LOCAL.depth = depth + 1
    try:
        return _verify(bundle_path, receipts=receipts, mode=mode, samples=samples, key=key,
                       trusted_checkpoint=trusted_checkpoint, corpus=corpus, witnesses=witnesses,
                       min_witnesses=min_witnesses, replay_generator=replay_generator, zk_vkey=zk_vkey, theta=theta,
                       coalition_window=coalition_window, progress=progress)
    finally:
        _LOCAL.depth = depth
        if depth == 0:
            _close_pool()


def _verify(bundle_path, *, receipts, mode, samples, key, trusted_checkpoint, corpus, witnesses, min_witnesses,
            replay_generator, zk_vkey, theta, coalition_window, progress) -> Verdict:
    if mode not in ("full", "sampled"):
        raise AuditorInputError("--mode must be 'full' or 'sampled'")
    if mode == "sampled" and (samples is None or samples < 1):
        raise AuditorInputError("--mode sampled needs --samples >= 1")
    if mode == "full" and samples is not None:
        raise AuditorInputError("--samples is only meaningful with --mode sampled")
    if not (isinstance(theta, (int, float)) and 0 < theta <= 1):
        raise AuditorInputError(f"--theta must lie in (0, 1], got {theta!r}")
    pinned = None
    if key is not None:
        pinned = _read_auditor_file(key, "--key", 4096).decode("utf-8", "replace").strip()
        try:
            NoteVerifier.from_vkey(pinned)
        except DpragError as e:
            raise AuditorInputError(f"--key {key}: not a note verifier key ({e})") from None
    trusted = None if trusted_checkpoint is None else _read_auditor_file(trusted_checkpoint, "--trusted-checkpoint", 1 << 16)
    from .ledger.witness import WitnessVerifier

    wit = []
    for w in witnesses:
        text = _read_auditor_file(w, "--witness", 4096).decode("utf-8", "replace").strip()
        try:
            wit.append(WitnessVerifier.from_vkey(text))
        except DpragError as e:
            raise AuditorInputError(f"--witness {w}: not a witness verifier key ({e})") from None
    if min_witnesses is None:
        min_witnesses = 1 if wit else 0
    vk = None
    if zk_vkey is not None:
        from dprag.zk.formats import FormatError, vk_from_json

        try:
            vk = vk_from_json(json.loads(_read_auditor_file(zk_vkey, "--zk-vkey", 1 << 20)))
        except (ValueError, FormatError) as e:
            raise AuditorInputError(f"--zk-vkey {zk_vkey}: not a snarkjs verification_key.json ({e})") from None
    if not isinstance(min_witnesses, int) or not 0 <= min_witnesses <= len(wit):
        raise AuditorInputError(f"--min-witnesses must lie in [0, {len(wit)}] (the number of --witness keys)")
    receipts_data = None if receipts is None else _read_auditor_file(receipts, "--receipts", 1 << 34)

    t_load = time.perf_counter()
    b = load_bundle(bundle_path)
    t_load = time.perf_counter() - t_load
    version = b.version
    if isinstance(version, int) and not isinstance(version, bool) and version != PROTOCOL_VERSION:
        # a well-formed genesis of another version: the auditor needs another verifier (exit 2). A damaged
        # version field is a FAIL of the commitments check, never "unusable".
        raise AuditorInputError(f"the bundle is protocol version {version!r}; this verifier checks version "
                                f"{PROTOCOL_VERSION} only")
    run = _Run(b, progress)
    run.timings["load"] = t_load
    _guarded(run, "files", check_8_1_files)
    _guarded(run, "canonical", check_8_2_canonical)
    if run.records:
        _guarded(run, "commitments", check_8_3_commitments, corpus)
    if pinned is not None and run.genesis is not None and run.genesis["provider_key"] != pinned:
        run.fail("commitments", f"the provider key is not the pinned one (bundle key {key_fingerprint(run.genesis['provider_key'])}, "
                                f"pinned {key_fingerprint(pinned)})")
    _guarded(run, "policy", check_8_4_policy)
    # the certified ε depends on the policy alone: computed beside the checks (a fixed ~3 s CPU cost)
    certify = _background("certify", run.policy) if run.policy is not None and run.n >= FORK_MIN_ITEMS else None
    valid_receipts = (_guarded(run, "receipts", _parse_receipts, receipts_data) or []) if receipts_data is not None else []
    no_receipt = receipts_data is not None and not receipts_data.strip()
    receipts_data = b"" if receipts_data is not None else None  # parsed: let the bytes go (memory at scale)
    trusted_size = _guarded(run, "ledger", check_8_5_ledger, {r[1]["size"] for r in valid_receipts}, trusted)
    if min_witnesses and run.genesis is not None and run.key is not None:
        _guarded(run, "ledger", _check_witnesses, wit, min_witnesses)
    if receipts_data is not None:
        if no_receipt:
            run.rejected.append("the receipts file holds no receipt")
        _guarded(run, "receipts", check_8_6_receipts, valid_receipts)
        if replay_generator is None:
            valid_receipts = []  # only the answer replay reads them again (memory at scale: ~200 MB at 10^5)
    guarantee = None
    if run.policy is not None and run.genesis is not None:
        _guarded(run, "requests", check_8_7_requests)
        coalition = None

        def start_coalition():
            # the coalition estimate (BLAS-bound) needs only the checked openings: computed beside the generation
            # check (started after the retrieval replay, whose workers already fill the cores: a lower peak)
            if run.n < FORK_MIN_ITEMS or _workers() < 2:
                return None
            try:
                inputs = _coalition_inputs(run)
            except Exception:  # noqa: BLE001 — the check itself (in line, below) reports it
                return None
            return None if inputs is None else _background("coalition", *inputs, theta, coalition_window)
        if run.seed is not None:
            positions = list(run.queries)
            if mode == "sampled":
                k = min(samples, len(positions))
                chosen = sorted(_sample(positions, k))
                guarantee = (f"sampled {k} of {len(positions)} query records: a β-fraction of non-conforming records "
                             f"is detected with probability >= {1 - (1 - 0.01) ** k:.4f} (β=0.01), "
                             f"{1 - (1 - 0.05) ** k:.4f} (β=0.05)")
                if k == len(positions):
                    guarantee += "; the sample covers every record (as full mode)"
            else:
                chosen = positions
            _guarded(run, "retrieval", check_8_8_retrieval, chosen)
            if _LOCAL.depth == 1:
                _close_pool()  # the last map is done: the idle workers' pages go before the coalition estimate starts
            if vk is not None and run.policy.retrieval.zk_tenants:
                _guarded(run, "retrieval", check_8_8_proofs, vk)
            coalition = start_coalition()
            _guarded(run, "generation", check_8_9_generation)
            if replay_generator is not None:
                if corpus is None:
                    for child in (certify, coalition):
                        if child is not None:
                            child()  # reap the child
                    raise AuditorInputError("answer replay needs the corpus (--corpus)")
                _guarded(run, "generation", check_8_9_answers, valid_receipts, replay_generator, corpus)
        run.scores = None  # the last reader of the scores is behind us (memory at scale)
        run.openings.drop()  # and of the openings (the coalition estimate reads the checked Q, run.qembs)
        _guarded(run, "coalition", check_8_10_coalition, theta, coalition_window, coalition)
        run.qembs = {}
    elif not run.reasons:
        run.fail("commitments", "no usable policy or genesis: nothing can be certified")

    channels: dict[str, Any] = {}
    eps = delta = k_max = None
    if run.policy is not None:
        t0 = time.perf_counter()
        cert = certify() if certify is not None else None
        cert = cert[0] if cert is not None else run.policy.certified_epsilons()
        run.timings["certify"] = time.perf_counter() - t0
        channels = {"relation": cert["relation"], "retrieval": cert["retrieval"], "generation": cert["generation"]}
        k_max = run.policy.coalition.k_max
        if not math.isfinite(cert["epsilon"]):
            run.fail("policy", "the committed parameters certify no finite ε")
        eps, delta = cert["epsilon"], cert["delta"]
    verdict = "PASS" if not run.reasons else "FAIL"
    if verdict == "FAIL":
        eps = delta = None
    attestation = {"retrieval": ATTESTATION_RETRIEVAL, "generation": ATTESTATION_GENERATION}
    if run.policy is not None and run.policy.retrieval.zk_tenants:
        zk = ", ".join(sorted(run.policy.retrieval.zk_tenants))
        sizes = ", ".join(f"{t}: N = {run.tenants[t]['n']}" for t in sorted(run.policy.retrieval.zk_tenants)
                          if t in run.tenants)
        if vk is not None and "zk_proofs" in run.checked:
            attestation["retrieval"] = (
                f"groth16 + replay: for zk tenant(s) {zk} (every score of the committed index proven; "
                f"{sizes or 'sizes unknown'} documents), {run.checked['zk_proofs']} Groth16 proofs of noise-then-select verified under the "
                "auditor's own verification key, which proves the citations without the index; every other query "
                "by replay. " + ATTESTATION_RETRIEVAL)
        else:
            attestation["retrieval"] = (f"replay only: the bundle's zk tenant(s) {zk} carry Groth16 proofs, not "
                                        "checked (no auditor verification key given: --zk-vkey). "
                                        + ATTESTATION_RETRIEVAL)
    extra_trust, gen_attestation = generation_trust(run.policy)
    if gen_attestation:
        attestation["generation"] = gen_attestation
    vk = run.genesis["provider_key"] if run.genesis else None
    return Verdict(verdict=verdict, epsilon=eps, delta=delta, k_max=k_max, channels=channels, trust=TRUST + extra_trust,
                   attestation=attestation, reasons=run.reasons, checked=dict(run.checked), mode=mode,
                   guarantee=guarantee, rejected_evidence=run.rejected,
                   provider_key=None if vk is None else key_fingerprint(vk), key_pinned=pinned is not None,
                   trusted_checkpoint=trusted_size, timings=dict(run.timings),
                   cpu_seconds=dict(run.cpu))
