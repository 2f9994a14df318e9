"""``dprag audit ...``: verify a bundle, print its ledger root and leaves.

Exit codes (spec/protocol.md §8.11), the same in every subcommand: 0 PASS / success; 1 FAIL — any defect
inside the bundle, named by file and check; 2 the auditor's own input is unusable (a path that does not
exist, bad flags, an unreadable receipts / key / checkpoint file, an unsupported protocol version).
Errors are one line on stderr (under ``--json`` also a JSON error object on stdout), never a traceback.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import click

from dprag.errors import DpragError

from ..protocol.bundle import AuditorInputError, load_bundle
from ..protocol.encoding import loads_bounded, printable
from ..protocol.ledger.rfc6962 import root_from_leaves
from ..verify import verify
from ..verify.estimator import DEFAULT_THETA, DEFAULT_WINDOW
from ..verify.history import parse_origin
from ..verify.html import PASS_MEANING, render_html

SCHEMA_ROOT = "dprag.ledger-root/1"


class BundleDefect(click.ClickException):
    exit_code = 1


@click.group("audit")
def audit() -> None:
    """Audit bundles: verification and ledger inspection."""


class Corpus(dict):
    """{tenant: texts in index order}, plus ``ids`` {tenant: the provider's document ids} for the tenants given in
    the provider's own ``{"ids", "texts"}`` format (checked against the committed ids, C_docs)."""

    def __init__(self):
        super().__init__()
        self.ids: dict[str, list[str]] = {}


def _load_corpus(path: Path | None) -> Corpus | None:
    """``--corpus DIR``: one ``<tenant>.json`` per tenant, a JSON list of texts in index order or the provider's own
    ``{"ids": [...], "texts": [...]}`` (its service directory's ``docs/<tenant>.json``)."""
    if path is None:
        return None
    if not path.is_dir():
        raise AuditorInputError(f"--corpus {path}: not a directory of <tenant>.json files")
    out = Corpus()
    for f in sorted(path.glob("*.json")):
        try:
            data = loads_bounded(f.read_bytes(), what=str(f))
        except (OSError, ValueError) as e:
            raise AuditorInputError(f"--corpus {f}: not JSON ({e})") from None
        ids = None
        if isinstance(data, dict) and set(data) == {"ids", "texts"}:
            ids, data = data["ids"], data["texts"]
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise AuditorInputError(f"--corpus {f}: ids must be a JSON list of strings")
        if not isinstance(data, list) or not all(isinstance(t, str) for t in data):
            raise AuditorInputError(
                f'--corpus {f}: must be a JSON list of document texts in index order, or {{"ids", "texts"}}'
            )
        if ids is not None:
            if len(ids) != len(data):
                raise AuditorInputError(f"--corpus {f}: ids and texts differ in length")
            out.ids[f.stem] = ids
        out[f.stem] = data
    return out


def _committed_embedder(bundle: Path):
    """With --corpus: the committed embedder, if it is installed (a ``dprag.embedders`` entry point named by the
    descriptor's model), to re-embed the corpus and compare the index (§8.3); None otherwise (fidelity on trust,
    the verdict's trust list says so). Read through the bundle's own safe reader."""
    from ..protocol.bundlefs import BundleDir, BundleFileError
    from ..provider import models as serving_models

    try:
        with BundleDir.open(bundle) as d:
            opening = loads_bounded(d.read("auditor/embedder.json", 1 << 20), what="auditor/embedder.json")
        entry_point = opening["descriptor"]["entry_point"]
        return serving_models.load_embedder(entry_point) if isinstance(entry_point, str) else None
    except (BundleFileError, ValueError, AttributeError, KeyError, TypeError, DpragError, OSError):
        return None


def _generator(name: str | None, corpus: Path | None):
    """The generator an auditor replays answers with: ``toy`` here, others from ``dprag.generators``."""
    if name is None:
        return None
    if corpus is None:
        raise click.UsageError("--replay-answers needs --corpus")
    if name == "toy":
        from dprag.audit.testing.toy import ToyGenerator

        return ToyGenerator()
    from importlib.metadata import entry_points

    for ep in entry_points(group="dprag.generators"):
        if ep.name == name:
            return ep.load()()
    raise click.UsageError(f"--replay-answers {name}: no such generator (toy, or a dprag.generators entry point)")


class _Progress:
    """A progress bar on stderr for long windows (tqdm; silent for small ones or when stderr is no terminal)."""

    def __init__(self, enabled: bool):
        self.bars = {}
        self.enabled = enabled

    def __call__(self, step: str, n: int) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        bar = self.bars.get(step)
        if bar is None:
            bar = self.bars[step] = tqdm(desc=f"verify {step}", unit="rec", file=sys.stderr, leave=False)
        bar.update(n)

    def close(self):
        for b in self.bars.values():
            b.close()


@audit.command("verify")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option(
    "--receipts",
    type=click.Path(path_type=Path),
    multiple=True,
    help="JSONL of receipts supplied by accounts (never taken from the provider's bundle); repeat for several "
    "accounts' files.",
)
@click.option(
    "--key",
    type=click.Path(path_type=Path),
    default=None,
    help="file with the provider's note verifier key, pinned by the auditor (else the bundle's own key "
    "is used and the verdict says so).",
)
@click.option(
    "--trusted-checkpoint",
    type=click.Path(path_type=Path),
    default=None,
    help="a signed checkpoint seen earlier, or a receipt verified earlier: the ledger must extend it (detects "
    "truncation and forks).",
)
@click.option(
    "--witness",
    "witnesses",
    type=click.Path(path_type=Path),
    multiple=True,
    help="a witness's verifier key (c2sp.org/tlog-cosignature); repeatable.",
)
@click.option(
    "--min-witnesses",
    type=click.IntRange(min=0),
    default=None,
    help="cosignatures of the given witnesses the last checkpoint must carry (default 1 if any).",
)
@click.option(
    "--replay-answers",
    "replay",
    default=None,
    metavar="GENERATOR",
    help="replay every answer whose account handed over its question, with this generator (toy, or one "
    "registered under the dprag.generators entry points, e.g. smollm2), and compare h_answer; "
    "needs --corpus.",
)
@click.option(
    "--zk-vkey",
    type=click.Path(path_type=Path),
    default=None,
    help="the auditor's own Groth16 verification_key.json for the zk tenants' noise-then-select proofs.",
)
@click.option(
    "--corpus",
    type=click.Path(path_type=Path),
    default=None,
    help="directory of <tenant>.json (a list of texts in index order): check C_docs against it.",
)
@click.option("--mode", type=click.Choice(["full", "sampled"]), default="full", show_default=True)
@click.option("--samples", type=click.IntRange(min=1), default=None, help="records to check in sampled mode")
@click.option(
    "--theta",
    type=click.FloatRange(min=0, max=1, min_open=True),
    default=DEFAULT_THETA,
    show_default=True,
    help="coalition estimator: cosine similarity that links two queries.",
)
@click.option(
    "--origin",
    "origin",
    default=None,
    metavar="ORIGIN",
    help="the log's origin the auditor pinned, dprag/<chain id> (the chain id: hex SHA-256 of its genesis leaf): a "
    "fresh log under the same key then FAILs",
)
@click.option(
    "--coalition-window",
    type=click.IntRange(min=1),
    default=DEFAULT_WINDOW,
    help="coalition estimator: link queries at most this many ledger entries apart (default: the whole audit window).",
)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (schema dprag.verdict/3)")
@click.option(
    "--max-read",
    "max_read",
    default=None,
    metavar="BYTES",
    help="the most bytes to read from the bundle in all (e.g. 8G, 500M; default: the per-file sizes genesis implies)",
)
@click.option(
    "--public",
    "as_public",
    is_flag=True,
    help="print the verdict as it may be published: one JSON object (schema dprag.verdict-public/1) without the "
    "reasons' text, the coalition estimate or timings (spec/protocol.md §8)",
)
@click.option(
    "--html",
    "html_file",
    type=click.Path(path_type=Path),
    default=None,
    metavar="FILE",
    help="also write the verdict as one self-contained HTML page (spec/verdict-html.md): the auditor's full "
    "verdict, or with --public only what may be published",
)
@click.option(
    "--max-epsilon",
    "max_epsilon",
    type=click.FloatRange(min=0, min_open=True, max=1e6, max_open=True),
    default=10.0,
    show_default=True,
    help="a PASS with a larger ε, or with δ >= 1/n (n the largest tenant's documents), is PASS (weak), exit 4; "
    "one with δ >= 1 is PASS (vacuous), exit 5",
)
@click.option(
    "--state",
    "state",
    type=click.Path(path_type=Path),
    default=None,
    metavar="FILE",
    help="the auditor's state (spec/protocol.md §8.14): made by the first run, then only the leaves after it are "
    "replayed (fetch with --since its size); mode 0600, never published",
)
@click.option(
    "--state-key",
    "state_key",
    type=click.Path(path_type=Path),
    default=None,
    metavar="FILE",
    help="the MAC key of --state (64 hex characters, mode 0600; made with the first state)",
)
@click.option(
    "--state-hash",
    "state_hash",
    default=None,
    metavar="HEX",
    help="the SHA-256 the previous run printed for --state: refuse any other file",
)
@click.option(
    "--scheduler",
    default=None,
    metavar="ADDRESS",
    help="run the replay's maps and the coalition scan on this Dask scheduler (e.g. tcp://host:8786; needs the dask "
    "extra and dprag on its workers); the verdict is the same",
)
@click.option(
    "--workers",
    "dask_workers",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="run them on a local Dask cluster of N worker processes instead",
)
def verify_cmd(
    bundle: Path,
    receipts: tuple[Path, ...],
    key: Path | None,
    trusted_checkpoint: Path | None,
    witnesses: tuple[Path, ...],
    min_witnesses: int | None,
    replay: str | None,
    zk_vkey: Path | None,
    corpus: Path | None,
    mode: str,
    samples: int | None,
    theta: float,
    origin: str | None,
    coalition_window: int | None,
    as_json: bool,
    as_public: bool,
    max_read: str | None,
    html_file: Path | None,
    max_epsilon: float,
    state: Path | None,
    state_key: Path | None,
    state_hash: str | None,
    scheduler: str | None,
    dask_workers: int | None,
) -> int:
    """Re-check everything in BUNDLE: PASS ε δ (exit 0; 4 weak, 5 vacuous), FAIL reasons (exit 1), unusable input
    (exit 2), INCOMPLETE (exit 3)."""
    if mode == "sampled" and samples is None:
        raise click.UsageError("--mode sampled needs --samples S")
    if scheduler is not None and dask_workers is not None:
        raise click.UsageError("--workers starts a local Dask cluster; with --scheduler the cluster's workers are used")
    if mode == "full" and samples is not None:
        raise click.UsageError("--samples needs --mode sampled")
    if not bundle.is_dir():
        raise click.UsageError(f"BUNDLE {bundle}: no such directory")
    if origin is not None:
        try:
            origin = parse_origin(origin)
        except AuditorInputError as e:
            raise click.UsageError(str(e)) from None
    _check_html_target(html_file)
    bar = _Progress(enabled=not as_json and sys.stderr.isatty())
    try:
        v = verify(
            bundle,
            receipts=list(receipts) or None,
            mode=mode,
            samples=samples,
            key=key,
            origin=origin,
            trusted_checkpoint=trusted_checkpoint,
            corpus=_load_corpus(corpus),
            embedder=_committed_embedder(bundle) if corpus is not None else None,
            witnesses=list(witnesses),
            min_witnesses=min_witnesses,
            replay_generator=_generator(replay, corpus),
            zk_vkey=zk_vkey,
            theta=theta,
            coalition_window=coalition_window,
            progress=bar,
            max_read=_bytes_flag("--max-read", max_read),
            max_epsilon=max_epsilon,
            state=state,
            state_key=state_key,
            state_hash=state_hash,
            dask=scheduler if scheduler is not None else dask_workers,
        )
    finally:
        bar.close()
    if html_file is not None:
        _write_page(html_file, render_html(v, public=as_public).encode(), private=not as_public)
    if as_public:
        _say(json.dumps(v.to_public_json(), sort_keys=True))
        return _exit(v)
    if as_json:
        out = v.to_json()
        if v.state_hash is not None:
            out["state"] = {"size": (v.history or {}).get("size"), "sha256": v.state_hash}
        _say(json.dumps(out, sort_keys=True))
        return _exit(v)
    _say(v.headline())
    for w in v.warnings():
        _say(f"  warning: {w}")
    if v.verdict == "PASS":
        _say(f"  meaning: {PASS_MEANING}")
        ch = v.channels
        _say(f"  relation: {ch['relation']}")
        _say(
            f"  retrieval channel: ε={ch['retrieval']['epsilon']:.6g} δ={ch['retrieval']['delta']:.3g} "
            f"— {ch['retrieval']['covers']}"
        )
        _say(
            f"  generation channel: ε={ch['generation']['epsilon']:.6g} "
            f"δ={ch['generation'].get('delta', 0.0):.3g} — {ch['generation']['covers']}"
        )
    elif v.verdict == "INCOMPLETE":
        for r in v.incomplete[1:]:
            _say(f"  incomplete: {r}")
    else:
        for r in v.reasons[1:]:
            _say(f"  {r}")
    _say(f"  provider key: {v.provider_key} ({_key_provenance(v)})")
    if v.trusted_checkpoint is not None:
        _say(f"  extends the trusted checkpoint of size {v.trusted_checkpoint}")
    for ch, text in v.attestation.items():
        _say(f"  attestation ({ch}): {text}")
    for t in v.trust:
        _say(f"  on trust: {t}")
    if v.guarantee:
        _say(f"  {v.guarantee}")
    for r in v.rejected_evidence:
        _say(f"  rejected evidence (not held against the provider): {r}")
    _say("  checked: " + ", ".join(f"{k}={n}" for k, n in sorted(v.checked.items())))
    if v.state_hash is not None:
        _say(f"  state: {state} now covers size {(v.history or {}).get('size')} (--state-hash {v.state_hash})")
    return _exit(v)


def _key_provenance(v) -> str:
    """How the log's current key is known: pinned by the auditor, authenticated by rotation leaves from the key the
    auditor pinned (naming it, the rotations and the keys that signed each epoch), or taken from the bundle."""
    if not v.key_pinned:
        return "NOT pinned: taken from the bundle"
    h = v.history or {}
    if h.get("pinned_key") is None or h.get("pinned_key") == v.provider_key:
        return "pinned by the auditor"
    steps = ", ".join(f"leaf {r['pos']}: {r['key']}" for r in h.get("key_rotations") or [])
    by_epoch = "; ".join(f"epoch {e['epoch']}: {', '.join(e['keys'])}" for e in h.get("epoch_keys") or [])
    return (
        f"NOT the pinned key: the auditor pinned {h.get('pinned_key')}; the current key was authenticated by "
        f"rotation leaves each signed by the key before it ({steps}); keys by epoch: {by_epoch}"
    )


#: the verify command's exit codes (spec/protocol.md §8.11): 3 for INCOMPLETE, never PASS's 0 nor FAIL's 1
EXIT_CODES = {"PASS": 0, "FAIL": 1, "INCOMPLETE": 3}
#: a PASS that guarantees little has a code of its own, never FAIL's (spec/protocol.md §8.11)
STRENGTH_EXIT_CODES = {"weak": 4, "vacuous": 5}


def _exit(v) -> int:
    return STRENGTH_EXIT_CODES.get(v.strength, EXIT_CODES.get(v.verdict, 1))


def _check_html_target(path: Path | None) -> None:
    """``--html FILE`` is checked before the verification runs: a new or regular file in an existing directory,
    never a symbolic link (the page is written in its place, not through it)."""
    if path is None:
        return
    if path.is_symlink():
        raise AuditorInputError(f"--html {path}: is a symbolic link; refusing to write through it")
    if path.exists() and not path.is_file():
        raise AuditorInputError(f"--html {path}: exists and is not a regular file")
    if not path.parent.is_dir():
        raise AuditorInputError(f"--html {path}: no such directory {path.parent}")


def _write_page(path: Path, data: bytes, private: bool) -> None:
    """Write ``path`` atomically, as ``bundle_export.write_atomically`` does (temporary file, fsync, rename), with
    the temporary file created exclusively (``mkstemp``: a planted link is never followed); the auditor's page is
    0600, the public one 0644. A symbolic link at ``path`` is refused (exit 2), also if it appeared meanwhile."""
    _check_html_target(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:100]}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), 0o600 if private else 0o644)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise AuditorInputError(f"--html {path}: cannot write ({e.strerror or e})") from None


