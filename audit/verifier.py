"""Phase D: the verifier (spec/protocol.md §8). ``verify(bundle, receipts=..., mode=...) -> Verdict``.

Every check appends a reason ``"<check>: <what>"`` on failure and counts what it checked; the verdict is
PASS iff no reason was found. Input so broken that no check can run (a missing file, an unreadable
leaves.bin) raises ``BundleError`` (the CLI's exit 2). Nothing here spends budget or writes anything.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dprag.accounting.errors import DpragError
from dprag.accounting.filters import FilterBudget

from . import commitments as cm
from .encoding import EncodingError, decode, digest, hexbytes
from .estimator import coalition_size
from .ledger import NoteVerifier, open_checkpoint
from .ledger.rfc6962 import CompactRange, hash_leaf
from .policy import Policy
from .receipts import verify_receipt
from .retrieval import noise_table, noisy_top_k, query_label, retrieval_noise, top_commitment

ATTESTATION = ("replay: retrieval re-executed by the auditor from committed embeddings; "
               "no zero-knowledge proof (Groth16 not yet attached)")
MAX_LEAF_BYTES = 1 << 24


class BundleError(DpragError):
    """The bundle is unusable: a file is missing or cannot be parsed at all (exit code 2)."""


@dataclass
class Verdict:
    verdict: str
    epsilon: float | None
    delta: float | None
    k_max: int | None
    channels: dict
    attestation: str
    reasons: list[str]
    checked: dict
    mode: str
    guarantee: str | None = None

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "epsilon": self.epsilon, "delta": self.delta, "k_max": self.k_max,
                "channels": self.channels, "attestation": self.attestation, "reasons": self.reasons,
                "checked": self.checked, "mode": self.mode, "guarantee": self.guarantee}


# ------------------------------------------------------------------------------------------------------------
# loading
# ------------------------------------------------------------------------------------------------------------
def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise BundleError(f"missing file {path}") from None
    except OSError as e:
        raise BundleError(f"cannot read {path}: {e.strerror}") from None


def parse_leaves(data: bytes) -> list[bytes]:
    """leaves.bin: u32be(len) || bytes, repeated."""
    out, i = [], 0
    while i < len(data):
        if i + 4 > len(data):
            raise BundleError("leaves.bin: truncated length prefix")
        n = int.from_bytes(data[i:i + 4], "big")
        if n > MAX_LEAF_BYTES or i + 4 + n > len(data):
            raise BundleError(f"leaves.bin: leaf {len(out)} runs past the end of the file")
        out.append(data[i + 4:i + 4 + n])
        i += 4 + n
    if not out:
        raise BundleError("leaves.bin: empty ledger (no genesis leaf)")
    return out


@dataclass
class Bundle:
    root: Path
    leaves: list[bytes]
    genesis_file: bytes
    checkpoints: list[bytes]
    vkey: str
    seed_hex: str
    policy_bytes: bytes
    embedder_bytes: bytes
    openings_lines: list[bytes]
    index_files: dict[str, bytes] = field(default_factory=dict)
    framing_error: str | None = None


def load_bundle(path: str | Path) -> Bundle:
    p = Path(path)
    if not p.is_dir():
        raise BundleError(f"{p} is not a bundle directory")
    pub, aud = p / "public", p / "auditor"
    raw_leaves = _read(pub / "leaves.bin")
    try:
        leaves, framing = parse_leaves(raw_leaves), None
    except BundleError as e:
        leaves, framing = [], str(e)
    cps = [c for c in _read(pub / "checkpoints.txt").split(b"~~~\n") if c]
    idx = {}
    if (aud / "index").is_dir():
        for f in sorted((aud / "index").iterdir()):
            if f.suffix == ".i16":
                idx[f.stem] = _read(f)
    # decoded leniently: a damaged key or seed is a FAIL of the commitments check, not unusable input
    vkey = _read(pub / "provider.vkey").decode("latin-1")
    seed_hex = _read(aud / "seed.hex").decode("latin-1")
    return Bundle(root=p, leaves=leaves, framing_error=framing, genesis_file=_read(pub / "genesis.json"), checkpoints=cps, vkey=vkey,
                  seed_hex=seed_hex, policy_bytes=_read(aud / "policy.json"),
                  embedder_bytes=_read(aud / "embedder.json"),
                  openings_lines=[ln for ln in _read(aud / "openings.jsonl").split(b"\n") if ln],
                  index_files=idx)


# ------------------------------------------------------------------------------------------------------------
# the checks
# ------------------------------------------------------------------------------------------------------------
class _Run:
    def __init__(self):
        self.reasons: list[str] = []
        self.checked: Counter = Counter()

    def fail(self, check: str, what: str) -> None:
        if len(self.reasons) < 1000:
            self.reasons.append(f"{check}: {what}")

    def ok(self, check: str, n: int = 1) -> None:
        self.checked[check] += n


def _is_hex32(v) -> bool:
    try:
        hexbytes(v, "h", 32)
        return True
    except EncodingError:
        return False


def verify(bundle_path: str | Path, *, receipts: str | Path | None = None, mode: str = "full",
           samples: int | None = None) -> Verdict:
    if mode not in ("full", "sampled"):
        raise BundleError("mode must be 'full' or 'sampled'")
    if mode == "sampled" and (samples is None or samples < 1):
        raise BundleError("sampled mode needs --samples >= 1")
    b = load_bundle(bundle_path)
    run = _Run()
    if b.framing_error is not None:
        # a broken ledger file: nothing else can be checked against it
        run.fail("ledger", b.framing_error)
        return Verdict(verdict="FAIL", epsilon=None, delta=None, k_max=None, channels={}, attestation=ATTESTATION,
                       reasons=run.reasons, checked={}, mode=mode)

    # 2. canonical records ------------------------------------------------------------------------------
    records: list[dict | None] = []
    for i, raw in enumerate(b.leaves):
        try:
            rec = decode(raw, what=f"leaf {i}")
            if not isinstance(rec, dict) or not isinstance(rec.get("type"), str):
                raise EncodingError(f"leaf {i}: not a typed record")
            records.append(rec)
            run.ok("canonical")
        except EncodingError as e:
            records.append(None)
            run.fail("canonical", str(e))

    # 3. commitments -----------------------------------------------------------------------------------
    genesis = records[0]
    policy: Policy | None = None
    seed: bytes | None = None
    tenants: dict[str, dict] = {}
    verifier_key: NoteVerifier | None = None
    if b.genesis_file != b.leaves[0]:
        run.fail("commitments", "public/genesis.json differs from ledger leaf 0")
    if genesis is None or genesis.get("type") != "genesis":
        run.fail("commitments", "ledger leaf 0 is not a genesis record")
        genesis = None
    try:
        verifier_key = NoteVerifier.from_vkey(b.vkey)
    except DpragError as e:
        run.fail("commitments", f"provider.vkey unusable ({e})")
    try:
        policy = Policy.from_dict(decode(b.policy_bytes, what="policy"))
    except (EncodingError, DpragError) as e:
        run.fail("commitments", f"policy.json unusable ({e})")
    try:
        embedder = decode(b.embedder_bytes, what="embedder")
        if not isinstance(embedder, dict):
            raise EncodingError("embedder: not an object")
    except EncodingError as e:
        embedder = None
        run.fail("commitments", f"embedder.json unusable ({e})")
    try:
        seed = hexbytes(b.seed_hex, "seed", cm.SEED_BYTES)
    except EncodingError as e:
        run.fail("commitments", f"seed.hex unusable ({e})")
    if genesis is not None:
        if genesis.get("provider_key") != b.vkey:
            run.fail("commitments", "genesis provider_key differs from public/provider.vkey")
        if seed is not None and cm.seed_commitment(seed) != genesis.get("C_seed"):
            run.fail("commitments", "H(seed) does not open C_seed")
        if policy is not None and policy.commitment != genesis.get("C_policy"):
            run.fail("commitments", "policy does not open C_policy")
        if embedder is not None and digest(embedder) != genesis.get("C_emb"):
            run.fail("commitments", "embedder descriptor does not open C_emb")
        dim = embedder.get("dimension") if isinstance(embedder, dict) else None
        for t in genesis.get("tenants", []) if isinstance(genesis.get("tenants"), list) else []:
            try:
                name, n_docs, c_idx = t["tenant"], t["n_docs"], t["C_idx"]
                data = b.index_files.get(name)
                if data is None:
                    raise EncodingError(f"index file for tenant {name!r} missing")
                if not isinstance(dim, int) or dim < 1 or not isinstance(n_docs, int) or len(data) != 2 * n_docs * dim:
                    raise EncodingError(f"index of tenant {name!r} has the wrong size")
                q = np.frombuffer(data, dtype="<i2").reshape(n_docs, dim)
                if cm.index_commitment(q) != c_idx:
                    raise EncodingError(f"index of tenant {name!r} does not open C_idx")
                tenants[name] = {"q": q, "qf": q.astype(np.float64), "n": n_docs}
                run.ok("commitments")
            except (EncodingError, KeyError, TypeError) as e:
                run.fail("commitments", str(e))
        run.ok("commitments")

    # 4. policy well-formedness ---------------------------------------------------------------------------
    if policy is not None:
        try:
            policy.validate()
            run.ok("policy")
        except DpragError as e:
            run.fail("policy", str(e))
            policy = None

    # 5. ledger: roots of every prefix, checkpoints ----------------------------------------------------------
    n = len(b.leaves)
    leaf_hashes = [hash_leaf(x) for x in b.leaves]
    cp_sizes: dict[int, bytes] = {}
    last_size = -1
    origin = f"dprag/{policy.window}" if policy else None
    for k, note in enumerate(b.checkpoints):
        try:
            if verifier_key is None:
                raise EncodingError("no provider key")
            if origin is None:
                raise EncodingError("no policy to name the origin")
            cp, _ = open_checkpoint(note, origin, verifier_key)
            if cp.size > n:
                raise EncodingError(f"size {cp.size} exceeds the ledger size {n}")
            if cp.size <= last_size:
                raise EncodingError(f"size {cp.size} does not increase (checkpoints must be in increasing size)")
            last_size = cp.size
            cp_sizes[cp.size] = cp.root
        except (DpragError, EncodingError) as e:
            run.fail("ledger", f"checkpoint {k}: {e}")
    prefix_roots = _prefix_roots(leaf_hashes, set(cp_sizes) | {n})
    for size, root in sorted(cp_sizes.items()):
        if prefix_roots.get(size) != root:
            run.fail("ledger", f"checkpoint of size {size} is not consistent with the ledger")
        else:
            run.ok("ledger")
    if n not in cp_sizes:
        run.fail("ledger", f"no signed checkpoint covers the whole ledger (size {n})")

    # openings ---------------------------------------------------------------------------------------------
    openings: dict[int, dict] = {}
    last_pos = 0
    for k, line in enumerate(b.openings_lines):
        try:
            op = decode(line, what=f"opening line {k}")
            pos = op["pos"]
            if not isinstance(pos, int) or not last_pos < pos < n:
                raise EncodingError(f"opening line {k}: pos must increase and lie in [1, {n})")
            last_pos = pos
            openings[pos] = op
        except (EncodingError, KeyError, TypeError) as e:
            run.fail("canonical", str(e))

    # per-leaf structure, rate limit -----------------------------------------------------------------------
    counts: Counter = Counter()
    tenant_of_account: dict[str, str] = {}
    query_positions: list[int] = []
    for i in range(1, n):
        rec = records[i]
        if rec is None:
            continue
        typ = rec.get("type")
        if typ == "query":
            keys = {"type", "account", "tenant", "h_q", "h_qemb", "h_top", "h_charge"}
            if set(rec) != keys or not all(_is_hex32(rec[k]) for k in ("h_q", "h_qemb", "h_charge")) or \
                    not (rec["h_top"] is None or _is_hex32(rec["h_top"])) or \
                    not isinstance(rec["account"], str) or rec["tenant"] not in tenants:
                run.fail("canonical", f"leaf {i}: malformed query record")
                continue
            counts[rec["account"]] += 1
            prev = tenant_of_account.setdefault(rec["account"], rec["tenant"])
            if prev != rec["tenant"]:
                run.fail("rate", f"account {rec['account']!r} appears under two tenants")
            query_positions.append(i)
        elif typ == "recovery":
            if set(rec) != {"type", "tenant", "h_charge"} or rec["tenant"] not in tenants or not _is_hex32(rec["h_charge"]):
                run.fail("canonical", f"leaf {i}: malformed recovery record")
        else:
            run.fail("canonical", f"leaf {i}: unknown record type {typ!r}")
        if i not in openings:
            run.fail("canonical", f"leaf {i}: no opening in auditor/openings.jsonl")
    if policy is not None:
        for acct, c in sorted(counts.items()):
            if c > policy.retrieval.n:
                run.fail("rate", f"account {acct!r} made {c} queries > n = {policy.retrieval.n}")
            else:
                run.ok("rate")

    # 6. receipts ------------------------------------------------------------------------------------------
    if receipts is not None:
        _check_receipts(run, receipts, verifier_key, records, leaf_hashes, prefix_roots, n)

    # 8. retrieval replay ----------------------------------------------------------------------------------
    guarantee = None
    if policy is not None and seed is not None:
        r = policy.retrieval
        positions = [i for i in query_positions if i in openings]
        if mode == "sampled":
            k = min(samples, len(positions))
            chosen = sorted(_sample(positions, k))
            guarantee = (f"sampled {k} of {len(positions)} query records: a β-fraction of non-conforming records is "
                         f"detected with probability >= {1 - (1 - 0.01) ** k:.4f} (β=0.01), "
                         f"{1 - (1 - 0.05) ** k:.4f} (β=0.05)")
        else:
            chosen = positions
        table = noise_table(r.sigma, r.sampler.tail, r.sampler.precision_bits) if chosen else None
        for i in chosen:
            rec, op = records[i], openings[i]
            try:
                _replay_retrieval(rec, op, tenants[rec["tenant"]], policy, seed, table, i)
                run.ok("retrieval")
            except (EncodingError, KeyError, TypeError, ValueError) as e:
                run.fail("retrieval", f"leaf {i}: {e}")

    # 9. generation replay (always full) -------------------------------------------------------------------
    if policy is not None:
        _replay_generation(run, policy, records, openings, tenants, n)

    # 10. coalition estimate -------------------------------------------------------------------------------
    if policy is not None:
        embs, accts, poss = [], [], []
        for i in query_positions:
            op = openings.get(i)
            try:
                q = np.frombuffer(hexbytes(op["qemb"], "qemb"), dtype="<i2") if op else None
            except (EncodingError, KeyError, TypeError):
                q = None
            if q is not None and (not embs or q.size == embs[0].size):
                embs.append(q)
                accts.append(records[i]["account"])
                poss.append(i)
        if embs:
            # the window is measured in ledger positions (spec/protocol.md §6)
            c_hat = coalition_size(np.stack(embs), accts, policy.coalition.theta, policy.coalition.window,
                                   positions=poss)
            if c_hat > policy.coalition.k_max:
                run.fail("coalition", f"estimated coalition size {c_hat} > k_max = {policy.coalition.k_max}")
            else:
                run.ok("coalition")
            run.checked["coalition_estimate"] = c_hat

    # verdict ----------------------------------------------------------------------------------------------
    channels: dict[str, Any] = {}
    eps = delta = k_max = None
    if policy is not None:
        cert = policy.certified_epsilons()
        channels = {"relation": cert["relation"], "retrieval": cert["retrieval"], "generation": cert["generation"]}
        eps, delta, k_max = cert["epsilon"], cert["delta"], policy.coalition.k_max
        if not math.isfinite(eps):
            run.fail("policy", "the committed parameters certify no finite ε")
    verdict = "PASS" if not run.reasons else "FAIL"
    return Verdict(verdict=verdict, epsilon=eps, delta=delta, k_max=k_max, channels=channels,
                   attestation=ATTESTATION, reasons=run.reasons, checked=dict(run.checked), mode=mode,
                   guarantee=guarantee)


# ------------------------------------------------------------------------------------------------------------
def _sample(items: list[int], k: int) -> list[int]:
    """k items uniformly without replacement, by the verifier's own CSPRNG."""
    pool = list(items)
    for i in range(k):
        j = i + secrets.randbelow(len(pool) - i)
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:k]


