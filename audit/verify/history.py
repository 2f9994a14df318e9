"""§8.10 ``history`` (spec/protocol.md §3.1): a bundle whose window continues a history holds its predecessor's
bundle under ``previous/`` (recursively). ``verify`` runs every check on each window, oldest first, each starting
from what the one before ended with (the counters and the per-document spend it replayed); this module walks the
windows, routes each account's receipts to the window they name, and checks what binds the windows into one
history:

- the first window has no chain, epoch 0, no ``prev``, no ``C_carry``; each later one names the chain (the first
  genesis's hash), the next epoch, and ``prev`` = its predecessor's head just before the close;
- every window but the last ends with exactly one ``close`` record naming its successor's genesis hash (leaves after
  a close FAIL in §8.7); the last may be open or closed (a successor not handed over);
- what a window carries in (``auditor/carry.json``, opened against ``C_carry``) equals what its predecessor ended
  with: every account's last counter and every document's spend — a reset of spend or a counter FAILs;
- documents only join: each window's ids, text hashes and index rows start with its predecessor's;
- the chain constants hold (``audit.protocol.chain.chain_violations``) and the embedder is the same model;
- with ``--key``, the pinned key is one of the history's keys; with ``--chain``, the chain id is the pinned one;
- a receipt validly signed under one of the history's keys for a window not in the history is equivocation (FAIL),
  unless the head's key signed it: a window after the audited head (the head closed after the bundle was cut, or
  its successor was not handed over), which this bundle cannot check — the verdict is INCOMPLETE, never PASS and
  never a FAIL of an honest provider audited mid-window.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np

from ..protocol import commitments as cm
from ..protocol.bundle import AuditorInputError, Bundle, load_bundle
from ..protocol.chain import chain_id, chain_violations, embedder_violations, genesis_hash
from ..protocol.encoding import decode_content, excerpt
from ..protocol.ledger import NoteVerifier
from ..protocol.receipts import verify_receipt
from .inputs import AuditorInputs, check_version
from .run import Run, guarded
from .verdict import key_fingerprint


class History:
    """The windows of a bundle, oldest first, and what passes from one to the next."""

    def __init__(self, head: Bundle, progress: Callable[[str, int], None] | None):
        chain: list[Bundle] = []
        b: Bundle | None = head
        while b is not None:
            check_version(b)
            chain.append(b)
            b = b.previous
        self.bundles = chain[::-1]
        self.progress = progress
        self.summaries: list[dict[str, Any]] = []  # per window, after its checks: what the history check compares
        self.last: Run | None = None
        self.receipt_lines: dict[int, list[tuple[int, bytes]]] = {}  # window index -> its receipts
        self.reasons: list[str] = []
        self.newer = 0
        self.refusal_lines = 0  # lines of the receipts file that are signed refusals (counted apart from receipts)
        self.sampled: list[tuple[int, int]] = []  # sampled mode: (s, N) of each window's sample
        self.incomplete: list[str] = []  # the earlier windows' INCOMPLETE causes, naming their windows
        self.earlier_checked: Counter[str] = Counter()  # the earlier windows' counts, added to the head's (§8.10)
        self.receipts_file_empty = False
        self.coalition_inputs: list[tuple[np.ndarray, list[str], list[int]]] = []
        self.offset = 0  # global ledger position of the current window's leaf 0 (coalition positions)

    @property
    def single(self) -> bool:
        return len(self.bundles) == 1

    def windows(self, given: AuditorInputs) -> Iterator[Run]:
        """Each window's Run in order, with the carry and the receipts routed to it (``given.receipts`` holds,
        during a window's checks, the lines naming that window)."""
        data, given.receipts = given.receipts, None
        self.receipts_file_empty = data is not None and not data.strip()
        if data is not None:
            self._route(data)
        for k, b in enumerate(self.bundles):
            run = Run(b, self.progress)
            run.history = self
            if data is not None:
                # the window's (line number, line) pairs: read_receipts takes them as well as the file's bytes
                given.receipts = cast(Any, self.receipt_lines.get(k, []))
            if self.coalition_inputs:
                run.coalition_prefix = _concat(self.coalition_inputs)
            self.last = run
            yield run
            self._leave(k, run)

    def is_last(self, run: Run) -> bool:
        return run is self.last and run.b is self.bundles[-1]

    def _route(self, data: bytes) -> None:
        """Each receipt line to the window it names (by its genesis window id); a line naming no window of the
        history, or unreadable, goes to the last window (where it is rejected evidence), unless it is signed by one
        of the history's keys: then it is equivocation, or newer than the head (module docstring)."""
        windows: dict[str, int] = {}
        keys: list[tuple[int, NoteVerifier]] = []
        for k, b in enumerate(self.bundles):
            try:
                g: Any = decode_content(b.leaves[0], what="genesis") if b.leaves else None
                windows[str(g["window"])] = k
                keys.append((k, NoteVerifier.from_vkey(g["provider_key"])))
            except Exception:  # noqa: BLE001 - a malformed genesis FAILs in its window's own checks
                continue
        head = len(self.bundles) - 1
        head_closed = _closed(self.bundles[head])
        lines = data.split(b"\n")
        while lines and not lines[-1].strip():
            lines.pop()
        for k, line in enumerate(lines):
            try:
                obj = decode_content(line, what="receipt line")
                if isinstance(obj, dict) and "refusal" in obj and "receipt" not in obj:
                    self.refusal_lines += 1
                rc = obj.get("receipt", obj.get("refusal", obj)) if isinstance(obj, dict) else obj
                name = rc.get("window") if isinstance(rc, dict) else None
                name = name if isinstance(name, str) else None  # a malformed window: rejected by its window
            except Exception:  # noqa: BLE001 - unreadable: rejected evidence in the head window
                rc, name = None, None
            if name in windows:
                self.receipt_lines.setdefault(windows[name], []).append((k, line))
                continue
            signer = next((w for w, key in keys if _signed_by(rc if name else None, key)), None)
            if signer is None:
                self.receipt_lines.setdefault(head, []).append((k, line))
            elif signer == head:  # a window after the audited head: not checkable here (INCOMPLETE)
                self.newer += 1
                where = "its successor, not handed over" if head_closed else "the head closed after this bundle was cut"
                self.incomplete.append(
                    f"receipt {k} names window {excerpt(name)}, after the audited head ({where}): fetch a later bundle"
                )
            else:
                self.reasons.append(
                    f"receipts: receipt {k}: validly signed by the history's key for window {excerpt(name)}, which is "
                    "neither in the audited history nor newer than its head (equivocation)"
                )

    def _leave(self, k: int, run: Run) -> None:
        g = run.genesis or {}
        self.summaries.append(
            {
                "genesis_bytes": run.b.leaves[0] if run.b.leaves else b"",
                "genesis": g,
                # name -> (tenant, current key, revoked) as the window's registry leaves left it (§3.2)
                "registry": _final_registry(run, g),
                "policy": run.policy,
                # every epoch's policy, oldest first (§3.4): certified quantities are taken over all of them
                "policies": [ep.policy for ep in run.epochs if ep.policy is not None] if run.policy is not None else [],
                "embedder": _embedder(run),
                "n": run.n,
                "root_before_close": run.prefix_roots.get(run.n - 1),
                "root": run.prefix_roots.get(run.n),
                "last_leaf": _last_leaf(run),
                "carry": run.carry,
                "final": {"counters": run.final_counters, "spend": run.final_spend},
                "tenants": {t: {"ids": v["ids"], "q": v["q"]} for t, v in run.tenants.items()},
                "text_sha256": _text_hashes(run),
            }
        )
        if not self.is_last(run):
            self.earlier_checked.update({k: v for k, v in run.checked.items() if k not in WINDOW_WIDE})
            self.reasons += [_in_window(r, g.get("window")) for r in run.reasons]
            self.incomplete += [f"window {excerpt(g.get('window'))}: {r}" for r in run.incomplete]
            self.offset += run.n
            got = _window_coalition_inputs(run, self.offset - run.n)
            if got is not None:
                self.coalition_inputs.append(got)


