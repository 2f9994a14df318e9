"""spec/schemas/: the JSON Schema (Draft 2020-12) of every ``--json`` / ``--public`` output of the command line
(spec/cli-json.md).

For every schema: (a) it is a valid Draft 2020-12 schema whose references resolve; (b) real outputs of its command,
produced through ``dprag.audit.cli.main`` (the ``dprag`` entry point) on the toy window and the toy models at tiny
sizes, validate; (c) real outputs mutated the way a sloppy or hostile producer would are rejected. The published
verdict must reject the private fields of the verdict. Every ``--json`` / ``--public`` flag of the command tree
(cross-checked against a grep of the CLI source) must have a row in spec/cli-json.md naming an existing schema file.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
import shutil
from functools import cache, cached_property
from pathlib import Path

import click
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from dprag.audit.cli import main

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = ROOT / "spec" / "schemas"
DOC = ROOT / "spec" / "cli-json.md"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
ID_BASE = "https://dprag.invalid/schemas/"
FLOORS = ("accounting", "zk", "audit", "rag_adapters", "lab")

SCHEMAS = {p.name.removesuffix(".schema.json"): json.loads(p.read_text()) for p in sorted(SCHEMA_DIR.glob("*.json"))}
REGISTRY = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in SCHEMAS.values())


@cache
def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(SCHEMAS[name], registry=REGISTRY)


def errors(name: str, obj) -> list[str]:
    return [f"{e.json_path}: {e.message[:200]}" for e in validator(name).iter_errors(obj)]


def _not_json(token: str):
    raise ValueError(f"{token} is not JSON (RFC 8259 has no NaN or infinity)")


def dprag(*args) -> tuple[int, list[dict]]:
    """Run the ``dprag`` entry point; every non-empty stdout line must be one strict JSON object."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    objs = [json.loads(x, parse_constant=_not_json) for x in out.getvalue().splitlines() if x.strip()]
    assert objs and all(isinstance(o, dict) for o in objs), (rc, out.getvalue()[:500], err.getvalue()[-500:])
    return rc, objs


def one(rc_expected: int, *args) -> list[dict]:
    rc, objs = dprag(*args)
    assert rc == rc_expected and len(objs) == 1, (rc, objs)
    return objs


#: the toy window's PASS is weak (ε = 42 > --max-epsilon 10): exit 4, ``strength: weak`` (spec/protocol.md §8)
WEAK = 4
COLLUSION = ["accounting", "collusion", "--k", "10", "--eps-acc", "1", "--delta-acc", "1e-6", "--n", "10000"]