def _prefix_roots(leaf_hashes: list[bytes], sizes: set[int]) -> dict[int, bytes]:
    """RFC 6962 roots of the ledger prefixes of the given sizes, in one pass."""
    out = {}
    cr = CompactRange()
    if 0 in sizes:
        out[0] = cr.root()
    top = max(sizes) if sizes else 0
    for k, h in enumerate(leaf_hashes[:top], start=1):
        cr.append_leaf_hash(h)
        if k in sizes:
            out[k] = cr.root()
    return out


def _check_receipts(run, path, verifier_key, records, leaf_hashes, prefix_roots, n) -> None:
    try:
        data = Path(path).read_bytes()
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
    except OSError as e:
        raise BundleError(f"cannot read receipts file {path}: {e}") from None
    seen: dict[bytes, int] = {}
    for k, line in enumerate(lines):
        try:
            if line in seen:
                raise EncodingError(f"duplicates receipt {seen[line]}")
            seen[line] = k
            obj = decode(line, what="receipt line")
            if not isinstance(obj, dict):
                raise EncodingError("not a JSON object")
            if "receipt" in obj:
                if set(obj) - {"receipt", "top"}:
                    raise EncodingError("unknown fields beside receipt/top")
                rc, top = obj["receipt"], obj.get("top")
            else:
                rc, top = obj, None
            if verifier_key is None:
                raise EncodingError("no provider key to check the signature")
            body = verify_receipt(rc, verifier_key)
            pos, size = body["pos"], body["size"]
            if size > n:
                raise EncodingError(f"size {size} exceeds the ledger size {n}")
            root = bytes.fromhex(body["root"])
            if size not in prefix_roots:
                prefix_roots.update(_prefix_roots(leaf_hashes, {size}))
            if prefix_roots[size] != root:
                raise EncodingError(f"root is not the ledger's root at size {size} (inconsistent history)")
            rec = records[pos]
            if rec is None or rec.get("type") != "query":
                raise EncodingError(f"ledger position {pos} holds no query record")
            for f in ("account", "tenant", "h_q", "h_top"):
                if rec.get(f) != body[f]:
                    raise EncodingError(f"{f} differs from the ledger record at {pos}")
            if top is not None:
                if body["nonce_top"] is None:
                    raise EncodingError("citations supplied but the receipt has no nonce_top")
                if top_commitment(np.asarray(top, dtype=np.int64), bytes.fromhex(body["nonce_top"])) != body["h_top"]:
                    raise EncodingError("the account's citations do not match h_top")
            run.ok("receipts")
        except (EncodingError, ValueError, KeyError, TypeError, IndexError) as e:
            run.fail("receipts", f"receipt {k}: {e}")


