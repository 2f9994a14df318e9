"""The verdict of spec/protocol.md §8 (``--json``: schema ``dprag.verdict/3``): ``Verdict`` and its JSON, the
attestation and trust statements in words, and ``conclude``, which turns the checks' reasons into PASS with the
certified ε and δ (§4, computed beside the checks: ``start_certify``) or FAIL without them."""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from ..protocol import commitments as cm
from ..protocol.certify import DEFAULT_MAX_EPSILON, certified_epsilons, guarantee_strength
from ..protocol.charges import ChargeRule
from ..protocol.encoding import printable, printable_tree
from ..protocol.policy import Policy
from . import pool
from .inputs import AuditorInputs
from .run import Run

SCHEMA = "dprag.verdict/3"
PROTOCOL_VERSION = cm.PROTOCOL_VERSION


ATTESTATION_RETRIEVAL = (
    "replay: the auditor re-executed noise-then-select for every checked query from the committed index, the "
    "committed seed and the account-signed request; no zero-knowledge proof attached. On trust: that the committed "
    "embeddings are the embedder's outputs on the documents (checkable with the corpus), and Q for queries whose "
    "account did not commit to it."
)
ATTESTATION_GENERATION = (
    "replay of charges: every charge was recomputed from the exact scores, the replayed per-document filter and the "
    "committed seed; the answer's randomness is drawn from the committed seed, so it cannot be re-sampled, but the "
    "answer text is bound only by the receipts the accounts hand over (an auditor holding the corpus and the model "
    "can replay it)."
)
TRUST = (
    "k_max: the retrieval ε assumes at most k_max colluding accounts; sybil accounts the provider registers itself "
    "are indistinguishable from real ones, and the coalition estimator only flags coalitions whose probes are "
    "similar within the auditor's θ and window.",
    "answers released off the ledger to accounts that keep their receipts back are invisible to any verifier.",
    "a fork shown to auditors who never compare checkpoints (pin --trusted-checkpoint, or use witnesses).",
    "a fresh log started by the same key over the same corpus (spend and counters from zero) unless the auditor "
    "pins its origin (--origin); a document re-added under another id with its text changed (an exact copy FAILs "
    "commitments: one text, one budget).",
)