class Outputs:
    """Real outputs of the command line at tiny sizes, each produced once per module, on first use."""

    def __init__(self, tmp: Path):
        self.tmp = tmp

    @cached_property
    def window(self):
        from dprag.audit.testing.window import build_window

        return build_window(self.tmp / "win", rounds=2)

    def _verify(self, bundle, rc, *flags):
        return one(rc, "audit", "verify", bundle, *flags)

    @cached_property
    def fail_bundle(self) -> Path:
        bad = self.tmp / "fail"
        shutil.copytree(self.window.bundle, bad)
        (bad / "auditor" / "seed.hex").write_text("11" * 32)  # does not open C_seed: FAIL, the policy still usable
        return bad

    @cached_property
    def unusable_bundle(self) -> Path:
        bad = self.tmp / "unusable"
        shutil.copytree(self.window.bundle, bad)
        (bad / "public" / "leaves.bin").write_bytes(b"\x00\x00")  # no ledger: no genesis, no policy, no history
        return bad

    @cached_property
    def serve_status_unreachable(self):
        """``dprag serve status --json`` asking a port nothing listens on (no server started: the unit tier)."""
        from tests.support.postgres import free_port

        rc, objs = dprag("serve", "status", "--admin", f"http://127.0.0.1:{free_port()}", "--timeout", "2", "--json")
        assert rc == 1 and len(objs) == 1, (rc, objs)
        return objs

    @cached_property
    def serve_status_live(self):
        """``dprag serve status --json`` over a live admin listener (its store up) and a port nothing listens on."""
        import time
        import urllib.request

        from dprag.audit.provider.http.admin import create_admin_app
        from dprag.audit.provider.http.observe import Telemetry
        from dprag.audit.testing.toy import make_toy_directory
        from tests.support.live import LiveServer
        from tests.support.postgres import free_port

        svc = make_toy_directory(self.tmp / "serve-status", n=12, accounts=1, seed=b"\x08" * 32)
        server = LiveServer(create_admin_app(svc, Telemetry()))
        server.thread.start()  # the admin app has no /v1/info (LiveServer's readiness probe): poll /status
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    urllib.request.urlopen(server.url + "/status", timeout=2).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the admin listener did not come up within 30 s"
                    time.sleep(0.1)
            dead = f"http://127.0.0.1:{free_port()}"
            rc, objs = dprag("serve", "status", "--admin", server.url, "--admin", dead, "--json")
            assert rc == 1 and len(objs) == 1, (rc, objs)
            rc2, both = dprag("serve", "status", "--admin", server.url, "--json")
            assert rc2 == 0 and both[0]["ok"] is True, both
        finally:
            server.__exit__(None, None, None)
            svc.close()
        return objs + both

    @cached_property
    def verify_pass(self):
        return self._verify(self.window.bundle, WEAK, "--receipts", self.window.receipts, "--json")

    @cached_property
    def verify_fail(self):
        return self._verify(self.fail_bundle, 1, "--receipts", self.window.receipts, "--json")

    @cached_property
    def verify_unusable(self):
        return self._verify(self.unusable_bundle, 1, "--json")

    @cached_property
    def verify_sampled(self):
        return self._verify(self.window.bundle, WEAK, "--mode", "sampled", "--samples", "2", "--json")

    @cached_property
    def verify_answer_vote_seen(self):
        from dprag.audit.testing.window import build_window

        w = build_window(self.tmp / "av", rounds=1, mechanism="answer-vote", vote_selection="seen", vote_delta=1e-6)
        return self._verify(w.bundle, WEAK, "--json")

    @cached_property
    def public_pass(self):
        return self._verify(self.window.bundle, WEAK, "--receipts", self.window.receipts, "--public")

    @cached_property
    def public_fail(self):
        return self._verify(self.fail_bundle, 1, "--receipts", self.window.receipts, "--public")

    @cached_property
    def public_unusable(self):
        return self._verify(self.unusable_bundle, 1, "--public")

    @cached_property
    def ledger_root(self):
        return one(0, "audit", "ledger", "root", self.window.bundle, "--json")

    @cached_property
    def error_usage(self):
        return one(2, "audit", "verify", self.tmp / "missing", "--json")

    @cached_property
    def error_public(self):
        return one(2, "audit", "verify", self.window.bundle, "--samples", "3", "--public")

    @cached_property
    def error_defect(self):
        return one(1, "audit", "ledger", "root", self.unusable_bundle, "--json")

    @cached_property
    def collusion_gaussian(self):
        return one(0, *COLLUSION, "--json")

    @cached_property
    def collusion_discrete(self):
        return one(
            0,
            *COLLUSION,
            *("--noise", "discrete", "--sigma", "358439.2437877454", "--sensitivity", "100"),
            *("--delta-policy", "1.01e-4", "--json"),
        )

    @cached_property
    def zk_run(self) -> tuple[Path, list[dict]]:
        d = self.tmp / "zk"
        return d, one(0, "zk", "demo", "--n", "1", "--k", "1", "--d", "1", "--out", d, "--json")

    @cached_property
    def zk_demo(self):
        return self.zk_run[1]

    @cached_property
    def zk_verify_valid(self):
        return one(0, "zk", "verify", self.zk_run[0], "--json")

    @cached_property
    def zk_verify_invalid(self):
        from dprag.zk.field import R

        d = self.tmp / "zk-invalid"
        shutil.copytree(self.zk_run[0], d)
        pub = json.loads((d / "public.json").read_text())
        pub[0] = str((int(pub[0]) + 1) % R)  # another index commitment: the proof does not verify
        (d / "public.json").write_text(json.dumps(pub))
        return one(1, "zk", "verify", d, "--json")

    @cached_property
    def privacy_utility(self):
        rc, rows = dprag(
            *("experiment", "privacy-utility", "--dataset", "clinic", "--model", "toy"),
            *("--methods", "non-rag,murag,non-private-rag", "--eps", "5", "--queries", "2", "--dev-queries", "2"),
            *("--m", "4", "--out", self.tmp / "pu", "--json", "--no-progress"),
        )
        assert rc == 0 and len(rows) == 3
        return rows

    def _auc(self, name, *args):
        rc, rows = dprag(
            *("experiment", "auc-vs-k", *args, "--out", self.tmp / name, "--json", "--no-progress", "--workers", "1")
        )
        assert rc == 0 and rows
        return rows

    @cached_property
    def auc_scalar(self):
        return self._auc(
            "scalar", "--mechanism", "scalar", "--k", "1,2", "--eps-acc", "4", "--trials", "30", "--n", "20"
        )

    @cached_property
    def auc_topk(self):
        return self._auc(
            "topk",
            "--mechanism",
            "topk",
            "--k",
            "1",
            "--eps-acc",
            "4",
            "--trials",
            "20",
            "--n",
            "5",
            "--regimes",
            "same-tenant",
        )

    @cached_property
    def auc_hnsw(self):
        pytest.importorskip("faiss")
        return self._auc(
            "hnsw",
            *("--mechanism", "hnsw", "--datasets", "synthetic", "--synthetic-size", "1000", "--k", "1"),
            *("--eps-acc", "16", "--trials", "10", "--n", "10", "--candidates", "32"),
        )

    @cached_property
    def coalition_probe(self):
        rc, rows = dprag(
            *("experiment", "coalition-probe", "--model", "toy", "--k-max", "2", "--probes", "1", "--trials", "2"),
            *("--n-distractors", "10", "--out", self.tmp / "cp", "--no-progress", "--json"),
        )
        assert rc == 0 and len(rows) == 4
        return rows

    @cached_property
    def mia_run(self) -> tuple[Path, list[dict]]:
        rc, rows = dprag(
            *("experiment", "mia", "--model", "toy", "--members", "4", "--n-conditions", "2", "--n-distractors", "30"),
            *("--attacks", "s2mia,interrogation", "--questions", "2", "--methods", "non-rag,non-private-rag,murag"),
            *("--eps", "1", "--out", self.tmp / "mia", "--no-progress", "--json"),
        )
        assert rc == 0 and len(rows) == 6
        return self.tmp / "mia", rows

    @cached_property
    def mia(self):
        return self.mia_run[1]

    @cached_property
    def mia_table_finished(self):
        rc, rows = dprag("experiment", "mia-table", self.mia_run[0], "--json")
        assert rc == 0 and len(rows) == 6
        return rows

    @cached_property
    def mia_table_partial(self):
        stopped = self.tmp / "stopped"
        shutil.copytree(self.mia_run[0], stopped)
        (stopped / "mia.jsonl").unlink()  # as if stopped: only scores.jsonl (and run.json) are there
        rc, rows = dprag("experiment", "mia-table", stopped, "--json")
        assert rc == 0 and len(rows) == 6
        return rows


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Outputs:
    return Outputs(tmp_path_factory.mktemp("json-schemas"))


