"""The parts of the audit policy (spec/protocol.md §4): the sampler, retrieval, coalition and generation dataclasses
that ``audit.protocol.policy.Policy`` holds (re-exported there; ``Policy.from_dict`` / ``validate`` live with
``Policy``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .encoding import real

RELATION = "replace-one"


@dataclass(frozen=True)
class SamplerSpec:
    """The discrete Gaussian table sampler of the retrieval channel (spec/accounting/noise.md)."""

    tail: float
    precision_bits: int
    tv: float

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "table", "tail": real(self.tail), "precision_bits": self.precision_bits, "tv": real(self.tv)}


@dataclass(frozen=True)
class RetrievalPolicy:
    enabled_tenants: tuple[str, ...]
    K: int
    n: int
    epsilon_acc: float
    delta_acc: float
    sigma: float
    sensitivity: int
    score_clip: tuple[int, int]
    score_shift: int
    sampler: SamplerSpec
    #: tenants whose citations are also attested by Groth16 proofs (audit/protocol/zk_attest.py; small corpora only)
    zk_tenants: tuple[str, ...] = ()
    #: tenants whose own document ids may be released with their citations (an id such as "victor-hiv.txt" is part of
    #: the record under replace-one, so it is public only where declared); serialised only when non-empty
    public_id_tenants: tuple[str, ...] = ()


@dataclass(frozen=True)
class CoalitionPolicy:
    """The coalition bound the retrieval ε assumes. The estimator's θ and window are the auditor's (§6)."""

    k_max: int
    delta_policy: float


@dataclass(frozen=True)
class GenerationPolicy:
    algorithm: str  # "murag" | "murag-ada"
    m: int
    epsilon_token: float
    max_private_tokens: int
    max_queries_per_doc: int
    docs_per_voter: int = 1
    theta_svt: float | None = None
    redraw_threshold: bool = False
    tau: int | None = None
    edges: tuple[int, ...] | None = None
    epsilon_thr: float | None = None
    max_tokens: int = 32
    mechanism: str = "pure-dp-rag"
    filter_mode: str = "pure"
    #: answer-level voting (spec/accounting/rag.md §5), when mechanism == "answer-vote": the selection's ε (the whole
    #: per-query cost), its threshold t in nats, the voters' answer length, the key's words, and the public normaliser's
    #: name ("basic", or one registered under the dprag.normalizers entry points)
    vote_epsilon: float | None = None
    vote_threshold: float | None = None
    key_words: int | None = None
    normalizer: str | None = None
    #: answer-vote's DP selection over the keys (``AnswerVoteParams.selection``): "universal" (pure ε, the
    #: threshold t used) or "seen" (the exponential mechanism over the keys the voters wrote and ⊥ at
    #: T = 1 + 2·ln(1/δ)/ε votes: (ε, δ)-DP per query, δ = ``vote_delta`` added per RAG charge of a document,
    #: the rule of dp-ksa's δ; t unused); ``abstain_empty``: voters whose documents are all the empty padding
    #: abstain. Serialised only when not the default, so every earlier policy keeps its canonical bytes.
    vote_selection: str = "universal"
    vote_delta: float | None = None
    abstain_empty: bool = False
    #: DP-KSA over a text-only generator (004; accounting/rag/ksa.py), when mechanism == "dp-ksa": FindBestK's ε and
    #: the PTR test's ε (nats), the test's failure probability δ (per query and charged document), FindBestK's
    #: largest number of keywords, the voters' response length (words), and whether the provider's text
    #: generator can be replayed by the auditor (a hosted LLM cannot: the answer text is then on trust)
    ksa_epsilon_em: float | None = None
    ksa_epsilon_ptr: float | None = None
    ksa_delta: float | None = None
    ksa_max_keywords: int | None = None
    ksa_response_tokens: int | None = None
    ksa_replayable: bool | None = None
    #: 000 Alg. 5's two free-in-ε extensions (accounting.rag.single_query.PureDpRagParams; spec/accounting/rag.md
    #: §2-3), used only with mechanism "pure-dp-rag": once the c private tokens are spent, go on with the Non-RAG
    #: lane's greedy token (public completion); the exponential mechanism's base measure, "uniform" (000) or
    #: "non-rag" (the no-document model's next-token distribution). Serialised only when not the default, so
    #: every earlier policy keeps its canonical bytes (and C_policy). Neither changes the charges or the ε.
    public_completion: bool = False
    em_prior: str = "uniform"

    @property
    def replayable(self) -> bool:
        """Whether an auditor holding the corpus and the generator can replay answers (spec/protocol.md §8.9)."""
        return self.mechanism != "dp-ksa" or bool(self.ksa_replayable)
