"""Hardening (spec/protocol.md §8, spec/threat-model.md): what the verifier's output shows and what a published
verdict may carry. Each test is the one its finder would write against v2/v3 as first shipped."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import unicodedata

import pytest

from dprag.audit.protocol.encoding import encode, printable
from dprag.audit.provider import service as service_module
from dprag.audit.provider.service import ProviderService
from dprag.audit.testing import window as fx
from dprag.audit.testing.toy import HashEmbedder, ToyGenerator
from dprag.audit.verify import verify

#: a name that, printed raw, erases the line and writes a PASS over it, then hides what follows
EVIL = "legal\x1b[2K\rPASS 0.41 1e-06\x1b[8m"
UNSAFE = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def _unsafe(text: str) -> list[str]:
    """The characters of ``text`` a terminal would act on (newline separates lines and is allowed)."""
    return sorted({repr(c) for c in text if c != "\n" and unicodedata.category(c) in UNSAFE})


def _dprag(*args) -> subprocess.CompletedProcess:
    """The CLI's output as the terminal receives it (bytes decoded without newline translation: a text-mode
    pipe would turn a carriage return into a newline and hide it)."""
    p = subprocess.run([sys.executable, "-m", "dprag", *map(str, args)], capture_output=True)
    p.stdout, p.stderr = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    return p


@pytest.fixture(scope="module")
def evil_bundle(tmp_path_factory):
    """A provider that bypasses its own name check (its code, its keys) registers a tenant whose name carries
    terminal escapes; its bundle is signed and consistent."""
    d = tmp_path_factory.mktemp("evil")
    mp = pytest.MonkeyPatch()
    mp.setattr(service_module, "_check_id", lambda field, value: value)
    try:
        emb = HashEmbedder(32)
        svc = ProviderService.create(
            d / "svc",
            policy=fx.toy_policy(),
            embedder=emb,
            embedder_descriptor=emb.descriptor({"clinic": len(fx.CLINIC), EVIL: len(fx.LEGAL)}),
            generator=ToyGenerator(),
            tenants={"clinic": fx.CLINIC, EVIL: fx.LEGAL},
            accounts=fx.registry({"alice": "clinic", "carol": EVIL}),
            seed=b"\x05" * 32,
            allow_weak=True,
        )
        for a in ("alice", "carol"):
            fx.client(svc, a).ask(svc, "asthma protocol inhaler patient 1")
        bundle = svc.export_bundle(d / "bundle")
        svc.close()
    finally:
        mp.undo()
    # an account's receipts file whose window carries escapes too
    (d / "receipts.jsonl").write_bytes(encode({"receipt": {"window": "w1\x1b]0;owned\x07\u202e"}, "top": None}) + b"\n")
    return bundle, d / "receipts.jsonl"


@pytest.mark.integration
def test_rule_output_escapes_every_bundle_string(evil_bundle):
    """v2: a tenant name with ANSI escapes made a FAILing bundle show `PASS 0.41 1e-06` on a terminal (exit 1).
    Every output (terminal, --json, --public) shows only printable text, and the first line is the FAIL."""
    bundle, receipts = evil_bundle
    for flags in ([], ["--json"], ["--public"]):
        p = _dprag("audit", "verify", bundle, "--receipts", receipts, *flags)
        assert p.returncode == 1, p.stderr
        assert _unsafe(p.stdout) == [] and _unsafe(p.stderr) == [], (flags, _unsafe(p.stdout))
        first = p.stdout.splitlines()[0]
        if not flags:
            assert first.startswith("FAIL — ") and "PASS" not in first.split("—", 1)[0]
        else:
            v = json.loads(p.stdout)
            assert v["verdict"] == "FAIL" and v["headline"].startswith("FAIL — ")
    # the provider's own rule is the verifier's: a name that is not an identifier FAILs commitments
    v = json.loads(_dprag("audit", "verify", bundle, "--json").stdout)
    assert any(r.startswith("commitments: genesis names tenant") and "is not a name" in r for r in v["reasons"])


def test_rule_the_provider_refuses_names_that_are_not_identifiers(tmp_path):
    emb = HashEmbedder(32)
    from dprag.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="tenant"):
        ProviderService.create(
            tmp_path / "s",
            policy=fx.toy_policy(),
            embedder=emb,
            embedder_descriptor=emb.descriptor({EVIL: len(fx.LEGAL)}),
            generator=ToyGenerator(),
            tenants={EVIL: fx.LEGAL},
            accounts={},
            allow_weak=True,
        )
    with pytest.raises(InvalidParameterError, match="window"):
        fx.toy_policy(window="w1\u202e").validate()
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").rglob("*.sqlite"))


def test_printable_escapes_what_moves_a_terminal_and_keeps_the_rest():
    assert printable("ε = 0.41, δ — ok") == "ε = 0.41, δ — ok"
    assert printable("a\x1b[2Kb\rc\x9bd\u202ee\u2028f\x00") == "a\\x1b[2Kb\\x0dc\\x9bd\\u202ee\\u2028f\\x00"
    assert _unsafe(printable("".join(map(chr, range(0x250))) + "\U000e0001\ufeff")) == []


@pytest.fixture(scope="module")
def coalition_window(tmp_path_factory):
    """An honest window whose verdict FAILs coalition: 8 colluders ask alike under k_max = 5."""
    d = tmp_path_factory.mktemp("coal")
    accounts = {f"c{i}": "clinic" for i in range(8)}
    svc = fx.open_service(d / "svc", accounts=accounts, k_max=5)
    for a in accounts:
        fx.client(svc, a).ask(
            svc, f"asthma protocol inhaler patient drug dose interval test record visit note summary {a}"
        )
    bundle = svc.export_bundle(d / "bundle")
    svc.close()
    return bundle


@pytest.mark.integration
def test_rule_a_published_verdict_carries_no_private_statistic(coalition_window):
    """v2: the verdict JSON carried the coalition estimate (a function of the private queries no DP mechanism
    released) and per-check seconds (a timing channel); there was no form of the verdict safe to publish.
    `--public` keeps what is a function of the committed policy, the public ledger and the auditor's inputs."""
    full = json.loads(_dprag("audit", "verify", coalition_window, "--json").stdout)
    assert full["verdict"] == "FAIL" and full["checked"]["coalition_estimate"] >= 6 and full["seconds"]
    p = _dprag("audit", "verify", coalition_window, "--public")
    assert p.returncode == 1, p.stderr
    pub = json.loads(p.stdout)
    assert pub["schema"] == "dprag.verdict-public/1" and pub["verdict"] == "FAIL"
    assert pub["failed_checks"] == ["coalition"] and pub["headline"].startswith("FAIL — coalition")
    text = json.dumps(pub)
    assert "coalition_estimate" not in text and "seconds" not in pub and "reasons" not in pub
    assert str(full["checked"]["coalition_estimate"]) + " accounts" not in text
    assert set(pub["checked"]) <= {
        "queries",
        "queries_with_account_confirmed_q",
        "receipts_handed_in",
        "receipts_accepted",
        "receipts_newer_than_bundle",
        "coalition_window",
        "coalition_window_covers_history",
    }
    assert pub["history"] == full["history"] and pub["provider_key"] == full["provider_key"]