# -- (a) the schemas themselves ------------------------------------------------------------------------------------
def _refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_is_valid_draft_2020_12_with_id_title_and_resolvable_refs(name):
    s = SCHEMAS[name]
    Draft202012Validator.check_schema(s)
    assert s["$schema"] == DRAFT
    assert s["$id"] == f"{ID_BASE}{name}.json"
    assert s["title"]
    if re.fullmatch(r"dprag\.[a-z.-]+/[0-9]+", s["title"]):  # the schema string the output carries
        assert f'"const": "{s["title"]}"' in json.dumps(s)
    resolver = REGISTRY.resolver(base_uri=s["$id"])
    for ref in _refs(s):
        resolver.lookup(ref)  # raises if a reference does not resolve


# -- (b) real outputs validate -------------------------------------------------------------------------------------
POSITIVE = [
    ("verdict-3", "verify_pass"),
    ("verdict-3", "verify_fail"),
    ("verdict-3", "verify_unusable"),
    ("verdict-3", "verify_sampled"),
    ("verdict-3", "verify_answer_vote_seen"),
    ("verdict-public-1", "public_pass"),
    ("verdict-public-1", "public_fail"),
    ("verdict-public-1", "public_unusable"),
    ("ledger-root-1", "ledger_root"),
    ("serve-status-1", "serve_status_unreachable"),
    ("serve-status-1", "serve_status_live"),
    ("error-1", "error_usage"),
    ("error-1", "error_public"),
    ("error-1", "error_defect"),
    ("accounting-collusion", "collusion_gaussian"),
    ("accounting-collusion", "collusion_discrete"),
    ("zk-demo-1", "zk_demo"),
    ("zk-verify-1", "zk_verify_valid"),
    ("zk-verify-1", "zk_verify_invalid"),
    ("experiment-privacy-utility-1", "privacy_utility"),
    ("experiment-auc-vs-k-1", "auc_scalar"),
    ("experiment-auc-vs-k-1", "auc_topk"),
    ("experiment-auc-vs-k-1", "auc_hnsw"),
    ("coalition-probe-row-1", "coalition_probe"),
    ("mia-row-1", "mia"),
    ("mia-table-row-1", "mia_table_finished"),
    ("mia-table-row-1", "mia_table_partial"),
]


