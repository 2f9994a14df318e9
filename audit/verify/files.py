"""§8.1 ``files`` (spec/protocol.md): every file of the bundle was read safely (``audit/protocol/bundlefs.py``:
relative to the bundle's directory descriptor, no links, regular files only, capped); each defect is a FAIL naming
the file."""

from __future__ import annotations

from .run import Run, guarded


@guarded("files")
def check_8_1_files(run: Run) -> None:
    """§8.1: the defects ``load_bundle`` met reading the bundle, never their content."""
    for d in run.b.defects:
        run.fail("files", d.removeprefix("files: "))
    if not run.b.defects:
        run.ok("files")
