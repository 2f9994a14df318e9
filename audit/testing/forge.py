"""A provider forging its own bundle with its own keys (spec/protocol.md §8.12, the re-signing campaign).

The byte-level campaign (``fuzz``) mostly stops at the first signature or hash. Here the mutator is the provider:
it holds the window's note key, so after each edit it re-derives everything it can — the leaf hashes
(``h_top``, ``h_charge``), the genesis commitments it opens (``C_seed``), every checkpoint and every receipt,
re-signed — and the edit reaches the deep checks. Only what the provider cannot forge stays as it was: the
accounts' signed requests, and the questions they hand the auditor.

``MUST_FAIL`` is the fixed list of edits every one of which must FAIL naming one of its checks (none may pass or
move to "on trust"); ``identity`` (re-deriving and re-signing an unchanged window) must PASS, which shows the
re-signing itself is faithful. ``python -m dprag.audit.testing.forge --cases N --seed S`` runs a campaign and
prints its statistics as JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..protocol.bundle import parse_leaves
from ..protocol.chain import origin_of
from ..protocol.commitments import new_seed, seed_commitment
from ..protocol.encoding import decode, digest, encode
from ..protocol.ledger import NoteSigner
from ..protocol.ledger.checkpoint import Checkpoint, sign_checkpoint
from ..protocol.ledger.rfc6962 import CompactRange, hash_leaf, root_from_leaves
from ..protocol.receipts import receipt_body, sign_receipt
from ..protocol.request import request_hash
from ..protocol.retrieval import top_commitment
from ..verify import verify

#: edit -> the checks of which at least one must name it (the verdict is FAIL, with a reason "<check>: ...")
MUST_FAIL: dict[str, tuple[str, ...]] = {
    "charge_drop": ("generation",),  # an admitted document left out of a charge
    "charge_add": ("generation",),  # a document added to a charge
    "charge_units": ("generation",),  # the charged units of one charge moved by one
    "bins_released": ("generation",),  # MuRAG-Ada's released threshold bins moved by one
    # a charged document dropped from every charge and declared excluded (spec/protocol.md §5.3 steps 3-4), although
    # its scoring and selection do not fail: the exclusion is not that record's (§8.9 re-runs them)
    "exclude_unfailing": ("generation",),
    "top_swap": ("retrieval",),  # one citation replaced by a document the noise did not select
    "top_reorder": ("retrieval",),  # two citations swapped
    "qemb_flip": ("requests",),  # one coordinate of an account-committed Q changed
    "leaf_swap": ("requests",),  # two requests of one account recorded in the other order
    "answer_swap": ("generation",),  # one receipt's h_answer for another text (caught by answer replay)
    "seed_swap": ("retrieval", "generation"),  # a new s_W with C_seed re-derived: the releases no longer replay
    # signed refusals the provider adds (spec/protocol.md §5.1 and §8.6), handed in by the account they name:
    "refusal_of_recorded": ("receipts",),  # a refusal at a size above the leaf that holds the request
    "refusal_false_rule": ("receipts",),  # "not the next counter" at the size just below the request's leaf
    "refusal_fork": ("receipts",),  # a refusal signed at another root than the ledger's at its size
    # signed voids (§5.1: recorded, never to be answered, the counter consumed) the provider adds:
    "void_skip": ("receipts",),  # a void of a charged request no registry leaf after it explains (a skipped answer)
    "void_unrecorded": ("receipts",),  # a void at the size just below the request's leaf (nothing consumed there)
    # state leaves the provider inserts into its own log (spec/protocol.md §3.2-§3.5), everything after re-derived:
    "registry_rekey": ("commitments",),  # an account's name registered again, under a key the provider holds
    "registry_forged_rotation": ("commitments",),  # an account's key rotated by a signature the provider made
    "revoke_then_serve": ("requests",),  # an account revoked before a request the log then serves
    "key_unsigned": ("commitments", "ledger"),  # a provider key rotation the outgoing key did not sign
    "policy_raises_limit": ("policy", "retrieval", "generation"),  # an epoch with a larger filter limit
    "documents_forged": ("commitments",),  # a documents leaf whose commitments open to nothing in the bundle
    "key_retired_signs": ("ledger",),  # a rotation the outgoing key signed, but the retired key signs past it
    # one log per corpus (spec/protocol.md §3.1): the log's key signs for one origin only
    "receipt_other_origin": ("receipts",),  # a receipt the key signed for another log's origin (equivocation)
}
#: edits that re-derive an honest window: must PASS
MUST_PASS = ("identity",)
#: what an account can do with no provider key, on an honest window: none may FAIL it (an account cannot frame an
#: honest provider): its receipts and refusals (the base holds the framing sequence: counter 2 refused before
#: counter 1, then served) reordered, replayed, or dropped, a refusal handed in again beside the receipt of the
#: same request, and lines of another log of the provider's (under its own key)
ACCOUNT_KINDS = (
    "acct_reorder",
    "acct_replay",
    "acct_drop",
    "acct_refusal_with_receipt",
    "acct_other_log",
    "acct_forged_void",  # a void of one of its own requests, signed by a key the account made
)


@dataclass
class Base:
    """An honest toy window the forger starts from: its bundle, its receipts with questions, and its note key."""

    bundle: Path
    lines: list[dict]  # receipt lines as the accounts hand them over (receipt, top, request, question)
    signer: NoteSigner
    origin: str
    corpus: dict[str, list[str]]


def base_window(d: Path, algorithm: str) -> Base:
    from .window import CLINIC, LEGAL, build_window

    w = build_window(d, algorithm=algorithm, rounds=2, close=False)
    _framing_sequence(w)
    lines = []
    for c in w.clients.values():
        p = c.export_receipts(d / f"r-{c.account}.jsonl", include_questions=True)
        lines += [decode(x) for x in p.read_bytes().splitlines() if x]
    svc = w.service
    bundle = svc.export_bundle(d / "bundle-with-framing")  # after the framing sequence's leaves
    base = Base(bundle, lines, svc.signer, svc.origin, {"clinic": list(CLINIC), "legal": list(LEGAL)})
    svc.close()
    return base


def _framing_sequence(w) -> None:
    """alice sends her next counter + 1 first (a signed refusal: "must be the next counter"), then her next counter,
    then the refused bytes again, which are served: the refusal stays in her evidence (an honest window)."""
    from ..protocol.errors import RequestError

    alice = w.clients["alice"]
    first, second = alice.request("asthma protocol inhaler patient again"), alice.request("inhaler drug protocol again")
    try:
        w.service.serve(second)
    except RequestError as e:
        # kept as AccountClient.send keeps a refusal of its current counter (the toy clients keep no directory)
        alice.kept.setdefault("refusals.jsonl", []).append({"refusal": e.refusal, "request": second.signed})
    alice.send(w.service, first)
    alice.send(w.service, second)


@dataclass
class Forged:
    leaves: list[bytes]
    openings: dict[int, dict]
    seed_hex: str
    answers: dict[str, str] = field(default_factory=dict)  # h_req -> h_answer to sign instead of the honest one
    epochs: list[dict] = field(default_factory=list)  # auditor/epochs.json, when the forger opens an epoch
    signer: NoteSigner | None = None  # the provider's note key (the outgoing key of a rotation it inserts)


def _insert(f: Forged, at: int, leaf: dict) -> None:
    """Insert ``leaf`` at position ``at``: every later leaf and its opening move up by one."""
    f.leaves.insert(at, encode(leaf))
    moved = {}
    for p, op in f.openings.items():
        q = p + 1 if p >= at else p
        moved[q] = {**op, "pos": q}
    f.openings = moved


STATE_KINDS = (
    "registry_rekey",
    "registry_forged_rotation",
    "revoke_then_serve",
    "key_unsigned",
    "policy_raises_limit",
    "documents_forged",
    "key_retired_signs",
)


def _state_edit(kind: str, f: Forged, rng: random.Random, tenant_of: dict[str, str], chain: str) -> bool:
    """Insert a state leaf the rules forbid, before a query of the log (everything after it is re-derived)."""
    from ..protocol.commitments import new_salt, policy_commitment
    from ..protocol.provider_keys import key_leaf
    from ..protocol.registry import account_key_leaf
    from ..protocol.request import AccountKey
    from .toy import toy_policy

    qs = _queries(f)
    if not qs:
        return False
    mine = AccountKey.generate()
    if kind == "revoke_then_serve":
        p = rng.choice(qs)
        name = f.openings[p]["request"]["account"]
        _insert(f, rng.randint(1, p), {"type": "account-revoke", "account": name})
        return True
    at = rng.randint(1, max(qs))
    name = rng.choice(sorted(tenant_of))
    if kind == "registry_rekey":
        leaf = {"type": "account", "account": name, "tenant": tenant_of[name], "key": mine.vkey}
    elif kind == "registry_forged_rotation":
        leaf = account_key_leaf(mine, chain, name, AccountKey.generate().vkey)
    elif kind == "key_unsigned":
        new = NoteSigner.generate("forged")
        leaf = key_leaf(new, chain, new.vkey())
    elif kind == "key_retired_signs":  # a genuine rotation; the forger keeps signing with the retired key
        assert f.signer is not None
        leaf = key_leaf(f.signer, chain, NoteSigner.generate("next").vkey())
    elif kind == "policy_raises_limit":
        bigger = toy_policy(max_queries_per_doc=rng.randint(3, 9))  # the base windows commit M = 2
        salt, seed = new_salt(), new_seed()
        leaf = {
            "type": "policy",
            "epoch": 1,
            "C_policy": policy_commitment(salt, bigger.to_bytes()),
            "C_seed": seed_commitment(seed),
        }
        f.epochs = [{"epoch": 1, "pos": at, "policy": bigger.to_dict(), "salt": salt.hex(), "seed": seed.hex()}]
    else:  # documents_forged
        leaf = {
            "type": "documents",
            "tenant": tenant_of[name],
            "first": 0,
            "count": 1,
            "C_idx": digest({"forged": rng.getrandbits(52)}),
            "C_docs": digest({"forged docs": rng.getrandbits(52)}),
        }
    _insert(f, at, leaf)
    return True


def _queries(f: Forged) -> list[int]:
    return sorted(p for p in f.openings if f.openings[p].get("kind") == "query")


def _prefix_roots(leaves: list[bytes]) -> dict[int, bytes]:
    """The RFC 6962 root of every prefix of ``leaves`` (size -> root), in one pass."""
    cr, out = CompactRange(), {}
    for k, leaf in enumerate(leaves, start=1):
        cr.append_leaf_hash(hash_leaf(leaf))
        out[k] = cr.root()
    return out


def _edit(kind: str, f: Forged, rng: random.Random, n_docs: dict[str, int], tenant_of: dict[str, str]) -> bool:
    """Apply ``kind`` to ``f``; False when this window offers nothing to edit (the case is skipped)."""
    qs = _queries(f)
    if kind in STATE_KINDS:
        return _state_edit(kind, f, rng, tenant_of, hashlib.sha256(f.leaves[0]).hexdigest())
    if kind in ("identity", "receipt_other_origin") or kind.startswith(("refusal_", "void_")):
        return True  # a refusal or origin kind re-derives the window and adds its line after (``forge``)
    if kind in ("charge_drop", "charge_add", "charge_units"):
        cands = [
            (p, i)
            for p in qs
            for i, c in enumerate(f.openings[p]["charge"]["charges"])
            if c["ids"] or kind != "charge_drop"
        ]
        if not cands:
            return False
        p, i = rng.choice(cands)
        ch = f.openings[p]["charge"]["charges"][i]
        if kind == "charge_drop":
            ch["ids"].remove(rng.choice(ch["ids"]))
        elif kind == "charge_add":
            n = n_docs[tenant_of[f.openings[p]["request"]["account"]]]
            free = sorted(set(range(n)) - set(ch["ids"]))
            if not free:
                return False
            ch["ids"] = sorted(ch["ids"] + [rng.choice(free)])
        else:
            ch["cost"]["epsilon_units"] += rng.choice((-1, 1))
        return True
    if kind == "exclude_unfailing":
        cands = [p for p in qs if f.openings[p]["charge"]["charges"] and f.openings[p]["charge"]["charges"][-1]["ids"]]
        if not cands:
            return False
        ch = f.openings[rng.choice(cands)]["charge"]
        d = rng.choice(ch["charges"][-1]["ids"])
        for c in ch["charges"]:
            if d in c["ids"]:
                c["ids"].remove(d)
        ch["excluded"] = [d]
        return True
    if kind == "bins_released":
        cands = [p for p in qs if f.openings[p]["charge"].get("bins_released") is not None]
        if not cands:
            return False
        ch = f.openings[rng.choice(cands)]["charge"]
        ch["bins_released"] = max(0, ch["bins_released"] + rng.choice((-1, 1))) if ch["bins_released"] else 1
        return True
    if kind in ("top_swap", "top_reorder"):
        cands = [p for p in qs if f.openings[p]["top"] and len(f.openings[p]["top"]) >= 2]
        if not cands:
            return False
        op = f.openings[rng.choice(cands)]
        top = op["top"]
        if kind == "top_reorder":
            i, j = rng.sample(range(len(top)), 2)
            top[i], top[j] = top[j], top[i]
        else:
            n = n_docs[tenant_of[op["request"]["account"]]]
            free = sorted(set(range(n)) - set(top))
            top[rng.randrange(len(top))] = rng.choice(free)
        return True
    if kind == "qemb_flip":
        cands = [p for p in qs if f.openings[p]["request"].get("h_qemb") is not None]
        if not cands:
            return False
        op = f.openings[rng.choice(cands)]
        q = bytearray(bytes.fromhex(op["qemb"]))
        i = 2 * rng.randrange(len(q) // 2)
        q[i] ^= 1 << rng.randrange(8)
        op["qemb"] = bytes(q).hex()
        return True
    if kind == "leaf_swap":
        by_acct: dict[str, list[int]] = {}
        for p in qs:
            by_acct.setdefault(f.openings[p]["request"]["account"], []).append(p)
        pairs = [ps for ps in by_acct.values() if len(ps) >= 2]
        if not pairs:
            return False
        a, b = sorted(rng.sample(rng.choice(pairs), 2))
        f.openings[a], f.openings[b] = f.openings[b], f.openings[a]
        f.openings[a]["pos"], f.openings[b]["pos"] = a, b
        return True
    if kind == "answer_swap":
        p = rng.choice(qs)
        h_req = request_hash(f.openings[p]["request"]).hex()
        f.answers[h_req] = digest({"forged answer": rng.getrandbits(52)})
        return True
    if kind == "seed_swap":
        f.seed_hex = new_seed().hex()
        g = json.loads(f.leaves[0])
        g["C_seed"] = seed_commitment(bytes.fromhex(f.seed_hex))
        f.leaves[0] = encode(g)
        return True
    raise ValueError(f"unknown edit {kind!r}")


def forge(base: Base, kind: str, rng: random.Random, out: Path) -> tuple[Path, Path] | None:
    """Write the forged bundle and the re-signed receipts under ``out``; None if ``kind`` has nothing to edit."""
    b = out / "bundle"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(base.bundle, b)
    leaves = parse_leaves((b / "public" / "leaves.bin").read_bytes())
    openings = {
        op["pos"]: op for op in (decode(x) for x in (b / "auditor" / "openings.jsonl").read_bytes().splitlines() if x)
    }
    g = json.loads(leaves[0])
    n_docs = {t["tenant"]: t["n_docs"] for t in g["tenants"]}
    tenant_of = {a["account"]: a["tenant"] for a in g["accounts"]}
    f = Forged(list(leaves), openings, (b / "auditor" / "seed.hex").read_text().strip(), signer=base.signer)
    if not _edit(kind, f, rng, n_docs, tenant_of):
        return None
    # re-derive every leaf the provider writes from its (edited) opening
    for p in _queries(f):
        op = f.openings[p]
        leaf = {
            "type": "query",
            "h_req": request_hash(op["request"]).hex(),
            "h_top": top_commitment(op["top"] or [], bytes.fromhex(op["nonce_top"])),
            "h_charge": digest(op["charge"]),
        }
        f.leaves[p] = encode(leaf)
    n = len(f.leaves)
    root = root_from_leaves(f.leaves)
    (b / "public" / "leaves.bin").write_bytes(b"".join(len(x).to_bytes(4, "big") + x for x in f.leaves))
    (b / "public" / "genesis.json").write_bytes(f.leaves[0])
    (b / "public" / "checkpoints.txt").write_bytes(
        sign_checkpoint(Checkpoint(origin_of(f.leaves[0]), n, root, ()), base.signer)
    )
    (b / "auditor" / "seed.hex").write_text(f.seed_hex)
    if f.epochs:
        (b / "auditor" / "epochs.json").write_bytes(encode(f.epochs))
    (b / "auditor" / "openings.jsonl").write_bytes(b"".join(encode(f.openings[p]) + b"\n" for p in sorted(f.openings)))
    # re-sign every receipt at its leaf's size (pos + 1); the accounts' requests and questions are what they were
    roots_at = _prefix_roots(f.leaves)
    pos_of = {request_hash(f.openings[p]["request"]).hex(): p for p in _queries(f)}
    lines = []
    for line in base.lines:
        if "receipt" not in line:
            continue
        r = line["receipt"]
        p = pos_of[r["h_req"]]
        op = f.openings[p]
        body = receipt_body(
            origin=origin_of(f.leaves[0]),  # the (re-signed) log's own name
            account=r["account"],
            tenant=r["tenant"],
            counter=r["counter"],
            h_req=r["h_req"],
            h_top=json.loads(f.leaves[p])["h_top"],
            nonce_top=op["nonce_top"],
            h_answer=f.answers.get(r["h_req"], r["h_answer"]),
            pos=p,
            leaf_hash=hash_leaf(f.leaves[p]).hex(),
            size=p + 1,
            root=roots_at[p + 1].hex(),
        )
        lines.append(encode({**line, "receipt": sign_receipt(body, base.signer), "top": op["top"]}))
    lines += [encode(x) for x in base.lines if "refusal" in x]  # the accounts' own refusals: signed, kept
    if kind.startswith(("refusal_", "void_")):
        lines.append(_forged_refusal(kind, f, base, roots_at, rng))
    if kind == "receipt_other_origin" and lines:  # the same key, a second log of the provider's (its own origin)
        r = decode(rng.choice([x for x in lines if b'"receipt"' in x]))["receipt"]
        other = {k: v for k, v in r.items() if k not in ("sig", "key")}
        other["origin"] = "dprag/" + hashlib.sha256(rng.randbytes(32)).hexdigest()
        lines.append(encode({"receipt": sign_receipt(other, base.signer)}))
    receipts = out / "receipts.jsonl"
    receipts.write_bytes(b"".join(x + b"\n" for x in lines))
    return b, receipts


def _forged_refusal(kind: str, f: Forged, base: Base, roots_at: dict[int, bytes], rng: random.Random) -> bytes:
    """A refusal line the provider signs with its own key, handed in (with the request it names) by the account."""
    from ..protocol.receipts import refusal_body, sign_refusal

    qs = [p for p in _queries(f) if p >= 2]
    p = rng.choice(qs)
    req = f.openings[p]["request"]
    size = {"refusal_of_recorded": p + 1, "refusal_false_rule": p, "refusal_fork": p, "void_skip": p + 1}.get(kind, p)
    if kind == "refusal_fork":
        root = hashlib.sha256(b"another log %d" % rng.getrandbits(52)).hexdigest()
    else:
        root = roots_at[size].hex()
    body = refusal_body(
        origin=origin_of(f.leaves[0]),
        h_req=request_hash(req).hex(),
        field="request.sig" if kind.startswith("void_") else "request.counter",
        rule="recorded, never to be answered (void)"
        if kind.startswith("void_")
        else f"must be the next counter {req['counter'] + 1} (gapless)",
        code="void" if kind.startswith("void_") else "counter",
        size=size,
        root=root,
    )
    return encode({"refusal": sign_refusal(body, base.signer), "request": req})


def account_case(base: Base, kind: str, rng: random.Random, out: Path, other: Base) -> Path:
    """The receipts file an account (no provider key) makes of the base window's evidence, by ``kind``."""
    lines = [encode(x) for x in base.lines]
    if kind == "acct_reorder":
        rng.shuffle(lines)
    elif kind == "acct_replay":
        lines += [rng.choice(lines) for _ in range(rng.randint(1, 4))]
        rng.shuffle(lines)
    elif kind == "acct_drop":
        lines = rng.sample(lines, rng.randint(0, len(lines)))
    elif kind == "acct_refusal_with_receipt":
        refusals = [x for x in base.lines if "refusal" in x]
        lines += [encode({"refusal": r["refusal"], "request": r["request"]}) for r in refusals * 2]
        rng.shuffle(lines)
    elif kind == "acct_forged_void":  # the account's own key is no provider key: rejected, never a FAIL
        from ..protocol.receipts import REFUSAL_DOMAIN, key_id, refusal_body

        mine = NoteSigner.generate("account-forges")
        r = rng.choice([x for x in base.lines if "receipt" in x])
        body = refusal_body(
            origin=base.origin,
            h_req=r["receipt"]["h_req"],
            field="request.sig",
            rule="void (forged by the account)",
            code="void",
            size=r["receipt"]["size"] + 1,
            root=r["receipt"]["root"],
        )
        body["key"] = key_id(base.signer.vkey())  # naming the provider's key, signed by another
        lines.append(encode({"refusal": {**body, "sig": mine.sign(REFUSAL_DOMAIN + encode(body)).hex()}}))
        rng.shuffle(lines)
    elif kind == "acct_other_log":  # another log of the provider's (its own key), not this one's evidence
        lines += [encode(x) for x in rng.sample(other.lines, min(3, len(other.lines)))]
        rng.shuffle(lines)
    else:
        raise ValueError(f"unknown account kind {kind!r}")
    out.mkdir(parents=True, exist_ok=True)
    p = out / "account-receipts.jsonl"
    p.write_bytes(b"".join(x + b"\n" for x in lines))
    return p


