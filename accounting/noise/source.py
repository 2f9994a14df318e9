"""``RandomSource``: the random stream of ``stream.py`` with the samplers a test writer needs as methods.

Each method delegates to the exact sampler of ``accounting.noise``. ``size`` follows numpy: None gives one
Python scalar; an int n an array of shape (n,); a tuple an array of that shape (``()``: a 0-d array holding one
draw). A shaped draw is the flat draw of prod(shape) values reshaped in C order, so the bytes consumed are those
of the function it names called with that count (for an int n: exactly as before shapes were accepted). A bad
``size`` (negative, bool, float, non-integer entry) raises ``InvalidParameterError`` naming ``size``.
"""

from __future__ import annotations

import math
from typing import overload

import numpy as np
import numpy.typing as npt

from .discrete import discrete_gaussian, discrete_laplace
from .secure import gaussian, laplace
from .stream import RandomStream, Size, check_shape, shaped

__all__ = ["RandomSource", "Size"]


def _count(shape: tuple[int, ...] | None) -> int:
    return 1 if shape is None else math.prod(shape)


class RandomSource(RandomStream):
    """A stream of random bytes (``RandomStream``) with exact integer helpers and noise samplers."""

    @overload
    def laplace(self, scale: float, size: None = None) -> float: ...

    @overload
    def laplace(self, scale: float, size: Size) -> npt.NDArray[np.float64]: ...

    def laplace(self, scale: float, size: Size | None = None) -> float | npt.NDArray[np.float64]:
        """Laplace(0, scale) on a power-of-two grid (``accounting.noise.laplace``, Mironov 2012's secure form)."""
        shape = check_shape(size)
        return shaped(laplace(scale, _count(shape), self), shape)

    @overload
    def gaussian(self, sigma: float, size: None = None) -> float: ...

    @overload
    def gaussian(self, sigma: float, size: Size) -> npt.NDArray[np.float64]: ...

    def gaussian(self, sigma: float, size: Size | None = None) -> float | npt.NDArray[np.float64]:
        """N(0, σ²) on a power-of-two grid (``accounting.noise.gaussian``, via the exact discrete Gaussian)."""
        shape = check_shape(size)
        return shaped(gaussian(sigma, _count(shape), self), shape)

    @overload
    def discrete_laplace(self, scale: float, size: None = None) -> int: ...

    @overload
    def discrete_laplace(self, scale: float, size: Size) -> npt.NDArray[np.int64]: ...

    def discrete_laplace(self, scale: float, size: Size | None = None) -> int | npt.NDArray[np.int64]:
        """Exact discrete Laplace P(x) ∝ exp(−|x|/scale) on ℤ (CKS 2020 Alg. 2), int64."""
        shape = check_shape(size)
        return shaped(discrete_laplace(scale, _count(shape), self), shape)

    @overload
    def discrete_gaussian(self, sigma: float, size: None = None) -> int: ...

    @overload
    def discrete_gaussian(self, sigma: float, size: Size) -> npt.NDArray[np.int64]: ...

    def discrete_gaussian(self, sigma: float, size: Size | None = None) -> int | npt.NDArray[np.int64]:
        """Exact discrete Gaussian P(x) ∝ exp(−x²/(2σ²)) on ℤ (CKS 2020 Alg. 3), int64."""
        shape = check_shape(size)
        return shaped(discrete_gaussian(sigma, _count(shape), self), shape)
