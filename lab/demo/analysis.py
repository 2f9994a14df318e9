"""What a demo run served and what it measured: the served queries, the run's result, and the analysis of a
window (utility against the Non-RAG and non-private RAG baselines, per-document spend, citations, the
coalition estimator as the verifier runs it)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dprag.accounting.protocols import Prompt
from dprag.audit.protocol import commitments as cm
from dprag.audit.protocol.encoding import decode
from dprag.audit.verify.estimator import coalition_clusters, coalition_size_curve
from dprag.lab.demo.config import PROBE_ANSWER_TOKENS, SCORE_CLIP, SCORE_SHIFT, DemoConfig, mechanism_label
from dprag.lab.demo.models import Models
from dprag.lab.demo.progress import NoBar
from dprag.lab.demo.traffic import Request
from dprag.rag_adapters.metrics import contains_answer, token_f1


@dataclass
class Served:
    request: Request
    window: str  # the window of the history that served it (spec/protocol.md §3.1)
    pos: int
    answer: str
    citations: list[int] | None
    seconds: float


@dataclass
class DemoResult:
    out: Path
    verdict: dict
    lowk_verdict: dict | None
    rows: list[dict]
    served: list[Served]
    timings: dict
    extra: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.verdict.get("verdict") == "PASS"


def _batched_generate(generator, prompts: list[Prompt], max_tokens: int, batch: int, bar) -> list[str]:
    out: list[str] = []
    for i in range(0, len(prompts), batch):
        part = prompts[i : i + batch]
        if hasattr(generator, "generate_many"):
            out.extend(s.strip() for s in generator.generate_many(part, max_tokens))
        else:
            out.extend(generator.generate(p, max_tokens).strip() for p in part)
        bar.update(len(part))
    bar.close()
    return out


def _openings(bundle: Path) -> dict[int, dict]:
    lines = (bundle / "auditor" / "openings.jsonl").read_bytes().splitlines()
    return {op["pos"]: op for op in (decode(x) for x in lines if x)}


def _leaves(bundle: Path) -> list[dict]:
    data = (bundle / "public" / "leaves.bin").read_bytes()
    out, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i : i + 4], "big")
        out.append(json.loads(data[i + 4 : i + 4 + n]))
        i += 4 + n
    return out


def history_windows(bundle: Path) -> list[tuple[str, list[dict], dict[int, dict]]]:
    """The bundle's log as [(its window label, its leaves, its openings by position)] (one log per corpus)."""
    leaves = _leaves(bundle)
    return [(leaves[0]["window"], leaves, _openings(bundle))]


def _index(bundle: Path, tenant: str, dim: int) -> np.ndarray:
    return np.frombuffer((bundle / "auditor" / "index" / f"{tenant}.i16").read_bytes(), dtype="<i2").reshape(-1, dim)


def _key(params, answer: str, question: str) -> str:
    """The mechanism's key of one voter's answer; a normaliser that fails makes the voter abstain, as served."""
    try:
        return params.key(answer, question)
    except Exception:  # noqa: BLE001 - as accounting.rag.answer_vote._voter_key: the voter abstains
        return ""


def expected_releases(policy, items: list[tuple[Served, object]]) -> dict | None:
    """The exact expected number of correct private releases given the voters' answers (lab/release_law.py: the seen
    selection's law at the committed (ε, δ_q), as ``dprag experiment normalizer-check`` scores it), per honest question
    ``items`` = [(served, its recorded ``latency.Batch``)]: the voters' answers are the batch's rows but the last, a
    voter abstains as the mechanism decides (``abstain_empty``: every document the empty padding), keys are the
    committed normaliser's, and ⊥ releases the fallback row's text (correct when it contains a gold answer). None
    unless the committed mechanism is answer-level voting with the seen selection and every question was recorded.
    Also the 95 % central interval of the draw's count (the Poisson-binomial of the chances) and how many served
    answers lie in the law's support (a key some voter wrote, or the fallback text): all of them, or the recorded
    batch is not what was served."""
    from dprag.accounting.rag.common import EMPTY_DOCUMENT
    from dprag.lab.release_law import central_interval, correct_chance, voted_keys

    params = policy.rag_params()
    if getattr(params, "selection", None) != "seen" or not items or any(b is None for _, b in items):
        return None
    chances, in_support = [], 0
    for s, b in items:
        gold = s.request.item.answers
        voters, answers, fallback = b.prompts[:-1], b.outputs[:-1], b.outputs[-1].strip()
        gone = [params.abstain_empty and all(t == EMPTY_DOCUMENT for t in v.contexts) for v in voters]
        voted = voted_keys(answers, gone, s.request.question, lambda a, q, max_words: _key(params, a, q), 0)
        chances.append(
            correct_chance(voted, gold, params.epsilon, params.delta, fallback_correct=contains_answer(fallback, gold))
        )
        in_support += s.answer in voted or s.answer == fallback
    lo, hi = central_interval(chances, 0.05)
    return {
        "chances": chances,
        "expected": float(sum(chances)),
        "interval": (lo, hi),
        "questions": len(items),
        "in_support": in_support,
        "epsilon": params.epsilon,
        "delta": params.delta,
    }