@pytest.mark.integration
@pytest.mark.parametrize("schema, output", POSITIVE)
def test_real_output_validates(outputs, schema, output):
    objs = getattr(outputs, output)
    for obj in objs:
        assert errors(schema, obj) == [], obj


def test_the_verifier_outputs_cover_pass_and_fail(outputs):
    assert {
        o[0]["verdict"] for o in (outputs.verify_pass, outputs.verify_sampled, outputs.verify_answer_vote_seen)
    } == {"PASS"}
    assert {o[0]["verdict"] for o in (outputs.verify_fail, outputs.verify_unusable)} == {"FAIL"}
    assert outputs.public_pass[0]["verdict"] == "PASS" and outputs.public_fail[0]["verdict"] == "FAIL"
    assert outputs.verify_answer_vote_seen[0]["channels"]["generation"]["selection"] == "seen"
    assert outputs.verify_unusable[0]["channels"] == {}


def test_mia_error_row_as_specified_validates(outputs):
    # spec/experiments-mia.md §7: a cell that could not run carries "error" and none of the metric keys (the toy
    # run has no infeasible cell: the row is the real row cut down to the documented shape)
    base = ("schema", "attack", "method", "eps_total", "hp", "members", "nonmembers", "queries", "model", "corpus")
    row = {k: outputs.mia[-1][k] for k in base}
    assert errors("mia-row-1", {**row, "error": "infeasible: epsilon_total: too small"}) == []
    assert errors("mia-row-1", {**row, "error": "stopped after 3 targets: budget exhausted"}) == []
    assert errors("mia-row-1", {**row, "error": None}) != []  # no error and no metrics
    assert errors("mia-row-1", {**outputs.mia[-1], "error": "infeasible: x"}) != []  # an error beside metrics


# -- (c) mutated outputs are rejected ------------------------------------------------------------------------------
def put(*path_value):
    *path, value = path_value

    def f(o):
        for k in path[:-1]:
            o = o[k]
        o[path[-1]] = value

    return f


def drop(*path):
    def f(o):
        for k in path[:-1]:
            o = o[k]
        del o[path[-1]]

    return f


def append(key, value):
    return lambda o: o[key].append(value)


def both(*fs):
    def f(o):
        for g in fs:
            g(o)

    return f


