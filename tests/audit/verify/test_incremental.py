"""Incremental verification from the auditor's state (spec/protocol.md §8.14, issue 41 item 1).

The claim under test: a chain of runs, each on the bundle cut since the last one's size, gives the verdict one run
over the whole log gives (verdict, ε, δ, checked counts, reasons); a cheat is caught in the step it occurs in or
later; a provider that rewrites history verified earlier is caught; a state that was altered, is of another log or
of other options, or is a link, is refused with exit 2 naming it."""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import numpy as np
import pytest

from dprag.audit.cli import main
from dprag.audit.protocol.encoding import decode, encode
from dprag.audit.protocol.receipts import sign_receipt
from dprag.audit.testing import forge as fg
from dprag.audit.testing import window as fx
from dprag.audit.testing.cut import cut_bundle
from dprag.audit.testing.toy import ToyGenerator
from dprag.audit.verify import verify
from dprag.audit.verify.state import StateError

#: a line of a file handed in (receipts) or of the bundle (checkpoints): numbered per file, and a chain has several
RECEIPT_NO = re.compile(r"(receipts?|checkpoint) \d+( and \d+)?")


def _same_verdict(a, b) -> None:
    """Two verdicts are the same: verdict, ε, δ, checked counts and reasons (the line numbers of receipts files
    aside: a chain hands its receipts in over several files)."""
    assert (a.verdict, a.epsilon, a.delta) == (b.verdict, b.epsilon, b.delta)
    if b.verdict == "FAIL" and "requests" not in b.checked:
        # the whole run stopped before the replay (a FAIL of §8.3/§8.4 at a later leaf); the earlier runs of the chain
        # had replayed the leaves before it: every count the whole run made is the chain's, the chain has more
        assert {k: a.checked.get(k) for k in b.checked} == dict(b.checked)
    else:
        assert dict(a.checked) == dict(b.checked)
    norm = lambda rs: sorted(RECEIPT_NO.sub("receipt #", r) for r in rs)  # noqa: E731
    assert norm(a.reasons) == norm(b.reasons)


def _serve(svc, clients, rounds):
    lines = []
    for i in rounds:
        for acct, q in fx.SCRIPT:
            r = clients[acct].ask(svc, f"{q} {i}")
            lines.append(encode({"receipt": r.receipt, "top": r.citations}))
    return b"".join(x + b"\n" for x in lines)


def test_a_chain_of_exports_gives_the_whole_logs_verdict(tmp_path):
    """An honest service exported three times with --since: each step PASSes, the last equals one run over the
    whole log with all the receipts, and the state file is the auditor's alone (mode 0600)."""
    svc = fx.open_service(tmp_path / "svc")
    clients = {a: fx.client(svc, a) for a in fx.ACCOUNTS}
    since, receipts = 0, []
    for k, rounds in enumerate((range(0, 2), range(2, 4), range(4, 7))):
        (tmp_path / f"r{k}.jsonl").write_bytes(_serve(svc, clients, rounds))
        receipts.append(tmp_path / f"r{k}.jsonl")
        svc.export_bundle(tmp_path / f"b{k}", since=since)
        v = verify(tmp_path / f"b{k}", receipts=receipts[-1], state=tmp_path / "st", state_key=tmp_path / "key")
        assert v.verdict == "PASS", v.reasons
        assert v.trusted_checkpoint == (since or None)  # the state's size is the checkpoint it extends
        since = svc.ledger.size
    svc.export_bundle(tmp_path / "whole")
    svc.close()
    _same_verdict(v, verify(tmp_path / "whole", receipts=receipts))
    assert (tmp_path / "st").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "key").stat().st_mode & 0o777 == 0o600


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return fg.base_window(tmp_path_factory.mktemp("incremental") / "base", "murag")


@pytest.fixture(scope="module")
def base_ada(tmp_path_factory):
    return fg.base_window(tmp_path_factory.mktemp("incremental-ada") / "base", "murag-ada")


def _chain(base, bundle: Path, receipts: Path, d: Path, cuts: list[int], **kw):
    """Verify ``bundle`` as a chain of runs cut at ``cuts`` (each receipt handed in at the step holding its size);
    returns each step's verdict."""
    lines = [x for x in receipts.read_bytes().splitlines() if x]
    size_of = lambda x: (decode(x).get("receipt") or decode(x).get("refusal"))["size"]  # noqa: E731
    out, since = [], 0
    for k, upto in enumerate(cuts):
        step = cut_bundle(bundle, d / f"step{k}", since, upto, base.signer, sign_at=cuts)
        mine = [x for x in lines if since < size_of(x) <= upto or (k == 0 and size_of(x) == 0)]
        (d / f"rc{k}.jsonl").write_bytes(b"".join(x + b"\n" for x in mine))
        out.append(verify(step, receipts=d / f"rc{k}.jsonl", state=d / "state", state_key=d / "key", **kw))
        since = upto
    return out


