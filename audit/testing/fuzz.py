"""A mutation fuzzer for the verifier: bundles and receipt files a hostile provider (or account) could hand over.

Each case starts from an honest toy window and applies one to three mutations, drawn from a seeded
``random.Random``: byte flips, insertions, deletions and truncations anywhere in any file; structural edits of
parsed records re-encoded with consistent hashes where they are cheap to fix (so the mutation reaches the
deeper checks); value swaps with boundary values (huge and negative integers, lone surrogates, wrong types,
deep nesting); file-type attacks (symlinks, FIFOs, directories, empty and oversized files). The verifier must
answer every case with a verdict (or ``AuditorInputError`` for a bundle it refuses to read as such), never an
unexpected exception, within a time limit; ``unanticipated`` counts checks that met an exception they did not
foresee (reported by ``verify.run.guarded`` as that check's FAIL) — a campaign's goal is 0 of each.

``python -m dprag.audit.testing.fuzz --cases N --seed S`` runs a campaign and prints its statistics.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..protocol.bundle import AuditorInputError
from ..verify import verify

BOUNDARY = [
    -1,
    0,
    1,
    2**31,
    2**53 - 1,
    2**53,
    2**63,
    -(2**63),
    10**30,
    "\ud800",
    "",
    "x" * 5000,
    None,
    True,
    [],
    {},
    [[[[[]]]]],
    "00",
    "zz",
    1.5,
    "0x1.0p+0",
]
FILES = [
    "public/leaves.bin",
    "public/genesis.json",
    "public/checkpoints.txt",
    "public/provider.vkey",
    "auditor/seed.hex",
    "auditor/policy.json",
    "auditor/embedder.json",
    "auditor/openings.jsonl",
    "auditor/index/clinic.i16",
    "auditor/docs/clinic.json",
    "receipts.jsonl",
]


@dataclass
class CampaignStats:
    cases: int = 0
    verdicts: dict = field(default_factory=dict)
    auditor_input_errors: int = 0
    tracebacks: list = field(default_factory=list)
    unanticipated: list = field(default_factory=list)
    passed_bundle_mutations: list = field(default_factory=list)  # PASS after a change to a bundle file
    slow: list = field(default_factory=list)
    max_seconds: float = 0.0
    peak_rss_mib: float = 0.0
    rss_jumps: list = field(default_factory=list)  # (case, mutations, peak MiB) where the peak rose by > 32 MiB
    noop_mutations: int = 0  # PASS after mutations that cancelled (the bundle byte for byte the honest one)
    seconds: float = 0.0


class _Timeout(BaseException):  # not an Exception: the verifier's guards must not swallow it
    pass


def _json_lines(data: bytes) -> list:
    return [json.loads(x) for x in data.split(b"\n") if x.strip()]


def _raw(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")


def _mutate_value(rng: random.Random, obj):
    """Replace one randomly chosen leaf value (or container) inside ``obj`` by a boundary value."""
    path, cur = [], obj
    for _ in range(6):
        if isinstance(cur, dict) and cur:
            k = rng.choice(sorted(cur))
        elif isinstance(cur, list) and cur:
            k = rng.randrange(len(cur))
        else:
            break
        path.append(k)
        if rng.random() < 0.4:
            break
        cur = cur[k]
    if not path:
        return rng.choice(BOUNDARY)
    parent = obj
    for k in path[:-1]:
        parent = parent[k]
    choice = rng.random()
    if choice < 0.1 and isinstance(parent, dict):
        del parent[path[-1]]
    elif choice < 0.2 and isinstance(parent, dict):
        parent["extra"] = rng.choice(BOUNDARY)
    else:
        parent[path[-1]] = rng.choice(BOUNDARY)
    return obj


def _mutate(rng: random.Random, case: Path) -> str:
    rel = rng.choice(FILES)
    p = case / rel if rel != "receipts.jsonl" else case.parent / "receipts.jsonl"
    kind = rng.random()
    if not p.exists() and not p.is_symlink():
        return f"{rel}: absent"
    if p.is_symlink() or not p.is_file():
        return f"{rel}: not a file, left"
    if kind < 0.05:  # file-type attacks
        what = rng.choice(["symlink", "fifo", "dir", "empty", "big", "missing"])
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
        if what == "symlink":
            os.symlink(rng.choice(["/dev/zero", "/etc/hostname", str(case)]), p)
        elif what == "fifo":
            os.mkfifo(p)
        elif what == "dir":
            p.mkdir()
        elif what == "empty":
            p.write_bytes(b"")
        elif what == "big":
            p.write_bytes(b"\x00" * (1 << 20))
        return f"{rel}: {what}"
    data = p.read_bytes()
    if kind < 0.55 or not data:  # bytes
        data = bytearray(data)
        op = rng.choice(["flip", "insert", "delete", "truncate", "dup"])
        i = rng.randrange(len(data) + 1) if data else 0
        if op == "flip" and data:
            data[min(i, len(data) - 1)] ^= rng.randrange(1, 256)
        elif op == "insert":
            data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == "delete" and data:
            del data[i : i + rng.randint(1, 16)]
        elif op == "truncate":
            del data[i:]
        elif op == "dup" and data:
            data[i:i] = data[max(0, i - 64) : i]
        old = p.read_bytes()
        if bytes(data) == old or (op == "truncate" and old[len(data) :] == b"\n"):
            return f"{rel}: unchanged"  # (the final newline of a line file carries nothing)
        p.write_bytes(bytes(data))
        return f"{rel}: bytes {op} at {i}"
    # structure: parse, change one value, write back as a provider would (sorted, compact)
    try:
        if rel.endswith(".jsonl"):
            objs = _json_lines(data)
            if not objs:
                return f"{rel}: empty"
            j = rng.randrange(len(objs))
            objs[j] = _mutate_value(rng, objs[j])
            p.write_bytes(b"".join(_raw(o) + b"\n" for o in objs))
        elif rel.endswith(".json"):
            p.write_bytes(_raw(_mutate_value(rng, json.loads(data))))
        elif rel.endswith("leaves.bin"):
            from ..protocol.bundle import parse_leaves

            leaves = parse_leaves(data)
            j = rng.randrange(len(leaves))
            leaves[j] = _raw(_mutate_value(rng, json.loads(leaves[j])))
            p.write_bytes(b"".join(len(x).to_bytes(4, "big") + x for x in leaves))
        else:
            return f"{rel}: unchanged"
        return f"{rel}: value" if p.read_bytes() != data else f"{rel}: unchanged"
    except (ValueError, UnicodeError, RecursionError):
        return f"{rel}: unparsable, left"


def _same_tree(a: Path, b: Path) -> bool:
    """Whether two directory trees hold the same entries with the same bytes (symlinks, FIFOs: not the same)."""

    def entries(root: Path) -> dict[str, bytes | None]:
        out: dict[str, bytes | None] = {}
        for p in sorted(root.rglob("*")):
            rel = str(p.relative_to(root))
            out[rel] = p.read_bytes() if p.is_file() and not p.is_symlink() else None if p.is_dir() else b"\0special"
        return out

    try:
        return entries(a) == entries(b)
    except OSError:
        return False


def peak_rss_mib() -> float:
    """This process's peak resident memory: VmHWM (per address space, so an exec'd child does not inherit the
    forking parent's peak, as ru_maxrss does); ru_maxrss where /proc is absent."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_campaign(
    cases: int, seed: int, workdir: str | os.PathLike, *, timeout: float = 10.0, base: Path | None = None
) -> CampaignStats:
    """Run ``cases`` mutated bundles; ``base``: a directory with ``bundle/`` and ``receipts.jsonl`` (default: a
    fresh toy window, both algorithms alternating)."""
    from .window import build_window

    work = Path(workdir)
    bases = [base] if base is not None else []
    if not bases:
        for alg in ("murag", "murag-ada"):
            w = build_window(work / f"base-{alg}", algorithm=alg, rounds=2)
            bases.append(w.directory)
    rng = random.Random(seed)
    st = CampaignStats()
    t_start = time.perf_counter()
    last_peak = peak_rss_mib()

    def alarm(*_):
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, alarm)
    try:
        for c in range(cases):
            src = bases[c % len(bases)]
            case = work / "case"
            shutil.rmtree(case, ignore_errors=True)
            shutil.copytree(src / "bundle", case / "bundle")
            shutil.copy(src / "receipts.jsonl", case / "receipts.jsonl")
            what = [_mutate(rng, case / "bundle") for _ in range(rng.randint(1, 3))]
            t0 = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                v = verify(case / "bundle", receipts=case / "receipts.jsonl")
                st.verdicts[v.verdict] = st.verdicts.get(v.verdict, 0) + 1
                changed = [
                    w
                    for w in what
                    if not w.startswith(("receipts.jsonl",))
                    and not w.endswith(("absent", "unchanged", "empty", "unparsable, left", "not a file, left"))
                ]
                if v.verdict == "PASS" and changed:
                    if _same_tree(src / "bundle", case / "bundle"):
                        st.noop_mutations += 1  # the mutations cancelled: the bundle is byte for byte the honest one
                    else:
                        st.passed_bundle_mutations.append((c, what))
                guard = [r for r in v.reasons if r.endswith("while checking (the bundle is malformed)")]
                if guard:  # what verify.run.guarded reports: a check met an exception it did not foresee
                    st.unanticipated.append((c, what, guard[:2]))
            except AuditorInputError:
                st.auditor_input_errors += 1
            except _Timeout:
                st.slow.append((c, what))
            except Exception as e:  # noqa: BLE001 — this is what the campaign counts
                st.tracebacks.append((c, what, f"{type(e).__name__}: {e}"[:200]))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            dt = time.perf_counter() - t0
            st.max_seconds = max(st.max_seconds, dt)
            peak = peak_rss_mib()
            if peak > last_peak + 32:
                st.rss_jumps.append((c, what, round(peak)))
            last_peak = max(last_peak, peak)
            st.cases += 1
    finally:
        signal.signal(signal.SIGALRM, old)
        shutil.rmtree(work / "case", ignore_errors=True)
    st.seconds = time.perf_counter() - t_start
    st.peak_rss_mib = peak_rss_mib()
    return st


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "dprag-fuzz")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds after which a case counts as a hang")
    a = ap.parse_args(argv)
    st = run_campaign(a.cases, a.seed, a.workdir, timeout=a.timeout)
    print(
        json.dumps(
            {
                "cases": st.cases,
                "seed": a.seed,
                "verdicts": st.verdicts,
                "auditor_input_errors": st.auditor_input_errors,
                "tracebacks": len(st.tracebacks),
                "unanticipated": len(st.unanticipated),
                "passed_bundle_mutations": st.passed_bundle_mutations[:10],
                "noop_mutations": st.noop_mutations,
                "slow_over_10s": len(st.slow),
                "max_seconds": round(st.max_seconds, 3),
                "peak_rss_mib": round(st.peak_rss_mib),
                "seconds": round(st.seconds, 1),
                "examples": (st.tracebacks + st.unanticipated)[:5],
                "slow": st.slow[:5],
                "rss_jumps": st.rss_jumps[:10],
            },
            indent=1,
            default=str,
        )
    )
    return 0 if not (st.tracebacks or st.slow or st.unanticipated) else 1


if __name__ == "__main__":
    raise SystemExit(main())
