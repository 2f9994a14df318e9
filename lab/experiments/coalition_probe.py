"""``dprag experiment coalition-probe``: the demo's coalition probe as an experiment (
spec/experiments-mia.md §5).

k colluding accounts of one tenant try to extract one record's secret through each channel of the audited
service (``audit.provider.service.ProviderService``, the demo's committed policy: noise-then-select citations with the
calibrated discrete Gaussian, MuRAG generation with a per-document pure filter):

* **citations** (retrieval channel): the target record's id is among the K citations of at least one of the
  coalition's answers;
* **answers** (generation channel): the target's secret (6 digits) appears in at least one answer
  (``attacks.interrogation.answer_matches``).

Protocol. The tenant corpus is ``generate_clinic_corpus(corpus_seed, ...)``; the target is the demo's
``probe_target`` (the first record that supports no protocol fact). Two worlds per trial, replace-one
neighbours: **in** = the corpus; **out** = the target record replaced (same id) by a held-out record of
another corpus (another patient, another secret). In each world and trial one window is opened
(``ProviderService.create`` with a seed derived from ``--seed``, trial and world) with ``k_max_run`` colluding
accounts; account j (j = 1..k_max_run) asks ``probes`` paraphrases of "What is <name>'s <secret kind>?"
(the demo's ``PROBE_TEMPLATES``), accounts served one after another. The coalition of size k is accounts
1..k: later accounts cannot change what earlier ones received, so one window gives every k at once.

Per k and channel: p_in, p_out = fraction of trials with the event in each world (Wilson 95% intervals);
advantage p_in − p_out; the accounting's bounds at the ε certified for what the coalition received:
``rate_bound`` = min(1, e^ε·p̄_out + δ) with p̄_out the Wilson 95% *upper* limit of p_out (the DP inequality
P_in[E] <= e^ε·P_out[E] + δ needs the true P_out; a measured 0 of 20 does not make it 0), for the answers
channel also ``rate_bound_prior`` = min(1, e^ε·k·probes·max_tokens/10^6 + δ) (out of the corpus the uniform
6-digit secret is independent of the answers, each of which holds at most max_tokens distinct 6-digit
strings), and ``advantage_bound`` = ``lemma_3_11_advantage_upper(ε, δ)``. Retrieval ε: the discrete Gaussian PLD of
k·probes releases (``gdp.discrete_gaussian_epsilon``, the sampler's TV added to δ as the policy does);
generation ε: the filter's replace-one guarantee (``audit.protocol.certify.certified_epsilons``; k does not enter).

Outputs: ``coalition_probe.csv`` / ``.jsonl`` (rows, schema ``dprag.coalition-probe-row/1``), ``trials.jsonl``
(schema ``dprag.coalition-probe-trial/1``: every answer and citation list), ``coalition_probe.png``,
``run.json``. Noise is drawn from each window's committed seed and the signed request; the accounts' keys and
nonces derive from the window's seed here (``run_window``), so a rerun with the same ``--seed`` is identical.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np

from dprag.audit.protocol.certify import certified_epsilons
from dprag.errors import DpragError, InvalidParameterError
from dprag.lab.demo import MECHANISMS
from dprag.lab.experiments.options import Fail
from dprag.lab.experiments.report import progress_bar
from dprag.lab.runinfo import write_run_json

ROW_SCHEMA = "dprag.coalition-probe-row/1"
TRIAL_SCHEMA = "dprag.coalition-probe-trial/1"
CHANNELS = ("citations", "answers")
TENANT = "clinic-a"


@dataclass(frozen=True)
class ProbeSetup:
    """The tenant's two worlds and the target."""

    docs_in: tuple[str, ...]
    docs_out: tuple[str, ...]
    target_id: int
    name: str
    kind: str
    secret: str
    replacement_secret: str


