"""``dprag serve --reservation`` (spec/provider.md §3.6): the generation reservation set from the command line."""

from __future__ import annotations

import json
import sys
import urllib.request

import click
import pytest

from dprag.audit.commands.serve import parse_reservation


@pytest.mark.parametrize(
    "text,want",
    [
        ("auto", "auto"),
        ("AUTO", "auto"),
        ("off", None),
        ("1073741824", 1 << 30),
        ("4G", 4 << 30),
        ("512MiB", 512 << 20),
        ("64k", 64 << 10),
    ],
)
def test_reservation_values(text, want):
    assert parse_reservation(text) == want


@pytest.mark.parametrize("text", ["0", "-1", "lots", "1.5G", "", "4X"])
def test_a_bad_reservation_is_refused_naming_the_flag(text):
    with pytest.raises(click.UsageError, match="--reservation"):
        parse_reservation(text)


@pytest.mark.integration
@pytest.mark.parametrize("reservation", ["off", "1K"])
def test_the_flag_reaches_the_served_window(tmp_path, reservation):
    """Over HTTP from a real ``dprag serve --toy``: with the reservation off the question is answered; with a 1 KiB
    pool its public worst case does not fit, and the provider signs a refusal naming the reservation before any
    charge (spec/provider.md §3.6)."""
    pytest.importorskip("fastapi")
    from dprag.audit.client.account import AccountClient
    from dprag.audit.client.remote import RemoteService
    from dprag.audit.protocol.errors import RequestError
    from dprag.audit.protocol.request import AccountKey
    from dprag.audit.testing.toy import HashEmbedder
    from tests.support.live import launch, stop_replicas
    from tests.support.postgres import free_port

    d, port = tmp_path / "toy", free_port()
    cmd = [sys.executable, "-m", "dprag", "serve", "--toy", "--dir", str(d), "--port", str(port)]
    with open(tmp_path / "server.log", "wb") as out:
        proc, url = launch([*cmd, "--reservation", reservation], port, log=out)
    try:
        info = json.loads(urllib.request.urlopen(url + "/v1/info", timeout=10).read())
        scale = json.loads((d / "service" / "config" / "embedder.json").read_text())["descriptor"]["embedding_scale"]
        key = AccountKey.from_hex((d / "accounts" / "alice" / "account.key").read_text().strip())
        alice = AccountClient(
            "alice",
            info["window"],
            key,
            provider_vkey=info["provider_key"],
            origin=info["origin"],
            embedder=HashEmbedder(32),
            embedding_scale=scale,
        )
        remote = RemoteService(url, account="alice", key=key)
        if reservation == "off":
            assert alice.ask(remote, "asthma inhaler protocol").answer
        else:
            with pytest.raises(RequestError) as e:
                alice.ask(remote, "asthma inhaler protocol")
            assert e.value.field == "question" and "1024 bytes the provider reserves" in str(e.value)
            assert e.value.refusal is not None  # signed: the account can show it was refused, nothing charged
    finally:
        stop_replicas(proc)


def test_a_bad_reservation_on_the_command_line_is_exit_2(tmp_path):
    from click.testing import CliRunner

    from dprag.audit.commands.serve import serve

    r = CliRunner().invoke(serve, ["--toy", "--dir", str(tmp_path / "d"), "--reservation", "lots"])
    assert r.exit_code == 2 and "--reservation 'lots'" in r.output
    assert not (tmp_path / "d").exists()  # refused before anything was made