#: counts that describe the whole history already in the head window (the coalition estimate runs over the whole
#: history; every document of the history is in the head's budget), so the earlier windows' are not added
WINDOW_WIDE = frozenset(
    {
        "coalition",
        "coalition_estimate",
        "coalition_window",
        "coalition_window_covers_history",
        "documents_within_budget",
    }
)


@guarded("history")
def check_8_10_history(
    run: Run, history: History, given: AuditorInputs, pinned_chain: str | None, window: str | None = None
) -> None:
    """§8.10 history (module docstring): the windows bind into one history. Its reasons go to ``run`` (the last
    window's), with the earlier windows' own reasons, each naming its window."""
    run.reasons[:0] = history.reasons
    run.incomplete[:0] = history.incomplete
    run.checked.update(history.earlier_checked)  # what was checked counts over the whole history
    run.checked["history_windows"] = len(history.bundles)
    if history.newer or history.receipt_lines or history.receipts_file_empty:
        run.checked["receipts_handed_in"] = (
            sum(len(v) for v in history.receipt_lines.values())
            + history.newer
            + sum(1 for r in history.reasons if r.startswith("receipts:"))
            - history.refusal_lines
        )
        if history.refusal_lines:
            run.checked["refusals_handed_in"] = history.refusal_lines
    if history.newer:
        run.checked["receipts_newer_than_bundle"] = run.checked.get("receipts_newer_than_bundle", 0) + history.newer
    s = history.summaries
    first = s[0]["genesis_bytes"]
    cid = chain_id(first) if first else None
    epoch = s[-1]["genesis"].get("epoch")
    windows = [w if isinstance(w, str) else None for w in (x["genesis"].get("window") for x in s)]
    vkeys = [x["genesis"].get("provider_key") for x in s]
    if run.keys is not None:  # the head window's key after its own rotations (§3.3)
        vkeys[-1] = run.keys.current.vkey()
    run.history_info = {  # typed as the verdict's schema says: a malformed genesis' values are not copied out
        "chain": cid,
        "windows": windows,
        "epoch": epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None,
        "chain_pinned": False,
        "window_pinned": window is not None,
        "keys": [key_fingerprint(k) if isinstance(k, str) else None for k in vkeys],
    }
    if run.keys is not None and run.keys.rotations():
        run.history_info["key_rotations"] = [
            {"pos": pos, "key": key_fingerprint(new.vkey())} for pos, _, new in run.keys.rotations()
        ]
    if given.pinned is not None:
        run.history_info["pinned_key"] = key_fingerprint(given.pinned)
        run.history_info["pinned_key_windows"] = [
            w
            for w, x, k in zip(windows, s, vkeys, strict=True)
            if given.pinned in (k, x["genesis"].get("provider_key"))
        ]
    _check_windows(run, s, windows)
    if window is not None and s[-1]["genesis"].get("window") != window:
        head = excerpt(s[-1]["genesis"].get("window"))
        run.fail("commitments", f"the bundle's head window is {head}, not the {excerpt(window)} the auditor expects")
    if pinned_chain is not None:
        if pinned_chain != cid:
            run.fail("commitments", f"the history's chain id {str(cid)[:16]} is not the pinned {pinned_chain[:16]}")
        run.history_info["chain_pinned"] = True
    if given.pinned is not None and not history.single:
        keys = [x["genesis"].get("provider_key") for x in s] + vkeys
        if given.pinned not in keys:
            run.fail("commitments", "the pinned provider key is the key of no window of the history")
    if history.single:
        return
    for a, b in zip(s, s[1:], strict=False):
        _check_link(run, a, b, cid)


