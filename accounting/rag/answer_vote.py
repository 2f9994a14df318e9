"""Answer-level private aggregation: a single-query mechanism whose voters answer *in full* and whose release
is one DP selection over their normalised answers (spec/accounting/rag.md §5).

Per query, on a ranked document list of length m·k (-1 = empty document; MuRAG / MuRAG-Ada pass Top-K of the
admitted set):

1. the list is split uniformly at random among m voters (as 000 Alg. 5 / 003 Alg. 2: one document more or
   less changes one voter's documents);
2. every voter answers greedily, up to ``max_tokens`` tokens, from the question and its own documents only
   (``Generator.generate_many``: one batch of the public size m + 1 whose rows are functions of their own
   prompts only, spec/adapters.md §1; row m is the fallback of step 5, computed whether or not it is used);
   a voter whose call fails abstains, the others re-run at the same shape (spec/accounting/rag.md §6);
3. a public normalisation (``normalizer(answer, question)``; the experiments and the demo use
   ``dprag.rag_adapters.answer_keys.answer_key``) maps every answer to a key over the alphabet
   a-z0-9 and space, or to "" (the voter abstains); a normaliser that raises or returns anything but a key
   makes that voter abstain (the normaliser may be a third party's ``dprag.normalizers`` entry point);
4. a DP selection over the keys: ``selection="universal"`` (default): ``string_selection.select_string``, the
   exponential mechanism over the universal domain {⊥} ∪ Σ* with a public base measure (pure ε-DP,
   ε-bounded range, no δ); ``selection="seen"``: ``seen_key_selection.select_seen_key``, the exponential
   mechanism over the keys the voters wrote and ⊥ at the score T = 1 + 2·ln(1/δ)/ε votes ((ε, δ)-DP);
5. ⊥ (or the empty string) releases the Non-RAG answer: the model given the question alone (public).

Cost with respect to the document list, whatever the voters said: ``ExponentialMechanismEvent(epsilon)``
(universal; it runs in a pure or an RDP filter and plugs into MuRAG / MuRAG-Ada like 000 Alg. 5) or
``ApproxDpEvent(epsilon, delta)`` (seen; a pure filter counts ε and every charge adds δ outside it — the
individual basic-composition filter of spec/accounting/rag.md §5.3, ``mechanism.filter_charge``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

from ..errors import check_epsilon, check_positive_int
from ..events import ApproxDpEvent, ExponentialMechanismEvent, PrivacyEvent
from ..mechanisms import seen_key_selection
from ..mechanisms.string_selection import ALPHABET, MAX_EXPONENT, MAX_KEY_LENGTH, MAX_THRESHOLD, select_string
from ..noise.source import RandomSource
from ..protocols import Generator, Prompt, Retriever
from .common import EMPTY_DOCUMENT, RagAnswer, final_answer
from .containment import contained_responses
from .single_query import given_list_voters

#: the DP selections over the voters' keys (``AnswerVoteParams.selection``)
SELECTIONS = ("universal", "seen")


class Normalizer(Protocol):
    """normalizer(answer, question, max_words=...) -> key over ALPHABET ("" = abstain)."""

    def __call__(self, answer: str, question: str, *, max_words: int) -> str: ...


def basic_key(answer: str, question: str = "", max_words: int = 3) -> str:
    """The minimal public normalisation used when no normaliser is given: lower-case, characters outside
    a-z0-9 become spaces, the first ``max_words`` words. (The experiments use ``rag_adapters.answer_keys``.)"""
    text = "".join(c if c in ALPHABET else " " for c in answer.lower())
    return " ".join(text.split()[:max_words])


@dataclass(frozen=True)
class AnswerVoteParams:
    """Answer-level voting (``SingleQueryMechanism``). Plain numbers, so a policy can build it:

    ``m`` voters; ``epsilon`` the selection's ε (the whole per-query cost); ``threshold`` t in [0, 100] nats
    (the base measure gives ⊥ mass 1 − e^−t; a key s is released rather than the fallback once roughly
    ε·votes(s)/2 > t + (|s| + 1)·ln 38; when no key wins, a random string of the base measure is released
    with probability about e^−t instead of the fallback — hence the default 6, ≈ 0.25 %); ``max_tokens`` the voters'
    answer length; ``max_key_words`` the key length (passed to the normaliser as ``max_words``); ``normalizer`` (answer,
    question, max_words) -> key, default ``basic_key``; ``abstain_empty``: a voter whose every document is the empty
    document (the padding of 000 Alg. 3, or a document whose text is empty) abstains (key "") instead of voting its
    no-context answer — still a public function of the voter's own documents, so the neighbouring relation and
    the proof are unchanged (one document more or less changes one voter's key, here possibly from "" to a key),
    while the no-context answers no longer outvote the voters that read documents; ``diagnostics``: also put the
    voters' keys and their (non-private) plurality in ``info`` — experiments only, never for a released answer;
    ``selection``: "universal" (pure ε, ``threshold`` used, ``delta`` must be 0) or "seen" ((ε, δ), ``delta``
    in (0, 1) sets ⊥'s score T = 1 + 2·ln(1/δ)/ε votes, ``threshold`` unused); ``history_in_voters``: whether
    the answer history (earlier released pairs, public) goes into the voters' prompts as well as the fallback's
    (False: the fallback's only — the voters answer from their documents, the history speaks only when no key
    is released). Neither choice touches the documents' influence, so the cost is the same.
    """

    m: int
    epsilon: float
    threshold: float = 6.0
    max_tokens: int = 16
    max_key_words: int = 3
    normalizer: Normalizer | None = None
    diagnostics: bool = False
    abstain_empty: bool = False
    selection: str = "universal"
    delta: float = 0.0
    history_in_voters: bool = True

    def __post_init__(self) -> None:
        check_positive_int("m", self.m)
        check_epsilon("epsilon", self.epsilon)
        if self.epsilon < 2.0**-10:
            raise InvalidParameterError("epsilon", "must be at least 2^-10", self.epsilon)
        t = float(self.threshold)
        if not np.isfinite(t) or not 0 <= t <= MAX_THRESHOLD:
            raise InvalidParameterError("threshold", f"must be a number in [0, {MAX_THRESHOLD:g}]", self.threshold)
        if self.epsilon * self.m / 2 > MAX_EXPONENT:
            raise InvalidParameterError(
                "epsilon", f"ε·m/2 must be at most {MAX_EXPONENT:g} (float range)", self.epsilon * self.m / 2
            )
        check_positive_int("max_tokens", self.max_tokens)
        check_positive_int("max_key_words", self.max_key_words)
        if not isinstance(self.abstain_empty, bool):
            raise InvalidParameterError("abstain_empty", "must be a bool", self.abstain_empty)
        if not isinstance(self.history_in_voters, bool):
            raise InvalidParameterError("history_in_voters", "must be a bool", self.history_in_voters)
        if self.selection not in SELECTIONS:
            raise InvalidParameterError("selection", f"must be one of {SELECTIONS}", self.selection)
        if self.selection == "seen":
            seen_key_selection.check_parameters(self.epsilon, self.delta)
        elif self.delta != 0:
            raise InvalidParameterError("delta", "must be 0 for the universal selection (pure ε)", self.delta)
        if self.normalizer is not None and not callable(self.normalizer):
            raise InvalidParameterError("normalizer", "must be callable (answer, question, max_words) -> key")

    @property
    def cost(self) -> PrivacyEvent:
        if self.selection == "seen":
            return ApproxDpEvent(float(self.epsilon), float(self.delta))
        return ExponentialMechanismEvent(self.epsilon)

    @property
    def vote_threshold(self) -> float | None:
        """The seen selection's ⊥ score T in votes (None for the universal selection)."""
        return seen_key_selection.vote_threshold(self.epsilon, self.delta) if self.selection == "seen" else None

    def key(self, answer: str, question: str) -> str:
        norm = self.normalizer or basic_key
        k = norm(answer, question, max_words=self.max_key_words)
        if not isinstance(k, str) or any(c not in ALPHABET for c in k):  # the key itself is not shown: it is private
            raise InvalidParameterError("normalizer", f"must return a string over {ALPHABET!r}", type(k).__name__)
        return k[:MAX_KEY_LENGTH].strip()  # a public cut: keys longer than 128 characters are truncated

    def respond(
        self,
        question: str,
        doc_ids: npt.ArrayLike,
        retriever: Retriever,
        generator: Generator,
        *,
        source: RandomSource | None = None,
        history: tuple[tuple[str, str], ...] = (),
    ) -> RagAnswer:
        return answer_vote_rag(question, doc_ids, retriever, generator, self, source=source, history=history)


def _voter_key(params: AnswerVoteParams, answer: str, question: str) -> str:
    """``params.key``, guarded: a normaliser that raises, or returns anything but a key, makes this voter abstain
    ("") -- a function of the voter's own answer and the question, so within the mechanism's one-voter sensitivity
    (spec/accounting/rag.md §6); nothing of the failure leaves this function."""
    try:
        return params.key(answer, question)
    except Exception:  # noqa: BLE001 - the normaliser is a third party's entry point: its failure is contained
        return ""


def answer_vote_rag(
    question: str,
    doc_ids: npt.ArrayLike,
    retriever: Retriever,
    generator: Generator,
    params: AnswerVoteParams,
    *,
    source: RandomSource | None = None,
    history: tuple[tuple[str, str], ...] = (),
) -> RagAnswer:
    """Answer-level voting on a ranked document list (module doc). ε-DP with respect to the list
    (add / remove / replace one document): ``params.cost``."""
    src = RandomSource.resolve(source)
    ids, ctx = given_list_voters(doc_ids, params.m, retriever, src)
    # every voter answers (a public batch of m rows, each a function of its own prompt), abstainers included
    voter_history = tuple(history) if params.history_in_voters else ()
    # a voter whose call fails abstains, the others re-run at the same shape (containment.contained_responses): no
    # error after the charge depends on documents. The fallback's public prompt rides in the same batch as row m
    # (B = m + 1, public; spec/accounting/rag.md §5): one prefill-and-decode pass instead of a second one when no key
    # is released; rows depend on their own prompts only, so the voters' answers are what they are without it. In a
    # batch, a failure of that public row is public: it raises (GenerationFailedError), the same on every corpus.
    fallback_prompt = Prompt(question, (), history)
    rows, failed = contained_responses(
        generator, [*(Prompt(question, tuple(c), voter_history) for c in ctx), fallback_prompt], params.max_tokens
    )
    answers: list[str | None] = [None if i in failed else a for i, a in enumerate(rows[:-1])]
    abstained = [params.abstain_empty and all(t == EMPTY_DOCUMENT for t in c) for c in ctx]
    keys = [
        "" if a is None or gone else _voter_key(params, a, question)
        for a, gone in zip(answers, abstained, strict=False)
    ]
    voted = [k for k in keys if k]
    chosen: str | None
    event: PrivacyEvent
    if params.selection == "seen":
        chosen, event = seen_key_selection.select_seen_key(voted, params.epsilon, params.delta, src)
    else:
        chosen, event = select_string(voted, params.epsilon, params.threshold, src)
    fallback = not chosen
    if chosen:
        text = chosen
    elif params.m not in failed:
        text = rows[-1].strip()
    else:  # a per-prompt generator's fallback call failed twice: ask again (post-processing; common.final_answer)
        text = final_answer(generator, fallback_prompt, params.max_tokens)
    real = ids[ids >= 0]
    info = {
        "method": "answer-vote",
        "private": True,
        "m": params.m,
        "epsilon": params.epsilon,
        "threshold": None if params.selection == "seen" else params.threshold,
        "vote_threshold": params.vote_threshold,
        "fallback": fallback,
        "abstain_empty": params.abstain_empty,
        "selection": params.selection,
        "delta": params.delta,
    }
    if params.diagnostics:  # non-private: the experiments' plurality baseline and voter statistics
        counts: dict[str, int] = {}
        for k in voted:
            counts[k] = counts.get(k, 0) + 1
        top = max(sorted(counts), key=lambda k: counts[k]) if counts else ""
        info.update(
            voter_answers=answers,
            voter_keys=keys,
            voter_abstained=abstained,
            plurality=top,
            plurality_votes=counts.get(top, 0),
        )
    return RagAnswer(
        text=text, events=[event], cost=params.cost, retrieved=real, charged=real, private_tokens=0, info=info
    )
