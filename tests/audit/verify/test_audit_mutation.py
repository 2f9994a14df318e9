"""Tampering with any byte of a bundle turns PASS into FAIL with a named reason; tampering with the receipts
(the accounts' evidence) makes them rejected evidence, listed, and never a FAIL of the honest provider.

Every single-byte mutation at positions drawn (seeded) from each file, and truncated, reordered and
duplicated records. Deterministic: fixed seed, fixed window.
"""

import random
import shutil

import pytest

from dprag.audit.testing.window import build_window
from dprag.audit.verify import verify

# which checks may report the damage of each file
FILES = {
    "public/leaves.bin": {
        "ledger",
        "canonical",
        "commitments",
        "generation",
        "retrieval",
        "receipts",
        "rate",
        "requests",
    },
    "public/checkpoints.txt": {"ledger"},
    "public/genesis.json": {"commitments"},
    "public/provider.vkey": {"commitments", "ledger", "receipts"},
    "auditor/seed.hex": {"commitments", "retrieval"},
    "auditor/policy.json": {"commitments"},
    "auditor/embedder.json": {"commitments"},
    "auditor/openings.jsonl": {"canonical", "retrieval", "generation", "coalition", "requests"},
    "auditor/index/clinic.i16": {"commitments"},
    "auditor/docs/clinic.json": {"commitments"},
    "receipts.jsonl": set(),  # rejected evidence, not a FAIL
}
SAMPLES_PER_FILE = 24


@pytest.fixture(scope="module")
def window(tmp_path_factory):
    w = build_window(tmp_path_factory.mktemp("m") / "win", rounds=3)
    assert verify(w.bundle, receipts=w.receipts).verdict == "PASS"
    return w


def _copy(window, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(window.bundle, dst / "bundle")
    shutil.copy(window.receipts, dst / "receipts.jsonl")
    return dst


def _target(dst, rel):
    return dst / "receipts.jsonl" if rel == "receipts.jsonl" else dst / "bundle" / rel


def _verdict(dst):
    return verify(dst / "bundle", receipts=dst / "receipts.jsonl")


def _checks(v):
    return {r.split(":", 1)[0] for r in v.reasons}


@pytest.mark.parametrize("rel", sorted(FILES))
def test_every_sampled_single_byte_mutation_fails(window, tmp_path, rel):
    rng = random.Random(f"mutation:{rel}")
    dst = _copy(window, tmp_path)
    path = _target(dst, rel)
    original = path.read_bytes()
    positions = sorted(rng.sample(range(len(original)), min(SAMPLES_PER_FILE, len(original))))
    for pos in positions:
        data = bytearray(original)
        data[pos] ^= rng.randrange(1, 256)
        path.write_bytes(bytes(data))
        v = _verdict(dst)
        if rel == "receipts.jsonl":
            assert v.verdict == "PASS" and v.rejected_evidence, f"receipts: byte {pos}: {v.reasons[:3]}"
            continue
        assert v.verdict == "FAIL", f"{rel}: byte {pos} mutated, still PASS"
        assert _checks(v) & FILES[rel], f"{rel}: byte {pos}: reasons {v.reasons[:3]} name none of {FILES[rel]}"
    path.write_bytes(original)
    assert _verdict(dst).verdict == "PASS"


def _leaves(data):
    out, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i : i + 4], "big")
        out.append(data[i : i + 4 + n])
        i += 4 + n
    return out


@pytest.mark.parametrize("edit", ["truncate", "swap", "duplicate", "drop_middle"])
def test_ledger_record_edits_fail(window, tmp_path, edit):
    dst = _copy(window, tmp_path)
    path = dst / "bundle" / "public" / "leaves.bin"
    recs = _leaves(path.read_bytes())
    if edit == "truncate":
        recs = recs[:-1]
    elif edit == "swap":
        recs[2], recs[3] = recs[3], recs[2]
    elif edit == "duplicate":
        recs.insert(4, recs[4])
    else:
        del recs[3]
    path.write_bytes(b"".join(recs))
    v = _verdict(dst)
    assert v.verdict == "FAIL" and "ledger" in _checks(v)


@pytest.mark.parametrize("rel", ["auditor/openings.jsonl", "receipts.jsonl", "public/checkpoints.txt"])
@pytest.mark.parametrize("edit", ["truncate_bytes", "swap", "duplicate"])
def test_line_record_edits_fail(window, tmp_path, rel, edit):
    dst = _copy(window, tmp_path)
    path = _target(dst, rel)
    data = path.read_bytes()
    sep = b"~~~\n" if rel.endswith("checkpoints.txt") else b"\n"
    parts = data.split(sep)
    if edit == "truncate_bytes":
        data = data[: len(data) - 7]
    elif edit == "swap":
        parts[1], parts[2] = parts[2], parts[1]
        data = sep.join(parts)
    else:
        parts.insert(2, parts[2])
        data = sep.join(parts)
    path.write_bytes(data)
    v = _verdict(dst)
    if rel == "receipts.jsonl":
        # the order of account-supplied receipts carries no claim (swap: each still verifies); a damaged or
        # duplicated line is rejected evidence, never a FAIL of the provider
        assert v.verdict == "PASS", v.reasons
        assert bool(v.rejected_evidence) == (edit != "swap")
        return
    assert v.verdict == "FAIL", (rel, edit)
    assert _checks(v) & FILES[rel]
