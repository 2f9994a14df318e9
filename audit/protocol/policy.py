"""The audit policy (spec/protocol.md §4): committed by C_policy, opened to the auditor.

``Policy.from_dict`` / ``to_dict`` map between the dataclasses and the canonical object (reals as
``float.hex`` strings); ``validate()`` enforces the well-formedness rules (a typed error naming the field and
the rule); ``certified_epsilons(policy)`` computes the ε each channel's verdict certifies — from the committed
parameters only, never a leading-order approximation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from dprag.accounting.errors import check_delta, check_epsilon, check_positive_int
from dprag.accounting.events import ComposedEvent, DiscreteLaplaceEvent
from dprag.errors import InvalidParameterError

from .encoding import IDENTIFIER_RULE, EncodingError, encode, is_identifier, parse_real, real
from .policy_parts import RELATION, CoalitionPolicy, GenerationPolicy, RetrievalPolicy, SamplerSpec  # noqa: F401
from .recommended import RECOMMENDED_V2  # noqa: F401  (RECOMMENDED_V2 re-exported)
from .recommended import recommended as _recommended

if TYPE_CHECKING:
    from dprag.accounting.events import PrivacyEvent
    from dprag.accounting.rag.answer_vote import AnswerVoteParams, Normalizer
    from dprag.accounting.rag.ksa import DpKsaPureParameters
    from dprag.accounting.rag.single_query import PureDpRagParams

_VOTE_KEYS = {"epsilon", "threshold", "key_words", "normalizer"}
#: optional keys of generation.answer_vote, each present only when not its default (canonical bytes unchanged)
_VOTE_OPTIONAL = {"selection", "delta", "abstain_empty"}
VOTE_SELECTIONS = ("universal", "seen")


def _answer_vote_fields(v: Any) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict) or not _VOTE_KEYS <= set(v) or not set(v) <= _VOTE_KEYS | _VOTE_OPTIONAL:
        extra = sorted(set(v) - _VOTE_KEYS - _VOTE_OPTIONAL) if isinstance(v, dict) else []
        raise EncodingError(
            "generation.answer_vote: must be {epsilon, threshold, key_words, normalizer} with "
            "optional {selection, delta, abstain_empty}, or null" + (f" (unknown keys {extra})" if extra else "")
        )
    out: dict[str, Any] = {
        "vote_epsilon": parse_real(v["epsilon"], "generation.answer_vote.epsilon"),
        "vote_threshold": parse_real(v["threshold"], "generation.answer_vote.threshold"),
        "key_words": v["key_words"],
        "normalizer": v["normalizer"],
    }
    if "selection" in v:
        if v["selection"] != "seen":  # "universal" is the default and must be absent (canonical)
            raise InvalidParameterError(
                "generation.answer_vote.selection",
                "must be 'seen' when present (absent means 'universal')",
                v["selection"],
            )
        out["vote_selection"] = "seen"
    if "delta" in v:
        if out.get("vote_selection") != "seen":
            raise InvalidParameterError("generation.answer_vote.delta", "is only for selection 'seen'", v["delta"])
        out["vote_delta"] = parse_real(v["delta"], "generation.answer_vote.delta")
    elif out.get("vote_selection") == "seen":
        raise InvalidParameterError("generation.answer_vote.delta", "selection 'seen' needs its per-query delta")
    if "abstain_empty" in v:
        if v["abstain_empty"] is not True:  # false is the default and must be absent; 1 is not a JSON bool
            raise InvalidParameterError(
                "generation.answer_vote.abstain_empty",
                "must be the JSON value true when present (absent means false)",
                v["abstain_empty"],
            )
        out["abstain_empty"] = True
    return out


def _check_answer_vote_selection(g: GenerationPolicy) -> None:
    """The answer-vote selection fields: strict types; δ in (0, 1) with "seen" only, within the seen selection's
    own rule for this ε (``seen_key_selection.check_parameters``); only with mechanism "answer-vote"."""
    if g.mechanism != "answer-vote":
        if g.vote_selection != "universal" or g.vote_delta is not None or g.abstain_empty is not False:
            raise InvalidParameterError(
                "generation.answer_vote", "selection, delta and abstain_empty need mechanism 'answer-vote'"
            )
        return
    if not isinstance(g.abstain_empty, bool):
        raise InvalidParameterError("generation.answer_vote.abstain_empty", "must be true or false", g.abstain_empty)
    if not isinstance(g.vote_selection, str) or g.vote_selection not in VOTE_SELECTIONS:
        raise InvalidParameterError(
            "generation.answer_vote.selection", "must be 'universal' or 'seen'", g.vote_selection
        )
    if g.vote_selection == "universal":
        if g.vote_delta is not None:
            raise InvalidParameterError(
                "generation.answer_vote.delta", "must be absent for selection 'universal' (pure ε)", g.vote_delta
            )
        return
    d = g.vote_delta
    if d is None:
        raise InvalidParameterError("generation.answer_vote.delta", "selection 'seen' needs its per-query delta")
    if isinstance(d, bool) or not isinstance(d, (int, float)):
        raise InvalidParameterError("generation.answer_vote.delta", "must be a real number in (0, 1)", d)
    from dprag.accounting.mechanisms.seen_key_selection import check_parameters

    try:
        check_parameters(cast(float, g.vote_epsilon), d)  # refuses a non-number itself
    except InvalidParameterError as e:
        raise InvalidParameterError(
            f"generation.answer_vote.{'epsilon' if e.field == 'epsilon' else 'delta'}", e.rule, e.value
        ) from None


_KSA_KEYS = {"epsilon_em", "epsilon_ptr", "delta", "max_keywords", "response_tokens", "replayable"}


def _dp_ksa_fields(v: Any) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict) or set(v) != _KSA_KEYS:
        raise EncodingError("generation.dp_ksa: must be {" + ", ".join(sorted(_KSA_KEYS)) + "}")
    return {
        "ksa_epsilon_em": parse_real(v["epsilon_em"], "generation.dp_ksa.epsilon_em"),
        "ksa_epsilon_ptr": parse_real(v["epsilon_ptr"], "generation.dp_ksa.epsilon_ptr"),
        "ksa_delta": parse_real(v["delta"], "generation.dp_ksa.delta"),
        "ksa_max_keywords": v["max_keywords"],
        "ksa_response_tokens": v["response_tokens"],
        "ksa_replayable": v["replayable"],
    }


EM_PRIORS = ("uniform", "non-rag")


def _check_extensions(g: GenerationPolicy) -> None:
    """The 000 Alg. 5 extension fields: strict types, and only with mechanism "pure-dp-rag"."""
    if not isinstance(g.public_completion, bool):
        raise InvalidParameterError("generation.public_completion", "must be true or false", g.public_completion)
    if not isinstance(g.em_prior, str) or g.em_prior not in EM_PRIORS:
        raise InvalidParameterError("generation.em_prior", "must be 'uniform' or 'non-rag'", g.em_prior)
    if g.mechanism != "pure-dp-rag":
        if g.public_completion:
            raise InvalidParameterError(
                "generation.public_completion", "needs mechanism 'pure-dp-rag'", g.public_completion
            )
        if g.em_prior != "uniform":
            raise InvalidParameterError("generation.em_prior", "needs mechanism 'pure-dp-rag'", g.em_prior)


def _extension_fields(g: dict[str, Any]) -> dict[str, Any]:
    """The optional extension keys of a canonical generation object (absent = default; present = non-default,
    checked strictly: a JSON bool, one of the two prior names)."""
    out: dict[str, Any] = {}
    if "public_completion" in g:
        v = g["public_completion"]
        if v is not True:  # false is the default and must be absent (canonical); 1 is not a JSON bool
            raise InvalidParameterError(
                "generation.public_completion", "must be the JSON value true when present (absent means false)", v
            )
        out["public_completion"] = True
    if "em_prior" in g:
        v = g["em_prior"]
        if not isinstance(v, str) or v not in EM_PRIORS or v == "uniform":
            raise InvalidParameterError(
                "generation.em_prior", "must be 'non-rag' when present (absent means 'uniform')", v
            )
        out["em_prior"] = v
    return out


def _check_real_positive(field: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InvalidParameterError(field, "must be a finite real number > 0 (nats)", v)
    return check_epsilon(field, v)


def _check_count(field: str, v: object, hi: int = 4096) -> int:
    check_positive_int(field, cast(int, v))  # refuses a non-integer itself
    if not isinstance(v, int) or v > hi:
        raise InvalidParameterError(field, f"must be an integer in [1, {hi}]", v)
    return v


def normalizer(name: str) -> Normalizer | None:
    """The public normaliser a policy names: "basic" (accounting.rag.answer_vote.basic_key) or a
    ``dprag.normalizers`` entry point (the demo's "answer-keys-v1" is rag_adapters.answer_keys.answer_key)."""
    if name == "basic":
        return None
    from importlib.metadata import entry_points

    for ep in entry_points(group="dprag.normalizers"):
        if ep.name == name:
            return cast("Normalizer", ep.load())
    raise InvalidParameterError("generation.normalizer", "names no installed normaliser (dprag.normalizers)", name)


@dataclass(frozen=True)
class Policy:
    window: str
    retrieval: RetrievalPolicy
    coalition: CoalitionPolicy
    generation: GenerationPolicy
    relation: str = RELATION
    version: int = 2
    #: seconds: answers and checkpoints leave on the public grid of this period (spec/protocol.md §5.6); None:
    #: each answer leaves when ready (how long its work took is then observable)
    release_period: float | None = None

    # -- a sound starting point --------------------------------------------------------------------------
    #: ``Policy.recommended(window, ...)``: a well-formed policy with the best-known defaults
    #: (audit/protocol/recommended.py)
    recommended = classmethod(_recommended)

    # -- validation ----------------------------------------------------------------------------------------
    def validate(self) -> Policy:
        r, c, g = self.retrieval, self.coalition, self.generation
        if self.version != 2:
            raise InvalidParameterError("version", "must be 2 (protocol version 2)", self.version)
        if self.relation != RELATION:
            raise InvalidParameterError("relation", f"must be {RELATION!r}", self.relation)
        if not is_identifier(self.window):
            raise InvalidParameterError("window", f"must be {IDENTIFIER_RULE}", self.window)
        p = self.release_period
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.01 <= p <= 3600):
            raise InvalidParameterError("release_period", "must be None or a number of seconds in [0.01, 3600]", p)
        check_positive_int("retrieval.K", r.K)
        check_positive_int("retrieval.n", r.n)
        check_epsilon("retrieval.epsilon_acc", r.epsilon_acc)
        check_delta("retrieval.delta_acc", r.delta_acc)
        check_epsilon("retrieval.sigma", r.sigma)
        check_positive_int("retrieval.sensitivity", r.sensitivity)
        lo, hi = r.score_clip
        if not (isinstance(lo, int) and isinstance(hi, int) and lo < hi):
            raise InvalidParameterError("retrieval.score_clip", "must be integers lo < hi", r.score_clip)
        check_positive_int("retrieval.score_shift", r.score_shift, minimum=0)
        if r.sensitivity < ((hi - lo) >> r.score_shift) + 1:
            raise InvalidParameterError(
                "retrieval.sensitivity",
                "must be >= ((hi - lo) >> score_shift) + 1 (a clipped score's range)",
                r.sensitivity,
            )
        check_delta("retrieval.sampler.tv", r.sampler.tv, allow_zero=True)
        if not set(r.zk_tenants) <= set(r.enabled_tenants):
            raise InvalidParameterError("retrieval.zk_tenants", "must be tenants with citations on", r.zk_tenants)
        if not set(r.public_id_tenants) <= set(r.enabled_tenants) or len(set(r.public_id_tenants)) != len(
            r.public_id_tenants
        ):
            raise InvalidParameterError(
                "retrieval.public_id_tenants", "must be distinct tenants with citations on", r.public_id_tenants
            )
        if r.zk_tenants and (lo % (1 << r.score_shift) or hi % (1 << r.score_shift)):
            raise InvalidParameterError(
                "retrieval.score_clip",
                "must be multiples of 2^score_shift for zk tenants (the circuit shifts before it clips)",
                r.score_clip,
            )
        check_positive_int("coalition.k_max", c.k_max)
        check_delta("coalition.delta_policy", c.delta_policy)
        if not c.delta_policy > c.k_max * r.delta_acc:
            raise InvalidParameterError(
                "coalition.delta_policy", "must exceed k_max * delta_acc (002 §5.6)", c.delta_policy
            )
        if g.algorithm not in ("murag", "murag-ada"):
            raise InvalidParameterError("generation.algorithm", "must be 'murag' or 'murag-ada'", g.algorithm)
        if g.mechanism not in ("pure-dp-rag", "answer-vote", "dp-ksa") or g.filter_mode != "pure":
            raise InvalidParameterError(
                "generation.mechanism",
                "must be 'pure-dp-rag', 'answer-vote' or 'dp-ksa', with a pure filter",
                g.mechanism,
            )
        check_positive_int("generation.m", g.m)
        check_epsilon("generation.epsilon_token", g.epsilon_token)
        check_positive_int("generation.max_private_tokens", g.max_private_tokens)
        if g.mechanism == "answer-vote":
            # the check_* helpers refuse None (or any non-number) themselves; the casts are for the type checker
            check_epsilon("generation.vote_epsilon", cast(float, g.vote_epsilon))
            check_positive_int("generation.key_words", cast(int, g.key_words))
            if not isinstance(g.normalizer, str) or not g.normalizer:
                raise InvalidParameterError("generation.normalizer", "must name a public normaliser", g.normalizer)
            _check_answer_vote_selection(g)
            self.rag_params()  # the mechanism's own rules (threshold range, ε·m/2 bound)
        elif any(v is not None for v in (g.vote_epsilon, g.vote_threshold, g.key_words, g.normalizer)):
            raise InvalidParameterError("generation.vote_epsilon", "answer-vote fields need mechanism 'answer-vote'")
        else:
            _check_answer_vote_selection(g)
        ksa = (
            g.ksa_epsilon_em,
            g.ksa_epsilon_ptr,
            g.ksa_delta,
            g.ksa_max_keywords,
            g.ksa_response_tokens,
            g.ksa_replayable,
        )
        if g.mechanism == "dp-ksa":
            _check_real_positive("generation.dp_ksa.epsilon_em", g.ksa_epsilon_em)
            _check_real_positive("generation.dp_ksa.epsilon_ptr", g.ksa_epsilon_ptr)
            if not cast(float, g.ksa_epsilon_ptr) >= 2.0**-47:  # a real number > 0 (just checked)
                raise InvalidParameterError(
                    "generation.dp_ksa.epsilon_ptr", "must be at least 2^-47 nats", g.ksa_epsilon_ptr
                )
            if isinstance(g.ksa_delta, bool) or not isinstance(g.ksa_delta, (int, float)):
                raise InvalidParameterError("generation.dp_ksa.delta", "must be a real number in (0, 1)", g.ksa_delta)
            check_delta("generation.dp_ksa.delta", g.ksa_delta)
            _check_count("generation.dp_ksa.max_keywords", g.ksa_max_keywords)
            _check_count("generation.dp_ksa.response_tokens", g.ksa_response_tokens)
            if not isinstance(g.ksa_replayable, bool):
                raise InvalidParameterError("generation.dp_ksa.replayable", "must be true or false", g.ksa_replayable)
        elif any(v is not None for v in ksa):
            raise InvalidParameterError("generation.dp_ksa", "DP-KSA fields need mechanism 'dp-ksa'")
        _check_extensions(g)
        check_positive_int("generation.max_queries_per_doc", g.max_queries_per_doc)
        check_positive_int("generation.docs_per_voter", g.docs_per_voter)
        check_positive_int("generation.max_tokens", g.max_tokens)
        if g.algorithm == "murag" and not isinstance(g.tau, int):
            raise InvalidParameterError("generation.tau", "MuRAG needs an integer threshold tau")
        if g.algorithm == "murag-ada":
            if not g.edges or len(g.edges) < 2 or any(a <= b for a, b in zip(g.edges, g.edges[1:], strict=False)):
                raise InvalidParameterError("generation.edges", "must be >= 2 strictly decreasing integers")
            check_epsilon("generation.epsilon_thr", cast(float, g.epsilon_thr))  # refuses None itself
        return self

    # -- canonical object ------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        r, c, g = self.retrieval, self.coalition, self.generation
        return {
            "version": self.version,
            "window": self.window,
            "relation": self.relation,
            # present only when set, so every policy without it keeps its canonical bytes (and C_policy)
            **({} if self.release_period is None else {"release_period": real(self.release_period)}),
            "retrieval": {
                "enabled_tenants": sorted(r.enabled_tenants),
                "K": r.K,
                "n": r.n,
                "epsilon_acc": real(r.epsilon_acc),
                "delta_acc": real(r.delta_acc),
                "sigma": real(r.sigma),
                "sensitivity": r.sensitivity,
                "score_clip": [r.score_clip[0], r.score_clip[1]],
                "score_shift": r.score_shift,
                "sampler": r.sampler.to_dict(),
                "zk_tenants": sorted(r.zk_tenants),
                **({"public_id_tenants": sorted(r.public_id_tenants)} if r.public_id_tenants else {}),
            },
            "coalition": {"k_max": c.k_max, "delta_policy": real(c.delta_policy)},
            "generation": {
                "mechanism": g.mechanism,
                "algorithm": g.algorithm,
                "m": g.m,
                "epsilon_token": real(g.epsilon_token),
                "max_private_tokens": g.max_private_tokens,
                "theta_svt": None if g.theta_svt is None else real(g.theta_svt),
                "redraw_threshold": g.redraw_threshold,
                "tau": g.tau,
                "edges": None if g.edges is None else list(g.edges),
                "epsilon_thr": None if g.epsilon_thr is None else real(g.epsilon_thr),
                "docs_per_voter": g.docs_per_voter,
                "max_queries_per_doc": g.max_queries_per_doc,
                "max_tokens": g.max_tokens,
                "filter_mode": g.filter_mode,
                "answer_vote": None
                if g.mechanism != "answer-vote"
                else {
                    # set for mechanism "answer-vote" (validate)
                    "epsilon": real(cast(float, g.vote_epsilon)),
                    "threshold": real(cast(float, g.vote_threshold)),
                    "key_words": g.key_words,
                    "normalizer": g.normalizer,
                    # present only when not the default (universal, no δ, false): canonical bytes unchanged
                    **({} if g.vote_selection == "universal" else {"selection": g.vote_selection}),
                    **({} if g.vote_delta is None else {"delta": real(g.vote_delta)}),
                    **({"abstain_empty": True} if g.abstain_empty is True else {}),
                },
                # present only for dp-ksa, so every other policy keeps its canonical bytes (and C_policy)
                **(
                    {}
                    if g.mechanism != "dp-ksa"
                    else {
                        "dp_ksa": {  # set for mechanism "dp-ksa" (validate)
                            "epsilon_em": real(cast(float, g.ksa_epsilon_em)),
                            "epsilon_ptr": real(cast(float, g.ksa_epsilon_ptr)),
                            "delta": real(cast(float, g.ksa_delta)),
                            "max_keywords": g.ksa_max_keywords,
                            "response_tokens": g.ksa_response_tokens,
                            "replayable": g.ksa_replayable,
                        }
                    }
                ),
                # 000 Alg. 5's free extensions: present only when not the default (canonical bytes unchanged)
                **({"public_completion": True} if g.public_completion is True else {}),
                **({} if g.em_prior == "uniform" else {"em_prior": g.em_prior}),
            },
        }

    def to_bytes(self) -> bytes:
        """canonical(policy): what C_policy commits to (with a salt, spec/protocol.md §3)."""
        return encode(self.to_dict())

    def sampler_tv(self) -> float:
        """The TV distance of the committed table sampler, recomputed from its parameters (never the claim)."""
        from .retrieval import noise_table

        r = self.retrieval
        return float(noise_table(r.sigma, r.sampler.tail, r.sampler.precision_bits).tv_distance)

    def check_claims(self, *, epsilon_acc: bool = True) -> Policy:
        """Claims that can be recomputed are recomputed: the declared sampler TV must bound the real one, and (unless
        ``epsilon_acc=False``: the verifier checks it beside its other checks, from ``certified_epsilons``) the
        per-account ``epsilon_acc`` (``epsilon_acc_violation``)."""
        r = self.retrieval
        real_tv = self.sampler_tv()
        if not real_tv <= r.sampler.tv:
            raise InvalidParameterError(
                "retrieval.sampler.tv",
                f"declares {r.sampler.tv:.3g} but the committed table's TV distance is {real_tv:.3g}",
                r.sampler.tv,
            )
        if epsilon_acc:
            from dprag.accounting import gdp

            acc = gdp.discrete_gaussian_epsilon(r.sigma, r.sensitivity, r.n, r.delta_acc, sampler_tv=r.sampler.tv)
            why = self.epsilon_acc_violation(acc.epsilon)
            if why:
                raise InvalidParameterError("retrieval.epsilon_acc", why, r.epsilon_acc)
        return self

    def epsilon_acc_violation(self, certified: float) -> str | None:
        """The per-account (epsilon_acc, delta_acc) that 002's accounting (Eq. 5.2) starts from must be what σ
        certifies for one account's n releases of the discrete Gaussian at delta_acc (``certified``), up to a relative
        10^-4 for σ's calibration (``exact_sigma``) and the sampler's TV; else the verdict's ``paper_eq_5_2_leading``
        would come from an ε the noise does not give. No finite certificate (e.g. ε_acc = 50): nothing to compare
        (the verdict then FAILs "no finite ε" anyway). Returns the rule broken, or None."""
        r = self.retrieval
        if math.isfinite(certified) and not certified <= r.epsilon_acc * (1 + 1e-4):
            return (
                f"declares {r.epsilon_acc:.6g} but n = {r.n} releases at sigma = {r.sigma:.6g}, sensitivity "
                f"{r.sensitivity} certify only epsilon {certified:.6g} at delta_acc = {r.delta_acc:.3g}"
            )
        return None

    @classmethod
    def from_dict(cls, d: Any) -> Policy:
        try:
            r, c, g = d["retrieval"], d["coalition"], d["generation"]
            s = r["sampler"]
            if s.get("kind") != "table":
                raise EncodingError("retrieval.sampler.kind: must be 'table'")
            opt: Callable[[Any, str], float | None] = lambda v, f: None if v is None else parse_real(v, f)  # noqa: E731
            pol = cls(
                version=d["version"],
                window=d["window"],
                relation=d["relation"],
                release_period=opt(d.get("release_period"), "release_period"),
                retrieval=RetrievalPolicy(
                    enabled_tenants=tuple(r["enabled_tenants"]),
                    K=r["K"],
                    n=r["n"],
                    epsilon_acc=parse_real(r["epsilon_acc"], "retrieval.epsilon_acc"),
                    delta_acc=parse_real(r["delta_acc"], "retrieval.delta_acc"),
                    sigma=parse_real(r["sigma"], "retrieval.sigma"),
                    sensitivity=r["sensitivity"],
                    score_clip=(r["score_clip"][0], r["score_clip"][1]),
                    score_shift=r["score_shift"],
                    sampler=SamplerSpec(
                        parse_real(s["tail"], "retrieval.sampler.tail"),
                        s["precision_bits"],
                        parse_real(s["tv"], "retrieval.sampler.tv"),
                    ),
                    zk_tenants=tuple(r["zk_tenants"]),
                    public_id_tenants=tuple(r.get("public_id_tenants", ())),
                ),
                coalition=CoalitionPolicy(
                    k_max=c["k_max"], delta_policy=parse_real(c["delta_policy"], "coalition.delta_policy")
                ),
                generation=GenerationPolicy(
                    mechanism=g["mechanism"],
                    algorithm=g["algorithm"],
                    m=g["m"],
                    epsilon_token=parse_real(g["epsilon_token"], "generation.epsilon_token"),
                    max_private_tokens=g["max_private_tokens"],
                    theta_svt=opt(g["theta_svt"], "generation.theta_svt"),
                    redraw_threshold=g["redraw_threshold"],
                    tau=g["tau"],
                    edges=None if g["edges"] is None else tuple(g["edges"]),
                    epsilon_thr=opt(g["epsilon_thr"], "generation.epsilon_thr"),
                    docs_per_voter=g["docs_per_voter"],
                    max_queries_per_doc=g["max_queries_per_doc"],
                    max_tokens=g["max_tokens"],
                    filter_mode=g["filter_mode"],
                    **_answer_vote_fields(g["answer_vote"]),
                    **_dp_ksa_fields(g.get("dp_ksa")),
                    **_extension_fields(g),
                ),
            )
        except (KeyError, TypeError, IndexError, AttributeError) as e:
            raise EncodingError(f"policy: missing or malformed field ({e})") from None
        if pol.to_dict() != d:
            raise EncodingError("policy: unknown fields or non-canonical values")
        return pol

    # -- what the verdict certifies --------------------------------------------------------------------------
    def rag_params(self) -> PureDpRagParams | AnswerVoteParams | DpKsaPureParameters:
        """The committed single-query mechanism (``accounting.rag.mechanism.SingleQueryMechanism``). The fields of
        ``generation`` a mechanism reads are set for that mechanism (``validate``; its constructor checks them)."""
        from dprag.accounting.rag.single_query import PureDpRagParams

        g = self.generation
        if g.mechanism == "dp-ksa":
            from dprag.accounting.rag.ksa import DpKsaPureParameters

            return DpKsaPureParameters(
                g.m,
                cast(float, g.ksa_epsilon_em),
                cast(float, g.ksa_epsilon_ptr),
                cast(float, g.ksa_delta),
                max_keywords=cast(int, g.ksa_max_keywords),
                response_tokens=cast(int, g.ksa_response_tokens),
                max_tokens=g.max_tokens,
            )
        if g.mechanism == "answer-vote":
            from dprag.accounting.rag.answer_vote import AnswerVoteParams

            return AnswerVoteParams(
                g.m,
                cast(float, g.vote_epsilon),
                threshold=cast(float, g.vote_threshold),
                max_tokens=g.max_tokens,
                max_key_words=cast(int, g.key_words),
                normalizer=normalizer(cast(str, g.normalizer)),
                abstain_empty=g.abstain_empty,
                selection=g.vote_selection,
                delta=0.0 if g.vote_delta is None else g.vote_delta,
            )
        return PureDpRagParams(
            g.m,
            g.epsilon_token,
            g.max_private_tokens,
            theta=g.theta_svt,
            max_tokens=g.max_tokens,
            redraw_threshold=g.redraw_threshold,
            public_completion=g.public_completion,
            em_prior=g.em_prior,
        )

    def rag_charge(self) -> PrivacyEvent:
        """The event the per-document filter counts for one RAG charge: the mechanism's cost, or its ε part for
        an (ε, δ) cost (answer-vote's seen selection; its δ is added per charge outside the filter:
        ``accounting.rag.mechanism.filter_charge``, spec/provider.md §3.3)."""
        from dprag.accounting.rag.mechanism import filter_charge

        return filter_charge(self.rag_params().cost)[0]

    def per_charge_delta(self) -> float | None:
        """The δ each RAG charge adds to a document's δ (dp-ksa's PTR failure probability, answer-vote seen's δ),
        or None for a pure mechanism."""
        g = self.generation
        if g.mechanism == "dp-ksa":
            return g.ksa_delta
        if g.mechanism == "answer-vote" and g.vote_selection == "seen":
            return g.vote_delta
        return None

    def query_cost(self) -> PrivacyEvent:
        """The event each touched document is charged per query (ε_thr + ε_RAG for MuRAG-Ada), as the pure
        filter counts it (the ε part of an (ε, δ) cost)."""
        cost = self.rag_charge()
        if self.generation.algorithm == "murag-ada":
            # epsilon_thr is set for "murag-ada" (validate)
            cost = ComposedEvent((DiscreteLaplaceEvent(1.0 / cast(float, self.generation.epsilon_thr), 1), cost))
        return cost
