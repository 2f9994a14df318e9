"""Constant-time release (spec/provider.md §6): an answer leaves the service at a deadline computed from public
parameters, not when its work is done, so how long serving took does not depend on the documents."""

from __future__ import annotations

import math
import time

from dprag.errors import InvalidParameterError

#: the last stretch before a deadline is spun, not slept (seconds)
SPIN = 0.002


class ReleaseClock:
    """``seconds`` None: release as soon as ready. Else an answer (or a pending failure) leaves at the first
    multiple of ``seconds`` after its request arrived; a request whose work outlasted one period leaves at a later
    multiple and is counted in ``overruns`` (which multiple is then the only timing left: choose ``seconds`` above
    the committed generation's worst case on the hardware)."""

    def __init__(self, seconds: float | None = None):
        self.seconds: float | None = None
        self.overruns = 0
        self.set(seconds)

    def set(self, seconds: float | None) -> None:
        """Choose the period from the committed generation parameters (m voters, max tokens) and the hardware,
        never from the corpus; None turns constant-time release off."""
        if seconds is not None and (
            isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < 3600
        ):
            raise InvalidParameterError("release_seconds", "must be a number of seconds in (0, 3600) or None", seconds)
        self.seconds = None if seconds is None else float(seconds)

    def hold(self, t0: float) -> None:
        """Sleep until the release time of a request that arrived at ``t0`` (``time.monotonic()``)."""
        if self.seconds is None:
            return
        elapsed = time.monotonic() - t0
        periods = max(1, math.ceil(elapsed / self.seconds))
        if periods > 1:
            self.overruns += 1
        target = t0 + periods * self.seconds
        # sleep to within SPIN of the deadline, then spin: a sleep's overshoot grows with its length (timer
        # slack, scheduling), and its length is the period minus the work, so sleeping to the end would leak the
        # work's duration in the tens of microseconds (measured: benchmarks/bench_timing.py)
        while (left := target - time.monotonic()) > 0:
            if left > SPIN:
                time.sleep(left - SPIN)
