"""The verifier's inputs (spec/protocol.md §8 and §8.11): the auditor's own files and flags (``--receipts``,
``--key``, ``--trusted-checkpoint``, ``--witness``, ``--min-witnesses``, ``--zk-vkey``, ``--mode``, ``--samples``,
``--theta``), any defect of which is exit 2 naming the flag (``AuditorInputError``), and the bundle, read by
``load_bundle`` (§8.1: every defect inside it is a FAIL, only a well-formed genesis of another protocol version
is exit 2)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dprag.errors import DpragError

from ..protocol.bundle import AuditorInputError, Bundle
from ..protocol.certify import DEFAULT_MAX_EPSILON
from ..protocol.commitments import PREVIOUS_RELEASE, PREVIOUS_VERSION, PROTOCOL_VERSION
from ..protocol.encoding import loads_bounded
from ..protocol.ledger import NoteVerifier
from ..protocol.spool import SpooledLines

if TYPE_CHECKING:
    from dprag.zk.keys import VerifyingKey

    from ..protocol.ledger.witness import WitnessVerifier


@dataclass
class AuditorInputs:
    """The auditor's own inputs, read and checked: the pinned provider key (``--key``), the trusted checkpoint
    note, the witnesses' verifier keys and how many must cosign, the zk verification key, and the receipts
    files' lines, spooled (None without ``--receipts``; §8.6 takes them and closes the spool once parsed)."""

    pinned: str | None
    trusted: bytes | None
    witnesses: list[WitnessVerifier]
    min_witnesses: int
    zk_vkey: VerifyingKey | None
    receipts: SpooledLines | None
    #: ``--max-epsilon``: beyond it a PASS is weak (``verdict.guarantee_strength``)
    max_epsilon: float = DEFAULT_MAX_EPSILON


def read_auditor_file(
    path: str | os.PathLike[str], what: str, cap: int, *, private: bool = False, error: type = AuditorInputError
) -> bytes:
    """The auditor's own file (``--receipts``, ``--key``, ``--trusted-checkpoint``): a regular file (the auditor
    may keep it behind a link), read without blocking and at most ``cap`` bytes; else exit 2 naming the flag.
    ``private`` (the state and its key, §8 item 14): never through a link, and no group or other mode bits;
    ``error``: the AuditorInputError subclass raised."""
    return b"".join(auditor_file_chunks(path, what, cap, private=private, error=error))


