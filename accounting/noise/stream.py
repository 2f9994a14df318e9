"""Random bits for every sampler in dprag: the specified byte stream under ``RandomSource``.

All noise is drawn through a ``RandomSource``: a stream of uniformly random bytes. Two kinds:

- ``RandomSource.system()`` reads the operating system's CSPRNG (``os.urandom``): for serving.
  Test writers get seeded sources from ``dprag.accounting.testing`` (``seeded_source``, ``seeded``); the
  constructor below is the audit protocol's committed-seed stream, not a test convenience.
- ``RandomSource.from_seed(seed, label)`` is a deterministic stream, specified exactly so that a second
  implementation re-derives the same bytes (the audit protocol's committed-seed noise, and seeded tests):

      block_i = SHAKE256( u32be(len(seed)) || seed || u32be(len(label)) || label || u64be(i) ).digest(65536)
      stream  = block_0 || block_1 || ...

Integers are read little-endian from consecutive 8-byte words of the stream; a uniform integer below
``bound`` is drawn by rejection (a word w is accepted iff w < 2^64 - (2^64 mod bound); then w mod bound),
so it is exactly uniform. Stream consumption of ``uniform_below(bound, size)`` (part of the spec, since a
re-deriving verifier must stay in step): words are read in rounds; while ``need`` outputs are missing, a
round reads ``need + floor(need / 8) + 1`` words, the accepted ones fill the outputs in order, and accepted
words beyond ``need`` are discarded. ``uniform01(size)`` reads one word w per value (prod(shape) words for a shape
tuple, filled in C order) and returns (w >> 11) · 2^-53.
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
from collections.abc import Callable
from typing import Any, Self, TypeAlias, TypedDict, TypeVar, overload

import numpy as np
import numpy.typing as npt

from dprag.errors import InvalidParameterError

BLOCK_BYTES = 65536

_A = TypeVar("_A", bound="npt.NDArray[Any]")


#: a sampler's ``size``: an int n (shape (n,)) or a shape tuple, as numpy's
Size: TypeAlias = int | tuple[int, ...]

_SIZE_RULE = "must be an integer >= 0 or a tuple of them (a numpy shape)"


def check_shape(size: object) -> tuple[int, ...] | None:
    """The array shape a sampler's ``size`` asks for (None: one scalar). Bools, floats and negative or
    non-integer entries raise ``InvalidParameterError`` naming ``size``."""
    if size is None:
        return None
    dims = size if isinstance(size, tuple) else (size,)
    for d in dims:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 0:
            raise InvalidParameterError("size", _SIZE_RULE, size)
    return tuple(int(d) for d in dims)


class _ShakeState(TypedDict):
    """The position of ``from_seed``'s reader in its stream (the current block and how much of it is squeezed)."""

    block: int
    buf: bytes
    pos: int
    len: int


