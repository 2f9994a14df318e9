"""Noise samplers. Every sampler draws from a ``RandomSource`` (see ``source.py``)."""

from .source import RandomSource

__all__ = ["RandomSource"]