@dataclass
class Verdict:
    verdict: str
    epsilon: float | None
    delta: float | None
    k_max: int | None
    channels: dict[str, Any]
    attestation: dict[str, Any]
    reasons: list[str]
    checked: dict[str, Any]
    mode: str
    guarantee: str | None = None
    rejected_evidence: list[str] = field(default_factory=list)
    #: why an INCOMPLETE verdict is not a PASS: evidence handed in that this bundle cannot check (empty otherwise)
    incomplete: list[str] = field(default_factory=list)
    provider_key: str | None = None
    key_pinned: bool = False
    trusted_checkpoint: int | None = None
    trust: tuple[str, ...] = TRUST
    timings: dict[str, float] = field(default_factory=dict)
    #: CPU seconds per check (this process and its workers): for benchmarks on a shared machine, not in the JSON
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    #: the history audited: {"window", "size", "root"} (None where leaf 0 or the ledger is unusable)
    history: dict[str, Any] | None = None
    #: the auditor's ``--max-epsilon`` and the most documents of any tenant at the audited size: what the PASS's
    #: strength is judged by (``strength``)
    max_epsilon: float = DEFAULT_MAX_EPSILON
    max_documents: int | None = None
    #: the per-document spend the generation check replayed (``Run.final_spend``, carried spend included), for the
    #: auditor's HTML page: {tenant: {"limit": the budget in filter units, "spent": [units per document, index
    #: order]}}; {} where the check did not finish. Not in the JSON, nor public: it is a function of the charges
    spend: dict[str, Any] = field(default_factory=dict)
    #: with ``--state`` (spec/protocol.md §8.14): the SHA-256 of the state this run wrote (``--state-hash`` for the
    #: next run); not in the JSON (the auditor's own file)
    state_hash: str | None = None

    def __post_init__(self) -> None:
        """Every string a verdict carries may come from the bundle or the receipts (a tenant, a file name, a window):
        each is made printable (``encoding.printable``) before any output, terminal, JSON, report or HTML, shows it."""
        for name in (
            "channels",
            "attestation",
            "reasons",
            "incomplete",
            "guarantee",
            "rejected_evidence",
            "trust",
            "history",
        ):
            setattr(self, name, printable_tree(getattr(self, name)))
        self.spend = {printable(str(t)): v for t, v in self.spend.items()}  # the tenants; the units are numbers

    @property
    def strength(self) -> str | None:
        """A PASS's strength (None otherwise): ``guarantee_strength`` of its ε and δ."""
        if self.verdict != "PASS":
            return None
        return guarantee_strength(self.epsilon, self.delta, self.max_documents, self.max_epsilon)[0]

    def headline(self) -> str:
        """The verdict's first line: PASS ε δ with what the auditor pinned and how much account evidence there is,
        or FAIL with its root cause (the first reason in the spec's check order)."""
        if self.verdict == "INCOMPLETE":
            more = len(self.incomplete) - 1
            tail = f" (+{more} further item{'s' if more != 1 else ''} below)" if more else ""
            return f"INCOMPLETE — {self.incomplete[0] if self.incomplete else 'nothing recorded'}{tail}"
        if self.verdict != "PASS":
            first = self.reasons[0] if self.reasons else "no reason recorded"
            more = len(self.reasons) - 1
            return f"FAIL — {first}" + (f" (+{more} further reason{'s' if more != 1 else ''} below)" if more else "")
        c = self.checked
        parts = ["key pinned" if self.key_pinned else "key NOT pinned"]
        if self.mode == "sampled":  # a sampled audit says so first, with what its sample detects
            parts.insert(0, f"SAMPLED ({self.guarantee})" if self.guarantee else "SAMPLED")
        if self.trusted_checkpoint is not None:
            parts.append(f"checkpoint {self.trusted_checkpoint} pinned")
        handed = c.get("receipts_handed_in")
        if handed is None:
            parts.append("no receipts given")
        else:
            parts.append(f"{c.get('receipts_accepted', 0)}/{handed} receipts")
            if c.get("refusals_handed_in"):
                parts.append(f"{c.get('refusals', 0)}/{c['refusals_handed_in']} refusals checked")
        q = c.get("queries", 0)
        parts.append(f"{c.get('queries_with_account_confirmed_q', 0)}/{q} Q confirmed")
        h = self.history or {}
        where = ""
        if h.get("origin"):
            pinned = "origin pinned" if h.get("origin_pinned") else "origin NOT pinned"
            where = (
                f"; log {str(h['origin'])[:22]} ({pinned}), size {h.get('size')}, root {str(h.get('root'))[:16]}, "
                f"epoch {h.get('epoch')}"
            )
        word = "PASS" if self.strength == "strong" else f"PASS ({self.strength})"
        return f"{word} {self.epsilon:.6g} {self.delta:.6g} — " + ", ".join(parts) + where

    def warnings(self) -> list[str]:
        """What the headline's PASS leans on that the auditor did not pin or confirm."""
        out: list[str] = []
        if self.verdict != "PASS":
            return out
        c = self.checked
        out += guarantee_strength(self.epsilon, self.delta, self.max_documents, self.max_epsilon)[1]
        if not self.key_pinned:
            out.append("the provider key was not pinned (--key): a wholesale rewrite under a new key would PASS too")
        if (self.history or {}).get("origin") and not cast("dict[str, Any]", self.history).get("origin_pinned"):
            out.append("the origin was not pinned (--origin): a fresh log under the same key would PASS too")
        if (self.history or {}).get("origin") and self.trusted_checkpoint is None:
            out.append(
                "no checkpoint seen earlier was pinned (--trusted-checkpoint): a truncated or rolled-back log would "
                "PASS too"
            )
        if c.get("receipts_handed_in") is None:
            out.append("no account receipts were given (--receipts): nothing ties this ledger to what accounts saw")
        elif c.get("receipts_accepted", 0) == 0:
            out.append("no receipt was accepted: every receipt handed in was rejected evidence")
        q, conf = c.get("queries", 0), c.get("queries_with_account_confirmed_q", 0)
        if q and conf < q:
            out.append(f"Q on trust for {q - conf} of {q} queries (their accounts did not commit to Q)")
        if "documents_reembedded" in c and not c["documents_reembedded"]:
            out.append(
                "--corpus was given but no document was re-embedded (documents_reembedded: 0): the committed "
                "embedder (auditor/embedder.json's entry_point) is not installed, so the index's fidelity is on trust"
            )
        if c.get("coalition_window_covers_history") is False:
            out.append(f"the coalition estimate covers a window of {c.get('coalition_window')} ledger positions only")
        return out

    def failed_checks(self) -> list[str]:
        """The checks that gave a reason, in the spec's order (a reason reads ``"<check>: <what>"``)."""
        names = {r.split(":", 1)[0] for r in self.reasons}
        return [c for c in CHECK_ORDER if c in names] + sorted(names - set(CHECK_ORDER))

    def to_public_json(self) -> dict[str, Any]:
        """The verdict as it may be published (spec/protocol.md §8, "What a published verdict carries"): only what
        is a function of the committed policy, the public ledger and the auditor's own inputs. Left out: the
        reasons' and rejected evidence's text (they quote documents, charges, tenants), the coalition estimate (a
        function of the private queries that no DP mechanism released) and the per-check seconds (a timing side
        channel of the corpus and the queries); a FAIL names its checks."""
        out = {k: v for k, v in self.to_json().items() if k in PUBLIC_FIELDS}
        out["schema"] = SCHEMA_PUBLIC
        out["checked"] = {k: v for k, v in self.checked.items() if k in PUBLIC_COUNTS}
        out["failed_checks"] = self.failed_checks()
        out["rejected_evidence"] = len(self.rejected_evidence)
        # the zk tenants, their sizes and their proof counts are the hidden policy and the private traffic's
        out["attestation"] = {k: _public_attestation(v) for k, v in self.attestation.items()}
        if self.verdict == "INCOMPLETE":
            out["headline"] = (
                "INCOMPLETE — receipts beyond the audited log without a consistency proof (the sizes are with the "
                "auditor)"
            )
        elif self.verdict != "PASS":
            out["headline"] = "FAIL — " + ", ".join(out["failed_checks"]) + " (the reasons are with the auditor)"
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "protocol_version": PROTOCOL_VERSION,
            "verdict": self.verdict,
            "strength": self.strength,
            "max_epsilon": self.max_epsilon,
            "max_documents": self.max_documents,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "k_max": self.k_max,
            "channels": self.channels,
            "attestation": self.attestation,
            "reasons": self.reasons,
            "incomplete": self.incomplete,
            "checked": self.checked,
            "mode": self.mode,
            "guarantee": self.guarantee,
            "rejected_evidence": self.rejected_evidence,
            "provider_key": self.provider_key,
            "key_pinned": self.key_pinned,
            "trusted_checkpoint": self.trusted_checkpoint,
            "trust": list(self.trust),
            "history": self.history,
            "headline": self.headline(),
            "warnings": self.warnings(),
            "seconds": {k: round(v, 3) for k, v in sorted(self.timings.items())},
        }