def _check_windows(run: Run, s: list[dict[str, Any]], windows: list[str | None]) -> None:
    """Each window of a history has its own id (receipts are routed by it: a reused id sent the first window's
    receipts to the last), and a bundle whose oldest window is not epoch 0 lacks its start (``previous/`` dropped:
    the earlier windows' spend is not checked, and the chain id the genesis names is not the one computed here)."""
    seen: set[str] = set()
    for w in windows:
        if w is not None and w in seen:
            run.fail("history", f"window id {excerpt(w)} appears twice in the history (each window has its own id)")
        if w is not None:
            seen.add(w)
    first = s[0]["genesis"]
    if first.get("epoch") not in (0, None) or first.get("chain") is not None:
        run.fail(
            "history",
            f"the oldest window handed over, {excerpt(first.get('window'))}, is epoch "
            f"{_int_text(first.get('epoch'))} of a history whose earlier windows are missing (previous/ dropped): "
            "their spend cannot be checked",
        )


def _int_text(v: Any) -> str:
    return str(v) if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 1 << 53 else excerpt(v)


def _check_link(run: Run, a: dict[str, Any], b: dict[str, Any], cid: str | None) -> None:
    ga, gb = a["genesis"], b["genesis"]
    wa, wb = ga.get("window"), gb.get("window")
    where = f"window {excerpt(wb)} after {excerpt(wa)}"
    registry = {
        x.get("account"): (x.get("tenant"), x.get("key")) for x in (gb.get("accounts") or []) if isinstance(x, dict)
    }
    # accounts only join: a name keeps its tenant, and the key its own rotation leaves gave it (§3.2); a revoked
    # name never rejoins
    for name, (tenant, key, revoked) in a["registry"].items():
        if revoked and name in registry:
            run.fail("history", f"{where}: account {excerpt(name)} was revoked and rejoins (a revoked name never does)")
        elif not revoked and registry.get(name) != (tenant, key):
            run.fail(
                "history",
                f"{where}: account {excerpt(name)} is re-keyed, moved to another tenant or dropped "
                "(accounts only join: a name keeps its key and tenant)",
            )
    if gb.get("chain") != cid or gb.get("epoch") != (ga.get("epoch") or 0) + 1:
        run.fail("history", f"{where}: names another chain or epoch than its predecessor's")
    last = a["last_leaf"]
    closes = isinstance(last, dict) and last.get("type") == "close"
    if not (closes and last.get("next") == genesis_hash(b["genesis_bytes"])):
        run.fail("history", f"{where}: the predecessor does not end with a close record naming this genesis")
    prev = gb.get("prev") or {}
    root = a["root_before_close"]
    if prev.get("window") != wa or prev.get("size") != a["n"] - 1 or root is None or prev.get("root") != root.hex():
        run.fail("history", f"{where}: prev is not the predecessor's head before its close (a fork)")
    if a["policy"] is not None and b["policy"] is not None:
        bad = chain_violations(a["policy"], b["policy"])
        if bad:
            run.fail("history", f"{where}: the policy changes what a history keeps constant: {'; '.join(bad)}")
    if a["embedder"] is not None and b["embedder"] is not None:
        bad = embedder_violations(a["embedder"], b["embedder"])
        if bad:
            run.fail("history", f"{where}: the embedder changes: {'; '.join(bad)}")
    if b["carry"] != a["final"]:
        run.fail(
            "history",
            f"{where}: what carries in (C_carry) is not what the predecessor ended with: the counters or the "
            "per-document spend were reset or altered",
        )
    for t, old in a["tenants"].items():
        new = b["tenants"].get(t)
        n = len(old["ids"])
        if (
            new is None
            or new["ids"][:n] != old["ids"]
            or new["q"].shape[0] < n
            or not np.array_equal(new["q"][:n], old["q"])
            or b["text_sha256"].get(t, [])[:n] != a["text_sha256"].get(t)
        ):
            run.fail("history", f"{where}: tenant {excerpt(t)}: its documents do not start with the predecessor's")


