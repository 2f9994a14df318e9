"""DP-KSA's voters' calls on a text-only (hosted) generator run concurrently with a bound (issue 25, item 3).

What is checked, against the sequential behaviour written out here (a generator with only ``generate`` /
``generate_many`` one after another, which is what ``TextOnlyGenerator`` did before):

- the answer, its info and the randomness drawn are identical for every concurrency limit, seeded, even when the
  calls complete in another order than they were issued;
- no more calls are in flight than the limit (the smaller of the parameters' and the generator's), and limit 1
  calls one at a time on the calling thread;
- a voter whose call fails abstains exactly as before (a permanent failure: abstains; a transient one: asked once
  more alone, answers; a non-string answer: abstains);
- one answer costs m + 1 calls (``calls_per_answer``, ``info["llm_calls"]``);
- a bad limit is an ``InvalidParameterError`` naming ``max_concurrency``.

No wall time is asserted (benchmarks/bench_hosted.py measures it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import re
import threading
import time

import numpy as np
import pytest
from _rag_doubles import Docs

from dprag.accounting.noise.source import RandomSource
from dprag.accounting.protocols import Prompt
from dprag.accounting.rag.ksa import (
    DEFAULT_MAX_CONCURRENCY,
    CallFailed,
    DpKsaPureParameters,
    TextOnlyGenerator,
    as_text_generator,
    call_each,
    text_voter_responses,
)
from dprag.errors import InvalidParameterError

M = 20
DOCS = [f"record {i} inhaler protocol ANSWER: zorvatin dosage" for i in range(32)] + [
    f"note {i} garden weather ANSWER: rain umbrella" for i in range(12)
]
LIST = np.array(list(range(36)) + [-1] * 4, dtype=np.int64)  # 40 positions: 2 per voter
PARAMS = DpKsaPureParameters(m=M, epsilon_em=2.0, epsilon_ptr=4.0, ptr_delta=1e-6, max_keywords=3)


def llm(text: str) -> str:
    """A deterministic 'hosted LLM': the released keywords, else the first context's ANSWER words, else 'unknown'."""
    kw = re.search(r"Keywords: ([^\n]+)", text)
    if kw:
        return kw.group(1).replace(",", " ") + " final"
    found = re.findall(r"ANSWER:\s*([^\n]+)", text)
    return found[0] if found else "unknown words"


class Sequential:
    """The behaviour before: one call after another (the former ``TextOnlyGenerator.generate_many``); no
    ``generate_each``, so DP-KSA goes through ``common.voter_responses``."""

    def __init__(self, complete):
        self._one = TextOnlyGenerator(complete, max_concurrency=1)

    def generate(self, prompt, n):
        return self._one.generate(prompt, n)

    def generate_many(self, prompts, n):
        return [self.generate(p, n) for p in prompts]


def _run(params, generator, seed: bytes, history=()):
    src = RandomSource.from_seed(b"k" * 32, seed)
    ans = params.respond("which drug treats asthma?", LIST, Docs(DOCS), generator, source=src, history=history)
    after = src.uniform_below(2**62, 4).tolist()  # what is left of the stream: the same draws were consumed
    info = {k: v for k, v in ans.info.items() if k != "max_concurrency"}
    return ans.text, info, ans.events, ans.retrieved.tolist(), ans.charged.tolist(), after


def _with(**kw):
    return dataclasses.replace(PARAMS, **kw)


class Jittered:
    """``llm`` behind a latency that depends on the prompt (0 or 30 ms by a hash of its text), so that concurrent
    calls complete out of issue order; records the order calls started and returned in."""

    def __init__(self, complete=llm):
        self.complete, self.started, self.returned = complete, [], []
        self.lock = threading.Lock()

    def __call__(self, text):
        with self.lock:
            self.started.append(text)
        if hashlib.sha256(text.encode()).digest()[0] % 2:
            time.sleep(0.03)
        out = self.complete(text)
        with self.lock:
            self.returned.append(text)
        return out


# -- identical answers for every limit ---------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [b"a", b"b", b"c"])
def test_concurrent_and_sequential_answers_are_identical(seed):
    before = _run(PARAMS, Sequential(llm), seed)
    assert before[1]["llm_calls"] == M + 1 and before[1]["released"]  # keywords released: not a vacuous check
    for limit in (1, 2, 3, DEFAULT_MAX_CONCURRENCY, M, 64):
        assert _run(_with(max_concurrency=limit), TextOnlyGenerator(llm), seed) == before, limit
        assert _run(PARAMS, TextOnlyGenerator(llm, max_concurrency=limit), seed) == before, limit
    hist = (("earlier question", "earlier answer"),)
    assert _run(PARAMS, TextOnlyGenerator(llm), seed, hist) == _run(PARAMS, Sequential(llm), seed, hist)


