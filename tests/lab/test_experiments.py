"""Privacy–utility experiment machinery (rag_adapters.experiments) on the toy model: budgets, question
selection, tuning, metrics, and the CLI end to end. No torch model is loaded here.

Expected values are derived independently: closed forms of the pure-DP cost of 000 Alg. 5
(ε_token·(1 + 3c)/4 with θ drawn once), basic composition, and hand-built toy corpora whose answers are
known by construction.
"""

import csv
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from dprag.accounting.rag.budget import certified_epsilon
from dprag.accounting.rag.multi_query import SubsamplingMultiRAG
from dprag.accounting.rag.single_query import PureDpRagParams
from dprag.audit.testing.toy import ToyGenerator, ToyRetriever
from dprag.errors import InvalidParameterError
from dprag.lab.experiments.cli import experiment
from dprag.lab.experiments.methods import (
    METHODS,
    Context,
    Settings,
    check_methods,
    pure_rag_params,
    subsampling_rag_params,
)
from dprag.lab.experiments.runner import CachedRetriever, Plan, evaluate_answer, run_cell, run_plan, select_questions
from dprag.rag_adapters.datasets.base import QAItem, RagDataset

WORDS = ["alpha", "bravo", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "jasper"]


def toy_dataset(n_topics=6, per_topic=24, n_noise=40, dependent=False):
    """Topic i: ``per_topic`` documents "topic<i> ... ANSWER: <word_i>"; questions ask about topic<i>."""
    docs, qs = [], []
    for i in range(n_topics):
        docs += [f"record {j} topic{i} protocol drug ANSWER: {WORDS[i]}" for j in range(per_topic)]
    docs += [f"note {j} unrelated garden weather" for j in range(n_noise)]
    for i in range(n_topics):
        for split in ("dev", "test"):
            qs.append(
                QAItem(
                    qid=f"{split}-{i}",
                    question=f"which drug protocol for topic{i}",
                    answers=(WORDS[i],),
                    relevant_ids=tuple(range(i * per_topic, (i + 1) * per_topic)),
                    split=split,
                    group=f"t{i}",
                )
            )
        if dependent:
            for j in range(3):
                qs.append(
                    QAItem(
                        qid=f"dep-{i}-{j}",
                        question=f"step {j} which drug protocol for topic{i}",
                        answers=(WORDS[i],),
                        relevant_ids=(),
                        split="dependent",
                        group=f"chain{i}",
                        depends_on=(f"dep-{i}-{j - 1}",) if j else (),
                    )
                )
    return RagDataset(name="toy", documents=tuple(docs), questions=tuple(qs))


def toy_context(ds, **kw):
    settings = Settings(
        **{
            "m": 10,
            "queries": 6,
            "max_tokens": 6,
            "taus": (2.5,),
            "edges": tuple(float(x) for x in range(8, -1, -1)),
            **kw,
        }
    )
    return Context(CachedRetriever(ToyRetriever(ds.documents)), ToyGenerator(), settings, seed=b"test-experiments")


# -- budgets ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("eps_q,c", [(10.0, 1), (10.0, 4), (0.1, 2), (3.7, 3)])
def test_pure_rag_params_inverts_the_closed_form_cost(eps_q, c):
    # 000 Alg. 5 with θ drawn once: SVT ε_Lap/2 + c·ε_Lap/2, plus c exponential mechanisms of ε_token/2,
    # ε_Lap = ε_token/2  =>  cost = ε_token·(1 + 3c)/4, so the largest fitting ε_token is 4·ε_q/(1 + 3c).
    p = pure_rag_params(10, c, eps_q)
    assert p.max_private_tokens == c
    assert math.isclose(p.epsilon_token, 4 * eps_q / (1 + 3 * c), rel_tol=1e-7)
    assert certified_epsilon(p.cost, 0.0) <= eps_q


def test_auto_private_tokens_keeps_the_em_margin():
    from dprag.lab.experiments.methods import auto_private_tokens

    for m, eps_q in [(20, 10.0), (20, 100.0), (50, 10.0), (30, 3.0)]:
        c = auto_private_tokens(m, eps_q, 15.0, 1000)
        e = pure_rag_params(m, 0, eps_q, margin=15.0, max_tokens=1000)
        assert e.max_private_tokens == c
        # the chosen c keeps the unanimous-vote log-odds m·ε_token/4 >= 15; one more token would not
        # (unless c was clipped up to 1)
        assert m * e.epsilon_token / 4 >= 15.0 * (1 - 1e-9) or c == 1
        assert m * (4 * eps_q / (1 + 3 * (c + 1))) / 4 < 15.0
    assert auto_private_tokens(20, 100.0, 15.0, 16) == 16  # clipped to max_tokens
    assert auto_private_tokens(20, 0.1, 15.0, 16) == 1  # at least one


def test_subsampling_params_fit_the_total_and_are_maximal():
    p = subsampling_rag_params(10, 2, 0.1, 10.0, 1e-5, 50)
    assert SubsamplingMultiRAG.total_epsilon(p.cost, 0.1, 50, 1e-5) <= 10.0
    bigger = PureDpRagParams(10, p.epsilon_token * 1.01, 2)
    assert SubsamplingMultiRAG.total_epsilon(bigger.cost, 0.1, 50, 1e-5) > 10.0
    # amplification is worth something: the subsampled per-query ε_token beats naive composition's 10/50
    assert p.epsilon_token > pure_rag_params(10, 2, 10.0 / 50).epsilon_token