def analyse(
    cfg: DemoConfig,
    models: Models,
    corpora,
    served: list[Served],
    target,
    bundle: Path,
    budget_units: int,
    prog,
    policy=None,
    batches: list | None = None,
) -> dict:
    p = cfg.privacy
    gen = models.generator
    honest = [s for s in served if s.request.kind == "honest"]
    probes = [s for s in served if s.request.kind == "probe"]
    dim = models.embedder.dim
    index = {t.name: _index(bundle, t.name, dim) for t in cfg.tenants}

    def top_docs(tenant: str, question: str, k: int) -> list[int]:
        q = cm.quantise_embeddings(np.asarray(models.embedder.embed([question])))[0]
        s = cm.integer_scores(index[tenant], q, SCORE_CLIP, SCORE_SHIFT)
        return [int(i) for i in np.lexsort((np.arange(s.size), -s))[:k]]

    # baselines (greedy, same LLM, same questions)
    nr_prompts = [Prompt(s.request.question) for s in honest]
    npr_reqs = honest + probes[:1]
    npr_prompts = [
        Prompt(
            s.request.question,
            tuple(
                corpora[s.request.tenant].documents[i]
                for i in top_docs(s.request.tenant, s.request.question, cfg.npr_k)
            ),
        )
        for s in npr_reqs
    ]
    non_rag = _batched_generate(
        gen, nr_prompts, p.max_tokens, cfg.baseline_batch, prog.bar(total=len(nr_prompts), desc="Non-RAG baseline")
    )
    npr = _batched_generate(
        gen,
        npr_prompts[: len(honest)],
        p.max_tokens,
        max(1, cfg.baseline_batch // 2),
        prog.bar(total=len(honest), desc="non-private RAG reference"),
    )
    if probes:  # the probe's answer gets room for a whole record line (the secret is at its end)
        npr += _batched_generate(gen, npr_prompts[len(honest) :], PROBE_ANSWER_TOKENS, 1, NoBar())

    def scores(answers: list[str], items: list[Served]) -> tuple[float, float]:
        golds = [s.request.item.answers for s in items]
        acc = (
            float(np.mean([contains_answer(a, g) for a, g in zip(answers, golds, strict=False)]))
            if items
            else float("nan")
        )
        f1 = float(np.mean([token_f1(a, g) for a, g in zip(answers, golds, strict=False)])) if items else float("nan")
        return acc, f1

    rows = []
    for name, answers, private, note in (
        (
            f"{mechanism_label(p)} (served, private)",
            [s.answer for s in honest],
            True,
            "the answers the accounts received",
        ),
        ("Non-RAG baseline", non_rag, True, "same LLM, no retrieval: touches no document"),
        (f"non-private RAG (top-{cfg.npr_k})", npr[: len(honest)], False, "reference only: no privacy"),
    ):
        acc, f1 = scores(answers, honest)
        row = {
            "method": name,
            "private": private,
            "questions": len(honest),
            "match_accuracy": acc,
            "token_f1": f1,
            "note": note,
        }
        for t in cfg.tenants:
            sel = [i for i, s in enumerate(honest) if s.request.tenant == t.name]
            row[f"accuracy {t.name}"] = scores([answers[i] for i in sel], [honest[i] for i in sel])[0]
        rows.append(row)

    # ledger material: per-document spend, charges per query, citations
    windows = history_windows(bundle)
    openings = {(w, pos): op for w, _, ops in windows for pos, op in ops.items()}
    leaves = [(w, i, leaf) for w, ls, _ in windows for i, leaf in enumerate(ls)]
    spend = {t.name: np.zeros(len(corpora[t.name].documents), dtype=np.int64) for t in cfg.tenants}
    charged_per_query = {}
    cost_units = None
    # v3 leaves name no account; accounts only join, so the last genesis registers every one
    tenant_of = {a["account"]: a["tenant"] for a in windows[-1][1][0]["accounts"]}
    for key, op in openings.items():
        ten = tenant_of[op["request"]["account"]]
        for ch in op["charge"]["charges"]:
            cost_units = ch["cost"]["epsilon_units"]
            if ch["ids"]:
                spend[ten][np.asarray(ch["ids"], dtype=np.int64)] += ch["cost"]["epsilon_units"]
        charged_per_query[key] = sorted({i for ch in op["charge"]["charges"] for i in ch["ids"]})
    cite_prec, cite_chance = [], []
    cite_by_tenant: dict[str, list[tuple[float, float]]] = {}
    for s in honest:
        if s.citations is None:
            continue
        rel = set(s.request.item.relevant_ids)
        pr, ch = len(rel & set(s.citations)) / len(s.citations), len(rel) / len(corpora[s.request.tenant].documents)
        cite_by_tenant.setdefault(s.request.tenant, []).append((pr, ch))
        if s.request.tenant not in cfg.zk_tenants:  # the zk tenant's 8 records are mostly relevant: chance ~ 0.75
            cite_prec.append(pr)
            cite_chance.append(ch)
    supported = [len(set(charged_per_query[s.window, s.pos]) & set(s.request.item.relevant_ids)) for s in honest]
    probe_info = [
        {
            "account": s.request.account,
            "window": s.window,
            "pos": s.pos,
            "question": s.request.question,
            "answer": s.answer,
            "leaked": contains_answer(s.answer, target.secret),
            "target_charged": target.doc_id in charged_per_query[s.window, s.pos],
            "charged": len(charged_per_query[s.window, s.pos]),
        }
        for s in probes
    ]
    npr_probe = npr[len(honest)] if probes else None
    expectation = None
    if policy is not None and batches is not None:
        expectation = expected_releases(
            policy, [(s, b) for s, b in zip(served, batches, strict=True) if s.request.kind == "honest"]
        )
    if expectation is not None:
        draw = [contains_answer(s.answer, s.request.item.answers) for s in honest]
        npr_hits = [contains_answer(a, s.request.item.answers) for a, s in zip(npr, honest, strict=False)]
        expectation.update(
            draw=int(sum(draw)),
            npr=int(sum(npr_hits)),
            ratio=expectation["expected"] / sum(npr_hits) if sum(npr_hits) else float("nan"),
            draw_ratio=sum(draw) / sum(npr_hits) if sum(npr_hits) else float("nan"),
            by_tenant={
                t.name: tuple(
                    sum(x for x, s in zip(xs, honest, strict=True) if s.request.tenant == t.name)
                    for xs in (expectation["chances"], draw, npr_hits, [1] * len(honest))
                )
                for t in cfg.tenants
            },
        )

    # coalition estimator, as the verifier runs it, at several θ
    q_pos = [(w, i) for w, i, leaf in leaves if leaf.get("type") == "query"]  # the whole history, in ledger order
    embs = np.stack([np.frombuffer(bytes.fromhex(openings[i]["qemb"]), dtype="<i2") for i in q_pos])
    accts = [openings[i]["request"]["account"] for i in q_pos]  # v3 leaves name no account: the opened request
    thetas = sorted({0.6, 0.7, 0.8, 0.85, p.theta, 0.95})
    curve = coalition_size_curve(embs, accts, thetas, p.window)
    clusters = coalition_clusters(embs, accts, p.theta, p.window)
    u = embs.astype(np.float64)
    u /= np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-300)
    cos = u @ u.T
    col = set(cfg.colluders)
    cross_honest = [
        cos[i, j]
        for i in range(len(accts))
        for j in range(i + 1, len(accts))
        if accts[i] != accts[j] and accts[i] not in col and accts[j] not in col
    ]
    coal = [
        cos[i, j]
        for i in range(len(accts))
        for j in range(i + 1, len(accts))
        if accts[i] != accts[j] and accts[i] in col and accts[j] in col
    ]
    return {
        "rows": rows,
        "non_rag": non_rag,
        "npr": npr,
        "npr_prompts": npr_prompts[: len(honest)],
        "honest": honest,
        "probes": probe_info,
        "npr_probe": npr_probe,
        "expectation": expectation,
        "npr_probe_leaked": bool(npr_probe and contains_answer(npr_probe, target.secret)),
        "target": target,
        "spend": spend,
        "budget_units": budget_units,
        "cost_units": cost_units,
        "citation_precision": float(np.mean(cite_prec)) if cite_prec else None,
        "citation_chance": float(np.mean(cite_chance)) if cite_chance else None,
        "citations_by_tenant": {
            t: (float(np.mean([x for x, _ in v])), float(np.mean([y for _, y in v])), len(v))
            for t, v in cite_by_tenant.items()
        },
        "supported_charged": supported,
        "charged_per_query": charged_per_query,
        "theta_curve": list(zip(thetas, [int(x) for x in curve], strict=False)),
        "clusters": clusters,
        "max_cross_honest_cos": float(max(cross_honest)) if cross_honest else None,
        "min_coalition_cos": float(min(coal)) if coal else None,
        "max_coalition_cos": float(max(coal)) if coal else None,
    }
