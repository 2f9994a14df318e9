"""The verdict as one self-contained HTML page (``dprag audit verify --html FILE``; spec/verdict-html.md).

``render_html(verdict, public=False)`` is the auditor's page: the verdict line, ε per channel with the relation and
what each ε covers, the warnings, the reasons, a per-document spend plot (inline SVG drawn here), the coalition
table, the provider key and history, the attestation, the trust list, the rejected evidence and the checked counts
with their seconds. ``public=True`` renders ``Verdict.to_public_json()`` and nothing else (spec/protocol.md §8,
"What a published verdict carries"): no reasons' text, no rejected evidence's text, no coalition estimate, no
per-document spend, no per-tenant counts, no seconds; the page lists what it withholds.

One escaping rule: every value reaches the page through ``_esc`` (``encoding.printable``, then ``html.escape``
with ``quote=True``), which ``_el`` applies to every child and attribute value that is not markup ``_el`` built
itself; tag and attribute names are this module's constants. No script, no external resource: the page carries
a Content-Security-Policy that allows inline styles and ``data:`` images only.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..protocol.encoding import printable
from .verdict import Verdict

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
PASS_MEANING = (
    "the provider followed the policy it committed to, and that policy guarantees this ε and δ for the channels "
    "and relation below."
)
MAX_PLOTS = 24  # tenants plotted (most spent first); every tenant is in the table
BINS = ("0", "10", "20", "30", "40", "50", "60", "70", "80", "90", "100", "over")


# ---------------------------------------------------------------------------------------------------------
# the one place where text becomes HTML
# ---------------------------------------------------------------------------------------------------------


class _Markup(str):
    """HTML that ``_el`` built (its text already escaped); any other value is text."""


def _esc(value: Any) -> _Markup:
    """``value`` as HTML text: made printable (no control, format or bidi character) and HTML-escaped, quotes
    included. Markup ``_el`` built passes unchanged (only the exact type: a subclass is text)."""
    if type(value) is _Markup:
        return value
    return _Markup(html.escape(printable(str(value)), quote=True))


def _el(tag: str, *children: Any, **attrs: Any) -> _Markup:
    """``<tag attrs>children</tag>``: every child and attribute value escaped by ``_esc``; lists and tuples of
    children are flattened; None is skipped. ``class_`` is ``class``, ``_`` in other names is ``-``."""
    a = "".join(
        f' {"class" if k == "class_" else k.replace("_", "-")}="{_esc(v)}"' for k, v in attrs.items() if v is not None
    )
    return _Markup(f"<{tag}{a}>{_join(children)}</{tag}>")


def _join(children: Any) -> _Markup:
    out = []
    for c in children:
        if c is None:
            continue
        out.append(_join(c) if isinstance(c, (list, tuple)) else _esc(c))
    return _Markup("".join(out))


def _num(x: Any, spec: str = ".6g") -> str:
    """A number as the text verdict prints it; anything else as text ("—" for none)."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)  # counts and units exactly
    if isinstance(x, float):
        return format(x, spec)
    return str(x)


# ---------------------------------------------------------------------------------------------------------
# the page
# ---------------------------------------------------------------------------------------------------------


