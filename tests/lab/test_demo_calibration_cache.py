"""``dprag experiment demo-calibration --only mechanism``: progress lines on stderr only (stdout stays one JSON
object) and the resumable cache of the voters' answers (lab/demo/answer_cache.py): a second run generates nothing
and prints the same JSON, a killed run's cut last line is dropped, an answer of other models or another length is
never reused, and a file this module did not write is refused. Weight-free: the toy models, a tiny corpus."""

from __future__ import annotations

import io
import json

import pytest

from dprag.accounting.protocols import Prompt
from dprag.audit.cli import main as dprag_main
from dprag.audit.testing.toy import ToyGenerator
from dprag.errors import InvalidParameterError
from dprag.lab.demo.answer_cache import AnswerCache, StageLog, prompt_key
from dprag.lab.demo.calibration import calibration_corpus
from dprag.lab.demo.coverage import release_candidates, release_grid
from dprag.lab.demo.models import load_models

SIZES = ["--conditions", "2", "--support-min", "20", "--support-max", "21", "--distractors", "5", "--passes", "1"]
ARGS = ["experiment", "demo-calibration", "--model", "toy", "--only", "mechanism", *SIZES]


@pytest.fixture
def asked(monkeypatch):
    """Every (prompt, answer length) the toy generator is asked, in order."""
    calls: list = []
    original = ToyGenerator.generate_many

    def recording(self, prompts, max_new_tokens):
        calls.extend((p, max_new_tokens) for p in prompts)
        return original(self, prompts, max_new_tokens)

    monkeypatch.setattr(ToyGenerator, "generate_many", recording)
    return calls


def _run(capsys, *extra: str) -> tuple[str, str]:
    assert dprag_main([*ARGS, *extra]) == 0
    cap = capsys.readouterr()
    return cap.out, cap.err


def test_progress_goes_to_stderr_and_stdout_is_one_json_object(capsys, asked, tmp_path):
    out, err = _run(capsys, "--cache", str(tmp_path / "c.jsonl"), "--progress-every", "0")
    data = json.loads(out)  # nothing but the JSON object on stdout
    assert {"coverage_grid", "release_grid", "release_grid_settings"} <= set(data)
    assert "[calibration" not in out
    lines = err.splitlines()
    assert all(line.startswith("[calibration ") for line in lines), lines
    total = len({prompt_key(data["models"], p, n) for p, n in asked})
    assert asked and any(f"{total} distinct voter prompts, 0 in the cache" in line for line in lines)
    assert f"{total}/{total} prompts answered (0 cached)" in lines[-3]
    stages = ("coverage_grid", "release_grid selection", "release_grid scoring", "done")
    assert [s for s in stages if s not in err] == []


def test_a_second_run_with_the_cache_generates_nothing_and_prints_the_same_json(capsys, asked, tmp_path):
    plain, _ = _run(capsys)
    n_plain = len(asked)
    cache = tmp_path / "c.jsonl"
    first, _ = _run(capsys, "--cache", str(cache))
    assert first == plain  # the cache changes nothing in the result
    assert len(asked) == 2 * n_plain
    assert len(cache.read_text().splitlines()) == len({prompt_key(json.loads(first)["models"], p, n) for p, n in asked})
    second, err = _run(capsys, "--cache", str(cache))
    assert len(asked) == 2 * n_plain  # no generator call at all
    assert second == first
    total = len(cache.read_text().splitlines())
    assert f"{total} distinct voter prompts, {total} in the cache" in err
    assert f"{total}/{total} prompts answered ({total} cached)" in err


def test_a_killed_runs_cut_last_line_is_dropped_and_regenerated(capsys, asked, tmp_path):
    cache = tmp_path / "c.jsonl"
    first, _ = _run(capsys, "--cache", str(cache))
    lines = cache.read_bytes().splitlines(keepends=True)
    cut = b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2]  # killed in the middle of its last write
    cache.write_bytes(cut)
    n = len(asked)
    again, _ = _run(capsys, "--cache", str(cache))
    assert again == first
    assert len(asked) == n + 1  # only the answer of the cut line is generated again
    assert json.loads(lines[-1])["key"] == prompt_key(json.loads(first)["models"], *asked[-1])
    # the file was repaired: every line parses and the regenerated answer is back
    assert sorted(cache.read_bytes().splitlines(keepends=True)) == sorted(lines)


