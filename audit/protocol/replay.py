"""Generation replay (spec/protocol.md §8.9, answers): re-run the answer of a served request and compare its
hash with the receipt's ``h_answer``.

The answer's randomness is the committed seed's ``generate`` stream for that request (§5.2), its documents
are Top-K of the charged (RAG-cost) documents by the exact integer scores, padded (000 Alg. 3), and its
mechanism is the committed policy's. So an auditor who holds the committed corpus (checked against
C_docs), the generator, and the question (which opens the request's h_q; the account hands it over) can
recompute the answer. What must match for a bit-exact replay: the generator's weights and tokenizer (the
embedder descriptor's ``prompt_template`` names them), its numerics (same library versions, the same
number of threads, deterministic CPU kernels — a GPU or another BLAS may change a near-tied logit), and
the prompt template; the toy generator replays exactly everywhere.

DP-KSA over a text-only generator (policy mechanism ``dp-ksa``) replays the same way when the policy commits
``dp_ksa.replayable: true`` (the provider's text generator is deterministic and available to the auditor). A
hosted LLM is not: its policy says ``replayable: false``, the verifier replays no answer of it, and the verdict
says the answer text is on trust (spec/provider.md §4) — its charges and ε are still checked.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from dprag.accounting.rag.common import top_k_padded

from .request import request_hash
from .retrieval import request_source

if TYPE_CHECKING:
    from dprag.accounting.protocols import Retriever

    from .policy import Policy


class _Documents:
    """The Retriever the single-query mechanism needs: document texts by index position."""

    def __init__(self, texts: list[str]):
        self.texts = texts

    def __len__(self) -> int:
        return len(self.texts)

    def document(self, doc_id: int) -> str:
        return self.texts[int(doc_id)]


def recorded_top(policy: Policy, opening: dict[str, Any], scores: np.ndarray) -> np.ndarray:
    """The documents the answer of an opened request is generated from: its RAG-charged documents (the last
    charge's ids), Top-m·docs_per_voter by the exact scores, padded (000 Alg. 3). The provider finishing a recorded
    request (``ProviderService._finish``) and the auditor replaying it use this one rule."""
    g = policy.generation
    charges = opening["charge"]["charges"]
    rag_ids = np.asarray(charges[-1]["ids"] if charges else [], dtype=np.int64)
    return top_k_padded(rag_ids, np.asarray(scores, dtype=np.float64)[rag_ids], g.m * g.docs_per_voter)


def replay_answer(
    policy: Policy,
    seed: bytes,
    opening: dict[str, Any],
    scores: np.ndarray,
    texts: list[str],
    question: str,
    generator: Any,  # a Generator; for the text mechanisms also a callable or LangChain runnable
) -> str:
    """The answer the committed mechanism gives for one opened request (see the module docstring)."""
    g = policy.generation
    if g.mechanism != "pure-dp-rag":  # text mechanisms: a callable or LangChain runnable is wrapped as the service does
        from dprag.accounting.rag.ksa import as_text_generator

        generator = as_text_generator(generator)
    top = recorded_top(policy, opening, scores)
    ans = policy.rag_params().respond(
        question,
        top,
        cast("Retriever", _Documents(texts)),  # respond reads the given documents by id, never scores
        generator,
        source=request_source(seed, "generate", request_hash(opening["request"])),
    )
    return ans.text


def answer_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