@dataclass
class ForgeStats:
    cases: int = 0
    skipped: int = 0  # an edit the window offered nothing for
    by_kind: dict = field(default_factory=dict)  # kind -> {"FAIL": n, "PASS": n}
    escaped: list = field(default_factory=list)  # (case, kind, verdict, reasons): a must-FAIL edit that did not
    framed: list = field(default_factory=list)  # (case, kind, reasons): an account-side kind that FAILed the honest
    tracebacks: list = field(default_factory=list)
    seconds: float = 0.0
    max_seconds: float = 0.0  # the slowest case (forging and verifying); a case over 10 s counts as a hang
    slow_over_10s: int = 0
    peak_rss_mib: float = 0.0


def run_campaign(cases: int, seed: int, workdir: Path, *, on_case: Callable[[int], None] | None = None) -> ForgeStats:
    from .toy import ToyGenerator

    bases = [base_window(workdir / f"base-{alg}", alg) for alg in ("murag", "murag-ada")]
    kinds = list(MUST_PASS) + list(MUST_FAIL) + list(ACCOUNT_KINDS)
    rng = random.Random(seed)
    st = ForgeStats()
    t0 = time.perf_counter()
    for c in range(cases):
        kind = kinds[c % len(kinds)]
        base = bases[(c // len(kinds)) % len(bases)]
        st.cases += 1
        t_case = time.perf_counter()
        try:
            if kind in ACCOUNT_KINDS:  # the honest window, the account's doing only: never a FAIL
                receipts = account_case(base, kind, rng, workdir / "case", bases[1 - bases.index(base)])
                v = verify(base.bundle, receipts=receipts)
                st.by_kind.setdefault(kind, {"FAIL": 0, "PASS": 0, "INCOMPLETE": 0})[v.verdict] += 1
                if v.verdict == "FAIL":
                    st.framed.append((c, kind, v.reasons[:3]))
                continue
            got = forge(base, kind, rng, workdir / "case")
            if got is None:
                st.skipped += 1
                continue
            bundle, receipts = got
            v = verify(bundle, receipts=receipts, corpus=base.corpus, replay_generator=ToyGenerator())
            tally = st.by_kind.setdefault(kind, {"FAIL": 0, "PASS": 0, "INCOMPLETE": 0})
            tally[v.verdict] += 1
            if kind in MUST_PASS:
                if v.verdict != "PASS":
                    st.escaped.append((c, kind, v.verdict, v.reasons[:3]))
            elif v.verdict == "PASS" or not any(r.split(":", 1)[0] in MUST_FAIL[kind] for r in v.reasons):
                st.escaped.append((c, kind, v.verdict, v.reasons[:3]))
        except Exception as e:  # noqa: BLE001 — what the campaign counts
            st.tracebacks.append((c, kind, f"{type(e).__name__}: {e}"[:200]))
        dt = time.perf_counter() - t_case
        st.max_seconds = max(st.max_seconds, dt)
        st.slow_over_10s += dt > 10
        if on_case:
            on_case(c)
    shutil.rmtree(workdir / "case", ignore_errors=True)
    st.seconds = time.perf_counter() - t0
    from .fuzz import peak_rss_mib

    st.peak_rss_mib = peak_rss_mib()
    return st


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=110)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        st = run_campaign(a.cases, a.seed, a.workdir or Path(tmp))
    print(
        json.dumps(
            {
                "cases": st.cases,
                "seed": a.seed,
                "skipped": st.skipped,
                "by_kind": st.by_kind,
                "escaped": st.escaped[:20],
                "n_escaped": len(st.escaped),
                "framed": st.framed[:20],
                "n_framed": len(st.framed),
                "tracebacks": st.tracebacks[:10],
                "n_tracebacks": len(st.tracebacks),
                "seconds": round(st.seconds, 1),
                "max_seconds": round(st.max_seconds, 3),
                "slow_over_10s": st.slow_over_10s,
                "peak_rss_mib": round(st.peak_rss_mib),
            },
            indent=1,
            default=str,
        )
    )
    return 0 if not (st.escaped or st.framed or st.tracebacks or st.slow_over_10s) else 1


if __name__ == "__main__":
    raise SystemExit(main())
