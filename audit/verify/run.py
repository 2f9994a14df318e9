"""What the checks of spec/protocol.md §8 share: the parsed bundle, the reasons, the counts (``Run``), the
openings parsed on demand (``Openings``), and the guard that makes an exception a check did not anticipate a
FAIL of that check (§8.11: never a traceback)."""

from __future__ import annotations

import functools
import json
import operator
import time
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, NamedTuple, ParamSpec, TypeVar, cast, overload

import numpy as np

from ..protocol.bundle import Bundle
from ..protocol.encoding import EncodingError, hexbytes
from ..protocol.ledger import NoteVerifier
from ..protocol.policy import Policy
from ..protocol.provider_keys import KeyChain
from ..protocol.registry import Registry
from .pool import cpu_seconds
from .qrows import QRows
from .records import LeafRecords

if TYPE_CHECKING:
    from .scores import ScoreCache
    from .state import AuditorState

_P = ParamSpec("_P")
_R = TypeVar("_R")

MAX_REASONS = 1000
MAX_UNITS = 1 << 62


@dataclass
class EpochView:
    """One epoch of the log as the verifier opened it (spec/protocol.md §3.4): its number, the position of its
    policy leaf (0: genesis), its policy and its seed (None where they do not open)."""

    number: int
    pos: int
    policy: Policy | None
    seed: bytes | None


class SeenReceipts(NamedTuple):
    """The receipts §8.6 accepted (§8.14 keeps them): per leaf, in position order, its position, the digest of the
    accepted body (32 bytes), the account and the counter."""

    pos: np.ndarray
    digest: np.ndarray
    account: list[str]
    counter: np.ndarray


