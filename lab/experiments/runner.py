"""The privacy–utility experiment (spec/experiments.md): dev-tuned methods × total ε on a test split, with metrics.

Protocol (spec/experiments.md):

1. Questions: ``select_questions`` draws N questions of one split with a seeded permutation
   (``RandomSource.from_seed``), keeping the drawn order; on a *dependent* split it draws whole chains
   (``group``) and keeps every chain in its own order (later questions build on earlier answers).
2. Tuning: for every private method and total ε, every hyperparameter setting of the method's grid
   (``methods.METHODS``) is run on ``n_dev`` dev questions with a fresh session (own filter) -- in
   ``Plan.dev_context`` when given (a tuning corpus that shares no record with the test corpus,
   spec/accounting/filters.md §5 item 4; ``Plan.tuning`` names the rule and every cell carries it); the setting
   with the best match accuracy (ties: token F1, then grid order) is kept. The papers take the best of
   the grid on the test questions (001 App. E); we do not.
3. Test: the kept setting answers the test questions in order, with a fresh session.

Metrics per cell: match accuracy, token F1, ROUGE-L (``rag_adapters.metrics``); retrieval precision
against the true top-K (001 Table 1: of the documents actually used in the prompt, the fraction among the
K best by exact score, averaged over questions that used at least one document; K = m for the voting
methods, k for Non-Private-RAG), recall@K (same intersection over K, 0 for a question that used none),
and the fraction of used documents that are gold supporting documents when the dataset knows them.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from dprag.accounting.errors import check_positive_int
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.rag.common import RagAnswer
from dprag.errors import DpragError, InvalidParameterError
from dprag.lab.experiments.methods import Context, Session, Settings, check_methods, get_method
from dprag.rag_adapters.datasets.base import QAItem, RagDataset
from dprag.rag_adapters.metrics import best_rouge_l, contains_answer, token_f1


# ----------------------------------------------------------------------------------------------------------
# retriever cache
# ----------------------------------------------------------------------------------------------------------
class CachedRetriever:
    """A Retriever that memoises ``scores(query)`` (queries repeat across methods, ε and grid settings).

    Experiments only: the scores are a deterministic function of (corpus, query), so caching changes no
    result. Returned arrays are read-only copies of the cached one.
    """

    def __init__(self, inner, max_entries: int = 4096):
        self.inner = inner
        self._cache: dict[str, np.ndarray] = {}
        self.max_entries = max_entries

    def __len__(self) -> int:
        return len(self.inner)

    def scores(self, query: str) -> np.ndarray:
        s = self._cache.get(query)
        if s is None:
            s = np.asarray(self.inner.scores(query), dtype=np.float64).copy()
            s.setflags(write=False)
            if len(self._cache) >= self.max_entries:
                self._cache.pop(next(iter(self._cache)))
            self._cache[query] = s
        return s

    def document(self, doc_id: int) -> str:
        return self.inner.document(doc_id)


# ----------------------------------------------------------------------------------------------------------
# question selection
# ----------------------------------------------------------------------------------------------------------
def _permutation(n: int, source: RandomSource) -> list[int]:
    idx = list(range(n))
    for i in range(n - 1, 0, -1):  # Fisher–Yates with exact uniform draws
        j = int(source.uniform_below(i + 1, 1)[0])
        idx[i], idx[j] = idx[j], idx[i]
    return idx


def select_questions(
    dataset: RagDataset, split: str, n: int | None, seed: bytes = b"dprag-experiments"
) -> list[QAItem]:
    """``n`` questions of ``split`` (all if None), seeded; dependent chains are drawn whole and kept in order."""
    items = list(dataset.split(split))
    if n is not None:
        n = check_positive_int("queries", n)
    src = RandomSource.from_seed(seed, f"questions/{dataset.name}/{split}".encode())
    chained = any(q.depends_on for q in items)
    if not chained:
        perm = _permutation(len(items), src)
        return [items[i] for i in perm[: n if n is not None else len(items)]]
    groups: dict[str, list[QAItem]] = {}
    for q in items:
        groups.setdefault(q.group or q.qid, []).append(q)
    keys = list(groups)
    out: list[QAItem] = []
    for i in _permutation(len(keys), src):
        if n is not None and len(out) >= n:
            break
        out.extend(groups[keys[i]])
    return out[:n] if n is not None else out


# ----------------------------------------------------------------------------------------------------------
# evaluation
# ----------------------------------------------------------------------------------------------------------
@dataclass
class QuestionResult:
    qid: str
    question: str
    prediction: str
    correct: bool
    f1: float
    rouge_l: float
    seconds: float
    used: int
    precision: float | None
    recall_at_k: float | None
    support: float | None
    private_tokens: int
    history_pairs: int = 0
    plurality: str | None = None  # answer-vote only: the voters' non-private plurality key (experiment baseline)
    plurality_correct: bool | None = None
    fallback: bool | None = None  # answer-vote only: the selection released ⊥ (the Non-RAG answer)
    key_votes: dict | None = None  # answer-vote only: the voters' non-empty keys and their counts (diagnostic:
    # lets a reader compute each selection's exact chance of a correct release offline)
    voter_answers: list | None = None  # answer-vote only: each voter's raw answer, in voter order (diagnostic: lets a
    # reader re-key the same answers under another normalisation offline, ``normalizer_check``)
    voter_abstained: list | None = None  # answer-vote only: which voters abstained (only the empty document)


def _top_k_ids(scores: np.ndarray, k: int) -> np.ndarray:
    k = min(k, scores.size)
    order = np.lexsort((np.arange(scores.size), -scores))
    return order[:k]


def evaluate_answer(item: QAItem, ans: RagAnswer, scores: np.ndarray | None, k: int, seconds: float) -> QuestionResult:
    used = np.asarray(ans.retrieved, dtype=np.int64)
    used = np.unique(used[used >= 0])
    precision = recall = support = None
    if scores is not None and ans.info.get("method") != "non-rag":
        top = set(_top_k_ids(scores, k).tolist())
        hit = sum(1 for i in used.tolist() if i in top)
        recall = hit / k
        if used.size:
            precision = hit / used.size
    if used.size and item.relevant_ids:
        rel = set(item.relevant_ids)
        support = sum(1 for i in used.tolist() if i in rel) / used.size
    return QuestionResult(
        qid=item.qid,
        question=item.question,
        prediction=ans.text,
        correct=contains_answer(ans.text, item.answers),
        f1=token_f1(ans.text, item.answers),
        rouge_l=best_rouge_l(ans.text, item.answers),
        seconds=seconds,
        used=int(used.size),
        precision=precision,
        recall_at_k=recall,
        support=support,
        private_tokens=int(ans.private_tokens),
        history_pairs=int(ans.info.get("history_pairs", 0)),
        plurality=ans.info.get("plurality"),
        plurality_correct=(
            None if "plurality" not in ans.info else contains_answer(ans.info["plurality"], item.answers)
        ),
        fallback=ans.info.get("fallback"),
        key_votes=(
            None
            if "voter_keys" not in ans.info
            else dict(sorted(Counter(k for k in ans.info["voter_keys"] if k).items()))
        ),
        voter_answers=(
            None
            if "voter_answers" not in ans.info
            else [None if a is None else str(a) for a in ans.info["voter_answers"]]
        ),
        voter_abstained=None if "voter_abstained" not in ans.info else [bool(x) for x in ans.info["voter_abstained"]],
    )


def _mean(xs: Iterable[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return float(np.mean(v)) if v else None


@dataclass
class CellResult:
    """One (method, ε_total) cell on one split."""

    method: str
    eps_total: float | None
    split: str
    queries: int
    accuracy: float
    f1: float
    rouge_l: float
    precision: float | None
    recall_at_k: float | None
    support: float | None
    docs_used: float
    private_tokens: float
    eps_certified: float | None
    delta: float
    hp: dict
    seconds: float
    m: int
    questions: list[QuestionResult] = field(default_factory=list)
    dev_accuracy: float | None = None
    dev_seconds: float = 0.0
    dev_grid: list = field(default_factory=list)
    derived: dict = field(default_factory=dict)
    plurality_accuracy: float | None = None  # answer-vote: the same voters' non-private plurality
    tuning: str = ""  # which tuning rule chose ``hp`` (spec/experiments.md §3)

    def row(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("questions", "dev_grid")}
        d["seconds_per_query"] = self.seconds / self.queries if self.queries else None
        d["hp"] = json.dumps(self.hp, sort_keys=True)
        d["dev_grid"] = json.dumps(self.dev_grid)
        d["derived"] = json.dumps(self.derived, sort_keys=True)
        return d


def run_cell(
    ctx: Context,
    method: str,
    eps: float | None,
    hp: dict,
    items: Sequence[QAItem],
    split: str,
    progress: Callable | None = None,
    on_question: Callable | None = None,
) -> CellResult:
    """Answer ``items`` in order with a fresh session of ``method`` at total ``eps`` and settings ``hp``."""
    spec = get_method(method)
    session: Session = spec.build(ctx, eps, hp)
    m = ctx.settings.voters(hp)
    k = hp.get("k", m) if method == "non-private-rag" else m * ctx.settings.retrieval(hp).docs_per_voter
    results = []
    t0 = time.perf_counter()
    it = progress(items, desc=f"{method} eps={eps} {split}") if progress else items
    for item in it:
        t = time.perf_counter()
        ans = session.answer(item)
        dt = time.perf_counter() - t
        scores = ctx.retriever.scores(item.question) if method != "non-rag" else None
        results.append(evaluate_answer(item, ans, scores, k, dt))
        if on_question:
            on_question(method, eps, split, hp, results[-1])
    seconds = time.perf_counter() - t0
    eps_c, delta_c = session.guarantee()
    return CellResult(
        method=method,
        eps_total=eps,
        split=split,
        queries=len(results),
        accuracy=float(np.mean([r.correct for r in results])),
        f1=float(np.mean([r.f1 for r in results])),
        rouge_l=float(np.mean([r.rouge_l for r in results])),
        precision=_mean(r.precision for r in results),
        recall_at_k=_mean(r.recall_at_k for r in results),
        support=_mean(r.support for r in results),
        docs_used=float(np.mean([r.used for r in results])),
        private_tokens=float(np.mean([r.private_tokens for r in results])),
        eps_certified=None if eps_c is None or math.isinf(eps_c) else float(eps_c),
        delta=float(delta_c),
        hp=hp,
        seconds=seconds,
        m=m,
        questions=results,
        derived=dict(getattr(session, "derived", {})),
        plurality_accuracy=_mean(None if r.plurality_correct is None else float(r.plurality_correct) for r in results),
    )


def tune(
    ctx: Context,
    method: str,
    eps: float | None,
    dev: Sequence[QAItem],
    progress: Callable | None = None,
    on_question: Callable | None = None,
) -> tuple[dict, list, float, float | None]:
    """Best hyperparameters of ``method`` at ``eps`` on the dev questions: (hp, grid log, seconds, dev acc)."""
    grid = get_method(method).grid(ctx, eps)
    if len(grid) == 1 or not dev:
        return grid[0], [], 0.0, None
    log, best, best_key = [], None, None
    t0 = time.perf_counter()
    for i, hp in enumerate(grid):
        try:
            cell = run_cell(ctx, method, eps, hp, dev, "dev", progress, on_question)
        except DpragError as e:  # e.g. the budget does not cover one private token at this setting
            log.append({"hp": hp, "error": str(e)})
            continue
        log.append({"hp": hp, "accuracy": cell.accuracy, "f1": cell.f1})
        key = (cell.accuracy, cell.f1, -i)
        if best_key is None or key > best_key:
            best, best_key = hp, key
    if best is None:
        raise InvalidParameterError("epsilon_total", f"no setting of {method} is feasible at ε_total={eps}: {log}")
    return best, log, time.perf_counter() - t0, best_key[0]


@dataclass(frozen=True)
class Plan:
    methods: tuple[str, ...]
    eps: tuple[float, ...]
    test: tuple[QAItem, ...]
    dev: tuple[QAItem, ...] = ()
    test_split: str = "test"
    #: the context the dev questions run in (their own corpus, retriever, filters); None = the test context
    dev_context: Context | None = None
    #: how hyperparameters were chosen, written into every cell (spec/experiments.md §3)
    tuning: str = "dev split of the test corpus (not charged)"
    #: method -> the ``Settings`` fields it runs with instead of the run's (its best-known m, τ grid, bins;
    #: ``lab/experiments/defaults.py``); other keys are ignored
    per_method: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def method_context(ctx: Context, overrides: Mapping[str, Any]) -> Context:
    """``ctx`` with the ``Settings`` fields of ``overrides`` replaced (the same retriever, generator, seed)."""
    names = {f.name for f in fields(Settings)}
    ov = {k: v for k, v in overrides.items() if k in names}
    return replace(ctx, settings=replace(ctx.settings, **ov)) if ov else ctx


def run_plan(
    ctx: Context,
    plan: Plan,
    progress: Callable | None = None,
    on_cell: Callable[[CellResult], None] | None = None,
    on_question: Callable | None = None,
) -> list[CellResult]:
    """Every method × ε (methods that spend nothing or promise nothing run once, ``eps_total`` = 0 / None)."""
    check_methods(plan.methods)
    if not plan.test:
        raise InvalidParameterError("queries", "no test questions selected")
    for e in plan.eps:
        if not (isinstance(e, (int, float)) and math.isfinite(e) and e > 0):
            raise InvalidParameterError("eps", "every total ε must be finite and > 0", e)
    cells = []
    for method in plan.methods:
        spec = get_method(method)
        ov = plan.per_method.get(method, {})
        ctx_m = method_context(ctx, ov)
        dev_m = None if plan.dev_context is None else method_context(plan.dev_context, ov)
        grid_eps = plan.eps if spec.uses_eps else ((0.0,) if spec.private else (None,))
        for eps in grid_eps:
            e_arg = eps if spec.uses_eps else None
            try:
                hp, log, dev_s, dev_acc = tune(dev_m or ctx_m, method, e_arg, plan.dev, progress, on_question)
                cell = run_cell(ctx_m, method, e_arg, hp, plan.test, plan.test_split, progress, on_question)
            except DpragError as e:
                if not spec.uses_eps:
                    raise
                cell = CellResult(
                    method=method,
                    eps_total=eps,
                    split=plan.test_split,
                    queries=0,
                    accuracy=float("nan"),
                    f1=float("nan"),
                    rouge_l=float("nan"),
                    precision=None,
                    recall_at_k=None,
                    support=None,
                    docs_used=0.0,
                    private_tokens=0.0,
                    eps_certified=None,
                    delta=0.0,
                    hp={"infeasible": str(e)},
                    seconds=0.0,
                    m=ctx_m.settings.m,
                    tuning=plan.tuning,
                )
                cells.append(cell)
                if on_cell:
                    on_cell(cell)
                continue
            cell.eps_total = eps
            cell.dev_accuracy, cell.dev_seconds, cell.dev_grid = dev_acc, dev_s, log
            cell.tuning = (
                plan.tuning if log or len(get_method(method).grid(ctx_m, e_arg)) > 1 else "none (a single setting)"
            )
            cells.append(cell)
            if on_cell:
                on_cell(cell)
    return cells