NEGATIVE = [
    # the verdict
    ("verdict-3", "verify_pass", "PASS without epsilon", drop("epsilon")),
    ("verdict-3", "verify_pass", "PASS with a null epsilon", put("epsilon", None)),
    ("verdict-3", "verify_pass", "delta 1.5", put("delta", 1.5)),
    ("verdict-3", "verify_pass", "negative epsilon", put("epsilon", -0.1)),
    ("verdict-3", "verify_pass", "epsilon as a string", put("epsilon", "42.1")),
    ("verdict-3", "verify_pass", "PASS carrying a reason", append("reasons", "retrieval: leaf 3: replay differs")),
    ("verdict-3", "verify_pass", "lower-case verdict", put("verdict", "pass")),
    ("verdict-3", "verify_pass", "protocol version as a string", put("protocol_version", "3")),
    ("verdict-3", "verify_pass", "retrieval delta 2", put("channels", "retrieval", "delta", 2.0)),
    ("verdict-3", "verify_pass", "another relation", put("channels", "relation", "add-remove")),
    ("verdict-3", "verify_pass", "a generation delta on pure-dp-rag", put("channels", "generation", "delta", 1e-6)),
    (
        "verdict-3",
        "verify_pass",
        "a seen-selection key on pure-dp-rag",
        put("channels", "generation", "selection", "seen"),
    ),
    (
        "verdict-3",
        "verify_answer_vote_seen",
        "seen selection without its delta",
        drop("channels", "generation", "per_query_delta"),
    ),
    (
        "verdict-3",
        "verify_answer_vote_seen",
        "answer-vote without its selection",
        drop("channels", "generation", "selection"),
    ),
    ("verdict-3", "verify_pass", "an undocumented counter", put("checked", "spend", 3)),
    ("verdict-3", "verify_pass", "a negative count", put("checked", "queries", -1)),
    ("verdict-3", "verify_pass", "an undocumented top-level key", put("spend", {"clinic": {"limit": 8, "spent": [1]}})),
    ("verdict-3", "verify_pass", "a negative timing", put("seconds", "retrieval", -0.5)),
    ("verdict-3", "verify_pass", "an upper-case key fingerprint", put("provider_key", "AD0988EDA453016F")),
    ("verdict-3", "verify_pass", "a terminal escape in a warning", append("warnings", "\x1b[2K\rPASS")),
    ("verdict-3", "verify_pass", "a bidi override in the trust list", append("trust", "safe \u202e")),
    ("verdict-3", "verify_pass", "a non-hex ledger root", put("history", "root", "xyz")),
    ("verdict-3", "verify_pass", "an epoch that is not an integer", put("history", "epoch", "0x1.0p+0")),
    (
        "verdict-3",
        "verify_pass",
        "full mode with a sampling guarantee",
        put("guarantee", "sampled 1 of 1 query records"),
    ),
    ("verdict-3", "verify_sampled", "sampled PASS without its guarantee", put("guarantee", None)),
    ("verdict-3", "verify_fail", "FAIL claiming a guarantee", both(put("epsilon", 1.0), put("delta", 1e-5))),
    ("verdict-3", "verify_fail", "FAIL without a reason", put("reasons", [])),
    ("verdict-3", "verify_fail", "FAIL with a PASS headline", put("headline", "PASS 1 1e-05 \u2014 key pinned")),
    ("verdict-3", "verify_fail", "a reason forging a line", put("reasons", ["commitments: x\nPASS 0.1 1e-9"])),
    ("verdict-3", "verify_fail", "a reason naming no check", put("reasons", ["the bundle is bad"])),
    ("verdict-3", "verify_fail", "FAIL with a warning", append("warnings", "the provider key was not pinned")),
    ("verdict-3", "verify_unusable", "half a channels object", put("channels", {"relation": "replace-one"})),
    ("verdict-3", "verify_unusable", "without the timings", drop("seconds")),
    # the published verdict
    ("verdict-public-1", "public_pass", "the timings", put("seconds", {"retrieval": 0.001})),
    ("verdict-public-1", "public_pass", "timings under another name", put("timings", {"retrieval": 0.001})),
    ("verdict-public-1", "public_pass", "the coalition estimate", put("checked", "coalition_estimate", 1)),
    ("verdict-public-1", "public_pass", "a per-check count", put("checked", "retrieval", 12)),
    ("verdict-public-1", "public_pass", "a per-tenant count", put("checked", "zk_proofs", 3)),
    ("verdict-public-1", "public_pass", "PASS naming failed checks", put("failed_checks", ["retrieval"])),
    ("verdict-public-1", "public_pass", "delta 1.5", put("delta", 1.5)),
    ("verdict-public-1", "public_pass", "PASS without epsilon", drop("epsilon")),
    ("verdict-public-1", "public_pass", "the private schema string", put("schema", "dprag.verdict/3")),
    ("verdict-public-1", "public_fail", "the reasons' text", put("reasons", ["commitments: auditor/seed.hex ..."])),
    (
        "verdict-public-1",
        "public_fail",
        "the rejected evidence's text",
        put("rejected_evidence", ["receipt 3: unsigned"]),
    ),
    (
        "verdict-public-1",
        "public_fail",
        "the private headline (the root cause's text)",
        put("headline", "FAIL \u2014 commitments: auditor/seed.hex does not open C_seed"),
    ),
    ("verdict-public-1", "public_fail", "FAIL naming no check", put("failed_checks", [])),
    ("verdict-public-1", "public_fail", "an unknown check", put("failed_checks", ["secrets"])),
    ("verdict-public-1", "public_fail", "FAIL claiming an epsilon", put("epsilon", 2.0)),
    # the ledger root
    ("ledger-root-1", "ledger_root", "an upper-case root", lambda o: o.update(root=o["root"].upper())),
    ("ledger-root-1", "ledger_root", "a truncated root", lambda o: o.update(root=o["root"][:-1])),
    ("ledger-root-1", "ledger_root", "a negative size", put("size", -1)),
    ("ledger-root-1", "ledger_root", "the size as a string", lambda o: o.update(size=str(o["size"]))),
    ("ledger-root-1", "ledger_root", "an undocumented key", put("leaves", [])),
    ("serve-status-1", "serve_status_unreachable", "no replica", put("replicas", [])),
    ("serve-status-1", "serve_status_unreachable", "ok as a string", put("ok", "false")),
    ("serve-status-1", "serve_status_unreachable", "an unknown state", put("replicas", 0, "state", "down")),
    (
        "serve-status-1",
        "serve_status_unreachable",
        "a failed replica without its reason",
        drop("replicas", 0, "reason"),
    ),
    ("serve-status-1", "serve_status_unreachable", "a failed replica with a status", put("replicas", 0, "status", {})),
    ("serve-status-1", "serve_status_unreachable", "an undocumented key", put("replicas_down", 1)),
    # the error object
    ("error-1", "error_usage", "exit code 0", put("exit_code", 0)),
    ("error-1", "error_usage", "the exit code as a string", put("exit_code", "2")),
    ("error-1", "error_usage", "a second line in the message", lambda o: o.update(error=o["error"] + "\nTraceback")),
    ("error-1", "error_usage", "an empty message", put("error", "")),
    ("error-1", "error_defect", "a traceback key", put("traceback", "File ...")),
    ("error-1", "error_defect", "no schema string", drop("schema")),
    # dprag accounting collusion
    ("accounting-collusion", "collusion_gaussian", "delta 1.5", put("delta", 1.5)),
    ("accounting-collusion", "collusion_gaussian", "the certified epsilon as a string", put("certified", "0.347")),
    ("accounting-collusion", "collusion_gaussian", "no certified epsilon", drop("certified")),
    ("accounting-collusion", "collusion_gaussian", "an unknown noise", put("noise", "laplace")),
    ("accounting-collusion", "collusion_gaussian", "eps_acc 0", put("eps_acc", 0)),
    ("accounting-collusion", "collusion_gaussian", "a Gaussian row without mu", drop("mu")),
    ("accounting-collusion", "collusion_gaussian", "an AUC bound above 1", put("mia", "auc_upper_bound", 1.2)),
    ("accounting-collusion", "collusion_discrete", "a discrete row with mu", put("mu", 0.1)),
    ("accounting-collusion", "collusion_discrete", "an audit block without certified", drop("audit", "certified")),
    # dprag zk demo / verify
    ("zk-demo-1", "zk_demo", "public signals out of order", lambda o: o["public_names"].reverse()),
    ("zk-demo-1", "zk_demo", "valid as a string", put("valid", "true")),
    ("zk-demo-1", "zk_demo", "a Dask batch with local workers", put("batch", "engine", "dask")),
    ("zk-demo-1", "zk_demo", "an undocumented parameter", put("params", "toxic_waste", 1)),
    ("zk-demo-1", "zk_demo", "15 winners", put("ids", list(range(15)))),
    ("zk-demo-1", "zk_demo", "a setup claiming a ceremony", put("setup", "trusted ceremony")),
    ("zk-verify-1", "zk_verify_valid", "no validity", drop("valid")),
    ("zk-verify-1", "zk_verify_valid", "no public signal", put("n_public", 0)),
    ("zk-verify-1", "zk_verify_valid", "validity as an integer", put("valid", 1)),
    ("zk-verify-1", "zk_verify_invalid", "a negative time", put("verify_s", -1.0)),
    # dprag experiment privacy-utility
    ("experiment-privacy-utility-1", "privacy_utility", "an unknown method", put("method", "gpt-rag")),
    ("experiment-privacy-utility-1", "privacy_utility", "accuracy 1.2", put("accuracy", 1.2)),
    (
        "experiment-privacy-utility-1",
        "privacy_utility",
        "another schema version",
        put("schema", "dprag.experiment.privacy-utility/2"),
    ),
    ("experiment-privacy-utility-1", "privacy_utility", "a negative delta", put("delta", -0.1)),
    ("experiment-privacy-utility-1", "privacy_utility", "epsilon as 'inf'", put("eps_certified", "inf")),
    ("experiment-privacy-utility-1", "privacy_utility", "no question answered, not infeasible", put("queries", 0)),
    ("experiment-privacy-utility-1", "privacy_utility", "no dataset", drop("dataset")),
    # dprag experiment auc-vs-k
    ("experiment-auc-vs-k-1", "auc_scalar", "scalar without its alternatives", drop("alternatives")),
    ("experiment-auc-vs-k-1", "auc_scalar", "AUC 1.5", put("auc", 1.5)),
    ("experiment-auc-vs-k-1", "auc_scalar", "an HNSW key on a scalar row", put("slot_in", 0)),
    ("experiment-auc-vs-k-1", "auc_scalar", "an unknown alternative", put("alternatives", "oracle", {"auc": 1.0})),
    ("experiment-auc-vs-k-1", "auc_topk", "a top-K prediction", put("predicted", 0.6)),
    ("experiment-auc-vs-k-1", "auc_topk", "an unknown regime", put("regime", "cross")),
    ("experiment-auc-vs-k-1", "auc_topk", "mechanism relabelled", put("mechanism", "scalar")),
    ("experiment-auc-vs-k-1", "auc_hnsw", "an HNSW bound", put("upper_bound", 0.9)),
    # dprag experiment coalition-probe
    ("coalition-probe-row-1", "coalition_probe", "an unknown channel", put("channel", "retrieval")),
    ("coalition-probe-row-1", "coalition_probe", "an interval of three", lambda o: o["p_in_ci"].append(1.0)),
    ("coalition-probe-row-1", "coalition_probe", "advantage 1.5", put("advantage", 1.5)),
    ("coalition-probe-row-1", "coalition_probe", "a citations row with a prior bound", put("rate_bound_prior", 0.5)),
    ("coalition-probe-row-1", "coalition_probe", "k 0", put("k", 0)),
    # dprag experiment mia
    ("mia-row-1", "mia", "an error beside the metrics", put("error", "stopped after 2 targets: x")),
    ("mia-row-1", "mia", "AUC 1.2", put("auc", 1.2)),
    ("mia-row-1", "mia", "an unknown SE method", put("se_method", "bootstrap")),
    ("mia-row-1", "mia", "no AUC", drop("auc")),
    ("mia-row-1", "mia", "an LLM share on S2MIA", put("llm_question_share", 0.5)),
    ("mia-row-1", "mia", "an AUC bound below 1/2", put("auc_bound", 0.3)),
    # dprag experiment mia-table
    ("mia-table-row-1", "mia_table_finished", "a finished row without its run", drop("run")),
    ("mia-table-row-1", "mia_table_finished", "a finished row with a partial mark", put("partial", True)),
    ("mia-table-row-1", "mia_table_partial", "a partial row claiming a schema", put("schema", "dprag.mia-row/1")),
    ("mia-table-row-1", "mia_table_partial", "partial false", put("partial", False)),
    ("mia-table-row-1", "mia_table_partial", "an AUC without its interval", drop("auc_ci_lo")),
    ("mia-table-row-1", "mia_table_partial", "a certified epsilon on a partial row", put("eps_certified", 1.0)),
]