TRUST_TEXT_ONLY = (
    "answer text: the policy's generator only returns text and cannot be replayed (a hosted LLM; dp-ksa with "
    "replayable: false). The charges and the ε are verified from the committed parameters, but that each released "
    "answer is the committed mechanism's output — every voter answering from the question and its own documents "
    "only, the keyword release drawn from the committed seed, the final answer generated from the question and "
    "the released keywords only — is on trust, and no answer of this window is replayed (--replay-answers)."
)
ATTESTATION_GENERATION_TEXT_ONLY = (
    "replay of charges: every charge was recomputed from the exact scores, the replayed per-document filter and the "
    "committed seed; the answers come from a text-only generator nobody can re-run, so their text is bound only by "
    "the receipts and is not attested (see trust)."
)


def answer_vote_statement(policy: Policy) -> str:
    """Which answer-vote selection the committed policy runs, and where its δ is (the verdict's wording)."""
    g = policy.generation
    empty = " Voters whose documents are all the empty padding abstain (abstain_empty)." if g.abstain_empty else ""
    if g.vote_selection != "seen":
        return (
            "Mechanism: answer-level voting, universal selection (the exponential mechanism over {⊥} ∪ Σ* with "
            f"threshold t = {g.vote_threshold:g} nats): pure ε_q = {g.vote_epsilon:g} per query, no δ." + empty
        )
    rule = ChargeRule.of(policy)
    return (
        "Mechanism: answer-level voting, seen selection (the exponential mechanism over the keys the voters "
        "wrote and ⊥ at T = 1 + 2·ln(1/δ)/ε votes): (ε_q, δ_q) = "
        f"({g.vote_epsilon:g}, {g.vote_delta:g}) per query; the filter counts ε_q and every RAG charge of a "
        f"document adds δ_q outside it (n_z = {rule.limit // rule.rag_units}: the most RAG charges a document "
        "can take), so the generation δ is n_z·δ_q add/remove and n_z·δ_q·(1 + e^ε_B) replace-one, included in "
        "the composed δ." + empty
    )


