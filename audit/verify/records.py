"""The parsed leaves (``run.records``, spec/protocol.md §8 item 13), one fixed-width row per query leaf.

A parsed query record was a dict of four keys with three 64-digit hex strings (~800 B), and ~1 KB once §8.7 added
the account, tenant and counter its opening binds: ~1.3 GB at 10^6 queries. ``LeafRecords`` keeps a query record
of the usual shape — exactly ``type: "query"`` and lower-case 32-byte hex ``h_charge``, ``h_req``, ``h_top``, then
optionally a string ``account`` and ``tenant`` and an int ``counter`` — as 96 bytes of hashes, two codes and a
counter (~118 B with its kind), and gives it back as the dict it was, built on each read (the checks never change
a record they read: they set it again). Any other record (genesis, registry, policy, key, documents, a recovery,
or a query of another shape: the checks must see it exactly as the bundle has it) is kept as its dict."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["LeafRecords"]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_HASHES = ("h_charge", "h_req", "h_top")
_BASE = {"h_charge", "h_req", "h_top", "type"}
_BOUND = {"account", "tenant", "counter"}
#: ``kind``: no record (a leaf that did not parse), a compact query row, a dict kept as it is
_NONE, _ROW, _DICT = 0, 1, 2


class LeafRecords:
    """A list of parsed leaves (dict or None) for ``capacity`` positions at most, appended in order (module doc)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._n = 0
        self.kind = np.zeros(capacity, dtype=np.int8)
        self.hashes = np.zeros((capacity, 3, 32), dtype=np.uint8)
        self.account = np.full(capacity, -1, dtype=np.int32)  # -1: not bound (before §8.7)
        self.tenant = np.full(capacity, -1, dtype=np.int32)
        self.counter = np.zeros(capacity, dtype=np.int64)
        self.other: dict[int, dict[str, Any]] = {}
        self.names: list[str] = []
        self._code: dict[str, int] = {}

    def __len__(self) -> int:
        return self._n

    def append(self, rec: dict[str, Any] | None) -> None:
        if self._n >= self.capacity:
            raise IndexError("more leaves than the records were made for")
        self._n += 1
        self[self._n - 1] = rec

    def _name(self, s: str) -> int:
        code = self._code.get(s)
        if code is None:
            code = self._code[s] = len(self.names)
            self.names.append(s)
        return code

    def __setitem__(self, i: int, rec: dict[str, Any] | None) -> None:
        if not 0 <= i < self._n:
            raise IndexError("leaf index out of range")
        self.other.pop(i, None)
        if rec is None:
            self.kind[i] = _NONE
            return
        if not _compact(rec):
            self.kind[i] = _DICT
            self.other[i] = rec
            return
        self.kind[i] = _ROW
        for j, f in enumerate(_HASHES):
            self.hashes[i, j] = np.frombuffer(bytes.fromhex(rec[f]), dtype=np.uint8)
        if "account" in rec:
            self.account[i], self.tenant[i] = self._name(rec["account"]), self._name(rec["tenant"])
            self.counter[i] = rec["counter"]
        else:
            self.account[i] = self.tenant[i] = -1

    def __getitem__(self, i: int) -> dict[str, Any] | None:
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("leaf index out of range")
        k = self.kind[i]
        if k == _NONE:
            return None
        if k == _DICT:
            return self.other[i]
        h = self.hashes[i]
        rec: dict[str, Any] = {"h_charge": h[0].tobytes().hex(), "h_req": h[1].tobytes().hex()}
        rec["h_top"], rec["type"] = h[2].tobytes().hex(), "query"
        a = int(self.account[i])
        if a >= 0:
            rec["account"], rec["tenant"] = self.names[a], self.names[int(self.tenant[i])]
            rec["counter"] = int(self.counter[i])
        return rec

    def others(self) -> np.ndarray:
        """The positions whose record is not a compact query row (None, or kept as its dict), increasing."""
        return np.flatnonzero(self.kind[: self._n] != _ROW)

    def __iter__(self) -> Iterator[dict[str, Any] | None]:
        for i in range(self._n):
            yield self[i]

    def __bool__(self) -> bool:
        return self._n > 0


def _compact(rec: dict[str, Any]) -> bool:
    """Whether ``rec`` is a query record of the usual shape, read back exactly (keys in that order, as the
    canonical encoding and §8.7 make them)."""
    keys = list(rec)
    if keys[:4] != ["h_charge", "h_req", "h_top", "type"] or rec["type"] != "query":
        return False
    if not all(isinstance(rec[f], str) and _HEX64.fullmatch(rec[f]) for f in _HASHES):
        return False
    if len(keys) == 4:
        return True
    return (
        keys[4:] == ["account", "tenant", "counter"]
        and isinstance(rec["account"], str)
        and isinstance(rec["tenant"], str)
        and type(rec["counter"]) is int
        and 0 <= rec["counter"] < 1 << 63
    )