def test_identical_even_when_calls_complete_out_of_order():
    seq, conc = Jittered(), Jittered()
    assert _run(_with(max_concurrency=M), TextOnlyGenerator(conc), b"o") == _run(PARAMS, Sequential(seq), b"o")
    voters_seq = seq.started[:M]
    assert sorted(conc.started) == sorted(seq.started)
    slow = [hashlib.sha256(t.encode()).digest()[0] % 2 == 1 for t in voters_seq]
    assert any(a and not b for a, b in itertools.pairwise(slow))  # a slow call before a fast one in prompt order ...
    assert conc.returned[:M] != voters_seq  # ... so they returned in another order: the answer did not change


# -- the limit ---------------------------------------------------------------------------------------------------
class InFlight:
    """Records the most calls in flight at once, and the threads that made them."""

    def __init__(self, latency=0.05):
        self.latency, self.now, self.most, self.threads = latency, 0, 0, set()
        self.lock = threading.Lock()

    def __call__(self, text):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.threads.add(threading.current_thread().name)
        time.sleep(self.latency)
        with self.lock:
            self.now -= 1
        return llm(text)


@pytest.mark.parametrize("params_limit,gen_limit", [(1, 8), (3, 8), (8, 8), (8, 2), (32, 32)])
def test_the_limit_is_respected(params_limit, gen_limit):
    rec = InFlight()
    _run(_with(max_concurrency=params_limit), TextOnlyGenerator(rec, max_concurrency=gen_limit), b"l")
    bound = min(params_limit, gen_limit, M)
    assert 1 <= rec.most <= bound
    if bound > 1:
        assert rec.most >= 2  # concurrent (reaching the bound itself depends on the box's load)
    else:
        assert rec.threads == {threading.current_thread().name}  # limit 1: one after another, no thread


def test_generate_many_is_bounded_ordered_and_raises_the_first_failure():
    rec = InFlight(0.02)
    gen = TextOnlyGenerator(rec, max_concurrency=3)
    prompts = [Prompt("q", (f"d ANSWER: w{i}",)) for i in range(10)]
    assert gen.generate_many(prompts, 4) == [f"w{i}" for i in range(10)]
    assert gen.generate_each(prompts, 4, max_concurrency=16) == [f"w{i}" for i in range(10)]
    assert rec.most <= 3

    def fails(text):
        if "w3" in text or "w7" in text:
            raise TimeoutError(text.split("ANSWER: ")[1].split()[0])
        return llm(text)

    with pytest.raises(TimeoutError, match="w3"):  # the first failed prompt's, whatever finished first
        TextOnlyGenerator(fails).generate_many(prompts, 4)
    each = TextOnlyGenerator(fails).generate_each(prompts, 4)
    assert each == [None if i in (3, 7) else f"w{i}" for i in range(10)]


# -- failing calls -----------------------------------------------------------------------------------------------
def _fails_on(word):
    def complete(text):
        if word in text and "Keywords" not in text:
            raise TimeoutError("504 gateway timeout")
        return llm(text)

    return complete


def _transient(word):
    seen, lock = set(), threading.Lock()

    def complete(text):
        with lock:
            first = word in text and text not in seen
            seen.add(text)
        if first:
            raise ConnectionError("429 too many requests")
        return llm(text)

    return complete


@pytest.mark.parametrize("seed", [b"f1", b"f2"])
@pytest.mark.parametrize("word", ["record 3 ", "zorvatin", "note"])
def test_a_failing_call_behaves_as_before(word, seed):
    # a call that fails (always, for its prompt): that voter abstains, as before, whatever the limit
    before = _run(PARAMS, Sequential(_fails_on(word)), seed)
    for limit in (1, DEFAULT_MAX_CONCURRENCY, M):
        assert _run(_with(max_concurrency=limit), TextOnlyGenerator(_fails_on(word)), seed) == before
    if word == "zorvatin":  # the readers abstained: nothing released (the failures did matter)
        assert not before[1]["released"] and _run(PARAMS, Sequential(llm), seed)[1]["released"]