def auditor_file_chunks(
    path: str | os.PathLike[str], what: str, cap: int, *, private: bool = False, error: type = AuditorInputError
) -> Iterator[bytes]:
    """``read_auditor_file``'s bytes as they are read (at most 16 MiB at a time), with its checks."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | (os.O_NOFOLLOW if private else 0))
    except OSError as e:
        why = "a symbolic link (refused)" if private and os.path.islink(path) else e.strerror
        raise error(f"{what} {path}: cannot read ({why})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{what} {path}: not a regular file")
        if private and mode & 0o077:
            raise error(f"{what} {path}: readable or writable by others (mode {mode & 0o777:o}); chmod 600")
        total = 0
        while total <= cap:
            try:
                c = os.read(fd, min(1 << 24, cap + 1 - total))
            except OSError as e:
                raise error(f"{what} {path}: cannot read ({e.strerror})") from None
            if not c:
                break
            total += len(c)
            if total > cap:
                raise error(f"{what} {path}: larger than {cap} bytes")
            yield c
    finally:
        os.close(fd)


def read_auditor_inputs(
    *,
    mode: str,
    samples: int | None,
    theta: float,
    key: str | Path | None,
    trusted_checkpoint: str | Path | None,
    witnesses: Iterable[str | Path],
    min_witnesses: int | None,
    zk_vkey: str | Path | None,
    receipts: str | Path | Sequence[str | Path] | None,
    max_epsilon: float = DEFAULT_MAX_EPSILON,
) -> AuditorInputs:
    """The auditor's flags and files, checked in this order; the first defect is exit 2 naming its flag."""
    if mode not in ("full", "sampled"):
        raise AuditorInputError("--mode must be 'full' or 'sampled'")
    if mode == "sampled" and (samples is None or samples < 1):
        raise AuditorInputError("--mode sampled needs --samples >= 1")
    if mode == "full" and samples is not None:
        raise AuditorInputError("--samples is only meaningful with --mode sampled")
    if not (isinstance(theta, (int, float)) and 0 < theta <= 1):
        raise AuditorInputError(f"--theta must lie in (0, 1], got {theta!r}")
    if isinstance(max_epsilon, bool) or not (isinstance(max_epsilon, (int, float)) and 0 < max_epsilon < 1e6):
        raise AuditorInputError(f"--max-epsilon must be a number in (0, 10^6), got {max_epsilon!r}")
    pinned = None
    if key is not None:
        pinned = read_auditor_file(key, "--key", 4096).decode("utf-8", "replace").strip()
        try:
            NoteVerifier.from_vkey(pinned)
        except DpragError as e:
            raise AuditorInputError(f"--key {key}: not a note verifier key ({e})") from None
    trusted = (
        None if trusted_checkpoint is None else read_auditor_file(trusted_checkpoint, "--trusted-checkpoint", 1 << 16)
    )
    from ..protocol.ledger.witness import WitnessVerifier

    wit: list[WitnessVerifier] = []
    for w in witnesses:
        text = read_auditor_file(w, "--witness", 4096).decode("utf-8", "replace").strip()
        try:
            wit.append(WitnessVerifier.from_vkey(text))
        except DpragError as e:
            raise AuditorInputError(f"--witness {w}: not a witness verifier key ({e})") from None
    if min_witnesses is None:
        min_witnesses = 1 if wit else 0
    vk: VerifyingKey | None = None
    if zk_vkey is not None:
        from dprag.zk.formats import FormatError, vk_from_json

        try:
            vk = vk_from_json(loads_bounded(read_auditor_file(zk_vkey, "--zk-vkey", 1 << 20), what="--zk-vkey"))
        except (ValueError, FormatError) as e:
            raise AuditorInputError(f"--zk-vkey {zk_vkey}: not a snarkjs verification_key.json ({e})") from None
    if not isinstance(min_witnesses, int) or not 0 <= min_witnesses <= len(wit):
        raise AuditorInputError(f"--min-witnesses must lie in [0, {len(wit)}] (the number of --witness keys)")
    receipts_data = None if receipts is None else _read_receipts(receipts)
    return AuditorInputs(pinned, trusted, wit, min_witnesses, vk, receipts_data, float(max_epsilon))


def _read_receipts(receipts: str | Path | Sequence[str | Path]) -> SpooledLines:
    """One or several accounts' receipts files (``--receipts`` repeated), read as one — their lines in order, a
    file's last line ended by the next file — into a private spool (``protocol.spool``: 16 bytes a line in memory,
    spec/protocol.md §8 item 13)."""
    paths = [receipts] if isinstance(receipts, (str, os.PathLike)) else list(receipts)
    out = SpooledLines()
    try:
        for p in paths:
            last = b""
            for c in auditor_file_chunks(p, "--receipts", 1 << 34):
                out.feed(c)
                last = c
            if last and not last.endswith(b"\n"):
                out.feed(b"\n")
    except BaseException:
        out.close()
        raise
    return out.done()


def check_version(b: Bundle) -> None:
    """A well-formed genesis of a version newer than this verifier's, or of the version before it (whose format
    this verifier no longer reads), is the auditor's problem (exit 2)."""
    version = b.version
    if isinstance(version, int) and not isinstance(version, bool) and version == PREVIOUS_VERSION:
        raise AuditorInputError(
            f"the bundle is protocol version {version}, which this verifier (version {PROTOCOL_VERSION}) no longer "
            f"reads: verify it with {PREVIOUS_RELEASE}, the last release that reads version {version}"
        )
    if isinstance(version, int) and not isinstance(version, bool) and version > PROTOCOL_VERSION:
        raise AuditorInputError(
            f"the bundle is protocol version {version!r}, newer than this verifier's {PROTOCOL_VERSION}: "
            "use a verifier that knows it"
        )
