"""``dprag experiment normalizer-check RUN``: which public answer normalisation releases the most correct answers,
on the voters' answers a privacy-utility run already stored (spec/answer-keys.md §2, spec/experiments.md §1.1).

Answer-level voting is post-processing of each voter's answer (the key is a public function of the answer and the
question), so another normalisation can be scored on the same answers without running the model again. For every
answer-vote cell of the run and every normaliser of ``rag_adapters.answer_keys.NORMALIZERS``, each question's voters
are re-keyed (abstainers stay abstainers), and the seen selection's exact law (``seen_key_probabilities`` at the
cell's own ε and δ_q) gives the chance that the released key contains a gold answer. Reported per cell and
normaliser: the **expected** number of correct releases (the sum of those chances: no sampling noise, so two
normalisers are compared on the same answers without a draw deciding it) and the voters' non-private plurality.
The choice is the normaliser with the most expected correct releases summed over the run's answer-vote cells (a
tie keeps the earlier version). Only a run on the tuning corpus (never a test split) may choose a default.

``--prefix-tokens N`` also scores every normaliser on each voter answer's first N tokens (the run's SmolLM2
tokenizer; greedy decoding makes the N-token answer the prefix of the longer one, so this is the shorter answer
length on the *same* retrieval -- two runs at different lengths draw their retrieval noise from different streams,
which moves the expected count by a few questions on its own).

Which voters abstained: ``voter_abstained`` in ``predictions.jsonl``; a run made before that field was recorded
has the run's ``used`` (documents read) instead, and the abstainers -- every one prompted with the question and the
empty document, greedy and batch-independent, hence the same answer -- are the ``m − used`` voters among those the
run's ``key_votes`` does not count that share the most frequent answer; the reconstruction is checked against the
run's own ``key_votes`` under the run's normaliser and refused (an error naming the question) when it disagrees.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import click

from dprag.lab.experiments.options import Fail

PREDICTIONS = "predictions.jsonl"
CELLS = "privacy_utility.jsonl"


def abstainers(row: Mapping, run_key: Callable[[str], str]) -> list[bool]:
    """Which voters of ``row`` abstained (module doc); ``run_key``: the run's own answer → key."""
    if row.get("voter_abstained") is not None:
        return [bool(x) for x in row["voter_abstained"]]
    answers = row["voter_answers"]
    keys = ["" if a is None else run_key(a) for a in answers]
    counted = Counter(row["key_votes"])
    quota = Counter(keys) - counted
    uncounted = []
    for i, k in enumerate(keys):
        if quota[k] > 0:
            quota[k] -= 1
            uncounted.append(i)
    need = len(answers) - int(row["used"])
    out = [False] * len(answers)
    for text, _ in Counter(answers[i] for i in uncounted).most_common():
        for i in uncounted:
            if need and answers[i] == text and not out[i]:
                out[i] = True
                need -= 1
    if need or Counter(k for k, gone in zip(keys, out, strict=True) if k and not gone) != counted:
        raise ValueError(f"question {row['qid']}: the abstaining voters cannot be told from the stored answers")
    return out


def with_abstainers(rows: Sequence[Mapping], run_key: Callable[[str, str], str]) -> list[dict]:
    """``rows`` with ``voter_abstained`` filled in (``abstainers``), once, before any re-keying."""
    return [{**r, "voter_abstained": abstainers(r, lambda a, q=r["question"]: run_key(a, q))} for r in rows]


def expected_correct(
    rows: Sequence[Mapping],
    golds: Mapping[str, Sequence[str]],
    normalizer: Callable[..., str],
    key_words: int,
    epsilon: float,
    delta: float,
) -> dict:
    """{"expected_correct", "plurality_correct", "questions"} of one cell's rows (``with_abstainers``) under
    ``normalizer``."""
    from dprag.lab.release_law import correct_chance, voted_keys
    from dprag.rag_adapters.metrics import contains_answer

    exp, plural = 0.0, 0
    for r in rows:
        q, gold = r["question"], golds[r["qid"]]
        voted = voted_keys(r["voter_answers"], r["voter_abstained"], q, normalizer, key_words)
        exp += correct_chance(voted, gold, epsilon, delta)
        counts = Counter(voted)
        if counts:
            plural += contains_answer(max(sorted(counts), key=lambda k: counts[k]), gold)
    return {"expected_correct": exp, "plurality_correct": plural, "questions": len(rows)}


