"""The library client sends nothing over HTTP until the provider's key and the log's origin are pinned (issue
"Operations" item 1): ``AccountClient.ask``/``send``/``retry`` with a ``RemoteService`` refuse naming the missing
pin, before anything is signed, written or sent."""

from __future__ import annotations

import pytest

from dprag.audit.client.account import AccountClient
from dprag.audit.client.remote import RemoteService
from dprag.audit.protocol.request import AccountKey
from dprag.errors import InvalidParameterError


class Counting(RemoteService):
    """A RemoteService that counts its transport calls instead of making them."""

    def __init__(self):
        super().__init__("http://127.0.0.1:9", attempts=1)
        self.calls = 0

    def call(self, *a, **k):
        self.calls += 1
        raise AssertionError("nothing may be sent before both pins")


@pytest.mark.parametrize(
    ("pins", "missing"),
    [({}, "provider_key"), ({"provider_vkey": "k+00000000+AQ=="}, "origin"), ({"origin": "dprag/ab"}, "provider_key")],
)
def test_nothing_is_sent_until_key_and_origin_are_pinned(tmp_path, pins, missing):
    key = AccountKey.generate()
    c = AccountClient("alice", "w", key, directory=tmp_path / "alice", **pins)
    remote = Counting()
    with pytest.raises(InvalidParameterError) as e:
        c.ask(remote, "which drug")
    assert e.value.field == missing and "not pinned" in str(e.value)
    assert remote.calls == 0 and c.counter == 0 and c.pending() == []
    assert not (tmp_path / "alice" / "sent").exists()  # nothing signed either
    remote.close()
