"""The demo's report: ``report.md`` (verdict, ε per channel, attestation, coalition estimate, utility, sizes,
run times, answers) and the plots under ``plots/``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dprag.accounting.collusion import exact_sigma
from dprag.audit.protocol.policy import Policy
from dprag.lab.demo.analysis import DemoResult
from dprag.lab.demo.config import SENSITIVITY, DemoConfig, DemoPrivacy, mechanism_line, retrieval_line
from dprag.lab.demo.models import Models
from dprag.lab.demo.traffic import Request


def write_plots(d: Path, a: dict, cfg: DemoConfig) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d.mkdir(parents=True, exist_ok=True)
    # 1. accuracy per method
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    rows = a["rows"]
    names = [r["method"] for r in rows]
    acc = [r["match_accuracy"] for r in rows]
    f1 = [r["token_f1"] for r in rows]
    x = np.arange(len(rows))
    b1 = ax.bar(x - 0.2, acc, 0.4, label="match accuracy", color="#2a7")
    b2 = ax.bar(x + 0.2, f1, 0.4, label="token F1", color="#48c", alpha=0.7)
    ax.bar_label(b1, fmt="%.2f", fontsize=8)
    ax.bar_label(b2, fmt="%.2f", fontsize=8)
    ax.set_xticks(x, [n.replace(" (", "\n(") for n in names], fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("score")
    ax.set_title(f"Honest questions (n = {rows[0]['questions']}), {cfg.model} models")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "accuracy.png", dpi=110)
    plt.close(fig)
    # 2. per-document spend, in units of the per-query cost
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    cu = a["cost_units"] or 1
    m_max = max(1, a["budget_units"] // cu)
    width = 0.8 / len(a["spend"])
    for k, (ten, sp) in enumerate(a["spend"].items()):
        times = sp // cu
        counts = np.bincount(times, minlength=m_max + 1)
        bars = ax.bar(
            np.arange(m_max + 1) + k * width - 0.4 + width / 2, counts, width, label=f"{ten} ({sp.size} docs)"
        )
        ax.bar_label(bars, fontsize=8)
    ax.set_xticks(np.arange(m_max + 1))
    ax.set_xlabel(f"queries charged to the document (budget M = {m_max})")
    ax.set_ylabel("documents")
    ax.set_title("Per-document filter spend after the window")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "spend.png", dpi=110)
    plt.close(fig)


#: score gap (units of spec/protocol.md §4, cosine x 1024) between the records supporting a question and the
#: unrelated ones on the public calibration corpus (supporting median cosine 0.566, unrelated 99th percentile 0.470)
CITATION_GAP = 100


def epsilon_acc_for_sigma(sigma: float, n: int, sensitivity: int, delta_acc: float) -> float:
    """The smallest ε_acc (to 0.1 %) at which ``exact_sigma(ε_acc, δ_acc, n, sensitivity)`` <= ``sigma``:
    the per-account budget at which the citations' noise drops below a score gap (bisection; exact_sigma
    decreases in ε)."""
    lo, hi = 1e-3, 1e5
    if exact_sigma(hi, delta_acc, n, sensitivity) > sigma:
        return float("inf")
    while hi / lo > 1.001:
        mid = (lo * hi) ** 0.5
        if exact_sigma(mid, delta_acc, n, sensitivity) > sigma:
            lo = mid
        else:
            hi = mid
    return hi


def citation_explanation(p: DemoPrivacy, sigma: float) -> str:
    """Why the citations of account-level DP are near chance, and what setting would make them useful."""
    narrow = int(0.3 * 1024) + 1  # a public clip range of cosine [0.4, 0.7]
    e8 = epsilon_acc_for_sigma(CITATION_GAP, p.n, SENSITIVITY, p.delta_acc)
    e1 = epsilon_acc_for_sigma(CITATION_GAP, 1, SENSITIVITY, p.delta_acc)
    e1n = epsilon_acc_for_sigma(CITATION_GAP, 1, narrow, p.delta_acc)
    return (
        f"Why near chance: account-level DP hides any one document from everything an account sees over its "
        f"n = {p.n} queries, and one document can move its own score across the whole clipped range "
        f"(sensitivity {SENSITIVITY} units), so σ = {sigma:,.0f} units at ε_acc = {p.epsilon_acc} — "
        f"{sigma / (SENSITIVITY - 1):.0f}x the whole score range, while supporting and unrelated records differ by "
        f"about {CITATION_GAP} units (cosine 0.1): the noisy top-K is close to a uniform draw. Citations become "
        f"useful once σ falls below that gap: at this clip range that takes ε_acc ≈ {e8:,.0f} per account at n = "
        f"{p.n} ({e1:,.0f} at n = 1); a narrow public clip range (cosine [0.4, 0.7], sensitivity {narrow}) with "
        f"n = 1 brings it to ε_acc ≈ {e1n:.0f} — a retrieval ε that certifies little. At ε_acc = {p.epsilon_acc} "
        "the citations are there to be audited, not to be read."
    )


def rerun_command(out: Path, p: DemoPrivacy, vk_flag: str = "") -> str:
    """The exact ``dprag audit verify`` invocation of the demo's verification (same key, θ, window and mode)."""
    window = "" if p.window is None else f" --coalition-window {p.window}"
    origin = (out / "origin.txt").read_text().strip() if (out / "origin.txt").is_file() else None
    return (
        f"dprag audit verify {out / 'bundle'} --receipts {out / 'receipts.jsonl'} --key {out / 'provider.vkey'} "
        + (f"--origin {origin} " if origin else "")
        + f"--mode full --theta {p.theta!r}{window}{vk_flag}"
    )


