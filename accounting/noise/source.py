"""Random bits for every sampler in dprag.

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
words beyond ``need`` are discarded. ``uniform01(size)`` reads ``size`` words w and returns (w >> 11) · 2^-53.
"""

from __future__ import annotations

import hashlib
import os
import struct
from typing import Callable

import numpy as np

from ..errors import InvalidParameterError

BLOCK_BYTES = 65536


class RandomSource:
    """A stream of random bytes with exact integer helpers."""

    def __init__(self, read: Callable[[int], bytes], *, deterministic: bool = False):
        self._read = read
        self.deterministic = deterministic

    @classmethod
    def system(cls) -> "RandomSource":
        return cls(os.urandom)

    @classmethod
    def from_seed(cls, seed: bytes, label: bytes = b"") -> "RandomSource":
        if isinstance(seed, str) or not isinstance(seed, (bytes, bytearray)):
            raise InvalidParameterError("seed", "must be bytes")
        if isinstance(label, str):
            label = label.encode()
        prefix = struct.pack(">I", len(seed)) + bytes(seed) + struct.pack(">I", len(label)) + bytes(label)
        # block k is SHAKE-256(prefix || u64be(k)) truncated to BLOCK_BYTES. SHAKE is an XOF, so the first j
        # bytes of digest(BLOCK_BYTES) are digest(j): a block is squeezed only as far as it is read (growing
        # geometrically), which gives the same stream at a fraction of the cost for short reads (one query's
        # noise over 10^3 documents reads 8 KiB of a 64 KiB block).
        state = {"block": 0, "buf": b"", "pos": 0, "len": 0}

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

    # -- primitives -------------------------------------------------------------------------
    def bytes(self, n: int) -> bytes:
        return self._read(int(n))

    def uint64(self, size: int) -> np.ndarray:
        """``size`` independent uniform 64-bit words."""
        return np.frombuffer(self._read(8 * int(size)), dtype="<u8").astype(np.uint64, copy=False)

    def uniform_below(self, bound: int, size: int) -> np.ndarray:
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

    def uniform01(self, size: int | None = None):
        """``size`` floats uniform on the grid {k · 2^-53 : 0 <= k < 2^53}; one float if ``size`` is None."""
        if size is None:
            return float((int(self.uint64(1)[0]) >> 11) * 2.0**-53)
        return (self.uint64(size) >> np.uint64(11)).astype(np.float64) * (2.0**-53)

    # -- samplers a test writer needs (each delegates to accounting.noise; one value if size is None) --------
    def laplace(self, scale: float, size: int | None = None):
        """Laplace(0, scale) on a power-of-two grid (``accounting.noise.laplace``, Mironov 2012's secure form)."""
        from .secure import laplace

        return _one(laplace(scale, 1 if size is None else size, self), size)

    def gaussian(self, sigma: float, size: int | None = None):
        """N(0, σ²) on a power-of-two grid (``accounting.noise.gaussian``, via the exact discrete Gaussian)."""
        from .secure import gaussian

        return _one(gaussian(sigma, 1 if size is None else size, self), size)

    def discrete_laplace(self, scale: float, size: int | None = None):
        """Exact discrete Laplace P(x) ∝ exp(−|x|/scale) on ℤ (CKS 2020 Alg. 2), int64."""
        from .discrete import discrete_laplace

        return _one(discrete_laplace(scale, 1 if size is None else size, self), size)

    def discrete_gaussian(self, sigma: float, size: int | None = None):
        """Exact discrete Gaussian P(x) ∝ exp(−x²/(2σ²)) on ℤ (CKS 2020 Alg. 3), int64."""
        from .discrete import discrete_gaussian

        return _one(discrete_gaussian(sigma, 1 if size is None else size, self), size)

    def integers(self, bound: int, size: int | None = None):
        """Exactly uniform integers in [0, bound) (``uniform_below``); one int if ``size`` is None."""
        return _one(self.uniform_below(bound, 1 if size is None else size), size)


def _one(arr, size):
    """The array, or its single element as a Python scalar when no size was asked for."""
    if size is not None:
        return arr
    v = np.asarray(arr).reshape(-1)[0]
    return int(v) if np.issubdtype(np.asarray(arr).dtype, np.integer) else float(v)
