"""Validation helpers of the privacy math (``check_*``). The error classes they raise live in ``dprag.errors``, and
every floor imports them from there.

Every error that reports bad input names the offending field and the rule it broke, so a
caller (or the CLI, which maps these to exit code 2) can say exactly what was wrong.
Raising one of these never changes state: validation happens before any budget is spent.
"""

from __future__ import annotations

from dprag.errors import InvalidParameterError

__all__ = [
    "check_epsilon",
    "check_delta",
    "check_positive_int",
    "check_positive_real",
]


def check_epsilon(field: str, value: float, *, allow_zero: bool = False, allow_inf: bool = False) -> float:
    """Return ``value`` as float if it is a valid epsilon, else raise InvalidParameterError."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(field, "must be a real number", value) from None
    if v != v:
        raise InvalidParameterError(field, "must not be NaN", value)
    if v == float("inf") and not allow_inf:
        raise InvalidParameterError(field, "must be finite", value)
    if v < 0 or (v == 0 and not allow_zero):
        raise InvalidParameterError(field, "must be >= 0" if allow_zero else "must be > 0", value)
    return v


def check_delta(field: str, value: float, *, allow_zero: bool = False) -> float:
    """Return ``value`` as float if it lies in (0, 1) (or [0, 1) with allow_zero)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(field, "must be a real number", value) from None
    if v != v:
        raise InvalidParameterError(field, "must not be NaN", value)
    lo_ok = v >= 0 if allow_zero else v > 0
    if not lo_ok or v >= 1:
        raise InvalidParameterError(field, "must lie in [0, 1)" if allow_zero else "must lie in (0, 1)", value)
    return v


def check_positive_int(field: str, value: int, *, minimum: int = 1) -> int:
    """Return ``value`` if it is an integer >= minimum (bools are refused)."""
    if isinstance(value, bool):
        raise InvalidParameterError(field, f"must be an integer >= {minimum}", value)
    try:
        iv = int(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(field, f"must be an integer >= {minimum}", value) from None
    if iv != value or iv < minimum:
        raise InvalidParameterError(field, f"must be an integer >= {minimum}", value)
    return iv


def check_positive_real(field: str, value: float) -> float:
    """Return ``value`` as float if it is finite and > 0."""
    return check_epsilon(field, value)
