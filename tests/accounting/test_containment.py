"""Per-voter containment of generator failures after the charge (spec/accounting/rag.md §6), on toy generators.

The finding (issue 39): 000 Alg. 5 had no per-voter containment -- a generator failure that depends on one voter's
documents failed the whole answer on D and not on its neighbour (ε = ∞) -- and where containment existed it re-ran
the other voters one by one, at a batch shape other than the public one. Here every mechanism that runs a generator
after the charge is run on D, whose document 0 makes its voter's generator call fail, and on D″, the same corpus
with document 0 replaced by what the rule says the failing voter becomes: the empty document for the mechanisms
that replace (000 Alg. 5, DPVoteRAG, DPSparseVoteRAG, GNMax voting), a document whose answer is empty for those
that abstain (answer-level voting, DP-KSA). Same seed, same partition, so the answers must be identical; every
generator call must have the public batch shape; nothing of the failure may surface. Deterministic (seeded)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from _rag_doubles import Docs

from dprag import errors
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.protocols import Prompt
from dprag.accounting.rag.answer_vote import AnswerVoteParams, answer_vote_rag
from dprag.accounting.rag.ksa import DpKsaPureParameters, dp_ksa
from dprag.accounting.rag.single_query import (
    GaussianVoteRagParams,
    PureDpRagParams,
    dp_sparse_vote_rag,
    dp_vote_rag,
    gaussian_vote_rag,
    pure_dp_rag,
)
from dprag.audit.testing.toy import ToyGenerator
from dprag.errors import InvalidParameterError

Q = "clinic asthma drug"
M = 6
#: document 0 of D: a record long enough to cross the failing generators' limit (its text must never surface)
LONG = "patient 0 asthma ANSWER: vexorin daily " + "long clinical history of the patient " * 8
SHORT = [f"patient {i} asthma ANSWER: zorvatin 5mg" for i in range(1, M)]
LIMIT = 200
D = [LONG, *SHORT]
D_EMPTY = ["", *SHORT]  # document 0 as the empty document: the replacement rule's counterpart of D
SCORES = np.arange(M, 0, -1, dtype=np.float64)  # fixed, so D and D″ rank and partition alike


class _FailingSession:
    """A toy session that raises at its ``at``-th advance if one of its rows holds the long record."""

    def __init__(self, inner, doomed: bool, at: int | None, text: str):
        self.inner, self.doomed, self.at, self.t, self.text = inner, doomed, at, 0, text

    def logits(self):
        return self.inner.logits()

    def advance(self, token_id: int) -> None:
        self.t += 1
        if self.doomed and self.t == self.at:
            raise MemoryError(f"out of memory decoding {self.text[:40]}")
        self.inner.advance(token_id)


class LongRecordFails(ToyGenerator):
    """A local model that runs out of memory on a voter whose documents exceed LIMIT characters -- at ``start``
    (``at=None``) or at its ``at``-th advance -- with a message quoting the document (``fail=False``: never).
    Records every batch's size and the rows' plans (what each row votes) of the last session it started."""

    failure_free_sessions = False

    def __init__(self, at: int | None = None, fail: bool = True):
        super().__init__()
        self.at, self.fail, self.batches, self.plans = at, fail, [], []
        self.encode(" ".join([*D, Q, "unknown"]))  # a fixed vocabulary: token ids do not depend on the call order

    def start(self, prompts, *, max_new_tokens: int = 1):
        self.batches.append(len(prompts))
        long = [c for p in prompts for c in p.contexts if len(c) > LIMIT and self.fail]
        if long and self.at is None:
            raise MemoryError(f"out of memory on {long[0][:40]}")
        inner = super().start(prompts, max_new_tokens=max_new_tokens)
        self.plans = inner.plans
        return _FailingSession(inner, bool(long), self.at, long[0] if long else "")


def _session_mechanisms():
    def pure(docs, gen, seed):
        p = PureDpRagParams(M, epsilon_token=4.0, max_private_tokens=3, max_tokens=6)
        return pure_dp_rag(Q, np.arange(M), Docs(docs, SCORES), gen, p, source=seed)

    def gnmax(docs, gen, seed):
        p = GaussianVoteRagParams(M, sigma=1.0, max_tokens=6)
        return gaussian_vote_rag(Q, np.arange(M), Docs(docs, SCORES), gen, p, source=seed)

    def vote(docs, gen, seed):
        kw = dict(m=M, k=1, epsilon_token=4.0, delta_token=1e-6, epsilon_total=40.0, delta_total=1e-4, max_tokens=6)
        return dp_vote_rag(Q, Docs(docs, SCORES), gen, source=seed, **kw)

    def sparse(docs, gen, seed):
        kw = dict(m=M, k=1, epsilon_token=4.0, delta_token=1e-6, epsilon_total=40.0, delta_total=1e-4, max_tokens=6)
        return dp_sparse_vote_rag(Q, Docs(docs, SCORES), gen, source=seed, **kw)

    return {"pure-dp-rag": pure, "gnmax": gnmax, "dp-vote-rag": vote, "dp-sparse-vote-rag": sparse}


SESSION_MECHANISMS = _session_mechanisms()


def _outcome(run, docs, gen, seed: bytes):
    """What the answer releases (or the exception it raised, by type)."""
    try:
        a = run(docs, gen, RandomSource.from_seed(b"containment", seed))
    except Exception as e:  # noqa: BLE001 - the outcome under test
        return ("raised", type(e).__name__)
    return ("answered", a.text, list(a.token_ids), [repr(e) for e in a.events], a.private_tokens)


@pytest.mark.parametrize("name", sorted(SESSION_MECHANISMS))
def test_a_failing_voter_of_a_session_mechanism_is_replaced_by_its_empty_context_prompt(name):
    """On the parent commit pure-dp-rag (and the other session mechanisms) raised MemoryError on D and answered on
    D″. Now the failing voter is replaced by its empty-context prompt: the answer on D is the answer on D with that
    voter's document set to the empty document, for several seeds; every session has the public shape m (+ 1)."""
    run = SESSION_MECHANISMS[name]
    for seed in (b"s0", b"s1", b"s2"):
        gen, gen_empty, gen_whole = LongRecordFails(), LongRecordFails(), LongRecordFails(fail=False)
        on_d = _outcome(run, D, gen, seed)
        assert on_d[0] == "answered", on_d
        assert on_d == _outcome(run, D_EMPTY, gen_empty, seed)
        assert gen.plans == gen_empty.plans  # the rows of the session the answer was decoded in, vote by vote
        assert len(set(gen.batches)) == 1 and gen.batches[0] in (M, M + 1)  # never another shape
        # not vacuous: the long record's voter votes otherwise when it does not fail (it reads 'vexorin')
        _outcome(run, D, gen_whole, seed)
        assert gen_whole.plans != gen.plans