def generation_trust(policy: Policy | None) -> tuple[tuple[str, ...], str | None]:
    """(extra trust statements, generation attestation or None) for the committed generation mechanism."""
    if policy is not None and not policy.generation.replayable:
        return (TRUST_TEXT_ONLY,), ATTESTATION_GENERATION_TEXT_ONLY
    if policy is not None and policy.generation.mechanism == "answer-vote":
        return (), ATTESTATION_GENERATION + " " + answer_vote_statement(policy)
    return (), None


def key_fingerprint(vkey: str) -> str:
    """The provider key's fingerprint in the verdict: the first 16 hex of H(vkey)."""
    return hashlib.sha256(vkey.encode()).hexdigest()[:16]


def start_certify(run: Run) -> Callable[[], Any] | None:
    """The certified ε depends on the policy alone: computed in a fresh process beside the checks (a fixed ~3 s
    CPU cost); None where ``conclude`` computes it in line."""
    if run.policy is None:
        return None
    cached = run.prior.certified if run.prior is not None else None
    if cached is not None and cached.get("policies") == policies_digest(run):  # the auditor's own, MACed (§8 item 14)
        cert = cached["cert"]
        return lambda: (cert,)
    if run.n < pool.FORK_MIN_ITEMS:
        return None
    return pool.background(certified_epsilons, run.policy, _earlier_policies(run))


def policies_digest(run: Run) -> str:
    """The digest of every epoch's policy, in order: what the certified ε is a function of."""
    h = hashlib.sha256()
    for p in (*_earlier_policies(run), run.policy):
        if p is not None:
            h.update(hashlib.sha256(p.to_bytes()).digest())
    return h.hexdigest()


def release_statement(policies: list[tuple[int, Policy | None]]) -> str:
    """The timing channel in words: each epoch's committed release period (spec/protocol.md §5.6)."""
    periods = [(k, None if p is None else p.release_period) for k, p in policies]
    if all(p is None for _, p in periods):
        return (
            "no release period committed: each answer leaves when its work ends, so how long serving took — which "
            "may depend on the documents — is observable, and no ε here covers it."
        )
    each = ", ".join(f"epoch {k}: {'off' if p is None else f'{p:g} s'}" for k, p in periods)
    off = [k for k, p in periods if p is None]
    tail = f"; in epoch(s) {', '.join(map(str, off))} answers leave when ready (timing observable)" if off else ""
    return (
        f"release period committed ({each}): answers leave at their release time on the public grid of the period "
        "and checkpoints are signed on it, not when an answer is stored (the verifier reads the committed period; "
        "that the service kept it is on trust, like its clock)" + tail + "."
    )


def _public_attestation(text: Any) -> Any:
    """An attestation line as it may be published: the zk lines without tenants, sizes or counts."""
    if isinstance(text, str) and text.startswith("groth16 + replay:"):
        return (
            "groth16 + replay: the zk tenants' citations are proven by Groth16 proofs of noise-then-select, verified "
            "under the auditor's own key; every other query by replay (tenants, sizes, counts: with the auditor). "
            + ATTESTATION_RETRIEVAL
        )
    if isinstance(text, str) and text.startswith("replay only: the bundle's zk tenant"):
        return "replay only: the zk proofs were not checked (no auditor verification key). " + ATTESTATION_RETRIEVAL
    return text