class Run:
    """What the checks share: the parsed bundle, the reasons, the counts."""

    #: set by ``history.check_8_10_history`` only (read with ``getattr``): the verdict's origin, epochs and keys
    history_info: dict[str, Any]

    def __init__(self, b: Bundle, progress: Callable[[str, int], None] | None):
        self.b = b
        self.reasons: list[str] = []
        #: what the verdict could not check with what it was given (INCOMPLETE when there is no FAIL reason)
        self.incomplete: list[str] = []
        self.rejected: list[str] = []
        self.checked: Counter[str] = Counter()
        self.progress = progress or (lambda step, n: None)
        #: the parsed leaves (a dict, or None where one did not parse), set by §8.2 (records.py)
        self.records: LeafRecords = LeafRecords(0)
        self.genesis: dict[str, Any] | None = None
        self.policy: Policy | None = None
        self.seed: bytes | None = None
        self.key: NoteVerifier | None = None
        self.tenants: dict[str, dict[str, Any]] = {}
        self.accounts: dict[str, dict[str, Any]] = {}
        #: the registry as the log builds it (genesis, then its registry leaves, §3.2); None before §8.3 reads it
        self.registry: Registry | None = None
        #: the log's epochs, oldest first (§3.4): genesis's, then one per policy leaf (set by §8.3)
        self.epochs: list[EpochView] = []
        #: the provider's keys along the log (genesis's, then its rotation leaves, §3.3); None before §8.3
        self.keys: KeyChain | None = None
        #: ``keys`` and the rotations beyond the bundle the accounts handed in (``receipts._take_rotations``): what
        #: their receipts and refusals are checked under
        self.receipt_keys: KeyChain | None = None
        self.openings = Openings(b.openings_lines)  # pos -> the opening, parsed on demand from its line
        #: pos -> Q (int16 little-endian) of the leaves §8.7 accepted, one matrix (qrows.py)
        self.qembs: QRows = QRows()
        #: positions of well-formed query / recovery leaves with a valid request, increasing (8 bytes each)
        self.queries: array[int] = array("q")
        self.scores: ScoreCache | None = None  # the scores of §4 (a scores.ScoreCache), made by their first reader
        #: the hashes of the leaves from ``base`` on, 32 bytes each, end to end (``leaf_hash``)
        self.leaf_hashes: bytes = b""
        self.prefix_roots: dict[int, bytes] = {}
        #: the signed refusals an account handed over: (receipts line, refusal body, the account's request or None)
        self.refusals: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = []
        #: what the replay ends with: each account's last counter and each document's spend (units)
        self.final_counters: dict[str, int] = {}
        self.final_spend: dict[str, list[int]] = {}
        self.timings: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        #: the leaves below ``base`` were verified by earlier runs (``prior``, the auditor's state, §8.14): the
        #: checks replay only the leaves from ``base`` on and start from what ``prior`` carries
        self.base = 0
        self.prior: AuditorState | None = None
        #: the certified ε and δ of the policies this run concluded on, with their digest (kept in the auditor's
        #: state: the next run with the same policies reuses them)
        self.certified: dict[str, Any] | None = None
        #: whether this run leaves an auditor's state (the coalition check then keeps every row's label)
        self.keeps_state = False
        #: the coalition check's new rows (their tenants and keys) and, with a state, every row's
        #: (Q, account codes, positions, labels) (``coalition._coalition_estimate``)
        self.coalition_new: tuple[list[str], bytes] = ([], b"")
        self.coalition_rows: tuple[Any, Any, Any, Any] | None = None
        #: the receipts §8.6 accepted, this run's and the state's (None: §8.6 did not run, the state's stand)
        self.receipts_seen: SeenReceipts | None = None

    @property
    def origin(self) -> str:
        """The log's origin, ``dprag/<chain id>`` (spec/protocol.md §3.1): its checkpoints, receipts and refusals
        name it (empty when the bundle has no leaf 0)."""
        from ..protocol.chain import origin_of

        return origin_of(self.b.leaves[0]) if self.b.leaves else ""

    def epoch_at(self, pos: int) -> EpochView:
        """The epoch of the leaf at ``pos``: the last whose policy leaf lies below it."""
        for ep in reversed(self.epochs):
            if ep.pos < pos or ep.number == 0:
                return ep
        raise IndexError("no epoch read yet")

    def policy_at(self, pos: int) -> Policy:
        """The policy of the leaf at ``pos`` (the checks after §8.4 run only with every epoch's policy)."""
        return cast(Policy, self.epoch_at(pos).policy)

    def n_docs_at(self, tenant: str, pos: int) -> int:
        """The documents ``tenant`` had for the leaf at ``pos`` (genesis's, then its documents leaves below, §3.5)."""
        n = 0
        for at, size in self.tenants[tenant].get("sizes") or [(0, self.tenants[tenant]["n"])]:
            if at < pos or at == 0:
                n = size
        return n

    def seed_at(self, pos: int) -> bytes:
        return cast(bytes, self.epoch_at(pos).seed)

    def leaf_hash(self, pos: int) -> bytes:
        """The hash of the leaf at ``pos`` (below ``base``: the state's)."""
        if pos < self.base and self.prior is not None:
            return bytes(self.prior.leaf_hashes[pos])
        k = 32 * (pos - self.base)
        if not 0 <= k < len(self.leaf_hashes):
            raise IndexError(f"no leaf hash at position {pos}")
        return self.leaf_hashes[k : k + 32]

    def is_query(self, pos: int) -> bool:
        """Whether §8.7 accepted the leaf at ``pos`` (``queries``)."""
        k = bisect_left(self.queries, pos)
        return k < len(self.queries) and self.queries[k] == pos

    def fail(self, check: str, what: str) -> None:
        if len(self.reasons) < MAX_REASONS:
            self.reasons.append(f"{check}: {what}")

    def ok(self, check: str, n: int = 1) -> None:
        self.checked[check] += n

    def ok_at(self, pos: int, check: str) -> None:
        """``ok`` for the leaf at ``pos``, unless an earlier run counted it (below ``base``)."""
        if pos >= self.base:
            self.checked[check] += 1

    def fail_at(self, pos: int, check: str, what: str) -> None:
        """``fail`` for the leaf at ``pos``, unless an earlier run reported it (below ``base``: the state keeps
        its reasons)."""
        if pos >= self.base:
            self.fail(check, what)

    @property
    def n(self) -> int:
        return len(self.b.leaves)

    def let_go_query_leaves(self) -> None:
        """After §8.7: the query leaves' bytes have no reader left (their records, hashes and checked Q hold what
        the later checks read), so only the other leaves stay (``KeptLeaves``); not when the ledger check did not
        hash every leaf (the auditor's state would hash them)."""
        b = self.b
        if isinstance(b.leaves, KeptLeaves) or len(self.leaf_hashes) != 32 * (len(b.leaves) - self.base):
            return
        kept: dict[int, bytes] = {}
        for i in [0, *map(int, self.records.others()), *range(len(self.records), len(b.leaves))]:
            rec = self.records[i] if 0 < i < len(self.records) else None
            if i == 0 or not isinstance(rec, dict) or rec.get("type") != "query":
                kept[i] = b.leaves[i]
        b.leaves = KeptLeaves(len(b.leaves), kept)

    def drop_openings(self) -> None:
        """The last reader of the scores and of the openings is behind us (memory at scale; the coalition
        estimate reads the checked Q, ``qembs``)."""
        self.scores = None
        self.openings.drop()