# ----------------------------------------------------------------------------------------------------------
# what the verifier reads
# ----------------------------------------------------------------------------------------------------------
PEAK_SCRIPT = """
import sys
from dprag.audit.verify import verify
v = verify(sys.argv[1], receipts=sys.argv[2])
hwm = [l for l in open('/proc/self/status').read().splitlines() if l.startswith('VmHWM:')][0].split()[1]
print(v.verdict, int(hwm) // 1024, '|'.join(v.reasons[:3]))
"""


def _peak(bundle, receipts) -> tuple[str, int, str]:
    p = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, str(bundle), str(receipts)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    verdict, mib, reasons = (p.stdout.rstrip("\n").split(" ", 2) + [""])[:3]
    return verdict, int(mib), reasons


@pytest.mark.integration
def test_rule_the_verifier_reads_only_files_genesis_names(tmp_path):
    """v2: four sparse 256 MiB files that genesis does not name raised the verifier's peak memory from 142 to
    1,166 MiB and the bundle still PASSed. Only the files the spec names are read, each at most the size genesis
    implies (documents x dimension x 2 bytes for an index); an entry genesis does not name FAILs files."""
    from dprag.audit.testing.window import build_window

    w = build_window(tmp_path / "w", rounds=1)
    receipts = w.directory / "receipts.jsonl"
    verdict, base_mib, _ = _peak(w.bundle, receipts)
    assert verdict == "PASS"
    for i in range(4):  # sparse: 1 GiB named by nothing, no disk used
        with open(w.bundle / "auditor" / "index" / f"extra{i}.i16", "wb") as f:
            f.truncate(256 << 20)
    verdict, mib, reasons = _peak(w.bundle, receipts)
    assert verdict == "FAIL" and "files: auditor/index: holds 4 entries genesis does not name" in reasons, reasons
    assert mib < base_mib + 128, (base_mib, mib)  # v2: + 1,024 MiB
    # a named file larger than genesis implies is refused at its cap, not read whole
    for f in (w.bundle / "auditor" / "index").glob("extra*"):
        f.unlink()
    with open(w.bundle / "auditor" / "index" / "clinic.i16", "r+b") as f:
        f.truncate(512 << 20)
    verdict, mib, reasons = _peak(w.bundle, receipts)
    assert verdict == "FAIL" and "auditor/index/clinic.i16: is 536870912 bytes, larger than the cap" in reasons
    assert mib < base_mib + 128, (base_mib, mib)


