"""Group commit of the record and the answer transactions (audit/provider/group_commit.py, spec/provider.md §6).

What could go wrong: a caller gets another caller's result; an item is written twice or never; a failed batch
leaves its waiters hanging or reports success; a leader keeps the lead forever; and, in the service: a batch whose
COMMIT took effect but reported failure makes an account receive an answer other than the stored one; one account's
bad request (a skipped counter) refuses or fails the others in its batch; a record that fails halfway leaves its
charge or leaf behind, or charges another request twice when the batch is run again alone."""

from __future__ import annotations

import json
import threading
import time

import pytest

from dprag.audit.protocol.errors import StoreUnavailableError
from dprag.audit.provider.group_commit import BatchFailed, GroupCommitter
from dprag.audit.testing import window as fx


class _Writer:
    """A write_batch that records every batch; ``hold`` stalls the first batch so that the others queue behind it."""

    def __init__(self, hold: float = 0.0, fail_if=lambda item: False):
        self.batches: list[list] = []
        self.hold, self.fail_if = hold, fail_if
        self.lock = threading.Lock()

    def __call__(self, items: list) -> list:
        with self.lock:
            first = not self.batches
            self.batches.append(list(items))
        if first and self.hold:
            time.sleep(self.hold)
        if any(self.fail_if(i) for i in items):
            raise RuntimeError("the batch's transaction failed")
        return [("done", i) for i in items]


def _run_threads(committer: GroupCommitter, items: list, stagger: float = 0.0) -> dict:
    out: dict = {}

    def one(item) -> None:
        try:
            out[item] = committer.commit(item)
        except BatchFailed:
            out[item] = "failed"
        except KeyboardInterrupt:  # raised in the leader's own thread
            out[item] = "interrupted"

    threads = []
    for it in items:
        th = threading.Thread(target=one, args=(it,))
        th.start()
        threads.append(th)
        if stagger:
            time.sleep(stagger)
    for th in threads:
        th.join(30)
    assert not any(th.is_alive() for th in threads), "a caller was left waiting"
    return out


def test_a_lone_answer_is_its_own_batch():
    w = _Writer()
    c = GroupCommitter(w)
    assert c.commit("a") == ("done", "a") and c.commit("b") == ("done", "b")
    assert w.batches == [["a"], ["b"]] and (c.batches, c.items) == (2, 2)


def test_answers_queued_behind_a_batch_share_the_next_one_and_each_gets_its_own_result():
    w = _Writer(hold=0.3)
    c = GroupCommitter(w)
    items = [f"q{i}" for i in range(16)]
    out = _run_threads(c, items, stagger=0.005)
    assert out == {i: ("done", i) for i in items}
    written = [i for b in w.batches for i in b]
    assert sorted(written) == sorted(items)  # each exactly once
    assert len(w.batches) < len(items) and max(len(b) for b in w.batches) > 1
    assert c.items == 16 and c.batches == len(w.batches)


def test_a_failed_batch_fails_every_answer_in_it_and_only_those():
    w = _Writer(hold=0.3, fail_if=lambda item: item == "bad")
    c = GroupCommitter(w)
    items = ["first", "bad", *[f"q{i}" for i in range(8)]]
    out = _run_threads(c, items, stagger=0.005)
    failed_batch = next(b for b in w.batches if "bad" in b)
    for item in items:
        assert out[item] == ("failed" if item in failed_batch else ("done", item))
    assert len(failed_batch) > 1  # the test exercised a shared failure, not a lone one
    # the lead was handed on: later answers still commit
    assert c.commit("later") == ("done", "later")


def test_an_interrupt_in_the_leader_fails_its_batch_and_passes_the_lead_on():
    """The leader's thread is interrupted (KeyboardInterrupt) while it writes a batch: it raises the interrupt, every
    waiter in the batch gets BatchFailed (none is left waiting), and the next caller leads as usual."""
    calls = []

    def write(items):
        calls.append(list(items))
        if len(calls) == 1:
            time.sleep(0.3)  # the others queue meanwhile
        if len(calls) == 2:
            raise KeyboardInterrupt
        return [("done", i) for i in items]

    c = GroupCommitter(write)
    out = _run_threads(c, [f"q{i}" for i in range(6)], stagger=0.02)
    second = calls[1]
    assert out[second[0]] == "interrupted" and all(out[i] == "failed" for i in second[1:])
    assert out[calls[0][0]] == ("done", calls[0][0])
    assert c.commit("after") == ("done", "after")


def test_no_batch_exceeds_its_bound():
    w = _Writer(hold=0.3)
    c = GroupCommitter(w, max_batch=3)
    items = [f"q{i}" for i in range(12)]
    out = _run_threads(c, items, stagger=0.003)
    assert out == {i: ("done", i) for i in items}
    assert max(len(b) for b in w.batches) <= 3


def test_a_writer_returning_the_wrong_count_fails_the_batch():
    c = GroupCommitter(lambda items: [])
    with pytest.raises(BatchFailed):
        c.commit("a")
    assert (c.batches, c.items) == (0, 0)


