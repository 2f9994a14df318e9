"""S²MIA, the Interrogation Attack and canary exposure (lab/attacks/) against scripted systems:
the attacks must succeed against a leaky system (a generator that copies its context) and sit at chance
against a system that never sees the target records."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from dprag.accounting.collusion import auc_upper_bound
from dprag.accounting.protocols import Prompt
from dprag.audit.testing.toy import ToyGenerator, ToyRetriever
from dprag.errors import InvalidParameterError
from dprag.lab.attacks.canary import ExposureCounter
from dprag.lab.attacks.interrogation import (
    build_questions,
    ia_score,
    llm_questions,
    llm_questions_many,
    parse_qa,
    valid_pair,
)
from dprag.lab.attacks.s2mia import bleu_average_precision, modified_precision, split_record
from dprag.lab.auc import hanley_mcneil_se
from dprag.lab.experiments.methods import Settings
from dprag.lab.experiments.mia import build_world, choose_targets, interrogation_questions, run_cell
from dprag.rag_adapters.datasets.clinic import generate_clinic_corpus


class CopyGenerator(ToyGenerator):
    """A leaky 'LLM': continues its first context document after the words the question shares with the
    document's start (so a record's prefix yields its continuation, any other question the whole record)."""

    def plan(self, prompt: Prompt) -> list[int]:
        if not prompt.contexts:
            return super().plan(prompt)
        ctx, q = prompt.contexts[0].split(), prompt.question.split()
        n = 0
        while n < min(len(ctx), len(q)) and ctx[n] == q[n]:
            n += 1
        return [self._tok(w) for w in ctx[n:]] + [0]


class WordRetriever(ToyRetriever):
    """Exact scores: IDF-weighted count of the distinct alphanumeric query words a document contains (a
    punctuation-blind toy retriever where a patient's name outweighs the template words every record shares)."""

    def __init__(self, documents):
        super().__init__(documents)
        self._words = [set(re.findall(r"[a-z0-9]+", d.lower())) for d in self.docs]
        df: dict[str, int] = {}
        for w in self._words:
            for t in w:
                df[t] = df.get(t, 0) + 1
        self._idf = {t: math.log(len(self.docs) / c) for t, c in df.items()}

    def scores(self, query):
        q = set(re.findall(r"[a-z0-9]+", query.lower()))
        return np.array([sum(self._idf[t] for t in q & w) for w in self._words], dtype=np.float64)


# ----------------------------------------------------------------------------------------------------------
# scoring functions
# ----------------------------------------------------------------------------------------------------------
def test_split_record_keeps_every_word():
    text = "Clinic record C-1. Patient: Ada Novak, 40, female. Private note: code 123456."
    p, c = split_record(text)
    assert (p + " " + c).split() == text.split()
    assert len(p.split()) == round(len(text.split()) / 2)
    with pytest.raises(InvalidParameterError, match="prefix_fraction"):
        split_record(text, 1.0)


def test_bleu_average_precision_hand_computed():
    # p1 = 5/6 (the x2 clipped to 2, cat, on, mat), p2 = 3/5, p3 = 1/4, p4 = 0/3
    got = bleu_average_precision("the cat sat on the mat", "the cat is on the mat")
    assert got == pytest.approx((5 / 6 + 3 / 5 + 1 / 4 + 0) / 4)
    assert modified_precision(["a", "a", "a"], ["a"], 1) == pytest.approx(1 / 3)  # clipping
    assert bleu_average_precision("", "anything here") == 0.0
    assert bleu_average_precision("x y z w", "x y z w") == 1.0


def test_parse_and_validate_llm_pairs():
    record = "Patient Ada Novak, 40-year-old female, record C-12345, came in on 2024-03-02 for a bee sting."
    text = "Q: How old is Ada Novak? A: 40.\nQ: What did she eat? A: pizza"
    pairs = parse_qa(text)
    assert pairs == [("How old is Ada Novak?", "40"), ("What did she eat?", "pizza")]
    assert valid_pair(record, *pairs[0])
    assert not valid_pair(record, *pairs[1])  # not in the record
    assert not valid_pair(record, "Is Ada Novak 40?", "40")  # answer given away by the question


class ScriptedQA(ToyGenerator):
    """Answers every question-generation prompt with a fixed text (a scripted 'LLM')."""

    def __init__(self, text):
        super().__init__(vocab_size=1 << 12)
        self.text = text

    def generate_many(self, prompts, max_new_tokens):
        return [self.text for _ in prompts]


def test_llm_questions_then_template_fill():
    record = "Patient Ada Novak, 40-year-old female, record C-12345, came in on 2024-03-02 for a bee sting."
    got, raw = llm_questions(ScriptedQA("Q: How old is Ada Novak? A: 40"), record)
    assert len(raw) == 5 and [q.source for q in got] == ["llm"]  # the same pair once (distinct answers)
    qs = build_questions(
        3, got, [("What is Ada's code?", "123456"), ("How old is Ada?", "40"), ("When?", "2024-03-02")]
    )
    assert [(q.answer, q.source) for q in qs] == [("40", "llm"), ("123456", "template"), ("2024-03-02", "template")]
    assert ia_score(qs, ["she is 40", "no idea", "on 2024-03-02"]) == pytest.approx(2 / 3)
    with pytest.raises(InvalidParameterError):
        ia_score(qs, ["x"])


class EchoQA(ToyGenerator):
    """A scripted 'LLM' whose answer depends only on its own prompt: a question about the record's first word."""

    def __init__(self):
        super().__init__(vocab_size=1 << 12)
        self.batches = []

    def generate_many(self, prompts, max_new_tokens):
        self.batches.append(len(prompts))
        return [f"Q: What is the first name of the patient? A: {p.contexts[0].split()[1]}" for p in prompts]


def test_llm_questions_many_equals_one_record_at_a_time():
    records = [f"Patient {n} Novak, visit for a bee sting." for n in ("Ada", "Bruno", "Celia")]
    g = EchoQA()
    many = llm_questions_many(g, records)
    assert g.batches == [15]  # 3 records × 5 aspects in one batch
    assert many == [llm_questions(EchoQA(), r) for r in records]
    assert [[q.answer for q in qs] for qs, _ in many] == [["Ada"], ["Bruno"], ["Celia"]]
    assert llm_questions_many(g, []) == []


def test_exposure_counter():
    c = ExposureCounter({"a": "123456", "b": "654321", "c": "two words"}, {"a": 0, "b": None, "c": 2})
    c.add("the code is PIN:123456.", [0, 1])
    c.add("nothing", [0])
    c.add("it was two words ago", [])
    s = c.summary(["a", "b", "c"])
    assert c.exposed == {"a": 1, "b": 0, "c": 1} and c.cited == {"a": 2, "b": 0, "c": 0}
    assert s["exposed_records"] == pytest.approx(2 / 3) and s["cited_per_record"] == pytest.approx(2 / 3)


# ----------------------------------------------------------------------------------------------------------
# attacks against scripted systems
# ----------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def setup():
    corpus = generate_clinic_corpus(0, n_conditions=3, support_min=5, support_max=8, n_distractors=60)
    mem, non = choose_targets(len(corpus.documents), 15, 15, b"test-mia")
    return corpus, mem, non


def _cell(attack, method, world, gen, questions=None, eps=None, **kw):
    settings = Settings(
        m=4,
        max_tokens=64,
        taus=(4.0,),
        edges=tuple(float(x) for x in range(30, -1, -1)),
        private_tokens=(4,),
        npr_k=(1,),
    )
    return run_cell(
        attack,
        method,
        eps,
        retriever=WordRetriever(world.documents),
        generator=gen,
        settings=settings,
        world=world,
        questions=questions,
        seed=b"t",
        **kw,
    )


def test_choose_targets_disjoint_and_seeded(setup):
    corpus, mem, non = setup
    assert not set(mem) & set(non) and len(mem) == len(non) == 15
    assert choose_targets(len(corpus.documents), 15, 15, b"test-mia") == (mem, non)
    with pytest.raises(InvalidParameterError, match="members"):
        choose_targets(10, 6, 5, b"x")


def test_s2mia_succeeds_against_copying_rag_and_is_at_chance_without_retrieval(setup):
    corpus, mem, non = setup
    world = build_world(corpus, mem, non)
    leaky = _cell("s2mia", "non-private-rag", world, CopyGenerator(vocab_size=1 << 16))
    assert leaky.row["auc"] >= 0.95 and leaky.row["tpr_at_1pct_fpr"] >= 0.8
    assert leaky.row["eps_certified"] is None and leaky.row["auc_bound"] == 1.0  # ε = ∞: no bound
    assert leaky.row["exposed_members"] >= 0.8 and leaky.row["exposed_nonmembers"] == 0.0
    assert leaky.row["cited_members"] >= 0.9 and leaky.row["cited_nonmembers"] == 0.0
    blind = _cell("s2mia", "non-rag", world, CopyGenerator(vocab_size=1 << 16))
    assert blind.row["auc"] == 0.5 and blind.row["eps_certified"] == 0.0 and blind.row["auc_bound"] == 0.5
    assert blind.row["exposed_members"] == 0.0


def test_s2mia_at_chance_when_the_system_holds_no_target(setup):
    """Members removed from the corpus too: labels are exchangeable, so |AUC − ½| exceeds 2.58 SE_HM(½) with
    probability ≈ 1% under the seeded split (deterministic here)."""
    corpus, mem, non = setup
    world = build_world(corpus, mem, non)
    hidden = build_world(corpus, [], list(mem) + list(non))
    hidden.targets = world.targets  # same targets and labels, neither group in the corpus
    cell = _cell("s2mia", "non-private-rag", hidden, CopyGenerator(vocab_size=1 << 16))
    se = hanley_mcneil_se(0.5, 15, 15)
    assert abs(cell.row["auc"] - 0.5) <= 2.58 * se
    assert cell.row["exposed_members"] == 0.0


def test_interrogation_succeeds_against_copying_rag(setup):
    corpus, mem, non = setup
    world = build_world(corpus, mem, non)
    gen = CopyGenerator(vocab_size=1 << 16)
    qs, raw, _ = interrogation_questions(world.targets, gen, 3, use_llm=False)
    assert all(len(v) == 3 and all(q.source == "template" for q in v) for v in qs.values())
    leaky = _cell("interrogation", "non-private-rag", world, gen, qs)
    assert leaky.row["auc"] >= 0.95 and leaky.row["queries"] == 90
    assert leaky.row["llm_question_share"] == 0.0 and leaky.row["questions_per_record"] == 3.0
    blind = _cell("interrogation", "non-rag", world, gen, qs)
    assert blind.row["auc"] == 0.5


def test_private_cell_reports_its_session_guarantee(setup):
    corpus, mem, non = setup
    world = build_world(corpus, mem[:6], non[:6])
    cell = _cell("s2mia", "murag", world, CopyGenerator(vocab_size=1 << 16), eps=2.0)
    r = cell.row
    assert r["error"] is None and r["eps_certified"] <= 2.0 + 1e-9
    assert r["auc_bound"] == pytest.approx(auc_upper_bound(r["eps_certified"], r["delta_certified"]))
    assert r["auc_bound"] == pytest.approx(1 - 1 / (1 + math.exp(r["eps_certified"])))
    assert len(cell.scores) == 12 and all(s["schema"] == "dprag.mia-score/1" for s in cell.scores)


def test_a_composed_delta_above_one_is_reported_as_one(setup, monkeypatch):
    """A composition's δ can sum past 1 (a vacuous guarantee); the row's ``delta_certified`` is a probability (the
    schema's [0, 1], spec/schemas/mia-row-1.schema.json): it says 1, never 2.5, and the AUC bounds say 1 (no bound);
    the cell used to stop on the bound's δ < 1 check instead."""
    import dataclasses

    from dprag.lab.experiments import methods

    corpus, mem, non = setup
    world = build_world(corpus, mem, non)
    real = methods.get_method

    class Vacuous:
        def __init__(self, session):
            self.session = session

        def guarantee(self):
            return self.session.guarantee()[0], 2.5

        def __getattr__(self, name):
            return getattr(self.session, name)

    def vacuous_method(name):
        spec = real(name)
        return dataclasses.replace(spec, build=lambda *a, **k: Vacuous(spec.build(*a, **k)))

    monkeypatch.setattr(methods, "get_method", vacuous_method)
    cell = _cell("s2mia", "non-rag", world, CopyGenerator(vocab_size=1 << 16))
    assert cell.row["delta_certified"] == 1.0 and cell.row["auc_bound"] == cell.row["auc_bound_cor312"] == 1.0
