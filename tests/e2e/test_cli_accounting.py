"""``dprag accounting collusion``: JSON keys, calibration message, exit codes and error messages."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dprag.accounting.collusion import collusion_report
from dprag.audit.cli import main

ROOT = Path(__file__).resolve().parents[2]
BASE = ["accounting", "collusion", "--k", "10", "--eps-acc", "1", "--delta-acc", "1e-6", "--n", "10000"]
REQUIRED = ("leading", "closed_form", "rdp", "exact", "certified", "delta_joint", "sigma")


def _run(args):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "dprag.audit.cli", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )


@pytest.mark.integration
def test_json_output_subprocess():
    p = _run(BASE + ["--json"])
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)  # exactly one JSON object on stdout
    for key in REQUIRED:
        assert key in out and isinstance(out[key], float), key
    assert "calibrated" in out["sigma_source"] and "(3.4)" in out["sigma_source"]
    # calibrated for the default sensitivity 2 (raw cosine scores under replace-one; issue 10 item 5)
    assert out["sensitivity"] == 2
    assert out["sigma"] == pytest.approx(2 * math.sqrt(2e4 * math.log(1e6) * 2 * math.log(1.25e10)))
    assert out["leading"] == pytest.approx(math.sqrt(10))
    assert out["delta_joint"] == pytest.approx(1.1e-5)
    assert out["exact"] == pytest.approx(0.3471, abs=1e-4)
    assert out["certified"] >= out["exact"]
    assert "replace-one" in out["neighbouring"]


def test_json_matches_the_library_and_respects_delta_and_sigma(capsys):
    rc = main(BASE + ["--delta", "1e-5", "--sigma", "1000", "--sensitivity", "2", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    lib = collusion_report(10, 1.0, 1e-6, 10_000, delta=1e-5, sigma=1000.0, sensitivity=2.0)
    for key in REQUIRED + ("exact_at_delta_joint", "certified_at_delta_joint", "rdp_accountant"):
        assert out[key] == pytest.approx(lib[key], rel=1e-12), key
    assert out["sigma_source"].startswith("given")
    assert out["delta"] == 1e-5 and out["delta_joint"] == pytest.approx(1e-5 + 10 * 1e-6)


def test_calibration_and_audit_options(capsys):
    rc = main(
        [
            "accounting",
            "collusion",
            "--k",
            "100",
            "--eps-acc",
            "1",
            "--delta-acc",
            "1e-6",
            "--n",
            "10000",
            "--calibration",
            "exact",
            "--delta-policy",
            "1.01e-4",
            "--json",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["certified_at_delta_joint"] == pytest.approx(11.0, abs=0.01)
    assert out["leading_is_upper_bound"] is False
    assert out["audit"]["certified"] == pytest.approx(out["certified_at_delta_joint"])


def test_discrete_noise_option(capsys):
    rc = main(BASE + ["--noise", "discrete", "--sigma", "358439.2437877454", "--sensitivity", "100", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["noise"] == "discrete" and out["exact"] <= out["certified"]


def test_human_readable_output(capsys):
    assert main(BASE) == 0
    text = capsys.readouterr().out
    assert "certified" in text and "NOT an upper bound" in text and "calibrated" in text


@pytest.mark.parametrize(
    "override,needle",
    [
        (["--k", "0"], "'--k'"),
        (["--eps-acc", "-1"], "'--eps-acc'"),
        (["--eps-acc", "nan"], "'--eps-acc'"),
        (["--delta-acc", "1.5"], "'--delta-acc'"),
        (["--delta-acc", "0"], "'--delta-acc'"),
        (["--n", "0"], "'--n'"),
        (["--delta", "2"], "'--delta'"),
        (["--sigma", "-1", "--sensitivity", "1"], "'--sigma'"),
        (["--sigma", "0.01", "--sensitivity", "1"], "'--sigma'"),  # issue 8 §3: was an OverflowError
        (["--sigma", "1000"], "--sensitivity is required"),  # issue 10 item 5: no silent default of 1
        (["--sensitivity", "0"], "'--sensitivity'"),
        (["--delta-policy", "1e-5"], "'--delta-policy'"),  # = k * delta_acc: refused
    ],
)
def test_bad_input_exits_2_with_message(override, needle, capsys):
    args = list(BASE)
    for i in range(0, len(override), 2):
        if override[i] in args:
            args[args.index(override[i]) + 1] = override[i + 1]
        else:
            args += override[i : i + 2]
    rc = main(args + ["--json"])
    assert rc == 2
    cap = capsys.readouterr()
    assert needle in cap.err and "Traceback" not in cap.err
    err = json.loads(cap.out)  # under --json an error is also a JSON object on stdout (spec/protocol.md §8.11)
    assert err["schema"] == "dprag.error/1" and err["exit_code"] == 2 and needle in err["error"]


@pytest.mark.integration
def test_bad_input_subprocess_exit_code_and_usage_errors():
    p = _run(["accounting", "collusion", "--k", "0", "--eps-acc", "1", "--delta-acc", "1e-6", "--n", "10", "--json"])
    assert p.returncode == 2 and "'--k': must be an integer >= 1" in p.stderr
    assert json.loads(p.stdout)["exit_code"] == 2
    p = _run(["accounting", "collusion", "--k", "ten", "--eps-acc", "1", "--delta-acc", "1e-6", "--n", "10"])
    assert p.returncode == 2 and "Invalid value" in p.stderr and "Traceback" not in p.stderr
    p = _run(["accounting", "collusion", "--eps-acc", "1", "--delta-acc", "1e-6", "--n", "10"])  # --k missing
    assert p.returncode == 2 and "Missing option" in p.stderr


@pytest.mark.integration
def test_sensitivity_help_names_the_relation_each_value_covers():
    p = _run(["accounting", "collusion", "--help"])
    text = " ".join(p.stdout.split())
    assert p.returncode == 0
    assert "2: replace-one document with raw cosine scores" in text and "1: add/remove-one document" in text
    assert "Required with --sigma" in text


def test_given_sigma_with_the_sound_sensitivity_certifies_more():
    # issue 10 item 5: --sigma 3584.39 certified 0.347 at the old default Δ = 1, 0.729 at the sound Δ = 2
    one = collusion_report(10, 1.0, 1e-6, 10_000, sigma=3584.39, sensitivity=1.0)["certified"]
    two = collusion_report(10, 1.0, 1e-6, 10_000, sigma=3584.39, sensitivity=2.0)["certified"]
    assert one == pytest.approx(0.347, abs=1e-3) and two == pytest.approx(0.729, abs=1e-3)
    assert main(BASE + ["--sigma", "3584.39"]) == 2  # refused without --sensitivity


def test_overflowing_sigma_is_one_line_naming_the_flag(capsys):
    rc = main(BASE + ["--sigma", "0.01", "--sensitivity", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "'--sigma'" in err and "OverflowError" not in err
