"""``dprag demo [--out DIR] [--quick]``: the whole audited multi-tenant DP-RAG service, end to end, on real
models (spec/demo.md).

What one run does (every step is the project's own code; nothing is simulated):

1. **Data.** Three synthetic clinics, each its own tenant and private corpus: ``generate_clinic_corpus`` with
   three seeds (rag_adapters/datasets/clinic.py). Tenant ``clinic-a`` has citations (the retrieval channel)
   on, ``clinic-b`` off, and ``clinic-z`` -- a small **zk tenant** of 8 records -- has citations whose every
   query carries a Groth16 proof of noise-then-select (audit/protocol/zk_attest.py).
2. **Accounts and traffic.** Honest accounts under each tenant ask one test-split question per clinic
   condition (the fact kind rotating drug / dose / test / interval); a *coalition* of colluding accounts of
   ``clinic-a`` asks paraphrases of one extraction probe -- "What is <patient>'s <secret kind>?" about the
   canary of one record (001 §4.2's interrogation attack, run by several accounts: 002's threat model).
   The honest and probe queries are interleaved in one ledger.
3. **Policy** (spec/protocol.md §4), fixed before any private data is read:
   - retrieval channel: σ = ``accounting.collusion.exact_sigma(ε_acc, δ_acc, n, sensitivity)`` in the
     integer score units of §4 (MiniLM cosine × 2^20 after int16 quantisation at scale 2^10, clipped to
     [0, 2^20], shifted by 10: sensitivity (2^20 >> 10) + 1 = 1025), K citations, n queries per account;
   - coalition: k_max, δ_policy, θ, window (002 §5.5);
   - generation: MuRAG (000 Alg. 1) with answer-level voting (spec/accounting/rag.md §5: m voters of one document each
     answer in full, voters given only empty padding abstain, a public normaliser keys the answers, the exponential
     mechanism over the keys the voters wrote releases one or ⊥ → the Non-RAG answer) at (ε_q, δ_q) = (4, 1e-6),
     M queries per document, τ = 512 score units (cosine 0.5), m = 30 voters; composed ε 9.8752 <= 10, δ 6.56e-5.
     ``--mechanism answer-vote`` commits the universal selection (pure ε, composed δ 1e-5),
     ``--mechanism pure-dp-rag`` commits 000 Alg. 5 at the same ε_q instead, ``--mechanism pure-dp-rag-ext``
     000 Alg. 5 with public completion and the Non-RAG base measure (free in ε, committed in the policy). τ and
     the mechanism were chosen on a public calibration corpus, never on a tenant's data (spec/demo.md).
4. **Serving** (``audit.provider.service.ProviderService``): commitments (C_emb from ``audit_embedder``, C_idx, C_seed,
   C_policy), every query through noise-then-select citations, per-document filter charges, the ledger and
   signed receipts; receipts go to ``DIR/receipts.jsonl`` (what the accounts hand to the auditor), the
   bundle to ``DIR/bundle``.
   The demo also plays the **auditor** of the zk tenant: it runs the (development-only) Groth16 setup and
   hands the provider the proving key, keeping the verification key in ``DIR/auditor-zk/``; after serving, the
   provider proves the zk tenant's queries (``ProviderService.attest``).
5. **Verification** (``audit.verify.verify``, what ``dprag audit verify DIR/bundle --receipts
   DIR/receipts.jsonl --zk-vkey DIR/auditor-zk/verification_key.json`` runs): ``DIR/verdict.json``. A second, small
   window with the same coalition traffic and a policy committed with a lower k_max is verified too (``DIR/lowk/``): it
   must FAIL ``coalition``.
6. **Utility** on the honest questions: match accuracy and token F1 of the served (private) answers
   against gold, next to the Non-RAG baseline (the same LLM without retrieval) and a non-private RAG
   reference (top-3 documents pasted into one prompt), plus a leak check of the probe's secret.
7. ``DIR/report.md`` with the verdict, ε per channel and composed with what each covers, the attestation
   mode, checked counts, ĉ and the coalition clusters, the utility table, sizes, run times and plots
   (``DIR/plots/*.png``).

Exit code 0 iff the main verdict is PASS. ``--model toy|tiny`` runs the same orchestration without real
weights (tests); the privacy parameters are the same, the answers meaningless.

The package, one module per concern:

- ``config``: tenants, privacy parameters, run sizes and the committed policy (``build_policy``);
- ``traffic``: the script, who asks what in which order (``build_script``, ``probe_target``);
- ``models``: the embedder and generator of ``--model`` (``load_models``);
- ``auditor_zk``: the auditor's development Groth16 key for the zk tenant;
- ``run``: the window served, verified and analysed (``run_demo``);
- ``analysis``: the served queries, the run's result and its utility / spend / coalition analysis;
- ``report``: ``report.md`` and the plots;
- ``cli``: the command ``dprag demo`` (``demo``, ``main``);
- ``calibration``: how τ and the mechanism were chosen on a public corpus (``dprag experiment
  demo-calibration``); ``answer_cache``: its progress lines and resumable cache of the voters' answers.
"""

from dprag.lab.demo.analysis import DemoResult, Served
from dprag.lab.demo.auditor_zk import AuditorZk, auditor_zk_setup
from dprag.lab.demo.calibration import (
    CALIBRATION_SEED,
    answer_vote_grid,
    calibration_corpus,
    mechanism_accuracy,
    tau_statistics,
    token_budget_accuracy,
)
from dprag.lab.demo.cli import demo, main
from dprag.lab.demo.config import (
    ANSWER_VOTE,
    MECHANISMS,
    PROBE_ANSWER_TOKENS,
    PROBE_TEMPLATES,
    SCORE_CLIP,
    SCORE_SHIFT,
    SENSITIVITY,
    DemoConfig,
    DemoPrivacy,
    TenantSpec,
    answer_vote_selection,
    build_policy,
    default_config,
    generation_extensions,
    generation_policy,
    mechanism_label,
    mechanism_line,
    quick_config,
    smoke_config,
)
from dprag.lab.demo.models import Models, load_models
from dprag.lab.demo.report import CITATION_GAP, citation_explanation, epsilon_acc_for_sigma, render_report
from dprag.lab.demo.run import MARKER, run_demo
from dprag.lab.demo.traffic import Request, build_script, honest_questions, probe_questions, probe_target

__all__ = [
    "ANSWER_VOTE",
    "AuditorZk",
    "CALIBRATION_SEED",
    "CITATION_GAP",
    "DemoConfig",
    "DemoPrivacy",
    "DemoResult",
    "MARKER",
    "MECHANISMS",
    "Models",
    "PROBE_ANSWER_TOKENS",
    "PROBE_TEMPLATES",
    "Request",
    "SCORE_CLIP",
    "SCORE_SHIFT",
    "SENSITIVITY",
    "Served",
    "TenantSpec",
    "answer_vote_grid",
    "answer_vote_selection",
    "auditor_zk_setup",
    "build_policy",
    "build_script",
    "calibration_corpus",
    "citation_explanation",
    "default_config",
    "demo",
    "epsilon_acc_for_sigma",
    "generation_extensions",
    "generation_policy",
    "honest_questions",
    "load_models",
    "main",
    "mechanism_accuracy",
    "mechanism_label",
    "mechanism_line",
    "probe_questions",
    "probe_target",
    "quick_config",
    "render_report",
    "run_demo",
    "smoke_config",
    "tau_statistics",
    "token_budget_accuracy",
]
