"""How the demo's τ and generation mechanism were chosen: on a public calibration corpus (the clinic generator
with its own seed), never on a tenant's data (spec/demo.md, docs/lab/demo-runs.md §1).

``dprag experiment demo-calibration`` runs ``tau_statistics`` and ``answer_vote_grid`` on it and prints their
results as one JSON object."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

import click
import numpy as np

from dprag.accounting.protocols import Prompt
from dprag.audit.protocol import commitments as cm
from dprag.lab.demo.answer_cache import AnswerCache, StageLog
from dprag.lab.demo.config import ANSWER_TOKENS, SCORE_CLIP, SCORE_SHIFT, DemoPrivacy
from dprag.lab.demo.models import load_models
from dprag.lab.demo.progress import Progress
from dprag.lab.demo.traffic import honest_questions
from dprag.rag_adapters.datasets.clinic import ClinicCorpus, generate_clinic_corpus
from dprag.rag_adapters.metrics import contains_answer

CALIBRATION_SEED = "dprag-demo/public-calibration"


def calibration_corpus(
    seed: str = CALIBRATION_SEED,
    *,
    n_conditions: int = 12,
    support_min: int = 20,
    support_max: int = 30,
    n_distractors: int = 150,
) -> ClinicCorpus:
    """The public corpus the demo's τ, ε_token and c were chosen on (the clinic generator, its own seed; the
    defaults are the corpus of spec/demo.md, smaller sizes are for tests)."""
    return generate_clinic_corpus(
        seed, n_conditions=n_conditions, support_min=support_min, support_max=support_max, n_distractors=n_distractors
    )


def tau_statistics(embedder, corpus: ClinicCorpus, tau: int = 512) -> dict:
    """On the corpus's dev questions, in the integer score units of spec/protocol.md §4: the fraction of
    records supporting the asked fact that score above τ, the mean number of unrelated records above τ per
    question, and score percentiles (divided by 1024: cosines)."""
    qd = cm.quantise_embeddings(np.asarray(embedder.embed(list(corpus.documents))))
    items = [q for q in corpus.questions if q.split == "dev"]
    qs = cm.quantise_embeddings(np.asarray(embedder.embed([q.question for q in items])))
    rel, unrel, above = [], [], []
    for item, q in zip(items, qs, strict=False):
        s = cm.integer_scores(qd, q, SCORE_CLIP, SCORE_SHIFT)
        mask = np.zeros(s.size, dtype=bool)
        mask[list(item.relevant_ids)] = True
        rel.append(s[mask])
        unrel.append(s[~mask])
        above.append(int((s[~mask] > tau).sum()))
    r, u = np.concatenate(rel), np.concatenate(unrel)
    return {
        "questions": len(items),
        "records": len(corpus.documents),
        "tau": tau,
        "supporting_above_tau": float((r > tau).mean()),
        "unrelated_above_tau_per_question": float(np.mean(above)),
        "supporting_cosine_p5_p50": (np.percentile(r, [5, 50]) / 1024).tolist(),
        "unrelated_cosine_p99_p999": (np.percentile(u, [99, 99.9]) / 1024).tolist(),
    }


def _calibration_lists(embedder, corpus: ClinicCorpus, tau: int, m: int, questions: int):
    """(item, ranked Top-m list above τ padded with -1, scores) for one test question per condition."""
    from dprag.accounting.rag.common import top_k_padded

    qd = cm.quantise_embeddings(np.asarray(embedder.embed(list(corpus.documents))))
    out = []
    for item in honest_questions(corpus, min(questions, len(corpus.info["protocol"]))):
        q = cm.quantise_embeddings(np.asarray(embedder.embed([item.question])))[0]
        s = cm.integer_scores(qd, q, SCORE_CLIP, SCORE_SHIFT).astype(np.float64)
        above = np.flatnonzero(s > tau)
        out.append((item, top_k_padded(above, s[above], m), s))
    return out


class _FixedScores:
    """A Retriever over a calibration corpus whose scores are set per question."""

    def __init__(self, corpus: ClinicCorpus):
        self.corpus, self.current = corpus, None

    def __len__(self):
        return len(self.corpus.documents)

    def document(self, i):
        return self.corpus.documents[int(i)]

    def scores(self, question):
        return self.current


def mechanism_accuracy(
    embedder,
    generator,
    corpus: ClinicCorpus,
    mechanisms: dict,
    *,
    tau: int = 512,
    questions: int = 12,
    seed: bytes = b"tune",
) -> dict:
    """Match accuracy of single-query mechanisms (``SingleQueryMechanism`` params: 000 Alg. 5's
    ``PureDpRagParams``, ``AnswerVoteParams``, ...) on the same questions of a calibration corpus: one test
    question per condition, the voters reading the Top-m records above τ (padded with empty documents), each
    question with fresh documents (no filter). How the demo's mechanism was chosen (spec/demo.md).
    Returns {name: {"accuracy", "answers"}}."""
    from dprag.accounting.noise.source import RandomSource

    m = max(p.m for p in mechanisms.values())
    lists = _calibration_lists(embedder, corpus, tau, m, questions)
    retr = _FixedScores(corpus)
    out = {}
    for name, params in mechanisms.items():
        src = RandomSource.from_seed(seed, name.encode())
        answers, hits = [], []
        for item, ids, s in lists:
            retr.current = s
            ans = params.respond(
                item.question, ids[: params.m] if ids.size >= params.m else ids, retr, generator, source=src
            )
            answers.append(ans.text)
            hits.append(contains_answer(ans.text, item.answers))
        out[name] = {"accuracy": float(np.mean(hits)), "answers": answers}
    return out


def answer_vote_grid(
    embedder,
    generator,
    corpus: ClinicCorpus,
    *,
    m: int,
    epsilon: float,
    max_tokens: int,
    thresholds: Sequence[float],
    key_words: Sequence[int],
    tau: int = 512,
    questions: int = 12,
    seed: bytes = b"tune",
    normalizer: str = "answer-keys-v1",
) -> dict:
    """Answer-level voting on the calibration questions for a grid of (threshold t, key words): the voters
    answer once per question (the answers do not depend on t or the key length), then steps 3-5 of
    ``accounting.rag.answer_vote`` (public normalisation, ``select_string``, Non-RAG fallback) run per setting
    on those answers. Also the voters' non-private plurality (a diagnostic). Returns {(t, kw): accuracy,
    "plurality": {kw: accuracy}}."""
    from dprag.accounting.mechanisms.string_selection import select_string
    from dprag.accounting.noise.source import RandomSource
    from dprag.accounting.rag.answer_vote import AnswerVoteParams
    from dprag.audit.protocol.policy import normalizer as load_normalizer

    norm = load_normalizer(normalizer)
    lists = _calibration_lists(embedder, corpus, tau, m, questions)
    retr = _FixedScores(corpus)
    base = AnswerVoteParams(m, epsilon, threshold=6.0, max_tokens=max_tokens, normalizer=norm, diagnostics=True)
    src = RandomSource.from_seed(seed, b"answer-vote-grid")
    voters, non_rag = [], []
    for item, ids, s in lists:
        retr.current = s
        info = base.respond(item.question, ids, retr, generator, source=src).info
        voters.append(info["voter_answers"])
        non_rag.append(generator.generate(Prompt(item.question), max_tokens).strip())
    res: dict = {"plurality": {}}
    for kw in key_words:
        params = replace(base, max_key_words=kw)
        keys = [[params.key(a, item.question) for a in ans] for (item, _, _), ans in zip(lists, voters, strict=False)]
        plur = []
        for (item, _, _), ks in zip(lists, keys, strict=False):
            voted = [k for k in ks if k]
            top = max(sorted(set(voted)), key=voted.count) if voted else ""
            plur.append(contains_answer(top, item.answers))
        res["plurality"][kw] = float(np.mean(plur))
        for t in thresholds:
            sel = RandomSource.from_seed(seed, f"select,{t},{kw}".encode())
            hits = []
            for (item, _, _), ks, nr in zip(lists, keys, non_rag, strict=False):
                chosen, _ = select_string([k for k in ks if k], epsilon, t, sel)
                hits.append(contains_answer(chosen if chosen else nr, item.answers))
            res[(t, kw)] = float(np.mean(hits))
    return res


def token_budget_accuracy(
    embedder,
    generator,
    corpus: ClinicCorpus,
    *,
    m: int,
    epsilon_token: float,
    c: int,
    tau: int = 512,
    max_tokens: int = 20,
    questions: int = 12,
    seed: bytes = b"tune",
) -> float:
    """Match accuracy of 000 Alg. 5 (m voters on the Top-m records above τ) on one test question per
    condition of the calibration corpus: how ε_token and c were chosen for the earlier pure-DP-RAG demo."""
    from dprag.accounting.rag.single_query import PureDpRagParams

    params = PureDpRagParams(m, epsilon_token, c, max_tokens=max_tokens)
    return mechanism_accuracy(
        embedder, generator, corpus, {f"{m},{epsilon_token},{c}": params}, tau=tau, questions=questions, seed=seed
    )[f"{m},{epsilon_token},{c}"]["accuracy"]


# ----------------------------------------------------------------------------------------------------------
# the command
# ----------------------------------------------------------------------------------------------------------
def grid_json(grid: dict) -> dict:
    """``answer_vote_grid``'s result with JSON keys: the voters' plurality accuracy per key length and one row
    per (threshold t, key words) setting, in the grid's order."""
    return {
        "plurality": {str(kw): acc for kw, acc in grid["plurality"].items()},
        "grid": [
            {"threshold": k[0], "key_words": k[1], "accuracy": acc} for k, acc in grid.items() if k != "plurality"
        ],
    }