def test_the_failing_voters_are_found_by_halving_at_the_public_shape():
    """With m = 16 voters and one failing, the search costs about 2·log2(16) probes, not m, and every probe has the
    public shape (16 voters and the non-RAG lane)."""
    m = 16
    docs = [LONG, *(f"patient {i} asthma ANSWER: zorvatin" for i in range(1, m))]
    gen = LongRecordFails()
    p = PureDpRagParams(m, epsilon_token=4.0, max_private_tokens=2, max_tokens=3)
    a = pure_dp_rag(Q, np.arange(m), Docs(docs, np.arange(m, 0, -1.0)), gen, p, source=RandomSource.from_seed(b"h"))
    assert a.text
    assert set(gen.batches) == {m + 1}
    assert len(gen.batches) <= 2 + 2 * 4 + 1  # the batch, the public rows, two probes per level, the final run


def test_a_voter_failing_mid_answer_is_replaced_from_that_step():
    """A failure at the second advance (a memory limit crossed by the long record as the answer grows): the answer
    is released; the sessions all have the public shape; the released tokens before the failure are replayed."""
    for name, run in SESSION_MECHANISMS.items():
        gen = LongRecordFails(at=2)
        out = _outcome(run, D, gen, b"mid")
        assert out[0] == "answered", (name, out)
        assert len(set(gen.batches)) == 1, (name, gen.batches)


class AlwaysFails(ToyGenerator):
    """A generator whose every session fails, with a message quoting the first voter's document."""

    def __init__(self, error=MemoryError):
        super().__init__()
        self.error = error

    def start(self, prompts, *, max_new_tokens: int = 1):
        text = next((c for p in prompts for c in p.contexts if c), "")
        raise self.error(f"cannot decode {text[:40]}")


