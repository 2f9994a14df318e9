"""Isolation between requests (spec/provider.md §3.6): a generation's public worst-case memory is reserved before
the charge, so whether one request's generation fails never depends on what another request runs beside it.

The adversary's setting: a device with room for one session at the public worst case (``SharedDevice``). Account
bob's request arrives while alice's generation holds the device. Without a reservation bob was charged and his
generation then ran out of memory: 503 ``answer_pending`` after the charge, because of alice's request (whose
duration depends on her documents): an uncharged channel between requests. With the reservation bob waits for
alice's generation to end and is served; a wait past its bound is refused before the charge, with a fixed 503."""

from __future__ import annotations

import json
import threading
import time

import pytest

from dprag.audit.protocol.errors import AnswerPendingError, RequestError
from dprag.audit.testing import window as fx
from dprag.audit.testing.toy import CLINIC, ToyGenerator, _ToySession


class _Device:
    """A device's memory: ``alloc`` raises MemoryError past ``capacity`` (what an accelerator does)."""

    def __init__(self, capacity: int):
        self.capacity, self.used, self.lock = capacity, 0, threading.Lock()

    def alloc(self, n: int) -> None:
        with self.lock:
            if self.used + n > self.capacity:
                raise MemoryError("out of memory on the device")
            self.used += n

    def free(self, n: int) -> None:
        with self.lock:
            self.used -= n


class _Session(_ToySession):
    def __init__(self, gen: SharedDevice, plans, nbytes: int, hold: bool):
        super().__init__(gen, plans)
        self.nbytes, self.hold, self.closed = nbytes, hold, False

    def logits(self):
        if self.hold:  # alice's generation holds the device until the test lets it go
            self.gen.holding.set()
            assert self.gen.go.wait(10)
            self.hold = False
        return super().logits()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.gen.device.free(self.nbytes)


class SharedDevice(ToyGenerator):
    """The toy model on a device with room for exactly one session at the public worst case: every session
    preallocates its batch's buffers at start (as the local adapter does) and frees them at close. Declares its
    device's memory (``device_memory_bytes``) and its worst case (``worst_case_bytes``)."""

    def __init__(self, batch: int):
        super().__init__()
        self.device_memory_bytes = self.worst_case_bytes("", 1, batch, 1)
        self.device = _Device(self.device_memory_bytes)
        self.holding, self.go = threading.Event(), threading.Event()

    def worst_case_bytes(self, question: str, n_contexts: int, batch: int, max_new_tokens: int) -> int:
        return batch * self.vocab_size * 4  # what start preallocates for a batch of that shape

    def start(self, prompts, *, max_new_tokens: int = 1):
        nbytes = len(prompts) * self.vocab_size * 4
        self.device.alloc(nbytes)
        hold = "asthma" in prompts[0].question
        return _Session(self, [self.plan(p) for p in prompts], nbytes, hold)


def _two_requests(svc, gen) -> dict[str, str]:
    """alice's request, and bob's while alice's generation holds the device; what each account read."""
    out: dict[str, str] = {}
    clients = {a: fx.client(svc, a) for a in ("alice", "bob")}

    def ask(acct: str, q: str) -> None:
        try:
            clients[acct].ask(svc, q)
            out[acct] = "served"
        except AnswerPendingError as e:
            out[acct] = f"pending: {e}"
        except Exception as e:  # noqa: BLE001 - what the account read, whatever it is
            out[acct] = f"{type(e).__name__}: {e}"

    a = threading.Thread(target=ask, args=("alice", "asthma protocol inhaler patient"))
    a.start()
    assert gen.holding.wait(10)
    b = threading.Thread(target=ask, args=("bob", "garden weather rain note"))
    b.start()
    reservations = getattr(svc, "reservations", None)
    deadline = time.monotonic() + 10
    while b.is_alive() and time.monotonic() < deadline:  # bob fails at once, or waits for his reservation
        if reservations is not None and reservations.waiting:
            break
        time.sleep(0.01)
    gen.go.set()
    a.join(10)
    b.join(10)
    return out


def test_rule_a_request_is_not_failed_by_another_request_running_beside_it(tmp_path):
    """On the parent commit: {'alice': 'served', 'bob': 'pending: the answer of ledger position 2 is pending; retry
    the same request'} -- bob charged, then out of memory because of alice's generation."""
    gen = SharedDevice(batch=fx.toy_policy().generation.m + 1)
    svc = fx.open_service(tmp_path / "svc", generator=gen)
    try:
        out = _two_requests(svc, gen)
    finally:
        svc.close()
    assert out == {"alice": "served", "bob": "served"}, out
    assert gen.device.used == 0