def _replay_retrieval(rec, op, ten, policy: Policy, seed: bytes, table, pos: int) -> None:
    r = policy.retrieval
    qb = hexbytes(op["qemb"], "qemb")
    if hashlib.sha256(qb).hexdigest() != rec["h_qemb"]:
        raise EncodingError("opened query embedding does not match h_qemb")
    q = np.frombuffer(qb, dtype="<i2")
    if q.size != ten["q"].shape[1]:
        raise EncodingError("query embedding has the wrong dimension")
    enabled = rec["tenant"] in r.enabled_tenants
    if not enabled:
        if rec["h_top"] is not None or op.get("top") is not None:
            raise EncodingError("citations recorded for a tenant without the retrieval channel")
        return
    if op.get("top") is None or rec["h_top"] is None:
        raise EncodingError("citations missing for a tenant with the retrieval channel on")
    scores = cm.integer_scores(ten["q"], q, r.score_clip, r.score_shift)
    z = retrieval_noise(seed, query_label(rec["account"], rec["tenant"], rec["h_q"], pos), ten["n"], table)
    expected = noisy_top_k(scores, z, r.K)
    top = np.asarray(op["top"], dtype=np.int64)
    if top.shape != expected.shape or not np.array_equal(top, expected):
        raise EncodingError("citations are not the top-K of the committed-seed noisy scores")
    if top_commitment(top, hexbytes(op["nonce_top"], "nonce_top", 16)) != rec["h_top"]:
        raise EncodingError("h_top does not match the opened citations")