@pytest.mark.parametrize("schema, output, why, mutate", NEGATIVE, ids=[f"{s}: {w}" for s, _, w, _ in NEGATIVE])
def test_mutated_output_is_rejected(outputs, schema, output, why, mutate):
    real = getattr(outputs, output)[0]
    bad = copy.deepcopy(real)
    mutate(bad)
    assert json.dumps(bad, sort_keys=True) != json.dumps(real, sort_keys=True), why  # (1 == True in Python)
    assert errors(schema, real) == []
    assert errors(schema, bad) != [], why


# -- the published verdict ------------------------------------------------------------------------------------------
PRIVATE = ("reasons", "seconds", "timings", "cpu_seconds", "spend")


def test_public_verdict_carries_and_accepts_no_private_field(outputs):
    for private, public in (
        (outputs.verify_pass[0], outputs.public_pass[0]),
        (outputs.verify_fail[0], outputs.public_fail[0]),
    ):
        assert not set(PRIVATE) & set(public)
        assert "coalition_estimate" in private["checked"] and "coalition_estimate" not in public["checked"]
        # the private fields, with their real values, put back one at a time
        for key in ("reasons", "seconds"):
            assert errors("verdict-public-1", {**public, key: private[key]}) != [], key
        assert errors("verdict-public-1", {**public, "timings": private["seconds"]}) != []
        assert errors("verdict-public-1", {**public, "checked": private["checked"]}) != []
        assert errors("verdict-public-1", {**public, "rejected_evidence": private["rejected_evidence"]}) != []
        # and the two schemas are not interchangeable
        assert errors("verdict-public-1", private) != [] and errors("verdict-3", public) != []


