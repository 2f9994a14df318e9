"""The demo's run: data and script, the provider's window (Phases A-B), the auditor's verification (Phase D),
the k_max = lowk window, then the analysis, plots and report (spec/demo.md)."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import click

from dprag.audit.client.account import AccountClient
from dprag.audit.protocol.chain import origin_of
from dprag.audit.protocol.encoding import encode
from dprag.audit.protocol.ledger import NoteSigner
from dprag.audit.protocol.request import AccountKey
from dprag.audit.provider.service import ProviderService
from dprag.audit.verify import verify
from dprag.errors import InvalidParameterError
from dprag.lab.demo.analysis import DemoResult, Served, analyse
from dprag.lab.demo.auditor_zk import auditor_zk_setup
from dprag.lab.demo.config import DemoConfig, build_policy, derived_bytes
from dprag.lab.demo.latency import Recording, latency_sample, served_split
from dprag.lab.demo.models import Models, load_models
from dprag.lab.demo.progress import Progress
from dprag.lab.demo.report import render_report, write_plots
from dprag.lab.demo.traffic import build_script
from dprag.rag_adapters.datasets.clinic import generate_clinic_corpus

MARKER = "demo-run.json"


def _prepare_out(out: Path) -> None:
    """Create ``out``; a previous demo run there (marker file) is replaced; anything else is refused."""
    if out.exists():
        if not out.is_dir():
            raise InvalidParameterError("out", "exists and is not a directory", str(out))
        entries = [p for p in out.iterdir()]
        if entries and not (out / MARKER).is_file():
            raise InvalidParameterError(
                "out",
                "is a non-empty directory that holds no previous demo run; choose a new or empty directory",
                str(out),
            )
        for name in (
            "provider",
            "provider-2",
            "provider.vkey",
            "origin.txt",
            "accounts",
            "bundle",
            "lowk",
            "plots",
            "auditor-zk",
            "receipts.jsonl",
            "verdict.json",
            "report.md",
            "answers.jsonl",
            MARKER,
        ):
            p = out / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
    out.mkdir(parents=True, exist_ok=True)


def run_demo(
    out: str | os.PathLike,
    cfg: DemoConfig,
    *,
    progress: bool = True,
    echo: Callable[[str], None] = click.echo,
    models: Models | None = None,
) -> DemoResult:
    """Run the demo into ``out`` (see the module docstring); returns the verdicts, rows and timings. ``models``: the
    models to serve with (tests; default ``load_models(cfg.model)``)."""
    out = Path(out)
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    prog = Progress(progress)
    p = cfg.privacy
    policy = build_policy(cfg)
    if cfg.model not in ("real", "tiny", "toy"):
        raise InvalidParameterError("model", "must be 'real', 'tiny' or 'toy'", cfg.model)
    # data and script first: a bad configuration is refused before anything is written or loaded
    t = time.perf_counter()
    corpora = {
        ts.name: generate_clinic_corpus(
            ts.seed,
            n_conditions=ts.n_conditions,
            support_min=ts.support[0],
            support_max=ts.support[1],
            n_distractors=ts.n_distractors,
        )
        for ts in cfg.tenants
    }
    script, target = build_script(cfg, corpora)
    accounts = {a: ts.name for ts in cfg.tenants for a in ts.accounts}
    accounts.update({a: cfg.coalition_tenant for a in cfg.colluders})
    counts: dict[str, int] = {}
    for r in script:
        counts[r.account] = counts.get(r.account, 0) + 1
    if max(counts.values()) > p.n:
        raise InvalidParameterError(
            "privacy.n", f"an account of the script asks {max(counts.values())} questions > n = {p.n}", p.n
        )
    schema = {name: len(c.documents) for name, c in corpora.items()}
    timings["generate corpora"] = time.perf_counter() - t
    _prepare_out(out)
    (out / MARKER).write_text(json.dumps({"config": _jsonable(asdict(cfg))}, indent=1, sort_keys=True))
    echo(f"dprag demo -> {out}")
    echo("  " + cfg.sizes_line())
    echo("  corpora: " + ", ".join(f"{k} {v} records" for k, v in schema.items()))

    # models -----------------------------------------------------------------------------------------------
    t = time.perf_counter()
    models = load_models(cfg.model, prog.counter) if models is None else models
    timings["load models"] = time.perf_counter() - t
    echo(
        f"  models: {models.names['embedder']}; {models.names['generator']} (loaded in {timings['load models']:.1f} s)"
    )

    # Phase A: open the window (embeds and commits the tenant indexes) --------------------------------------
    t = time.perf_counter()
    recording = Recording(models.generator)  # keeps each private answer's batch for the latency floor (§5)
    keys = _account_keys(cfg, accounts, "main")
    svc = ProviderService.create(
        out / "provider",
        policy=policy,
        seed=derived_bytes(cfg, "s_W/epoch-1"),
        embedder=models.embedder,
        embedder_descriptor=models.descriptor(schema),
        generator=recording,
        tenants={k: c.documents for k, c in corpora.items()},
        accounts={a: (t, keys[a].vkey) for a, t in accounts.items()},
    )
    clients = _clients(svc, models, keys, out / "accounts")
    timings["open window (embed + commit)"] = time.perf_counter() - t
    zk = None
    if cfg.zk_tenants:  # the auditor makes the Groth16 key and hands the provider the proving key
        try:
            zk = auditor_zk_setup(cfg, policy, schema, models.embedder.dim, out / "auditor-zk")
        except BaseException:
            svc.close()
            raise
        timings["zk key (auditor: " + ("cached development key" if zk.cached else "development setup") + ")"] = (
            zk.seconds
        )
        echo(
            f"  zk: auditor's development key for {zk.tenant} (N = {zk.n}, {zk.constraints:,} constraints, domain "
            f"2^{zk.domain.bit_length() - 1}) {'loaded from its cache' if zk.cached else 'made'} in {zk.seconds:.1f} s"
        )

    # Phase B: serve, in two epochs of one log (spec/protocol.md §3.3, §3.4) ------------------------------------
    # Halfway through the script the provider rotates its signing key (a key leaf signed by the old key, the first
    # checkpoint covering it signed by both) and starts a second epoch with a fresh seed (a policy leaf). Spend and
    # counters simply continue in the one log, so the verdict's ε covers both epochs; each account's client follows
    # the rotation from the key it pinned, through the rotation's inclusion under the old key's checkpoint.
    t = time.perf_counter()
    served: list[Served] = []
    batches: list = []  # per served request: its voters' and fallback's batch (latency.Recording.take)
    loads: list[float] = []  # the 1-minute load average at each request (the machine is shared)
    receipts: list[str] = []
    half = len(script) // 2
    first_key = svc.signer.vkey()
    first_genesis = svc.ledger.leaf(0)
    n_proofs = 0
    try:
        for i, req in enumerate(prog.bar(script, total=len(script), desc="serving queries")):
            if i == half:
                svc.rotate_key(NoteSigner.generate(f"dprag-{cfg.window}-2"))
                svc.set_policy(build_policy(cfg, window=cfg.window), seed=derived_bytes(cfg, "s_W/epoch-2"))
            loads.append(os.getloadavg()[0])
            t0 = time.perf_counter()
            r = clients[req.account].ask(svc, req.question)
            served.append(Served(req, svc.policy.window, r.pos, r.answer, r.citations, time.perf_counter() - t0))
            batches.append(recording.take())
            kept = clients[req.account].receipts[-1]  # what the account hands the auditor: receipt, citations, request
            receipts.append(encode({k: kept[k] for k in ("receipt", "top", "request")}).decode())
        timings["serve queries (two epochs; key rotated halfway)"] = time.perf_counter() - t
        (out / "receipts.jsonl").write_text("".join(x + "\n" for x in receipts))
        if zk is not None:  # the provider proves every zk-tenant query with the auditor's proving key
            t = time.perf_counter()
            n_proofs += svc.attest(zk.pk)
            timings["zk prove (provider)"] = time.perf_counter() - t
            echo(f"  zk: {n_proofs} Groth16 proof(s)")
        bundle = svc.export_bundle(out / "bundle")  # one log: both epochs, the rotation and every query
        budget_units = int(svc.budget.units[0])
        # model reloads: every epoch serves with the one generator loaded at the start (the recorder around it)
        same_generator = all(ep.generator is recording for ep in svc.epochs)
    finally:
        svc.close()
    with open(out / "answers.jsonl", "w") as f:
        for s, b in zip(served, batches, strict=True):
            f.write(
                json.dumps(
                    {
                        "pos": s.pos,
                        "account": s.request.account,
                        "tenant": s.request.tenant,
                        "kind": s.request.kind,
                        "question": s.request.question,
                        "answer": s.answer,
                        "gold": list(s.request.item.answers) if s.request.item else None,
                        "citations": s.citations,
                        "seconds": round(s.seconds, 3),
                        "generation_seconds": None if b is None else round(b.seconds, 3),
                    }
                )
                + "\n"
            )

    # Phase D: verify --------------------------------------------------------------------------------------
    t = time.perf_counter()
    # the auditor pins the provider key it received out of band when the history opened (the demo writes it beside
    # the bundle; the rotation to the second key is signed by it), so the report's re-run command reproduces this
    # verdict with the same flags ...
    (out / "provider.vkey").write_text(first_key)
    # ... and the log's origin (spec/protocol.md §3.1), so a fresh log under the same key would FAIL
    (out / "origin.txt").write_text(origin_of(first_genesis) + "\n")
    verdict = verify(
        bundle,
        receipts=out / "receipts.jsonl",
        mode="full",
        key=out / "provider.vkey",
        origin=(out / "origin.txt").read_text().strip(),
        theta=p.theta,
        coalition_window=p.window,
        zk_vkey=None if zk is None else zk.vk_path,
    ).to_json()
    timings["verify"] = time.perf_counter() - t
    (out / "verdict.json").write_text(json.dumps(verdict, indent=1, sort_keys=True) + "\n")
    echo(
        f"  verdict: {verdict['verdict']}"
        + (
            f" ε = {verdict['epsilon']:.4g}, δ = {verdict['delta']:.3g}"
            if verdict["verdict"] == "PASS"
            else " — " + "; ".join(verdict["reasons"][:3])
        )
    )

    # second window: the same coalition against a lower k_max ------------------------------------------------
    t = time.perf_counter()
    lowk = _run_lowk(out / "lowk", cfg, models, corpora, script, prog)
    timings[f"k_max = {p.lowk_k_max} window (serve + verify)"] = time.perf_counter() - t
    echo(
        f"  k_max = {p.lowk_k_max} window: {lowk['verdict']}"
        + (" — " + "; ".join(lowk["reasons"]) if lowk["reasons"] else "")
    )

    # utility: baselines on the same honest questions ---------------------------------------------------------
    t = time.perf_counter()
    analysis = analyse(cfg, models, corpora, served, target, bundle, budget_units, prog, policy, batches)
    timings["baselines (non-RAG, non-private RAG)"] = time.perf_counter() - t
    t = time.perf_counter()
    honest_batches = [(s, b) for s, b in zip(served, batches, strict=True) if s.request.kind == "honest"]
    samples = [
        (s.seconds, b, prompt, p.max_tokens)
        for (s, b), prompt in zip(honest_batches, analysis["npr_prompts"], strict=True)
        if b is not None
    ][: cfg.latency_questions]
    analysis["latency"] = latency_sample(models.generator, samples)
    analysis["served_split"] = served_split([(s.seconds, b) for s, b in honest_batches], loads)
    if analysis["served_split"] is not None:
        analysis["served_split"]["same_generator"] = same_generator
        analysis["served_split"]["release_period"] = policy.release_period
    timings["latency floor (sample)"] = time.perf_counter() - t
    t = time.perf_counter()
    write_plots(out / "plots", analysis, cfg)
    timings["plots"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t_start

    analysis["zk"] = None if zk is None else {"setup": zk, "proofs": n_proofs}
    result = DemoResult(
        out=out,
        verdict=verdict,
        lowk_verdict=lowk,
        rows=analysis["rows"],
        served=served,
        timings=timings,
        extra=analysis,
    )
    (out / "report.md").write_text(render_report(cfg, policy, models, schema, result, script))
    echo(f"  report: {out / 'report.md'}  (total {timings['total']:.0f} s)")
    return result


def _clients(svc: ProviderService, models: Models, keys: dict, directory: Path) -> dict[str, AccountClient]:
    """Each account's client: it signs its requests and computes Q itself with the committed embedder."""
    return {
        a: AccountClient(
            a,
            svc.policy.window,
            k,
            provider_vkey=svc.signer.vkey(),
            embedder=models.embedder,
            embedding_scale=svc.embedder_descriptor["embedding_scale"],
            directory=directory / a,
        )
        for a, k in keys.items()
    }


