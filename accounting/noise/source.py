"""``RandomSource``: the random stream of ``stream.py`` with the samplers a test writer needs as methods.

Each method delegates to the exact sampler of ``accounting.noise`` (one value if ``size`` is None); the bytes
consumed are those of the function it names.
"""

from __future__ import annotations

from typing import overload

import numpy as np
import numpy.typing as npt

from .discrete import discrete_gaussian, discrete_laplace
from .secure import gaussian, laplace
from .stream import RandomStream, one_or_array

__all__ = ["RandomSource"]


class RandomSource(RandomStream):
    """A stream of random bytes (``RandomStream``) with exact integer helpers and noise samplers."""

    @overload
    def laplace(self, scale: float, size: None = None) -> float: ...

    @overload
    def laplace(self, scale: float, size: int) -> npt.NDArray[np.float64]: ...

    def laplace(self, scale: float, size: int | None = None) -> float | npt.NDArray[np.float64]:
        """Laplace(0, scale) on a power-of-two grid (``accounting.noise.laplace``, Mironov 2012's secure form)."""
        return one_or_array(laplace(scale, 1 if size is None else size, self), size)

    @overload
    def gaussian(self, sigma: float, size: None = None) -> float: ...

    @overload
    def gaussian(self, sigma: float, size: int) -> npt.NDArray[np.float64]: ...

    def gaussian(self, sigma: float, size: int | None = None) -> float | npt.NDArray[np.float64]:
        """N(0, σ²) on a power-of-two grid (``accounting.noise.gaussian``, via the exact discrete Gaussian)."""
        return one_or_array(gaussian(sigma, 1 if size is None else size, self), size)

    @overload
    def discrete_laplace(self, scale: float, size: None = None) -> int: ...

    @overload
    def discrete_laplace(self, scale: float, size: int) -> npt.NDArray[np.int64]: ...

    def discrete_laplace(self, scale: float, size: int | None = None) -> int | npt.NDArray[np.int64]:
        """Exact discrete Laplace P(x) ∝ exp(−|x|/scale) on ℤ (CKS 2020 Alg. 2), int64."""
        return one_or_array(discrete_laplace(scale, 1 if size is None else size, self), size)

    @overload
    def discrete_gaussian(self, sigma: float, size: None = None) -> int: ...

    @overload
    def discrete_gaussian(self, sigma: float, size: int) -> npt.NDArray[np.int64]: ...

    def discrete_gaussian(self, sigma: float, size: int | None = None) -> int | npt.NDArray[np.int64]:
        """Exact discrete Gaussian P(x) ∝ exp(−x²/(2σ²)) on ℤ (CKS 2020 Alg. 3), int64."""
        return one_or_array(discrete_gaussian(sigma, 1 if size is None else size, self), size)