def test_an_answer_of_other_models_or_another_length_is_never_reused(tmp_path):
    corpus = calibration_corpus(n_conditions=2, support_min=20, support_max=21, n_distractors=5)
    models = load_models("toy", lambda total, desc: lambda n: None)
    path = tmp_path / "c.jsonl"

    def grid(names, tokens, generator):
        return release_grid(
            models.embedder,
            generator,
            corpus,
            release_candidates(),
            passes=1,
            normalizer="answer-keys-v2",
            tokens=tokens,
            cache=AnswerCache(path, names),
        )

    class Recording(ToyGenerator):
        def __init__(self, poison: str | None = None):
            super().__init__(vocab_size=4096)
            self.asked: list = []
            self.poison = poison

        def generate_many(self, prompts, max_new_tokens):
            self.asked.extend((p, max_new_tokens) for p in prompts)
            out = super().generate_many(prompts, max_new_tokens)
            return [self.poison or a for a in out]

    # the cache holds the answers of a generator that always answers "fever" (at 16 / 24 tokens)
    liar = Recording(poison="fever")
    grid(models.names, {"murag": 16, "murag-ada": 24}, liar)
    ada = {(p, n) for p, n in liar.asked if n == 24}
    assert ada and {n for _, n in liar.asked} == {16, 24}
    # another answer length for MuRAG: its prompts are generated again, MuRAG-Ada's come from the cache
    honest = Recording()
    grid(models.names, {"murag": 12, "murag-ada": 24}, honest)
    assert {n for _, n in honest.asked} == {12}
    assert {p for p, _ in honest.asked} == {p for p, n in liar.asked if n == 16}
    # other model names: nothing is reused, and the result is the honest generator's own
    other = Recording()
    rows = grid({**models.names, "generator": "another model"}, {"murag": 16, "murag-ada": 24}, other)
    assert sorted(set(other.asked), key=repr) == sorted(set(liar.asked), key=repr)
    fresh = release_grid(
        models.embedder,
        ToyGenerator(vocab_size=4096),
        corpus,
        release_candidates(),
        passes=1,
        normalizer="answer-keys-v2",
        tokens={"murag": 16, "murag-ada": 24},
    )
    assert rows == fresh


def test_a_file_this_module_did_not_write_is_refused(capsys, tmp_path):
    path = tmp_path / "c.jsonl"
    good = json.dumps({"key": "a" * 64, "answer": "x"})
    path.write_text(f"{good}\nnot json\n{good}\n")
    with pytest.raises(InvalidParameterError, match=r"cache: line 2 of .* is not a cached answer"):
        AnswerCache(path, {})
    assert path.read_text() == f"{good}\nnot json\n{good}\n"  # left as it was
    assert dprag_main([*ARGS, "--cache", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "line 2" in err[-1] and "cache" in err[-1]
    # a record of the wrong shape in the middle is refused too; only the last line may be cut
    path.write_text(f'{{"key": 1, "answer": "x"}}\n{good}\n')
    with pytest.raises(InvalidParameterError, match="line 1"):
        AnswerCache(path, {})
    path.write_text(f"{good}\n{good[:-3]}")
    cache = AnswerCache(path, {})
    assert cache.dropped_tail and len(cache) == 1 and path.read_text() == f"{good}\n"


def test_the_cache_key_binds_models_prompt_and_length():
    p = Prompt("what treats fever?", ("record one",))
    base = prompt_key({"generator": "g", "embedder": "e"}, p, 16)
    assert prompt_key({"embedder": "e", "generator": "g"}, p, 16) == base  # the names' order does not matter
    others = [
        prompt_key({"generator": "g2", "embedder": "e"}, p, 16),
        prompt_key({"generator": "g", "embedder": "e2"}, p, 16),
        prompt_key({"generator": "g", "embedder": "e"}, p, 24),
        prompt_key({"generator": "g", "embedder": "e"}, Prompt("what treats fever?", ("record two",)), 16),
        prompt_key({"generator": "g", "embedder": "e"}, Prompt("what treats fever ?", ("record one",)), 16),
        prompt_key({"generator": "g", "embedder": "e"}, Prompt(p.question, p.contexts, (("q", "a"),)), 16),
    ]
    assert len({base, *others}) == 7


def test_progress_lines_are_rate_limited_and_their_eta_counts_only_this_runs_work():
    t = [0.0]
    buf = io.StringIO()
    log = StageLog(buf, interval=30.0, clock=lambda: t[0])
    log.stage("gen", "110 prompts")
    log.start_count(10)  # 10 answers were in the cache: they took no time
    for now, done in ((0.0, 10), (10.0, 20), (29.0, 25), (60.0, 40), (70.0, 50), (95.0, 110), (96.0, 110)):
        t[0] = now
        log.count(done, 110)
    lines = buf.getvalue().splitlines()
    assert lines[0] == "[calibration 0m00s] gen: 110 prompts"
    assert lines[1] == "[calibration 0m00s] gen: 10/110 prompts answered (10 cached), stage 0m00s, ETA ?"
    # 30 fresh answers in 60 s: 30/min, 70 left -> 140 s
    assert lines[2] == "[calibration 1m00s] gen: 40/110 prompts answered (10 cached), stage 1m00s, ETA 2m20s (30.0/min)"
    assert lines[3] == "[calibration 1m35s] gen: 110/110 prompts answered (10 cached), stage 1m35s, done"
    assert len(lines) == 4  # 10 s, 29 s and 70 s are within 30 s of a line; the end is printed once
    quiet = io.StringIO()
    off = StageLog(quiet, enabled=False)
    off.stage("gen")
    off.count(1, 1)
    assert quiet.getvalue() == ""