def test_a_failure_of_the_public_rows_raises_one_fixed_error():
    """When the public rows alone (every voter replaced) fail, the failure is public: the answer raises
    GenerationFailedError, whose type and message are fixed and which carries no cause or context of the
    document-quoting original."""
    for name, run in SESSION_MECHANISMS.items():
        with pytest.raises(errors.GenerationFailedError) as err:
            run(D, AlwaysFails(), RandomSource.from_seed(b"pub"))
        assert str(err.value) == errors.GenerationFailedError.MESSAGE, name
        assert err.value.__cause__ is None and err.value.__context__ is None
        assert "patient" not in str(err.value) and "MemoryError" not in repr(err.value)


def test_a_public_rows_validation_error_is_raised_as_it_is():
    """An InvalidParameterError of the public rows (a question too long for the window: bad public input) is kept."""
    gen = AlwaysFails(lambda _msg: InvalidParameterError("prompt", "too long"))
    with pytest.raises(InvalidParameterError, match="too long"):
        SESSION_MECHANISMS["pure-dp-rag"](D, gen, None)


class TwoLongRecordsFail(LongRecordFails):
    """A failure that needs two voters' documents at once: no single voter explains it."""

    def start(self, prompts, *, max_new_tokens: int = 1):
        self.batches.append(len(prompts))
        if sum(any(len(c) > LIMIT for c in p.contexts) for p in prompts) >= 2:
            raise MemoryError("two long records")
        return ToyGenerator.start(self, prompts, max_new_tokens=max_new_tokens)


def test_a_failure_no_single_voter_explains_is_not_contained():
    """Outside the rule's assumption (a failure attributable to one voter) nothing is released: the fixed error."""
    docs = [LONG, LONG.replace("patient 0", "patient 9"), *SHORT[:4]]
    with pytest.raises(errors.GenerationFailedError):
        SESSION_MECHANISMS["pure-dp-rag"](docs, TwoLongRecordsFail(), RandomSource.from_seed(b"j"))


# ---------------------------------------------------------------------------------------------------------------
# answer-level voting and DP-KSA: the failing voter abstains
# ---------------------------------------------------------------------------------------------------------------
SILENT = "SILENT record"  # answers "" (no key, no keyword): what an abstaining voter contributes
D_SILENT = [SILENT, *SHORT]
_WORD = re.compile(r"ANSWER:\s*(\w+)")


class TextFails:
    """A text generator (``generate_many`` only) whose batch fails when a row holds the long record (a message
    quoting it); a row answers its document's ANSWER word, "" for the SILENT record, else "nothing". Records every
    batch's size and every call of one voter's prompt alone (the final answer from released keywords is public)."""

    def __init__(self):
        self.batches, self.alone = [], 0

    def _one(self, prompt) -> str:
        if any(c == SILENT for c in prompt.contexts):
            return ""
        found = [w for c in prompt.contexts for w in _WORD.findall(c)]
        return found[0] if found else "nothing"

    def generate(self, prompt, n):
        self.alone += any(c and not c.startswith("Keywords:") for c in prompt.contexts)  # a voter's prompt alone
        if any(len(c) > LIMIT for c in prompt.contexts):
            raise MemoryError(f"out of memory on {prompt.contexts[0][:40]}")
        return self._one(prompt)

    def generate_many(self, prompts, n):
        self.batches.append(len(prompts))
        if any(len(c) > LIMIT for p in prompts for c in p.contexts):
            raise MemoryError("out of memory on " + next(c for p in prompts for c in p.contexts if len(c) > LIMIT))
        return [self._one(p) for p in prompts]


def _text_outcome(run, docs, seed: bytes):
    gen = TextFails()
    try:
        a = run(docs, gen, RandomSource.from_seed(b"abstain", seed))
    except Exception as e:  # noqa: BLE001 - the outcome under test
        return ("raised", type(e).__name__), gen
    keys = a.info.get("voter_keys")
    return ("answered", a.text, keys, a.info.get("keywords"), [repr(e) for e in a.events]), gen


