"""The demo's latency floor (lab/demo/latency.py): recording changes no answer; the floor is one padded batch."""

import numpy as np

from dprag.accounting.protocols import Prompt
from dprag.audit.testing.toy import ToyGenerator
from dprag.lab.demo.latency import Recording, latency_sample
from dprag.rag_adapters.generator import tiny_llama


def test_recording_passes_every_call_through_and_keeps_the_largest_batch():
    gen = tiny_llama(0)
    rec = Recording(gen)
    prompts = [Prompt("q?", ("a record",)), Prompt("q?", ("another record",)), Prompt("q?")]
    assert rec.generate_many(prompts, 3) == gen.generate_many(prompts, 3)
    assert rec.generate(prompts[0], 3) == gen.generate(prompts[0], 3)
    rec.generate_many(prompts[:1], 2)
    batch = rec.take()
    assert batch == (prompts, 3) and rec.take() is None  # the largest since the last take, then nothing
    assert rec.max_positions == gen.max_positions  # attributes read through


def test_latency_sample_times_the_floor_and_npr_per_question():
    gen = tiny_llama(0)
    prompts = [Prompt("q?", ("a record",)), Prompt("q?")]
    lat = latency_sample(gen, [(0.5, (prompts, 3), Prompt("q?", ("a", "b")), 3)] * 2)
    assert lat["questions"] == 2 and lat["floor"]["median"] > 0 and lat["npr"]["median"] > 0
    assert lat["ratio_private_to_floor"] == float(np.median([0.5 / r["floor"] for r in lat["rows"]]))
    assert [r["private"] for r in lat["rows"]] == [0.5, 0.5]  # the served time is the one given, not re-measured
    assert latency_sample(ToyGenerator(), [(0.5, (prompts, 3), prompts[0], 3)]) is None  # no padded session
    assert latency_sample(gen, []) is None