def _retrieval_attestation(run: Run, vk: Any) -> str:
    """The retrieval channel's attestation: replay, or Groth16 proofs and replay for the zk tenants (§8.8)."""
    if run.policy is None or not run.policy.retrieval.zk_tenants:
        return ATTESTATION_RETRIEVAL
    zk = ", ".join(sorted(run.policy.retrieval.zk_tenants))
    sizes = ", ".join(
        f"{t}: N = {run.tenants[t]['n']}" for t in sorted(run.policy.retrieval.zk_tenants) if t in run.tenants
    )
    if vk is not None and "zk_proofs" in run.checked:
        return (
            f"groth16 + replay: for zk tenant(s) {zk} (every score of the committed index proven; "
            f"{sizes or 'sizes unknown'} documents), {run.checked['zk_proofs']} Groth16 proofs of "
            "noise-then-select verified under the auditor's own verification key, which proves the citations "
            "without the index; every other query by replay. " + ATTESTATION_RETRIEVAL
        )
    return (
        f"replay only: the bundle's zk tenant(s) {zk} carry Groth16 proofs, not "
        "checked (no auditor verification key given: --zk-vkey). " + ATTESTATION_RETRIEVAL
    )


def detection_bound(beta: float, sampled: list[tuple[int, int]]) -> float:
    """The probability, at least, that a sample catches one of the non-conforming records when they are a
    β-fraction of all the query records of ``sampled`` [(s_w, N_w) per window, each window sampled uniformly
    without replacement]. One window: 1 − (1 − β)^s (sampling without replacement misses less often than with).
    Several: the records may sit in the window sampled most thinly, r = min s_w / N_w; each window misses its B_w
    bad records with probability ≤ (1 − B_w/N_w)^{s_w} ≤ exp(−r·B_w), so all miss with probability
    ≤ exp(−r·β·N), N = Σ N_w."""
    live = [(s, n) for s, n in sampled if n]
    if not live:
        return 1.0
    if len(live) == 1:
        s, _ = live[0]
        return 1.0 - (1.0 - beta) ** s
    total = sum(n for _, n in live)
    ratio = min(s / n for s, n in live)
    return 1.0 - math.exp(-ratio * beta * total)


def sampling_guarantee(sampled: list[tuple[int, int]]) -> str | None:
    """The sampled mode's guarantee over the whole history (None in full mode: nothing was sampled)."""
    if not sampled:
        return None
    k, n = sum(s for s, _ in sampled), sum(n for _, n in sampled)
    out = (
        f"sampled {k} of {n} query records: a β-fraction of non-conforming records is detected with probability "
        f">= {detection_bound(0.01, sampled):.4f} (β=0.01), {detection_bound(0.05, sampled):.4f} (β=0.05)"
    )
    if k == n:
        out += "; the sample covers every record (as full mode)"
    return out


def conclude(
    run: Run,
    given: AuditorInputs,
    certify: Callable[[], Any] | None,
    *,
    mode: str,
    sampled: list[tuple[int, int]],
    trusted_size: int | None,
) -> Verdict:
    """The verdict: PASS iff no check gave a reason, with the certified ε and δ of the committed policy
    (``certify``: its background computation, if started); a FAIL carries ``epsilon: null, delta: null``."""
    channels: dict[str, Any] = {}
    eps = delta = k_max = None
    if run.policy is not None:
        t0 = time.perf_counter()
        cert = certify() if certify is not None else None
        cert = cert[0] if cert is not None else certified_epsilons(run.policy, _earlier_policies(run))
        run.certified = {"policies": policies_digest(run), "cert": cert}
        run.timings["certify"] = time.perf_counter() - t0
        channels = {"relation": cert["relation"], "retrieval": cert["retrieval"], "generation": cert["generation"]}
        why = run.policy.epsilon_acc_violation(cert["retrieval"]["epsilon_acc_certified"])
        if why:
            run.fail("policy", f"retrieval.epsilon_acc: {why}")
        k_max = run.policy.coalition.k_max
        if not math.isfinite(cert["epsilon"]):
            run.fail("policy", "the committed parameters certify no finite ε")
        eps, delta = cert["epsilon"], cert["delta"]
    # FAIL: a defect; INCOMPLETE: none found, but evidence handed in could not be checked against this bundle (a
    # receipt beyond it without a consistency proof): no guarantee is stated until it is; PASS: neither
    verdict = "FAIL" if run.reasons else ("INCOMPLETE" if run.incomplete else "PASS")
    run.reasons.sort(key=_check_rank)  # stable: the root cause (earliest check) first, cascades after
    if verdict != "PASS":
        eps = delta = None
    attestation = {
        "retrieval": _retrieval_attestation(run, given.zk_vkey),
        "generation": ATTESTATION_GENERATION,
        "timing": release_statement([(ep.number, ep.policy) for ep in run.epochs] or [(0, run.policy)]),
    }
    extra_trust, gen_attestation = generation_trust(run.policy)
    if gen_attestation:
        attestation["generation"] = gen_attestation
    # the head's key: genesis's, or the last a rotation leaf named (§3.3)
    vk = run.keys.current.vkey() if run.keys is not None else run.genesis["provider_key"] if run.genesis else None
    return Verdict(
        verdict=verdict,
        epsilon=eps,
        delta=delta,
        k_max=k_max,
        channels=channels,
        trust=TRUST + extra_trust,
        attestation=attestation,
        reasons=run.reasons,
        incomplete=run.incomplete if verdict == "INCOMPLETE" else [],
        checked=dict(run.checked),
        mode=mode,
        guarantee=sampling_guarantee(sampled),
        rejected_evidence=run.rejected,
        provider_key=None if vk is None else key_fingerprint(vk),
        key_pinned=given.pinned is not None,
        trusted_checkpoint=trusted_size,
        max_epsilon=given.max_epsilon,
        max_documents=max((run.n_docs_at(t, run.n) for t in run.tenants or {}), default=None),
        timings=dict(run.timings),
        cpu_seconds=dict(run.cpu),
        history=_history(run),
        spend=_spend(run),
    )