def test_public_schema_excludes_private_fields_by_name_even_if_opened(outputs):
    # "adding a key does not change the version": were the schema ever opened to unknown keys, the private fields
    # must still be refused by name
    opened = copy.deepcopy(SCHEMAS["verdict-public-1"])
    opened["additionalProperties"] = True
    opened["properties"]["checked"]["additionalProperties"] = True
    v = Draft202012Validator(opened, registry=REGISTRY)
    public = outputs.public_fail[0]
    assert v.is_valid(public)
    for key in PRIVATE:
        assert not v.is_valid({**public, key: []}), key
    assert not v.is_valid({**public, "checked": {**public["checked"], "coalition_estimate": 1}})


def test_schema_enums_follow_the_code():
    from dprag.audit.verify.verdict import CHECK_ORDER, PUBLIC_COUNTS
    from dprag.lab.experiments.methods import METHODS
    from dprag.lab.experiments.mia import ATTACKS, MIA_METHODS

    v3 = SCHEMAS["verdict-3"]["$defs"]
    assert tuple(v3["check"]["enum"]) == CHECK_ORDER
    assert set(CHECK_ORDER) <= set(v3["checked"]["properties"])
    assert set(SCHEMAS["verdict-public-1"]["properties"]["checked"]["properties"]) == set(PUBLIC_COUNTS)
    assert set(SCHEMAS["experiment-privacy-utility-1"]["$defs"]["method"]["enum"]) == set(METHODS)
    mia = SCHEMAS["mia-row-1"]["$defs"]
    assert tuple(mia["method"]["enum"]) == MIA_METHODS and tuple(mia["attack"]["enum"]) == ATTACKS


