"""Release on a public schedule (spec/protocol.md §5.6, spec/provider.md §5): with the policy's ``release_period``
p, a request recorded at wall-clock time t gets ``release_at_ms`` = the first multiple of p at or after t + p (in
integer milliseconds, rounded up), stored with its record; its answer (or its failure) leaves the service then,
whenever its work ended, and the checkpoints are signed on the same grid. So how long serving took does not depend
on the documents."""

from __future__ import annotations

import math
import time

from dprag.errors import InvalidParameterError

#: the last stretch before a deadline is spun, not slept (seconds)
SPIN = 0.002


def now() -> float:
    """Wall-clock seconds (the grid is absolute, so every replica agrees on it; tests replace this)."""
    return time.time()


def sleep(seconds: float) -> None:
    time.sleep(seconds)


class ReleaseClock:
    """``seconds`` None: release as soon as ready. Else the grid of multiples of ``seconds`` (unix time): a
    request's ``release_at`` is the first grid point at least one period after its record; a request whose work
    outlasts it leaves at the next grid point after the work and is counted in ``overruns`` (which grid point is
    then the only timing left: choose the period above the committed generation's worst case on the hardware)."""

    def __init__(self, seconds: float | None = None):
        self.seconds: float | None = None
        self.overruns = 0
        self.set(seconds)

    def set(self, seconds: float | None) -> None:
        """The epoch's committed period (``Policy.release_period``), or None."""
        if seconds is not None and (
            isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= 3600
        ):
            raise InvalidParameterError("release_period", "must be a number of seconds in (0, 3600] or None", seconds)
        self.seconds = None if seconds is None else float(seconds)

    def next_tick(self, t: float) -> float:
        """The first grid point at or after ``t``."""
        p = self._period()
        return math.ceil(t / p) * p

    def release_at_ms(self, recorded: float) -> int | None:
        """The release time of a request recorded at ``recorded`` (unix ms, rounded up; None when release is off)."""
        return None if self.seconds is None else math.ceil(self.next_tick(recorded + self.seconds) * 1000)

    def hold(self, release_at_ms: int | None, *, worked: bool, arrived: float) -> None:
        """Return at the request's release time: ``release_at`` if the call's work ended by then (or it did none:
        a stored answer's retry after ``release_at`` leaves at once), else the next grid point after the work (an
        overrun). ``release_at`` None (release off, or a failure before the record): with a period set, the first
        grid point at least one period after ``arrived``."""
        if self.seconds is None:
            return
        t = now()
        release_at = None if release_at_ms is None else release_at_ms / 1000
        if release_at is None:
            release_at = self.next_tick(arrived + self.seconds)
        if t <= release_at:
            target = release_at
        elif not worked:
            return
        else:
            self.overruns += 1
            target = self.next_tick(t)
        # sleep to within SPIN of the deadline, then spin: a sleep's overshoot grows with its length (timer
        # slack, scheduling), and its length is the period minus the work, so sleeping to the end would leak the
        # work's duration in the tens of microseconds (measured: benchmarks/bench_timing.py)
        while (left := target - now()) > 0:
            if left > SPIN:
                sleep(left - SPIN)

    def _period(self) -> float:
        if self.seconds is None:
            raise InvalidParameterError("release_period", "no release period is set")
        return self.seconds