SCHEMA_PUBLIC = "dprag.verdict-public/1"
#: the verdict's fields a published verdict keeps (``Verdict.to_public_json``)
PUBLIC_FIELDS = frozenset(
    {
        "protocol_version",
        "verdict",
        "strength",
        "max_epsilon",
        "max_documents",
        "epsilon",
        "delta",
        "k_max",
        "channels",
        "attestation",
        "mode",
        "guarantee",
        "provider_key",
        "key_pinned",
        "trusted_checkpoint",
        "trust",
        "history",
        "headline",
        "warnings",
    }
)
#: the counts a published verdict keeps: of the public ledger (query leaves, windows) and of the auditor's inputs
#: (receipts, the coalition window); not per-tenant counts (v3 public leaves hide the tenant: zk_proofs counts one
#: tenant's queries), nor the coalition estimate
PUBLIC_COUNTS = frozenset(
    {
        "queries",
        "queries_with_account_confirmed_q",
        "receipts_handed_in",
        "receipts_accepted",
        "receipts_newer_than_bundle",
        "refusals_handed_in",
        "refusals_newer_than_bundle",
        "coalition_window",
        "coalition_window_covers_history",
    }
)

#: the checks in the order of spec/protocol.md §8: a reason of an earlier check is a cause, later ones cascade
CHECK_ORDER = (
    "files",
    "canonical",
    "commitments",
    "policy",
    "ledger",
    "witnesses",
    "receipts",
    "requests",
    "rate",
    "retrieval",
    "generation",
    "answers",
    "coalition",
    "history",
)


def _check_rank(reason: str) -> int:
    name = reason.split(":", 1)[0]
    return CHECK_ORDER.index(name) if name in CHECK_ORDER else len(CHECK_ORDER)


def _spend(run: Run) -> dict[str, Any]:
    """Per tenant, the budget limit and every document's spent units as the generation check replayed them."""
    if run.policy is None or not run.final_spend:
        return {}
    limit = ChargeRule.of(run.policy).limit
    return {t: {"limit": limit, "spent": s} for t, s in run.final_spend.items()}


def _history(run: Run) -> dict[str, Any] | None:
    """The log the verdict covers: its window label, ledger size and root (what two auditors compare), its origin
    and epoch, and the keys that signed it (``history.check_8_10_history``)."""
    if run.genesis is None or not run.n:
        return None
    root = run.prefix_roots.get(run.n) if isinstance(getattr(run, "prefix_roots", None), dict) else None
    out = {"window": run.genesis.get("window"), "size": run.n, "root": None if root is None else root.hex()}
    out.update(getattr(run, "history_info", None) or {})
    return out


def _earlier_policies(run: Run) -> tuple[Policy, ...]:
    """The policies of the log's epochs before its last, oldest first: the certified ε and δ are taken over every
    epoch's policy, never the last one's alone (§3.4, ``audit.protocol.certify.certified_epsilons``)."""
    return tuple(ep.policy for ep in run.epochs[:-1] if ep.policy is not None)