def render_html(verdict: Verdict, *, public: bool) -> str:
    """The verdict as one HTML page; ``public``: only ``Verdict.to_public_json()`` (the published form)."""
    d = verdict.to_public_json() if public else verdict.to_json()
    spend = None if public else verdict.spend
    word = str(d.get("verdict"))
    passed = word == "PASS"
    body = [
        _banner(d, public),
        _notice(d, public),
        _section("Privacy loss per channel", _channels(d, passed), id="channels"),
        _warnings(d, passed),
        _reasons(d, public),
        _section("Per-document spend", _spend(spend), id="spend"),
        _section("Coalition", _coalition(d, public), id="coalition"),
        _section("Provider key and history", _provenance(d), id="history"),
        _section("Attestation", _kv_table((d.get("attestation") or {}).items(), ("channel", "how it is attested"))),
        _section("On trust", _el("ul", [_el("li", t) for t in d.get("trust") or []]), id="trust"),
        _rejected(d, public),
        _section("Checked", _checked(d, public), id="checked"),
        _el("footer", f"protocol version {_num(d.get('protocol_version'))}, mode {_num(d.get('mode'))}"),
    ]
    head = _Markup(
        '<meta charset="utf-8">'
        + _Markup(f'<meta http-equiv="Content-Security-Policy" content="{_esc(CSP)}">')
        + '<meta name="referrer" content="no-referrer">'
        + '<meta name="viewport" content="width=device-width, initial-scale=1">'
    )
    title = f"dprag verdict: {word}" + (" (public)" if public else "")
    page = _el(
        "html", _el("head", head, _el("title", title), _el("style", _Markup(_CSS))), _el("body", body), lang="en"
    )
    return "<!DOCTYPE html>\n" + page + "\n"


def _section(title: str, *content: Any, id: str | None = None) -> _Markup:
    return _el("section", _el("h2", title), content, id=id)


def _banner(d: dict[str, Any], public: bool) -> _Markup:
    word = str(d.get("verdict"))
    passed = word == "PASS"
    strength = d.get("strength")
    if passed:
        eps = d.get("epsilon")
        ratio = (
            f" (likelihood ratio ≤ e^ε = {math.exp(eps):.3g})"
            if isinstance(eps, (int, float)) and not isinstance(eps, bool) and eps < 700
            else ""
        )
        figures = [
            _el("span", f"ε = {_num(eps)}", class_="fig"),
            _el("span", f"δ = {_num(d.get('delta'))}", class_="fig"),
            _el("span", ratio, class_="rel") if ratio else None,
        ]
        if strength in ("weak", "vacuous"):
            word = f"PASS ({strength})"
        relation = (d.get("channels") or {}).get("relation")
        if relation is not None:
            figures.append(_el("span", f"relation: {relation}", class_="rel"))
    else:
        figures = [_el("span", "no ε or δ is certified", class_="rel")]
    kind = "the published verdict" if public else "the auditor's verdict"
    return _el(
        "header",
        _el("div", _el("span", word, class_="word"), figures, class_="line"),
        _el("p", d.get("headline"), class_="headline"),
        _el("p", f"dprag audit verify — {kind}", class_="kind"),
        # green only for a strong PASS; a weak one amber, a vacuous one grey (spec/verdict-html.md)
        class_=("banner pass" if strength == "strong" else f"banner {strength or 'weak'}") if passed else "banner fail",
        id="verdict",
    )


def _notice(d: dict[str, Any], public: bool) -> _Markup:
    if not public:
        return _el(
            "aside",
            _el("strong", "Auditor's copy — not for publication. "),
            "This page quotes the reasons, the rejected evidence, the per-document spend, the coalition estimate and "
            "the per-check seconds, which a published verdict leaves out (spec/protocol.md §8). Publish the page of "
            "`dprag audit verify --public --html FILE` instead.",
            class_="notice private",
        )
    n = d.get("rejected_evidence")
    return _el(
        "aside",
        _el("strong", "Published verdict. "),
        "Withheld from this page (spec/protocol.md §8, spec/verdict-html.md): the reasons' text (a FAIL names its "
        f"checks only), the rejected evidence's text ({_num(n)} item{'' if n == 1 else 's'}), the coalition "
        "estimate, the per-document spend, every per-tenant count and the per-check seconds.",
        class_="notice public",
        id="withheld",
    )


