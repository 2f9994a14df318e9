"""What makes the demo's calibration (``dprag experiment demo-calibration --only mechanism``) observable and
resumable: progress lines on stderr (``StageLog``) and an on-disk cache of the voters' answers (``AnswerCache``).

The cache is a JSON-lines file, one ``{"key": ..., "answer": ...}`` per generated prompt, appended and flushed after
every batch. The key is the SHA-256 of the model names, the prompt (question, records, history) and the answer
length, so an answer of another generator, embedder or length is never reused. A killed run leaves at most a
truncated last line: it is dropped (and cut from the file) when the cache is opened; a bad line before the last is
refused (``InvalidParameterError``), as the file is then not one this module wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from dprag.accounting.protocols import Prompt
from dprag.errors import InvalidParameterError


def prompt_key(model_names: Mapping[str, str], prompt: Prompt, max_tokens: int) -> str:
    """The cache key of one voter's answer: a hash of the model names, the prompt and the answer length."""
    doc = json.dumps(
        {
            "models": {str(k): str(v) for k, v in model_names.items()},
            "question": prompt.question,
            "contexts": list(prompt.contexts),
            "history": [list(t) for t in prompt.history],
            "max_tokens": int(max_tokens),
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(doc.encode("utf-8")).hexdigest()


class AnswerCache:
    """The voters' answers of the generator and embedder named in ``models`` (``Models.names``) by ``prompt_key``;
    with a ``path``, loaded from and appended to that JSON-lines file, without one, in memory only."""

    def __init__(self, path: str | os.PathLike | None = None, models: Mapping[str, str] | None = None):
        self.path = None if path is None else os.fspath(path)
        self.models = dict(models or {})
        self.answers: dict[str, str] = {}
        self.dropped_tail = False
        if self.path is not None and os.path.exists(self.path):
            self._load()

    def _load(self) -> None:
        assert self.path is not None
        with open(self.path, "rb") as f:
            data = f.read()
        lines = data.split(b"\n")
        good_end = 0  # byte offset after the last good line
        pos = 0
        for no, raw in enumerate(lines, start=1):
            end = pos + len(raw) + (1 if no < len(lines) else 0)
            last = all(not rest.strip() for rest in lines[no:])
            if raw.strip():
                rec = _record(raw)
                if rec is None or (last and not data.endswith(b"\n")):
                    if not last:
                        raise InvalidParameterError(
                            "cache", f"line {no} of {self.path} is not a cached answer (only the last may be cut)"
                        )
                    self.dropped_tail = True
                    break
                self.answers[rec[0]] = rec[1]
                good_end = end
            pos = end
        if good_end < len(data):  # a killed run's cut line (or trailing blanks): continue after the last good one
            with open(self.path, "r+b") as f:
                f.truncate(good_end)

    def key(self, prompt: Prompt, max_tokens: int) -> str:
        return prompt_key(self.models, prompt, max_tokens)

    def __len__(self) -> int:
        return len(self.answers)

    def __contains__(self, key: str) -> bool:
        return key in self.answers

    def get(self, key: str) -> str | None:
        return self.answers.get(key)

    def put_many(self, items: Sequence[tuple[str, str]]) -> None:
        """Record ``(key, answer)`` pairs (on disk: appended and flushed, one line each)."""
        new = [(k, a) for k, a in items if k not in self.answers]
        self.answers.update(new)
        if self.path is not None and new:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("".join(json.dumps({"key": k, "answer": a}, ensure_ascii=False) + "\n" for k, a in new))
                f.flush()


def _record(raw: bytes) -> tuple[str, str] | None:
    try:
        rec = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("key"), str) or not isinstance(rec.get("answer"), str):
        return None
    return rec["key"], rec["answer"]


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class StageLog:
    """Progress lines on ``stream`` (stderr): ``stage(name, note)`` at each step, ``count(done, total)`` during the
    long one, at most one line per ``interval`` seconds (and the last), with the elapsed time and an ETA from the
    rate of the work done in this run (cached work is counted apart: it took no time)."""

    def __init__(
        self,
        stream=None,
        *,
        interval: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        enabled: bool = True,
    ):
        self.stream = stream if stream is not None else sys.stderr
        self.interval, self.clock, self.enabled = float(interval), clock, enabled
        self.t0 = clock()
        self._name, self._t_stage, self._last, self._base, self._ended = "", self.t0, -float("inf"), 0, False

    def _emit(self, text: str) -> None:
        if self.enabled:
            print(f"[calibration {_clock(self.clock() - self.t0)}] {text}", file=self.stream, flush=True)

    def stage(self, name: str, note: str = "") -> None:
        self._name, self._t_stage, self._last = name, self.clock(), -float("inf")
        self._emit(f"{name}: {note}" if note else name)

    def start_count(self, already: int) -> None:
        """The count begins with ``already`` items done before this run (cached): not in the rate."""
        self._base, self._t_stage, self._last, self._ended = int(already), self.clock(), -float("inf"), False

    def count(self, done: int, total: int, what: str = "prompts answered") -> None:
        now = self.clock()
        if self._ended or (done < total and now - self._last < self.interval):
            return
        self._last, self._ended = now, done >= total
        ran = now - self._t_stage
        fresh = done - self._base
        if done >= total:
            eta = "done"
        elif fresh > 0:
            eta = f"ETA {_clock(ran / fresh * (total - done))} ({fresh / ran * 60:.1f}/min)" if ran > 0 else "ETA ?"
        else:
            eta = "ETA ?"
        self._emit(f"{self._name}: {done}/{total} {what} ({self._base} cached), stage {_clock(ran)}, {eta}")
