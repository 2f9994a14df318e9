"""A deterministic bag-of-words embedder for tests and the offline quick demo (no model weights).

Each word maps to a fixed pseudo-random Gaussian vector derived from SHA-256 of the word; a text's embedding
is the sum over its words (lower-cased, punctuation stripped). Texts sharing words have high cosine.
"""

from __future__ import annotations

import hashlib
import re
from typing import Sequence

import numpy as np

from .commitments import EmbedderDescriptor

_WORD = re.compile(r"[a-z0-9]+")


class HashEmbedder:
    def __init__(self, dimension: int = 32):
        self.dimension = dimension
        self._cache: dict[str, np.ndarray] = {}

    def _word(self, w: str) -> np.ndarray:
        v = self._cache.get(w)
        if v is None:
            seed = int.from_bytes(hashlib.sha256(w.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dimension)
            self._cache[w] = v
        return v

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension))
        for i, t in enumerate(texts):
            for w in _WORD.findall(t.lower()):
                out[i] += self._word(w)
        return out

    def descriptor(self, schema: dict[str, int], prompt_template: str = "toy") -> EmbedderDescriptor:
        h = hashlib.sha256(f"dprag.HashEmbedder/{self.dimension}".encode()).hexdigest()
        return EmbedderDescriptor(model=f"hash-bow-{self.dimension}", weights_sha256=h, dimension=self.dimension,
                                  prompt_template=prompt_template, tokenizer_sha256=h, schema=schema)
