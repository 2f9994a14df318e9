"""KSA and DP-KSA (004, Algorithm 1): keyword-space aggregation over an ensemble of per-document responses.

For a question x, the N most relevant documents are retrieved (exact search); the LLM answers x once per
document (one response per document, 004 Alg. 1 lines 1–4); the keyword histogram H counts, for every token
of the public vocabulary, how many responses contain it (a response counts a token at most once);
KSA releases the top-k tokens by count (non-private baseline); DP-KSA releases k̂ = FindBestK(H) and then
TopKWithPTR(k̂, H) (``accounting.mechanisms.ksa.dp_ksa_select``, within a total (ε, δ)); the final answer is
generated zero-shot from x and the released keywords only — post-processing, no further privacy cost.
Neighbouring relation: replace-one (or add/remove-one) document (004 Thm A.12).

Two DP-KSA mechanisms live here; their parameters are two classes so that nobody mixes their calibrations:

- ``dp_ksa`` — 004 as written: FindBestK then TopKWithPTR with a *discrete Gaussian* propose-test-release,
  composed in RDP to (ε, δ) for a session of questions (``accounting.mechanisms.ksa.DpKsaRdpParameters``,
  ``calibrate_dp_ksa``);
- ``DpKsaPureParameters`` — the audit service's per-query mechanism for generators that only return text:
  FindBestK and a *discrete Laplace* PTR, pure ε per query plus a per-charge δ (the PTR failure probability),
  charged through the per-document filter. Below, its description as the service runs it.

DP-KSA for a generator that only returns text (004 Alg. 1), as the audit service runs it per query.

A hosted or LangChain-wrapped LLM exposes no next-token logits, so the voting mechanisms (000 Alg. 5, 003) cannot
run on it. DP-KSA (Tang et al., 004) needs only text: every voter answers from the question and its own documents,
a keyword histogram counts in how many responses each word occurs, FindBestK (exponential mechanism) picks how
many keywords to release, TopKWithPTR (propose-test-release) releases that many most frequent words or nothing,
and the final answer is generated from the question and the released keywords only (post-processing).

In the service the mechanism is the *single-query mechanism* of MuRAG / MuRAG-Ada (000 Alg. 1–2), exactly like
000 Alg. 5 and answer-level voting: the per-document filter charges every document the policy's rule selects
(spec/protocol.md §5.3 step 5, ``audit.protocol.charges``), and DP-KSA runs on Top-K of the charged documents, padded
(000 Alg. 3), split uniformly at random among the m voters. Its randomness (the partition, FindBestK, the PTR
noise) comes only from the request's committed ``generate`` stream (§5.2). Full statement and proof:
spec/provider.md §3.

Two deliberate departures from the printed algorithm, each for a stated reason:

1. **The PTR test uses discrete Laplace noise, not Gaussian.** The service's per-document filter is a pure-ε
   filter (spec/accounting/filters.md); a Gaussian test has no pure-ε bound. With X ~ DLap(t), t = 2/ε_ptr, on
   T = max(2, d_k) (sensitivity 2) and the integer offset c = ``ptr_threshold_dlap(t, δ)``, the test
   ``T + X − c > 2`` is ε_ptr-DP and, when d_k ≤ 2 on both neighbours, passes with probability ≤ δ — the
   propose-test-release argument of 004 Thm A.10 with the Laplace tail in place of the Gaussian one.
   Per query: (ε_em + ε_ptr, δ)-DP with respect to one document of the voters' list.
2. **Keywords are words of a universal public domain**, not a model's token ids (a hosted LLM has no tokenizer
   we can see): lower-case runs of ``[a-z0-9]`` of at most 32 characters, minus a fixed stop-word list and the
   question's own words (both public). The histogram over that countably infinite domain is all zeros except
   the observed words; FindBestK and TopKWithPTR read only its top ``max_keywords`` + 1 sorted counts, so the
   observed words followed by ``max_keywords`` + 1 zeros give exactly the universal histogram's gaps
   (``accounting.mechanisms.ksa.keyword_histogram`` / ``find_best_k`` on that compact domain). A released set
   (d_k > 2) holds only words with count ≥ 3.

FindBestK is ``accounting.mechanisms.ksa.find_best_k`` unchanged (exact exponential mechanism, β = 4/ε_em: 004's
printed Gumbel(2/ε) is the trap the seeds README names).

Calls. One answer costs ``DpKsaPureParameters.calls_per_answer`` = m + 1 generator calls (m voters, then the final
answer, which needs the released keywords). The voters' calls are independent, so on a generator that makes one
call per prompt (``TextOnlyGenerator``, the hosted path: it has ``generate_each``) they run concurrently, at most
``max_concurrency`` in flight (the smaller of the parameters' and the generator's), results in prompt order; the
answer then waits ⌈m / max_concurrency⌉ + 1 call latencies instead of m + 1 (``latency_rounds``). Nothing random is
drawn while the calls run (the partition before, FindBestK and the test after), so the release does not depend on
the order the calls complete in. A generator with only its own batch (``generate_many``) is used as is.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, TypedDict, TypeVar, cast

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

from ..errors import check_delta, check_epsilon, check_positive_int
from ..events import ComposedEvent, DiscreteLaplaceEvent, ExponentialMechanismEvent, PrivacyEvent
from ..mechanisms.ksa import GAP_SENSITIVITY, dp_ksa_select, find_best_k, keyword_histogram
from ..noise.source import RandomSource
from ..protocols import Generator, Prompt, Retriever, stop_tokens
from .common import RagAnswer, documents_text, exact_top_k, final_answer, voter_responses
from .single_query import given_list_voters

__all__ = [
    "ksa",
    "dp_ksa",
    "DpKsaPureParameters",
    "keyword_words",
    "ptr_threshold_dlap",
    "TextOnlyGenerator",
    "as_text_generator",
    "text_voter_responses",
    "call_each",
    "CallFailed",
    "check_max_concurrency",
    "DEFAULT_MAX_CONCURRENCY",
    "render_prompt",
    "STOP_WORDS",
    "MAX_WORD_CHARS",
    "PROMPT_TEMPLATE",
]


class TextGenerator(Protocol):
    """The text half of ``accounting.protocols.Generator``: all DP-KSA's voters and final answer need."""

    def generate(self, prompt: Prompt, max_new_tokens: int) -> str: ...

    def generate_many(self, prompts: Sequence[Prompt], max_new_tokens: int) -> list[str]: ...