def test_a_batch_committed_but_reported_failed_gives_every_account_the_stored_answer(tmp_path):
    """The connection is lost during the batch's COMMIT after it took effect: every caller stores its answer again
    alone, finds the stored one (the first stored answer wins) and returns exactly it — the receipts all verify."""
    accounts = {f"acct{i}": "clinic" for i in range(6)}
    svc = fx.open_service(tmp_path / "svc", accounts=accounts)
    real = svc._answers._write_batch
    lost: list = []

    def commit_then_lose(items):
        real(items)  # committed
        lost.append(len(items))
        raise StoreUnavailableError("connection lost during COMMIT")

    svc._answers._write_batch = commit_then_lose
    clients = {a: fx.client(svc, a) for a in accounts}
    questions = {a: c.request(f"asthma protocol inhaler patient {a}") for a, c in clients.items()}
    got, errors = _ask_all(svc, clients, questions)
    assert not errors, errors
    assert sum(lost) == len(accounts)  # every answer went through a lost batch
    for a in clients:  # what each account received is what the store holds for it
        stored = json.loads(svc.aud.served(a, 1))["served"]
        assert got[a].answer == stored["answer"] and got[a].receipt == stored["receipt"]
    v = fx.export_and_verify(svc, tmp_path, clients)
    assert v.verdict == "PASS", v.reasons[:3]
    assert v.checked["receipts_accepted"] == len(accounts)


def _stall_first_batch(committer: GroupCommitter, seconds: float) -> list:
    """Make ``committer``'s first batch wait ``seconds`` before it runs, so that requests arriving meanwhile queue
    into the next one; returns the list of batch sizes as they run."""
    real, sizes = committer._write_batch, []

    def stalled(items):
        sizes.append(len(items))
        if len(sizes) == 1:
            time.sleep(seconds)
        return real(items)

    committer._write_batch = stalled
    return sizes


def _ask_all(svc, clients: dict, questions: dict, stagger: float = 0.01) -> tuple[dict, dict]:
    got, errors = {}, {}

    def run(a: str) -> None:
        try:
            got[a] = clients[a].send(svc, questions[a])
        except Exception as e:  # noqa: BLE001 - reported below
            errors[a] = e

    threads = []
    for a in clients:
        th = threading.Thread(target=run, args=(a,))
        th.start()
        threads.append(th)
        time.sleep(stagger)
    for th in threads:
        th.join(60)
    return got, errors


def _verify(svc, tmp_path, clients) -> object:
    from dprag.audit.provider.recovery import check_spend

    check_spend(svc)  # stored spend == the openings' charges, exactly
    return fx.export_and_verify(svc, tmp_path, clients)


def test_a_request_refused_inside_a_batch_is_refused_alone(tmp_path):
    """Two different requests signed for one account's counter 1 (a broken or hostile client) both pass the early
    admission check and share a record batch with five other accounts' requests: the re-check inside the batch
    records the first and refuses the second (signed, counter not consumed) without failing the batch — the other
    requests are recorded in it and answered — and the bundle PASSes."""
    from dprag.audit.protocol.errors import RequestError

    accounts = {f"acct{i}": "clinic" for i in range(6)}
    svc = fx.open_service(tmp_path / "svc", accounts=accounts)
    sizes = _stall_first_batch(svc._records, 0.4)
    clients = {a: fx.client(svc, a) for a in accounts}
    twin = fx.client(svc, "acct5")  # the same account's key, its own counter: it signs counter 1 again
    clients["acct5-twin"] = twin
    questions = {a: c.request(f"asthma protocol inhaler patient {a}") for a, c in clients.items()}
    assert questions["acct5"].signed["counter"] == questions["acct5-twin"].signed["counter"] == 1
    got, errors = _ask_all(svc, clients, questions)
    assert len(errors) == 1 and set(errors) <= {"acct5", "acct5-twin"}, errors
    (refused,) = errors.values()
    assert isinstance(refused, RequestError) and "already used by another request" in str(refused)
    assert refused.refusal is not None and refused.refusal["consumed"] is False
    assert len(got) == 6 and max(sizes) > 1  # the refusal shared a batch with others...
    assert svc._records.items == 7  # ...and every batch committed: none failed over to running alone
    assert svc.ledger.size == 1 + 6
    v = _verify(svc, tmp_path, {a: c for a, c in clients.items() if a not in errors})
    assert v.verdict == "PASS", v.reasons[:3]


def test_a_record_failing_halfway_rolls_its_batch_back_and_each_request_runs_again_alone(tmp_path):
    """One request's record fails after the filter has charged it (inside the batch's transaction): the batch rolls
    back, every request in it is recorded again alone — the failing one fails with nothing charged or appended, the
    others are answered, each charged once — and the bundle PASSes with exactly their leaves."""
    accounts = {f"acct{i}": "clinic" for i in range(6)}
    svc = fx.open_service(tmp_path / "svc", accounts=accounts)
    sizes = _stall_first_batch(svc._records, 0.4)
    clients = {a: fx.client(svc, a) for a in accounts}
    real = svc._append_query

    def fail_for_acct3(pos, signed, *rest):
        if signed["account"] == "acct3":
            raise RuntimeError("the disk filled up halfway through this record")
        return real(pos, signed, *rest)

    svc._append_query = fail_for_acct3  # after the charge (MuRAG.select ran), before the leaf
    questions = {a: c.request(f"asthma protocol inhaler patient {a}") for a, c in clients.items()}
    got, errors = _ask_all(svc, clients, questions)
    assert set(errors) == {"acct3"} and isinstance(errors["acct3"], RuntimeError), errors
    assert len(got) == 5 and max(sizes) > 1  # the failure was inside a shared batch
    assert svc._records.items < 6  # that batch did not commit (its requests ran again alone)
    assert svc.ledger.size == 1 + 5  # genesis and the five recorded once each
    v = _verify(svc, tmp_path, {a: c for a, c in clients.items() if a != "acct3"})
    assert v.verdict == "PASS", v.reasons[:3]
    assert v.checked["receipts_accepted"] == 5
