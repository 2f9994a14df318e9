"""The demo's latency floor (lab/demo/latency.py): recording changes no answer; the floor is one padded batch."""

import os

import numpy as np
import pytest

from dprag.accounting.protocols import Prompt
from dprag.audit.testing.toy import ToyGenerator
from dprag.lab.demo.latency import Batch, Recording, latency_sample, served_split
from dprag.rag_adapters.generator import tiny_llama


def test_recording_passes_every_call_through_and_keeps_the_largest_batch():
    gen = tiny_llama(0)
    rec = Recording(gen)
    prompts = [Prompt("q?", ("a record",)), Prompt("q?", ("another record",)), Prompt("q?")]
    assert rec.generate_many(prompts, 3) == gen.generate_many(prompts, 3)
    assert rec.generate(prompts[0], 3) == gen.generate(prompts[0], 3)
    rec.generate_many(prompts[:1], 2)
    batch = rec.take()
    # the largest since the last take, with its outputs, and the time of every call since (3 calls), then nothing
    assert (batch.prompts, batch.max_new_tokens, batch.outputs) == (prompts, 3, gen.generate_many(prompts, 3))
    assert batch.calls == 3 and batch.seconds > 0 and batch.cpu_seconds >= 0 and rec.take() is None
    rec.generate(prompts[0], 2)
    assert rec.take() is None  # a lone generate() call is no batch; its time does not leak into the next request
    rec.generate_many(prompts[:1], 2)
    assert rec.take().calls == 1
    assert rec.max_positions == gen.max_positions  # attributes read through


def test_latency_sample_times_the_floor_and_npr_per_question():
    gen = tiny_llama(0)
    prompts = [Prompt("q?", ("a record",)), Prompt("q?")]
    batch = Batch(prompts, 3, ["", ""], 0.2, 0.3, 1)
    lat = latency_sample(gen, [(0.5, batch, Prompt("q?", ("a", "b")), 3)] * 2)
    assert lat["questions"] == 2 and lat["floor"]["median"] > 0 and lat["npr"]["median"] > 0
    assert lat["ratio_private_to_floor"] == float(np.median([0.5 / r["floor"] for r in lat["rows"]]))
    assert [r["private"] for r in lat["rows"]] == [0.5, 0.5]  # the served time is the one given, not re-measured
    # the split: the recorded generation time, the rest of the request, generation against the floor
    assert [(r["generation"], r["rest"]) for r in lat["rows"]] == [(0.2, 0.5 - 0.2)] * 2
    assert lat["split"]["ratio_generation_to_floor"] == float(np.median([0.2 / r["floor"] for r in lat["rows"]]))
    cpu = [0.3 / r["floor_cpu"] for r in lat["rows"] if r["floor_cpu"] > 0]
    if cpu:  # the floor's CPU time can read 0 on a coarse process clock
        assert lat["split"]["ratio_generation_cpu_to_floor_cpu"] == float(np.median(cpu))
    assert latency_sample(ToyGenerator(), [(0.5, batch, prompts[0], 3)]) is None  # no padded session
    assert latency_sample(gen, []) is None


def test_served_split_medians_and_cpu_share():
    b = lambda wall, cpu: Batch([], 16, [], wall, cpu, 1)  # noqa: E731
    sp = served_split([(10.0, b(8.0, 8.0)), (20.0, b(12.0, 6.0)), (30.0, b(10.0, 20.0)), (5.0, None)], [1.0, 3.0, 2.0])
    cores = os.cpu_count() or 1
    assert (
        sp["requests"] == 3 and sp["served"] == 20.0 and sp["generation"] == 10.0 and sp["rest"] == 8.0
    )  # rests 2, 8, 20
    assert sp["generation_share"] == pytest.approx(0.6)  # median of 0.8, 0.6, 1/3
    assert sp["cpu_share"] == pytest.approx(1.0 / cores)  # median of 1, 0.5, 2 over the cores
    assert sp["load"] == {"min": 1.0, "median": 2.0, "max": 3.0}
    assert served_split([(1.0, None)], []) is None
