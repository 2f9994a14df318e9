"""Answer-level private aggregation (issue 13): the string selection over the universal domain
(``accounting.mechanisms.string_selection``), the answer-vote single-query mechanism
(``accounting.rag.answer_vote``) inside MuRAG / MuRAG-Ada, and the empirical DP checker at the claimed ε with
two broken variants it must catch.

Statistical tests are seeded (deterministic); the false-failure rate each one would have under fresh
randomness is stated in its docstring.
"""

import math
from collections import Counter

import numpy as np
import pytest
from _rag_doubles import Docs as _Docs
from _rag_doubles import Scripted as _Scripted
from scipy import stats

from dprag.accounting.events import ExponentialMechanismEvent
from dprag.accounting.filters import FilterBudget, IndividualRenyiFilter
from dprag.accounting.mechanisms.string_selection import ALPHABET, BOTTOM, select_string
from dprag.accounting.noise.source import RandomSource
from dprag.accounting.rag.answer_vote import AnswerVoteParams, answer_vote_rag, basic_key
from dprag.accounting.rag.mechanism import SingleQueryMechanism, check_mechanism
from dprag.accounting.rag.multi_query import MuRAG, MuRAGAda
from dprag.accounting.stores import MemoryBudgetStore
from dprag.accounting.testing import check_dp, seeded
from dprag.errors import GenerationFailedError, InvalidParameterError


def _law(keys, eps, t):
    """The target law written from the definition (independently of the module): μ(⊥) = 1 − e^−t,
    μ(s) = e^−t · 38^−(|s|+1), P ∝ μ · exp(ε h / 2); returns (P(seen key) dict, P(⊥), P(other string))."""
    h = Counter(keys)
    eta = math.exp(-t)
    mu = {s: eta * 38.0 ** -(len(s) + 1) for s in h}
    w = {s: mu[s] * math.exp(eps * c / 2) for s, c in h.items()}
    z = (1 - eta) + sum(w.values()) + (eta - sum(mu.values()))
    return {s: v / z for s, v in w.items()}, (1 - eta) / z, (eta - sum(mu.values())) / z


def test_alphabet_and_measure_constants():
    assert len(ALPHABET) == 37 and len(set(ALPHABET)) == 37


@pytest.mark.parametrize(
    "keys,eps,t", [(["ab", "ab", "ab", "cd"], 6.0, 1.0), (["x", "x", "y"], 4.0, 0.0), (["abc"] * 8, 3.0, 5.0)]
)
def test_select_string_follows_its_law(keys, eps, t):
    """Chi-square goodness of fit of 20 000 seeded draws (categories: each seen key, ⊥, any other string)
    against the law computed from the definition; p < 1e-4 fails (false-failure rate 1e-4 per case under
    fresh randomness). Also: every other string drawn is over the alphabet."""
    src = RandomSource.from_seed(b"string-selection-law", repr((keys, eps, t)).encode())
    n = 20_000
    seen, p_bot, p_other = _law(keys, eps * (1 - 2.0**-20), t)
    cats = sorted(seen) + ["<bottom>", "<other>"]
    counts = Counter()
    for _ in range(n):
        out, ev = select_string(keys, eps, t, src)
        if out is BOTTOM:
            counts["<bottom>"] += 1
        elif out in seen:
            counts[out] += 1
        else:
            assert all(c in ALPHABET for c in out)
            counts["<other>"] += 1
    assert ev == ExponentialMechanismEvent(eps)
    probs = np.array([seen[c] for c in sorted(seen)] + [p_bot, p_other])
    obs = np.array([counts[c] for c in cats], dtype=float)
    mask = probs * n >= 5  # chi-square needs expected counts >= 5; the rest must be (near) empty
    assert obs[~mask].sum() <= 10
    exp = probs[mask] / probs[mask].sum() * obs[mask].sum()
    assert stats.chisquare(obs[mask], exp).pvalue > 1e-4, (
        dict(zip(cats, obs, strict=False)),
        dict(zip(cats, probs * n, strict=False)),
    )