class RandomStream:
    """A stream of random bytes with exact integer helpers (the samplers are on ``RandomSource``)."""

    def __init__(self, read: Callable[[int], bytes], *, deterministic: bool = False) -> None:
        self._read = read
        self.deterministic = deterministic

    @classmethod
    def system(cls) -> Self:
        return cls(os.urandom)

    @classmethod
    def from_seed(cls, seed: bytes, label: bytes = b"") -> Self:
        if isinstance(seed, str) or not isinstance(seed, (bytes, bytearray)):
            raise InvalidParameterError("seed", "must be bytes")
        if isinstance(label, str):
            label = label.encode()
        prefix = struct.pack(">I", len(seed)) + bytes(seed) + struct.pack(">I", len(label)) + bytes(label)
        # block k is SHAKE-256(prefix || u64be(k)) truncated to BLOCK_BYTES. SHAKE is an XOF, so the first j
        # bytes of digest(BLOCK_BYTES) are digest(j): a block is squeezed only as far as it is read (growing
        # geometrically), which gives the same stream at a fraction of the cost for short reads (one query's
        # noise over 10^3 documents reads 8 KiB of a 64 KiB block).
        state: _ShakeState = {"block": 0, "buf": b"", "pos": 0, "len": 0}

        def read(n: int) -> bytes:
            out = []
            need = n
            while need > 0:
                if state["pos"] >= BLOCK_BYTES or state["len"] == 0:
                    if state["len"]:
                        state["block"] += 1
                    state["buf"], state["pos"], state["len"] = b"", 0, 1
                if state["pos"] + need > len(state["buf"]):
                    want = min(BLOCK_BYTES, max(state["pos"] + need, 2 * len(state["buf"]), 4096))
                    state["buf"] = hashlib.shake_256(prefix + struct.pack(">Q", state["block"])).digest(want)
                take = min(need, len(state["buf"]) - state["pos"])
                out.append(state["buf"][state["pos"] : state["pos"] + take])
                state["pos"] += take
                need -= take
            return b"".join(out)

        return cls(read, deterministic=True)

    @classmethod
    def resolve(cls, source: Self | None = None) -> Self:
        """``source`` itself (checked to be one of this class), or a fresh ``system()`` source when None."""
        if source is None:
            return cls.system()
        if not isinstance(source, cls):
            raise InvalidParameterError("source", f"must be an accounting.noise.{cls.__name__}", type(source).__name__)
        return source

    # -- primitives -------------------------------------------------------------------------
    def bytes(self, n: int) -> bytes:
        return self._read(int(n))

    def uint64(self, size: int) -> npt.NDArray[np.uint64]:
        """``size`` independent uniform 64-bit words."""
        return np.frombuffer(self._read(8 * int(size)), dtype="<u8").astype(np.uint64, copy=False)

    def uniform_below(self, bound: int, size: int) -> npt.NDArray[np.int64]:
        """``size`` exactly uniform integers in [0, bound), 1 <= bound <= 2^63, as int64."""
        bound = int(bound)
        if not (1 <= bound <= 1 << 63):
            raise InvalidParameterError("bound", "must lie in [1, 2^63]", bound)
        size = int(size)
        limit = np.uint64((1 << 64) - ((1 << 64) % bound)) if (1 << 64) % bound else None
        out = np.empty(size, dtype=np.int64)
        filled = 0
        while filled < size:
            need = size - filled
            w = self.uint64(need + need // 8 + 1)
            if limit is not None:
                w = w[w < limit]
            w = w[:need]
            out[filled : filled + len(w)] = (w % np.uint64(bound)).astype(np.int64)
            filled += len(w)
        return out

    @overload
    def uniform01(self, size: None = None) -> float: ...

    @overload
    def uniform01(self, size: Size) -> npt.NDArray[np.float64]: ...

    def uniform01(self, size: Size | None = None) -> float | npt.NDArray[np.float64]:
        """Floats uniform on the grid {k · 2^-53 : 0 <= k < 2^53}: one float if ``size`` is None, else an array
        of shape ``size`` (an int or a tuple, as numpy; filled in C order from consecutive words)."""
        shape = check_shape(size)
        if shape is None:
            return float((int(self.uint64(1)[0]) >> 11) * 2.0**-53)
        words = self.uint64(math.prod(shape))
        return ((words >> np.uint64(11)).astype(np.float64) * (2.0**-53)).reshape(shape)

    @overload
    def integers(self, bound: int, size: None = None) -> int: ...

    @overload
    def integers(self, bound: int, size: Size) -> npt.NDArray[np.int64]: ...

    def integers(self, bound: int, size: Size | None = None) -> int | npt.NDArray[np.int64]:
        """Exactly uniform integers in [0, bound) (``uniform_below``); one int if ``size`` is None, else an
        array of shape ``size``."""
        shape = check_shape(size)
        return shaped(self.uniform_below(bound, 1 if shape is None else math.prod(shape)), shape)


@overload
def shaped(arr: npt.NDArray[np.integer[Any]], shape: None) -> int: ...


@overload
def shaped(arr: npt.NDArray[np.floating[Any]], shape: None) -> float: ...


@overload
def shaped(arr: _A, shape: tuple[int, ...]) -> _A: ...


def shaped(arr: npt.NDArray[Any], shape: tuple[int, ...] | None) -> npt.NDArray[Any] | int | float:
    """The flat draw ``arr`` reshaped to ``shape`` (C order), or its single element as a Python scalar when
    ``shape`` is None."""
    if shape is not None:
        out: npt.NDArray[Any] = arr.reshape(shape)
        return out
    v = arr.reshape(-1)[0]
    return int(v) if np.issubdtype(arr.dtype, np.integer) else float(v)
