"""``dprag audit verify --html FILE``: the verdict page as headless Chromium renders it (spec/verdict-html.md).

The pages are written by the CLI from real toy bundles (or rendered from a Verdict built with hostile strings),
loaded from ``file://`` in Chromium, and checked on the DOM Chromium dumps after parsing and running the page
(``--dump-dom``): its visible text against the text verdict the CLI prints, its elements for anything a payload
could have injected, and a screenshot for being a real picture. Needs Debian's ``chromium`` package
(``apt-get install -y chromium``); the CLI's file handling is tested without it.
"""

from __future__ import annotations

import json
import shutil
import stat
import struct
import subprocess
import tempfile
import zlib
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from dprag.audit.cli import main as cli_main
from dprag.audit.testing.window import build_window
from dprag.audit.verify import verify
from dprag.audit.verify.html import CSP, render_html
from dprag.audit.verify.verdict import Verdict

CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs /usr/bin/chromium (Debian: apt-get install -y chromium) to render the page"
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)

pytestmark = pytest.mark.integration  # starts servers or processes (CONTRIBUTING.md)


def chromium(page: Path, *args: str) -> str:
    """Run headless Chromium on ``file://page`` with a fresh profile; its stdout."""
    with tempfile.TemporaryDirectory() as profile:
        out = subprocess.run(
            [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args, page.resolve().as_uri()],
            capture_output=True,
            timeout=90,
            check=True,
        )
    return out.stdout.decode("utf-8")