@pytest.mark.integration
def test_rule_the_auditor_caps_what_is_read(tmp_path):
    """--max-read: a bundle that needs more than the auditor's cap is the auditor's exit 2 naming the flag, read
    no further; within the cap the verdict is unchanged."""
    from dprag.audit.testing.window import build_window

    w = build_window(tmp_path / "w", rounds=1)
    p = _dprag("audit", "verify", w.bundle, "--max-read", "20K")
    assert p.returncode == 2 and p.stderr.startswith("error: --max-read 20480: the bundle needs more"), p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert _dprag("audit", "verify", w.bundle, "--max-read", "64M", "--max-epsilon", "50").returncode == 0
    p = _dprag("audit", "verify", w.bundle, "--max-read", "lots")
    assert p.returncode == 2 and "--max-read" in p.stderr


@pytest.mark.integration
def test_rule_one_receipt_handed_in_many_times_is_replayed_once(tmp_path):
    """v2: one receipt handed in 1,000 times (each line with a different `top`) gave 1,000 answer replays. Lines
    are deduplicated by their signed body, and each ledger position is replayed once."""
    from dprag.audit.testing.toy import ToyGenerator
    from dprag.audit.testing.window import CLINIC, LEGAL, build_window

    class Counting(ToyGenerator):
        calls = 0

        def plan(self, prompt):  # one call per prompt the replay generates from
            Counting.calls += 1
            return super().plan(prompt)

    w = build_window(tmp_path / "w", rounds=1, mechanism="answer-vote")
    entries = [e for c in w.clients.values() for e in c.receipts]
    honest = tmp_path / "honest.jsonl"
    honest.write_bytes(b"".join(encode(e) + b"\n" for e in entries))
    corpus = {"clinic": CLINIC, "legal": LEGAL}
    v = verify(w.bundle, receipts=honest, corpus=corpus, replay_generator=Counting())
    assert v.verdict == "PASS", v.reasons
    per_position = Counting.calls / v.checked["answers_replayed"]
    first = entries[0]
    copies = [encode({**first, "top": [i, i + 1]}) + b"\n" for i in range(1000)]
    flood = tmp_path / "flood.jsonl"
    flood.write_bytes(honest.read_bytes() + b"".join(copies))
    Counting.calls = 0
    v = verify(w.bundle, receipts=flood, corpus=corpus, replay_generator=Counting())
    assert v.checked["answers_replayed"] == len(entries)
    assert Counting.calls <= per_position * len(entries) + 1e-9, Counting.calls


# ----------------------------------------------------------------------------------------------------------
# sybils grinding the committed noise (spec/threat-model.md §2, spec/protocol.md §5.2)
# ----------------------------------------------------------------------------------------------------------
def test_rule_a_sybils_grinding_changes_no_other_accounts_output(tmp_path):
    """v2's spec said P "has nothing to grind"; a sybil P registers can grind: it re-asks with other questions
    and nonces until the committed noise cites the document it wants (it gets it: shown below). The corrected
    claim — nothing is ground for requests signed by keys P does not hold — holds: an honest account's citations
    and answers are the same bytes whether or not a sybil ground 30 requests before each of its questions."""
    accounts = {"alice": "clinic", "bob": "clinic", "carol": "legal", "sybil": "clinic"}
    target = len(fx.CLINIC) - 1  # the clinic's last record, irrelevant to the sybil's question

    def run(d, grind: bool):
        svc = fx.open_service(d, accounts=accounts, n=200, max_queries_per_doc=1000, k_max=5)
        alice, sybil = fx.client(svc, "alice"), fx.client(svc, "sybil")
        seen, hits = [], 0
        for i in range(5):
            if grind:
                for j in range(30):
                    r = sybil.ask(svc, f"asthma protocol inhaler patient drug variant {i}-{j}")
                    hits += target in (r.citations or [])
            r = alice.ask(svc, f"asthma protocol inhaler patient {i}")
            seen.append((r.citations, r.answer, r.receipt["h_answer"]))  # h_top hides the citations with P's nonce
        svc.close()
        return seen, hits

    honest, _ = run(tmp_path / "a", grind=False)
    ground, hits = run(tmp_path / "b", grind=True)
    assert hits > 0  # the sybil's grinding does reach the document it wants, for its own key
    assert honest == ground