# -- every --json / --public flag has a schema --------------------------------------------------------------------
def _command_tree_flags() -> set[tuple[str, str, str]]:
    """(command path, flag, defining module) for every --json / --public option of the ``dprag`` command tree."""
    from dprag.audit.cli import cli

    found = set()

    def walk(cmd, path, ctx):
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                walk(sub, [*path, name], click.Context(sub, parent=ctx, info_name=name))
        for p in cmd.params:
            for opt in (*p.opts, *p.secondary_opts):
                if opt in ("--json", "--public"):
                    found.add((" ".join(path), opt, cmd.callback.__module__))

    walk(cli, ["dprag"], click.Context(cli, info_name="dprag"))
    return found


def _grep_flags() -> dict[str, int]:
    """{source file: number of click options named --json / --public} over the floors' Python source."""
    pattern = re.compile(r'@click\.option\(\s*"--(?:json|public)(?=["/])')
    counts = {}
    for floor in FLOORS:
        for f in sorted((ROOT / floor).rglob("*.py")):
            n = len(pattern.findall(f.read_text(encoding="utf-8")))
            if n:
                counts[f.relative_to(ROOT).as_posix()] = n
    return counts


def _doc_table() -> dict[tuple[str, str], str]:
    """{(command, flag): schema file} from the table of spec/cli-json.md."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        link = re.search(r"\]\(schemas/([a-z0-9.-]+\.schema\.json)\)", line)
        if not line.startswith("|") or link is None:
            continue
        command, flags = (c.strip() for c in line.strip("|").split("|")[:2])
        for flag in re.findall(r"--[a-z]+", flags):
            rows[(command.strip("`"), flag)] = link.group(1)
    return rows


def test_every_json_flag_has_a_schema_listed_in_cli_json_md():
    flags = _command_tree_flags()
    assert flags, "no --json flag found: the command tree walk is broken"
    # the walk found every option the source defines (an option on a command outside the tree is found too)
    by_file = {}
    for _, _, module in flags:
        path = module.removeprefix("dprag.").replace(".", "/") + ".py"
        by_file[path] = by_file.get(path, 0) + 1
    assert by_file == _grep_flags()
    table = _doc_table()
    for command, flag, _ in sorted(flags):
        assert (command, flag) in table, f"{command} {flag}: no row in spec/cli-json.md"
        assert (SCHEMA_DIR / table[(command, flag)]).is_file(), table[(command, flag)]


def test_every_schema_file_is_listed_and_tested():
    listed = {f.removesuffix(".schema.json") for f in _doc_table().values()}
    assert listed == set(SCHEMAS)
    assert {s for s, _ in POSITIVE} == set(SCHEMAS)
    assert {s for s, *_ in NEGATIVE} == set(SCHEMAS)
    assert {p.name for p in SCHEMA_DIR.iterdir()} == {f"{s}.schema.json" for s in SCHEMAS}