def _channels(d: dict[str, Any], passed: bool) -> list[_Markup]:
    ch = d.get("channels") or {}
    if not ch:
        return [_el("p", "No channel was certified (no usable policy).")]
    out = []
    if not passed:
        out.append(_el("p", "The verdict is FAIL: these are what the committed policy would certify, not certified."))
    relation = ch.get("relation")
    if relation is not None:
        out.append(_el("p", "Neighbouring relation: ", _el("strong", relation), class_="relation"))
    rows = [_el("tr", [_el("th", h) for h in ("channel", "ε", "δ", "what the ε covers", "how")])]
    for name, c in ch.items():
        if name == "relation":
            continue
        if not isinstance(c, dict):
            rows.append(_el("tr", _el("td", name), _el("td", c, colspan=4)))
            continue
        how = c.get("method") or c.get("mechanism")
        if c.get("k_max") is not None:
            how = f"{how}; k_max = {_num(c['k_max'])}, {_num(c.get('releases'))} releases"
        rows.append(
            _el(
                "tr",
                _el("td", _el("strong", name)),
                _el("td", _num(c.get("epsilon")), class_="n"),
                _el("td", _num(c.get("delta"), ".3g"), class_="n"),
                _el("td", c.get("covers")),
                _el("td", how),
            )
        )
    rows.append(
        _el(
            "tr",
            _el("td", _el("strong", "composed")),
            _el("td", _num(d.get("epsilon")), class_="n"),
            _el("td", _num(d.get("delta")), class_="n"),
            _el("td", "every channel together: the verdict's ε and δ" if passed else "none (FAIL)"),
            _el("td", "sum of the channels, rounded up" if passed else None),
            class_="total",
        )
    )
    out.append(_el("table", rows, class_="channels" + ("" if passed else " void")))
    return out


def _warnings(d: dict[str, Any], passed: bool) -> _Markup | None:
    items = list(d.get("warnings") or [])  # a weak or vacuous PASS says why first (verdict.guarantee_strength)
    if not items and not passed:
        return None
    listed = _el("ul", [_el("li", w) for w in items], class_="warn") if items else _el("p", "No warnings.")
    meaning = _el("p", _el("strong", "Meaning: "), PASS_MEANING) if passed else None
    return _section("Meaning and warnings" if passed else "Warnings", meaning, listed, id="warnings")


def _reasons(d: dict[str, Any], public: bool) -> _Markup | None:
    if d.get("verdict") == "PASS":
        return None
    if d.get("verdict") == "INCOMPLETE":  # no defect found, but evidence handed in could not be checked: no guarantee
        items = [] if public else d.get("incomplete") or []
        return _section(
            "Why the verdict is incomplete",
            _el(
                "p",
                "No defect was found, but evidence handed in could not be checked against this bundle, so no ε or δ "
                "is stated: fetch a later bundle, or the consistency proofs (dprag audit fetch --receipts FILE).",
            ),
            _el("ol", [_el("li", r) for r in items]) if items else None,
            id="reasons",
        )
    if public:
        checks = d.get("failed_checks") or []
        return _section(
            "Failed checks",
            _el("ul", [_el("li", c) for c in checks] or [_el("li", "none named")]),
            _el("p", "The reasons' text is withheld: it is with the auditor.", class_="withheld"),
            id="reasons",
        )
    reasons = d.get("reasons") or []
    return _section(
        "Reasons",
        _el("p", "In the spec's check order: the first is the root cause, later ones may be its cascade."),
        _el("ol", [_el("li", r) for r in reasons] or [_el("li", "no reason recorded")], class_="reasons"),
        id="reasons",
    )


def _rejected(d: dict[str, Any], public: bool) -> _Markup:
    r = d.get("rejected_evidence")
    if public or not isinstance(r, list):
        text = f"{_num(r)} item(s) of account evidence were rejected (not held against the provider); their text is "
        return _section("Rejected evidence", _el("p", text + "withheld."), id="rejected")
    items = [_el("li", x) for x in r] or [_el("li", "none")]
    return _section("Rejected evidence (not held against the provider)", _el("ul", items), id="rejected")