def test_threshold_zero_never_releases_bottom_and_unseen_keys_keep_mass():
    """t = 0: μ(⊥) = 0, so ⊥ is never drawn. A key no voter wrote is still drawable (the domain is universal):
    with no votes at all and t = 0 every draw is a uniform-geometric string, and the empty string (μ = 1/38)
    shows up about 1/38 of the time (3000 draws: expected 79, we accept 40..130; false-failure rate < 1e-5)."""
    src = RandomSource.from_seed(b"universal-domain")
    outs = [select_string([], 1.0, 0.0, src)[0] for _ in range(3000)]
    assert BOTTOM not in outs
    assert 40 <= outs.count("") <= 130


def test_select_string_input_errors():
    src = RandomSource.from_seed(b"errors")
    with pytest.raises(InvalidParameterError, match="keys"):
        select_string(["Upper"], 1.0, 1.0, src)
    with pytest.raises(InvalidParameterError, match="keys"):
        select_string([""], 1.0, 1.0, src)
    with pytest.raises(InvalidParameterError, match="threshold"):
        select_string(["a"], 1.0, -1.0, src)
    with pytest.raises(InvalidParameterError, match="threshold"):
        select_string(["a"], 1.0, float("nan"), src)
    with pytest.raises(InvalidParameterError, match="epsilon"):
        select_string(["a"], 1e-6, 1.0, src)
    with pytest.raises(InvalidParameterError, match="epsilon"):
        select_string(["a"], 0.0, 1.0, src)
    with pytest.raises(InvalidParameterError, match="keys"):
        select_string(["a" * 129], 1.0, 1.0, src)
    with pytest.raises(InvalidParameterError, match="threshold"):
        select_string(["a"], 1.0, 101.0, src)
    with pytest.raises(InvalidParameterError, match="epsilon"):
        select_string(["a"] * 121, 10.0, 1.0, src)  # ε·h/2 = 605 > 600


# ------------------------------------------------------------------------------------------------------
# the empirical DP checker at the claimed ε, and two broken variants it catches
# ------------------------------------------------------------------------------------------------------
EPS = 8.0
D0 = ("a", "a")  # two voters agree on "a"
D1 = ("a", "b")  # one voter's document changed: its key moved from "a" to "b" ("b" unseen in D0)


def _coarse(out):
    """Post-processing (allowed by DP): the checker sees a, b, ⊥ or "other string" (not ~10^5 distinct atoms)."""
    return out if out in ("a", "b") else ("bottom" if out is BOTTOM else "other")


def _correct(keys, source):
    return _coarse(select_string(list(keys), EPS, 0.0, source)[0])


def _plurality_threshold(keys, source):
    """Broken: release the plurality key when it has >= 2 votes, else ⊥ — a threshold without noise."""
    c = Counter(keys).most_common(1)
    return c[0][0] if c and c[0][1] >= 2 else BOTTOM


def _half_noise(keys, source):
    """Broken: half the noise — exp(ε·h) instead of exp(ε·h/2) (the exponential mechanism at 2ε)."""
    return _coarse(select_string(list(keys), 2 * EPS, 0.0, source)[0])


@pytest.mark.slow
def test_checker_passes_the_mechanism_at_its_claimed_epsilon():
    """(ε = 8, δ = 0) on the neighbours D0 = (a, a), D1 = (a, b), where "b" is outside D0's domain. A
    violation is reported with probability <= α = 1e-6 if the mechanism is 8-DP (the checker's guarantee)."""
    rep = check_dp(
        _correct,
        D0,
        D1,
        epsilon=EPS,
        delta=0.0,
        trials=120_000,
        selection_trials=20_000,
        source_factory=seeded(b"answer-vote-dp"),
        alpha=1e-6,
    )
    assert rep.passed, rep.summary()


def test_checker_catches_a_threshold_without_noise():
    """The deterministic plurality-with-threshold releases "a" on D0 always and never on D1: infinite loss,
    caught with 60 000 trials (the Clopper–Pearson upper bound on P(a | D1) falls below e^-8; false-failure
    rate 0: the outputs are deterministic)."""
    rep = check_dp(
        _plurality_threshold,
        D0,
        D1,
        epsilon=EPS,
        delta=0.0,
        trials=60_000,
        selection_trials=1000,
        source_factory=seeded(b"broken-threshold"),
        alpha=1e-6,
    )
    assert not rep.passed and rep.epsilon_lower_bound > EPS


