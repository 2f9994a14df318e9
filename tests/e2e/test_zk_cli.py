"""``dprag zk demo`` / ``dprag zk verify``: exit 0 valid, 1 invalid, 2 unusable input (one line on stderr)."""

from __future__ import annotations

import json

import pytest

from dprag.audit.cli import main
from dprag.zk.field import R


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("zkdemo")
    assert main(["zk", "demo", "--n", "2", "--k", "1", "--d", "1", "--out", str(d)]) == 0
    return d


def test_demo_writes_snarkjs_and_circom_files(demo_dir):
    for f in ("verification_key.json", "proof.json", "public.json", "circuit.r1cs", "witness.wtns", "demo.json"):
        assert (demo_dir / f).is_file(), f
    info = json.loads((demo_dir / "demo.json").read_text())
    assert info["valid"] is True and info["constraints"] > 0 and "development" in info["setup"]
    assert len(json.loads((demo_dir / "public.json").read_text())) == 4


def test_verify_valid_json(demo_dir, capsys):
    assert main(["zk", "verify", str(demo_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is True and out["n_public"] == 4


def test_verify_invalid_is_exit_1(demo_dir, tmp_path, capsys):
    for f in ("verification_key.json", "proof.json", "public.json"):
        (tmp_path / f).write_bytes((demo_dir / f).read_bytes())
    pub = json.loads((tmp_path / "public.json").read_text())
    pub[0] = str((int(pub[0]) + 1) % R)
    (tmp_path / "public.json").write_text(json.dumps(pub))
    assert main(["zk", "verify", str(tmp_path)]) == 1
    assert "INVALID" in capsys.readouterr().out


@pytest.mark.parametrize("mutate", ["missing", "ge_r", "garbage", "off_curve", "wrong_count"])
def test_verify_unusable_input_is_exit_2_one_line(demo_dir, tmp_path, capsys, mutate):
    for f in ("verification_key.json", "proof.json", "public.json"):
        (tmp_path / f).write_bytes((demo_dir / f).read_bytes())
    pub = json.loads((tmp_path / "public.json").read_text())
    if mutate == "missing":
        (tmp_path / "proof.json").unlink()
    elif mutate == "ge_r":
        pub[1] = str(int(pub[1]) + R)
        (tmp_path / "public.json").write_text(json.dumps(pub))
    elif mutate == "garbage":
        (tmp_path / "verification_key.json").write_text("{]")
    elif mutate == "off_curve":
        proof = json.loads((tmp_path / "proof.json").read_text())
        proof["pi_c"][0] = str(int(proof["pi_c"][0]) ^ 1)
        (tmp_path / "proof.json").write_text(json.dumps(proof))
    else:
        (tmp_path / "public.json").write_text(json.dumps(pub[:-1]))
    assert main(["zk", "verify", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