def truncated(rows: Sequence[Mapping], tokens: int, tokenizer) -> list[dict]:
    """``rows`` (``with_abstainers``) with each voter answer cut to its first ``tokens`` tokens."""
    return [
        {
            **r,
            "voter_answers": [
                None if a is None else tokenizer.decode(tokenizer.encode(a, add_special_tokens=False)[:tokens])
                for a in r["voter_answers"]
            ],
        }
        for r in rows
    ]


def _smollm2_tokenizer():
    import transformers as tf

    from dprag.rag_adapters.generator import convert_smollm2

    return tf.AutoTokenizer.from_pretrained(str(convert_smollm2()))


def check_run(run_dir: Path, prefix_tokens: int | None = None, tokenizer=None) -> dict:
    """The normaliser comparison of one privacy-utility run directory (module doc); ``prefix_tokens``: also on
    the answers' first N tokens (``tokenizer``: the run's; default SmolLM2's)."""
    from dprag.rag_adapters.answer_keys import NORMALIZERS
    from dprag.rag_adapters.datasets import generate_clinic_corpus

    run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    if not str(run.get("dataset", "")).startswith("clinic"):
        raise ValueError("run.json: dataset must be the clinic corpus (its gold answers are regenerated from its seed)")
    seed = int(run["corpus_seed"])
    golds = {q.qid: q.answers for q in generate_clinic_corpus(seed).questions}
    run_norm = NORMALIZERS[run.get("normalizer", "answer-keys-v1")]
    preds = [json.loads(x) for x in (run_dir / PREDICTIONS).read_text(encoding="utf-8").splitlines() if x.strip()]
    cells = [json.loads(x) for x in (run_dir / CELLS).read_text(encoding="utf-8").splitlines() if x.strip()]
    out: dict = {"run": str(run_dir), "corpus_seed": seed, "run_normalizer": run.get("normalizer", "answer-keys-v1")}
    table: dict = {}
    for cell in cells:
        d = cell.get("derived") or {}
        d = json.loads(d) if isinstance(d, str) else d
        if d.get("selection") != "seen":
            continue
        rows = [r for r in preds if r["method"] == cell["method"] and r.get("voter_answers") is not None]
        if not rows:
            raise ValueError(f"{PREDICTIONS}: cell {cell['method']} has no voter_answers (a run before they were kept)")
        kw = int(d["key_words"])
        rows = with_abstainers(rows, lambda a, q, kw=kw: run_norm(a, q, max_words=kw))
        eps, delta = float(d["epsilon_selection"]), float(d["delta_q"])
        table[cell["method"]] = {
            name: expected_correct(rows, golds, f, kw, eps, delta) for name, f in NORMALIZERS.items()
        }
        if prefix_tokens is not None:
            cut = truncated(rows, prefix_tokens, tokenizer if tokenizer is not None else _smollm2_tokenizer())
            table[cell["method"]].update(
                {
                    f"{name} @ {prefix_tokens} tokens": expected_correct(cut, golds, f, kw, eps, delta)
                    for name, f in NORMALIZERS.items()
                }
            )
    if not table:
        raise ValueError(f"{CELLS}: the run has no answer-vote cell with the seen selection")
    totals = {n: sum(t[n]["expected_correct"] for t in table.values()) for n in NORMALIZERS}
    out["cells"] = table
    out["expected_correct_total"] = totals
    out["chosen"] = max(NORMALIZERS, key=lambda n: (round(totals[n], 9), -list(NORMALIZERS).index(n)))
    return out


@click.command("normalizer-check")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option(
    "--prefix-tokens",
    type=click.IntRange(1, 4096),
    default=None,
    help="also score each answer's first N tokens (SmolLM2's tokenizer): a shorter answer on the same retrieval",
)
def normalizer_check(run_dir: Path, out_file: Path | None, prefix_tokens: int | None) -> None:
    """Score every public answer normalisation on a run's stored voter answers (exact expected releases)."""
    try:
        result = check_run(run_dir, prefix_tokens)
    except (ValueError, KeyError, FileNotFoundError) as e:
        raise Fail(f"RUN_DIR: {e}") from None
    text = json.dumps(result, indent=1, sort_keys=True)
    click.echo(text)
    if out_file is not None:
        out_file.write_text(text + "\n", encoding="utf-8")
