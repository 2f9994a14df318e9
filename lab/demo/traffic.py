"""The demo's traffic script: who asks what, in which ledger order (honest questions of every tenant
interleaved, the coalition's extraction probes spread through them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dprag.lab.demo.config import PROBE_TEMPLATES, DemoConfig
from dprag.rag_adapters.datasets.base import QAItem
from dprag.rag_adapters.datasets.clinic import FACT_KINDS, ClinicCorpus


@dataclass(frozen=True)
class Request:
    """One query of the script: who asks what; ``item`` carries the gold answers (honest questions)."""

    account: str
    tenant: str
    question: str
    kind: str  # "honest" | "probe"
    item: QAItem | None = None


def honest_questions(corpus: ClinicCorpus, n_conditions: int) -> list[QAItem]:
    """One test-split question per condition, the fact kind rotating drug / dose / test / interval."""
    by_group: dict[str, list[QAItem]] = {}
    for q in corpus.questions:
        if q.split == "test":
            by_group.setdefault(q.group, []).append(q)
    out = []
    for ci in range(n_conditions):
        group = f"c{ci:02d}-{FACT_KINDS[ci % len(FACT_KINDS)]}"
        out.append(sorted(by_group[group], key=lambda q: q.qid)[0])
    return out


def probe_target(corpus: ClinicCorpus):
    """The canary the coalition probes: the record with the smallest id that supports no fact (a routine
    visit), so only the probes ever touch it."""
    support = {i for f in corpus.facts for i in f.support_ids}
    for c in corpus.canaries:
        if c.doc_id not in support:
            return c
    return corpus.canaries[0]


def probe_questions(canary, count: int, templates: Sequence[str] = PROBE_TEMPLATES) -> list[str]:
    """``count`` probes cycling through ``templates``; a template's repeats carry a one-token edit ("(1)", "(2)", …):
    a verbatim repeat would get the first release's citations again (the retrieval noise is keyed by Q)."""
    out = []
    for i in range(count):
        q = templates[i % len(templates)].format(name=canary.name, kind=canary.kind)
        out.append(q if i < len(templates) else f"{q} ({i // len(templates)})")
    return out


def _interleave(streams: Sequence[Sequence[Request]]) -> list[Request]:
    out, its = [], [list(s) for s in streams]
    while any(its):
        for s in its:
            if s:
                out.append(s.pop(0))
    return out


def build_script(cfg: DemoConfig, corpora: dict[str, ClinicCorpus]) -> tuple[list[Request], object]:
    """The ledger order of the window: honest questions of both tenants interleaved, the coalition's
    probes spread evenly through them."""
    streams = []
    for t in cfg.tenants:
        items = honest_questions(corpora[t.name], t.n_conditions)
        streams.append(
            [Request(t.accounts[i % len(t.accounts)], t.name, q.question, "honest", q) for i, q in enumerate(items)]
        )
    honest = _interleave(streams)
    target = probe_target(corpora[cfg.coalition_tenant])
    texts = probe_questions(target, len(cfg.colluders) * cfg.probes_per_colluder, cfg.probe_templates)
    probes = [
        Request(cfg.colluders[i % len(cfg.colluders)], cfg.coalition_tenant, q, "probe") for i, q in enumerate(texts)
    ]
    script: list[Request] = []
    step = max(1, (len(honest) + len(probes)) // max(1, len(probes)))
    hi = iter(honest)
    for p in probes:
        for _ in range(step - 1):
            nxt = next(hi, None)
            if nxt is not None:
                script.append(nxt)
        script.append(p)
    script.extend(hi)
    return script, target
