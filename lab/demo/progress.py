"""Progress bars of the demo's long steps: tqdm bars on stderr, or nothing."""

from __future__ import annotations

import sys


class Progress:
    """tqdm bars on stderr (or nothing)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def bar(self, iterable=None, total=None, desc=""):
        if not self.enabled:
            return iterable if iterable is not None else NoBar()
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)

    def counter(self, total: int, desc: str):
        if not self.enabled:
            return lambda n: None
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)

        def tick(n):
            bar.update(n)
            if bar.n >= total:
                bar.close()

        return tick


class NoBar:
    def update(self, n=1):
        pass

    def close(self):
        pass