def test_unknown_method_and_bad_eps_are_typed_errors():
    with pytest.raises(InvalidParameterError, match="method"):
        check_methods(["murag", "no-such-method"])
    ds = toy_dataset()
    ctx = toy_context(ds)
    test = select_questions(ds, "test", 3)
    with pytest.raises(InvalidParameterError, match="eps"):
        run_plan(ctx, Plan(("murag",), (0.0,), tuple(test)))
    with pytest.raises(InvalidParameterError, match="eps"):
        run_plan(ctx, Plan(("murag",), (float("nan"),), tuple(test)))
    with pytest.raises(InvalidParameterError, match="queries"):
        select_questions(ds, "test", 0)


# -- question selection ----------------------------------------------------------------------------------
def test_select_questions_is_seeded_and_keeps_chains_whole():
    ds = toy_dataset(dependent=True)
    a = select_questions(ds, "test", 4, b"s1")
    assert [q.qid for q in a] == [q.qid for q in select_questions(ds, "test", 4, b"s1")]
    assert len({q.qid for q in a}) == 4 and all(q.split == "test" for q in a)
    # a different seed gives a different order over the 6! permutations (fails with probability 1/6! per draw
    # of an identical prefix; these fixed seeds are checked once)
    s1, s2 = (select_questions(ds, "test", 6, seed) for seed in (b"s1", b"s2"))
    assert [q.qid for q in s1] != [q.qid for q in s2]
    dep = select_questions(ds, "dependent", 6, b"s1")
    assert len(dep) == 6
    for k in range(0, 6, 3):  # two whole chains, each in its own order
        chain = dep[k : k + 3]
        assert len({q.group for q in chain}) == 1
        assert [q.qid[-1] for q in chain] == ["0", "1", "2"]


# -- metrics ---------------------------------------------------------------------------------------------
def test_evaluate_answer_precision_against_true_top_k():
    from dprag.accounting.rag.common import RagAnswer

    item = QAItem("q", "question", ("cobalt",), relevant_ids=(0, 1, 2))
    scores = np.array([9.0, 8.0, 7.0, 6.0, 5.0, 1.0])
    # used {0, 3, 5} (and padding -1): true top-3 = {0, 1, 2}, so 1 of 3 used is in the top-3
    ans = RagAnswer(text="The drug is Cobalt.", retrieved=np.array([0, 3, 5, -1]), private_tokens=2)
    r = evaluate_answer(item, ans, scores, 3, 0.5)
    assert r.correct and r.f1 == pytest.approx(2 * (1 / 3) * 1 / (1 / 3 + 1))
    assert r.precision == pytest.approx(1 / 3) and r.recall_at_k == pytest.approx(1 / 3)
    assert r.support == pytest.approx(1 / 3) and r.used == 3
    empty = evaluate_answer(item, RagAnswer(text="unknown"), scores, 3, 0.1)
    assert empty.precision is None and empty.recall_at_k == 0.0 and not empty.correct


# -- the paper's central claim on a toy corpus -----------------------------------------------------------
def test_murag_beats_non_rag_and_naive_does_not_on_toy():
    ds = toy_dataset()
    ctx = toy_context(ds)
    test = tuple(select_questions(ds, "test", None))
    cells = {c.method: c for c in run_plan(ctx, Plan(("non-rag", "murag", "naive-multi-rag"), (20.0,), test))}
    assert cells["non-rag"].accuracy == 0.0  # the toy model says "unknown" without a document
    # MuRAG, ε_q = 20, c = 2 (grid's first feasible best): ε_token = 80/7 ≈ 11.4, ε_Expo ≈ 5.7; ≥ 20 of the
    # 10 voters... every one of the 10 voters reads an answer document (24 per topic above τ), so the EM
    # weight of the right word is e^(5.7·10/2) ≈ e^28 against 511 others: wrong with probability < 1e-9.
    assert cells["murag"].accuracy == 1.0
    assert cells["murag"].eps_certified <= 20.0 + 1e-6
    # Naive: ε_q = 20/6 ≈ 3.3 over the same 6 questions, c = 2: ε_token ≈ 1.9, e^(0.95·10/2) ≈ 115 against
    # 511 others of weight 1: the first discovered token is right with probability ≈ 0.18, and an answer
    # needs it right (1 word). The run is seeded; the assertion (< MuRAG) fails only if all 6 are right.
    assert cells["naive-multi-rag"].accuracy < cells["murag"].accuracy
    assert cells["murag"].precision == 1.0  # the 10 used documents are exactly 10 of the 24 tied best


