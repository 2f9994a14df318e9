"""Files a service writes whole: created exclusively beside their target, synced, renamed over it."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["write_atomically"]


def write_atomically(path: Path, data: bytes, private: bool = False) -> None:
    """Write atomically (a fresh temp file created exclusively — never through a link planted at its name —, fsync,
    rename over ``path``); private files are created 0600, others 0644."""
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600 if private else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
