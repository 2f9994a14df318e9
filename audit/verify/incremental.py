"""Incremental verification from the auditor's own state (spec/protocol.md §8.14).

``open_state`` reads and authenticates the state (or starts one), checking it is of this verifier and options;
``attach`` joins a bundle to it — a whole bundle, or one cut from a size at most the state's (``dprag audit fetch
--since``): the leaves the state verified must hash as it recorded (else the log forked under the auditor), and the
checks then replay only the leaves after it; ``merge`` adds the state's verdict so far to this run's (its reasons
are sticky, its per-leaf counts add up); ``carry`` makes the next state from the run. The verdict of a chain of
incremental runs equals that of one run over the whole log (tests/audit/verify/test_incremental.py)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dprag import __version__

from ..protocol.bundle import AuditorInputError
from ..protocol.chain import origin_of
from ..protocol.commitments import PROTOCOL_VERSION
from ..protocol.encoding import excerpt
from ..protocol.ledger.rfc6962 import CompactRange, hash_leaf
from .inputs import AuditorInputs
from .run import Run
from .state import AuditorState, StateError, empty_state, load_state, read_key, save_state

if TYPE_CHECKING:
    from .verdict import Verdict

#: what a state records of the verifier that made it: a state is read only by the same verifier
VERIFIER = f"dprag {__version__}; protocol {PROTOCOL_VERSION}; state 1"
#: counts that describe the bundle or the evidence of one run (the last run's stands), not leaves (which add up)
PER_RUN = frozenset(
    {
        "files",
        "commitments",
        "corpus",
        "policy",
        "documents_reembedded",
        "witness_cosignatures",
        "coalition",
        "coalition_window",
        "coalition_window_covers_history",
        "coalition_estimate",
        "documents_within_budget",
        "receipts_accepted",
        "receipts_newer_than_bundle",
        "refusals_newer_than_bundle",
        "rotations_followed",
        "trusted_checkpoint",
    }
)


@dataclass
class StateFile:
    """The auditor's ``--state`` file, its MAC key and the state read from it (None: a first run)."""

    path: Path
    key: bytes
    options: dict[str, Any]
    prior: AuditorState | None


#: verify()'s keyword arguments ``open_for`` reads
STATE_OPTIONS = (
    "state",
    "state_key",
    "state_hash",
    "mode",
    "theta",
    "coalition_window",
    "corpus",
    "replay_generator",
    "zk_vkey",
)


def open_for(
    *,
    state: str | Path | None,
    state_key: str | Path | None,
    state_hash: str | None,
    mode: str,
    theta: float,
    coalition_window: int | None,
    corpus: Any,
    replay_generator: object,
    zk_vkey: Any,
) -> StateFile | None:
    """``verify``'s ``state`` opened (``open_state``) with the options it is bound to; None without one."""
    if state is None:
        return None
    options = options_of(mode, theta, coalition_window, corpus, replay_generator is not None, zk_vkey)
    return open_state(state, state_key, state_hash, options)


def join(run: Run, sf: StateFile | None, given: AuditorInputs) -> Run:
    """The bundle joined to the state (``attach``), the state's pinned key pinned; a cut bundle without a state is
    the auditor's exit 2."""
    if sf is not None:
        given.pinned = pinned_key(sf, given.pinned)
        attach(run, sf)
    elif run.b.first:
        raise AuditorInputError(f"the bundle holds the log from size {run.b.first} on: verify it with --state")
    return run


def options_of(mode: str, theta: float, window: int | None, corpus: Any, replay: bool, zk_vkey: Any) -> dict[str, Any]:
    """The verifier's options a state is bound to (the next run must use the same ones)."""
    corpus_digest = None
    if corpus is not None:
        text = json.dumps(corpus, sort_keys=True, ensure_ascii=True).encode()
        corpus_digest = hashlib.sha256(text).hexdigest()
    return {
        "mode": mode,
        "theta": float(theta),
        "coalition_window": window,
        "corpus": corpus_digest,
        "replay_answers": bool(replay),
        "zk_vkey": None if zk_vkey is None else str(zk_vkey),
    }


