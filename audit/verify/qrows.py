"""The checked query embeddings Q (spec/protocol.md §8 item 13): what §8.7 hands to the coalition check and to any
re-scoring, held as one int16 matrix in a memory file, not as a dict of byte strings.

At 10^6 queries of d = 384 the dict held ~900 MB (768 B of Q plus ~130 B of object and slot per query), the
coalition check copied them into its matrix, pickled that to its fresh process (another copy in flight) and the
process unpickled it (a fourth). ``QRows`` is the matrix itself: row r is the r-th Q put, ``row_of[pos]`` its
row; its pages live in a ``memfd`` mapped here, and ``SharedRows`` hands a prefix of it to a fresh process by its
descriptor (``pool.background`` passes it), which maps the same pages: the Q are in memory once, and a page
shared by both counts half in each one's PSS. A Q of another length than the first (a malformed opening §8.7
accepted: the coalition check then reports several dimensions) is kept aside as bytes."""

from __future__ import annotations

import contextlib
import mmap
import os
import weakref
from typing import Any

import numpy as np

__all__ = ["QRows", "SharedRows"]


class SharedRows:
    """``rows`` × ``dim`` little-endian int16 rows at the start of the memory file ``fd``, mapped (``array``);
    pickled as its descriptor, so a process that inherits ``fd`` (``pool.background``: ``pass_fds``) maps the same
    pages, read-only, instead of receiving a copy."""

    def __init__(self, fd: int, rows: int, dim: int, writable: bool = False):
        self.fd, self.rows, self.dim = fd, rows, dim
        size = max(1, rows * dim * 2)
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        self._map: mmap.mmap | None = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=prot)
        self.array: np.ndarray = np.frombuffer(self._map, dtype="<i2", count=rows * dim).reshape(rows, dim)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.array if dtype is None else self.array.astype(dtype)

    def __reduce__(self) -> tuple[Any, ...]:
        return (SharedRows, (self.fd, self.rows, self.dim))

    def close(self) -> None:
        self.array = np.zeros((0, self.dim), dtype="<i2")
        if self._map is not None:
            with contextlib.suppress(BufferError):  # a view is still held elsewhere: the mapping goes with the last
                self._map.close()
            self._map = None


class QRows:
    """pos -> Q (bytes of int16 little-endian), for at most ``capacity`` positions, as one matrix (module doc)."""

    def __init__(self, capacity: int = 0):
        self.capacity = capacity
        self.n = 0
        self.dim: int | None = None
        self._fd: int | None = None
        self._closer: weakref.finalize[Any, Any] | None = None
        self._shared: SharedRows | None = None
        self._pos = np.zeros(0, dtype=np.int64)  # the rows' positions, increasing (8 B a row)
        self.odd: dict[int, bytes] = {}

    def _open(self, dim: int) -> None:
        self.dim = dim
        self._fd = os.memfd_create("dprag-q", 0)
        self._closer = weakref.finalize(self, os.close, self._fd)  # closed by clear(), or when the store goes
        os.ftruncate(self._fd, max(1, self.capacity * dim * 2))  # sparse: a page exists once written
        self._shared = SharedRows(self._fd, self.capacity, dim, writable=True)
        self._pos = np.empty(self.capacity, dtype=np.int64)

    def _row(self, pos: int) -> int | None:
        r = int(np.searchsorted(self._pos[: self.n], pos))
        return r if r < self.n and int(self._pos[r]) == pos else None

    def __setitem__(self, pos: int, q: bytes) -> None:
        if self.dim is None and len(q) % 2 == 0 and len(q) and self.capacity:
            self._open(len(q) // 2)
        in_order = self.n == 0 or pos > int(self._pos[self.n - 1])
        if self._shared is None or len(q) != 2 * (self.dim or 0) or self.n >= self.capacity or not in_order:
            self.odd[pos] = bytes(q)  # (a position put twice: the last Q stands, as in a dict)
            return
        self._shared.array[self.n] = np.frombuffer(q, dtype="<i2")
        self._pos[self.n] = pos
        self.n += 1

    def __getitem__(self, pos: int) -> bytes:
        if pos in self.odd:
            return self.odd[pos]
        r = self._row(pos) if self._shared is not None else None
        if r is None or self._shared is None:
            raise KeyError(pos)
        row: bytes = self._shared.array[r].tobytes()
        return row

    def __contains__(self, pos: object) -> bool:
        return isinstance(pos, int) and (pos in self.odd or (self._shared is not None and self._row(pos) is not None))

    def __len__(self) -> int:
        return self.n + sum(1 for p in self.odd if self._shared is None or self._row(p) is None)

    def matrix(self, positions: list[int]) -> np.ndarray | SharedRows:
        """The rows of ``positions`` (at least one; all of one dimension, in this order): the stored prefix itself,
        shared, when they are exactly the rows put so far in order (no copy), else a copy."""
        if (
            self._shared is not None
            and not self.odd
            and len(positions) == self.n
            and np.array_equal(np.asarray(positions, dtype=np.int64), self._pos[: self.n])
        ):
            return SharedRows(self._shared.fd, self.n, self._shared.dim)
        out = np.empty((len(positions), len(self[positions[0]]) // 2), dtype="<i2")
        for k, p in enumerate(positions):
            out[k] = np.frombuffer(self[p], dtype="<i2")
        return out

    def clear(self) -> None:
        """Drop every Q (the memory file is closed; a ``SharedRows`` handed out keeps its own mapping)."""
        if self._shared is not None:
            self._shared.close()
            self._shared = None
        if self._closer is not None:
            self._closer()
            self._closer, self._fd = None, None
        self.n, self.dim = 0, None
        self._pos, self.odd = np.zeros(0, dtype=np.int64), {}