def _first_changed_leaf(base, bundle: Path) -> int:
    """The first position whose leaf or opening the forger changed (the seed is genesis's: position 0)."""
    from dprag.audit.protocol.bundle import parse_leaves

    a = parse_leaves((base.bundle / "public" / "leaves.bin").read_bytes())
    b = parse_leaves((bundle / "public" / "leaves.bin").read_bytes())
    ops = lambda d: {decode(x)["pos"]: x for x in (d / "auditor" / "openings.jsonl").read_bytes().splitlines()}  # noqa: E731
    oa, ob = ops(base.bundle), ops(bundle)
    if (base.bundle / "auditor" / "seed.hex").read_bytes() != (bundle / "auditor" / "seed.hex").read_bytes():
        return 0
    return next(
        (i for i in range(max(len(a), len(b))) if a[i : i + 1] != b[i : i + 1] or oa.get(i) != ob.get(i)),
        min(len(a), len(b)),
    )


def _check_kind(base, kind: str, tmp_path: Path) -> None:
    got = fg.forge(base, kind, random.Random(41), tmp_path / "case")
    if got is None:
        pytest.skip(f"{kind}: nothing to edit in this window")
    bundle, receipts = got
    n = len(fg.parse_leaves((bundle / "public" / "leaves.bin").read_bytes()))
    cuts = [n // 3, 2 * n // 3, n]
    opts = {"corpus": base.corpus, "replay_generator": ToyGenerator()}
    steps = _chain(base, bundle, receipts, tmp_path, cuts, **opts)
    whole = verify(cut_bundle(bundle, tmp_path / "whole", 0, n, base.signer, sign_at=cuts), receipts=receipts, **opts)
    _same_verdict(steps[-1], whole)
    if kind in fg.MUST_PASS:
        assert [v.verdict for v in steps] == ["PASS"] * 3, [v.reasons for v in steps]
        return
    assert steps[-1].verdict == "FAIL" and set(steps[-1].failed_checks()) & set(fg.MUST_FAIL[kind]), steps[-1].reasons
    changed = _first_changed_leaf(base, bundle)
    for v, upto in zip(steps, cuts, strict=True):  # no step before the edit fails; every step after it does
        if upto <= changed and not kind.startswith(("refusal_", "void_", "receipt_", "answer_")):
            assert v.verdict == "PASS", (kind, upto, v.reasons)
    first_fail = next(k for k, v in enumerate(steps) if v.verdict == "FAIL")
    assert all(v.verdict == "FAIL" for v in steps[first_fail:])  # a FAIL is sticky


UNIT_KINDS = ("identity", "charge_units", "top_swap", "leaf_swap")


@pytest.mark.parametrize("kind", UNIT_KINDS)
def test_a_cheat_is_caught_in_its_step_or_later_and_the_chain_equals_the_whole_run(base, kind, tmp_path):
    _check_kind(base, kind, tmp_path)


@pytest.mark.integration
@pytest.mark.parametrize("kind", [k for k in (*fg.MUST_PASS, *fg.MUST_FAIL) if k not in UNIT_KINDS])
def test_every_forged_kind_is_caught_incrementally_with_the_whole_runs_verdict(base, kind, tmp_path):
    _check_kind(base, kind, tmp_path)


@pytest.mark.integration
@pytest.mark.parametrize("kind", [*fg.MUST_PASS, *fg.MUST_FAIL])
def test_every_forged_kind_of_a_murag_ada_window_too(base_ada, kind, tmp_path):
    _check_kind(base_ada, kind, tmp_path)


def test_history_rewritten_after_an_audit_is_a_fork(base, tmp_path):
    """Step 1 verifies the honest prefix; the provider then rewrites a leaf below it (re-deriving and re-signing
    everything from it): the next bundle cannot extend the state's root — FAIL ledger, even cut --since."""
    bundle, receipts = fg.forge(base, "charge_units", random.Random(3), tmp_path / "case")
    n = len(fg.parse_leaves((bundle / "public" / "leaves.bin").read_bytes()))
    changed = _first_changed_leaf(base, bundle)
    s1 = changed + 1
    step1 = cut_bundle(base.bundle, tmp_path / "s1", 0, s1, base.signer, sign_at=[s1])
    assert verify(step1, state=tmp_path / "st", state_key=tmp_path / "k").verdict == "PASS"
    for since in (s1, 0):  # cut after the state, or whole: both are forks of what the state verified
        step2 = cut_bundle(bundle, tmp_path / f"s2-{since}", since, n, base.signer, sign_at=[n])
        (tmp_path / f"st{since}").write_bytes((tmp_path / "st").read_bytes())
        os.chmod(tmp_path / f"st{since}", 0o600)
        v = verify(step2, state=tmp_path / f"st{since}", state_key=tmp_path / "k")
        assert v.verdict == "FAIL" and "ledger" in v.failed_checks(), v.reasons
        assert any("fork" in r for r in v.reasons), v.reasons


def test_a_receipt_of_a_forked_early_leaf_handed_in_two_steps_later_fails(base, tmp_path):
    """The provider showed an account another leaf at an early position (a receipt it signed at another root); the
    auditor's state is past that size when the account hands it in: checked against the state's leaf hashes."""
    n = len(fg.parse_leaves((base.bundle / "public" / "leaves.bin").read_bytes()))
    cuts = [n // 3, 2 * n // 3, n]
    honest = [x for x in base.lines if "receipt" in x]
    early = next(x for x in honest if x["receipt"]["size"] <= cuts[0])
    body = {k: v for k, v in early["receipt"].items() if k not in ("sig", "key")}
    body["root"] = "ab" * 32
    forked = encode({"receipt": sign_receipt(body, base.signer)})
    since = 0
    for k, upto in enumerate(cuts):
        step = cut_bundle(base.bundle, tmp_path / f"b{k}", since, upto, base.signer, sign_at=cuts)
        kw = {}
        if k == 2:  # all the honest receipts late, and the forked one
            (tmp_path / "late.jsonl").write_bytes(b"".join(encode(x) + b"\n" for x in honest) + forked + b"\n")
            kw["receipts"] = tmp_path / "late.jsonl"
        v = verify(step, state=tmp_path / "st", state_key=tmp_path / "k", **kw)
        since = upto
    assert v.verdict == "FAIL" and "receipts" in v.failed_checks()
    assert any("a fork" in r for r in v.reasons), v.reasons
    assert v.checked["receipts_accepted"] == len(honest)  # the honest late receipts are checked and accepted


def test_a_fail_is_sticky(base, tmp_path):
    bundle, receipts = fg.forge(base, "top_swap", random.Random(5), tmp_path / "case")
    n = len(fg.parse_leaves((bundle / "public" / "leaves.bin").read_bytes()))
    v1 = verify(bundle, state=tmp_path / "st", state_key=tmp_path / "k")
    assert v1.verdict == "FAIL"
    again = cut_bundle(bundle, tmp_path / "again", n, n, base.signer, sign_at=[n])  # nothing new
    v2 = verify(again, state=tmp_path / "st", state_key=tmp_path / "k")
    assert v2.verdict == "FAIL" and v2.reasons == v1.reasons


def _state_after_one_run(base, tmp_path):
    verify(base.bundle, state=tmp_path / "st", state_key=tmp_path / "k")
    return tmp_path / "st", tmp_path / "k"


def _exit2(capsys, *args) -> str:
    capsys.readouterr()
    assert main(["audit", "verify", *map(str, args), "--max-epsilon", "50"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_an_altered_state_is_refused_naming_it(base, tmp_path, capsys):
    st, key = _state_after_one_run(base, tmp_path)
    data = bytearray(st.read_bytes())
    data[len(data) // 2] ^= 1
    st.write_bytes(bytes(data))
    msg = _exit2(capsys, base.bundle, "--state", st, "--state-key", key)
    assert "--state" in msg and "MAC" in msg


def test_a_state_with_another_key_or_hash_is_refused(base, tmp_path, capsys):
    st, key = _state_after_one_run(base, tmp_path)
    other = tmp_path / "other.key"
    other.write_text("00" * 32)
    other.chmod(0o600)
    assert "MAC" in _exit2(capsys, base.bundle, "--state", st, "--state-key", other)
    assert "--state-hash" in _exit2(capsys, base.bundle, "--state", st, "--state-key", key, "--state-hash", "00" * 32)


def test_a_state_of_another_log_is_refused(base, tmp_path, capsys):
    st, key = _state_after_one_run(base, tmp_path)
    other = fx.build_window(tmp_path / "other", rounds=1, seed=b"\x07" * 32)
    msg = _exit2(capsys, other.bundle, "--state", st, "--state-key", key)
    assert "another log" in msg and base.origin in msg


def test_a_state_made_with_other_options_is_refused(base, tmp_path, capsys):
    st, key = _state_after_one_run(base, tmp_path)
    msg = _exit2(capsys, base.bundle, "--state", st, "--state-key", key, "--theta", "0.9")
    assert "theta" in msg


def test_a_state_that_is_a_link_or_readable_by_others_is_refused(base, tmp_path, capsys):
    st, key = _state_after_one_run(base, tmp_path)
    link = tmp_path / "link"
    link.symlink_to(st)
    assert "symbolic link" in _exit2(capsys, base.bundle, "--state", link, "--state-key", key)
    st.chmod(0o644)
    assert "chmod 600" in _exit2(capsys, base.bundle, "--state", st, "--state-key", key)


def test_a_cut_bundle_needs_the_state_that_reaches_it(base, tmp_path, capsys):
    n = len(fg.parse_leaves((base.bundle / "public" / "leaves.bin").read_bytes()))
    cut = cut_bundle(base.bundle, tmp_path / "cut", n // 2, n, base.signer, sign_at=[n])
    assert "--state" in _exit2(capsys, cut)  # no state at all
    first = cut_bundle(base.bundle, tmp_path / "first", 0, n // 4, base.signer, sign_at=[n // 4])
    verify(first, state=tmp_path / "st", state_key=tmp_path / "k")
    assert f"--since {n // 4}" in _exit2(capsys, cut, "--state", tmp_path / "st", "--state-key", tmp_path / "k")


def test_a_late_question_cannot_be_replayed_from_the_state(base, tmp_path):
    n = len(fg.parse_leaves((base.bundle / "public" / "leaves.bin").read_bytes()))
    opts = {"corpus": base.corpus, "replay_generator": ToyGenerator(), "state_key": tmp_path / "k"}
    first = cut_bundle(base.bundle, tmp_path / "first", 0, n // 2, base.signer, sign_at=[n // 2, n])
    verify(first, state=tmp_path / "st", **opts)
    rest = cut_bundle(base.bundle, tmp_path / "rest", n // 2, n, base.signer, sign_at=[n // 2, n])
    early = [x for x in base.lines if "receipt" in x and x["receipt"]["pos"] < n // 2 and "question" in x]
    (tmp_path / "late.jsonl").write_bytes(b"".join(encode(x) + b"\n" for x in early))
    with pytest.raises(StateError, match="cannot be replayed"):
        verify(rest, receipts=tmp_path / "late.jsonl", state=tmp_path / "st", **opts)


def _rows(rng, n: int, d: int) -> np.ndarray:
    """int16 rows with planted near-copies (links at θ = 0.95) among unrelated ones."""
    centres = rng.integers(-3000, 3000, size=(max(1, n // 4), d))
    pick = rng.integers(0, centres.shape[0], size=n)
    noise = rng.integers(-150, 150, size=(n, d)) * (rng.random(n) < 0.7)[:, None]
    wild = rng.integers(-3000, 3000, size=(n, d))
    rows = np.where((rng.random(n) < 0.6)[:, None], centres[pick] + noise, wild)
    return rows.astype("<i2")


@pytest.mark.parametrize("seed", range(12))
def test_the_coalition_labels_extended_in_steps_equal_one_pass(seed):
    """``extend_components`` over two or three increments (the state's labels carried) gives the labels and ĉ of one
    pass over all rows, for the whole log and for a window; one pass is ``component_labels`` (exact links)."""
    from dprag.audit.verify.estimator import coalition_size, component_labels
    from dprag.audit.verify.scan import extend_components

    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(20, 120)), int(rng.integers(3, 12))
    rows = _rows(rng, n, d)
    codes = rng.integers(0, 5, size=n).astype(np.int64)
    pos = np.cumsum(rng.integers(1, 4, size=n)).astype(np.int64)
    for window in (None, int(rng.integers(2, 40))):
        cuts = sorted({int(x) for x in rng.integers(1, n, size=int(rng.integers(1, 3)))}) + [n]
        labels, start = None, 0
        for cut in cuts:
            labels, c_hat = extend_components(rows[:cut], codes[:cut], 5, 0.95, window, pos[:cut], start, labels)
            start = cut
        w = int(pos[-1] - pos[0]) if window is None else window
        want = component_labels(rows, [f"a{c}" for c in codes], [0.95], w, positions=pos)[0]
        assert np.array_equal(labels, want)
        assert c_hat == coalition_size(rows, [f"a{c}" for c in codes], 0.95, w, positions=pos)