def open_state(
    path: str | Path, key_path: str | Path | None, state_hash: str | None, options: dict[str, Any]
) -> StateFile:
    """The state at ``path`` (authenticated), or a new one if no file is there; exit 2 (``StateError``) for a
    state of another verifier or other options, an altered file, a missing key."""
    p = Path(path)
    if options["mode"] != "full":
        raise StateError("--state needs --mode full (a sampled audit replays only some leaves: nothing to carry)")
    if key_path is None:
        raise StateError("--state needs --state-key FILE (the MAC key that authenticates it; made at the first run)")
    exists = p.exists() or p.is_symlink()
    if state_hash is not None and not exists:
        raise StateError(f"--state-hash was given but --state {p} does not exist")
    key = read_key(key_path, create=not exists)
    if not exists:
        return StateFile(p, key, options, None)
    prior = load_state(p, key, state_hash)
    if prior.verifier != VERIFIER:
        raise StateError(
            f"--state {p}: made by {excerpt(prior.verifier)}, not this verifier ({VERIFIER}): audit the whole log "
            "into a new state"
        )
    for name, value in options.items():
        if prior.options.get(name) != value:
            flag = {"coalition_window": "--coalition-window", "replay_answers": "--replay-answers"}.get(name, name)
            raise StateError(
                f"--state {p}: made with {flag} = {excerpt(prior.options.get(name))}, not {excerpt(value)}: an "
                "incremental audit keeps the options of the state (or audit the whole log into a new state)"
            )
    return StateFile(p, key, options, prior)


def pinned_key(sf: StateFile, pinned: str | None) -> str | None:
    """The provider key the run pins: the state's (a different ``--key`` is exit 2), or ``--key`` on a first run."""
    if sf.prior is None or sf.prior.pinned is None:
        return pinned
    if pinned is not None and pinned != sf.prior.pinned:
        raise StateError(f"--key differs from the provider key the state {sf.path} pinned")
    return sf.prior.pinned


def attach(run: Run, sf: StateFile) -> None:
    """Join the bundle to the state: from here on the checks replay only the leaves from the state's size on."""
    b, st = run.b, sf.prior
    run.keeps_state = True
    if st is None:
        if b.first:
            raise StateError(
                f"the bundle holds the log from size {b.first} on, and the state {sf.path} is new: fetch the whole "
                "bundle for the first audit (no --since)"
            )
        run.prior = empty_state("", None, VERIFIER, sf.options, 1)  # nothing verified yet: base 0
        return
    first = b.first
    if first > st.size:
        raise StateError(
            f"the bundle holds the log from size {first} on, but the state {sf.path} was verified up to size "
            f"{st.size}: fetch it with --since {st.size}"
        )
    genesis = st.control[0][1]
    theirs = b.leaves[0] if first == 0 and b.leaves else b.genesis_file
    if theirs != genesis:
        other = origin_of(theirs) if theirs else "(none)"
        raise StateError(
            f"the state {sf.path} is of the log {st.origin}, the bundle of {excerpt(other)}: another log (a log "
            "started afresh restarts every budget; audit it whole, into a new state, only if that is intended)"
        )
    tail = b.leaves
    end = first + len(tail)
    for pos in range(first, min(st.size, end)):  # the leaves the state verified must be the ones it verified
        if hash_leaf(tail[pos - first]) != bytes(st.leaf_hashes[pos]):
            run.fail(
                "ledger",
                f"leaf {pos} is not the one the auditor's state verified at size {st.size} (the history was "
                "rewritten: a fork)",
            )
            break
    if end < st.size:
        run.fail(
            "ledger",
            f"the ledger (size {end}) is shorter than the size {st.size} the auditor's state verified: history was "
            "truncated",
        )
    leaves = [b""] * st.size
    for pos, raw in st.control:
        leaves[pos] = raw
    leaves.extend(tail[max(0, st.size - first) :])
    b.leaves, b.first = leaves, 0
    run.base, run.prior = st.size, st


def merge(run: Run, trusted_size: int | None) -> int | None:
    """Before the verdict: the state's reasons (sticky) and rejected evidence go first, and its per-leaf counts
    add to this run's (``PER_RUN``: this run's stand). Returns the trusted checkpoint's size: the auditor's, else
    the state's."""
    st = run.prior
    if st is None or not run.keeps_state:
        return trusted_size
    merged: Counter[str] = Counter({k: v for k, v in st.checked.items() if k not in PER_RUN})
    for k, v in run.checked.items():
        merged[k] = v if k in PER_RUN else merged[k] + v
    run.checked = merged
    run.reasons = list(dict.fromkeys([*st.reasons, *run.reasons]))  # a bundle-wide defect is reported once
    run.rejected = [*st.rejected, *run.rejected]
    return trusted_size if trusted_size is not None or not run.base else run.base


