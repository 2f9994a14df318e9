"""Hardening (spec/protocol.md §8, spec/threat-model.md): what the verifier's output shows and what a published
verdict may carry. Each test is the one its finder would write against v2/v3 as first shipped."""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata

import pytest

from dprag.audit import service as service_module
from dprag.audit.encoding import encode, printable
from dprag.audit.service import ProviderService
from dprag.audit.testing import window as fx
from dprag.audit.toy import HashEmbedder, ToyGenerator

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
    from dprag.accounting.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="tenant"):
        ProviderService.create(
            tmp_path / "s",
            policy=fx.toy_policy(),
            embedder=emb,
            embedder_descriptor=emb.descriptor({EVIL: len(fx.LEGAL)}),
            generator=ToyGenerator(),
            tenants={EVIL: fx.LEGAL},
            accounts={},
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
        "history_windows",
        "coalition_window",
        "coalition_window_covers_history",
    }
    assert pub["history"] == full["history"] and pub["provider_key"] == full["provider_key"]