@pytest.mark.slow
def test_checker_catches_half_noise():
    """Half the noise on the same pair: P1(b) ≈ 0.40 vs P0(b) ≈ 1.1e-7, a loss of ≈ e^15 on the event {b}
    (computed from the law). With 200 000 trials and 0 expected hits of b on D0 (expected count 0.02) the
    Clopper–Pearson upper bound on P0(b) is ≈ 8e-5, so ε >= ln(0.39 / 8e-5) ≈ 8.5 > 8 is certified; the
    chance of 2 or more hits on D0 (which would hide it) is below 2e-4."""
    rep = check_dp(
        _half_noise,
        D0,
        D1,
        epsilon=EPS,
        delta=0.0,
        trials=200_000,
        selection_trials=10_000,
        source_factory=seeded(b"broken-half"),
        alpha=1e-6,
    )
    assert not rep.passed and rep.epsilon_lower_bound > EPS, rep.summary()


# ------------------------------------------------------------------------------------------------------
# the single-query mechanism on a tiny model, and inside MuRAG / MuRAG-Ada
# ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gen():
    import torch

    torch.set_num_threads(1)
    from dprag.rag_adapters.generator import tiny_llama

    return tiny_llama(0)


def test_params_validation_and_cost():
    p = AnswerVoteParams(4, 2.5, threshold=1.0)
    assert isinstance(p, SingleQueryMechanism)
    assert p.cost == ExponentialMechanismEvent(2.5)
    for kw, field in [
        ({"m": 0}, "m"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": 1e-4}, "epsilon"),
        ({"threshold": -1}, "threshold"),
        ({"threshold": 150}, "threshold"),
        ({"m": 200, "epsilon": 10.0}, "epsilon"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_key_words": 0}, "max_key_words"),
        ({"normalizer": 3}, "normalizer"),
    ]:
        args = {"m": 4, "epsilon": 1.0, **kw}
        with pytest.raises(InvalidParameterError, match=field):
            AnswerVoteParams(**args)
    bad = AnswerVoteParams(2, 1.0, normalizer=lambda a, q, max_words: "Not A Key!")
    with pytest.raises(InvalidParameterError, match="normalizer"):
        bad.key("x", "q")
    assert basic_key("The Answer: Zorvex-40, twice!", max_words=2) == "the answer"
    long = AnswerVoteParams(2, 1.0, normalizer=lambda a, q, max_words: "x" * 300)
    assert long.key("a", "q") == "x" * 128


def test_answer_vote_on_a_tiny_model(gen):
    """Released text is either a voter key or the Non-RAG answer; charged = the real documents; the
    diagnostics (non-private) appear only when asked; same seed, same answer."""
    docs = ["gout: zorvex", "gout: zorvex 40 mg", "unrelated record", "another one"]
    r = _Docs(docs)
    p = AnswerVoteParams(2, 10.0, threshold=0.0, max_tokens=6)
    ids = np.array([0, 1, 2, -1])
    a = answer_vote_rag("What for gout?", ids, r, gen, p, source=RandomSource.from_seed(b"tiny"))
    assert a.cost == p.cost and a.events == [ExponentialMechanismEvent(10.0)]
    assert sorted(a.charged.tolist()) == [0, 1, 2]
    assert "plurality" not in a.info and "voter_keys" not in a.info
    b = answer_vote_rag("What for gout?", ids, r, gen, p, source=RandomSource.from_seed(b"tiny"))
    assert a.text == b.text
    pd = AnswerVoteParams(2, 10.0, threshold=0.0, max_tokens=6, diagnostics=True)
    c = answer_vote_rag("What for gout?", ids, r, gen, pd, source=RandomSource.from_seed(b"tiny"))
    assert len(c.info["voter_keys"]) == 2 and c.info["plurality"] in c.info["voter_keys"] + [""]
    if not c.info["fallback"]:
        assert all(ch in ALPHABET for ch in c.text)
    with pytest.raises(InvalidParameterError, match="doc_ids"):
        answer_vote_rag("q", np.array([0, 1, 2]), r, gen, p)


def test_fallback_releases_the_non_rag_answer(gen):
    """The largest threshold (⊥ has all but e^-100 of the base mass) and a tiny ε: the draw is ⊥ (probability
    > 1 − 1e-40), and the text is exactly the model's answer without documents."""
    r = _Docs(["x record", "y record"])
    p = AnswerVoteParams(2, 0.01, threshold=100.0, max_tokens=5)
    a = answer_vote_rag("Which?", np.array([0, 1]), r, gen, p, source=RandomSource.from_seed(b"fb"))
    assert a.info["fallback"]
    from dprag.accounting.protocols import Prompt

    assert a.text == gen.generate(Prompt("Which?"), 5).strip()


def test_plugs_into_murag_and_murag_ada_pure_filter(gen):
    """MuRAG charges ExponentialMechanismEvent(ε) to every document above τ, in a pure filter (M = 1: a
    document answers one query, then is refused); MuRAG-Ada charges the threshold release plus the same cost."""
    docs = [f"record {i} about gout" for i in range(6)]
    r = _Docs(docs, scores=[90, 80, 70, 10, 5, 1])
    p = AnswerVoteParams(2, 4.0, threshold=1.0, max_tokens=4)
    flt = IndividualRenyiFilter(MemoryBudgetStore(6), FilterBudget.for_queries(1, p.cost, mode="pure"))
    check_mechanism(p, flt)
    mu = MuRAG(r, gen, flt, p, tau=50.0, source=RandomSource.from_seed(b"murag"))
    a1 = mu.answer("gout?")
    assert sorted(a1.charged.tolist()) == [0, 1, 2]
    a2 = mu.answer("gout?")
    assert a2.charged.size == 0 and a2.retrieved.size == 0  # budgets spent: only empty documents remain
    eps_g, delta_g = flt.guarantee()
    assert delta_g == 0 and eps_g >= 4.0
    flt2 = IndividualRenyiFilter(MemoryBudgetStore(6), MuRAGAda.filter_budget(1, p.cost, 1.0))
    ada = MuRAGAda(r, gen, flt2, p, edges=[100.0, 60.0, 0.0], epsilon_thr=1.0, source=RandomSource.from_seed(b"ada"))
    a3 = ada.answer("gout?")
    assert a3.events[-1] == ExponentialMechanismEvent(4.0)


# ------------------------------------------------------------------------------------------------------
# abstain_empty: voters with only empty documents abstain (a public function of their own documents)
# ------------------------------------------------------------------------------------------------------
def test_abstain_empty_voters_do_not_vote():
    r = _Docs(["zorvex is the drug", "zorvex twice daily", "other"])
    ids = np.array([0, 1, -1, -1, -1, -1, -1, -1])  # 2 real documents, 8 voters of one document each
    for abstain, want in [(False, sorted(["zorvex"] * 2 + ["nothing"] * 6)), (True, ["zorvex"] * 2)]:
        p = AnswerVoteParams(8, 10.0, threshold=0.0, max_tokens=4, diagnostics=True, abstain_empty=abstain)
        a = answer_vote_rag("Which drug?", ids, r, _Scripted(), p, source=RandomSource.from_seed(b"abst"))
        assert sorted(k for k in a.info["voter_keys"] if k) == want
        assert a.info["plurality"] == ("zorvex" if abstain else "nothing")
        assert a.cost == ExponentialMechanismEvent(10.0) and sorted(a.charged.tolist()) == [0, 1]
    with pytest.raises(InvalidParameterError, match="abstain_empty"):
        AnswerVoteParams(2, 1.0, abstain_empty="yes")


def test_history_goes_to_the_fallback_only_when_asked():
    """history_in_voters=False: the voters' prompts carry no history, the fallback's does; the default
    (True) gives it to every prompt. The cost is the same either way."""
    from dprag.accounting.protocols import Prompt

    class Recorder(_Scripted):
        def __init__(self):
            self.prompts = []

        def generate(self, prompt: Prompt, n):
            self.prompts.append(prompt)
            return super().generate(prompt, n)

    r = _Docs(["zorvex is the drug", "other"])
    hist = (("Which drug for gout?", "zorvex"),)
    ids = np.array([0, -1, -1, -1])
    for in_voters in (True, False):
        g = Recorder()
        p = AnswerVoteParams(
            4, 10.0, max_tokens=4, abstain_empty=True, selection="seen", delta=1e-5, history_in_voters=in_voters
        )
        a = answer_vote_rag("Which drug?", ids, r, g, p, source=RandomSource.from_seed(b"hist"), history=hist)
        assert a.info["fallback"]  # one vote < T = 3.3: ⊥ with probability ≥ 1 − δ
        voters, fallback = g.prompts[:4], g.prompts[4]
        assert all(v.history == (hist if in_voters else ()) for v in voters)
        assert fallback.contexts == () and fallback.history == hist
        assert a.cost == p.cost
    with pytest.raises(InvalidParameterError, match="history_in_voters"):
        AnswerVoteParams(2, 1.0, history_in_voters=1)


def test_abstain_empty_keeps_one_voter_per_document():
    """The sensitivity the proof needs: on neighbouring lists (one document removed, i.e. replaced by the
    padding at its position) under the same partition randomness, at most one voter's key differs — with and
    without abstention. Deterministic (seeded), so it cannot flake."""
    rng = np.random.default_rng(5)
    r = _Docs([f"w{i} text" for i in range(30)])
    for trial in range(60):
        m, k = int(rng.integers(2, 7)), int(rng.integers(1, 3))
        n_real = int(rng.integers(1, m * k + 1))
        ids = np.full(m * k, -1)
        ids[:n_real] = rng.choice(30, n_real, replace=False)
        nb = ids.copy()
        nb[int(rng.integers(0, n_real))] = -1
        for abstain in (False, True):
            p = AnswerVoteParams(m, 5.0, threshold=0.0, max_tokens=3, diagnostics=True, abstain_empty=abstain)
            seed = f"nb{trial}".encode()
            a = answer_vote_rag("q", ids, r, _Scripted(), p, source=RandomSource.from_seed(seed))
            b = answer_vote_rag("q", nb, r, _Scripted(), p, source=RandomSource.from_seed(seed))
            assert sum(x != y for x, y in zip(a.info["voter_keys"], b.info["voter_keys"], strict=False)) <= 1


class _Counting(_Scripted):
    """Scripted, counting its calls; ``fail_fallback``: every batch fails (the fallback row's failure), and so does
    the fallback prompt asked alone."""

    def __init__(self, fail_fallback=False):
        self.batches, self.alone, self.fail_fallback = [], 0, fail_fallback

    def generate(self, prompt, n):
        self.alone += 1
        if self.fail_fallback and not prompt.contexts:
            raise RuntimeError("fallback row unavailable")
        return super().generate(prompt, n)

    def generate_many(self, prompts, n):
        self.batches.append(list(prompts))
        if self.fail_fallback:
            raise RuntimeError("batch failed")
        return [super(_Counting, self).generate(p, n) for p in prompts]


def test_the_fallback_rides_in_the_voters_batch():
    """One batch of m + 1 rows, the last the public no-context prompt; a fallback release uses that row and makes
    no second call. A failure of the fallback row is public (its prompt holds no document): the answer raises the
    fixed GenerationFailedError after one probe of the public rows at the same shape, the same on every corpus,
    and no row is ever asked alone (spec/accounting/rag.md §6)."""
    r = _Docs(["x record", "y record"])
    p = AnswerVoteParams(2, 0.01, threshold=100.0, max_tokens=5)  # ⊥ with probability > 1 - 1e-40
    g = _Counting()
    a = answer_vote_rag("Which?", np.array([0, 1]), r, g, p, source=RandomSource.from_seed(b"fb"))
    assert a.info["fallback"] and a.text == "nothing"
    assert len(g.batches) == 1 and len(g.batches[0]) == 3 and g.alone == 0
    assert g.batches[0][-1].contexts == () and all(q.contexts for q in g.batches[0][:-1])
    bad = _Counting(fail_fallback=True)
    with pytest.raises(GenerationFailedError) as err:
        answer_vote_rag("Which?", np.array([0, 1]), r, bad, p, source=RandomSource.from_seed(b"fb"))
    assert str(err.value) == GenerationFailedError.MESSAGE and "unavailable" not in str(err.value)
    assert err.value.__cause__ is None and err.value.__context__ is None
    assert [len(b) for b in bad.batches] == [3, 3] and bad.alone == 0  # the batch, then its public rows