def make_setup(corpus_seed: int | str, n_conditions: int, n_distractors: int) -> ProbeSetup:
    from dprag.lab.demo import probe_target
    from dprag.rag_adapters.datasets.clinic import generate_clinic_corpus

    corpus = generate_clinic_corpus(
        corpus_seed, n_conditions=n_conditions, support_min=20, support_max=30, n_distractors=n_distractors
    )
    target = probe_target(corpus)
    other = generate_clinic_corpus(
        f"{corpus_seed}/held-out",
        n_conditions=1,
        support_min=1,
        support_max=1,
        n_distractors=max(2, n_distractors // 10),
    )
    names = {c.name for c in corpus.canaries}
    support = {i for f in other.facts for i in f.support_ids}
    rep = next(
        c for c in other.canaries if c.doc_id not in support and c.name not in names and c.secret != target.secret
    )
    docs_out = list(corpus.documents)
    docs_out[target.doc_id] = other.documents[rep.doc_id]
    return ProbeSetup(
        tuple(corpus.documents), tuple(docs_out), target.doc_id, target.name, target.kind, target.secret, rep.secret
    )


def probe_policy(
    k_max: int,
    probes: int,
    eps_acc: float | None = None,
    *,
    m: int | None = None,
    epsilon_token: float | None = None,
    tau: int | None = None,
    mechanism: str | None = None,
):
    """The demo's committed parameters (``demo.DemoPrivacy``: ε_acc, δ_acc, K, m, ε_token, c, M, τ, tokens,
    sampler) and generation policy (``demo.generation_policy``: MuRAG with the demo's ``mechanism`` unless
    given, one of ``demo.MECHANISMS``), n = ``probes`` queries per account and k_max = ``k_max``; one tenant,
    citations on; m, ε_token and τ (score units) can be overridden."""
    from dataclasses import replace

    from dprag.accounting.collusion import exact_sigma
    from dprag.audit.protocol.policy import CoalitionPolicy, Policy, RetrievalPolicy, SamplerSpec
    from dprag.lab.demo import SCORE_CLIP, SCORE_SHIFT, SENSITIVITY, DemoPrivacy, generation_policy

    if mechanism is not None and mechanism not in MECHANISMS:
        raise InvalidParameterError("mechanism", f"must be one of {MECHANISMS}", mechanism)
    p = DemoPrivacy()
    p = replace(
        p,
        **{
            k: v
            for k, v in (("m", m), ("epsilon_token", epsilon_token), ("tau", tau), ("mechanism", mechanism))
            if v is not None
        },
    )
    e_acc = p.epsilon_acc if eps_acc is None else eps_acc
    sigma = exact_sigma(e_acc, p.delta_acc, probes, SENSITIVITY)
    return Policy(
        window="dprag-coalition-probe",
        retrieval=RetrievalPolicy(
            enabled_tenants=(TENANT,),
            K=p.K,
            n=probes,
            epsilon_acc=e_acc,
            delta_acc=p.delta_acc,
            sigma=sigma,
            sensitivity=SENSITIVITY,
            score_clip=SCORE_CLIP,
            score_shift=SCORE_SHIFT,
            sampler=SamplerSpec(p.sampler_tail, p.sampler_bits, p.sampler_tv),
        ),
        # the policy rule δ_policy > k_max·δ_acc (002 §5.6): the demo's 1e-5 up to k_max = 5, then 2·k_max·δ_acc
        coalition=CoalitionPolicy(k_max=k_max, delta_policy=max(p.delta_policy, 2 * k_max * p.delta_acc)),
        generation=generation_policy(p),
    ).validate()


class _Models:
    """What ``run_window`` needs: a committed embedder, its descriptor, a generator, names."""

    def __init__(self, embedder, generator, descriptor, names):
        self.embedder, self.generator, self.descriptor, self.names = embedder, generator, descriptor, names


def probe_models(kind: str):
    """The demo's model kinds (``demo.load_models``: real, tiny, toy) plus ``minilm-toy``: the real MiniLM
    embedder (the retrieval channel is the real one) with the weight-free toy generator (answers meaningless,
    no LLM cost) -- for the citations channel at sizes SmolLM2 cannot reach here."""
    from dprag.lab.demo import load_models

    quiet = lambda total, desc: lambda n: None  # noqa: E731
    if kind != "minilm-toy":
        m = load_models(kind, quiet)
        return _Models(m.embedder, m.generator, m.descriptor, m.names)
    from dprag.audit.protocol import commitments as cm
    from dprag.audit.testing.toy import ToyGenerator
    from dprag.rag_adapters.embedder import CorpusCachingEmbedder, MiniLMEmbedder

    emb = MiniLMEmbedder()
    h = hashlib.sha256(b"dprag.coalition-probe/minilm-toy").hexdigest()  # an experiment window, not audited

    def descriptor(schema):
        return cm.EmbedderDescriptor(
            model="all-MiniLM-L6-v2 (experiment)",
            weights_sha256=h,
            dimension=emb.dim,
            prompt_template="toy",
            tokenizer_sha256=h,
            schema=dict(schema),
        )

    return _Models(
        CorpusCachingEmbedder(emb),
        ToyGenerator(vocab_size=4096),
        descriptor,
        {
            "embedder": "sentence-transformers/all-MiniLM-L6-v2 (384-d)",
            "generator": "toy generator (accounting.rag.toy): answers meaningless",
        },
    )


def wilson(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score 95% interval of a binomial proportion."""
    if n <= 0:
        raise InvalidParameterError("n", "must be >= 1", n)
    p = successes / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def channel_bounds(policy, k: int, probes: int, gen: dict | None = None) -> dict:
    """Certified (ε, δ) per channel for a coalition of k accounts that received k·probes answers (``gen``: the
    policy's generation entry of ``certified_epsilons(policy)``, computed once by the caller)."""
    from dprag.accounting import gdp

    r = policy.retrieval
    delta = policy.coalition.delta_policy
    dg = gdp.discrete_gaussian_epsilon(r.sigma, r.sensitivity, k * probes, delta, sampler_tv=r.sampler.tv)
    gen = gen or certified_epsilons(policy)["generation"]
    return {"citations": (float(dg.epsilon), float(delta)), "answers": (float(gen["epsilon"]), float(gen["delta"]))}


def run_window(
    directory: Path,
    policy,
    models,
    docs: Sequence[str],
    accounts: Sequence[str],
    questions: Sequence[Sequence[str]],
    seed: bytes,
    progress: Callable | None = None,
) -> list[list[dict]]:
    """One window: account j asks questions[j] in order; returns per account the (answer, citations) list.

    The accounts' keys and request nonces derive from ``seed`` (an experiment, not a deployment: a deployed
    account's nonce must be unpredictable, or its h_q is guessable), so every request, hence every h_req and
    every draw the service makes from its committed seed and h_req, is a function of ``seed``: a rerun gives
    the same answers and citations."""
    from dprag.accounting.noise.source import RandomSource
    from dprag.audit.client.account import AccountClient
    from dprag.audit.protocol.request import AccountKey
    from dprag.audit.provider.service import ProviderService

    if directory.exists():
        shutil.rmtree(directory)
    keys = {
        a: AccountKey(hashlib.sha256(b"dprag/coalition-probe/account-key\0" + seed + a.encode()).digest())
        for a in accounts
    }
    svc = ProviderService.create(
        directory / "provider",
        policy=policy,
        embedder=models.embedder,
        embedder_descriptor=models.descriptor({TENANT: len(docs)}),
        generator=models.generator,
        tenants={TENANT: list(docs)},
        accounts={a: (TENANT, keys[a].vkey) for a in accounts},
        seed=seed,
        # an experiment measures leakage at every cell of its grid, weak and vacuous guarantees included (the
        # leaky cells are the point): the report states each cell's certified (ε, δ) itself
        allow_weak=True,
    )
    out = []
    try:
        clients = {
            a: AccountClient(
                a,
                policy.window,
                keys[a],
                provider_vkey=svc.signer.vkey(),
                embedder=models.embedder,
                embedding_scale=svc.embedder_descriptor["embedding_scale"],
                nonces=RandomSource.from_seed(seed, b"coalition-probe/nonces/" + a.encode()),
            )
            for a in accounts
        }
        it = list(zip(accounts, questions, strict=False))
        for a, qs in progress(it, desc="accounts") if progress else it:
            rows = []
            for q in qs:
                s = clients[a].ask(svc, q)
                rows.append({"question": q, "answer": s.answer, "citations": s.citations})
            out.append(rows)
    finally:
        svc.close()
    shutil.rmtree(directory, ignore_errors=True)  # the window's files are not results
    return out


def events(per_account: list[list[dict]], target_id: int, secret: str) -> dict[str, list[bool]]:
    """Per channel, per coalition size k = 1..len: did the first k accounts see the event?"""
    from dprag.lab.attacks.interrogation import answer_matches

    cite_acc = [any(r["citations"] is not None and target_id in r["citations"] for r in rows) for rows in per_account]
    ans_acc = [any(answer_matches(r["answer"], secret) for r in rows) for rows in per_account]
    return {"citations": list(np.logical_or.accumulate(cite_acc)), "answers": list(np.logical_or.accumulate(ans_acc))}


SECRET_SPACE = 10**6  # the clinic canary's secret: 6 digits, uniform


def summarise(trials: list[dict], ks: Sequence[int], policy, probes: int) -> list[dict]:
    """One row per (k, channel): the measured rates and the accounting's bounds (module docstring)."""
    from dprag.accounting.collusion import lemma_3_11_advantage_upper

    rows = []
    t_in = [t for t in trials if t["world"] == "in"]
    t_out = [t for t in trials if t["world"] == "out"]
    if not t_in or not t_out:
        raise InvalidParameterError("trials", "need trials of both worlds")
    max_tokens = policy.generation.max_tokens
    gen = certified_epsilons(policy)["generation"]
    for k in ks:
        bounds = channel_bounds(policy, k, probes, gen)
        for ch in CHANNELS:
            s_in = sum(t["events"][ch][k - 1] for t in t_in)
            s_out = sum(t["events"][ch][k - 1] for t in t_out)
            n_in, n_out = len(t_in), len(t_out)
            p_in, p_out = s_in / n_in, s_out / n_out
            out_ci = wilson(s_out, n_out)
            eps, delta = bounds[ch]
            e = math.exp(min(eps, 700.0))
            row = {
                "schema": ROW_SCHEMA,
                "k": k,
                "channel": ch,
                "trials": n_in,
                "probes_per_account": probes,
                "p_in": p_in,
                "p_in_ci": list(wilson(s_in, n_in)),
                "p_out": p_out,
                "p_out_ci": list(out_ci),
                "advantage": p_in - p_out,
                "epsilon": eps,
                "delta": delta,
                "rate_bound": min(1.0, e * out_ci[1] + delta),
                "advantage_bound": lemma_3_11_advantage_upper(eps, delta),
                "rate_bound_prior": None,
            }
            if ch == "answers":  # out of the corpus, the secret is independent of the answers: each answer
                # holds at most max_tokens distinct 6-digit strings, so P_out <= k·probes·max_tokens / 10^6
                row["rate_bound_prior"] = min(1.0, e * min(1.0, k * probes * max_tokens / SECRET_SPACE) + delta)
            rows.append(row)
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), squeeze=False)
    for ax, ch in zip(axes[0], CHANNELS, strict=False):
        rr = [r for r in rows if r["channel"] == ch]
        ks = [r["k"] for r in rr]
        lo = [max(0.0, r["p_in"] - r["p_in_ci"][0]) for r in rr]
        hi = [max(0.0, r["p_in_ci"][1] - r["p_in"]) for r in rr]
        ax.errorbar(ks, [r["p_in"] for r in rr], yerr=[lo, hi], marker="o", label="success (target in)")
        ax.plot(ks, [r["p_out"] for r in rr], "s--", label="same event, target replaced")
        ax.plot(ks, [r["rate_bound"] for r in rr], "k:", label="bound e^ε·p_out(95% upper) + δ")
        if ch == "answers":
            ax.plot(ks, [r["rate_bound_prior"] for r in rr], "g:", label="bound e^ε·k·n·T/10^6 + δ")
        ax.plot(
            ks,
            [min(1.0, r["p_out"] + r["advantage_bound"]) for r in rr],
            "r-.",
            lw=0.8,
            label="bound p_out + Adv(ε, δ)",
        )
        ax.set_xlabel("colluding accounts k")
        ax.set_ylabel("fraction of trials")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{ch} channel")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------------------


def run_probe(
    out: Path,
    *,
    models,
    policy,
    setup: ProbeSetup,
    k_max: int,
    probes: int,
    trials: int,
    seed: str,
    templates: Sequence[str],
    progress: Callable | None = None,
    on_trial: Callable | None = None,
) -> list[dict]:
    accounts = [f"mallory-{j + 1}" for j in range(k_max)]
    questions = [
        [templates[(j * probes + i) % len(templates)].format(name=setup.name, kind=setup.kind) for i in range(probes)]
        for j in range(k_max)
    ]
    trials_out = []
    work = [(t, w) for t in range(trials) for w in ("in", "out")]
    for t, world in progress(work, desc="windows") if progress else work:
        docs = setup.docs_in if world == "in" else setup.docs_out
        wseed = hashlib.sha256(f"dprag/coalition-probe/{seed}/{t}/{world}".encode()).digest()
        t0 = time.perf_counter()
        per_acc = run_window(out / "_window", policy, models, docs, accounts, questions, wseed)
        ev = events(per_acc, setup.target_id, setup.secret)
        rec = {
            "schema": TRIAL_SCHEMA,
            "trial": t,
            "world": world,
            "events": {c: [bool(x) for x in v] for c, v in ev.items()},
            "seconds": time.perf_counter() - t0,
            "accounts": per_acc,
        }
        trials_out.append(rec)
        if on_trial:
            on_trial(rec)
    return trials_out


@click.command("coalition-probe")
@click.option("--k-max", type=int, default=20, show_default=True, help="largest coalition (k = 1..k_max)")
@click.option("--probes", type=int, default=2, show_default=True, help="probe queries per account (= policy n)")
@click.option("--trials", type=int, default=20, show_default=True, help="windows per world")
@click.option(
    "--model",
    type=click.Choice(("real", "tiny", "toy", "minilm-toy")),
    default="toy",
    show_default=True,
    help="real: MiniLM + SmolLM2; tiny / toy: weight-free (the demo's model kinds); minilm-toy: MiniLM "
    "retrieval with the toy generator (citations channel only)",
)
@click.option("--eps-acc", type=float, default=None, help="retrieval ε_acc per account (default: the demo's)")
@click.option("--m", "m", type=int, default=None, help="generation voters (default: the demo's 20)")
@click.option("--epsilon-token", type=float, default=None, help="generation ε_token (default: the demo's 6)")
@click.option("--tau", type=int, default=None, help="MuRAG threshold in score units (default: the demo's 512)")
@click.option(
    "--mechanism",
    type=click.Choice(MECHANISMS),
    default=None,
    help="generation mechanism (default: the demo's DemoPrivacy.mechanism; the pilot used pure-dp-rag)",
)
@click.option("--corpus-seed", default="dprag-coalition-probe", show_default=True)
@click.option("--n-conditions", type=int, default=2, show_default=True)
@click.option("--n-distractors", type=int, default=40, show_default=True)
@click.option("--seed", default="0", show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True)
@click.option("--json", "as_json", is_flag=True, help="print one JSON row per (k, channel) on stdout")
@click.option("--progress/--no-progress", default=True, show_default=True)
def coalition_probe(
    k_max,
    probes,
    trials,
    model,
    eps_acc,
    m,
    epsilon_token,
    tau,
    mechanism,
    corpus_seed,
    n_conditions,
    n_distractors,
    seed,
    out_dir,
    as_json,
    progress,
):
    """Success rate of k colluding accounts extracting one record's secret, per channel, vs the certified bound."""
    from dprag.lab.demo import PROBE_TEMPLATES

    for name, v in (("--k-max", k_max), ("--probes", probes), ("--trials", trials), ("--n-conditions", n_conditions)):
        if v < 1:
            raise click.BadParameter(f"must be >= 1, got {v}", param_hint=name)
    if k_max > 64:
        raise click.BadParameter(f"must be <= 64, got {k_max}", param_hint="--k-max")
    for name, v in (("--eps-acc", eps_acc), ("--epsilon-token", epsilon_token)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise click.BadParameter(f"must be finite and > 0, got {v}", param_hint=name)
    if m is not None and m < 1:
        raise click.BadParameter(f"must be >= 1, got {m}", param_hint="--m")
    if tau is not None and tau < 0:
        raise click.BadParameter(f"must be >= 0, got {tau}", param_hint="--tau")
    t_start = time.perf_counter()
    out = Path(out_dir)
    try:
        policy = probe_policy(k_max, probes, eps_acc, m=m, epsilon_token=epsilon_token, tau=tau, mechanism=mechanism)
        setup = make_setup(corpus_seed, n_conditions, n_distractors)
        if policy.retrieval.K > len(setup.docs_in):
            raise click.BadParameter("the corpus is smaller than K citations", param_hint="--n-distractors")
        bar = progress_bar(progress)

        out.mkdir(parents=True, exist_ok=True)
        (out / "trials.jsonl").unlink(missing_ok=True)
        t = time.perf_counter()
        models = probe_models(model)
        load_s = time.perf_counter() - t

        def on_trial(rec):
            with (out / "trials.jsonl").open("a", encoding="utf-8") as f:
                f.write(json.dumps(rec, sort_keys=True) + "\n")

        templates = PROBE_TEMPLATES
        trials_out = run_probe(
            out,
            models=models,
            policy=policy,
            setup=setup,
            k_max=k_max,
            probes=probes,
            trials=trials,
            seed=str(seed),
            templates=templates,
            progress=bar,
            on_trial=on_trial,
        )
        rows = summarise(trials_out, range(1, k_max + 1), policy, probes)
    except DpragError as e:
        raise Fail(str(e)) from None
    cols = list(rows[0].keys())
    with (out / "coalition_probe.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()})
    with (out / "coalition_probe.jsonl").open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")
            if as_json:
                click.echo(json.dumps(r, sort_keys=True))
    plot(rows, out / "coalition_probe.png")
    secs = [t["seconds"] for t in trials_out]
    run = {
        "schema": "dprag.coalition-probe-run/1",
        "argv": sys.argv[1:],
        "k_max": k_max,
        "probes": probes,
        "trials": trials,
        "model": model,
        "models": models.names,
        "policy": json.loads(policy.to_bytes()),
        "corpus_seed": corpus_seed,
        "n_conditions": n_conditions,
        "n_distractors": n_distractors,
        "n_records": len(setup.docs_in),
        "target_id": setup.target_id,
        "seed": str(seed),
        "templates": list(templates),
        "threads": {
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "DPRAG_TORCH_THREADS": os.environ.get("DPRAG_TORCH_THREADS"),
        },
        "seconds_load_models": load_s,
        "seconds_per_window": float(np.mean(secs)),
        "seconds_per_query": float(np.mean(secs)) / (k_max * probes),
        "total_seconds": time.perf_counter() - t_start,
    }
    write_run_json(out, run, seed=seed)
    if not as_json:
        for r in rows:
            if r["k"] in (1, 2, 5, 10, 20) or r["k"] == k_max:
                click.echo(
                    f"k={r['k']:>2} {r['channel']:>9}: p_in {r['p_in']:.2f} p_out {r['p_out']:.2f}  "
                    f"ε {r['epsilon']:.3g}  bound {r['rate_bound']:.3f}",
                    err=True,
                )