#: the default bound on one answer's generator calls in flight (``DpKsaPureParameters``, ``TextOnlyGenerator``)
DEFAULT_MAX_CONCURRENCY = 8

_T = TypeVar("_T")
_R = TypeVar("_R")


def check_max_concurrency(field: str, value: object) -> int:
    """``value`` if it is an integer >= 1 (bools, floats and strings are refused): a bound on calls in flight."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < 1:
        raise InvalidParameterError(field, "must be an integer >= 1 (1 = one call at a time)", value)
    return int(value)


@dataclass(frozen=True)
class CallFailed:
    """In ``call_each``'s results: the call for this item raised ``error``."""

    error: Exception


def call_each(fn: Callable[[_T], _R], items: Sequence[_T], max_concurrency: int) -> list[_R | CallFailed]:
    """``fn(item)`` for every item, at most ``max_concurrency`` calls in flight, results in item order; a call that
    raised an ``Exception`` gives ``CallFailed`` in its place (the other calls still run). ``max_concurrency`` 1
    calls in order on the calling thread; otherwise a thread pool of min(max_concurrency, len(items)) threads,
    all joined before the return."""
    limit = check_max_concurrency("max_concurrency", max_concurrency)

    def one(x: _T) -> _R | CallFailed:
        try:
            return fn(x)
        except Exception as e:  # noqa: BLE001 - recorded in the item's place
            return CallFailed(e)

    todo = list(items)
    if limit == 1 or len(todo) <= 1:
        return [one(x) for x in todo]
    with ThreadPoolExecutor(max_workers=min(limit, len(todo)), thread_name_prefix="dprag-text-call") as pool:
        return list(pool.map(one, todo))


