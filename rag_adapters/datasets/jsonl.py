"""A user's own corpus and questions as JSON Lines.

Corpus file: one JSON object per line, ``{"id": "...", "text": "..."}`` (``id`` optional: defaults to the
line's position among documents; ids must be unique; ``text`` must be a non-empty string). Blank lines
are skipped. Questions file (optional): ``{"question": "...", "answers": ["...", ...]}`` (``answers`` may
be a single string; optional ``"id"``, ``"split"``, ``"relevant"`` = list of corpus ids).

Every problem raises InvalidParameterError naming the file and the line; nothing is silently dropped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dprag.errors import InvalidParameterError, UnknownDocumentError

from .base import QAItem, RagDataset


def _read_jsonl(field: str, path) -> list[tuple[int, dict]]:
    p = Path(path)
    if not p.is_file():
        raise InvalidParameterError(field, "file does not exist", str(path))
    rows = []
    with p.open("r", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InvalidParameterError(field, f"{p.name} line {lineno}: invalid JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise InvalidParameterError(field, f"{p.name} line {lineno}: must be a JSON object", type(obj).__name__)
            rows.append((lineno, obj))
    return rows


def load_jsonl(
    corpus_path: str | os.PathLike,
    questions_path: str | os.PathLike | None = None,
    *,
    text_field: str = "text",
    id_field: str = "id",
) -> RagDataset:
    """Load a JSONL corpus (and optionally JSONL questions) into a RagDataset."""
    rows = _read_jsonl("corpus_path", corpus_path)
    name = Path(corpus_path).name
    if not rows:
        raise InvalidParameterError("corpus_path", f"{name} contains no documents (empty corpus)")
    docs, keys, seen = [], [], {}
    for lineno, obj in rows:
        text = obj.get(text_field)
        if not isinstance(text, str) or not text.strip():
            raise InvalidParameterError(
                "corpus_path", f"{name} line {lineno}: field {text_field!r} must be a non-empty string"
            )
        key = obj.get(id_field, len(docs))
        if not isinstance(key, (str, int)) or isinstance(key, bool):
            raise InvalidParameterError(
                "corpus_path", f"{name} line {lineno}: field {id_field!r} must be a string or an integer", key
            )
        key = str(key)
        if key in seen:
            raise InvalidParameterError(
                "corpus_path", f"{name} line {lineno}: duplicate id {key!r} (first on line {seen[key]})"
            )
        seen[key] = lineno
        docs.append(text)
        keys.append(key)
    index = {k: i for i, k in enumerate(keys)}

    questions = []
    if questions_path is not None:
        qname = Path(questions_path).name
        qrows = _read_jsonl("questions_path", questions_path)
        if not qrows:
            raise InvalidParameterError("questions_path", f"{qname} contains no questions")
        for n, (lineno, obj) in enumerate(qrows):
            q = obj.get("question")
            if not isinstance(q, str) or not q.strip():
                raise InvalidParameterError(
                    "questions_path", f"{qname} line {lineno}: field 'question' must be a non-empty string"
                )
            ans = obj.get("answers", ())
            if isinstance(ans, str):
                ans = (ans,)
            if not isinstance(ans, (list, tuple)) or not all(isinstance(a, str) for a in ans):
                raise InvalidParameterError(
                    "questions_path", f"{qname} line {lineno}: field 'answers' must be a string or a list of strings"
                )
            rel = obj.get("relevant", ())
            if not isinstance(rel, (list, tuple)):
                raise InvalidParameterError(
                    "questions_path", f"{qname} line {lineno}: field 'relevant' must be a list of ids"
                )
            unknown = [r for r in rel if str(r) not in index]
            if unknown:
                raise UnknownDocumentError(unknown, len(docs))
            split = obj.get("split", "")
            if not isinstance(split, str):
                raise InvalidParameterError("questions_path", f"{qname} line {lineno}: field 'split' must be a string")
            questions.append(
                QAItem(
                    qid=str(obj.get("id", n)),
                    question=q,
                    answers=tuple(ans),
                    relevant_ids=tuple(index[str(r)] for r in rel),
                    split=split,
                )
            )
    return RagDataset(
        name=f"jsonl({name})",
        documents=tuple(docs),
        questions=tuple(questions),
        doc_keys=tuple(keys),
        info={
            "corpus_path": str(corpus_path),
            "questions_path": None if questions_path is None else str(questions_path),
        },
    )
