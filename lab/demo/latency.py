"""A private answer's latency beside its hardware floor and beside non-private RAG, measured in the demo's own run
(issue 25 item 3; spec/demo.md "What one run does", step 7).

``Recording`` wraps the demo's generator and keeps the prompts of every ``generate_many`` batch (the voters' m
rows and the fallback's row of one private answer); after serving, ``latency_sample`` re-runs, for a sample of
the honest questions, the same prompts as ONE coupled padded batch (``start_padded_ids``: one masked prefill,
then (B, 1) decode steps with standard attention, none of the row independence the private path keeps) for
the same number of tokens — the floor — and Non-Private-RAG on the same question alone; the served request's
wall time (the whole request: embedding, retrieval noise, charge, ledger, voters, selection, signatures)
is compared with both.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Batch:
    """One served request's generation as the recorder saw it: the largest ``generate_many`` batch (the voters' m
    rows and the fallback's row), its token budget and outputs; ``seconds`` / ``cpu_seconds``: wall and process CPU
    time of every generator call of the request (``cpu_seconds`` counts every thread of the process)."""

    prompts: list
    max_new_tokens: int
    outputs: list
    seconds: float
    cpu_seconds: float
    calls: int


class Recording:
    """The generator, recording the prompts, token budget, outputs and time of every ``generate_many`` batch and
    the time of every ``generate`` call (public inputs and outputs are unchanged: every call goes to the wrapped
    generator)."""

    def __init__(self, inner):
        self.inner = inner
        self._batches: list[tuple[list, int, list]] = []
        self._seconds = self._cpu = 0.0
        self._calls = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _timed(self, fn, *args):
        t, c = time.perf_counter(), time.process_time()
        try:
            return fn(*args)
        finally:
            self._seconds += time.perf_counter() - t
            self._cpu += time.process_time() - c
            self._calls += 1

    def generate_many(self, prompts, max_new_tokens):
        prompts = list(prompts)
        out = self._timed(self.inner.generate_many, prompts, max_new_tokens)
        self._batches.append((prompts, int(max_new_tokens), list(out)))
        return out

    def generate(self, prompt, max_new_tokens):
        return self._timed(self.inner.generate, prompt, max_new_tokens)

    def take(self) -> Batch | None:
        """The largest batch recorded since the last ``take`` (a private answer's voters and fallback) with the time
        of every generator call since then, or None when no batch was recorded."""
        batches, self._batches = self._batches, []
        seconds, cpu, calls = self._seconds, self._cpu, self._calls
        self._seconds = self._cpu = 0.0
        self._calls = 0
        if not batches:
            return None
        prompts, n, outputs = max(batches, key=lambda b: len(b[0]))
        return Batch(prompts, n, outputs, seconds, cpu, calls)


def floor_seconds(generator, prompts: Sequence, max_new_tokens: int) -> float:
    """Prefill ``prompts`` and decode ``max_new_tokens`` tokens in one coupled padded batch."""
    seqs = [generator.render(p, reserve=max_new_tokens + 1) for p in prompts]
    t = time.perf_counter()
    s = generator.start_padded_ids(seqs, headroom=max_new_tokens + 1)
    for _ in range(max_new_tokens - 1):
        s.advance_each([int(x) for x in np.argmax(s.logits(), axis=1)])
    s.close()
    return time.perf_counter() - t


def latency_sample(generator, samples: Sequence[tuple[float, Batch, object, int]]) -> dict | None:
    """``samples``: (served seconds, the request's recorded ``Batch``, the Non-Private-RAG prompt, its tokens) per
    question. Returns the medians / p90s, the per-question median ratios and the split of the served time
    (``split``), or None when the generator has no padded session (the weight-free modes)."""
    if not samples or not hasattr(generator, "start_padded_ids"):
        return None
    rows = []
    for served, batch, npr_prompt, npr_tokens in samples:
        c = time.process_time()
        fl = floor_seconds(generator, batch.prompts, batch.max_new_tokens)
        floor_cpu = time.process_time() - c
        t = time.perf_counter()
        generator.generate(npr_prompt, npr_tokens)
        rows.append(
            {
                "private": served,
                "generation": batch.seconds,
                "generation_cpu": batch.cpu_seconds,
                "rest": served - batch.seconds,
                "floor": fl,
                "floor_cpu": floor_cpu,
                "npr": time.perf_counter() - t,
                "rows": len(batch.prompts),
            }
        )

    def stat(k):
        v = np.array([r[k] for r in rows])
        return {"median": float(np.median(v)), "p90": float(np.percentile(v, 90))}

    return {
        "questions": len(rows),
        "private": stat("private"),
        "floor": stat("floor"),
        "npr": stat("npr"),
        "ratio_private_to_floor": float(np.median([r["private"] / r["floor"] for r in rows])),
        "ratio_private_to_npr": float(np.median([r["private"] / r["npr"] for r in rows])),
        "split": {k: stat(k) for k in ("generation", "generation_cpu", "rest", "floor_cpu")}
        | {
            "ratio_generation_to_floor": float(np.median([r["generation"] / r["floor"] for r in rows])),
            # CPU seconds do not depend on what else the shared machine runs at that moment (wall seconds do)
            "ratio_generation_cpu_to_floor_cpu": float(
                np.median([r["generation_cpu"] / r["floor_cpu"] for r in rows if r["floor_cpu"] > 0] or [np.nan])
            ),
        },
        "rows": rows,
    }


def served_split(served: Sequence[tuple[float, Batch | None]], loads: Sequence[float]) -> dict | None:
    """Over every served private answer (served seconds, its ``Batch``): medians of the request's wall time, of its
    generation (wall and process CPU), of the rest of the request (embedding, retrieval noise, the charge's write
    transaction, ledger, checkpoint and receipt signatures, the answer's durable commit, the client's checks) and of
    the CPU share of the generation (CPU seconds / (wall seconds × cores): below 1 the process waited for the
    machine), beside the 1-minute load average sampled at each request (``loads``)."""
    rows = [(s, b) for s, b in served if b is not None]
    if not rows:
        return None
    cores = os.cpu_count() or 1
    med = lambda v: float(np.median(np.asarray(v, dtype=float)))  # noqa: E731
    return {
        "requests": len(rows),
        "served": med([s for s, _ in rows]),
        "generation": med([b.seconds for _, b in rows]),
        "generation_cpu": med([b.cpu_seconds for _, b in rows]),
        "rest": med([s - b.seconds for s, b in rows]),
        "generation_share": med([b.seconds / s for s, b in rows if s > 0]),
        "cpu_share": med([b.cpu_seconds / (b.seconds * cores) for _, b in rows if b.seconds > 0]),
        "generator_calls": med([b.calls for _, b in rows]),
        "cores": cores,
        "load": {"min": float(min(loads)), "median": med(loads), "max": float(max(loads))} if loads else None,
    }
