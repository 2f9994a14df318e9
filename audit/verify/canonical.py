"""§8.2 ``canonical`` (spec/protocol.md): every leaf and opening is canonical JSON (§2) of the right type and
shape; the canonical form is checked in the worker pool, the parent keeps the leaves parsed and the openings as
their lines (``Openings``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

from ..protocol.encoding import EncodingError, decode
from .pool import Lazy, fork_map
from .records import LeafRecords
from .run import Run, guarded, is_int


def _decode_error(item: tuple[bytes, str]) -> str | None:
    """None if the bytes are canonical JSON (§2), else the rule they break (run in the forked workers)."""
    raw, what = item
    try:
        decode(raw, what=what)
        return None
    except EncodingError as e:
        return str(e)


def _decode_all(raws: Sequence[bytes], what: str, start: int = 0) -> list[Any]:
    """``decode`` of every record, each either its value or the EncodingError it raises. The canonical-form
    check runs in the forked workers; the parent then parses the records they accepted with the same C
    parser (``json.loads``: equal values, since canonical bytes hold no float and no duplicate key)."""
    items = [(raw, what % k) for k, raw in enumerate(raws, start=start)]
    errors = fork_map(_decode_error, items, serial=None)
    if errors is None:  # not forked: decode here, once
        out = []
        for raw, w in items:
            try:
                out.append(decode(raw, what=w))
            except EncodingError as e:
                out.append(e)
        return out
    return [json.loads(raw) if err is None else EncodingError(err) for raw, err in zip(raws, errors, strict=False)]


def _opening_pos(item: tuple[bytes, str]) -> tuple[str | None, Any]:
    """(None, its "pos" if an int else None) if the opening line is canonical JSON (§2), else (the rule it
    breaks, None) (run in the forked workers: the parent keeps the line, not the parsed value)."""
    raw, what = item
    try:
        op = decode(raw, what=what)
    except EncodingError as e:
        return str(e), None
    pos = op.get("pos") if isinstance(op, dict) else None
    return None, pos if isinstance(pos, int) and not isinstance(pos, bool) else None


@guarded("canonical")
def check_8_2_canonical(run: Run) -> None:
    """§8.2: the leaves (``run.records``: each parsed, or None) and the openings' positions, strictly increasing
    in [1, n) (``run.openings``)."""
    base = run.base
    run.records = LeafRecords(base + len(run.b.leaves[base:]))  # one compact row per query leaf (records.py)
    for _ in range(base):
        run.records.append(None)
    if base:  # verified by earlier runs (§8.14): only the state leaves are kept, as they were checked
        for pos, raw in run.prior.control if run.prior is not None else ():
            run.records[pos] = json.loads(raw)
    for i, rec in enumerate(_decode_all(run.b.leaves[base:], "leaf %d", base), start=base):
        try:
            if isinstance(rec, EncodingError):
                raise rec
            if not isinstance(rec, dict) or not isinstance(rec.get("type"), str):
                raise EncodingError(f"leaf {i}: not a typed record")
            run.records.append(rec)
            run.ok("canonical")
        except EncodingError as e:
            run.records.append(None)
            run.fail("canonical", str(e))
    last = 0
    lines = run.b.openings_lines
    opening_lines = Lazy(len(lines), lambda k: (lines[k], f"opening line {k}"))  # read as each chunk is sent
    got = cast("list[tuple[str | None, Any]]", fork_map(_opening_pos, opening_lines))  # serial path: never None
    for k, (err, pos) in enumerate(got):
        if err is not None:
            run.fail("canonical", err)
        elif not is_int(pos, 1, run.n - 1) or pos <= last:
            run.fail("canonical", f"opening line {k}: pos must increase and lie in [1, {run.n})")
        else:
            last = pos
            run.openings.set(pos, k)
    run.progress("canonical", len(run.b.leaves) + len(run.b.openings_lines))
