"""Noise samplers. Every sampler draws from a ``RandomSource`` (see ``source.py``).

Exact samplers (Canonne–Kamath–Steinke 2020, Algorithms 1–3; stream consumption in spec/accounting/noise.md):

- ``discrete_laplace(scale, size, source)``  P[x] ∝ exp(-|x|/scale) on ℤ, int64
- ``discrete_gaussian(sigma, size, source)`` P[x] ∝ exp(-x²/(2σ²)) on ℤ, int64
- ``bernoulli_exp(gamma, size, source)``     exact Bernoulli(exp(-γ)) coins, bool

Fast table sampler with a rigorous TV bound: ``DiscreteGaussianTable(sigma, tail_bound, precision_bits)``.

Secure real-valued noise on a power-of-two grid (Mironov 2012; Google DP library's granularity approach):
``laplace``, ``gaussian``, ``round_to_grid``, ``granularity_for``; and ``gumbel`` (a float Gumbel(0, 1) sampler:
bounded, so never used for an exponential mechanism, whose samplers are exact — spec/accounting/noise.md §8).
"""

from .bernoulli import bernoulli_exp
from .discrete import discrete_gaussian, discrete_laplace
from .secure import gaussian, granularity_for, gumbel, laplace, round_to_grid
from .source import RandomSource
from .table import DiscreteGaussianTable

__all__ = [
    "RandomSource",
    "bernoulli_exp",
    "discrete_laplace",
    "discrete_gaussian",
    "DiscreteGaussianTable",
    "laplace",
    "gaussian",
    "gumbel",
    "granularity_for",
    "round_to_grid",
]