def _kv_table(items: Iterable[tuple[Any, Any]], header: tuple[str, str] | None = None) -> _Markup:
    rows = [_el("tr", _el("th", header[0]), _el("th", header[1]))] if header else []
    for k, v in items:
        if isinstance(v, (list, tuple)):
            v = ", ".join(_num(x) for x in v)
        rows.append(_el("tr", _el("td", k), _el("td", _num(v))))
    return _el("table", rows, class_="kv")


def _provenance(d: dict[str, Any]) -> _Markup:
    pinned = "pinned by the auditor" if d.get("key_pinned") else "NOT pinned: taken from the bundle"
    items = [("provider key", f"{_num(d.get('provider_key'))} ({pinned})")]
    if d.get("trusted_checkpoint") is not None:
        items.append(("trusted checkpoint", f"extends the trusted checkpoint of size {d['trusted_checkpoint']}"))
    h = d.get("history")
    if isinstance(h, dict):
        items += [(f"history {k}", v) for k, v in h.items()]
    if d.get("guarantee"):
        items.append(("sampled mode", d["guarantee"]))
    return _kv_table(items)


def _coalition(d: dict[str, Any], public: bool) -> list[_Markup]:
    c = d.get("checked") or {}
    ch = d.get("channels") or {}
    k_max = d.get("k_max")
    if public:
        est = "withheld (a function of the private queries)"
    else:
        est = _num(c.get("coalition_estimate")) if "coalition_estimate" in c else "not estimated"
    window = c.get("coalition_window")
    covers = c.get("coalition_window_covers_history")
    wtext = "—" if window is None else f"{_num(window)} ledger positions"
    if covers is not None:
        wtext += " (the whole history)" if covers else " (NOT the whole history)"
    result = "—"
    if not public and isinstance(c.get("coalition_estimate"), int) and isinstance(k_max, int):
        result = "ĉ ≤ k_max" if c["coalition_estimate"] <= k_max else "ĉ > k_max: coalition or a common question"
    head = ("channel", "coalition the ε assumes", "estimated ĉ", "estimator window", "result")
    rows = [_el("tr", [_el("th", h) for h in head])]
    if "retrieval" in ch or k_max is not None:
        assumed = f"at most k_max = {_num(k_max)} colluding accounts of one tenant"
        rows.append(_el("tr", [_el("td", x) for x in ("retrieval", assumed, est, wtext, result)]))
    if "generation" in ch:
        gen = "any number: the per-document filter is global across accounts (k does not enter)"
        rows.append(_el("tr", [_el("td", x) for x in ("generation", gen, "not needed", "—", "—")]))
    note = _el(
        "p",
        "The ε is computed from k_max, never from ĉ; ĉ is the size of the largest group of accounts whose "
        "questions the auditor's estimator linked (spec/estimator.md).",
    )
    return [_el("table", rows, class_="coalition"), note]


