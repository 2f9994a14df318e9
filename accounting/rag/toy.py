"""A toy retriever and generator that implement ``accounting.protocols`` without any model.

Used by the tests of the DP-RAG algorithms and by ``accounting.testing`` users who want to exercise a
pipeline end to end in milliseconds. The toy "LLM" is transparent: a document containing
``ANSWER: w1 w2 ...`` (or DP-KSA's ``Keywords: w1, w2``) makes a voter that reads it say ``w1 w2 ... <eos>``; a voter with no such document
(and the non-RAG lane) says its ``default`` answer. Logits are one-hot-like (the planned token gets
``confidence``, others 0), so the vote histogram is exactly the voters' plans.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ..errors import InvalidParameterError
from ..protocols import Prompt

_ANSWER = re.compile(r"(?:ANSWER|Keywords):\s*([^\n.]+)")


class ToyRetriever:
    """Exact scores: the number of query words a document contains, plus a tiny id tie-breaker."""

    def __init__(self, documents: Sequence[str]):
        self.docs = list(documents)
        self._words = [set(d.lower().split()) for d in self.docs]

    def __len__(self) -> int:
        return len(self.docs)

    def scores(self, query: str) -> np.ndarray:
        q = set(query.lower().split())
        return np.array([len(q & w) for w in self._words], dtype=np.float64)

    def document(self, doc_id: int) -> str:
        if not 0 <= doc_id < len(self.docs):
            raise InvalidParameterError("doc_id", f"must lie in [0, {len(self.docs)})", doc_id)
        return self.docs[doc_id]


class _ToySession:
    def __init__(self, gen: "ToyGenerator", plans: list[list[int]]):
        self.gen, self.plans, self.t = gen, plans, 0

    def logits(self) -> np.ndarray:
        out = np.zeros((len(self.plans), self.gen.vocab_size), dtype=np.float32)
        for i, plan in enumerate(self.plans):
            tok = plan[self.t] if self.t < len(plan) else self.gen.eos_token_id
            out[i, tok] = self.gen.confidence
        return out

    def advance(self, token_id: int) -> None:
        self.t += 1


class ToyGenerator:
    """Vocabulary grows as words are seen; token 0 is <eos>."""

    eos_token_id = 0

    def __init__(self, default: str = "unknown", vocab_size: int = 512, confidence: float = 10.0):
        self.vocab = ["<eos>"]
        self.index = {"<eos>": 0}
        self.vocab_size = vocab_size
        self.default = default
        self.confidence = confidence
        self.calls = 0

    def _tok(self, word: str) -> int:
        if word not in self.index:
            if len(self.vocab) >= self.vocab_size:
                raise InvalidParameterError("vocab_size", "toy vocabulary is full")
            self.index[word] = len(self.vocab)
            self.vocab.append(word)
        return self.index[word]

    def plan(self, prompt: Prompt) -> list[int]:
        for ctx in prompt.contexts:
            m = _ANSWER.search(ctx)
            if m:
                return [self._tok(w) for w in m.group(1).replace(",", " ").split()] + [0]
        # an earlier answer to a question sharing >= 2 words is reused (models answer-history reuse)
        words = set(prompt.question.lower().split())
        for q, a in prompt.history:
            if len(words & set(q.lower().split())) >= 2 and a and a != self.default:
                return [self._tok(w) for w in a.split()] + [0]
        return [self._tok(w) for w in self.default.split()] + [0]

    def start(self, prompts: Sequence[Prompt], *, max_new_tokens: int = 1) -> _ToySession:
        self.calls += 1
        return _ToySession(self, [self.plan(p) for p in prompts])

    def encode(self, text: str) -> list[int]:
        return [self._tok(w) for w in text.split()]

    def generate_many(self, prompts: Sequence[Prompt], max_new_tokens: int) -> list[str]:
        return [self.generate(p, max_new_tokens) for p in prompts]

    def decode(self, token_ids: Sequence[int]) -> str:
        return " ".join(self.vocab[t] if t < len(self.vocab) else f"<tok{t}>" for t in token_ids if t != 0)

    def generate(self, prompt: Prompt, max_new_tokens: int) -> str:
        return self.decode(self.plan(prompt)[:max_new_tokens])