def test_rule_a_lone_surrogate_question_is_a_typed_refusal(tmp_path):
    """v2: a lone-surrogate question made serve() raise UnicodeEncodeError (not a dprag error) — from the
    question commitment, before any check. It is a RequestError naming the question, signed as a refusal that
    consumed nothing; nothing is embedded or recorded."""
    from dprag.audit.protocol.errors import RequestError
    from dprag.audit.protocol.request import Request, make_request

    svc = fx.open_service(tmp_path / "svc")
    size = svc.ledger.size
    signed = make_request(
        fx.account_key("alice"), window="w1", account="alice", counter=1, question="asthma inhaler", qemb=None
    )
    with pytest.raises(RequestError, match="question") as e:
        svc.serve(Request(signed, "asthma \ud800inhaler", None))
    assert e.value.refusal is not None and e.value.refusal["consumed"] is False
    assert svc.ledger.size == size
    served = fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient 1")  # counter 1 is still free
    assert served.receipt["counter"] == 1
    svc.close()


# ----------------------------------------------------------------------------------------------------------
# timing: the charge path does the same durable work whether or not a document is charged
# ----------------------------------------------------------------------------------------------------------
#: the clinic tenant of the toy window: a question that charges about 40 records, one that charges none (no
#: record above τ), and the first again once every record it charged has spent its budget (all refused)
CHARGES, NOTHING = "asthma protocol inhaler patient 1", "legal court contract"


def _store_statements(svc, ask) -> list[str]:
    """The serving thread's SQL during ``ask()`` that touches the spend rows, or opens or ends a transaction,
    reduced to its kind (BEGIN, SELECT, WRITE, COMMIT)."""
    log: list[str] = []
    with svc.store.traced(log.append):  # this thread's reads and the process's write transactions
        ask()
    kinds = []
    for s in log:
        if "budget_" not in s and s.split()[0].upper() not in ("BEGIN", "COMMIT", "ROLLBACK"):
            continue
        k = s.split()[0].upper()
        k = "WRITE" if k in ("INSERT", "UPDATE") else k
        if not kinds or kinds[-1] != k or k != "WRITE":
            kinds.append(k)
    return kinds


