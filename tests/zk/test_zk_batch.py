"""Batch proving (zk/batch.py): local processes and a Dask cluster (a small distributed.LocalCluster, two worker
processes) produce proofs that verify the same under one key; the key is scattered once; bad scheduler addresses
are typed errors (library) and exit 2 with one stderr line (CLI)."""

from __future__ import annotations

import json
import time

import pytest

from dprag.audit.cli import main
from dprag.errors import InvalidParameterError
from dprag.zk.batch import connect, prove_many
from dprag.zk.field import R
from dprag.zk.keys import ProvingKey
from dprag.zk.r1cs import ConstraintSystem
from dprag.zk.setup import setup
from dprag.zk.verify import verify

pytestmark = pytest.mark.integration  # a Dask LocalCluster (processes, listening sockets) per module

distributed = pytest.importorskip("distributed", reason="the Dask path needs dask.distributed (dev extra)")

UNREACHABLE = "tcp://127.0.0.1:1"  # port 1 (tcpmux): nothing listens there on this machine


@pytest.fixture(scope="module")
def keyed():
    cs = ConstraintSystem()
    a = cs.input("a")
    b = cs.input("b", public=True)
    c = cs.mul(a, b)
    cs.public("abb", cs.mul(c, b) + a)
    r = cs.compile()
    pk = setup(r)
    ws = [r.witness({"a": a_, "b": b_}) for a_, b_ in ((2, 3), (5, 7), (5, 7), (11, 13), (1, 0))]
    return r, pk, ws


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
    ) as cl:
        with distributed.Client(cl, set_as_default=False) as client:
            yield cl, client


def _all_verify(r, pk, ws, proofs):
    vk = pk.verifying_key()
    return [verify(vk, p, r.public_values(w)) for p, w in zip(proofs, ws, strict=False)]


def test_local_and_dask_proofs_verify_the_same(keyed, cluster, monkeypatch):
    r, pk, ws = keyed
    cl, client = cluster
    pickled = []
    orig = ProvingKey.__reduce_ex__

    def counting(self, proto):  # runs in this (client) process whenever the key is serialised for the cluster
        pickled.append(proto)
        return orig(self, proto)

    monkeypatch.setattr(ProvingKey, "__reduce_ex__", counting)
    on_dask = prove_many(pk, ws, scheduler=client)
    n_sent = len(pickled)
    local = prove_many(pk, ws, processes=2)
    assert len(on_dask) == len(local) == len(ws)
    assert _all_verify(r, pk, ws, on_dask) == [True] * len(ws)
    assert _all_verify(r, pk, ws, local) == [True] * len(ws)
    # the key crosses to the cluster once per batch (broadcast to 2 workers: at most one copy per worker), not
    # once per proof (that would be >= 5 here)
    assert 1 <= n_sent <= 2, n_sent
    # r, s are fresh in every task (impure tasks: the same witness twice gives two different proofs) and differ
    # between the engines
    assert on_dask[1] != on_dask[2] and local[1] != local[2]
    assert all(p != q for p, q in zip(on_dask, local, strict=False))
    # proofs are bound to their own statement: proof 0 does not verify proof 3's public inputs
    vk = pk.verifying_key()
    assert not verify(vk, on_dask[0], r.public_values(ws[3]))
    # an address instead of a client: the same engine, the connection made and closed by prove_many
    by_addr = prove_many(pk, ws[:2], scheduler=cl.scheduler_address)
    assert _all_verify(r, pk, ws[:2], by_addr) == [True, True]


def test_a_witness_that_violates_the_circuit_gives_a_proof_that_fails(keyed, cluster):
    r, pk, ws = keyed
    bad = list(ws[0])
    bad[-1] = (bad[-1] + 1) % R  # an intermediate value changed: not a valid witness
    proofs = prove_many(pk, [bad, ws[0]], scheduler=cluster[1])
    vk = pk.verifying_key()
    assert not verify(vk, proofs[0], r.public_values(bad))
    assert verify(vk, proofs[1], r.public_values(ws[0]))


@pytest.mark.parametrize(
    "address,rule",
    [
        (UNREACHABLE, "no Dask scheduler answered"),
        ("not a url::", "is not a Dask scheduler address"),
        ("foo://bar:1", "is not a Dask scheduler address"),
        ("", "must be a Dask scheduler address"),
    ],
)
def test_bad_scheduler_is_a_typed_error(keyed, address, rule):
    r, pk, ws = keyed
    t = time.monotonic()
    with pytest.raises(InvalidParameterError) as e:
        prove_many(pk, ws[:1], scheduler=address, timeout=1)
    assert e.value.field == "scheduler" and rule in e.value.rule
    assert time.monotonic() - t < 30  # bounded by the connect timeout, not dask's 30 s default + retries


def test_batch_parameter_errors(keyed):
    r, pk, ws = keyed
    with pytest.raises(InvalidParameterError) as e:
        prove_many(pk, ws, processes=0)
    assert e.value.field == "processes"
    with pytest.raises(InvalidParameterError) as e:
        prove_many(pk, ws, processes=2, scheduler=UNREACHABLE)
    assert e.value.field == "processes"
    with pytest.raises(InvalidParameterError) as e:
        prove_many(pk, [ws[0], ws[1][:-1]])
    assert e.value.field == "witnesses[1]"
    with pytest.raises(InvalidParameterError) as e:
        connect(UNREACHABLE, timeout=0)
    assert e.value.field == "timeout"


@pytest.mark.slow  # ~18 s loaded (a demo circuit's setup and two proofs); the library path above is the smoke test
def test_cli_demo_batch_on_dask(cluster, tmp_path, capsys):
    cl, _ = cluster
    assert (
        main(
            [
                "zk",
                "demo",
                "--n",
                "2",
                "--k",
                "1",
                "--d",
                "1",
                "--proofs",
                "2",
                "--scheduler",
                cl.scheduler_address,
                "--out",
                str(tmp_path),
                "--json",
            ]
        )
        == 0
    )
    info = json.loads(capsys.readouterr().out)
    assert info["schema"] == "dprag.zk.demo/1" and info["valid"] is True
    assert info["batch"] == {"proofs": 2, "valid": 2, "engine": "dask", "workers": None}
    # the written proof (the batch's first) verifies as a file set too
    assert main(["zk", "verify", str(tmp_path)]) == 0


def test_cli_demo_bad_scheduler_is_exit_2_one_line(tmp_path, capsys):
    t = time.monotonic()
    assert (
        main(
            [
                "zk",
                "demo",
                "--n",
                "2",
                "--k",
                "1",
                "--d",
                "1",
                "--proofs",
                "2",
                "--scheduler",
                "not a url::",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scheduler" in err[0], err
    assert not (tmp_path / "proof.json").exists()  # failed before the setup, nothing written
    assert (
        main(
            [
                "zk",
                "demo",
                "--n",
                "2",
                "--k",
                "1",
                "--d",
                "1",
                "--workers",
                "2",
                "--scheduler",
                UNREACHABLE,
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--workers" in err[0], err
    assert time.monotonic() - t < 30