def text_voter_responses(
    generator: object, prompts: Sequence[Prompt], max_new_tokens: int, max_concurrency: int
) -> list[str | None]:
    """Every voter's response, ``None`` for a voter whose call failed: it abstains (spec/accounting/rag.md §6).

    A generator with ``generate_each(prompts, n, max_concurrency=L) -> list[str | None]`` (one call per prompt, a
    failed call in its place as None: ``TextOnlyGenerator``) is asked for every prompt alone, at most L calls in
    flight -- each call sees one prompt, so there is no batch shape to keep; a voter whose call failed is asked once
    more alone and abstains if that fails too. Each response, or its absence, is a function of its own prompt only;
    the results are in prompt order whatever order the calls complete in. Any other generator: its own batch at the
    public shape with the failing voters contained (``common.voter_responses``).
    """
    limit = check_max_concurrency("max_concurrency", max_concurrency)
    return voter_responses(generator, prompts, max_new_tokens, max_concurrency=limit)


class _KeywordRelease(TypedDict):
    k: int
    keywords: tuple[str, ...] | None


def _responses(
    question: str, retriever: Retriever, generator: Generator, n_docs: int, response_tokens: int
) -> tuple[npt.NDArray[np.int64], list[str]]:
    ids, _ = exact_top_k(retriever, question, n_docs)
    prompts = [Prompt(question, documents_text(retriever, [i])) for i in ids]  # one voter per document
    # a response whose call fails is empty (the voter abstains: no keyword), the others kept at the batch's shape
    texts = [r or "" for r in voter_responses(generator, prompts, response_tokens)]
    return ids, texts


def _histogram(generator: Generator, texts: list[str], exclude: Iterable[int]) -> npt.NDArray[np.int64]:
    tokens = [set(generator.encode(t)) - set(exclude) for t in texts]
    return keyword_histogram([sorted(t) for t in tokens], generator.vocab_size)


def _answer(question: str, generator: Generator, keywords: tuple[int, ...] | None, max_tokens: int) -> str:
    if not keywords:
        return generator.generate(Prompt(question), max_tokens).strip()
    hint = "Keywords: " + ", ".join(generator.decode([t]).strip() for t in keywords)
    return generator.generate(Prompt(question, (hint,)), max_tokens).strip()


def ksa(
    question: str,
    retriever: Retriever,
    generator: Generator,
    *,
    n_docs: int,
    k: int,
    response_tokens: int = 16,
    max_tokens: int = 32,
    exclude_tokens: Iterable[int] = (),
) -> RagAnswer:
    """Non-private KSA: the k most frequent keywords (ties by the smaller token id) feed a zero-shot answer."""
    k = check_positive_int("k", k)
    ids, texts = _responses(question, retriever, generator, check_positive_int("n_docs", n_docs), response_tokens)
    excl = set(exclude_tokens) | stop_tokens(generator)
    h = _histogram(generator, texts, excl)
    top = tuple(sorted(int(t) for t in np.lexsort((np.arange(h.size), -h))[:k] if h[t] > 0))
    return RagAnswer(
        text=_answer(question, generator, top, max_tokens),
        retrieved=ids,
        info={"method": "ksa", "private": False, "keywords": top},
    )