#: what each count of ``checked`` counts, in words (a key not listed is shown as it is)
CHECK_WORDS = {
    "files": "bundle directories read safely (regular files only, no links, within their caps)",
    "canonical": "leaves, openings and policies in the canonical encoding",
    "commitments": "commitments opened: genesis, index, documents, policy, seed, state leaves",
    "policy": "policies well-formed, their claims recomputed",
    "ledger": "checkpoints whose signature and Merkle root match the recomputed log",
    "trusted_checkpoint": "the checkpoint the auditor kept, extended by this log",
    "key_rotations": "provider key rotations, each signed by the outgoing key with a dual-signed checkpoint",
    "epochs": "policy leaves (epochs after the first)",
    "receipts": "receipts consistent with the ledger (root, leaf, request, account)",
    "receipts_handed_in": "lines the accounts handed in (receipts, refusals, rotations)",
    "receipts_accepted": "receipts within the audited log, checked against it",
    "receipts_newer_than_bundle": "receipts beyond the audited log, checked with a consistency proof",
    "rotations_followed": "key rotations beyond the log followed from its key (the accounts' or the fetch's)",
    "refusals": "signed refusals checked against the log at the size each names",
    "refusals_handed_in": "signed refusals handed in",
    "refusals_newer_than_bundle": "refusals beyond the audited log",
    "voids": "signed voids (recorded requests never to be answered) checked against the log",
    "requests": "requests signed by their registered account, counters gapless",
    "rate": "accounts within the per-account query limit n",
    "queries": "query leaves in the log",
    "queries_with_account_confirmed_q": "queries whose account committed to its query embedding Q",
    "retrieval": "queries whose citations were replayed from the committed seed",
    "generation": "queries whose charges were replayed on the per-document filter",
    "documents_within_budget": "documents whose replayed spend is within the budget",
    "documents_reembedded": "index rows re-embedded from the corpus (--corpus)",
    "corpus": "tenants whose corpus was checked against the commitments (--corpus)",
    "answers_replayed": "answers regenerated and matched to their receipts (--replay-answers)",
    "answers_not_replayable": "answers of a generator nobody can re-run (on trust)",
    "coalition": "coalition estimates within k_max",
    "coalition_estimate": "the estimated largest coalition (auditor only: a function of the private queries)",
    "coalition_window": "ledger positions the coalition estimator compares",
    "coalition_window_covers_history": "whether that window covers the whole log",
    "witness_cosignatures": "valid witness cosignatures on the checkpoint of the whole log",
    "zk_proofs": "Groth16 proofs of noise-then-select verified",
}


def _checked(d: dict[str, Any], public: bool) -> list[_Markup | None]:
    c = d.get("checked") or {}
    seconds = {} if public else d.get("seconds") or {}
    keys = list(c) + [k for k in seconds if k not in c]
    header = ("what", "count", "meaning") if public else ("what", "count", "meaning", "seconds")
    rows = [_el("tr", [_el("th", h) for h in header])]
    for k in sorted(keys, key=str):
        cells = [_el("td", k), _el("td", _num(c.get(k)) if k in c else "", class_="n"), _el("td", CHECK_WORDS.get(k))]
        if not public:
            cells.append(_el("td", _num(seconds.get(k), ".3f") if k in seconds else "", class_="n"))
        rows.append(_el("tr", cells))
    return [_receipts_in_words(c, d.get("rejected_evidence")), _el("table", rows, class_="kv")]


def _receipts_in_words(c: dict[str, Any], rejected: Any) -> _Markup | None:
    """The receipt counts as one sentence: how many lines were handed in, how many were checked and where, and
    what the rest were (refusals, rotations, duplicates, rejected evidence)."""
    handed = c.get("receipts_handed_in")
    if not isinstance(handed, int):
        return _el("p", "No account receipts were handed in: nothing ties this log to what the accounts were sent.")
    inside, beyond = c.get("receipts_accepted", 0), c.get("receipts_newer_than_bundle", 0)
    n_rej = rejected if isinstance(rejected, int) else len(rejected or [])
    rest = handed - inside - beyond
    return _el(
        "p",
        f"Of {handed} receipt lines the accounts handed in, {inside} were checked against the audited log and "
        f"{beyond} beyond it (with a consistency proof); the other {max(rest, 0)} are refusals, key rotations, "
        f"repeats of a receipt already counted, or rejected evidence ({n_rej} listed above, never held against the "
        "provider).",
    )


# ---------------------------------------------------------------------------------------------------------
# per-document spend: a table of every tenant and an SVG histogram per tenant
# ---------------------------------------------------------------------------------------------------------