def is_hex(v: Any, length: int) -> bool:
    try:
        hexbytes(v, "h", length)
        return True
    except EncodingError:
        return False


def is_int(v: Any, lo: int = 0, hi: int = MAX_UNITS) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


class KeptLeaves(Sequence[bytes]):
    """The bundle's leaves after §8.7 (``Run.let_go_query_leaves``): as many as before, those that are not query
    leaves still readable; reading a query leaf is a ``LookupError`` naming it (spec/protocol.md §8 item 13)."""

    def __init__(self, n: int, kept: dict[int, bytes]):
        self.n, self.kept = n, kept

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, k: int) -> bytes: ...

    @overload
    def __getitem__(self, k: slice) -> list[bytes]: ...

    def __getitem__(self, k: int | slice) -> bytes | list[bytes]:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(self.n))]
        if not -self.n <= k < self.n:
            raise IndexError("leaf index out of range")
        k %= self.n
        try:
            return self.kept[k]
        except KeyError:
            raise LookupError(f"leaf {k}: a query leaf, let go after §8.7 (memory at scale)") from None


class Openings:
    """pos -> the opening at ledger position pos, parsed on demand from its line of auditor/openings.jsonl
    (``json.loads`` of bytes the canonical check accepted: the values ``decode`` gives). The parsed openings
    of a 10^5-query window would take ~540 MB, their lines take ~210 MB; the hot paths (requests, retrieval)
    parse the lines in the workers, the generation check parses each one once, in ledger order."""

    def __init__(self, lines: Sequence[bytes]):
        self.lines = lines
        self._line_of = np.full(0, -1, dtype=np.int64)  # pos -> its line in auditor/openings.jsonl, -1: none

    def set(self, pos: int, k: int) -> None:
        """The opening at ``pos`` (>= 0) is line ``k`` (8 bytes per ledger position, not a dict's ~100)."""
        if pos >= self._line_of.size:
            grown = np.full(max(pos + 1, 2 * self._line_of.size), -1, dtype=np.int64)
            grown[: self._line_of.size] = self._line_of
            self._line_of = grown
        self._line_of[pos] = k

    def _k(self, pos: int) -> int:
        try:
            p = operator.index(pos)
        except TypeError:
            return -1
        return int(self._line_of[p]) if 0 <= p < self._line_of.size else -1

    def line(self, pos: int) -> bytes | None:
        k = self._k(pos)
        return None if k < 0 else self.lines[k]

    def get(self, pos: int, default: Any = None) -> Any:
        line = self.line(pos)
        return default if line is None else json.loads(line)

    def __getitem__(self, pos: int) -> dict[str, Any]:
        line = self.line(pos)
        if line is None:
            raise KeyError(pos)
        op: dict[str, Any] = json.loads(line)
        return op

    def __contains__(self, pos: int) -> bool:
        return self._k(pos) >= 0

    def drop(self) -> None:
        """No reader is left: let the lines go (memory at scale; a spool is closed)."""
        close = getattr(self.lines, "close", None)
        if close is not None:
            close()
        self.lines, self._line_of = [], np.full(0, -1, dtype=np.int64)


def guarded(
    check: str,
) -> Callable[[Callable[Concatenate[Run, _P], _R]], Callable[Concatenate[Run, _P], _R | None]]:
    """Decorator of a check reporting as ``check``: an exception it did not anticipate is a FAIL of that check,
    never a crash (the input is the provider's, so a crash would let it turn FAIL into 'unusable'); its wall
    and CPU seconds add to ``run.timings[check]`` and ``run.cpu[check]``. The wrapped check returns None then."""

    def wrap(fn: Callable[Concatenate[Run, _P], _R]) -> Callable[Concatenate[Run, _P], _R | None]:
        call = cast("Callable[..., _R]", fn)  # guarded_check passes its positional arguments through

        @functools.wraps(fn)
        def guarded_check(run: Run, *args: Any) -> _R | None:
            t0, c0 = time.perf_counter(), cpu_seconds()
            try:
                return call(run, *args)
            except Exception as e:  # noqa: BLE001 — deliberately total: see the docstring
                if getattr(e, "auditor_input", False):
                    raise  # the auditor must supply an input (exit 2), not a defect of the bundle
                run.fail(check, f"unexpected {type(e).__name__} while checking (the bundle is malformed)")
                return None
            finally:
                run.timings[check] = run.timings.get(check, 0.0) + time.perf_counter() - t0
                run.cpu[check] = run.cpu.get(check, 0.0) + cpu_seconds() - c0

        return cast("Callable[Concatenate[Run, _P], _R | None]", guarded_check)

    return wrap