def dp_ksa(
    question: str,
    retriever: Retriever,
    generator: Generator,
    *,
    n_docs: int,
    epsilon: float,
    delta: float,
    response_tokens: int = 16,
    max_tokens: int = 32,
    k_max: int | None = 30,
    exclude_tokens: Iterable[int] = (),
    source: RandomSource | None = None,
    queries: int = 1,
) -> RagAnswer:
    """DP-KSA (004 Alg. 1): FindBestK + TopKWithPTR on the keyword histogram, then a zero-shot answer.

    If PTR refuses (the gap at k̂ is too small), no keyword is released and the answer is the model's own.
    ``k_max`` bounds FindBestK's range (004 suggests 15–30; over the whole vocabulary the gaps of rare tokens
    swamp it). Cost: the composed event of ``dp_ksa_select``, which is (ε, δ)-DP when converted at δ/2
    (``epsilon_of(cost, δ/2)``: the other δ/2 is PTR's failure probability). With ``queries`` = T, (ε, δ)
    is the budget of a session of T such answers, RDP-composed (``calibrate_dp_ksa``).
    """
    ids, texts = _responses(question, retriever, generator, check_positive_int("n_docs", n_docs), response_tokens)
    excl = set(exclude_tokens) | stop_tokens(generator)
    h = _histogram(generator, texts, excl)
    sel, event = dp_ksa_select(
        h, epsilon, delta, RandomSource.system() if source is None else source, k_max=k_max, queries=queries
    )
    return RagAnswer(
        text=_answer(question, generator, sel.tokens, max_tokens),
        events=[event],
        cost=event,
        retrieved=ids,
        charged=ids,
        info={
            "method": "dp-ksa",
            "private": True,
            "k_hat": sel.k,
            "released": sel.tokens is not None,
            "keywords": sel.tokens,
            "epsilon": epsilon,
            "delta": delta,
            "queries": queries,
        },
    )


_WORD = re.compile(r"[a-z0-9]+")
MAX_WORD_CHARS = 32
#: a fixed, public stop-word list (function words that carry no answer)
STOP_WORDS = frozenset(
    "a an the of to in on for and or is are was were be been being what which who whom whose how when where why "
    "does do did done with by at from as this that these those it its they them their there here not no yes "
    "i you he she we my your his her our can could would should will shall may might must has have had than "
    "then so if but about into over under also only just very more most some any each all answer question "
    "context keywords unknown".split()
)


def keyword_words(text: str, question: str = "", max_words: int | None = None) -> frozenset[str]:
    """The keyword set of one response: its first ``max_words`` words (lower-case runs of [a-z0-9]), minus
    words longer than 32 characters, stop words and the question's own words. Public: a function of the
    response and the question only."""
    words = _WORD.findall(text.lower())
    if max_words is not None:
        words = words[:max_words]
    q = set(_WORD.findall(question.lower()))
    return frozenset(w for w in words if len(w) <= MAX_WORD_CHARS and w not in STOP_WORDS and w not in q)


def ptr_threshold_dlap(scale: float, delta: float) -> int:
    """The smallest integer c >= 0 with P[X > c] <= δ for X ~ DLap(scale), P[x] ∝ exp(−|x|/scale).

    With p = e^{−1/scale}, P[X >= j] = p^j / (1 + p) for j >= 1, so c = ⌈scale·(ln(1/δ) − ln(1 + p))⌉ − 1
    (at least 0). Floating point is kept on the safe side: c is raised until the inequality holds with a
    relative margin of 1e-9 (a larger c only makes the test pass less often, on every input).
    """
    t = check_epsilon("scale", scale)
    d = check_delta("delta", delta)
    p = math.exp(-1.0 / t)
    need = -math.log(d) - math.log1p(p)  # (c + 1) / t must be >= need
    c = max(0, math.ceil(t * need) - 1)
    while (c + 1) / t < need * (1.0 + 1e-9) + 1e-12:
        c += 1
    return c