# ----------------------------------------------------------------------------------------------------------------
def _concat(parts: list[tuple[np.ndarray, list[str], list[int]]]) -> tuple[np.ndarray, list[str], list[int]]:
    return np.concatenate([p[0] for p in parts]), [a for p in parts for a in p[1]], [x for p in parts for x in p[2]]


def _window_coalition_inputs(run: Run, offset: int) -> tuple[np.ndarray, list[str], list[int]] | None:
    from .coalition import coalition_inputs

    try:
        got = coalition_inputs(run, with_prefix=False)
    except Exception:  # noqa: BLE001 - that window's own check reported it
        return None
    if got is None:
        return None
    embs, accts, poss = got
    return embs, accts, [offset + p for p in poss]


def _signed_by(rc: Any, key: NoteVerifier) -> bool:
    if not isinstance(rc, dict):
        return False
    try:
        verify_receipt(rc, key)
        return True
    except Exception:  # noqa: BLE001 - not this key's
        return False


def _closed(b: Bundle) -> bool:
    try:
        return len(b.leaves) > 1 and decode_content(b.leaves[-1]).get("type") == "close"
    except Exception:  # noqa: BLE001
        return False


def _final_registry(run: Run, g: dict[str, Any]) -> dict[Any, tuple[Any, Any, bool]]:
    if run.registry is not None:
        return {a: (e.tenant, e.key, e.revoked is not None) for a, e in run.registry.entries.items()}
    return {
        x.get("account"): (x.get("tenant"), x.get("key"), False) for x in g.get("accounts") or [] if isinstance(x, dict)
    }


def _last_leaf(run: Run) -> Any:
    try:
        return decode_content(run.b.leaves[-1]) if run.n > 1 else None
    except Exception:  # noqa: BLE001
        return None


def _embedder(run: Run) -> Any:
    try:
        return cm.descriptor_of(decode_content(run.b.embedder_bytes)) if run.b.embedder_bytes is not None else None
    except Exception:  # noqa: BLE001
        return None


def _text_hashes(run: Run) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for t, data in run.b.docs_files.items():
        try:
            out[t] = list(decode_content(data)["text_sha256"])
        except Exception:  # noqa: BLE001
            continue
    return out


def _in_window(reason: str, window: Any) -> str:
    check, _, what = reason.partition(": ")
    return f"{check}: window {excerpt(window)}: {what}"


def read_history(
    bundle_path: str | Path, progress: Callable[[str, int], None] | None, max_read: int | None = None
) -> History:
    """The bundle at ``bundle_path`` with every earlier window of its history (``previous/``), reading at most
    ``max_read`` bytes in all (the auditor's cap; None: ``bundle.DEFAULT_MAX_READ``, beside the per-file caps)."""
    if max_read is not None and (isinstance(max_read, bool) or not isinstance(max_read, int) or max_read < 1):
        raise AuditorInputError(f"--max-read must be a positive number of bytes, got {max_read!r}")
    return History(load_bundle(bundle_path, max_read), progress)
