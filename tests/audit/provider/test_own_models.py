"""A provider's own embedder and generator through the entry-point path (docs/own-models.md): the example plugin
of docs/own-models/acme-dprag, made visible to ``importlib.metadata`` as an installed distribution would be,
is found by name (``dprag.embedders``, ``dprag.generators``), serves an account that computes Q with the same
entry point, and the window verifies PASS."""

from __future__ import annotations

import shutil
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from dprag.audit.client.account import AccountClient
from dprag.audit.protocol.policy import Policy
from dprag.audit.protocol.request import AccountKey
from dprag.audit.provider.models import load_embedder
from dprag.audit.provider.service import ProviderService
from dprag.audit.verify import verify
from dprag.errors import InvalidParameterError

PLUGIN = Path(__file__).resolve().parents[3] / "docs" / "own-models" / "acme-dprag"


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The plugin as pip would leave it: its module and a dist-info with its entry points on sys.path."""
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(PLUGIN / "acme_dprag.py", site / "acme_dprag.py")
    info = site / "acme_dprag-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-dprag\nVersion: 0.1.0\n")
    text = (PLUGIN / "pyproject.toml").read_text()
    eps = text[text.index('[project.entry-points."dprag.embedders"]') :]  # the plugin's own declaration
    ini = eps.replace('[project.entry-points."', "[").replace('"]', "]").replace('"', "")  # TOML -> entry_points.txt
    (info / "entry_points.txt").write_text(ini)
    monkeypatch.syspath_prepend(str(site))
    yield site


def test_the_example_plugin_is_served_and_audited_by_entry_point_name(installed, tmp_path):
    emb = load_embedder("acme-trigram")
    assert type(emb).__module__ == "acme_dprag"
    generator = entry_points(group="dprag.generators")["acme-keywords"].load()()
    docs = {f"rx-{i}": f"record {i}: asthma patients receive zorvatin" for i in range(40)}
    alice = AccountKey.generate()
    svc = ProviderService.create(
        tmp_path / "w",
        policy=Policy.recommended("acme-t", mechanism="dp-ksa", voters=20, tau_cosine=0.3),
        embedder="acme-trigram",
        generator=generator,
        tenants={"clinic": docs},
        accounts={"alice": ("clinic", alice.vkey)},
    )
    assert svc.embedder_descriptor["entry_point"] == "acme-trigram"
    assert "KeywordGenerator" in svc.embedder_descriptor["prompt_template"]  # C_emb binds the generator too
    client = AccountClient(
        "alice",
        "acme-t",
        alice,
        provider_vkey=svc.signer.vkey(),
        origin=svc.origin,
        embedder=load_embedder("acme-trigram"),
        embedding_scale=1024,
    )
    answers = [client.ask(svc, "which drug do asthma patients receive").answer for _ in range(3)]
    assert "zorvatin" in answers, answers
    client.export_receipts(tmp_path / "r.jsonl")
    bundle = svc.export_bundle(tmp_path / "bundle")
    svc.close()
    (tmp_path / "k.vkey").write_text(client.provider_vkey)
    v = verify(bundle, key=tmp_path / "k.vkey", receipts=[tmp_path / "r.jsonl"])
    assert v.verdict.startswith("PASS"), v.reasons
    assert v.checked["queries_with_account_confirmed_q"] == 3


def test_an_embedder_name_not_installed_lists_the_installed_ones(installed):
    with pytest.raises(InvalidParameterError) as e:
        load_embedder("acme-nothere")
    assert e.value.field == "embedder" and "acme-trigram" in str(e.value)