class Dom(HTMLParser):
    """The dumped DOM: every element (tag, attributes), the title, and the visible text of the body."""

    HIDDEN = {"head", "title", "style", "script", "template", "noscript"}

    def __init__(self, markup: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.title = ""
        self.chunks: list[str] = []
        self.open: list[str] = []
        self.feed(markup)
        self.close()
        self.text = " ".join(" ".join(self.chunks).split())

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag not in ("meta", "link", "br", "img", "input", "hr"):
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in self.open:
            while self.open and self.open.pop() != tag:
                pass

    def handle_data(self, data):
        if "title" in self.open:
            self.title += data
        elif not self.HIDDEN.intersection(self.open):
            self.chunks.append(data)

    def tags(self, name: str) -> list[dict]:
        return [a for t, a in self.elements if t == name]


def rendered(page: Path) -> Dom:
    return Dom(chromium(page, "--dump-dom"))


def visible(s: str) -> str:
    return " ".join(s.split())


URL_ATTRIBUTES = {"href", "xlink:href", "src", "srcset", "srcdoc", "action", "formaction", "data", "poster"}


def assert_inert(dom: Dom, title: str) -> None:
    """Nothing a payload carried became an element or a handler; no script ran to change the title."""
    assert dom.title == title
    for tag in ("script", "img", "iframe", "object", "embed", "image", "foreignobject", "a", "link", "form"):
        assert not dom.tags(tag), tag
    for tag, attrs in dom.elements:  # no handler, and nothing that loads or links anywhere
        assert not [k for k in attrs if k.startswith("on") or k in URL_ATTRIBUTES], (tag, attrs)
    # the only svg elements are the spend plots'
    assert all(
        a.get("role") == "img" and a.get("aria-label", "").startswith("per-document spend") for a in dom.tags("svg")
    )
    metas = [a for a in dom.tags("meta") if a.get("http-equiv", "").lower() == "content-security-policy"]
    assert [m["content"] for m in metas] == [CSP]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """A PASS bundle (toy window, its receipts) and a FAIL one (the committed seed replaced)."""
    d = tmp_path_factory.mktemp("html")
    w = build_window(d / "w", rounds=2, close=False)
    spent = {
        t: w.service.tenants[t].filter.spent_units(np.arange(n))[:, 0].tolist()
        for t, n in (("clinic", 100), ("legal", 50))
    }
    w.service.close()
    bad = d / "bad"
    shutil.copytree(w.bundle, bad)
    (bad / "auditor" / "seed.hex").write_text("11" * 32)
    return w, bad, spent


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    """``dprag audit verify ARGS`` with the limit raised past the toy policy's ε = 42 (a strong PASS: the pages
    here are about what a PASS shows; the weak and vacuous banners: tests/e2e/test_audit_e2e.py)."""
    capsys.readouterr()
    rc = cli_main(["audit", "verify", "--max-epsilon", "50", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


# ---------------------------------------------------------------------------------------------------------
# the verdict's per-document spend (the field the page plots)
# ---------------------------------------------------------------------------------------------------------


def test_verdict_spend_is_the_providers_filter_state(bundles):
    w, _, spent = bundles
    v = verify(w.bundle, receipts=w.receipts)
    assert v.verdict == "PASS"
    assert {t: s["spent"] for t, s in v.spend.items()} == spent
    assert any(any(s) for s in spent.values())  # the window charged something
    assert all(s["limit"] > 0 and max(s["spent"]) <= s["limit"] for s in v.spend.values())
    assert "spend" not in v.to_json() and "spend" not in v.to_public_json()


# ---------------------------------------------------------------------------------------------------------
# (a) real PASS and FAIL bundles through the CLI, as Chromium shows them
# ---------------------------------------------------------------------------------------------------------


@needs_chromium
def test_pass_page_shows_what_the_text_verdict_says(bundles, tmp_path, capsys):
    w, _, _ = bundles
    page = tmp_path / "verdict.html"
    rc, text, _ = run_cli(capsys, str(w.bundle), "--receipts", str(w.receipts), "--html", str(page))
    assert rc == 0
    lines = text.splitlines()
    word, eps, delta = lines[0].split()[:3]
    assert word == "PASS"
    dom = rendered(page)
    assert_inert(dom, "dprag verdict: PASS")
    assert f"PASS ε = {eps} δ = {delta}" in dom.text
    assert visible(lines[0]) in dom.text  # the headline, as printed
    for line in lines:
        s = line.strip()
        if s.startswith(("retrieval channel:", "generation channel:")):
            name, rest = s.split(" channel: ")
            ch_eps, ch_delta = (x.split("=")[1] for x in rest.split(" — ")[0].split())
            covers = rest.split(" — ", 1)[1]
            assert f"{name} {ch_eps} {ch_delta} {visible(covers)}" in dom.text
        elif s.startswith("relation:"):
            assert f"Neighbouring relation: {s.split(': ')[1]}" in dom.text
        elif s.startswith(("on trust:", "warning:", "attestation (")):
            assert visible(s.split(": ", 1)[1]) in dom.text, s
    assert sum(s.startswith("on trust:") for s in map(str.strip, lines)) == 4
    # the spend plot: one SVG per tenant, its bars count every document
    svgs = dom.tags("svg")
    assert len(svgs) == 2
    assert "clinic (100 documents)" in dom.text and "legal (50 documents)" in dom.text
    assert "Auditor's copy — not for publication." in dom.text


@needs_chromium
def test_fail_page_leads_with_the_root_cause(bundles, tmp_path, capsys):
    _, bad, _ = bundles
    rc, out, _ = run_cli(capsys, str(bad), "--json")
    reasons = json.loads(out)["reasons"]
    page = tmp_path / "fail.html"
    rc, text, _ = run_cli(capsys, str(bad), "--html", str(page))
    assert rc == 1 and text.startswith("FAIL — ")
    dom = rendered(page)
    assert_inert(dom, "dprag verdict: FAIL")
    assert dom.text.startswith("FAIL no ε or δ is certified")
    assert visible(text.splitlines()[0]) in dom.text
    assert reasons and all(visible(r) in dom.text for r in reasons)
    assert "retrieval" in dom.text and "generation" in dom.text  # the policy's figures, marked not certified


# ---------------------------------------------------------------------------------------------------------
# (b) hostile strings: from a Verdict built directly, and from a bundle's file names
# ---------------------------------------------------------------------------------------------------------

PAYLOADS = (
    "<script>document.title='pwned'</script>",
    "<img src=x onerror=\"document.title='pwned'\">",
    '"><svg onload="document.title=\'pwned\'">',
    "'><a href=javascript:document.title='pwned'>x</a>",
    "\x1b[2J\x1b[1;32mPASS\x1b[0m",
    "\u202eSSAP\u202c evil\u2066",
)
#: what each payload shows: its text, with control and bidi characters written as escapes (encoding.printable)
SHOWN = (
    *PAYLOADS[:4],
    "\\x1b[2J\\x1b[1;32mPASS\\x1b[0m",
    "\\u202eSSAP\\u202c evil\\u2066",
)


def hostile_verdict(word: str, marker: str = "") -> Verdict:
    p = " | ".join(PAYLOADS)
    return Verdict(
        verdict=word,
        epsilon=1.5 if word == "PASS" else None,
        delta=1e-6 if word == "PASS" else None,
        k_max=3,
        channels={
            "relation": p,
            "retrieval": {"epsilon": 1.0, "delta": 1e-6, "covers": p, "method": p, "k_max": 3, "releases": 30},
            p: {"epsilon": 0.5, "delta": 0.0, "covers": p, "mechanism": p},
        },
        attestation={p: p, "generation": p},
        reasons=[f"files: {x}" for x in PAYLOADS] + [f"coalition: {marker}reason"],
        checked={p: 1, "queries": 4, "coalition_estimate": 2, "coalition_window": 9},
        mode=p,
        guarantee=p,
        rejected_evidence=[f"receipt 0: {p}"],
        provider_key=p,
        trusted_checkpoint=4,
        trust=tuple(PAYLOADS),
        timings={p: 0.25},
        history={
            "window": p,
            "size": 9,
            "root": p,
            "origin": p,
            "chain": p,
            "origin_pinned": False,
            "keys": [*PAYLOADS],
        },
        spend={p: {"limit": 10, "spent": [0, 0, 3, 10, 12]}},
    )


@needs_chromium
@pytest.mark.parametrize("csp", [False, True], ids=["no-csp", "csp"])
def test_control_an_unescaped_payload_runs_in_this_harness_unless_the_csp_stops_it(tmp_path, csp):
    # the harness sees an injection: the payloads pasted raw become elements and run; the page's CSP alone
    # (the second line of defence) keeps them from running
    meta = f'<meta http-equiv="Content-Security-Policy" content="{CSP}">' if csp else ""
    page = tmp_path / "raw.html"
    page.write_text(
        f"<!DOCTYPE html><html><head>{meta}<title>t</title></head><body>{''.join(PAYLOADS[:3])}</body></html>"
    )
    dom = rendered(page)
    assert dom.tags("script") and dom.tags("img") and dom.tags("svg")
    assert dom.title == ("t" if csp else "pwned")


@needs_chromium
@pytest.mark.parametrize("word", ["PASS", "FAIL"])
@pytest.mark.parametrize("public", [False, True], ids=["auditor", "public"])
def test_hostile_strings_stay_text(tmp_path, word, public):
    v = hostile_verdict(word)
    page = tmp_path / "hostile.html"
    page.write_text(render_html(v, public=public))
    raw = chromium(page, "--dump-dom")
    dom = Dom(raw)
    assert_inert(dom, f"dprag verdict: {word}" + (" (public)" if public else ""))
    assert "\x1b" not in raw and not any(c in raw for c in "\u202e\u202c\u2066")
    for shown in SHOWN:  # every payload is visible as literal text (trust and the channels are public)
        assert visible(shown) in dom.text, shown
    assert len(dom.tags("svg")) == (0 if public else 1)


@needs_chromium
def test_hostile_file_names_in_a_bundle_stay_text(bundles, tmp_path, capsys):
    # file names are the bundle strings a provider picks freely: the files check quotes them in its reason
    w, _, _ = bundles
    bad = tmp_path / "names"
    shutil.copytree(w.bundle, bad)
    names = ("<img src=x onerror=document.title=1>", '"><svg onload=document.title=2>')
    for n in names:
        (bad / "auditor" / "index" / n).write_bytes(b"")
    (bad / "auditor" / "docs" / "\x1b[31mred\u202eevil").write_bytes(b"")  # refused: not printable
    rc, out, _ = run_cli(capsys, str(bad), "--json")
    reasons = json.loads(out)["reasons"]
    assert rc == 1 and any(r.startswith("files: auditor/index: holds 2 entries") for r in reasons), reasons
    page = tmp_path / "names.html"
    assert run_cli(capsys, str(bad), "--html", str(page))[0] == 1
    dom = rendered(page)
    assert_inert(dom, "dprag verdict: FAIL")
    for shown in (*names, "\\x1b[31mred\\u202eevil", *reasons):
        assert visible(shown) in dom.text, shown


# ---------------------------------------------------------------------------------------------------------
# (c) the public page carries none of the auditor's fields
# ---------------------------------------------------------------------------------------------------------

MARK = "QZX7-private"


@needs_chromium
def test_public_page_withholds_the_private_fields(tmp_path):
    v = hostile_verdict("FAIL", marker=MARK)
    v.checked.update({"coalition_estimate": 987654321, "zk_proofs": 424242})
    v.timings = {"retrieval": 123.456789}
    v.rejected_evidence = [f"receipt 3: {MARK}-evidence"]
    v.spend = {f"{MARK}-tenant": {"limit": 7, "spent": [1, 2, 3]}}
    pages = {}
    for public in (False, True):
        pages[public] = page = tmp_path / f"{public}.html"
        page.write_text(render_html(v, public=public))
    private, public = chromium(pages[False], "--dump-dom"), chromium(pages[True], "--dump-dom")
    secrets = (MARK, "987654321", "424242", "123.457")
    assert all(s in private for s in secrets)  # the auditor's page has them: the check below is not vacuous
    for s in secrets:
        assert s not in public, s
    dom = Dom(public)
    assert "Withheld from this page" in dom.text and "withheld (a function of the private queries)" in dom.text
    assert "The reasons' text is withheld" in dom.text and "files" in dom.text and "coalition" in dom.text


@needs_chromium
def test_public_page_of_a_real_fail_withholds_its_reason(bundles, tmp_path, capsys):
    w, _, _ = bundles
    bad = tmp_path / "marked"
    shutil.copytree(w.bundle, bad)
    (bad / "auditor" / "docs" / MARK).write_bytes(b"")
    pages = {flag: tmp_path / f"{flag or 'auditor'}.html" for flag in ("", "--public")}
    for flag, page in pages.items():
        rc, out, _ = run_cli(capsys, str(bad), *([flag] if flag else []), "--html", str(page))
        assert rc == 1
    assert MARK in chromium(pages[""], "--dump-dom")
    public = chromium(pages["--public"], "--dump-dom")
    assert MARK not in public
    dom = Dom(public)
    assert_inert(dom, "dprag verdict: FAIL (public)")
    assert "FAIL — files (the reasons are with the auditor)" in dom.text
    assert stat.S_IMODE(pages[""].stat().st_mode) == 0o600 and stat.S_IMODE(pages["--public"].stat().st_mode) == 0o644


# ---------------------------------------------------------------------------------------------------------
# (d) the screenshot is a picture of the verdict
# ---------------------------------------------------------------------------------------------------------


def png_pixels(data: bytes) -> np.ndarray:
    """An 8-bit RGB / RGBA non-interlaced PNG as an (h, w, channels) array (stdlib zlib + struct, numpy)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (n,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    w, h, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(h, 1 + w * bpp)
    out = np.zeros((h, w * bpp), dtype=np.uint8)
    prior = np.zeros(w * bpp, dtype=np.int64)
    for y in range(h):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int64)
        if f == 0:
            cur = line
        elif f == 1:  # Sub: a running sum per channel
            cur = np.cumsum(line.reshape(w, bpp), axis=0).reshape(-1) % 256
        elif f == 2:
            cur = (line + prior) % 256
        else:  # Average, Paeth: sequential along the row
            cur, up = line.tolist(), prior.tolist()
            for x in range(len(cur)):
                a = cur[x - bpp] if x >= bpp else 0
                b, c = up[x], up[x - bpp] if x >= bpp else 0
                if f == 3:
                    cur[x] = (cur[x] + (a + b) // 2) & 255
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    cur[x] = (cur[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            cur = np.asarray(cur, dtype=np.int64)
        out[y], prior = cur, cur
    return out.reshape(h, w, bpp)[:, :, :3]


@needs_chromium
def test_screenshot_is_the_verdict_not_a_blank_page(bundles, tmp_path, capsys):
    w, bad, _ = bundles
    for bundle, word in ((w.bundle, "PASS"), (bad, "FAIL")):
        page, shot = tmp_path / f"{word}.html", tmp_path / f"{word}.png"
        assert run_cli(capsys, str(bundle), "--html", str(page))[0] == (0 if word == "PASS" else 1)
        chromium(page, f"--screenshot={shot}", "--window-size=1200,1600")
        px = png_pixels(shot.read_bytes())
        assert px.shape == (1600, 1200, 3)
        q = px.astype(np.int64) // 8  # colours at 5 bits a channel
        colours = np.count_nonzero(np.bincount((q[..., 0] << 10 | q[..., 1] << 5 | q[..., 2]).ravel()))
        assert colours > 40, colours
        inked = (px.min(axis=2) < 200).mean()
        assert 0.03 < inked < 0.6, inked
        r, g, b = (int(x) for x in px[40, 60])  # inside the verdict banner, left of the word
        assert (g > r + 50) if word == "PASS" else (r > g + 80), (word, r, g, b)


# ---------------------------------------------------------------------------------------------------------
# the CLI's FILE handling (no browser needed)
# ---------------------------------------------------------------------------------------------------------


def test_html_file_is_written_atomically_and_never_through_a_link(bundles, tmp_path, capsys):
    w, _, _ = bundles
    target = tmp_path / "victim.txt"
    target.write_text("keep me")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    rc, out, err = run_cli(capsys, str(w.bundle), "--html", str(link))
    assert rc == 2 and out == "" and target.read_text() == "keep me" and link.is_symlink()
    assert err.count("\n") == 1 and err.startswith("error: --html ") and "symbolic link" in err
    rc, out, err = run_cli(capsys, str(w.bundle), "--json", "--html", str(tmp_path / "none" / "v.html"))
    assert rc == 2 and json.loads(out)["exit_code"] == 2 and "no such directory" in err
    rc, _, err = run_cli(capsys, str(w.bundle), "--html", str(tmp_path))
    assert rc == 2 and "not a regular file" in err
    page = tmp_path / "v.html"
    page.write_text("an older page")
    rc, out, _ = run_cli(capsys, str(w.bundle), "--public", "--html", str(page))
    assert rc == 0 and json.loads(out)["schema"] == "dprag.verdict-public/1"  # stdout is unchanged
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "dprag verdict: PASS (public)" in html
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.html", "v.html", "victim.txt"]  # no temp file left


def test_the_spend_table_shows_shares_not_raw_units(bundles):
    """v3's page showed the budget in filter units (e.g. 8589934592); it shows each count with its share of the
    tenant's documents and every spend as a share of the per-document budget."""
    import re

    from dprag.audit.verify import verify
    from dprag.audit.verify.html import render_html

    w = bundles[0]
    v = verify(w.bundle, receipts=w.receipts, max_epsilon=50)
    page = render_html(v, public=False)
    assert "budget (units)" not in page and "budget spent in full" in page
    n = len(v.spend["clinic"]["spent"])
    charged = sum(1 for x in v.spend["clinic"]["spent"] if x > 0)
    assert f"{charged} ({100 * charged / n:.1f}%)" in page
    assert not re.search(r">\d{7,}<", page)  # no raw unit counts in a cell