def _answer_vote(normalizer=None):
    p = AnswerVoteParams(M, 8.0, threshold=0.0, max_tokens=4, diagnostics=True, normalizer=normalizer)
    return lambda docs, gen, seed: answer_vote_rag(Q, np.arange(M), Docs(docs, SCORES), gen, p, source=seed)


def _dp_ksa_pure(docs, gen, seed):
    p = DpKsaPureParameters(M, epsilon_em=2.0, epsilon_ptr=2.0, ptr_delta=1e-6, max_keywords=3)
    return p.respond(Q, np.arange(M), Docs(docs, SCORES), gen, source=seed)


def _dp_ksa_004(docs, gen, seed):
    return dp_ksa(Q, Docs(docs, SCORES), _TokenText(gen), n_docs=M, epsilon=8.0, delta=1e-5, source=seed, k_max=3)


class _TokenText:
    """``TextFails`` with the tokenizer half 004's DP-KSA reads (a word per token id)."""

    eos_token_id = 0
    vocab_size = 64

    def __init__(self, inner):
        self.inner, self.words = inner, ["<eos>"]

    def encode(self, text):
        ids = []
        for w in text.split():
            if w not in self.words:
                self.words.append(w)
            ids.append(self.words.index(w))
        return ids

    def decode(self, ids):
        return " ".join(self.words[i] for i in ids if i)

    def generate(self, prompt, n):
        return self.inner.generate(prompt, n)

    def generate_many(self, prompts, n):
        return self.inner.generate_many(prompts, n)


TEXT_MECHANISMS = {"answer-vote": _answer_vote(), "dp-ksa": _dp_ksa_pure, "dp-ksa-004": _dp_ksa_004}


@pytest.mark.parametrize("name", sorted(TEXT_MECHANISMS))
def test_a_failing_voter_of_a_text_mechanism_abstains_at_the_public_shape(name):
    """The failing voter abstains: the answer on D is the answer on D with that voter's answer empty. Every batch
    has the public shape and no prompt is ever asked alone: on the parent commit the failed batch was re-run one
    prompt at a time (the other voters at another shape: their bits move, tests/rag_adapters), and 004's DP-KSA
    raised."""
    run = TEXT_MECHANISMS[name]
    for seed in (b"a0", b"a1"):
        (on_d, gen), (on_silent, _) = _text_outcome(run, D, seed), _text_outcome(run, D_SILENT, seed)
        assert on_d[0] == "answered", on_d
        assert on_d == on_silent
        assert gen.alone == 0 and len(set(gen.batches)) == 1, (gen.alone, gen.batches)


def test_a_failing_normaliser_makes_its_voter_abstain():
    """The normaliser (a third party's ``dprag.normalizers`` entry point) runs inside the guard: one that raises on
    one voter's answer, or returns something that is not a key, makes that voter abstain -- the answer is the one in
    which that voter's answer was empty. On the parent commit the exception (quoting the answer) failed the whole
    answer: ('raised', 'ValueError') and ('raised', 'InvalidParameterError')."""

    def raising(answer, question, *, max_words):
        if answer == "vexorin":
            raise ValueError(f"cannot normalise {answer}")
        return answer.lower()

    def not_a_key(answer, question, *, max_words):
        return "Vexorin!" if answer == "vexorin" else answer.lower()

    docs = [LONG[:LIMIT], *SHORT]  # short enough not to fail the generator: only the normaliser fails
    for normalizer in (raising, not_a_key):
        run = _answer_vote(normalizer)
        on_d, _ = _text_outcome(run, docs, b"n")
        on_silent, _ = _text_outcome(run, D_SILENT, b"n")
        assert on_d == on_silent, normalizer.__name__
        assert "" in on_d[2] and "vexorin" not in on_d[2]  # voter_keys: the normaliser's voter abstains
    # not vacuous: a normaliser that works gives that voter a key
    assert "vexorin" in _text_outcome(_answer_vote(), docs, b"n")[0][2]


def test_voter_prompts_are_replaced_by_their_empty_context():
    """The replacement is the voter's prompt with each of its documents set to the empty document (000 Alg. 3's
    padding), the question and history unchanged: a function of public inputs only."""
    p = Prompt("q?", ("secret a", "secret b"), (("h?", "a."),))
    assert p.empty_context() == Prompt("q?", ("", ""), (("h?", "a."),))
    assert Prompt("q?").empty_context() == Prompt("q?")