def carry(run: Run, sf: StateFile, origin: str, pinned: str | None) -> AuditorState:
    """The state after this run: the prior's structures extended by the leaves from ``run.base`` on."""
    base = run.base
    old = run.prior if run.prior is not None else empty_state(origin, pinned, VERIFIER, sf.options, 1)
    n = max(run.n, old.size)
    new_hashes = np.frombuffer(run.leaf_hashes, dtype=np.uint8).reshape(-1, 32)
    if new_hashes.shape[0] != run.n - base:  # the ledger check did not hash the leaves: hash them here
        new_hashes = np.frombuffer(b"".join(hash_leaf(x) for x in run.b.leaves[base:]), dtype=np.uint8)
        new_hashes = new_hashes.reshape(-1, 32)
    cr = CompactRange(old.size, old.frontier)
    for h in new_hashes:
        cr.append_leaf_hash(bytes(h))
    control = list(old.control)
    for i in range(base, run.n):
        rec = run.records[i] if i < len(run.records) else None
        if isinstance(rec, dict) and rec.get("type") != "query":
            control.append((i, run.b.leaves[i]))
    parts = {**_requests(run, old), **_receipts(run, old), **_coalition(run, old)}  # may add account codes
    return AuditorState(
        origin=origin,
        pinned=pinned,
        verifier=VERIFIER,
        options=sf.options,
        size=n,
        root=cr.root(),
        frontier=cr.hashes,
        control=control,
        leaf_hashes=np.concatenate([old.leaf_hashes, new_hashes]),
        accounts=list(old.accounts),
        last_counter=dict(run.final_counters) if run.final_counters else dict(old.last_counter),
        spend={t: np.asarray(v, dtype=np.int64) for t, v in run.final_spend.items()} or dict(old.spend),
        reasons=list(run.reasons),
        rejected=list(run.rejected),
        checked={k: int(v) for k, v in run.checked.items()},
        certified=run.certified if run.certified is not None else old.certified,
        **parts,
    )


def _requests(run: Run, old: AuditorState) -> dict[str, np.ndarray]:
    recs = [(i, run.records[i]) for i in run.queries]
    rows = [(i, r) for i, r in recs if isinstance(r, dict)]
    codes = [old.account_code(r["account"]) for _, r in rows]
    return {
        "req_pos": np.concatenate([old.req_pos, np.asarray([i for i, _ in rows], dtype=np.int64)]),
        "req_account": np.concatenate([old.req_account, np.asarray(codes, dtype=np.int64)]),
        "req_counter": np.concatenate([old.req_counter, np.asarray([r["counter"] for _, r in rows], dtype=np.int64)]),
        "req_hreq": np.concatenate([old.req_hreq, _hex_rows([r["h_req"] for _, r in rows])]),
        "req_htop": np.concatenate([old.req_htop, _hex_rows([r["h_top"] for _, r in rows])]),
    }


def _receipts(run: Run, old: AuditorState) -> dict[str, np.ndarray]:
    seen = run.receipts_seen
    if seen is None:  # no receipts handed in this run: the state's stand
        return {
            "rc_pos": old.rc_pos,
            "rc_digest": old.rc_digest,
            "rc_account": old.rc_account,
            "rc_counter": old.rc_counter,
        }
    return {
        "rc_pos": seen.pos.astype(np.int64),
        "rc_digest": np.asarray(seen.digest, dtype=np.uint8).reshape(-1, 32),
        "rc_account": np.asarray([old.account_code(a) for a in seen.account], dtype=np.int64),
        "rc_counter": seen.counter.astype(np.int64),
    }


def _coalition(run: Run, old: AuditorState) -> dict[str, np.ndarray]:
    if run.coalition_rows is None:  # the check did not run (a FAIL before it): the state's stand
        return {
            "co_rows": old.co_rows,
            "co_account": old.co_account,
            "co_pos": old.co_pos,
            "co_labels": old.co_labels,
            "co_digest": old.co_digest,
        }
    rows, codes, pos, labels = run.coalition_rows
    keys = run.coalition_new[1]
    digest = np.concatenate([old.co_digest, np.frombuffer(keys, dtype=np.uint8).reshape(-1, 16)])
    return {"co_rows": rows, "co_account": codes, "co_pos": pos, "co_labels": labels, "co_digest": digest}


def _hex_rows(values: list[str]) -> np.ndarray:
    return np.frombuffer(b"".join(bytes.fromhex(v) for v in values), dtype=np.uint8).reshape(-1, 32)


def finish(verdict: Verdict, run: Run, sf: StateFile | None, given: AuditorInputs) -> Verdict:
    """After the verdict: with a state, write the next one (mode 0600, atomically) and put its SHA-256 in the
    verdict (``--state-hash`` for the next run)."""
    if sf is not None:
        verdict.state_hash = save_state(sf.path, carry(run, sf, run.origin, given.pinned), sf.key)
    return verdict
