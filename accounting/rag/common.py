"""Pieces shared by the DP-RAG algorithms: answers, Top-K with padding, random partition, vote histograms."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, SupportsInt

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

from ..errors import check_positive_int
from ..events import ComposedEvent, NoOpEvent, PrivacyEvent
from ..noise.source import RandomSource
from ..protocols import Retriever
from .containment import contained_responses

#: The padding document of 000 Algorithm 3 (an empty string).
EMPTY_DOCUMENT = ""


@dataclass
class RagAnswer:
    """What one algorithm run released and what it spent.

    ``events`` are the privacy events actually spent, in order; ``cost`` is the event the algorithm was
    charged for (its ex-ante worst case, which is what a filter must charge); ``retrieved`` are the
    document ids whose text reached a prompt; ``charged`` the ids charged to the per-document filter.
    """

    text: str
    token_ids: list[int] = field(default_factory=list)
    events: list[PrivacyEvent] = field(default_factory=list)
    cost: PrivacyEvent = field(default_factory=NoOpEvent)
    retrieved: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    charged: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    private_tokens: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def spent(self) -> PrivacyEvent:
        return ComposedEvent(tuple(self.events)) if self.events else NoOpEvent()


def top_k_padded(ids: npt.ArrayLike, scores: npt.ArrayLike, k: int) -> npt.NDArray[np.int64]:
    """000 Algorithm 3 (TOP-K): the k highest-scoring ids, padded with -1 (the empty document) to exactly k.

    Ties are broken by the smaller id, so the result is a deterministic function of (ids, scores).
    """
    k = check_positive_int("k", k)
    ids = np.asarray(ids, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float64)
    if ids.shape != scores.shape:
        raise InvalidParameterError("scores", "must have the same shape as ids")
    if len(ids) > k:
        part = np.argpartition(-scores, k - 1)[:k]
        # exact order among the chosen, ties by id; then any tie at the boundary resolved by id as well
        kth = scores[part].min()
        cand = np.flatnonzero(scores >= kth)
        order = np.lexsort((ids[cand], -scores[cand]))[:k]
        chosen = ids[cand][order]
    else:
        order = np.lexsort((ids, -scores))
        chosen = ids[order]
    out = np.full(k, -1, dtype=np.int64)
    out[: len(chosen)] = chosen
    return out


def exact_top_k(retriever: Retriever, query: str, k: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Ids and scores of the k most relevant documents (exact search); raises if k > corpus size."""
    n = len(retriever)
    if n == 0:
        raise InvalidParameterError("retriever", "corpus is empty")
    k = check_positive_int("k", k)
    if k > n:
        raise InvalidParameterError("k", f"must be <= corpus size {n}", k)
    scores = np.asarray(retriever.scores(query), dtype=np.float64)
    ids = top_k_padded(np.arange(n), scores, k)
    return ids, scores[ids]


def random_partition(ids: npt.ArrayLike, m: int, source: RandomSource) -> list[npt.NDArray[np.int64]]:
    """Uniformly random partition of ``ids`` into m parts of equal size (003 Alg. 2 step 4).

    A uniform permutation by Fisher–Yates with exact uniform integers from ``source``; part i is the
    i-th consecutive block of len(ids)/m ids (len(ids) must be a multiple of m).
    """
    m = check_positive_int("m", m)
    ids = np.asarray(ids, dtype=np.int64).copy()
    if len(ids) % m:
        raise InvalidParameterError("ids", f"length {len(ids)} must be a multiple of m={m}")
    n = len(ids)
    # Fisher–Yates: for i = n-1..1 swap ids[i] with ids[j], j uniform in [0, i]. One draw per i.
    for i in range(n - 1, 0, -1):
        j = int(source.uniform_below(i + 1, 1)[0])
        ids[i], ids[j] = ids[j], ids[i]
    k = n // m
    return [ids[i * k : (i + 1) * k] for i in range(m)]


def vote_histogram(
    logits: npt.ArrayLike, vocab_size: int | None = None
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Each voter's greedy next token (argmax of its logits row) and the histogram of those votes.

    Returns (votes, counts) with counts of length vocab_size (default: logits.shape[1]).
    """
    logits = np.asarray(logits)
    if logits.ndim != 2 or logits.shape[0] == 0:
        raise InvalidParameterError("logits", "must be a non-empty (voters, vocab) array")
    votes = np.argmax(logits, axis=1)
    counts = np.bincount(votes, minlength=vocab_size or logits.shape[1])
    return votes, counts


def documents_text(retriever: Retriever, ids: Iterable[SupportsInt]) -> tuple[str, ...]:
    """The texts of one voter's ``ids``; the padding id -1 is the empty document. A read that fails makes every
    document of the voter the empty document -- its prompt is then its empty-context prompt, a function of its own
    documents: a failure of a voter's prompt building is contained as one of its generator call is
    (spec/accounting/rag.md §6); nothing of the exception is kept."""
    got = [int(i) for i in ids]
    try:
        return tuple(EMPTY_DOCUMENT if i < 0 else retriever.document(i) for i in got)
    except Exception:  # noqa: BLE001 - contained: the voter holds empty documents, the same type on every corpus
        return (EMPTY_DOCUMENT,) * len(got)


def voter_responses(
    generator: Any, prompts: Sequence[Any], max_new_tokens: int, *, max_concurrency: int | None = None
) -> list[str | None]:
    """Every voter's response, ``None`` for a voter whose call failed: it abstains (spec/accounting/rag.md §6).

    ``containment.contained_responses``: one ``generate_many`` batch of the public shape, in which a failing voter is
    found and replaced by its empty-context prompt at that same shape, so every other voter's response is bit for
    bit what it is without the failure (a failure of the public rows alone raises ``GenerationFailedError``, a fixed
    message); or, on a generator with ``generate_each`` (one call per prompt), every prompt asked alone and a failed
    call once more. After the charge no exception depends on the documents except through the mechanism: a voter's
    response, or its absence, is a function of its own prompt, within the single-voter sensitivity the mechanism is
    calibrated for.
    """
    texts, failed = contained_responses(generator, prompts, max_new_tokens, max_concurrency=max_concurrency)
    return [None if i in failed else t for i, t in enumerate(texts)]


def final_answer(generator: Any, prompt: Any, max_new_tokens: int, attempts: int = 3) -> str:
    """The released answer's text from a public prompt (the question and what the mechanism released), retried up to
    ``attempts`` times: post-processing of the release, so a repeated call costs no privacy. The last failure
    propagates (the service then keeps the request pending; nothing was released)."""
    for k in range(attempts):
        try:
            return str(generator.generate(prompt, max_new_tokens)).strip()
        except Exception:
            if k == attempts - 1:
                raise
    raise AssertionError("unreachable")