def _fmt(x, nd=3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        if x != x:
            return "–"
        return f"{x:.{nd}f}"
    return str(x)


def render_report(
    cfg: DemoConfig, policy: Policy, models: Models, schema: dict, res: DemoResult, script: list[Request]
) -> str:
    v, a, p = res.verdict, res.extra, cfg.privacy
    ch = v.get("channels") or {}
    retr, gen = ch.get("retrieval", {}), ch.get("generation", {})
    L = []
    L.append(f"# dprag demo report ({cfg.size} run, {cfg.model} models)\n")
    L.append(
        f"**Verdict: {v['verdict']}**"
        + (
            f" — ε = {v['epsilon']:.4f}, δ = {v['delta']:.3g} (relation: {ch.get('relation')})"
            if v["verdict"] == "PASS"
            else ""
        )
    )
    if v.get("headline"):
        L.append(f"\nThe verifier's first line: `{v['headline']}`")
    if v["reasons"]:
        L.append("\nReasons:\n" + "\n".join(f"- `{r}`" for r in v["reasons"]))
    zkx = a.get("zk")
    vk_flag = f" --zk-vkey {zkx['setup'].vk_path}" if zkx else ""
    L.append(f"\nRe-run the auditor (the same verdict): `{rerun_command(res.out, p, vk_flag)}`\n")
    L.append("## What the ε covers\n")
    L.append("| channel | ε | δ | covers |\n|---|---|---|---|")
    if retr:
        L.append(
            f"| retrieval (citations) | {retr['epsilon']:.4f} | {retr['delta']:.3g} | {retr['covers']}; "
            f"{retr['releases']} discrete-Gaussian releases, {retr['method']} |"
        )
    if gen:
        per_delta = (
            f"; δ = n·δ_q·(1 + e^(M·ε_q)) with δ_q = {gen['per_query_delta']:g} per charge and n = "
            f"{gen['max_charges_per_doc']} charges per document at most"
            if gen.get("per_query_delta")
            else ""
        )
        L.append(
            f"| generation (answers) | {gen['epsilon']:.4f} | {gen['delta']:.3g} | {gen['covers']}; replace-one = "
            f"2 × add/remove ({gen['epsilon_add_remove']:.4f}) = 2 · M · ε_q with M = "
            f"{gen['max_queries_per_doc']}, ε_q = {gen['per_query_epsilon']:.4f}{per_delta} |"
        )
    if v["verdict"] == "PASS":
        L.append(
            f"| **composed** | **{v['epsilon']:.4f}** | {v['delta']:.3g} | an adversary who sees both channels "
            f"(basic composition of the two channels under replace-one) |"
        )
    if retr.get("paper_eq_5_2_leading") is not None:
        L.append(
            f"\nFor comparison, 002's leading term √k_max·ε_acc = {retr['paper_eq_5_2_leading']:.4f} "
            "is not a certified bound; the verdict reports the certified value above."
        )
    L.append("\n**Attestation** (what the verifier re-checked, per channel):\n")
    for ch, text in sorted(v["attestation"].items()):
        L.append(f"- {ch}: {text}")
    if zkx:
        z = zkx["setup"]
        L.append(
            f"\n**Zero-knowledge proofs (tenant {z.tenant}).** {zkx['proofs']} of its queries carry a Groth16 proof "
            f"that the citations are the top-K of the committed index's scores plus the committed noise (every one "
            f"of its N = {z.n} documents' scores proven; d = {z.dim}, {z.constraints:,} constraints, domain "
            f"2^{z.domain.bit_length() - 1}); the verifier checked {v['checked'].get('zk_proofs', 0)} under the "
            f"auditor's verification key `{z.vk_path}`. **Who made the key:** the demo acting as the AUDITOR ran "
            f"dprag's development setup ({'reused from the auditor key cache' if z.cached else 'made in this run'}: "
            f"`{z.key_file}`) and handed the provider only the proving key; the provider never ran a setup. "
            "DEVELOPMENT ONLY: whoever runs that setup knows its toxic waste, so in a deployment the auditor makes "
            "the key itself or imports a multi-party ceremony `.zkey`; proofs under a key the provider made leave "
            "the attestation at replay (spec/zk.md)."
        )
    L.append("\n**Trust model** (what no verifier can see; spec/threat-model.md):\n")
    for t in v.get("trust", []):
        L.append(f"- {t}")
    L.append(
        f"\nProvider key {v.get('provider_key')} "
        f"({'pinned by the auditor' if v.get('key_pinned') else 'taken from the bundle, not pinned'}); "
        f"{v['checked'].get('queries_with_account_confirmed_q', 0)} of {v['checked'].get('queries', 0)} queries "
        "carry a query embedding the account computed and signed itself.\n"
    )
    L.append(
        "**Checked:** " + ", ".join(f"{k} = {n}" for k, n in sorted(v["checked"].items())) + f" (mode {v['mode']})\n"
    )
    L.append("## Coalition estimate (002 §5.5, spec/protocol.md §6)\n")
    c_hat = v["checked"].get("coalition_estimate")
    L.append(
        f"ĉ = **{c_hat}** with θ = {p.theta}, window = {p.window} ledger entries; committed k_max = {p.k_max} "
        f"(ε is computed from k_max, never from ĉ). Colluding accounts: {', '.join(cfg.colluders)}.\n"
    )
    L.append(
        "Clusters spanning ≥ 2 accounts: "
        + ("; ".join("{" + ", ".join(sorted(c)) + "}" for c in a["clusters"]) or "none")
        + "\n"
    )
    L.append(
        f"Cosine between the coalition's probes (different accounts): {_fmt(a['min_coalition_cos'])} – "
        f"{_fmt(a['max_coalition_cos'])}; largest cosine between honest queries of different accounts: "
        f"{_fmt(a['max_cross_honest_cos'])}.\n"
    )
    L.append(
        "| θ | " + " | ".join(f"{t:g}" for t, _ in a["theta_curve"]) + " |\n|---|" + "---|" * len(a["theta_curve"])
    )
    L.append("| ĉ(θ) | " + " | ".join(str(c) for _, c in a["theta_curve"]) + " |\n")
    lk = res.lowk_verdict
    if lk is not None:
        L.append(
            f"Second window (`{res.out / 'lowk'}`): the same colluders' probes under a policy committed with "
            f"k_max = {p.lowk_k_max}: **{lk['verdict']}**"
            + (" — " + "; ".join(f"`{r}`" for r in lk["reasons"]) if lk["reasons"] else "")
            + "\n"
        )
    L.append("## Utility on the honest questions\n")
    if v["verdict"] == "PASS":
        L.append(
            f"At composed ε = {v['epsilon']:.4f} (retrieval {retr['epsilon']:.4f} + generation {gen['epsilon']:.4f}, "
            f"δ = {v['delta']:.3g}, replace-one), on the same {len(a['honest'])} questions:\n"
        )
    tcols = [f"accuracy {t.name}" for t in cfg.tenants]
    L.append("| method | private | questions | match accuracy | token F1 | " + " | ".join(tcols) + " | note |")
    L.append("|---|---|---|---|---|" + "---|" * len(tcols) + "---|")
    for r in res.rows:
        L.append(
            f"| {r['method']} | {'yes' if r['private'] else 'no'} | {r['questions']} | "
            f"{_fmt(r['match_accuracy'])} | {_fmt(r['token_f1'])} | "
            + " | ".join(_fmt(r[c]) for c in tcols)
            + f" | {r['note']} |"
        )
    ex = a.get("expectation")
    if ex is not None:
        L.append(headline_paragraph(ex, cfg.npr_k))
        L.append(
            "\n| tenant | questions | expected private (exact) | private, this draw | non-private RAG |\n"
            "|---|---|---|---|---|"
        )
        for t, (e, d, h, n) in ex["by_tenant"].items():
            L.append(f"| {t} | {n} | {e:.2f} | {d} | {h} |")
        L.append("")
    sup = a["supported_charged"]
    per_query = [len(a["charged_per_query"][s.window, s.pos]) for s in a["honest"]]
    L.append(
        f"\n{'MuRAG-Ada' if p.algorithm == 'murag-ada' else 'MuRAG'} charged on average {np.mean(per_query):.1f} "
        f"documents per honest question ({np.mean(sup):.1f} of them records that support the asked fact); "
        f"m = {p.m} voters read one document each (Top-K, K = m, padded with empty documents)."
    )
    if a["citation_precision"] is not None:
        per = "; ".join(
            f"{t}: {pr:.3f} vs {ch:.3f} ({k} questions)" for t, (pr, ch, k) in sorted(a["citations_by_tenant"].items())
        )
        L.append(
            f"Citations (retrieval channel, K = {p.K}, σ = {policy.retrieval.sigma:.1f} score units against a "
            f"score range of {SENSITIVITY - 1}): precision {a['citation_precision']:.3f} vs "
            f"{a['citation_chance']:.3f} for uniformly random documents (per tenant: {per})."
        )
        L.append(citation_explanation(p, policy.retrieval.sigma) + "\n")
    L.append("### The coalition's extraction probe\n")
    tg = a["target"]
    L.append(
        f'Target: record {tg.doc_id} of {cfg.coalition_tenant} (a routine visit), secret "{tg.kind}" = `{tg.secret}`.\n'
    )
    L.append(
        "| pos | account | question | answer | secret leaked | target charged | docs charged |\n"
        "|---|---|---|---|---|---|---|"
    )
    for pr in a["probes"]:
        L.append(
            f"| {pr['pos']} | {pr['account']} | {pr['question']} | {_md(pr['answer'])} | "
            f"{'**yes**' if pr['leaked'] else 'no'} | {'yes' if pr['target_charged'] else 'no'} | {pr['charged']} |"
        )
    if a["npr_probe"] is not None:
        L.append(
            f"\nThe same probe against non-private RAG (top-{cfg.npr_k}): {_md(a['npr_probe'])} — secret leaked: "
            f"**{'yes' if a['npr_probe_leaked'] else 'no'}**."
        )
    L.append(
        f"With M = {p.M}, the target record can be charged by at most {p.M} quer{'y' if p.M == 1 else 'ies'} "
        "in the window, whichever account asks: later probes get no context from it (the filter is global "
        "across accounts).\n"
    )
    L.append("## Plots\n")
    L.append("![accuracy](plots/accuracy.png)\n\n![per-document spend](plots/spend.png)\n")
    L.append("## Sizes and parameters\n")
    L.append(f"- {cfg.sizes_line()}")
    L.append(f"- models: {models.names['embedder']}; {models.names['generator']}")
    L.append("- corpora: " + ", ".join(f"{k}: {n} records" for k, n in schema.items()))
    L.append(f"- ledger: {len(script) + 1} leaves (genesis + {len(script)} queries)")
    L.append(
        f"- retrieval: ε_acc = {p.epsilon_acc}, δ_acc = {p.delta_acc:g}, n = {p.n}, K = {p.K}, "
        f"sensitivity = {SENSITIVITY}, σ = {policy.retrieval.sigma:.2f} (accounting.collusion.exact_sigma), "
        f"table sampler tail {p.sampler_tail}σ, TV ≤ {p.sampler_tv:g}"
    )
    L.append(f"- coalition: k_max = {p.k_max}, δ_policy = {p.delta_policy:g}, θ = {p.theta}, window = {p.window}")
    L.append(
        f"- generation: {mechanism_line(p)}; {retrieval_line(p)}, M = {p.M}; per-document filter budget M·ε_q = "
        f"{_fmt(gen.get('epsilon_add_remove'), 2)} ({res.extra['budget_units']} filter units), per-query "
        f"cost ε_q = {_fmt(gen.get('per_query_epsilon'), 2)} ({res.extra['cost_units']} units; "
        f"spec/accounting/filters.md)"
    )
    L.append("\n## Run times (this machine)\n")
    L.append("| step | seconds |\n|---|---|")
    for k, s in res.timings.items():
        L.append(f"| {k} | {s:.1f} |")
    per = [s.seconds for s in res.served]
    if per:
        L.append(
            f"\nPer served query: mean {np.mean(per):.2f} s, max {np.max(per):.2f} s "
            f"(honest {np.mean([s.seconds for s in res.served if s.request.kind == 'honest']):.2f} s)."
        )
    lat = a.get("latency")
    if lat:
        L.append(
            f"\nLatency of a private answer (spec/demo.md step 7; {lat['questions']} honest questions, in this run): "
            f"served request median {lat['private']['median']:.2f} s (p90 {lat['private']['p90']:.2f} s); its floor — "
            f"the same voter and fallback prompts prefilled and decoded in one padded batch — median "
            f"{lat['floor']['median']:.2f} s (p90 {lat['floor']['p90']:.2f} s): **{lat['ratio_private_to_floor']:.2f}x "
            f"the floor**; Non-Private-RAG alone on the same questions median {lat['npr']['median']:.2f} s: "
            f"{lat['ratio_private_to_npr']:.2f}x (medians of per-question ratios)."
        )
    if a.get("served_split"):
        L.append(latency_split_paragraph(a["served_split"], lat))
    L.append("\n## Answers\n")
    L.append("| window | pos | account | question | gold | private answer | Non-RAG |\n|---|---|---|---|---|---|---|")
    for s, nr in zip(a["honest"], a["non_rag"], strict=False):
        L.append(
            f"| {s.window} | {s.pos} | {s.request.account} | {s.request.question} | {s.request.item.answers[0]} | "
            f"{_md(s.answer)} | {_md(nr)} |"
        )
    L.append(
        "\nFiles: `bundle/` (public/ may be published; auditor/ is confidential), `receipts.jsonl`, "
        "`verdict.json`, `answers.jsonl`, `lowk/`, `plots/`, `auditor-zk/` (the auditor's verification key); "
        "`provider/` is the provider's private state of the log (signing keys, each epoch's seed).\n"
    )
    return "\n".join(L) + "\n"


def headline_paragraph(ex: dict, npr_k: int) -> str:
    """The utility headline: the exact expected number of correct private releases with the draw's interval, the
    draw, non-private RAG's count and the expectation's ratio to it."""
    n = ex["questions"]
    lo, hi = ex["interval"]
    return (
        f"\n**Expected correct private answers: {ex['expected']:.2f} of {n}** ({ex['expected'] / n:.3f}; exact given "
        f"the voters' answers: the seen selection's law at ε = {ex['epsilon']:g}, δ_q = {ex['delta']:g}, as "
        f"`dprag experiment normalizer-check` computes it; ⊥ counts as correct when the fallback text is). "
        f"95 % interval of one draw: [{lo}, {hi}] (the exact law of the count, a Poisson-binomial of the per-question "
        f"chances); this run's draw: **{ex['draw']}**. Non-private RAG (top-{npr_k}, greedy: no sampling, so its "
        f"expectation is its count): **{ex['npr']} of {n}**. **Headline: "
        f"{_fmt(ex['ratio'], 2)}x non-private RAG** (the expectation's ratio; this draw's: "
        f"{_fmt(ex['draw_ratio'], 2)}x). {ex['in_support']} of {n} served answers lie in the law's support (a key a "
        "voter wrote, or the fallback text)."
    )


def latency_split_paragraph(sp: dict, lat: dict | None) -> str:
    """Where a served private answer's time goes (spec/demo.md step 7)."""
    load = sp.get("load")
    text = (
        f"\nSplit of a served private answer ({sp['requests']} honest requests, medians): served "
        f"{sp['served']:.2f} s = "
        f"generation (the voters' batch and the fallback, {sp['generator_calls']:.0f} generator call(s)) "
        f"{sp['generation']:.2f} s ({sp['generation_share']:.0%}) + the rest of the request (embedding, retrieval "
        f"noise, the charge's constant-work write transaction, ledger, checkpoint and receipt signatures, the answer's "
        f"durable commit, the client's checks) {sp['rest']:.2f} s. Generation used {sp['generation_cpu']:.2f} CPU s: "
        f"{sp['cpu_share']:.0%} of the {sp['cores']} cores over its wall time (below 100 % the process waited for the "
        "shared machine). Release clock: "
        + (
            "off (the policy sets no release period: nothing waits for a grid)"
            if sp.get("release_period") is None
            else f"period {sp['release_period']} s"
        )
        + "; model reloads: "
        + ("none (every epoch serves with the generator loaded at the start)" if sp.get("same_generator") else "yes")
        + "."
    )
    if lat and lat.get("split"):
        x = lat["split"]
        text += (
            f" On the floor's {lat['questions']} questions: generation {x['generation']['median']:.2f} s against the "
            f"floor's {lat['floor']['median']:.2f} s ({x['ratio_generation_to_floor']:.2f}x in wall time, measured at "
            f"another moment of the shared machine); in CPU time {x['generation_cpu']['median']:.2f} s against the "
            f"floor's {x['floor_cpu']['median']:.2f} s (**{x['ratio_generation_cpu_to_floor_cpu']:.2f}x**, the figure "
            f"that does not depend on the load); the rest {x['rest']['median']:.2f} s."
        )
    if load:
        text += (
            f" 1-minute load average at the requests: {load['min']:.2f}–{load['max']:.2f} "
            f"(median {load['median']:.2f})."
        )
    return text


def _md(s: str | None) -> str:
    if s is None:
        return "–"
    s = " ".join(str(s).split()).replace("|", "\\|")
    return s if s else "(empty)"