def test_murag_M1_exhausts_repeated_topics_and_history_recovers_them():
    # Three questions per topic in a row. M = 1 and τ below every topic document: the first question charges
    # all 24 documents of its topic, the next two find none and the toy model says "unknown"; with
    # answer-history reuse, the earlier released answer (question words overlap ≥ 2) answers them for free.
    docs_ds = toy_dataset(n_topics=3)
    items = []
    for i in range(3):
        for j in range(3):
            items.append(QAItem(f"r{i}{j}", f"which drug protocol for topic{i} variant{i}{j}", (WORDS[i],)))
    ctx = toy_context(docs_ds, queries=len(items))
    plain = run_cell(ctx, "murag", 30.0, {"c": 2, "tau": 2.5}, items, "test")
    hist = run_cell(ctx, "murag-history", 30.0, {"c": 2, "tau": 2.5}, items, "test")
    assert [q.correct for q in plain.questions] == [True, False, False] * 3
    assert all(q.correct for q in hist.questions)
    assert [q.used for q in plain.questions] == [10, 0, 0] * 3
    assert hist.eps_certified == plain.eps_certified <= 30.0 + 1e-6  # reuse spends nothing more


def test_murag_ada_and_composed_baselines_report_their_guarantees():
    ds = toy_dataset()
    ctx = toy_context(ds)
    test = tuple(select_questions(ds, "test", None))
    cells = {
        c.method: c
        for c in run_plan(
            ctx,
            Plan(
                ("murag-ada", "dp-sparse-vote-rag", "dp-ksa", "subsampling-multi-rag", "non-private-rag"), (30.0,), test
            ),
        )
    }
    assert cells["murag-ada"].eps_certified <= 30.0 + 1e-6 and cells["murag-ada"].accuracy == 1.0
    # T = 6 questions: the session-calibrated sparse vote (calibrate_sparse_vote(queries=T)) and DP-KSA
    # (calibrate_dp_ksa(queries=T)) both give back (ε_total, δ) once all T are answered
    for name in ("dp-sparse-vote-rag", "dp-ksa"):
        assert cells[name].eps_certified == pytest.approx(30.0)
        assert cells[name].delta == pytest.approx(1e-5)
    assert cells["subsampling-multi-rag"].eps_certified <= 30.0
    assert cells["non-private-rag"].eps_total is None and cells["non-private-rag"].accuracy == 1.0


def test_tuning_picks_the_better_threshold_on_dev():
    # τ = 100 admits no document (toy scores are word counts <= 6): MuRAG then answers like Non-RAG (0 %);
    # τ = 2.5 admits the topic documents (100 %). Tuning on dev must pick τ = 2.5.
    ds = toy_dataset()
    ctx = toy_context(ds, taus=(100.0, 2.5), private_tokens=(2,))
    dev = tuple(select_questions(ds, "dev", 3))
    test = tuple(select_questions(ds, "test", None))
    (cell,) = run_plan(ctx, Plan(("murag",), (20.0,), test, dev))
    assert cell.hp == {"c": 2, "tau": 2.5}
    assert [g["accuracy"] for g in cell.dev_grid] == [0.0, 1.0]
    assert cell.accuracy == 1.0


