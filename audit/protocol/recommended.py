"""``Policy.recommended``: a well-formed policy from the quantities a provider decides, with the best-known defaults
(issue 25; spec/provider.md §2). Defined here to keep audit/protocol/policy.py within the floors contract's module size;
``Policy.recommended`` is this function as a classmethod, and ``audit.protocol.policy`` re-exports
``RECOMMENDED_V2``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dprag.accounting.errors import check_delta, check_epsilon, check_positive_int
from dprag.errors import InvalidParameterError

from .policy_parts import CoalitionPolicy, GenerationPolicy, RetrievalPolicy, SamplerSpec

if TYPE_CHECKING:
    from .policy import Policy

#: the arguments of ``Policy.recommended`` that give its defaults before issue 25 (000 Alg. 5, token level, m = 20
#: voters, 32 tokens; ε ≈ 7.1 composed): ``Policy.recommended(window, **RECOMMENDED_V2)``
RECOMMENDED_V2: dict[str, Any] = {
    "voters": 20,
    "max_tokens": 32,
    "mechanism": "pure-dp-rag",
    "vote_epsilon": 2.0,
    "key_words": 3,
    "normalizer": "basic",
    "vote_selection": "universal",
    "abstain_empty": False,
}


def recommended(
    cls: type[Policy],
    window: str,
    *,
    citations_for: tuple[str, ...] = (),
    queries_per_account: int = 20,
    k_max: int = 5,
    epsilon_acc: float = 1.0,
    delta_acc: float = 1e-6,
    citations: int = 5,
    algorithm: str = "murag",
    voters: int = 30,
    epsilon_token: float = 1.0,
    private_tokens: int = 3,
    max_queries_per_doc: int = 1,
    tau_cosine: float = 0.5,
    edges_cosine: tuple[float, ...] = (1.0, 0.7, 0.6, 0.5, 0.4),
    epsilon_thr: float = 1.0,
    docs_per_voter: int = 1,
    max_tokens: int = 16,
    mechanism: str = "answer-vote",
    vote_epsilon: float = 3.9,
    vote_threshold: float = 6.0,
    key_words: int = 2,
    normalizer: str = "answer-keys-v1",
    ksa_epsilon_em: float = 1.0,
    ksa_epsilon_ptr: float = 2.5,
    ksa_delta: float = 1e-8,
    ksa_max_keywords: int = 5,
    ksa_response_tokens: int = 32,
    generator_replayable: bool = False,
    embedding_scale: int = 1 << 10,
    public_completion: bool = False,
    em_prior: str = "uniform",
    vote_selection: str | None = None,
    vote_delta: float | None = None,
    abstain_empty: bool | None = None,
    public_ids_for: tuple[str, ...] = (),
    documents: int | None = None,
) -> Policy:
    """A well-formed policy from the quantities a provider decides, with documented, sound defaults.

    The defaults are the best-known settings (issue 25), chosen on public data and never on a provider's corpus
    (this method takes none: a threshold tuned on the private documents would be a release no ε covers):
    MuRAG with answer-level voting over the voters' own keys, m = 30 voters of one record each, τ = cosine
    0.5, 2 key words of the ``answer-keys-v1`` normaliser, 16-token answers, δ_q = 1e-6, padded voters
    abstaining — the demo's mechanism, chosen on its public calibration corpus by the rule of spec/demo.md
    §2 — at ε_q = 3.9, so that the composed ε with the retrieval defaults stays below 10.
    ``Policy.recommended(window, **RECOMMENDED_V2)`` gives the earlier defaults (000 Alg. 5, m = 20).

    Units: scores are integer dot products of embeddings quantised at ``embedding_scale`` (cosine × S², so
    clipped to [0, S²] and shifted right by log2 S they are cosine × S, e.g. 0.5 → 512 at S = 2^10).

    - ``window``: the audit window's id (also the ledger origin ``dprag/<window>``).
    - ``citations_for``: tenants whose accounts see citations (the retrieval channel); others see none;
      ``public_ids_for``: those of them whose own document ids may be shown with the citations.
    - ``queries_per_account`` (n): each account's query limit in the window.
    - ``k_max``: the largest coalition the retrieval ε covers (on trust: spec/threat-model.md).
    - ``epsilon_acc``, ``delta_acc``: one account's (ε, δ) over its n queries, replace-one-document; σ
      of the discrete Gaussian is calibrated to it exactly (``accounting.collusion.exact_sigma``);
      δ_policy = 2·k_max·δ_acc (it must exceed k_max·δ_acc, 002 §5.6).
    - ``citations`` (K): citations per answer.
    - ``algorithm``: "murag" (threshold τ) or "murag-ada" (bins ``edges_cosine``, ε_thr).
    - ``voters`` (m), ``epsilon_token``, ``private_tokens`` (c), ``max_tokens``: 000 Alg. 5 per answer;
      its pure cost per touched document is ε_q (``query_cost``).
    - ``max_queries_per_doc`` (M): the filter budget is M·ε_q per document; the generation ε of the verdict
      is 2·M·ε_q (replace-one).
    - ``tau_cosine`` / ``edges_cosine``: relevance thresholds as cosines (converted to score units).
    - ``mechanism="answer-vote"`` (spec/accounting/rag.md §5): voters answer in full and one exponential mechanism
      over the normalised answers releases one (``vote_epsilon`` is then ε_q; ``vote_threshold`` t in nats;
      ``key_words``; ``normalizer`` names a public normaliser, "basic" or a dprag.normalizers entry point).
    - ``mechanism="dp-ksa"`` (004, for a generator that only returns text: a hosted or LangChain LLM;
      accounting/rag/ksa.py, spec/provider.md): each of the m voters answers from its documents, FindBestK
      (``ksa_epsilon_em``, nats) picks k <= ``ksa_max_keywords``, a propose-test-release test with discrete
      Laplace noise (``ksa_epsilon_ptr``, nats; failure probability ``ksa_delta`` per query and document)
      releases the k most frequent words or none, and the answer is generated from the question and those
      keywords only. ε_q = ksa_epsilon_em + ksa_epsilon_ptr; ``ksa_response_tokens``: the voters' response
      length in words; ``generator_replayable``: True only if the auditor can re-run the generator
      bit-exactly (a hosted LLM cannot: the verdict then says the answer text is on trust). The defaults
      give ε_q = 3.5 (generation ε 7.0 at M = 1, replace-one) and a generation δ of about
      1e-8·(1 + e^3.5) ≈ 3.4e-7; the test releases keywords once about 17 of the m = 20 voters agree on a
      word the others lack (PTR offset c = 14 at scale 0.8), and with all 20 agreeing FindBestK picks k = 1
      with probability e^5/(e^5 + 4) ≈ 0.97 — use more voters for more releases.
      ``epsilon_token`` and ``private_tokens`` are unused by dp-ksa (kept well-formed).
    - ``public_completion``, ``em_prior`` (mechanism "pure-dp-rag" only): 000 Alg. 5's free-in-ε extensions
      (``PureDpRagParams``): after the c private tokens, continue with the Non-RAG lane's greedy tokens; the
      exponential mechanism's base measure "uniform" (000) or "non-rag". ε and the charges are unchanged.
    - ``vote_selection``, ``vote_delta``, ``abstain_empty`` (mechanism "answer-vote" only): the selection over
      the voters' keys, "universal" (pure ε, threshold t) or "seen" (the exponential mechanism over the keys
      the voters wrote and ⊥ at T = 1 + 2·ln(1/δ)/ε votes; (ε, δ)-DP per query with δ = ``vote_delta``, which
      every RAG charge of a document adds to its δ like dp-ksa's: the verdict's generation δ is
      n·δ·(1 + e^{M·ε_q}) replace-one with n the most RAG charges a document can take; ``vote_threshold``
      unused); ``abstain_empty``: voters whose documents are all the empty padding abstain (free in ε).
    ``vote_selection`` (default "seen" for answer-vote), ``vote_delta`` (default 1e-6 with the seen selection)
    and ``abstain_empty`` (default True for answer-vote) follow the mechanism when not given.
    The sampler is the discrete Gaussian table with tail 10σ and 64-bit probabilities; its declared TV is
    the table's own, rounded up. With every default the verdict certifies ε ≈ 9.9 composed (retrieval 2.1 at
    δ = 10^-5 for 5 colluders; generation 7.8 = 2 · M · ε_q with ε_q = 3.9) and δ ≈ 6.0e-5 (the seen
    selection adds δ_q·(1 + e^3.9) per document), replace-one.

    ``documents``: the largest tenant's number of documents. Given, a policy that would certify a weak or vacuous
    guarantee under the auditor's default limit (``certify.policy_strength``: ε > 10, δ >= 1/documents, or
    δ >= 1) is refused, naming why — e.g. ``max_queries_per_doc=5`` with the defaults certifies δ far above 1.
    """
    from dprag.accounting.collusion import exact_sigma

    voting = mechanism == "answer-vote"
    if vote_selection is None:
        vote_selection = "seen" if voting else "universal"
    if vote_delta is None and voting and vote_selection == "seen":
        vote_delta = 1e-6
    if abstain_empty is None:
        abstain_empty = voting
    check_positive_int("embedding_scale", embedding_scale)
    if embedding_scale & (embedding_scale - 1):
        raise InvalidParameterError("embedding_scale", "must be a power of two", embedding_scale)
    shift = embedding_scale.bit_length() - 1
    hi = embedding_scale * embedding_scale
    sens = (hi >> shift) + 1
    n = check_positive_int("queries_per_account", queries_per_account)
    sigma = exact_sigma(check_epsilon("epsilon_acc", epsilon_acc), check_delta("delta_acc", delta_acc), n, sens)
    from .retrieval import noise_table

    tv = noise_table(sigma, 10.0, 64).tv_distance
    tv = math.nextafter(max(tv, 1e-300), 1.0)
    to_units: Callable[[float], int] = lambda c: int(round(c * embedding_scale))  # noqa: E731
    mechanism_fields: dict[str, Any] = (
        {}
        if mechanism == "pure-dp-rag"
        else dict(
            mechanism=mechanism,
            ksa_epsilon_em=ksa_epsilon_em,
            ksa_epsilon_ptr=ksa_epsilon_ptr,
            ksa_delta=ksa_delta,
            ksa_max_keywords=ksa_max_keywords,
            ksa_response_tokens=ksa_response_tokens,
            ksa_replayable=generator_replayable,
        )
        if mechanism == "dp-ksa"
        else dict(
            mechanism=mechanism,
            vote_epsilon=vote_epsilon,
            vote_threshold=vote_threshold,
            key_words=key_words,
            normalizer=normalizer,
        )
    )
    gen = GenerationPolicy(
        algorithm=algorithm,
        m=voters,
        epsilon_token=epsilon_token,
        max_private_tokens=private_tokens,
        max_queries_per_doc=max_queries_per_doc,
        docs_per_voter=docs_per_voter,
        max_tokens=max_tokens,
        tau=to_units(tau_cosine) if algorithm == "murag" else None,
        edges=tuple(to_units(e) for e in edges_cosine) if algorithm == "murag-ada" else None,
        epsilon_thr=epsilon_thr if algorithm == "murag-ada" else None,
        public_completion=public_completion,
        em_prior=em_prior,
        vote_selection=vote_selection,
        vote_delta=vote_delta,
        abstain_empty=abstain_empty,
        **mechanism_fields,
    )
    policy = cls(
        window=window,
        retrieval=RetrievalPolicy(
            enabled_tenants=tuple(sorted(citations_for)),
            public_id_tenants=tuple(sorted(public_ids_for)),
            K=citations,
            n=n,
            epsilon_acc=epsilon_acc,
            delta_acc=delta_acc,
            sigma=sigma,
            sensitivity=sens,
            score_clip=(0, hi),
            score_shift=shift,
            sampler=SamplerSpec(10.0, 64, tv),
        ),
        coalition=CoalitionPolicy(k_max=check_positive_int("k_max", k_max), delta_policy=2 * k_max * delta_acc),
        generation=gen,
    ).validate()
    if documents is not None:
        from .certify import policy_strength

        strength, why = policy_strength(policy, (), check_positive_int("documents", documents))
        if strength != "strong":
            raise InvalidParameterError("policy", f"would certify a {strength} guarantee — {why[0]}")
    return policy
