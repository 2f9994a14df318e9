"""§8.6's receipts, parsed in the workers into a compact table (spec/protocol.md §8 item 13): a receipts file of
10^6 lines is ~830 MB, and each parsed body a dict of ~15 fields; what the checks after the parse read of a valid
receipt is a fixed-width row (``ROW``: positions, hashes, the body's digest, account and tenant codes: 216 bytes),
so the verifier holds the table, never the bodies. The bodies of receipts that carry their question are kept only
for the answer replay (§8.9).

``parse_chunk`` is the map's function: a chunk of receipt lines in, a ``Chunk`` out (each line's digest, for the
duplicate check, its outcome, and the valid ones' rows); ``ReceiptTable.of`` joins the chunks in line order."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..protocol.encoding import EncodingError, decode, decode_content, excerpt
from ..protocol.encoding import encode as encode_canonical
from ..protocol.receipts import verify_receipt
from ..protocol.request import question_commitment, request_hash
from ..protocol.retrieval import top_commitment
from .run import Run, is_hex, is_int

__all__ = [
    "OTHER_LOG",
    "REJECTED",
    "ROW",
    "VALID",
    "Chunk",
    "OtherLog",
    "ReceiptCtx",
    "ReceiptTable",
    "one_receipt",
    "parse_chunk",
]

#: a valid receipt's row: its line, leaf position, size, counter, account and tenant codes, whether the account's
#: citations fail to open h_top, and the body's root, leaf hash, h_req, h_top and digest (SHA-256 of its encoding)
ROW = np.dtype(
    [
        ("k", "<i8"),
        ("pos", "<i8"),
        ("size", "<i8"),
        ("counter", "<i8"),
        ("account", "<i4"),
        ("tenant", "<i4"),
        ("top_bad", "?"),
        ("root", "u1", (32,)),
        ("leaf", "u1", (32,)),
        ("h_req", "u1", (32,)),
        ("h_top", "u1", (32,)),
        ("digest", "u1", (32,)),
    ]
)
#: a line's outcome in ``Chunk.status``
VALID, REJECTED, OTHER_LOG = 0, 1, 2


class ReceiptCtx:
    """What ``one_receipt`` reads of the run (the genesis, the origin and the provider's key), pickled to the
    workers: the key travels as its vkey (its Ed25519 key object does not pickle) and is parsed again there."""

    def __init__(self, run: Run, keep: bool):
        self.genesis, self.keys = run.genesis, run.receipt_keys or run.keys  # KeyChain pickles its keys as vkeys
        self.origin = run.origin
        self.keep = keep  # keep the bodies of the receipts that carry their question (the answer replay, §8.9)


class OtherLog(str):
    """``one_receipt``'s answer for a receipt validly signed by one of this log's keys for another origin: the
    provider's key signed for a log that is not this one (equivocation, a FAIL; each key is one log's)."""


def one_receipt(run: ReceiptCtx, line: bytes) -> tuple[dict[str, Any], list[int] | None, str | None] | str:
    """One receipt line: (body, citations) if it is valid provider-signed evidence, else the rejection. The line is
    read by content (``decode_content``: any JSON formatting, but no duplicate key, float or lone surrogate)."""
    try:
        try:
            obj = decode(line, what="receipt line")  # the common case, canonical as the client wrote it: fast
        except EncodingError:
            obj = decode_content(line, what="receipt line")  # reformatted by a JSON tool: read by content
        extra: dict[str, Any] = {}
        if isinstance(obj, dict) and "receipt" in obj:
            if set(obj) - {"receipt", "top", "request", "question"}:
                raise EncodingError("unknown fields beside receipt / top / request / question")
            rc, top = obj["receipt"], obj.get("top")
            extra = {k: obj[k] for k in ("request", "question") if k in obj}
        else:
            rc, top = obj, None
        if run.keys is None or run.genesis is None:
            raise EncodingError("no provider key to check it against")
        size = rc.get("size") if isinstance(rc, dict) else None
        body = run.keys.verifying(size, lambda key: verify_receipt(rc, key), "receipt")
        if body["origin"] != run.origin:
            return OtherLog(
                f"validly signed by this log's key {body['key'][:16]} for another log, {excerpt(body['origin'])} "
                "(each provider key signs for one log: equivocation)"
            )
        if top is not None and (not isinstance(top, list) or not all(is_int(x, 0, (1 << 32) - 1) for x in top)):
            raise EncodingError("the account's citations are malformed")
        if "request" in extra and (
            not isinstance(extra["request"], dict) or request_hash(extra["request"]).hex() != body["h_req"]
        ):
            raise EncodingError("the request the account supplied is not the one the receipt names")
        if "question" in extra:
            req = extra.get("request")
            if (
                not isinstance(extra["question"], str)
                or not isinstance(req, dict)
                or not is_hex(req.get("nonce"), 16)
                or question_commitment(bytes.fromhex(req["nonce"]), extra["question"]) != req.get("h_q")
            ):
                raise EncodingError("the question the account supplied does not open the request's h_q")
        return body, top, extra.get("question")
    except EncodingError as e:
        return str(e)


@dataclass
class Chunk:
    """One chunk's outcome: per line its number ``k``, the SHA-256 of its bytes and its status (``VALID``,
    ``REJECTED``, ``OTHER_LOG``), the message of each line not valid, the valid lines' rows (their account and
    tenant codes index ``names``), and the kept (body, citations, question) of the valid ones that carry their
    question (with ``ReceiptCtx.keep``)."""

    k: np.ndarray
    line_digest: np.ndarray
    status: np.ndarray
    messages: dict[int, str]
    rows: np.ndarray
    names: list[str]
    kept: dict[int, tuple[dict[str, Any], list[int] | None, str]] = field(default_factory=dict)


def _hex32(s: str) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(s), dtype=np.uint8)


def parse_chunk(ctx: ReceiptCtx, item: tuple[list[int], list[bytes]]) -> Chunk:
    """The receipts of one chunk (line numbers, lines), each read by ``one_receipt``."""
    ks, lines = item
    n = len(lines)
    digests = np.empty((n, 32), dtype=np.uint8)
    status = np.zeros(n, dtype=np.int8)
    rows = np.zeros(n, dtype=ROW)
    messages: dict[int, str] = {}
    codes: dict[str, int] = {}
    kept: dict[int, tuple[dict[str, Any], list[int] | None, str]] = {}
    r = 0
    for i, (k, line) in enumerate(zip(ks, lines, strict=True)):
        digests[i] = np.frombuffer(hashlib.sha256(line).digest(), dtype=np.uint8)
        res = one_receipt(ctx, line)
        if isinstance(res, str):
            status[i] = OTHER_LOG if isinstance(res, OtherLog) else REJECTED
            messages[k] = str(res)
            continue
        body, top, question = res
        row = rows[r]
        r += 1
        row["k"], row["pos"], row["size"], row["counter"] = k, body["pos"], body["size"], body["counter"]
        row["account"] = codes.setdefault(body["account"], len(codes))
        row["tenant"] = codes.setdefault(body["tenant"], len(codes))
        for f, name in (("root", "root"), ("leaf", "leaf_hash"), ("h_req", "h_req"), ("h_top", "h_top")):
            row[f] = _hex32(body[name])
        row["digest"] = np.frombuffer(hashlib.sha256(encode_canonical(body)).digest(), dtype=np.uint8)
        if top is not None:
            nonce = bytes.fromhex(body["nonce_top"])
            row["top_bad"] = top_commitment(np.asarray(top, dtype=np.int64), nonce) != body["h_top"]
        if ctx.keep and question is not None:
            kept[k] = (body, top, question)
    return Chunk(np.asarray(ks, dtype=np.int64), digests, status, messages, rows[:r].copy(), list(codes), kept)


class ReceiptTable:
    """The valid receipts of this log, one ``ROW`` each in line order (``rows``); ``names``: the account and
    tenant names the rows' codes index; ``kept``: line -> (body, citations, question) of those that carry their
    question, when the answers are replayed."""

    def __init__(self, rows: np.ndarray, names: list[str], kept: dict[int, tuple[dict[str, Any], Any, str]]):
        self.rows, self.names, self.kept = rows, names, kept

    @classmethod
    def empty(cls) -> ReceiptTable:
        return cls(np.zeros(0, dtype=ROW), [], {})

    @staticmethod
    def join(chunks: list[Chunk], keep_row: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """The chunks' rows (those whose line ``keep_row`` marks, by the row's index among all rows) with their codes
        mapped to one list of names."""
        code: dict[str, int] = {}
        parts = []
        for c in chunks:
            remap = np.asarray([code.setdefault(nm, len(code)) for nm in c.names] or [0], dtype=np.int32)
            rows = c.rows.copy()
            if rows.size:
                rows["account"] = remap[rows["account"]]
                rows["tenant"] = remap[rows["tenant"]]
            parts.append(rows)
        names = list(code)
        rows = np.concatenate(parts) if parts else np.zeros(0, dtype=ROW)
        return rows[keep_row], names

    def sizes(self) -> set[int]:
        return {int(x) for x in np.unique(self.rows["size"])}

    def h_reqs(self) -> set[str]:
        """The h_req (hex) of every valid receipt."""
        return {bytes(x).hex() for x in self.rows["h_req"]}

    def drop_rows(self) -> None:
        self.rows = np.zeros(0, dtype=ROW)