def _replay_generation(run, policy: Policy, records, openings, tenants, n) -> None:
    g = policy.generation
    budget = FilterBudget.for_queries(g.max_queries_per_doc, policy.query_cost(), mode="pure")
    limit = int(np.asarray(budget.limits)[0])
    from dprag.accounting.filters import IndividualRenyiFilter
    from dprag.accounting.stores import MemoryBudgetStore

    probe = IndividualRenyiFilter(MemoryBudgetStore(1), budget)
    rag_units = int(probe.cost_units(policy.rag_params().cost)[0])
    thr_units = None
    if g.algorithm == "murag-ada":
        from dprag.accounting.events import DiscreteLaplaceEvent

        thr_units = int(probe.cost_units(DiscreteLaplaceEvent(1.0 / g.epsilon_thr, 1))[0])
    spent = {t: np.zeros(v["n"], dtype=np.int64) for t, v in tenants.items()}
    edges = None if g.edges is None else np.asarray(g.edges, dtype=np.float64)
    for i in range(1, n):
        rec, op = records[i], openings.get(i)
        if rec is None or op is None or rec.get("type") not in ("query", "recovery") or rec.get("tenant") not in tenants:
            continue
        t = rec["tenant"]
        try:
            charge = op["charge"]
            if digest(charge) != rec["h_charge"]:
                raise EncodingError("h_charge does not match the opened charges")
            ch = charge["charges"]
            s = spent[t]
            if rec["type"] == "recovery":
                if charge["algorithm"] != "recovery" or op.get("kind") != "recovery":
                    raise EncodingError("recovery leaf with a non-recovery opening")
                for c in ch:
                    ids = _ids(c["ids"], s.size)
                    s[ids] += int(c["cost"]["epsilon_units"])
            else:
                q = np.frombuffer(hexbytes(op["qemb"], "qemb"), dtype="<i2")
                if q.size != tenants[t]["q"].shape[1]:
                    raise EncodingError("query embedding has the wrong dimension")
                scores = cm.integer_scores(tenants[t]["q"], q, policy.retrieval.score_clip, policy.retrieval.score_shift)
                if charge["algorithm"] != g.algorithm:
                    raise EncodingError("charge algorithm differs from the policy")
                if g.algorithm == "murag":
                    if len(ch) != 1 or int(ch[0]["cost"]["epsilon_units"]) != rag_units:
                        raise EncodingError("MuRAG charge must be one charge of the policy's per-query cost")
                    expected = np.flatnonzero((scores > g.tau) & (s + rag_units <= limit))
                    got = _ids(ch[0]["ids"], s.size)
                    if not np.array_equal(np.sort(got), expected):
                        raise EncodingError(f"charged {got.size} documents, expected the {expected.size} above tau "
                                            f"that could afford the cost")
                    s[expected] += rag_units
                else:
                    if len(ch) != 2 or int(ch[0]["cost"]["epsilon_units"]) != thr_units or \
                            int(ch[1]["cost"]["epsilon_units"]) != rag_units:
                        raise EncodingError("MuRAG-Ada charges must be (ε_thr, ε_RAG) of the policy")
                    q_bins = charge["bins_released"]
                    nb = edges.size - 1
                    if not isinstance(q_bins, int) or not 1 <= q_bins <= nb:
                        raise EncodingError("bins_released out of range")
                    # released bins 0..q-1 hold the scores >= edges[q] (bin 0 also holds those above edges[0])
                    exp_thr = np.flatnonzero((scores >= edges[q_bins]) & (s + thr_units <= limit))
                    got_thr = _ids(ch[0]["ids"], s.size)
                    if not np.array_equal(np.sort(got_thr), exp_thr):
                        raise EncodingError("ε_thr charge differs from the released bins' affordable documents")
                    s[exp_thr] += thr_units
                    exp_rag = exp_thr[s[exp_thr] + rag_units <= limit]
                    got_rag = _ids(ch[1]["ids"], s.size)
                    if not np.array_equal(np.sort(got_rag), exp_rag):
                        raise EncodingError("ε_RAG charge differs from the affordable documents of the released bins")
                    s[exp_rag] += rag_units
            if np.any(s > limit):
                raise EncodingError("a document's spend exceeds its budget")
            run.ok("generation")
        except (EncodingError, KeyError, TypeError, ValueError) as e:
            run.fail("generation", f"leaf {i}: {e}")
    for t, s in spent.items():
        over = np.flatnonzero(s > limit)
        if over.size:
            run.fail("generation", f"tenant {t}: {over.size} documents over budget")
        run.checked["documents_within_budget"] = run.checked.get("documents_within_budget", 0) + int((s <= limit).sum())


def _ids(ids, n) -> np.ndarray:
    if not isinstance(ids, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in ids):
        raise EncodingError("ids must be a list of integers")
    a = np.asarray(ids, dtype=np.int64)
    if a.size and (a.min() < 0 or a.max() >= n):
        raise EncodingError("an id lies outside the tenant's corpus")
    if np.unique(a).size != a.size:
        raise EncodingError("duplicate ids in a charge")
    return a