def _run_lowk(d: Path, cfg: DemoConfig, models: Models, corpora, script, prog) -> dict:
    """A second window: the coalition's first probe of every colluder, under a policy with k_max = lowk, on a corpus
    of its own (generated with another seed, the coalition tenant's shape): serving the main corpus again in a
    window of its own would start its documents' spend at zero — a second history over the same corpus, which
    voids the main one's ε (spec/protocol.md §3.1). What the estimator flags is the probes' similarity, not the
    documents they retrieve."""
    main = next(ts for ts in cfg.tenants if ts.name == cfg.coalition_tenant)
    ten = f"{main.name}-lowk"
    corpora = {
        ten: generate_clinic_corpus(
            f"{main.seed}/lowk",
            n_conditions=main.n_conditions,
            support_min=main.support[0],
            support_max=main.support[1],
            n_distractors=main.n_distractors,
        )
    }
    policy = build_policy(cfg, k_max=cfg.privacy.lowk_k_max, window=f"{cfg.window}-lowk", tenants=(main.name,))
    policy = _for_tenant(policy, main.name, ten)
    probes, seen = [], set()
    for r in script:
        if r.kind == "probe" and r.account not in seen:
            probes.append(r)
            seen.add(r.account)
    keys = _account_keys(cfg, cfg.colluders, "lowk")
    svc = ProviderService.create(
        d / "provider",
        policy=policy,
        seed=derived_bytes(cfg, "s_W/lowk"),
        embedder=models.embedder,
        embedder_descriptor=models.descriptor({ten: len(corpora[ten].documents)}),
        generator=models.generator,
        tenants={ten: corpora[ten].documents},
        accounts={a: (ten, keys[a].vkey) for a in cfg.colluders},
    )
    clients = _clients(svc, models, keys, d / "accounts")
    lines = []
    try:
        for r in prog.bar(probes, total=len(probes), desc=f"k_max={cfg.privacy.lowk_k_max} window"):
            s = clients[r.account].ask(svc, r.question)
            lines.append(encode({"receipt": s.receipt, "top": s.citations}).decode() + "\n")
        (d / "receipts.jsonl").write_text("".join(lines))
        bundle = svc.export_bundle(d / "bundle")
    finally:
        svc.close()
    v = verify(
        bundle, receipts=d / "receipts.jsonl", mode="full", theta=cfg.privacy.theta, coalition_window=cfg.privacy.window
    ).to_json()
    (d / "verdict.json").write_text(json.dumps(v, indent=1, sort_keys=True) + "\n")
    return v


def _account_keys(cfg: DemoConfig, accounts, window: str) -> dict[str, AccountKey]:
    """Each account's key: from the OS CSPRNG, or derived from ``--seed`` (``config.derived_bytes``)."""
    return {
        a: AccountKey.generate() if cfg.seed is None else AccountKey(derived_bytes(cfg, f"account/{window}/{a}"))
        for a in accounts
    }


def _for_tenant(policy, old: str, new: str):
    """``policy`` with tenant ``old`` renamed ``new`` in its tenant lists."""
    from dataclasses import replace

    r = policy.retrieval
    rename = lambda ts: tuple(new if t == old else t for t in ts)  # noqa: E731
    return replace(
        policy, retrieval=replace(r, enabled_tenants=rename(r.enabled_tenants), zk_tenants=rename(r.zk_tenants))
    )


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x