_DEFAULT = DemoPrivacy()


@click.command("demo-calibration")
@click.option(
    "--model",
    type=click.Choice(["real", "tiny", "toy"]),
    default="real",
    show_default=True,
    help="real: MiniLM + SmolLM2 (the models the demo's choice was made with); tiny / toy: no model "
    "weights (for tests)",
)
@click.option(
    "--only",
    type=click.Choice(["tau", "answer-vote", "mechanism"]),
    default=None,
    help="run only tau_statistics (the embedder's score statistics), only answer_vote_grid, or only the choice "
    "of the generation mechanism (lab/demo/coverage.py: coverage_grid and release_grid; with the defaults and "
    "--passes 3: 3040 SmolLM2 prompts, 23 CPU-minutes)",
)
@click.option(
    "--corpus-seed",
    default=CALIBRATION_SEED,
    show_default=True,
    help="seed of the public calibration corpus (never a tenant's data)",
)
@click.option(
    "--conditions",
    type=click.IntRange(min=1),
    default=12,
    show_default=True,
    help="conditions of the calibration corpus",
)
@click.option(
    "--support-min",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="fewest records supporting a condition's facts",
)
@click.option(
    "--support-max",
    type=click.IntRange(min=1),
    default=30,
    show_default=True,
    help="most records supporting a condition's facts",
)
@click.option(
    "--distractors",
    type=click.IntRange(min=0),
    default=150,
    show_default=True,
    help="unrelated records of the calibration corpus",
)
@click.option(
    "--tau",
    type=click.IntRange(min=0),
    default=_DEFAULT.tau,
    show_default=True,
    help="τ in the integer score units of spec/protocol.md §4 (cosine x 1024)",
)
@click.option("--m", type=click.IntRange(min=1), default=_DEFAULT.m, show_default=True, help="voters")
@click.option(
    "--epsilon",
    type=click.FloatRange(min=0, min_open=True),
    default=_DEFAULT.vote_epsilon,
    show_default=True,
    help="ε of the answer-level selection (ε_q)",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    default=ANSWER_TOKENS["murag"],
    show_default=True,
    help="tokens of each (MuRAG) voter's answer",
)
@click.option(
    "--threshold",
    "thresholds",
    type=float,
    multiple=True,
    default=(1.0, 2.0, 4.0, 6.0),
    show_default=True,
    help="a threshold t (nats) of the universal selection; repeat for a grid",
)
@click.option(
    "--key-words",
    "key_words",
    type=click.IntRange(min=1),
    multiple=True,
    default=(2, 3),
    show_default=True,
    help="a key length (words) of the public normaliser; repeat for a grid",
)
@click.option(
    "--questions", type=click.IntRange(min=1), default=12, show_default=True, help="test questions, one per condition"
)
@click.option(
    "--ada-tokens",
    type=click.IntRange(min=1),
    default=ANSWER_TOKENS["murag-ada"],
    show_default=True,
    help="tokens of each MuRAG-Ada voter's answer (--only mechanism; MuRAG's: --max-tokens)",
)
@click.option(
    "--passes",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="passes of the demo's traffic over the dev questions in the release grid (--only mechanism)",
)
@click.option("--seed", default="tune", show_default=True, help="seed of the mechanisms' randomness (text)")
@click.option("--normalizer", default=_DEFAULT.normalizer, show_default=True, help="the public answer normaliser")
@click.option(
    "--cache",
    "cache_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="JSON-lines file of the voters' answers (--only mechanism): read at the start, appended after every batch, "
    "so a killed run resumes without generating them again; keyed by the model names, the prompt and the answer "
    "length (an answer of other models or another length is never reused)",
)
@click.option(
    "--progress-every",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="seconds between progress lines on stderr (stage, prompts answered / distinct prompts, elapsed, ETA)",
)
def demo_calibration(
    model: str,
    only: str | None,
    corpus_seed: str,
    conditions: int,
    support_min: int,
    support_max: int,
    distractors: int,
    tau: int,
    m: int,
    epsilon: float,
    max_tokens: int,
    thresholds: tuple[float, ...],
    key_words: tuple[int, ...],
    questions: int,
    ada_tokens: int,
    passes: int,
    seed: str,
    normalizer: str,
    cache_path: str | None,
    progress_every: float,
) -> None:
    """The demo's calibration on the public calibration corpus (spec/demo.md): tau_statistics and
    answer_vote_grid, printed as one JSON object."""
    if support_max < support_min:
        raise click.BadParameter(f"must be >= --support-min ({support_min})", param_hint="--support-max")
    corpus = calibration_corpus(
        corpus_seed,
        n_conditions=conditions,
        support_min=support_min,
        support_max=support_max,
        n_distractors=distractors,
    )
    log = StageLog(interval=progress_every)
    log.stage("loading models", model)
    models = load_models(model, Progress(False).counter)
    result: dict = {
        "model": model,
        "models": models.names,
        "corpus": {"seed": corpus_seed, "conditions": conditions, "records": len(corpus.documents)},
    }
    if only == "mechanism":  # not in the default run: it answers every candidate's voters (spec/demo.md step 3)
        from dprag.lab.demo.coverage import coverage_grid, default_grid, release_candidates, release_grid

        cache = AnswerCache(cache_path, models.names)
        log.stage("coverage_grid", f"{len(default_grid())} candidates, no LLM")
        result["coverage_grid"] = coverage_grid(models.embedder, corpus, default_grid(), epsilon_q=epsilon)
        result["release_grid"] = release_grid(
            models.embedder,
            models.generator,
            corpus,
            release_candidates(),
            epsilon_q=epsilon,
            passes=passes,
            key_words=key_words,
            normalizer=normalizer,
            tokens={"murag": max_tokens, "murag-ada": ada_tokens},
            cache=cache,
            log=log,
        )
        result["release_grid_settings"] = {
            "normalizer": normalizer,
            "answer_tokens": {"murag": max_tokens, "murag-ada": ada_tokens},
            "key_words": list(key_words),
            "passes": passes,
            "epsilon_q": epsilon,
        }
    if only in (None, "tau"):
        log.stage("tau_statistics")
        result["tau_statistics"] = tau_statistics(models.embedder, corpus, tau=tau)
    if only in (None, "answer-vote"):
        log.stage("answer_vote_grid", f"{questions} questions")
        grid = answer_vote_grid(
            models.embedder,
            models.generator,
            corpus,
            m=m,
            epsilon=epsilon,
            max_tokens=max_tokens,
            thresholds=thresholds,
            key_words=key_words,
            tau=tau,
            questions=questions,
            seed=seed.encode(),
            normalizer=normalizer,
        )
        result["answer_vote_grid"] = {
            "m": m,
            "epsilon": epsilon,
            "max_tokens": max_tokens,
            "tau": tau,
            "questions": questions,
            "normalizer": normalizer,
            **grid_json(grid),
        }
    log.stage("done")
    click.echo(json.dumps(result, indent=1, sort_keys=True))
