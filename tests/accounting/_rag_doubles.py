"""Test doubles shared by the answer-level voting tests: a retriever over fixed documents and scores, and a
generator whose answer reads only its own prompt."""

import numpy as np


class Docs:
    """A retriever over ``docs`` with fixed ``scores`` (zeros by default)."""

    def __init__(self, docs, scores=None):
        self.docs = list(docs)
        self._s = np.asarray(scores if scores is not None else np.zeros(len(docs)), dtype=np.float64)

    def __len__(self):
        return len(self.docs)

    def document(self, i):
        return self.docs[i]

    def scores(self, q):
        return self._s.copy()


class Scripted:
    """A generator whose answer reads only its own prompt: the first document's first word, or "nothing"
    without a (non-empty) document — the no-context answer that outvotes the readers."""

    def generate(self, prompt, n):
        docs = [d for d in prompt.contexts if d]
        return docs[0].split()[0] if docs else "nothing"

    def generate_many(self, prompts, n):
        return [self.generate(p, n) for p in prompts]
