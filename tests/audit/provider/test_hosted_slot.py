"""The hosted slot (spec/provider.md §3.6): a generator without a public worst case (a hosted, text-only API) is
called for one request at a time, so a hosted call's wall-clock timeout never depends on what another request of
this provider sends beside it.

The adversary's setting: a hosted API that times out a call whenever calls of another request are in flight at the
same moment (a rate-limited endpoint under this provider's own load; the voters of one request run concurrently and
are fine together). Alice's first voter call is held until bob's request has either reached the API or is waiting
for the slot. Without the slot bob's calls overlap alice's, some of them time out, and those voters are contained
as failed calls: bob's answer then depends on alice's request (whose duration depends on her documents), an
uncharged channel between requests. With the slot bob waits, and no call ever overlaps another request's."""

from __future__ import annotations

import re
import threading
import time

from dprag.audit.testing import window as fx

ALICE_Q = "asthma protocol inhaler patient"
BOB_Q = "garden weather rain note"


class LoadedAPI:
    """A deterministic hosted LLM (``prompt_text -> str``: the ANSWER word of the first document in its prompt) that
    raises ``TimeoutError`` for a call made while a call of another question is in flight."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight: dict[str, int] = {}
        self.seen: set[str] = set()
        self.overlaps = 0
        self.timeouts = 0
        self.holding, self.go = threading.Event(), threading.Event()

    @staticmethod
    def _question(text: str) -> str:
        return ALICE_Q if ALICE_Q in text else BOB_Q if BOB_Q in text else "other"

    def __call__(self, text: str) -> str:
        q = self._question(text)
        with self.lock:
            others = sum(n for k, n in self.in_flight.items() if k != q)
            self.seen.add(q)
            if others:
                self.overlaps += 1
                self.timeouts += 1
                raise TimeoutError("the hosted API timed out under load")
            self.in_flight[q] = self.in_flight.get(q, 0) + 1
        try:
            if q == ALICE_Q and not self.holding.is_set():  # alice's first call is held until bob has come
                self.holding.set()
                assert self.go.wait(10)
            found = re.findall(r"(?:ANSWER|Keywords):\s*([^\n.]+)", text)
            return found[0].replace(",", " ").strip() if found else "unknown"
        finally:
            with self.lock:
                self.in_flight[q] -= 1


def _two_requests(tmp_path, slot: bool) -> tuple[LoadedAPI, dict[str, str], int]:
    """Alice's request, and bob's while alice's first hosted call is in flight: (the API, what each account read,
    how many waited for the slot)."""
    api = LoadedAPI()
    svc = fx.open_text_service(tmp_path / "svc", generator=api, replayable=False)
    out: dict[str, str] = {}
    waited = 0
    try:
        pool = getattr(svc, "hosted_slot", None)  # None on a provider without the slot (the parent commit)
        if not slot and pool is not None:
            pool.set(None)
        clients = {a: fx.client(svc, a) for a in ("alice", "bob")}

        def ask(acct: str, q: str) -> None:
            try:
                out[acct] = clients[acct].ask(svc, q).answer
            except Exception as e:  # noqa: BLE001 - what the account read, whatever it is
                out[acct] = f"{type(e).__name__}: {e}"

        a = threading.Thread(target=ask, args=("alice", ALICE_Q))
        a.start()
        assert api.holding.wait(10)
        b = threading.Thread(target=ask, args=("bob", BOB_Q))
        b.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # bob waits for the slot, or has reached the API beside alice
            if (pool is not None and pool.waiting) or BOB_Q in api.seen:
                waited = pool.waiting if pool is not None else 0
                break
            time.sleep(0.005)
        api.go.set()
        a.join(20)
        b.join(20)
        assert not a.is_alive() and not b.is_alive()
    finally:
        svc.close()
    return api, out, waited


def test_hosted_calls_of_two_requests_never_overlap(tmp_path):
    """With the slot (the default): bob waits for alice's generation; the API never sees two requests at once, so
    no call times out because of another request, and both are answered."""
    api, out, waited = _two_requests(tmp_path, slot=True)
    assert api.overlaps == 0 and api.timeouts == 0, (api.overlaps, api.timeouts, out)
    assert waited == 1, "bob should have waited for the hosted slot"
    assert set(out) == {"alice", "bob"} and not any("Error" in v for v in out.values()), out


def test_without_the_slot_a_hosted_timeout_depends_on_the_other_request(tmp_path):
    """The control (what the parent commit did: no slot): bob's calls overlap alice's held call and time out, which
    the assertion of the test above catches."""
    api, out, waited = _two_requests(tmp_path, slot=False)
    assert waited == 0
    assert api.overlaps > 0 and api.timeouts > 0, (api.overlaps, out)


def test_the_slot_is_taken_only_by_generators_without_a_worst_case():
    from dprag.audit.provider.reservation import hosted_need
    from dprag.audit.testing.toy import HostedToyLLM, ToyGenerator, ToyTextGenerator

    assert hosted_need(HostedToyLLM()) == 1
    assert hosted_need(ToyTextGenerator()) == 1  # seen only through text: the same rule as a hosted API
    assert hosted_need(ToyGenerator()) == 0  # reserves its bytes instead

    class FailureFree:
        failure_free_sessions = True

    class Truthy:
        failure_free_sessions = "yes"  # only True itself declares it

    assert hosted_need(FailureFree()) == 0 and hosted_need(Truthy()) == 1