def test_a_request_that_cannot_get_its_reservation_is_refused_before_the_charge(tmp_path):
    """A wait past the bound: ServiceBusyError (fixed text), no leaf appended, the counter not consumed: the same
    signed request is served once the device is free."""
    from dprag.audit.protocol.errors import ServiceBusyError

    gen = SharedDevice(batch=fx.toy_policy().generation.m + 1)
    svc = fx.open_service(tmp_path / "svc", generator=gen)
    try:
        svc.reservations.set(svc.reservations.capacity, wait_seconds=0.05)
        alice, bob = fx.client(svc, "alice"), fx.client(svc, "bob")
        t = threading.Thread(target=alice.ask, args=(svc, "asthma protocol inhaler patient"))
        t.start()
        assert gen.holding.wait(10)
        size = svc.ledger.size
        req = bob.request("garden weather rain note")
        with pytest.raises(ServiceBusyError) as err:
            svc.serve(req)
        assert str(err.value) == ServiceBusyError.MESSAGE
        assert svc.ledger.size == size  # nothing recorded, nothing charged
        gen.go.set()
        t.join(10)
        bob.send(svc, req)  # the same signed request: its counter was not consumed
        assert svc.reservations.refused == 1 and svc.reservations.in_use == 0
    finally:
        svc.close()


def test_the_busy_refusal_over_http_is_the_same_on_neighbouring_corpora(tmp_path):
    """Status, body and headers of the busy refusal on D and D' (one clinic record removed) are byte-identical."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from dprag.audit.provider.http.app import create_app

    seen = []
    for name, drop in (("d", False), ("d2", True)):
        gen = SharedDevice(batch=fx.toy_policy().generation.m + 1)
        svc = fx.open_service(tmp_path / name, generator=gen)
        if drop:
            svc.close()
            import shutil

            shutil.rmtree(tmp_path / name)
            gen = SharedDevice(batch=fx.toy_policy().generation.m + 1)
            from dprag.audit.provider.service import ProviderService
            from dprag.audit.testing.toy import LEGAL, HashEmbedder

            svc = ProviderService.create(
                tmp_path / name,
                policy=fx.toy_policy(),
                embedder=HashEmbedder(32),
                seed=b"\x05" * 32,
                generator=gen,
                tenants={"clinic": CLINIC[1:], "legal": LEGAL},
                accounts=fx.registry(fx.ACCOUNTS),
                allow_weak=True,
            )
        svc.reservations.set(svc.reservations.capacity, wait_seconds=0.05)
        alice, bob = fx.client(svc, "alice"), fx.client(svc, "bob")
        t = threading.Thread(target=alice.ask, args=(svc, "asthma protocol inhaler patient"))
        t.start()
        assert gen.holding.wait(10)
        wire = json.dumps(bob.request("garden weather rain note").to_json()).encode()
        with TestClient(create_app(svc)) as http:
            r = http.post("/v1/requests", content=wire)
        gen.go.set()
        t.join(10)
        svc.close()
        headers = {k: v for k, v in r.headers.items() if k.lower() not in ("date", "content-length")}
        seen.append((r.status_code, r.content, headers))
    assert seen[0] == seen[1], seen
    assert seen[0][0] == 503 and json.loads(seen[0][1])["error"]["type"] == "busy"
    assert seen[0][2].get("retry-after") == "1"


def test_a_worst_case_over_the_whole_capacity_is_a_signed_refusal(tmp_path):
    """A need no wait can meet (the capacity below one request's worst case) is refused as a request: 400 with the
    provider's signed refusal, decided from the question and the policy."""
    gen = SharedDevice(batch=fx.toy_policy().generation.m + 1)
    svc = fx.open_service(tmp_path / "svc", generator=gen)
    try:
        svc.reservations.set(gen.device_memory_bytes - 1)
        with pytest.raises(RequestError) as err:
            fx.client(svc, "alice").ask(svc, "asthma protocol inhaler patient")
        assert err.value.field == "question" and err.value.refusal is not None
        assert svc.ledger.size == 1  # genesis only
    finally:
        svc.close()


def test_waiters_are_served_in_arrival_order_and_off_reserves_nothing():
    from dprag.audit.provider.reservation import Reservations

    pool = Reservations(10, wait_seconds=5)
    order: list[str] = []
    first = pool.hold(10)
    first.__enter__()

    def take(name: str, n: int) -> None:
        with pool.hold(n):
            order.append(name)

    def until(n: int) -> None:
        deadline = time.monotonic() + 10
        while pool.waiting < n:
            assert time.monotonic() < deadline, f"{pool.waiting} waiting, expected {n}"
            time.sleep(0.001)

    big = threading.Thread(target=take, args=("big", 10))
    big.start()
    until(1)
    small = threading.Thread(target=take, args=("small", 1))
    small.start()
    until(2)
    first.__exit__(None, None, None)
    big.join(5)
    small.join(5)
    assert order == ["big", "small"]  # the small one never overtook the big one waiting before it
    pool.set(None)
    with pool.hold(10**12):
        assert pool.in_use == 0
