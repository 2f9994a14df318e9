"""§8.6 ``receipts`` (spec/protocol.md): the receipts accounts hand over (``--receipts``, never the provider's
bundle). A line that is malformed, not signed by the window's provider key, for another window, a duplicate, or
whose citations / request / question do not open the signed hashes is rejected evidence, never a FAIL; a valid
receipt FAILs the bundle if the ledger contradicts it (truncation, a fork, another leaf, two releases)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from functools import partial
from typing import Any, cast

import numpy as np

from ..protocol.encoding import EncodingError, decode_content, excerpt
from ..protocol.ledger import NoteVerifier
from ..protocol.ledger.proof import ConsistencyProof, verify_consistency
from ..protocol.receipts import verify_refusal
from ..protocol.request import request_hash
from .inputs import AuditorInputs
from .pool import Lazy, fork_map, trim, workers
from .receipt_lines import OTHER_LOG, Chunk, ReceiptCtx, ReceiptTable, parse_chunk
from .run import Run, SeenReceipts, guarded, is_int


class Evidence:
    """The receipts file's valid receipts of this window (``table``: a ``receipt_lines.ReceiptTable``); ``given``:
    a receipts file was given; ``empty``: it holds no receipt."""

    def __init__(self, table: ReceiptTable, given: bool, empty: bool):
        self.table, self.given, self.empty = table, given, empty

    def sizes(self) -> set[int]:
        """The ledger sizes the valid receipts and refusals were signed at (§8.5 computes the roots of those
        prefixes)."""
        return self.table.sizes() | self.refusal_sizes

    @property
    def valid(self) -> list[tuple[int, dict[str, Any], Any, str | None]]:
        """(line, body, citations, question) of the valid receipts that carry their question, kept for the answer
        replay (§8.9)."""
        return [(k, body, top, q) for k, (body, top, q) in sorted(self.table.kept.items())]

    #: the sizes the valid signed refusals name (set by ``read_receipts``)
    refusal_sizes: set[int] = set()


def read_receipts(run: Run, given: AuditorInputs, keep: bool = False) -> Evidence:
    """§8.6's input, parsed before §8.5 (which needs the sizes the receipts name): the receipts files' spooled
    lines, parsed in the worker pool into a compact table (``receipt_lines``); the spool is closed once parsed.
    ``keep``: keep the bodies of the receipts that carry their question (the answer replay, §8.9)."""
    lines, given.receipts = given.receipts, None
    if lines is None:
        return Evidence(ReceiptTable.empty(), given=False, empty=False)
    try:
        empty = all(not ln.strip() for ln in lines)  # stops at the first line that is not blank
        evidence = Evidence(parse_receipts(run, lines, keep) or ReceiptTable.empty(), given=True, empty=empty)
    finally:
        lines.close()
    evidence.refusal_sizes = {body["size"] for _, body, _ in run.refusals}
    return evidence


#: receipt lines per chunk of the parse map, at most (each chunk's lines are read back from the spool as it is
#: sent), and at least
PARSE_CHUNK, PARSE_CHUNK_MIN = 2048, 64


@guarded("receipts")
def parse_receipts(run: Run, lines: Sequence[bytes], keep: bool = False) -> ReceiptTable:
    """Valid provider-signed receipts of this log; everything else is rejected evidence, never a FAIL. ``lines``:
    the receipts files' non-empty lines (``SpooledLines``: ``numbers`` are their line numbers; a list: numbered
    from 0). Rotation and refusal lines are taken first; each other line is parsed in the workers, a chunk at a
    time (``receipt_lines.parse_chunk``); a repeated line, and a repeated signed body, is rejected evidence naming
    the first."""
    numbers = getattr(lines, "numbers", None)
    number = (lambda i: int(numbers[i])) if numbers is not None else (lambda i: i)
    special = _special_lines(lines)
    numbered = [(number(i), lines[i]) for i in special]
    numbered = _take_rotations(run, numbered)
    numbered = _take_refusals(run, numbered)
    back = {k for k, _ in numbered}  # lines that name a rotation or refusal but are read as receipts
    todo = (
        np.asarray(
            sorted(set(range(len(lines))) - set(special) | {i for i in special if number(i) in back}), dtype=np.int64
        )
        if special
        else np.arange(len(lines), dtype=np.int64)
    )
    run.checked["receipts_handed_in"] = int(todo.size)

    size = max(PARSE_CHUNK_MIN, min(PARSE_CHUNK, -(-int(todo.size) // (4 * workers()))))  # 4 chunks per worker

    def item(c: int) -> tuple[list[int], list[bytes]]:
        idx = todo[c * size : (c + 1) * size]
        lo, hi = int(idx[0]), int(idx[-1]) + 1
        span = lines[lo:hi]
        return [number(int(i)) for i in idx], [span[int(i) - lo] for i in idx]

    n_chunks = -(-int(todo.size) // size)
    task = partial(parse_chunk, ReceiptCtx(run, keep))
    chunks = cast("list[Chunk]", fork_map(task, Lazy(n_chunks, item), chunk=1, min_items=2))
    return _join(run, chunks)


def _special_lines(lines: Sequence[bytes]) -> list[int]:
    """The indices of the lines that may be rotation or refusal lines (their bytes name one), found a block of
    lines at a time."""
    out: list[int] = []
    step = 4096
    for a in range(0, len(lines), step):
        block = lines[a : a + step]
        if any(b'"rotation"' in ln or b'"refusal"' in ln for ln in block):
            out += [a + j for j, ln in enumerate(block) if b'"rotation"' in ln or b'"refusal"' in ln]
    return out


def _join(run: Run, chunks: list[Chunk]) -> ReceiptTable:
    """The chunks' outcomes in line order: repeated lines rejected (naming the first), then each line's FAIL
    (signed for another log) or rejection, and a repeated signed body rejected (naming the first)."""
    if not chunks:
        run.progress("receipts", 0)
        return ReceiptTable.empty()
    ks = np.concatenate([c.k for c in chunks])
    dig = np.ascontiguousarray(np.concatenate([c.line_digest for c in chunks])).view("V32").ravel()
    _, first_idx, inverse = np.unique(dig, return_index=True, return_inverse=True)
    first_of = first_idx[inverse.ravel()]
    dup = first_of != np.arange(ks.size)
    for j in np.flatnonzero(dup):
        run.rejected.append(f"receipt {int(ks[j])}: duplicates receipt {int(ks[first_of[j]])}")
    status = np.concatenate([c.status for c in chunks])
    messages: dict[int, str] = {}
    for c in chunks:
        messages.update(c.messages)
    dup_ks = set(ks[dup].tolist())
    valid_line = (status == 0) & ~dup  # the valid rows, in line order, are the chunks' rows in order
    keep_row = valid_line[status == 0]
    rows, names = ReceiptTable.join(chunks, keep_row)
    # a repeated signed body (the same receipt, reformatted): the first is the evidence
    bdig = np.ascontiguousarray(rows["digest"]).view("V32").ravel()
    _, b_first, b_inv = np.unique(bdig, return_index=True, return_inverse=True)
    b_first_of = b_first[b_inv.ravel()]
    same = b_first_of != np.arange(rows.size)
    later: dict[int, str] = {
        int(rows["k"][j]): f"the same signed receipt as receipt {int(rows['k'][b_first_of[j]])}"
        for j in np.flatnonzero(same)
    }
    for j in np.flatnonzero((status != 0) & ~dup):
        later[int(ks[j])] = messages[int(ks[j])]
    for k in sorted(later):
        msg = later[k]
        if k in messages and status[np.searchsorted(ks, k)] == OTHER_LOG:
            run.fail("receipts", f"receipt {k}: {msg}")
        else:
            run.rejected.append(f"receipt {k}: {msg}")
    kept = {k: v for c in chunks for k, v in c.kept.items() if k not in dup_ks}
    run.progress("receipts", int(ks.size))
    return ReceiptTable(rows[~same], names, {k: v for k, v in kept.items() if k not in later})


def _take_rotations(run: Run, numbered: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """The provider key rotations beyond the bundle that the accounts followed and hand in (``{"rotation": proof}``
    lines, ``AccountClient.export_receipts``; spec/protocol.md §3.3): each, in log order, must follow from the key
    before it (``provider_keys.follow``: the leaf's inclusion under the dual-signed checkpoint); the receipts and
    refusals beyond the bundle signed by the keys they name are then checked (§8.6: with a consistency proof, else
    INCOMPLETE). One that does not follow is rejected evidence. Returns the other lines."""
    from ..protocol.provider_keys import follow

    proofs: list[tuple[str, dict[str, Any]]] = []  # (where the line came from, its proof)
    lines: list[tuple[str, bytes, int | None]] = [(f"receipt {k}", ln, k) for k, ln in numbered if b'"rotation"' in ln]
    rest = [(k, ln) for k, ln in numbered if b'"rotation"' not in ln]
    # the auditor's fetch: GET /v1/keys (§3.3)
    lines += [(f"auditor/rotations.jsonl line {j}", line, None) for j, line in enumerate(run.b.rotation_lines)]
    for where, line, k in lines:
        try:
            proof = _rotation_of(line)
        except EncodingError as e:
            run.rejected.append(f"{where}: {e}")
            continue
        if proof is not None:
            proofs.append((where, proof))
        elif k is not None:
            rest.append((k, line))  # a receipt or refusal that mentions "rotation": read as one
        else:
            run.rejected.append(f'{where}: not a {{"rotation": proof}} line')
    rest.sort()
    if not proofs or run.keys is None or run.genesis is None:
        return rest
    keys = copy.deepcopy(run.keys)
    origin = run.origin
    for pos, where, proof in sorted(((_rotation_pos(p), w, p) for w, p in proofs), key=lambda t: (t[0], t[1])):
        if pos < run.n or pos <= keys.eras[-1][0]:
            continue  # inside the bundle (its own key leaves rule there), or one already followed
        try:
            keys.eras.append(follow(keys.current, origin, proof))
            run.ok("rotations_followed")
        except EncodingError as e:
            run.rejected.append(f"{where}: a key rotation that does not follow from the log's key ({e})")
    run.receipt_keys = keys
    return rest


def _rotation_of(line: bytes) -> dict[str, Any] | None:
    """The proof of a ``{"rotation": proof}`` line, None for any other line; EncodingError if it does not decode."""
    obj = decode_content(line, what="rotation line")
    if isinstance(obj, dict) and set(obj) == {"rotation"} and isinstance(obj["rotation"], dict):
        return cast("dict[str, Any]", obj["rotation"])
    return None


def _rotation_pos(proof: dict[str, Any]) -> int:
    """The position a rotation proof names (-1 if it names none: it is then never followed)."""
    pos = proof.get("pos")
    return pos if isinstance(pos, int) and not isinstance(pos, bool) and pos >= 0 else -1


def _refusal_under(refusal: Any, key: NoteVerifier) -> dict[str, Any]:
    return verify_refusal(refusal, key)


def _take_refusals(run: Run, numbered: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """The account's signed refusals (``{"refusal": ..., "request"?: ...}`` lines, spec/protocol.md §5.1) go to
    ``run.refusals`` (line, body, the account's request or None) when valid for this window; an invalid one is
    rejected evidence. Returns the other lines."""
    rest: list[tuple[int, bytes]] = []
    for k, line in numbered:
        if b'"refusal"' not in line:
            rest.append((k, line))
            continue
        try:
            obj = decode_content(line, what="refusal line")
            if not isinstance(obj, dict) or "refusal" not in obj or set(obj) - {"refusal", "request"}:
                rest.append((k, line))
                continue
            if run.keys is None or run.genesis is None:
                raise EncodingError("no provider key to check it against")
            rf = obj["refusal"]
            size = rf.get("size") if isinstance(rf, dict) else None
            body = (run.receipt_keys or run.keys).verifying(size, partial(_refusal_under, rf), "refusal")
            if body["origin"] != run.origin:
                run.fail(
                    "receipts",
                    f"receipt {k}: a refusal validly signed by this log's key for another log, "
                    f"{excerpt(body['origin'])} (each provider key signs for one log: equivocation)",
                )
                continue
            req = obj.get("request")
            if req is not None and (not isinstance(req, dict) or request_hash(req).hex() != body["h_req"]):
                raise EncodingError("the request the account supplied is not the one the refusal names")
            run.refusals.append((k, body, req))
        except EncodingError as e:
            run.rejected.append(f"receipt {k}: {e}")
    return rest


def _requests_by_account(run: Run) -> dict[str, list[tuple[int, int, str]]]:
    """Every recorded request as (pos, counter, h_req) per account, in ledger order: the openings are parsed once
    for all the refusals handed in, not once per refusal."""
    out: dict[str, list[tuple[int, int, str]]] = {}
    st = run.prior
    if st is not None:  # the requests earlier runs verified (§8.14)
        for pos, a, c, h in zip(st.req_pos, st.req_account, st.req_counter, st.req_hreq, strict=True):
            out.setdefault(st.accounts[int(a)], []).append((int(pos), int(c), bytes(h).hex()))
    for pos in range(max(1, run.base), run.n):
        op = run.openings.get(pos)
        req = op.get("request") if isinstance(op, dict) else None
        if isinstance(req, dict) and isinstance(req.get("account"), str) and is_int(req.get("counter"), 1):
            rec = run.records[pos]
            h = rec.get("h_req", "") if isinstance(rec, dict) else ""
            out.setdefault(req["account"], []).append((pos, req["counter"], h))
    return out


def _counters_below(recorded: list[tuple[int, int, str]], size: int) -> dict[int, str]:
    """The account's recorded counters in the leaves below ``size``: counter -> h_req."""
    return {c: h for pos, c, h in recorded if pos < size}


def _refusal_rule_is_false(run: Run, body: dict[str, Any], req: dict[str, Any], below: dict[int, str]) -> str | None:
    """Why the refusal's rule is false of the log at its size (None: it holds, or it is a rule of the request
    alone). ``below``: the account's recorded counters below that size."""
    code, size, raw = body["code"], body["size"], req.get("counter")
    if code == "revoked":
        name = req.get("account")
        entry = run.registry.get(name) if run.registry is not None and isinstance(name, str) else None
        if entry is None or entry.revoked is None or entry.revoked >= size:
            return f"it refused the request as of a revoked account, which no leaf below size {size} revoked"
        return None
    if not is_int(raw, 1):
        return None  # the request's shape is a rule of the request alone
    counter = cast(int, raw)
    last = max([0, *below])
    if code == "counter" and counter == last + 1:
        return f"it refused counter {counter} as not the account's next, which it was at size {size}"
    if code == "counter-used" and (below.get(counter) in (None, body["h_req"])):
        return f"it refused counter {counter} as used by another request, which no leaf below size {size} is"
    if code == "rate" and run.policy is not None and counter <= run.policy.retrieval.n:
        return f"it refused counter {counter} as over the policy's n = {run.policy.retrieval.n}, which it is not"
    return None


def _void_is_false(run: Run, body: dict[str, Any], pos: int | None, answered: set[str]) -> str | None:
    """Why a ``void`` (spec/protocol.md §5.1: recorded, never to be answered, its counter consumed) is false of the
    log at its size (None: it holds): the request is not held below that size, no ``account-key`` or
    ``account-revoke`` leaf of its account lies between its leaf and that size (the provider could still answer it:
    a charged request skipped), or a receipt of the same request was handed in (answered and voided)."""
    size = body["size"]
    if pos is None or pos >= size:
        return (
            f"it voided a request its log did not hold below size {size} (a void says the counter was consumed by "
            "the request's leaf)"
        )
    if body["h_req"] in answered:
        return f"it voided the request at leaf {pos}, which a receipt of its own answers (answered and voided)"
    row = request_row(run, pos)
    entry = run.registry.get(row[2]) if row is not None and run.registry is not None else None
    rekeyed = entry is not None and any(pos < at < size for at, _ in entry.keys[1:])
    revoked = entry is not None and entry.revoked is not None and pos < entry.revoked < size
    if not (rekeyed or revoked):
        return (
            f"it voided the request at leaf {pos} although no account-key or account-revoke leaf of its account "
            f"lies between it and size {size} (the provider could answer it: a charged request skipped)"
        )
    return None


@guarded("receipts")
def _check_refusals(run: Run, answered: set[str] | None = None) -> None:
    """§8.6, the signed refusals the accounts handed in: each FAILs only if the log contradicts it at the size it
    names — the same request sits below that size, its root is not the ledger's there, or (with the account's
    request) its rule is false of the log at that size. A refusal of a request the log holds at or above that size
    is an honest history (the account resent a refused request later: it cannot frame the provider). A void is the
    converse (``_void_is_false``): it names a request held below its size. ``answered``: the h_req of every receipt
    handed in (a void beside one FAILs)."""
    if not run.refusals:
        return
    pos_of: dict[str, int] = {}
    if run.prior is not None:
        for p, h in zip(run.prior.req_pos, run.prior.req_hreq, strict=True):
            pos_of.setdefault(bytes(h).hex(), int(p))
    for i, rec in enumerate(run.records):
        h = rec.get("h_req") if i and isinstance(rec, dict) else None
        if isinstance(h, str):
            pos_of.setdefault(h, i)
    by_account: dict[str, list[tuple[int, int, str]]] | None = None  # parsed at the first refusal with a request
    for k, body, req in run.refusals:
        size = body["size"]
        if size > run.n:
            run.checked["refusals_newer_than_bundle"] += 1
            continue
        if run.prefix_roots.get(size) != bytes.fromhex(body["root"]):
            run.fail(
                "receipts", f"receipt {k}: a signed refusal's root is not the ledger's root at size {size} (a fork)"
            )
            continue
        pos = pos_of.get(body["h_req"])
        if body["code"] == "void":
            why = _void_is_false(run, body, pos, answered or set())
            if why is not None:
                run.fail("receipts", f"receipt {k}: a signed void is false of the log: {why}")
            else:
                run.ok("refusals")
                run.checked["voids"] += 1
            continue
        if pos is not None and pos < size:
            run.fail(
                "receipts",
                f"receipt {k}: the provider signed a refusal at size {size} of the request its log held at leaf {pos} "
                "(a refusal says the counter was not consumed)",
            )
            continue
        if isinstance(req, dict) and isinstance(req.get("account"), str):
            if by_account is None:
                by_account = _requests_by_account(run)
            below = _counters_below(by_account.get(req["account"], []), size)
            why = _refusal_rule_is_false(run, body, req, below)
            if why is not None:
                run.fail("receipts", f"receipt {k}: a signed refusal's rule is false of the log: {why}")
                continue
        run.ok("refusals")


@guarded("receipts")
def check_8_6_receipts(run: Run, evidence: Evidence) -> None:
    """§8.6: every valid receipt against the ledger; the table's rows are dropped here (the answer replay, §8.9,
    reads only the kept bodies)."""
    if not evidence.given:
        return
    if evidence.empty:
        run.rejected.append("the receipts file holds no receipt")
    table = evidence.table
    if any(body["code"] == "void" for _, body, _ in run.refusals):  # a void beside a receipt of its request FAILs
        answered = table.h_reqs()
        if run.prior is not None:  # the receipts earlier runs accepted, by their leaf's request (§8.14)
            answered |= {bytes(run.prior.req_hreq[int(k)]).hex() for k in _prior_receipt_rows(run)}
        _check_refusals(run, answered)
    else:
        _check_refusals(run)
    _against_the_ledger(run, table)
    table.drop_rows()
    keep = run.prefix_roots.get(run.n)  # the roots of the receipts' sizes are read; the verdict names the whole log's
    run.prefix_roots = {} if keep is None else {run.n: keep}
    trim()  # the receipts' parse and rows are gone


def _prior_receipt_rows(run: Run) -> list[int]:
    """The rows of the state's request arrays (``req_pos``) whose leaf an earlier run accepted a receipt for."""
    st = run.prior
    if st is None:
        return []
    ks = np.searchsorted(st.req_pos, st.rc_pos)
    return [int(k) for k, p in zip(ks, st.rc_pos, strict=True) if k < st.req_pos.size and st.req_pos[k] == p]


def _consistency_proofs(run: Run) -> dict[tuple[int, int], tuple[bytes, ...]]:
    """auditor/consistency.jsonl (what ``dprag audit fetch --receipts`` collected): (size1, size2) -> hashes. A
    malformed line is skipped: a receipt it was meant for stays unproven (INCOMPLETE), never a FAIL."""
    out: dict[tuple[int, int], tuple[bytes, ...]] = {}
    for line in run.b.consistency_lines:
        try:
            p = ConsistencyProof.from_json_dict(decode_content(line, what="consistency proof"))
            out[(p.size1, p.size2)] = p.hashes
        except Exception:  # noqa: BLE001 - not a proof: it proves nothing
            continue
    return out


def _newer(run: Run, k: int, size: int, root: str, proofs: dict[tuple[int, int], tuple[bytes, ...]]) -> None:
    """A valid receipt signed at a size beyond the bundle's (§8.6), checked with a consistency proof from the
    bundle's size to its own (its root must extend the audited log); without a valid one the verdict is INCOMPLETE,
    naming both sizes — never PASS."""
    n = run.n
    if _proves(proofs.get((n, size)), n, size, run.prefix_roots.get(n), root):
        run.checked["receipts_newer_than_bundle"] += 1
        return
    run.incomplete.append(
        f"receipt {k} was signed at size {size}, beyond the bundle's size {n}, and no consistency proof from {n} to "
        f"{size} came with the bundle: fetch a later bundle, or the proof (dprag audit fetch --receipts FILE)"
    )


def _proves(hashes: tuple[bytes, ...] | None, n: int, size: int, root_n: bytes | None, root_hex: str) -> bool:
    """Whether ``hashes`` is a consistency proof from the bundle's root at ``n`` to the receipt's at ``size``; a
    proof that does not verify proves nothing (the caller's verdict is then INCOMPLETE, never a FAIL)."""
    if hashes is None or root_n is None:
        return False
    try:
        verify_consistency(n, size, list(hashes), root_n, bytes.fromhex(root_hex))
    except Exception:  # noqa: BLE001 - any defect of the proof: not a proof
        return False
    return True


@guarded("receipts")
def _against_the_ledger(run: Run, table: ReceiptTable) -> None:
    """Each valid receipt, in line order, against the ledger: its root, its leaf, the request and account the log
    holds there; one release per leaf and one leaf per (account, counter), against this run's earlier receipts
    and the state's (§8.14)."""
    n, rows, names = run.n, table.rows, table.names
    newer = rows["size"] > n
    proofs = _consistency_proofs(run) if newer.any() else {}
    st = run.prior
    prior_pos = st.rc_pos if st is not None else np.zeros(0, dtype=np.int64)  # sorted by position
    by_pos: dict[int, int] = {}  # pos -> this run's accepted row
    by_request: dict[tuple[str, int], int] = {}  # (account, counter) -> pos, this run's
    prior_request: dict[tuple[str, int], int] | None = None  # the state's, built at the first lookup
    roots: dict[int, bytes | None] = {}
    for j in range(rows.size):
        r = rows[j]
        k, pos, size = int(r["k"]), int(r["pos"]), int(r["size"])
        if newer[j]:
            _newer(run, k, size, r["root"].tobytes().hex(), proofs)
            continue
        if size not in roots:
            roots[size] = run.prefix_roots.get(size)
        if roots[size] != r["root"].tobytes():
            run.fail("receipts", f"receipt {k}: its signed root is not the ledger's root at size {size} (a fork)")
            continue
        if run.leaf_hash(pos) != r["leaf"].tobytes():
            run.fail("receipts", f"receipt {k}: the leaf at {pos} is not the one it was signed for")
            continue
        row = request_row(run, pos)
        if row is None or row[0] != r["h_req"].tobytes().hex() or row[1] != r["h_top"].tobytes().hex():
            run.fail("receipts", f"receipt {k}: contradicts the ledger record at {pos}")
            continue
        account, tenant, counter = names[int(r["account"])], names[int(r["tenant"])], int(r["counter"])
        acct = run.accounts.get(account)
        if row[2] != account or row[3] != counter or acct is None or acct["tenant"] != tenant:
            run.fail("receipts", f"receipt {k}: its account, tenant or counter contradicts the request opened at {pos}")
            continue
        dg = r["digest"].tobytes()
        if pos in by_pos:
            prev: tuple[int | None, bytes] | None = (int(rows["k"][by_pos[pos]]), rows["digest"][by_pos[pos]].tobytes())
        else:
            i = int(np.searchsorted(prior_pos, pos))
            prev = (
                (None, bytes(st.rc_digest[i]))
                if st is not None and i < prior_pos.size and prior_pos[i] == pos
                else None
            )
        if prev is not None and prev[1] != dg:
            first = "an earlier audit's receipt" if prev[0] is None else f"receipts {prev[0]}"
            run.fail("receipts", f"{first} and {k}: two different releases signed for one leaf ({pos})")
            continue
        key = (account, counter)
        if key not in by_request and st is not None:
            if prior_request is None:
                prior_request = {
                    (st.accounts[int(a)], int(c)): int(p)
                    for p, a, c in zip(st.rc_pos, st.rc_account, st.rc_counter, strict=True)
                }
            if key in prior_request:
                by_request[key] = prior_request[key]
        by_pos.setdefault(pos, j)  # (this run's receipts of one leaf differ: one signed body is one receipt)
        if key in by_request and by_request[key] != pos:
            run.fail("receipts", f"receipt {k}: one request counter released at two positions")
            continue
        by_request[key] = pos
        if r["top_bad"]:
            run.rejected.append(
                f"receipt {k}: the citations the account supplied do not match h_top "
                "(the account's claim, not the provider's signature)"
            )
        run.ok("receipts")
    run.receipts_seen = _seen(run, rows, names, by_pos)


def _seen(run: Run, rows: np.ndarray, names: list[str], by_pos: dict[int, int]) -> SeenReceipts:
    """The receipts accepted so far (§8.14): the state's, and this run's by leaf (the first accepted of a leaf)."""
    st = run.prior
    idx = np.asarray(sorted(by_pos.values()), dtype=np.int64)
    mine = rows[idx]
    pos, digest, counter = mine["pos"], mine["digest"].reshape(-1, 32), mine["counter"]
    account = [names[int(a)] for a in mine["account"]]
    if st is not None and st.rc_pos.size:
        fresh = ~np.isin(st.rc_pos, pos)
        pos = np.concatenate([st.rc_pos[fresh], pos])
        digest = np.concatenate([np.asarray(st.rc_digest, dtype=np.uint8)[fresh], digest])
        counter = np.concatenate([st.rc_counter[fresh], counter])
        account = [st.accounts[int(a)] for a in st.rc_account[fresh]] + account
    order = np.argsort(pos, kind="stable")
    run.checked["receipts_accepted"] = int(pos.size)
    return SeenReceipts(pos[order], digest[order], [account[int(i)] for i in order], counter[order])


def request_row(run: Run, pos: int) -> tuple[str, str, str, int] | None:
    """(h_req, h_top, account, counter) of the query leaf §8.7 accepted at ``pos``, or None: below ``run.base``
    from the state, else from the record and its opening (§8.14)."""
    st = run.prior
    if pos < run.base and st is not None:
        k = int(np.searchsorted(st.req_pos, pos))
        if k == st.req_pos.size or int(st.req_pos[k]) != pos:
            return None
        return (
            bytes(st.req_hreq[k]).hex(),
            bytes(st.req_htop[k]).hex(),
            st.accounts[int(st.req_account[k])],
            int(st.req_counter[k]),
        )
    rec = run.records[pos] if pos < len(run.records) else None
    if rec is None or rec.get("type") != "query":
        return None
    op = run.openings.get(pos)
    req = op.get("request") if isinstance(op, dict) else None
    if not isinstance(req, dict):
        return None
    got = (rec.get("h_req"), rec.get("h_top"), req.get("account"), req.get("counter"))
    return None if not all(isinstance(x, str) for x in got[:3]) or not is_int(got[3], 1) else cast("Any", got)