# -- CLI -------------------------------------------------------------------------------------------------
@pytest.mark.integration
def test_cli_privacy_utility_end_to_end_on_toy(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(
        experiment,
        [
            "privacy-utility",
            "--dataset",
            "clinic",
            "--model",
            "toy",
            "--methods",
            "non-rag,murag,murag-ada,naive-multi-rag",
            "--eps",
            "5,50",
            "--queries",
            "6",
            "--dev-queries",
            "2",
            "--m",
            "4",
            "--out",
            str(out),
            "--json",
            "--no-progress",
        ],
    )
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")]
    # non-rag once (ε = 0) + 3 private methods × 2 ε
    assert len(rows) == 7
    assert {(x["method"], x["eps_total"]) for x in rows} == {("non-rag", 0.0)} | {
        (mth, e) for mth in ("murag", "murag-ada", "naive-multi-rag") for e in (5.0, 50.0)
    }
    for x in rows:
        assert {"method", "eps_total", "accuracy", "queries", "f1", "rouge_l", "precision", "m", "seconds"} <= set(x)
        assert x["queries"] == 6 and x["m"] == 4 and 0.0 <= x["accuracy"] <= 1.0
        assert x["schema"] == "dprag.experiment.privacy-utility/1"  # spec/cli-json.md: every --json object
    assert all(
        json.loads(line)["schema"] == "dprag.experiment.privacy-utility/1"
        for line in (out / "privacy_utility.jsonl").read_text().splitlines()
    )
    with open(out / "privacy_utility.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 7 and {t["method"] for t in table} == {"non-rag", "murag", "murag-ada", "naive-multi-rag"}
    png = (out / "privacy_utility.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    assert len((out / "privacy_utility.jsonl").read_text().splitlines()) == 7
    assert json.loads((out / "run.json").read_text())["test_questions"] == 6


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--methods", "murag,bogus"], "bogus"),
        (["--eps", "0"], "--eps"),
        (["--eps", "-1,10"], "--eps"),
        (["--queries", "0"], "--queries"),
        (["--m", "0"], "--m"),
        (["--bins", "30,80"], "--bins"),
        (["--private-tokens", "-1"], "--private-tokens"),
    ],
)
def test_cli_bad_input_exits_2(tmp_path, args, needle):
    r = CliRunner().invoke(
        experiment,
        [
            "privacy-utility",
            "--dataset",
            "clinic",
            "--model",
            "toy",
            "--out",
            str(tmp_path / "x"),
            "--no-progress",
            *args,
        ],
    )
    assert r.exit_code == 2
    assert needle in r.output
    assert not (tmp_path / "x" / "privacy_utility.csv").exists()


def test_cli_missing_dataset_package_exits_2(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec

    def fake(name, *a, **k):
        return None if name == "fanoutqa" else real(name, *a, **k)

    monkeypatch.setattr(importlib.util, "find_spec", fake)
    r = CliRunner().invoke(
        experiment,
        [
            "privacy-utility",
            "--dataset",
            "wiki-fanout",
            "--model",
            "toy",
            "--out",
            str(tmp_path / "x"),
            "--no-progress",
        ],
    )
    assert r.exit_code == 2
    assert "fanoutqa" in r.output


def test_every_registered_method_is_documented():
    assert set(METHODS) == {
        "non-rag",
        "non-private-rag",
        "murag",
        "murag-gnmax",
        "murag-ada",
        "naive-multi-rag",
        "subsampling-multi-rag",
        "dp-sparse-vote-rag",
        "dp-ksa",
        "murag-history",
        "murag-answer-vote",
        "murag-ada-answer-vote",
        "murag-answer-vote-history",
        "murag-ada-answer-vote-history",
    }
    from dprag.lab.experiments import methods

    doc = methods.__doc__
    table = doc[doc.index("=" * 20) : doc.rindex("=" * 20)]  # the module's table of methods
    for name in METHODS:
        assert f"{name} " in table, name


@pytest.mark.integration
def test_dprag_root_cli_finds_the_experiment_command(tmp_path, capsys):
    # through the installed entry point dprag.commands: experiment = rag_adapters.experiments.cli:experiment
    from dprag.audit.cli import main

    assert (
        main(
            [
                "experiment",
                "privacy-utility",
                "--dataset",
                "clinic",
                "--model",
                "toy",
                "--eps",
                "0",
                "--out",
                str(tmp_path / "x"),
                "--no-progress",
            ]
        )
        == 2
    )
    assert "--eps" in capsys.readouterr().err
    assert (
        main(
            [
                "experiment",
                "privacy-utility",
                "--dataset",
                "clinic",
                "--model",
                "toy",
                "--methods",
                "non-rag",
                "--queries",
                "2",
                "--dev-queries",
                "0",
                "--out",
                str(tmp_path / "ok"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert (tmp_path / "ok" / "privacy_utility.csv").is_file()


# -- voter grid (m, documents per voter) ---------------------------------------------------------------------
def test_voter_grid_expands_only_lists_and_reaches_every_voting_method():
    one = Settings(m=7)
    assert one.voter_grid() == [{}] and one.voters({}) == 7 and one.retrieval({}).docs_per_voter == 1
    s = Settings(m=5, m_grid=(5, 9), docs_per_voter=(1, 3))
    assert s.voter_grid() == [{"m": 5, "dpv": 1}, {"m": 5, "dpv": 3}, {"m": 9, "dpv": 1}, {"m": 9, "dpv": 3}]
    ds = toy_dataset()
    ctx = toy_context(ds, m_grid=(5, 9), docs_per_voter=(1, 3), private_tokens=(2,), taus=(2.5,))
    for name in ("murag", "murag-ada", "naive-multi-rag", "dp-sparse-vote-rag", "subsampling-multi-rag"):
        grid = METHODS[name].grid(ctx, 10.0)
        assert {(g["m"], g["dpv"]) for g in grid} == {(5, 1), (5, 3), (9, 1), (9, 3)}, name
    assert [g["m"] for g in METHODS["dp-ksa"].grid(ctx, 10.0)] == [5, 9]  # one response per document: no dpv


def test_documents_per_voter_sets_k_and_the_cell_reports_m():
    # topic i has 24 documents scoring above τ = 2.5: with m = 3 voters × 2 documents MuRAG reads K = 6
    ds = toy_dataset()
    ctx = toy_context(ds, private_tokens=(2,), taus=(2.5,))
    items = tuple(select_questions(ds, "test", 3))
    cell = run_cell(ctx, "murag", 30.0, {"m": 3, "dpv": 2, "c": 2, "tau": 2.5}, items, "test")
    assert cell.m == 3 and cell.derived["m"] == 3
    assert [q.used for q in cell.questions] == [6, 6, 6]
    # precision is measured against the true top-K with K = m × dpv = 6: the 6 used are exactly the top 6
    assert all(q.precision == 1.0 and q.recall_at_k == 1.0 for q in cell.questions)
    single = run_cell(ctx, "murag", 30.0, {"m": 3, "c": 2, "tau": 2.5}, items, "test")
    assert [q.used for q in single.questions] == [3, 3, 3]


@pytest.mark.integration
def test_cli_m_grid_is_tuned_on_dev(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(
        experiment,
        [
            "privacy-utility",
            "--dataset",
            "clinic",
            "--model",
            "toy",
            "--methods",
            "murag",
            "--eps",
            "50",
            "--queries",
            "3",
            "--dev-queries",
            "2",
            "--m",
            "2,4",
            "--docs-per-voter",
            "1,2",
            "--private-tokens",
            "2",
            "--out",
            str(out),
            "--json",
            "--no-progress",
        ],
    )
    assert r.exit_code == 0, r.output
    (row,) = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")]
    grid = row["dev_grid"]
    assert len(grid) == 4 * 2  # (m, dpv) × τ ∈ default grid of two thresholds
    assert {(g["hp"]["m"], g["hp"]["dpv"]) for g in grid} == {(2, 1), (2, 2), (4, 1), (4, 2)}
    hp = row["hp"]
    assert row["m"] == hp["m"] and hp["dpv"] in (1, 2)
    assert json.loads((out / "run.json").read_text())["m"] == [2, 4]
    bad = CliRunner().invoke(
        experiment,
        [
            "privacy-utility",
            "--dataset",
            "clinic",
            "--model",
            "toy",
            "--docs-per-voter",
            "0",
            "--out",
            str(tmp_path / "x"),
            "--no-progress",
        ],
    )
    assert bad.exit_code == 2 and "--docs-per-voter" in bad.output


def test_gnmax_params_take_the_smallest_sigma_that_fits():
    from dprag.accounting.filters import FilterBudget
    from dprag.lab.experiments.methods import gnmax_params

    for m, tokens, M, eps in [(10, 8, 1, 10.0), (20, 24, 2, 10.0), (5, 3, 1, 2.0)]:
        p = gnmax_params(m, tokens, M, eps, 1e-5)
        assert p.m == m and p.max_tokens == tokens

        def certified(sigma, m=m, tokens=tokens, M=M):
            from dprag.accounting.rag.mechanism import GaussianVoteRagParams

            cost = GaussianVoteRagParams(m, sigma, tokens).cost
            return FilterBudget.for_queries(M, cost, mode="rdp").guarantee(1e-5)[0]

        assert certified(p.sigma) <= eps < certified(p.sigma * (1 - 1e-6))


def test_murag_gnmax_answers_the_toy_corpus_within_budget():
    ds = toy_dataset()
    ctx = toy_context(ds, private_tokens=(3,), taus=(2.5,))
    items = tuple(select_questions(ds, "test", None))
    cell = run_cell(ctx, "murag-gnmax", 200.0, {"c": 3, "tau": 2.5}, items, "test")
    assert cell.eps_certified <= 200.0 and cell.delta == 1e-5
    assert cell.accuracy == 1.0 and cell.derived["tokens"] == 3


@pytest.mark.integration
def test_public_completion_reaches_every_pure_dp_method(tmp_path):
    ds = toy_dataset()
    for flag in (False, True):
        ctx = toy_context(ds, private_tokens=(2,), taus=(2.5,), public_completion=flag)
        for name, hp in (
            ("murag", {"c": 2, "tau": 2.5}),
            ("murag-ada", {"c": 2}),
            ("naive-multi-rag", {"c": 2}),
            ("subsampling-multi-rag", {"c": 2, "p": 0.5}),
        ):
            session = METHODS[name].build(ctx, 30.0, hp)
            assert session.algo.rag.public_completion is flag, name
    ctx = toy_context(ds, private_tokens=(2,), taus=(2.5,), em_prior="non-rag")
    assert METHODS["murag"].build(ctx, 30.0, {"c": 2, "tau": 2.5}).algo.rag.em_prior == "non-rag"
    r = CliRunner().invoke(
        experiment,
        [
            "privacy-utility",
            "--dataset",
            "clinic",
            "--model",
            "toy",
            "--methods",
            "murag",
            "--eps",
            "50",
            "--queries",
            "2",
            "--dev-queries",
            "0",
            "--m",
            "2",
            "--public-completion",
            "--em-prior",
            "non-rag",
            "--out",
            str(tmp_path / "pc"),
            "--no-progress",
        ],
    )
    assert r.exit_code == 0, r.output
    run = json.loads((tmp_path / "pc" / "run.json").read_text())
    assert run["public_completion"] is True and run["em_prior"] == "non-rag"


@pytest.mark.integration
def test_report_prints_every_cell_with_counts_and_fisher_p(tmp_path):
    from scipy.stats import hypergeom

    from dprag.lab.experiments.report import fisher_greater

    # one-sided Fisher = hypergeometric tail: 5/10 vs 0/10 -> P(X >= 5), X ~ Hypergeom(20, 5 successes, 10 draws)
    assert fisher_greater(5, 10, 0, 10) == pytest.approx(hypergeom(20, 5, 10).sf(4), rel=1e-12)
    out = tmp_path / "run"
    r = CliRunner().invoke(
        experiment,
        [
            "privacy-utility",
            "--dataset",
            "clinic",
            "--model",
            "toy",
            "--methods",
            "non-rag,murag",
            "--eps",
            "50",
            "--queries",
            "4",
            "--dev-queries",
            "0",
            "--m",
            "4",
            "--out",
            str(out),
            "--no-progress",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    rep = CliRunner().invoke(experiment, ["report", str(out), "--baseline", "non-rag"])
    assert rep.exit_code == 0, rep.output
    lines = rep.output.strip().splitlines()
    assert lines[0].startswith("| method |") and lines[0].rstrip().endswith("p vs non-rag |")
    assert len(lines) == 2 + 2 and any(x.startswith("| murag | 50 |") for x in lines)
    assert all("/4 = " in x for x in lines[2:])
    bad = CliRunner().invoke(experiment, ["report", str(out), "--baseline", "dp-ksa"])
    assert bad.exit_code == 2 and "baseline" in bad.output
    empty = CliRunner().invoke(experiment, ["report", str(tmp_path / "none")])
    assert empty.exit_code == 2 and "run_dir" in empty.output


# -- answer-level voting (issue 13) and tuning on a disjoint corpus (issue 10 item 4) ------------------------
def test_answer_vote_methods_answer_the_toy_corpus_with_pure_guarantees():
    """On the toy corpus every voter reads "ANSWER: <word>" records and the key is the word; at ε_total = 30
    (M = 1) MuRAG with answer-level voting answers more than Non-RAG, reports (30, 0) (pure filter), records
    the voters' plurality, and MuRAG-Ada with it charges ε_thr + ε_RAG = ε_q."""
    ds = toy_dataset()
    ctx = toy_context(ds, vote_thresholds=(1.0,), key_words=(3,))
    items = tuple(select_questions(ds, "test", 6))
    grid = METHODS["murag-answer-vote"].grid(ctx, 30.0)
    assert grid == [{"t": 1.0, "kw": 3, "tok": 6}]
    cell = run_cell(ctx, "murag-answer-vote", 30.0, grid[0], items, "test")
    base = run_cell(ctx, "non-rag", None, {}, items, "test")
    assert cell.accuracy > base.accuracy
    assert cell.eps_certified is not None and 0 < cell.eps_certified <= 30.0 + 1e-6 and cell.delta == 0
    assert cell.plurality_accuracy is not None and all(q.plurality is not None for q in cell.questions)
    assert cell.derived["epsilon_selection"] == 30.0
    ada = run_cell(ctx, "murag-ada-answer-vote", 30.0, grid[0], items, "test")
    assert ada.derived["eps_thr"] + ada.derived["epsilon_selection"] == pytest.approx(30.0)
    assert ada.delta == 0 and ada.eps_certified <= 30.0 + 1e-6
    ctx2 = toy_context(ds, vote_thresholds=(0.5, 4.0), key_words=(1, 3), taus=(2.0, 2.5))
    assert len(METHODS["murag-answer-vote"].grid(ctx2, 30.0)) == 8  # t × key words × τ
    assert all("tau" not in g for g in METHODS["murag-ada-answer-vote"].grid(ctx2, 30.0))


def test_answer_vote_history_reuses_released_answers_but_never_a_fallback():
    """murag-answer-vote-history (M = 1, seen selection, padded voters abstain): three questions per topic in a
    row; the first charges its topic's 24 records, the next two find none. Without history they fall back to
    the toy model's "unknown"; with it the earlier DP release answers them, for no extra ε. A question that
    itself fell back (τ above every score) leaves nothing to reuse."""
    ds = toy_dataset(n_topics=3)
    items = tuple(
        QAItem(f"r{i}{j}", f"which drug protocol for topic{i} variant{i}{j}", (WORDS[i],))
        for i in range(3)
        for j in range(3)
    )
    ctx = toy_context(ds, queries=len(items), key_words=(3,), answer_selection="seen", delta=1e-5, abstain_empty=True)
    hp = METHODS["murag-answer-vote"].grid(ctx, 30.0)[0]
    plain = run_cell(ctx, "murag-answer-vote", 30.0, hp, items, "test")
    hist = run_cell(ctx, "murag-answer-vote-history", 30.0, hp, items, "test")
    assert [q.correct for q in plain.questions] == [True, False, False] * 3
    assert [q.fallback for q in plain.questions] == [False, True, True] * 3
    assert all(q.correct for q in hist.questions)
    assert [q.used for q in hist.questions] == [q.used for q in plain.questions] == [10, 0, 0] * 3
    # the same random stream: where the selection released a key, the two cells answer identically
    assert [q.prediction for q in hist.questions][::3] == [q.prediction for q in plain.questions][::3]
    ada_plain = run_cell(ctx, "murag-ada-answer-vote", 30.0, hp, items, "test")
    ada_hist = run_cell(ctx, "murag-ada-answer-vote-history", 30.0, hp, items, "test")
    assert [h.prediction for h, p in zip(ada_hist.questions, ada_plain.questions, strict=False) if not p.fallback] == [
        p.prediction for p in ada_plain.questions if not p.fallback
    ]
    assert ada_hist.eps_certified == ada_plain.eps_certified and ada_hist.derived["history_in_voters"] is False
    assert hist.eps_certified == plain.eps_certified <= 30.0 + 1e-6 and hist.delta == plain.delta
    high = toy_context(
        ds, queries=len(items), key_words=(3,), answer_selection="seen", delta=1e-5, abstain_empty=True, taus=(1e9,)
    )
    none = run_cell(high, "murag-answer-vote-history", 30.0, hp, items, "test")
    assert all(q.fallback and not q.correct and q.used == 0 for q in none.questions)
    assert [q.history_pairs for q in none.questions] == [0] * 9  # no fallback was recorded for reuse


@pytest.mark.integration
def test_answer_vote_seen_selection_reports_its_delta(tmp_path):
    """``--answer-selection seen``: the grid has no base-measure threshold t, each cell reports
    (ε_total, M·δ_q) with δ_q = --delta / --M (the individual basic-composition filter), and the derived
    parameters name the selection and its vote threshold T = 1 + 2·ln(1/δ_q)/ε_q."""
    ds = toy_dataset()
    ctx = toy_context(ds, vote_thresholds=(1.0, 2.0), key_words=(3,), answer_selection="seen", delta=1e-5, M=2)
    items = tuple(select_questions(ds, "test", 4))
    grid = METHODS["murag-answer-vote"].grid(ctx, 20.0)
    assert grid == [{"kw": 3, "tok": 6}]
    cell = run_cell(ctx, "murag-answer-vote", 20.0, grid[0], items, "test")
    assert cell.derived["selection"] == "seen" and cell.derived["delta_q"] == 5e-6
    assert cell.derived["vote_threshold"] == pytest.approx(1 + 2 * math.log(2e5) / 10.0)
    assert 0 < cell.eps_certified <= 20.0 + 1e-6 and cell.delta == pytest.approx(1e-5) and cell.delta >= 1e-5
    ada = run_cell(ctx, "murag-ada-answer-vote", 20.0, grid[0], items, "test")
    assert ada.eps_certified <= 20.0 + 1e-6 and 0 < ada.delta <= 1e-5 * (1 + 1e-12)
    r = CliRunner().invoke(
        experiment,
        [
            "privacy-utility",
            "--dataset",
            "clinic",
            "--model",
            "toy",
            "--methods",
            "murag-answer-vote",
            "--eps",
            "30",
            "--queries",
            "2",
            "--dev-queries",
            "0",
            "--m",
            "4",
            "--answer-selection",
            "seen",
            "--out",
            str(tmp_path / "seen"),
            "--json",
            "--no-progress",
        ],
    )
    assert r.exit_code == 0, r.output
    row = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")][0]
    assert row["derived"]["selection"] == "seen" and row["delta"] == pytest.approx(1e-5)
    bad = CliRunner().invoke(
        experiment,
        [
            "privacy-utility",
            "--dataset",
            "clinic",
            "--model",
            "toy",
            "--methods",
            "murag-answer-vote",
            "--answer-selection",
            "best",
            "--out",
            str(tmp_path / "x"),
            "--no-progress",
        ],
    )
    assert bad.exit_code == 2 and "--answer-selection" in bad.output


class _SpyRetriever(CachedRetriever):
    def __init__(self, inner):
        super().__init__(inner)
        self.queries = set()

    def scores(self, query):
        self.queries.add(query)
        return super().scores(query)


def test_tuning_runs_in_the_dev_context_and_every_cell_names_the_rule():
    """With ``Plan.dev_context`` the dev questions are scored by the tuning corpus's retriever only, the test
    questions by the test corpus's only, and every cell records the tuning rule."""
    ds = toy_dataset()
    test_ctx = toy_context(ds, taus=(2.0, 2.5), private_tokens=(2,))
    dev_ctx = toy_context(toy_dataset(), taus=(2.0, 2.5), private_tokens=(2,))
    test_ctx.retriever, dev_ctx.retriever = (
        _SpyRetriever(ToyRetriever(ds.documents)),
        _SpyRetriever(ToyRetriever(ds.documents)),
    )
    test = tuple(select_questions(ds, "test", 2))
    dev = tuple(select_questions(ds, "dev", 2))
    cells = run_plan(
        test_ctx,
        Plan(("murag", "non-rag"), (30.0,), test, dev, dev_context=dev_ctx, tuning="disjoint tuning corpus (test)"),
    )
    assert dev_ctx.retriever.queries == {q.question for q in dev}
    assert test_ctx.retriever.queries == {q.question for q in test}
    murag, nonrag = cells
    assert murag.tuning == "disjoint tuning corpus (test)" and len(murag.dev_grid) == 2
    assert nonrag.tuning == "none (a single setting)"


@pytest.mark.integration
def test_cli_tuning_corpus_must_be_disjoint_and_is_reported(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(
        experiment,
        [
            "privacy-utility",
            "--dataset",
            "clinic",
            "--model",
            "toy",
            "--methods",
            "murag-answer-vote,non-rag",
            "--eps",
            "30",
            "--queries",
            "3",
            "--dev-queries",
            "2",
            "--m",
            "4",
            "--tuning-corpus-seed",
            "1",
            "--vote-thresholds",
            "0.5,3",
            "--key-words",
            "2",
            "--answer-tokens",
            "4,6",
            "--abstain-empty",
            "--answer-selection",
            "universal",  # the grid of t is the universal selection's
            "--out",
            str(out),
            "--json",
            "--no-progress",
        ],
    )
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")]
    av = [x for x in rows if x["method"] == "murag-answer-vote"][0]
    assert av["derived"]["abstain_empty"] is True  # the flag reached the mechanism (AnswerVoteParams)
    assert "disjoint tuning corpus" in av["tuning"] and "seed 1" in av["tuning"]
    assert {(g["hp"]["t"], g["hp"]["tok"]) for g in av["dev_grid"]} == {(0.5, 4), (0.5, 6), (3.0, 4), (3.0, 6)}
    run = json.loads((out / "run.json").read_text())
    assert run["tuning_corpus_seed"] == 1 and "disjoint" in run["tuning"]
    assert run["abstain_empty"] is True  # the run-wide switch is recorded beside the results
    rep = CliRunner().invoke(experiment, ["report", str(out)])
    assert rep.exit_code == 0 and "tuning rule" in rep.output.splitlines()[0]
    assert "non-private plurality of the voters of murag-answer-vote" in rep.output
    same = CliRunner().invoke(
        experiment,
        [
            "privacy-utility",
            "--dataset",
            "clinic",
            "--model",
            "toy",
            "--methods",
            "murag",
            "--queries",
            "2",
            "--dev-queries",
            "1",
            "--tuning-corpus-seed",
            "0",
            "--out",
            str(tmp_path / "x"),
            "--no-progress",
        ],
    )
    assert same.exit_code == 2 and "shares" in same.output
    default = CliRunner().invoke(
        experiment,
        [
            "privacy-utility",
            "--dataset",
            "clinic",
            "--model",
            "toy",
            "--methods",
            "murag",
            "--queries",
            "2",
            "--dev-queries",
            "1",
            "--out",
            str(tmp_path / "y"),
            "--no-progress",
            "--json",
        ],
    )
    assert default.exit_code == 0, default.output
    row = [json.loads(line) for line in default.output.splitlines() if line.startswith("{")][0]
    # the default tunes on the corpus the defaults were chosen on (seed 1), never on the test corpus
    assert "disjoint tuning corpus" in row["tuning"] and "corpus seed 1" in row["tuning"]
    on_test = CliRunner().invoke(
        experiment,
        [
            "privacy-utility",
            "--dataset",
            "clinic",
            "--model",
            "toy",
            "--methods",
            "murag",
            "--queries",
            "2",
            "--dev-queries",
            "1",
            "--tuning-corpus-seed",
            "test",
            "--out",
            str(tmp_path / "z"),
            "--no-progress",
            "--json",
        ],
    )
    assert on_test.exit_code == 0, on_test.output
    row = [json.loads(line) for line in on_test.output.splitlines() if line.startswith("{")][0]
    assert "NOT charged" in row["tuning"]
    bad = CliRunner().invoke(
        experiment,
        ["privacy-utility", "--dataset", "clinic", "--model", "toy", "--tuning-corpus-seed", "one", "--out", "w"],
    )
    assert bad.exit_code == 2 and "--tuning-corpus-seed" in bad.output and "'test'" in bad.output


def test_coverage_check_counts_own_records_left_at_M1():
    """coverage_check.coverage serves the questions in order with the real MuRAG.select at M = 1: the first
    question about a topic takes its 24 records (10 reach the K = m = 10 voters), a repeat finds none, and a
    τ above every score leaves every question without records; ⌈T⌉ = 4 votes at (10, 1e-5)."""
    from dprag.audit.testing.toy import ToyRetriever
    from dprag.lab.experiments.coverage_check import coverage

    ds = toy_dataset(n_topics=3)
    qs = [
        QAItem(
            f"q{i}{j}",
            f"which drug protocol for topic{i}",
            (WORDS[i],),
            relevant_ids=tuple(range(24 * i, 24 * (i + 1))),
        )
        for i in range(3)
        for j in range(2)
    ]
    ret = ToyRetriever(ds.documents)
    got = coverage(ret, qs, 2.5, m=10)
    assert got["votes_needed"] == 4
    assert (got["with_records"], got["enough_records"]) == (3, 3)
    assert got["mean_own"] == pytest.approx(10 * 3 / 6) and got["mean_charged"] == pytest.approx(24 * 3 / 6)
    none = coverage(ret, qs, 1e9, m=10)
    assert (none["with_records"], none["enough_records"], none["mean_charged"]) == (0, 0, 0.0)


def test_coverage_check_for_murag_ada_spends_about_one_bin_per_question():
    """ada_coverage serves the questions with the real MuRAGAda.select (M = 1, ε_thr = 1, ε_RAG = 9, so
    ⌈T⌉ = ⌈1 + 2·ln(10^5)/9⌉ = 4): each topic's 24 records share the top toy score, so the released bin is
    exactly that topic's records (noisy prefix sum ≈ 24 > K = 10; a miss needs a discrete-Laplace(1) draw of
    ≥ 14, probability < 10^-5), 10 of them reach the voters, and a repeated question finds its topic spent."""
    from dprag.audit.testing.toy import ToyRetriever
    from dprag.lab.experiments.coverage_check import ada_coverage

    ds = toy_dataset(n_topics=3)
    ret = ToyRetriever(ds.documents)
    edges = tuple(float(x) for x in range(8, -1, -1))
    qs = [
        QAItem(
            f"q{i}", f"which drug protocol for topic{i}", (WORDS[i],), relevant_ids=tuple(range(24 * i, 24 * (i + 1)))
        )
        for i in range(3)
    ]
    got = ada_coverage(ret, qs, 10, edges)
    assert got["votes_needed"] == 4 and got["enough_records"] == 3 and got["mean_own"] == 10.0
    assert got["mean_charged"] == 24.0
    again = ada_coverage(ret, qs[:1] * 2, 10, edges)
    assert again["with_records"] == 1 and again["mean_own"] == 5.0