@pytest.mark.parametrize("seed", [b"f1", b"f2"])
def test_a_transient_failure_is_asked_once_more_alone(seed):
    # every voter's prompt naming "record 1" fails on its first call only: each such voter is asked once more alone
    # and answers, so the answer is the one without failures, for every limit. (Before, the sequential batch
    # stopped at the first failure and asked every prompt alone once: a voter after it whose first call failed
    # abstained, so whether a voter abstained depended on the voters before it; now each voter's outcome is a
    # function of its own prompt: at most two calls, alone.)
    clean = _run(PARAMS, Sequential(llm), seed)
    for limit in (1, DEFAULT_MAX_CONCURRENCY, M):
        assert _run(_with(max_concurrency=limit), TextOnlyGenerator(_transient("record 1")), seed) == clean


def test_failing_voters_abstain_and_are_asked_once_more():
    calls = []
    lock = threading.Lock()

    def complete(text):
        with lock:
            calls.append(text)
        if "note 5 " in text:
            raise TimeoutError("504")
        if "note 6 " in text:
            return 42  # not a string: that voter abstains too
        return llm(text)

    gen = TextOnlyGenerator(complete)
    prompts = [Prompt("q", (d,)) for d in ("note 5 x", "note 6 y", "a ANSWER: ok")]
    assert text_voter_responses(gen, prompts, 4, 8) == [None, None, "ok"]
    assert len(calls) == 5  # three, then the two failed ones once more
    assert text_voter_responses(Sequential(complete), prompts, 4, 8) == [None, None, "ok"]  # as before


def test_a_generator_with_its_own_batch_is_used_as_is():
    class Batch:
        def __init__(self):
            self.batches = 0

        def generate(self, prompt, n):
            raise AssertionError("the batch is used")

        def generate_many(self, prompts, n):
            self.batches += 1
            return ["zorvatin"] * len(prompts)

    b = Batch()
    assert text_voter_responses(b, [Prompt("q")] * 5, 4, 8) == ["zorvatin"] * 5 and b.batches == 1


# -- calls per answer --------------------------------------------------------------------------------------------
def test_one_answer_costs_m_plus_one_calls():
    rec = InFlight(0.0)
    counted = []
    gen = TextOnlyGenerator(lambda text: counted.append(text) or rec(text))
    src = RandomSource.from_seed(b"k" * 32, b"n")
    ans = PARAMS.respond("which drug treats asthma?", LIST, Docs(DOCS), gen, source=src)
    assert len(counted) == PARAMS.calls_per_answer == ans.info["llm_calls"] == M + 1
    assert ans.info["max_concurrency"] == DEFAULT_MAX_CONCURRENCY == PARAMS.max_concurrency == 8
    assert PARAMS.latency_rounds == 3 + 1  # ⌈20 / 8⌉ voter rounds, then the final answer
    assert _with(max_concurrency=1).latency_rounds == M + 1
    assert _with(max_concurrency=M).latency_rounds == 2
    assert _with(m=5, max_concurrency=64).calls_per_answer == 6


# -- bad limits --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -1, True, False, 2.0, 2.5, "4", None])
def test_a_bad_limit_is_a_typed_error_naming_the_field(bad):
    for make in (
        lambda: _with(max_concurrency=bad),
        lambda: TextOnlyGenerator(llm, max_concurrency=bad),
        lambda: as_text_generator(llm, max_concurrency=bad),
        lambda: call_each(str, [1, 2], bad),
        lambda: text_voter_responses(TextOnlyGenerator(llm), [Prompt("q")], 4, bad),
    ):
        with pytest.raises(InvalidParameterError, match="max_concurrency") as e:
            make()
        assert e.value.field == "max_concurrency"
    if bad is not None:
        with pytest.raises(InvalidParameterError, match="max_concurrency"):
            TextOnlyGenerator(llm).generate_each([Prompt("q")], 4, max_concurrency=bad)


def test_call_each_keeps_order_and_failures_in_place():
    def f(x):
        if x == 2:
            raise ValueError("two")
        time.sleep(0.001 * (5 - x))
        return x * 10

    for limit in (1, 2, 5):
        out = call_each(f, [0, 1, 2, 3, 4], limit)
        assert [o if not isinstance(o, CallFailed) else "failed" for o in out] == [0, 10, "failed", 30, 40]
        assert isinstance(out[2], CallFailed) and str(out[2].error) == "two"
    assert call_each(f, [], 4) == []