def _spend(spend: dict[str, Any] | None) -> list[_Markup | None]:
    if spend is None:
        return [_el("p", "Withheld: per-document spend is a function of the charges, which only the auditor sees.")]
    if not spend:
        return [_el("p", "No per-document spend: the generation check did not replay the charges to the end.")]
    stats = {t: _spend_stats(v) for t, v in spend.items()}
    head = ("tenant", "documents", "charged", "budget spent in full", "over budget", "largest spend", "mean spend")
    rows = [_el("tr", [_el("th", h) for h in head])]
    for t, s in stats.items():
        rows.append(
            _el(
                "tr",
                _el("td", t),
                _el("td", s["n"], class_="n"),
                [_el("td", _count_share(s[k], s["n"]), class_="n") for k in ("charged", "full", "over")],
                _el("td", _pct(s["max"]), class_="n"),
                _el("td", _pct(s["mean"]), class_="n"),
            )
        )
    order = sorted(stats, key=lambda t: -stats[t]["max"])
    plots = [_histogram(t, stats[t]) for t in order[:MAX_PLOTS]]
    more = len(order) - MAX_PLOTS
    return [
        _el(
            "p",
            "Each document's spent share of its privacy budget (100% is the per-document filter's limit, the same "
            "for every document: M queries at the committed per-query ε; the generation check replayed it from the "
            "opened charges, every epoch included) at the end of the audited log; a bar counts the documents in its "
            "10% bin, red: over budget. Counts are shown with their share of the tenant's documents.",
        ),
        _el("table", rows, class_="kv"),
        _el("div", plots, class_="plots"),
        _el("p", f"{more} further tenant(s) are in the table only.") if more > 0 else None,
    ]


def _spend_stats(v: Any) -> dict[str, Any]:
    """Bin counts (0, ≤10% … ≤100%, over) and summary of one tenant's spend (its units against the limit)."""
    limit = int(v.get("limit", 0)) if isinstance(v, dict) else 0
    s = np.asarray(v.get("spent", []) if isinstance(v, dict) else [], dtype=np.float64)
    f = s / limit if limit > 0 else np.where(s > 0, np.inf, 0.0)
    bins = np.where(f <= 0, 0, np.where(f > 1, 11, np.clip(np.ceil(f * 10), 1, 10))).astype(np.int64)
    counts = np.bincount(bins, minlength=12)[:12]
    finite = f[np.isfinite(f)]
    return {
        "n": int(s.size),
        "limit": limit,
        "charged": int((s > 0).sum()),
        "full": int((f >= 1).sum()),
        "over": int(counts[11]),
        "max": float(f.max()) if f.size else 0.0,
        "mean": float(finite.mean()) if finite.size else 0.0,
        "counts": [int(x) for x in counts],
    }


def _count_share(k: int, n: int) -> str:
    """``k`` of ``n`` documents, with its share: "12 (4.0%)"."""
    return f"{k} ({_pct(k / n)})" if n else str(k)


def _pct(f: float) -> str:
    return "—" if not math.isfinite(f) else f"{100 * f:.1f}%"


def _histogram(tenant: str, s: dict[str, Any]) -> _Markup:
    """One tenant's documents per spent-share bin, as an inline SVG bar chart (labelled counts)."""
    w, h, left, right, top, bottom = 340, 200, 34, 8, 30, 44
    pw, ph = w - left - right, h - top - bottom
    counts = s["counts"]
    peak = max(1, max(counts))
    step = pw / len(counts)
    parts = [
        _el("text", f"{tenant} ({s['n']} documents)", x=left, y=16, class_="t"),
        _el("line", x1=left, y1=top + ph, x2=left + pw, y2=top + ph, class_="axis"),
        _el("line", x1=left, y1=top, x2=left, y2=top + ph, class_="axis"),
        _el("text", peak, x=left - 4, y=top + 4, class_="yl"),
        _el("text", 0, x=left - 4, y=top + ph, class_="yl"),
    ]
    for i, n in enumerate(counts):
        x = left + i * step
        bh = ph * n / peak
        colour = "zero" if i == 0 else "over" if i == len(counts) - 1 else "spent"
        if n:
            box = {"x": f"{x + 2:.1f}", "y": f"{top + ph - bh:.1f}", "width": f"{step - 4:.1f}", "height": f"{bh:.1f}"}
            parts.append(_el("rect", class_=colour, **box))
            parts.append(_el("text", n, x=f"{x + step / 2:.1f}", y=f"{top + ph - bh - 3:.1f}", class_="bl"))
        parts.append(_el("text", BINS[i], x=f"{x + step / 2:.1f}", y=top + ph + 13, class_="xl"))
    parts.append(
        _el("text", "% of the document's budget spent (bin upper edge)", x=left + pw / 2, y=h - 8, class_="xc")
    )
    return _el(
        "svg",
        parts,
        xmlns="http://www.w3.org/2000/svg",
        viewBox=f"0 0 {w} {h}",
        width=w,
        height=h,
        role="img",
        aria_label=f"per-document spend of tenant {tenant}",
    )