def _bytes_flag(flag: str, text: str | None) -> int | None:
    """``123``, ``500K``, ``500M``, ``8G`` (powers of 1024) as bytes; UsageError naming ``flag`` otherwise."""
    if text is None:
        return None
    t = text.strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    digits = t[:-1] if scale > 1 else t
    if not digits.isdigit() or int(digits) == 0 or len(digits) > 15:
        raise click.UsageError(f"{flag} {text[:40]!r}: must be a positive number of bytes (e.g. 500M, 8G)")
    return int(digits) * scale


def _say(line: str) -> None:
    """One line of the verdict on the terminal, made printable (a bundle's strings cannot move the cursor)."""
    click.echo(printable(line))


@audit.command("fetch")
@click.option("--url", required=True, help="the provider's dprag serve URL")
@click.option(
    "--key",
    "key_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="the auditor's key file (hex Ed25519 seed); without it only public/ is fetched",
)
@click.option("--out", required=True, type=click.Path(path_type=Path), help="a new directory for the bundle")
@click.option(
    "--max-read", "max_read", default="8G", show_default=True, metavar="BYTES", help="refuse a larger archive"
)
@click.option(
    "--receipts",
    "receipts_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="the accounts' receipts (JSONL; repeatable): collect a consistency proof from the bundle to every receipt "
    "signed beyond it (needs --key)",
)
@click.option(
    "--since",
    "since",
    type=click.IntRange(min=0),
    default=0,
    metavar="SIZE",
    help="only the log from this size on (the size your --state covers; spec/protocol.md §8.14)",
)
def fetch_cmd(
    url: str, key_file: Path | None, out: Path, max_read: str, receipts_files: tuple[Path, ...], since: int
) -> int:
    """Download the bundle, cut at a freshly signed checkpoint, from a provider's HTTP API into OUT (regular files
    only, no links, nothing outside OUT); then run dprag audit verify OUT."""
    from ..client.remote import RemoteError, fetch_bundle
    from ..protocol.request import AccountKey

    if out.exists() or out.is_symlink():
        raise click.UsageError(f"--out {out}: already exists (the bundle goes into a new directory)")
    if receipts_files and key_file is None:
        raise click.UsageError("--receipts needs --key (the consistency proofs are fetched as the auditor)")
    sizes = [s for f in receipts_files for s in _receipt_sizes(f)]
    key = None
    if key_file is not None:
        try:
            key = AccountKey.from_hex(key_file.read_text().strip())
        except (OSError, ValueError, DpragError) as e:
            raise click.UsageError(f"--key {key_file}: not an Ed25519 key file ({e})") from None
    try:
        fetch_bundle(
            url,
            out,
            auditor_key=key,
            public_only=key is None,
            max_bytes=_bytes_flag("--max-read", max_read),
            since=since,
        )
    except (RemoteError, ValueError) as e:
        raise click.UsageError(f"--url {url}: {e}") from None
    except DpragError as e:
        raise click.UsageError(f"--url {url}: {e}") from None
    if key is not None:
        from ..client.remote import collect_consistency, collect_rotations

        got = load_bundle(out)
        n = got.first + len(got.leaves)
        try:
            rotations = collect_rotations(url, n)
        except RemoteError as e:
            raise click.UsageError(f"--url {url}: GET /v1/keys: {e}") from None
        (out / "auditor" / "rotations.jsonl").write_bytes(b"".join(x + b"\n" for x in rotations))
        _say(f"key rotations beyond the bundle's size {n}: {len(rotations)}")
        if sizes:
            lines = collect_consistency(url, n, sizes, auditor_key=key)
            (out / "auditor" / "consistency.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
            beyond = len({s for s in sizes if s > n})
            _say(f"consistency proofs: {len(lines)} of {beyond} receipt sizes beyond the bundle's {n}")
    _say(f"bundle -> {out}" + ("" if key else " (public part only)"))
    return 0


def _receipt_sizes(path: Path) -> list[int]:
    """The sizes the receipts of a receipts file were signed at (lines that are not receipts are skipped: the
    verifier reports them)."""
    out = []
    try:
        text = path.read_bytes()
    except OSError as e:
        raise click.UsageError(f"--receipts {path}: unreadable ({e.strerror})") from None
    for line in text.splitlines():
        try:
            obj = loads_bounded(line, what="receipt line")
        except ValueError:
            continue
        rc = obj.get("receipt", obj) if isinstance(obj, dict) else None
        size = rc.get("size") if isinstance(rc, dict) else None
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            out.append(size)
    return out


@audit.group("ledger")
def ledger() -> None:
    """Inspect a bundle's public ledger."""


def _leaves(bundle: Path) -> list[bytes]:
    if not bundle.is_dir():
        raise click.UsageError(f"BUNDLE {bundle}: no such directory")
    b = load_bundle(bundle)
    bad = [d for d in b.defects if "leaves.bin" in d]
    if bad:
        raise BundleDefect(bad[0])
    return b.leaves


@ledger.command("root")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def root_cmd(bundle: Path, as_json: bool) -> int:
    """Size and RFC 6962 root of the ledger."""
    leaves = _leaves(bundle)
    root = root_from_leaves(leaves).hex()
    if as_json:
        click.echo(json.dumps({"schema": SCHEMA_ROOT, "size": len(leaves), "root": root}, sort_keys=True))
    else:
        click.echo(f"{len(leaves)} {root}")
    return 0


@ledger.command("leaves")
@click.argument("bundle", type=click.Path(path_type=Path))
def leaves_cmd(bundle: Path) -> int:
    """Every leaf's exact bytes as hex, one per line (anyone can recompute the root)."""
    out = sys.stdout
    for leaf in _leaves(bundle):
        out.write(leaf.hex() + "\n")
    return 0