@pytest.mark.parametrize("algorithm", ["murag", "murag-ada"])
def test_rule_the_charge_path_writes_whether_or_not_a_document_is_charged(tmp_path, algorithm):
    """v2: the charge path wrote (and synced) only when a document was charged, so one query's serve time told
    neighbouring corpora apart 74-88% of the time. A charge of nothing, or of documents that cannot pay, runs the
    same transactions with a write (hence a synced COMMIT) as a charge that lands."""
    svc = fx.open_service(tmp_path / "s", algorithm=algorithm, max_queries_per_doc=1, store="sqlite")  # traced
    alice = fx.client(svc, "alice")
    shapes = {}
    for name, q in (("charges", CHARGES), ("nothing", NOTHING), ("refused", CHARGES)):
        shapes[name] = _store_statements(svc, lambda q=q: alice.ask(svc, q))
    charged = [len(c["ids"]) for _, o in svc.aud.openings(svc.ledger.size) for c in json.loads(o)["charge"]["charges"]]
    svc.close()
    assert sum(charged[: len(charged) // 3]) > 0, charged  # the first question did charge
    assert shapes["charges"].count("BEGIN") >= 1 and "WRITE" in shapes["charges"], shapes
    assert shapes["nothing"] == shapes["charges"] == shapes["refused"], shapes


STRACE_SCRIPT = """
import json, os, pathlib, sys
from dprag.audit.testing import window as fx
svc = fx.open_service(pathlib.Path(sys.argv[1]), algorithm=sys.argv[2], max_queries_per_doc=1, store="sqlite")
alice = fx.client(svc, "alice")
alice.ask(svc, "warm up the connections")
for q in json.loads(sys.argv[3]):
    os.write(2, b"@@serve@@")
    alice.ask(svc, q)
os.write(2, b"@@serve@@")
svc.close()
"""


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (Debian package strace) to count fsyncs")
def test_rule_a_serve_makes_the_same_fsyncs_whether_or_not_a_document_is_charged(tmp_path):
    """The same claim at the operating system: the number of fsync / fdatasync calls of one whole serve (ledger,
    auditor store, budget store) is the same for a question that charges ~40 records, one that charges none, and
    one whose records cannot pay."""
    trace = tmp_path / "trace.txt"
    questions = json.dumps([CHARGES, NOTHING, CHARGES])
    p = subprocess.run(
        ["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync,write", "-o", str(trace)]
        + [sys.executable, "-c", STRACE_SCRIPT, str(tmp_path / "s"), "murag", questions],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    per_serve, cur = [], None
    for line in trace.read_text().splitlines():
        if "@@serve@@" in line:
            if cur is not None:
                per_serve.append(cur)
            cur = 0
        elif cur is not None and ("fsync(" in line or "fdatasync(" in line):
            cur += 1
    assert len(per_serve) == 3 and per_serve[0] > 0, per_serve
    assert per_serve[0] == per_serve[1] == per_serve[2], per_serve


def test_release_holds_each_answer_to_its_grid_point(tmp_path, monkeypatch):
    """Release on the policy's public grid (audit/provider/release.py, protocol §5.6): a request recorded at t is
    released at the first multiple of the period at or after t + period, whether it charged documents or not; an
    answer whose work overran leaves at the next grid point after it and is counted; a retry of a stored answer
    after its release time leaves at once. Checked on a fake clock (no wall-clock bound), then once on the service
    (a lower bound only)."""
    from dprag.audit.provider import release as rel
    from dprag.errors import InvalidParameterError

    now = [100.0]

    def clock():  # a fake clock that advances 10 µs per reading (the spin) and by every sleep
        now[0] += 1e-5
        return now[0]

    def sleep(s):
        assert s >= 0
        now[0] += s

    monkeypatch.setattr(rel, "now", clock)
    monkeypatch.setattr(rel, "sleep", sleep)
    c = rel.ReleaseClock(2.0)
    assert c.release_at_ms(100.5) == 104_000 and c.release_at_ms(102.0) == 104_000 and c.release_at_ms(102.1) == 106_000
    for at, worked, leaves in (
        (101.0, True, 104.0),
        (103.99, False, 104.0),
        (105.0, True, 106.0),
        (105.0, False, 105.0),
    ):
        now[0] = at
        c.hold(104_000, worked=worked, arrived=100.5)
        assert leaves <= now[0] <= leaves + 2e-4, (at, worked, now[0])  # within a few clock readings of it
    assert c.overruns == 1
    now[0] = 101.0
    c.hold(None, worked=True, arrived=100.5)  # a failure before the record: a period after arrival, on the grid
    assert 104.0 <= now[0] <= 104.0 + 2e-4
    for bad in (0, -1, 3601, True, "2"):
        with pytest.raises(InvalidParameterError, match="release_period"):
            rel.ReleaseClock(bad)
    monkeypatch.undo()

    import time

    svc = fx.open_service(tmp_path / "s", release_period=0.25)
    alice = fx.client(svc, "alice")
    for q in (CHARGES, NOTHING):
        t0 = time.time()
        alice.ask(svc, q)
        assert time.time() - t0 >= 0.25  # at least a period after its record
    svc.close()


def test_the_public_verdict_names_no_zk_tenant_size_or_proof_count():
    """The auditor's attestation line for zk tenants names them, their sizes and how many proofs it checked: the
    hidden policy (which tenants show citations) and the private traffic of those tenants. The public form keeps that
    the channel is attested by Groth16, and nothing else (found by the JSON-schema work on the public verdict)."""
    from types import SimpleNamespace

    from dprag.audit.verify.verdict import Verdict, _retrieval_attestation

    pol = SimpleNamespace(retrieval=SimpleNamespace(zk_tenants=("secret-ward",)))
    run = SimpleNamespace(policy=pol, tenants={"secret-ward": {"n": 4321}}, checked={"zk_proofs": 987})
    private = _retrieval_attestation(run, vk=object())
    assert "secret-ward" in private and "4321" in private and "987" in private  # the auditor's own line
    v = Verdict("PASS", 1.0, 1e-6, 5, {}, {"retrieval": private}, [], {}, "full")
    public = json.dumps(v.to_public_json())
    assert "groth16" in public and not any(x in public for x in ("secret-ward", "4321", "987"))
