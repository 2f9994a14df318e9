"""The best-known settings of ``dprag experiment privacy-utility``: its defaults (spec/experiments.md §1.1).

Every value was chosen on the **tuning corpus**, the clinic corpus generated with seed ``TUNING_CORPUS_SEED``
= 1, which shares no record with the test corpus (seed 0) and whose dev questions are not the test questions of
any run; never on a test split, and never on a provider's own corpus. Where each value comes from:

- τ = 52.5 for every MuRAG cell on the MiniLM scale, and K = m = 10 for MuRAG-Ada's answer-level cells: the
  retrieval-coverage rule (``coverage_check``: the run's 100 dev questions served in order with the real
  ``select`` and an M = 1 filter, no LLM; the τ / m with the most questions holding ⌈T⌉ of their own records
  among the Top-K). Its output is ``results/coverage_check/seed1.json`` (a test re-reads it and checks these
  constants are its choices).
- m = 30 for MuRAG's cells (dev accuracy on the seed-1 dev split, docs/lab/privacy-utility.md §5.11), 2 key
  words and 16 answer tokens (§5.12; MuRAG-Ada's answer-level cells 24 tokens, and the ``answer-keys-v2``
  normaliser for every answer-vote cell: ``normalizer-check`` on a seed-1 run's stored voter answers,
  spec/answer-keys.md §2, ``results/normalizer_check/``), MuRAG-Ada's bins 20..90 width 1 (threshold error on seed-1 dev
  questions, ``bins_check``, §5.11), Non-Private-RAG's k = 3 (8/15 on the seed-1 dev split, §5.13).
- The switches that are free in ε (spec/accounting/rag.md §2–3, §5.1): public completion and the Non-RAG base
  measure for 000 Alg. 5, the seen selection with abstaining padded voters for answer-level voting, c = auto
  (the EM-margin rule), answers of up to 24 tokens.

A flag the user gives replaces the default for every method of the run (``--m 20`` runs every method with 20
voters); without it each method takes its own value from ``PER_METHOD``. ``--tuning-corpus-seed`` defaults to
``TUNING_CORPUS_SEED`` for the clinic dataset; grids given on the command line are then chosen on that corpus's
dev split. The settings of 000 Alg. 5 as printed need ``--no-public-completion --em-prior uniform``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

#: the clinic corpus every default was chosen on (disjoint from the test corpus, seed 0)
TUNING_CORPUS_SEED = 1
#: MuRAG's relevance threshold on the MiniLM 100·cosine scale (coverage rule on the seed-1 corpus)
MURAG_TAU = 52.5
#: MuRAG-Ada's bins LOW,HIGH,WIDTH for answer-level voting (seed-1 dev, docs/lab/privacy-utility.md §5.11)
ADA_ANSWER_VOTE_BINS = (20.0, 90.0, 1.0)
#: voters of MuRAG-Ada's answer-level cells (coverage rule on the seed-1 corpus)
ADA_ANSWER_VOTE_M = 10
#: the voters' answer length (tokens) of MuRAG-Ada's answer-level cells (seed-1 corpus, normalizer-check: 24 tokens
#: release more correct keys than 16 under both normalisers, spec/answer-keys.md §2)
ADA_ANSWER_VOTE_TOKENS = 24
#: voters of MuRAG's cells (seed-1 dev accuracy)
MURAG_M = 30
#: voters of every other voting method (the papers' smallest m)
OTHER_M = 10

#: run-wide defaults (CLI flag -> value); each is the best-known setting, chosen on the seed-1 corpus
RUN_WIDE: Mapping[str, object] = {
    "--max-tokens": 24,
    "--private-tokens": "0",
    "--public-completion": True,
    "--em-prior": "non-rag",
    "--answer-selection": "seen",
    "--abstain-empty": True,
    "--key-words": "2",
    "--answer-tokens": "16",
    "--docs-per-voter": "1",
    "--npr-k": "3",
    "--normalizer": "answer-keys-v2",
}

_ADA_ANSWER_VOTE: Mapping[str, object] = {
    "m": ADA_ANSWER_VOTE_M,
    "bins": ADA_ANSWER_VOTE_BINS,
    "answer_tokens": ADA_ANSWER_VOTE_TOKENS,
}

#: per-method defaults of the settings a run shares (m; the MiniLM-scale τ grid; MuRAG-Ada's bins)
PER_METHOD: Mapping[str, Mapping[str, object]] = {
    "murag": {"m": MURAG_M},
    "murag-history": {"m": MURAG_M},
    "murag-answer-vote": {"m": MURAG_M},
    "murag-answer-vote-history": {"m": MURAG_M},
    "murag-ada-answer-vote": _ADA_ANSWER_VOTE,
    "murag-ada-answer-vote-history": _ADA_ANSWER_VOTE,
}


def method_defaults(method: str, kind: str) -> dict:
    """The defaults of ``method`` on a retriever of score ``kind`` ("dense": MiniLM, "words": the toy overlap):
    ``m``, ``answer_tokens`` where the method has its own, and on the dense scale ``taus`` and (MuRAG-Ada's
    answer-level cells) ``bins``."""
    own = dict(PER_METHOD.get(method, {}))
    out: dict = {"m": int(own.get("m", OTHER_M))}  # type: ignore[call-overload]
    if "answer_tokens" in own:
        out["answer_tokens"] = int(own["answer_tokens"])  # type: ignore[call-overload]
    if kind == "dense":
        out["taus"] = (MURAG_TAU,)
        if "bins" in own:
            out["bins"] = own["bins"]
    return out


def coverage_choices(path: str | Path) -> dict:
    """The choices recorded in a ``coverage_check`` output file (its last line is the JSON result):
    {"tau": float, "ada_m": int}."""
    lines = [x for x in Path(path).read_text(encoding="utf-8").splitlines() if x.strip()]
    data = json.loads(lines[-1])
    return {"tau": float(data["chosen_tau"]), "ada_m": int(data["chosen_ada_m"])}
