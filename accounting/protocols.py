"""The small protocols the DP-RAG algorithms are written against.

``accounting`` never imports a model: ``rag_adapters`` implements these with a real embedder, index
and LLM; tests implement them with toy objects. Keeping them tiny keeps the privacy argument readable:
an algorithm sees documents only through ``Retriever.scores`` / ``Retriever.document`` and a model only
through ``Generator``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class Prompt:
    """What one LLM call is asked: a question, the context documents it may read, and earlier Q/A pairs.

    The generator adapter renders it (for an instruct model, through its chat template).
    ``history`` holds (question, answer) pairs already released to the same account: reusing them is
    post-processing and costs the corpus nothing.
    """

    question: str
    contexts: tuple[str, ...] = ()
    history: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def empty_context(self) -> Prompt:
        """The same question and history with every document set to the empty document "" (the padding of 000
        Alg. 3): what a voter whose generator call fails is replaced by (spec/accounting/rag.md §6). A function of
        public inputs only (the question, the history and the number of documents)."""
        return Prompt(self.question, ("",) * len(self.contexts), self.history)


@runtime_checkable
class Retriever(Protocol):
    """Exact relevance scores of every document for a query.

    Private algorithms require *exact* scores: the score of document i must depend on document i and the
    query only (no ANN graph built from the other documents).
    """

    def __len__(self) -> int: ...

    def scores(self, query: str) -> npt.NDArray[np.float64]:
        """Relevance of every document, shape (len(self),), float64; higher is more relevant."""
        ...

    def document(self, doc_id: int) -> str: ...


@runtime_checkable
class DecodingSession(Protocol):
    """A batch of prompts decoded in lock-step: every sequence receives the same released token."""

    def logits(self) -> npt.NDArray[np.floating[Any]]:
        """Next-token logits of every sequence in the batch, shape (batch, vocab)."""
        ...

    def advance(self, token_id: int) -> None:
        """Append ``token_id`` to every sequence of the batch."""
        ...


@runtime_checkable
class Generator(Protocol):
    """A language model seen as batched next-token distributions.

    An adapter may declare ``failure_free_sessions = True`` (a class attribute, not part of the protocol's required
    members): ``start``, ``DecodingSession.logits`` and ``DecodingSession.advance`` never raise for a batch of at
    most the mechanism's m prompts within the public prompt bounds checked before the charge, whatever the
    documents. The audit service serves 000 Alg. 5 only with such a generator (spec/provider.md §3.5); the mechanisms
    themselves contain a failing voter whatever the generator declares (spec/accounting/rag.md §6)."""

    @property
    def eos_token_id(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    def start(self, prompts: Sequence[Prompt], *, max_new_tokens: int = 1) -> DecodingSession:
        """A lock-step session; ``max_new_tokens`` lets the adapter check the context window up front."""
        ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, token_ids: Sequence[int]) -> str: ...

    def generate(self, prompt: Prompt, max_new_tokens: int) -> str:
        """Greedy, non-private generation (baselines, KSA's per-document responses)."""
        ...

    def generate_many(self, prompts: Sequence[Prompt], max_new_tokens: int) -> list[str]:
        """``generate`` for several prompts (one batch where the adapter can)."""
        ...


def stop_tokens(generator: Generator) -> frozenset[int]:
    """Token ids that end an answer: the adapter's ``stop_token_ids`` if it has them, else {eos}."""
    return frozenset(getattr(generator, "stop_token_ids", None) or {generator.eos_token_id})
