"""A provider's own embedder and generator, served by `dprag serve` through entry points (docs/own-models.md).

Replace the bodies with your models: the contract is the methods' signatures and what they return.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence

import numpy as np

from dprag.audit.protocol.commitments import EmbedderDescriptor

_SOURCE = hashlib.sha256(open(__file__, "rb").read()).hexdigest()  # what the descriptor commits to (your weights)


class TrigramEmbedder:
    """The embedder contract: ``embed(texts) -> (len(texts), dim) floats`` (deterministic: the account computes its
    own Q with the same entry point), ``dim``, and ``descriptor(schema, prompt_template=...)``, what C_emb binds."""

    dim = 64

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim))
        for i, t in enumerate(texts):
            s = f"  {t.lower()} "
            for k in range(len(s) - 2):
                h = int.from_bytes(hashlib.blake2s(s[k : k + 3].encode(), digest_size=4).digest(), "little")
                out[i, h % self.dim] += 1.0 if h & (1 << 31) else -1.0
            n = np.linalg.norm(out[i])
            out[i] /= n if n else 1.0
        return out

    def descriptor(self, schema: Mapping[str, int], *, prompt_template: str) -> EmbedderDescriptor:
        return EmbedderDescriptor(
            model="acme-trigram-64",
            entry_point="acme-trigram",  # the name below: an auditor re-embeds the corpus with it
            weights_sha256=_SOURCE,
            dimension=self.dim,
            prompt_template=prompt_template,
            tokenizer_sha256=_SOURCE,
            schema=dict(schema),
        )


def load_embedder() -> TrigramEmbedder:
    """[project.entry-points."dprag.embedders"] acme-trigram = "acme_dprag:load_embedder" """
    return TrigramEmbedder()


class KeywordGenerator:
    """The text generator contract (mechanisms ``dp-ksa`` and ``answer-vote``): ``generate(prompt_text) -> str``
    (or a plain callable, or a LangChain runnable with ``invoke``). Here: the capitalised drug name the prompt's
    documents give (a voter's prompt), or the first keyword released to it (the final answer's prompt, "Keywords:
    ..."), else "no idea" — stand-in for a call to your hosted LLM."""

    prompt_template = "acme-keyword-v1"

    def __call__(self, prompt_text: str) -> str:
        found = re.findall(r"receive (\w+)", prompt_text) or re.findall(r"Keywords: (\w+)", prompt_text)
        return found[0] if found else "no idea"


def load_generator() -> KeywordGenerator:
    """[project.entry-points."dprag.generators"] acme-keywords = "acme_dprag:load_generator" """
    return KeywordGenerator()
