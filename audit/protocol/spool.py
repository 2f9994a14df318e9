"""Lines of a large file kept out of memory (spec/protocol.md §8 item 13): the verifier's view of
``auditor/openings.jsonl``, the one file that grows by kilobytes per leaf.

``SpooledLines`` is a read-only sequence of the file's non-empty lines. The bytes are copied, once, as they are
read from the bundle, into a private spool file (``tempfile.TemporaryFile``: created mode 0600 and unlinked at
once, so no other process can open or change it; the bundle's own file may change after the read without the
checks seeing two versions); only the offsets of the lines stay in memory (16 bytes a line). A line is read back
with ``pread`` when a check asks for it, a slice with one ``pread`` of its span: the pages sit in the kernel's
cache, not in the verifier's memory. Descriptors are inherited by forked workers (``pread`` has no shared file
position); the object does not pickle (a worker that needs lines gets them, not the spool).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

#: bytes written to the spool at a time while the offsets are found
_BLOCK = 1 << 24


class SpooledLines(Sequence[bytes]):
    """The non-empty lines (without their ``\\n``) of a file, in order; build with ``feed`` then ``done``.
    ``numbers[i]``: the number of line ``i`` in the file, counting the empty lines too (0-based: what a message
    about a line names)."""

    def __init__(self) -> None:
        self._file: Any = tempfile.TemporaryFile(prefix="dprag-lines-")
        self._fd: int = self._file.fileno()
        self._size = 0  # bytes spooled
        self._line_start = 0  # where the line being read began
        self._newlines = 0  # newlines spooled: the number of the line being read
        self._starts: list[np.ndarray] = []
        self._ends: list[np.ndarray] = []
        self._numbers: list[np.ndarray] = []
        self.starts = np.zeros(0, dtype=np.int64)
        self.ends = np.zeros(0, dtype=np.int64)
        self.numbers = np.zeros(0, dtype=np.int64)

    # -- building --------------------------------------------------------------------------------------------

    def feed(self, chunk: bytes) -> None:
        """Append the next bytes of the file."""
        if not chunk:
            return
        view = memoryview(chunk)
        for a in range(0, len(chunk), _BLOCK):
            part = view[a : a + _BLOCK]
            written = 0
            while written < len(part):
                written += os.pwrite(self._fd, part[written:], self._size + written)
            nl = np.flatnonzero(np.frombuffer(part, dtype=np.uint8) == 0x0A).astype(np.int64) + self._size
            if nl.size:
                starts = np.concatenate([[self._line_start], nl[:-1] + 1])
                keep = nl > starts  # empty lines are not lines
                self._starts.append(starts[keep])
                self._ends.append(nl[keep])
                self._numbers.append(np.flatnonzero(keep).astype(np.int64) + self._newlines)
                self._newlines += int(nl.size)
                self._line_start = int(nl[-1]) + 1
            self._size += len(part)

    def done(self) -> SpooledLines:
        """The file ended: its last line need not end in a newline."""
        if self._size > self._line_start:
            self._starts.append(np.asarray([self._line_start], dtype=np.int64))
            self._ends.append(np.asarray([self._size], dtype=np.int64))
            self._numbers.append(np.asarray([self._newlines], dtype=np.int64))
            self._line_start = self._size
        if self._starts:
            self.starts = np.concatenate([self.starts, *self._starts])
            self.ends = np.concatenate([self.ends, *self._ends])
            self.numbers = np.concatenate([self.numbers, *self._numbers])
            self._starts, self._ends, self._numbers = [], [], []
        return self

    @classmethod
    def of(cls, data: bytes) -> SpooledLines:
        """The lines of ``data`` (tests, small files)."""
        out = cls()
        out.feed(data)
        return out.done()

    # -- reading ---------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.starts.size)

    @overload
    def __getitem__(self, k: int) -> bytes: ...

    @overload
    def __getitem__(self, k: slice) -> list[bytes]: ...

    def __getitem__(self, k: int | slice) -> bytes | list[bytes]:
        if isinstance(k, slice):
            idx = range(*k.indices(len(self)))
            if not idx:
                return []
            if idx.step != 1:
                return [self[i] for i in idx]
            a, b = idx.start, idx.stop
            lo, hi = int(self.starts[a]), int(self.ends[b - 1])
            span = self._read(lo, hi - lo)
            ends = self.ends[a:b].tolist()
            return [span[s - lo : e - lo] for s, e in zip(self.starts[a:b].tolist(), ends, strict=True)]
        n = len(self)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError("line index out of range")
        s = int(self.starts[k])
        return self._read(s, int(self.ends[k]) - s)

    def __iter__(self) -> Iterator[bytes]:
        step = 4096
        for a in range(0, len(self), step):
            yield from self[a : a + step]

    def _read(self, offset: int, size: int) -> bytes:
        parts, got = [], 0
        while got < size:
            b = os.pread(self._fd, size - got, offset + got)
            if not b:
                raise OSError(f"the spool ended {size - got} bytes early")
            parts.append(b)
            got += len(b)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        self._file.close()
        self.starts = self.ends = self.numbers = np.zeros(0, dtype=np.int64)

    def __getstate__(self) -> Any:
        raise TypeError("SpooledLines does not pickle: hand the lines themselves to another process")

    def __repr__(self) -> str:
        return f"SpooledLines({len(self)} lines, {self._size} bytes)"
