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

import time
from collections.abc import Sequence

import numpy as np


class Recording:
    """The generator, recording the prompts and token budget of every ``generate_many`` batch (public inputs
    and outputs are unchanged: every call goes to the wrapped generator)."""

    def __init__(self, inner):
        self.inner = inner
        self._batches: list[tuple[list, int]] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate_many(self, prompts, max_new_tokens):
        self._batches.append((list(prompts), int(max_new_tokens)))
        return self.inner.generate_many(prompts, max_new_tokens)

    def generate(self, prompt, max_new_tokens):
        return self.inner.generate(prompt, max_new_tokens)

    def take(self) -> tuple[list, int] | None:
        """The largest batch recorded since the last ``take`` (a private answer's voters and fallback), or None."""
        batches, self._batches = self._batches, []
        return max(batches, key=lambda b: len(b[0])) if batches else None


def floor_seconds(generator, prompts: Sequence, max_new_tokens: int) -> float:
    """Prefill ``prompts`` and decode ``max_new_tokens`` tokens in one coupled padded batch."""
    seqs = [generator.render(p, reserve=max_new_tokens + 1) for p in prompts]
    t = time.perf_counter()
    s = generator.start_padded_ids(seqs, headroom=max_new_tokens + 1)
    for _ in range(max_new_tokens - 1):
        s.advance_each([int(x) for x in np.argmax(s.logits(), axis=1)])
    s.close()
    return time.perf_counter() - t


def latency_sample(generator, samples: Sequence[tuple[float, tuple[list, int], object, int]]) -> dict | None:
    """``samples``: (served seconds, the recorded batch, the Non-Private-RAG prompt, its tokens) per question.
    Returns the medians / p90s and the per-question median ratios, or None when the generator has no padded
    session (the weight-free modes)."""
    if not samples or not hasattr(generator, "start_padded_ids"):
        return None
    rows = []
    for served, (prompts, n), npr_prompt, npr_tokens in samples:
        fl = floor_seconds(generator, prompts, n)
        t = time.perf_counter()
        generator.generate(npr_prompt, npr_tokens)
        rows.append({"private": served, "floor": fl, "npr": time.perf_counter() - t, "rows": len(prompts)})

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
        "rows": rows,
    }
