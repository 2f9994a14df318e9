"""Canary exposure per channel: how often a record's unique secret appears in an answer (the generation
channel) and how often the record is cited (the retrieval channel).

Every clinic record carries a unique secret (``datasets.clinic.Canary``: a 6-digit code). Over *all* the
answers of an attack session (every query of every target, not only the target's own), a record is

* **exposed** in an answer when ``metrics.contains_answer(answer, secret)`` (the secret as a run of whole
  normalised tokens) or, for a one-token secret, when it is one of the answer's alphanumeric words
  ("PIN:123456" exposes 123456);
* **cited** by an answer when its document id is among the documents the answer's mechanism used
  (``RagAnswer.retrieved``; what a citation channel would reveal if it released the ids -- the experiment
  pipelines do not release them, the audited service does, ``coalition_probe``).

For held-out (non-member) records the same count is the chance rate: the secret was never in the corpus, so
an answer containing it guessed it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from dprag.rag_adapters.metrics import answer_tokens, contains_answer

_WORD = re.compile(r"[a-z0-9]+")


@dataclass
class ExposureCounter:
    """Accumulates, per record key, the answers exposing its secret and the answers citing it."""

    secrets: dict[str, str]
    doc_ids: dict[str, int | None] = field(default_factory=dict)  # key -> corpus id (None: not in the corpus)
    answers: int = 0
    exposed: dict[str, int] = field(default_factory=dict)
    cited: dict[str, int] = field(default_factory=dict)

    def __post_init__(self):
        self._single = {}
        self._multi = {}
        for k, s in self.secrets.items():
            toks = answer_tokens(s)
            if len(toks) == 1:
                self._single.setdefault(toks[0], []).append(k)
            elif toks:
                self._multi[k] = s
        self._by_id = {i: k for k, i in self.doc_ids.items() if i is not None}
        self.exposed = {k: 0 for k in self.secrets}
        self.cited = {k: 0 for k in self.secrets}

    def add(self, answer: str, retrieved: Iterable[int] = ()) -> None:
        self.answers += 1
        toks = set(answer_tokens(answer)) | set(_WORD.findall(answer.lower()))
        hit = set()
        for t in toks & self._single.keys():
            hit.update(self._single[t])
        for k, s in self._multi.items():
            if contains_answer(answer, s):
                hit.add(k)
        for k in hit:
            self.exposed[k] += 1
        for i in {int(x) for x in retrieved if int(x) >= 0}:
            k = self._by_id.get(i)
            if k is not None:
                self.cited[k] += 1

    def summary(self, keys: Sequence[str]) -> dict:
        """Over ``keys``: fraction of records exposed / cited at least once, and mean counts per record."""
        n = len(keys)
        if n == 0:
            return {
                "records": 0,
                "answers": self.answers,
                "exposed_records": None,
                "cited_records": None,
                "exposed_per_record": None,
                "cited_per_record": None,
            }
        return {
            "records": n,
            "answers": self.answers,
            "exposed_records": sum(self.exposed[k] > 0 for k in keys) / n,
            "cited_records": sum(self.cited[k] > 0 for k in keys) / n,
            "exposed_per_record": sum(self.exposed[k] for k in keys) / n,
            "cited_per_record": sum(self.cited[k] for k in keys) / n,
        }