_CSS = """
:root { color-scheme: light; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #1d232a;
  background: #f6f7f9; margin: 0; padding: 24px; }
body > * { max-width: 1120px; margin-left: auto; margin-right: auto; }
td, li, p, .headline { overflow-wrap: break-word; unicode-bidi: isolate; }
td:first-child { white-space: nowrap; }
.banner { border-radius: 10px; padding: 18px 24px; color: #fff; }
.banner.pass { background: #1e7a3c; } .banner.fail { background: #b3261e; }
.banner.weak { background: #8a5a00; } .banner.vacuous { background: #55595e; }
.banner .line { display: flex; align-items: baseline; gap: 22px; flex-wrap: wrap; }
.banner .word { font-size: 40px; font-weight: 800; letter-spacing: 1px; }
.banner .fig { font-size: 26px; font-weight: 600; font-variant-numeric: tabular-nums; }
.banner .rel { font-size: 17px; opacity: .95; }
.banner .headline { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 13px; margin: 10px 0 0; }
.banner .kind { margin: 6px 0 0; font-size: 12px; opacity: .85; }
.notice { margin-top: 14px; padding: 10px 14px; border-radius: 8px; font-size: 14px; }
.notice.private { background: #fff4d6; border: 1px solid #e6c35c; }
.notice.public { background: #e3efff; border: 1px solid #8db4e8; }
section { background: #fff; border: 1px solid #dde1e6; border-radius: 10px; padding: 6px 20px 14px; margin-top: 14px; }
h2 { font-size: 17px; margin: 10px 0 8px; }
table { border-collapse: collapse; width: 100%; font-size: 13.5px; }
th, td { text-align: left; vertical-align: top; padding: 5px 8px; border-bottom: 1px solid #eceef1; }
th { background: #f1f3f6; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.total td { border-top: 2px solid #c9ced6; background: #fafbfc; }
table.void td.n { color: #8a939e; text-decoration: line-through; }
ul.warn li { color: #8a4b00; }
table.coalition td:last-child { min-width: 9em; }
ol.reasons li { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 13px; margin-bottom: 3px; }
.plots { display: flex; flex-wrap: wrap; gap: 10px; margin-top: 12px; }
svg { background: #fbfcfd; border: 1px solid #e3e6ea; border-radius: 6px; font-family: system-ui, sans-serif; }
svg .axis { stroke: #5b6470; stroke-width: 1; }
svg .t { font-size: 13px; font-weight: 600; fill: #1d232a; }
svg .yl { font-size: 10px; fill: #5b6470; text-anchor: end; }
svg .xl, svg .bl { font-size: 10px; fill: #3b434c; text-anchor: middle; }
svg .xc { font-size: 10.5px; fill: #5b6470; text-anchor: middle; }
svg .zero { fill: #b7c0ca; } svg .spent { fill: #2f6fb0; } svg .over { fill: #c0392b; }
footer { color: #6b737d; font-size: 12px; margin-top: 14px; }
"""
