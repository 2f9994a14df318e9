"""Dataset containers shared by the loaders: a corpus of documents and questions with gold answers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dprag.errors import InvalidParameterError

from ..common import corpus_hash


@dataclass(frozen=True)
class QAItem:
    """One question with its acceptable answers.

    ``relevant_ids``: corpus indices of the documents that support the answer (when known).
    ``split``: "dev" / "test" / "" (no split).  ``group``: the fact or chain the question belongs to.
    ``depends_on``: qids whose answers this question builds on (dependent questions, 001 §4.1 MQuAKE-style).
    """

    qid: str
    question: str
    answers: tuple[str, ...]
    relevant_ids: tuple[int, ...] = ()
    split: str = ""
    group: str = ""
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class RagDataset:
    """A corpus (``documents[i]`` is document id i) and questions over it."""

    name: str
    documents: tuple[str, ...]
    questions: tuple[QAItem, ...]
    doc_keys: tuple[str, ...] = ()
    info: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self):
        if not self.documents:
            raise InvalidParameterError("documents", "corpus must not be empty")
        if self.doc_keys and len(self.doc_keys) != len(self.documents):
            raise InvalidParameterError("doc_keys", "must have one key per document", len(self.doc_keys))

    def __len__(self) -> int:
        return len(self.documents)

    def split(self, name: str) -> tuple[QAItem, ...]:
        """Questions of one split ("dev", "test", or "" for unsplit datasets)."""
        out = tuple(q for q in self.questions if q.split == name)
        if not out:
            have = sorted({q.split for q in self.questions})
            raise InvalidParameterError("split", f"no questions in split {name!r}; splits present: {have}", name)
        return out

    def corpus_hash(self) -> str:
        return corpus_hash(self.documents)