@dataclass(frozen=True)
class DpKsaPureParameters:
    """DP-KSA as a single-query mechanism (``accounting.rag.mechanism.SingleQueryMechanism``), module doc.

    ``m`` voters (one response each, from the question and the voter's share of the ranked list);
    ``epsilon_em`` FindBestK's ε (nats); ``epsilon_ptr`` the PTR test's ε (nats; discrete Laplace scale
    2/ε_ptr on a gap of sensitivity 2); ``ptr_delta`` the test's failure probability δ (per query, per document
    list); ``max_keywords`` FindBestK's largest k (004 suggests 15–30; the range [1, max_keywords] is public);
    ``response_tokens`` the voters' response length in words (a public cut; the generator is asked for that
    many tokens); ``max_tokens`` the final answer's length; ``max_concurrency`` the most voter calls in flight at
    once on a generator that makes one call per prompt (``generate_each``; 1 = one after another; no privacy
    meaning: the release is the same for every value).

    One answer costs ``calls_per_answer`` = m + 1 generator calls and waits ``latency_rounds`` call latencies.

    ``cost`` is the **pure** part, ε_em + ε_ptr, which the per-document filter charges; every use adds
    ``ptr_delta`` to the δ of each document it charges, which the policy accounts per document outside the
    filter (``audit.protocol.certify.certified_epsilons``; spec/provider.md §3). Do not run it in a filter or
    accountant that reads only ``cost``.
    """

    m: int
    epsilon_em: float
    epsilon_ptr: float
    ptr_delta: float
    max_keywords: int = 10
    response_tokens: int = 32
    max_tokens: int = 32
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY

    def __post_init__(self) -> None:
        check_positive_int("m", self.m)
        check_epsilon("epsilon_em", self.epsilon_em)
        check_epsilon("epsilon_ptr", self.epsilon_ptr)
        check_delta("ptr_delta", self.ptr_delta)
        check_positive_int("max_keywords", self.max_keywords)
        check_positive_int("response_tokens", self.response_tokens)
        check_positive_int("max_tokens", self.max_tokens)
        check_max_concurrency("max_concurrency", self.max_concurrency)
        if not 2.0 / self.epsilon_ptr <= 2.0**48:
            raise InvalidParameterError(
                "epsilon_ptr", "must be at least 2^-47 (discrete Laplace scale <= 2^48)", self.epsilon_ptr
            )

    @property
    def calls_per_answer(self) -> int:
        """Generator calls one answer costs when no call fails: one per voter (m), then the final answer (1). On a
        generator with ``generate_each`` a failed voter call is asked once more and the final answer is tried up to
        3 times (``common.final_answer``), so at most 2m + 3; on one with only ``generate_many`` a failing batch is
        probed at its shape (about 2·log2 m more batches per failing voter, spec/accounting/rag.md §6)."""
        return self.m + 1

    @property
    def latency_rounds(self) -> int:
        """Call latencies one answer waits for when no call fails: ⌈m / max_concurrency⌉ rounds of voter calls,
        then the final answer (a generator whose own limit is lower waits longer)."""
        return -(-self.m // self.max_concurrency) + 1

    @property
    def ptr_scale(self) -> float:
        """t = 2/ε_ptr: the discrete Laplace scale that makes the sensitivity-2 test ε_ptr-DP."""
        return GAP_SENSITIVITY / self.epsilon_ptr

    @property
    def ptr_offset(self) -> int:
        """c: P[DLap(t) > c] <= ptr_delta."""
        return ptr_threshold_dlap(self.ptr_scale, self.ptr_delta)

    @property
    def cost(self) -> PrivacyEvent:
        return ComposedEvent(
            (
                ExponentialMechanismEvent(self.epsilon_em, bounded_range=True),
                DiscreteLaplaceEvent(self.ptr_scale, GAP_SENSITIVITY),
            )
        )

    @property
    def delta(self) -> float:
        return self.ptr_delta

    def select_keywords(self, responses: Sequence[str], question: str, source: RandomSource) -> _KeywordRelease:
        """FindBestK then TopKWithPTR on the responses' keyword histogram. Returns ``{"k", "keywords"}``
        (keywords: a sorted tuple of words, or None when the test refused)."""
        sets = [keyword_words(r, question, self.response_tokens) for r in responses]
        vocab = sorted(set().union(*sets)) if sets else []
        index = {w: i for i, w in enumerate(vocab)}
        size = len(vocab) + self.max_keywords + 1  # observed words, then zeros: the universal histogram's top
        h = keyword_histogram([sorted(index[w] for w in s) for s in sets], size)
        k_hat, _ = find_best_k(h, self.epsilon_em, source, k_max=self.max_keywords)
        s = np.sort(h)[::-1]
        d_k = int(s[k_hat - 1] - s[k_hat])
        x = int(source.discrete_laplace(self.ptr_scale))
        if max(2, d_k) + x - self.ptr_offset > 2:
            order = np.argsort(-h, kind="stable")[:k_hat]  # ties by the smaller index (= word order)
            words = tuple(sorted(vocab[i] for i in order if i < len(vocab)))
            return {"k": int(k_hat), "keywords": words}
        return {"k": int(k_hat), "keywords": None}

    def respond(
        self,
        question: str,
        doc_ids: npt.ArrayLike,
        retriever: Retriever,
        generator: TextGenerator,
        *,
        source: RandomSource | None = None,
        history: tuple[tuple[str, str], ...] = (),
    ) -> RagAnswer:
        """004 Alg. 1 on a ranked document list (length a multiple of m; -1 = the empty document)."""
        if source is None:
            source = RandomSource.system()
        ids, ctx = given_list_voters(doc_ids, self.m, retriever, source)
        # a voter whose call fails abstains (an empty response: no keyword; spec/accounting/rag.md §6); the voters'
        # calls run concurrently on a generator with generate_each (text_voter_responses); nothing is drawn from
        # source while they run
        prompts = [Prompt(question, tuple(c), history) for c in ctx]
        responses = [
            r or "" for r in text_voter_responses(generator, prompts, self.response_tokens, self.max_concurrency)
        ]
        sel = self.select_keywords(responses, question, source)
        kw = sel["keywords"]
        prompt = Prompt(question, ("Keywords: " + ", ".join(kw),), history) if kw else Prompt(question, (), history)
        text = final_answer(generator, prompt, self.max_tokens)
        real = ids[ids >= 0]
        return RagAnswer(
            text=text,
            events=[self.cost],
            cost=self.cost,
            retrieved=real,
            charged=real,
            info={
                "method": "dp-ksa",
                "private": True,
                "m": self.m,
                "k_hat": sel["k"],
                "released": kw is not None,
                "keywords": kw,
                "llm_calls": self.calls_per_answer,
                "max_concurrency": self.max_concurrency,
            },
        )


# ---------------------------------------------------------------------------------------------------------------
# Generators that only return text
# ---------------------------------------------------------------------------------------------------------------
#: the public template a text-only generator's prompts are rendered with (bound into C_emb's prompt_template)
PROMPT_TEMPLATE = (
    "{history}Answer the question in a few words, using the context if it helps.\n\n"
    "{context}Question: {question}\nAnswer:"
)


def render_prompt(prompt: Prompt) -> str:
    """``PROMPT_TEMPLATE`` filled in: earlier (question, answer) turns, the context documents, the question."""
    hist = "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in prompt.history)
    docs = [c for c in prompt.contexts if c]
    ctx = ("Context:\n" + "\n\n".join(docs) + "\n\n") if docs else ""
    return PROMPT_TEMPLATE.format(history=hist, context=ctx, question=prompt.question)


def _truncate_words(text: str, n: int) -> str:
    words = text.split()
    return " ".join(words[:n])


class TextOnlyGenerator:
    """A generator that only returns text: ``complete(prompt_text) -> str`` (a hosted API, a LangChain LLM's
    ``invoke``), behind the ``generate`` / ``generate_many`` half of ``accounting.protocols.Generator``.

    Prompts are rendered with ``render`` (default ``render_prompt``); answers are cut to ``max_new_tokens``
    whitespace-separated words (a public cut). ``prompt_template`` names what the provider commits to in C_emb.
    Each call sees one prompt only (the voters' responses are functions of their own prompts).

    ``generate_many`` and ``generate_each`` make one call per prompt, at most ``max_concurrency`` of one batch in
    flight at once (threads; 1 = one after another), results in prompt order: ``complete`` must be safe to call
    from several threads (an HTTP client, a LangChain model are). The bound is per batch, not across batches.
    """

    def __init__(
        self,
        complete: Callable[[str], object],
        *,
        render: Callable[[Prompt], str] = render_prompt,
        name: str | None = None,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    ) -> None:
        if not callable(complete):
            raise InvalidParameterError("generator", "must be callable prompt_text -> str", type(complete).__name__)
        self.max_concurrency = check_max_concurrency("max_concurrency", max_concurrency)
        self.complete, self.render = complete, render
        self.name = name or getattr(complete, "__qualname__", type(complete).__name__)
        self.prompt_template = (
            f"text-only generator {self.name!s}; template: {PROMPT_TEMPLATE}"
            if render is render_prompt
            else f"text-only generator {self.name!s}; custom render {render!r}"
        )

    def generate(self, prompt: Prompt, max_new_tokens: int) -> str:
        out = self.complete(self.render(prompt))
        out = getattr(out, "content", out)  # a LangChain chat model returns a message
        if not isinstance(out, str):
            raise InvalidParameterError("generator", "returned a non-string answer", type(out).__name__)
        return _truncate_words(out, int(max_new_tokens))

    def _limit(self, max_concurrency: int | None) -> int:
        if max_concurrency is None:
            return self.max_concurrency
        return min(check_max_concurrency("max_concurrency", max_concurrency), self.max_concurrency)

    def generate_each(
        self, prompts: Sequence[Prompt], max_new_tokens: int, *, max_concurrency: int | None = None
    ) -> list[str | None]:
        """One call per prompt, at most min(``max_concurrency``, ``self.max_concurrency``) in flight; results in
        prompt order, None where the call failed (raised, timed out, returned a non-string)."""
        out = call_each(lambda p: self.generate(p, max_new_tokens), prompts, self._limit(max_concurrency))
        return [None if isinstance(r, CallFailed) else r for r in out]

    def generate_many(self, prompts: Sequence[Prompt], max_new_tokens: int) -> list[str]:
        """One call per prompt, at most ``max_concurrency`` in flight, results in prompt order; if a call failed,
        the first failed prompt's exception is raised once every call has returned."""
        texts: list[str] = []
        for r in call_each(lambda p: self.generate(p, max_new_tokens), prompts, self.max_concurrency):
            if isinstance(r, CallFailed):
                raise r.error
            texts.append(r)
        return texts


def as_text_generator(generator: object, *, max_concurrency: int = DEFAULT_MAX_CONCURRENCY) -> TextGenerator:
    """The provider's text generator: an object with ``generate(prompt, n)`` and ``generate_many(prompts, n)``
    (used as is), a LangChain runnable (``invoke``), or any callable ``prompt_text -> str`` (wrapped in
    ``TextOnlyGenerator`` with ``max_concurrency``)."""
    if hasattr(generator, "generate_many") and hasattr(generator, "generate"):
        return cast(TextGenerator, generator)  # used as is (duck-typed, like the protocol)
    if hasattr(generator, "invoke") and callable(generator.invoke):
        return TextOnlyGenerator(generator.invoke, name=type(generator).__name__, max_concurrency=max_concurrency)
    if callable(generator):
        return TextOnlyGenerator(generator, max_concurrency=max_concurrency)
    raise InvalidParameterError(
        "generator",
        "must expose generate/generate_many, invoke(text), or be a callable prompt_text -> str",
        type(generator).__name__,
    )
