"""Reading a bundle's files as a hostile provider may have laid them out (spec/protocol.md §8).

The bundle directory is the provider's. Everything in it may be a symlink (to another bundle file, to a
secret of the auditor's, to ``/dev/zero``), a FIFO that never delivers a byte, a device, a socket, a directory
where a file is expected, or a file of any size. :class:`BundleDir` reads it under these rules:

* Paths are **relative** POSIX paths of plain components: no absolute path, no ``..``, no ``.``, no empty
  component, no NUL, at most ``MAX_PATH_CHARS`` characters.
* Each component is resolved **relative to the directory descriptor of its parent**, starting at the
  bundle's own (``openat``): ``fstatat`` without following links first, so a symlink, FIFO, device or socket
  is refused *before* anything is opened; then ``open`` with ``O_NOFOLLOW | O_NONBLOCK | O_NOCTTY``
  (``O_DIRECTORY`` for directories) and ``fstat`` of the descriptor, which must be the same inode and of the
  required type (a regular file for the last component, a directory for the others) -- so an entry swapped
  between the two calls is refused too, and nothing ever blocks or follows a link.
* A read takes at most ``cap + 1`` bytes (``cap`` given by the caller per file) and fails if the file holds
  more; an optional ``budget`` bounds the bytes read through one ``BundleDir`` in total.
* Errors are :class:`BundleFileError` ``"<relative path>: <rule>"``; they never contain file content, and a
  path taken from a directory listing is shown escaped and shortened.

The bundle root itself is the auditor's input (a path on the command line): ``BundleDir.open`` follows it
like any tool would and raises :class:`BundleRootError` (a ``BundleFileError``; the verifier's exit code 2)
if it is missing or not a directory. Everything below it is the provider's (a defect is FAIL, exit 1).

Not covered (and not needed for soundness, since every byte read is then checked against commitments): a
hard link to a file elsewhere on the same file system is a regular file and is read (Linux's
``fs.protected_hardlinks`` stops a provider linking files it does not own).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Mapping
from typing import cast

from dprag.errors import DpragError

from .spool import SpooledLines

#: the longest relative path accepted
MAX_PATH_CHARS = 4096
#: entries read from one directory before ``listdir`` gives up
MAX_DIR_ENTRIES = 1_000_000
_CHUNK = 1 << 20
_MAX_READ = 0x7FFFF000  # Linux returns at most this much from one read()
_SPOOL_CHUNK = 1 << 24  # read_lines: bytes held at a time

_O_BASE = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
#: ``errno.errorcode``, typed as what it is asked here: an OSError's errno, which may be None
_ERRNO_NAMES = cast("Mapping[int | None, str]", errno.errorcode)


def show(path: str, limit: int = 80) -> str:
    """A path as it may appear in a message: as is when short and printable, else escaped and shortened."""
    if len(path) <= limit and path.isprintable() and "\\" not in path:
        return path
    s = ascii(path[:limit])[1:-1]
    return s + ("..." if len(path) > limit else "")


class BundleFileError(DpragError):
    """A bundle file broke a reading rule; ``path`` is relative to the bundle, ``rule`` says which."""

    def __init__(self, path: str, rule: str):
        self.path = path
        self.rule = rule
        super().__init__(f"{show(path)}: {rule}")


class FramingError(ValueError):
    """A framed file's records are malformed (``BundleDir.read_framed``): a defect of the file's content."""


class ReadBudgetError(BundleFileError):
    """A read would pass the total read budget the auditor set (``BundleDir.open(budget=)``)."""


class BundleRootError(BundleFileError):
    """The bundle root given by the auditor is missing or not a directory (the auditor's input: exit 2)."""


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "not a regular file"


def _components(relpath: str) -> list[str]:
    if not isinstance(relpath, str):
        raise BundleFileError(repr(relpath)[:80], f"path must be a string, got {type(relpath).__name__}")
    if not relpath:
        raise BundleFileError("''", "empty path refused")
    if len(relpath) > MAX_PATH_CHARS:
        raise BundleFileError(relpath, f"path longer than {MAX_PATH_CHARS} characters refused")
    if "\x00" in relpath:
        raise BundleFileError(relpath, "NUL in path refused")
    if relpath.startswith("/"):
        raise BundleFileError(relpath, "absolute path refused (paths are relative to the bundle)")
    parts = relpath.split("/")
    for p in parts:
        if p == "..":
            raise BundleFileError(relpath, "path component '..' refused")
        if p in ("", "."):
            raise BundleFileError(relpath, "empty or '.' path component refused")
    return parts


class BundleDir:
    """A bundle directory, read through its descriptor under the module's rules.

    ``BundleDir.open(path, budget=None)``; ``read(relpath, cap) -> bytes``; ``listdir(relpath=".")``;
    ``exists(relpath)``; ``is_dir(relpath)``; ``close()`` (also a context manager).
    """

    def __init__(self, fd: int, root: str, budget: int | None = None):
        self._fd = fd
        self.root = root
        self.budget = budget
        self.bytes_read = 0

    # -- root -------------------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, budget: int | None = None) -> BundleDir:
        """Open the bundle root (the auditor's path; followed like any command-line path). ``budget``: the
        most bytes all reads together may take (None: only the per-file caps)."""
        if not hasattr(os, "O_NOFOLLOW") or os.open not in os.supports_dir_fd:
            raise BundleRootError(str(path), "this platform lacks O_NOFOLLOW / openat; bundles cannot be read safely")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
            raise ValueError(f"budget: must be an integer >= 0 or None, got {budget!r}")
        p = os.fspath(path)
        try:
            fd = os.open(p, _O_BASE | os.O_DIRECTORY | os.O_NONBLOCK)
        except FileNotFoundError:
            raise BundleRootError(str(p), "bundle directory does not exist") from None
        except NotADirectoryError:
            raise BundleRootError(str(p), "bundle path is not a directory") from None
        except OSError as e:
            raise BundleRootError(
                str(p), f"cannot open the bundle directory ({_ERRNO_NAMES.get(e.errno, e.errno)})"
            ) from None
        return cls(fd, str(p), budget)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> BundleDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    # -- resolution -------------------------------------------------------------------------------------

    def _live(self) -> int:
        if self._fd < 0:
            raise ValueError("BundleDir is closed")
        return self._fd

    def _lstat(self, dirfd: int, name: str, relpath: str, _unused: str = "") -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            raise BundleFileError(relpath, "a path component is not a directory") from None
        except OSError as e:
            raise BundleFileError(relpath, f"cannot stat ({_ERRNO_NAMES.get(e.errno, e.errno)})") from None

    def _open_at(self, dirfd: int, name: str, relpath: str, comp: str, directory: bool) -> int:
        """Open one entry of ``dirfd`` of the required type, refusing anything else without blocking.
        ``relpath`` is the path asked for, ``comp`` the part of it resolved so far (named in errors when
        it is a proper prefix)."""
        what = "is" if comp == relpath else f"component {show(comp)} is"
        st = self._lstat(dirfd, name, relpath, relpath)
        want = "a directory" if directory else "a regular file"
        if st is None:
            raise FileNotFoundError(comp)
        ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
        if not ok:
            rule = "(refused)" if stat.S_ISLNK(st.st_mode) else f"(refused: must be {want})"
            raise BundleFileError(relpath, f"{what} {_kind(st.st_mode)} {rule}")
        flags = _O_BASE | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_DIRECTORY if directory else 0)
        try:
            fd = os.open(name, flags, dir_fd=dirfd)
        except FileNotFoundError:
            raise
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise BundleFileError(relpath, f"{what} a symlink (refused)") from None
            if e.errno == errno.ENOTDIR:
                raise BundleFileError(relpath, f"{what} not a directory (refused: must be {want})") from None
            raise BundleFileError(relpath, f"cannot open ({_ERRNO_NAMES.get(e.errno, e.errno)})") from None
        try:
            fst = os.fstat(fd)
            ok = stat.S_ISDIR(fst.st_mode) if directory else stat.S_ISREG(fst.st_mode)
            if not ok:
                raise BundleFileError(relpath, f"{what} {_kind(fst.st_mode)} (refused: must be {want})")
            if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
                raise BundleFileError(relpath, f"{what} changed while being opened (refused)")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _walk(self, parts: list[str], relpath: str) -> Iterator[int]:
        """Open the directories ``parts`` one by one below the root; yields the last one's descriptor
        (which the caller must close if it is not the root)."""
        fd = self._live()
        opened = []
        try:
            for i, name in enumerate(parts):
                fd = self._open_at(fd, name, relpath, "/".join(parts[: i + 1]), directory=True)
                opened.append(fd)
            yield fd
        finally:
            for f in opened:
                os.close(f)

    def _resolve(self, relpath: str, *, directory: bool) -> int:
        """A new descriptor for ``relpath`` (a regular file, or a directory), or FileNotFoundError."""
        parts = _components(relpath)
        for parent in self._walk(parts[:-1], relpath):
            return self._open_at(parent, parts[-1], relpath, relpath, directory)
        raise AssertionError("unreachable")

    # -- public API -------------------------------------------------------------------------------------

    def read(self, relpath: str, cap: int) -> bytes:
        """The bytes of the regular file ``relpath``; BundleFileError if it is missing, is not a regular file
        (or a component is not a directory), is a symlink anywhere on the path, or holds more than ``cap``
        bytes (at most cap + 1 bytes are ever read)."""
        with self._capped(relpath, cap) as (fd, size, limit):
            chunks, got = [], 0
            while got <= limit:
                # ask for everything fstat announced (plus one byte to see EOF or growth) in one read, so a
                # file normally arrives as one bytes object and the join below does not copy it
                b = os.read(fd, min(max(size + 1 - got, _CHUNK), limit + 1 - got, _MAX_READ))
                if not b:
                    break
                chunks.append(b)
                got += len(b)
            self._count(relpath, got, cap, limit)
            return b"".join(chunks)

    def read_lines(self, relpath: str, cap: int) -> SpooledLines:
        """The non-empty lines of the regular file ``relpath`` as ``SpooledLines``: copied as they are read into a
        private spool file, so memory holds one chunk and the lines' offsets, not the file. The same refusals as
        ``read`` (missing, special, symlinked, over ``cap``, over the read budget)."""
        out = SpooledLines()
        try:
            with self._capped(relpath, cap) as (fd, _size, limit):
                got = 0
                while got <= limit:
                    b = os.read(fd, min(_SPOOL_CHUNK, limit + 1 - got))
                    if not b:
                        break
                    got += len(b)
                    if got <= limit:
                        out.feed(b)
                self._count(relpath, got, cap, limit)
        except BaseException:
            out.close()
            raise
        return out.done()

    def read_framed(self, relpath: str, cap: int, max_record: int) -> list[bytes]:
        """The records of the framed file ``relpath`` (``u32be(len) || bytes``, repeated), read in chunks and
        parsed as they arrive: the first framing defect — an empty record, one over ``max_record`` bytes, one that
        runs past the end — stops the reading (``FramingError``, naming the record), so a file of zeros costs one
        chunk, not its size. The same refusals as ``read`` (missing, special, symlinked, over ``cap``, over the
        read budget); memory is the records kept plus one chunk."""
        with self._capped(relpath, cap) as (fd, _size, limit):
            out: list[bytes] = []
            buf, got = b"", 0
            while True:
                chunk = os.read(fd, min(_MAX_READ, max(_CHUNK, 4 + max_record)))
                got += len(chunk)
                if got > limit:
                    self._count(relpath, got, cap, limit)  # raises: over the cap or the budget
                buf = buf + chunk if buf else chunk
                i = 0
                while len(buf) - i >= 4:
                    n = int.from_bytes(buf[i : i + 4], "big")
                    if n == 0:  # a record is a JSON object: stopping here keeps zeros from becoming 10^5+ records
                        raise FramingError(f"leaf {len(out)} is empty")
                    if n > max_record:
                        raise FramingError(f"leaf {len(out)} runs past the end of the file")
                    if len(buf) - i - 4 < n:
                        break
                    out.append(buf[i + 4 : i + 4 + n])
                    i += 4 + n
                buf = buf[i:]
                if not chunk:
                    break
            self._count(relpath, got, cap, limit)
            if buf:
                raise FramingError(
                    "truncated length prefix" if len(buf) < 4 else f"leaf {len(out)} runs past the end of the file"
                )
            return out

    @contextlib.contextmanager
    def _capped(self, relpath: str, cap: int) -> Iterator[tuple[int, int, int]]:
        """The open regular file ``relpath`` (fd, its announced size, the bytes it may take: its cap within the
        remaining read budget), refused when fstat already announces more than ``cap``; OS errors become
        BundleFileError naming the file; the descriptor is closed after."""
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
            raise ValueError(f"cap: must be an integer >= 0, got {cap!r}")
        try:
            fd = self._resolve(relpath, directory=False)
        except FileNotFoundError:
            raise BundleFileError(relpath, "missing") from None
        try:
            limit = cap if self.budget is None else min(cap, self.budget - self.bytes_read)
            size = os.fstat(fd).st_size
            if size > cap:
                raise BundleFileError(relpath, f"is {size} bytes, larger than the cap of {cap} bytes")
            yield fd, size, limit
        except BlockingIOError:
            raise BundleFileError(relpath, "would block (refused)") from None
        except OSError as e:
            raise BundleFileError(relpath, f"read failed ({_ERRNO_NAMES.get(e.errno, e.errno)})") from None
        finally:
            os.close(fd)

    def _count(self, relpath: str, got: int, cap: int, limit: int) -> None:
        """Count ``got`` bytes read of ``relpath`` against its cap and the read budget (refused past either)."""
        if got > cap:
            raise BundleFileError(relpath, f"holds more than the cap of {cap} bytes")
        if got > limit:
            raise ReadBudgetError(relpath, f"exceeds the bundle's remaining read budget ({self.budget} bytes in all)")
        self.bytes_read += got

    def listdir(self, relpath: str = ".", *, max_entries: int = MAX_DIR_ENTRIES) -> list[str]:
        """Sorted names in the directory ``relpath`` ("." is the root). Names that are not printable UTF-8
        (undecodable bytes, control characters) and directories of more than ``max_entries`` entries are
        refused."""
        if relpath == ".":
            fd = os.dup(self._live())
        else:
            try:
                fd = self._resolve(relpath, directory=True)
            except FileNotFoundError:
                raise BundleFileError(relpath, "missing") from None
        shown = relpath
        names: list[str] = []
        try:
            with os.scandir(fd) as it:
                for entry in it:
                    name = entry.name
                    if len(names) >= max_entries:
                        raise BundleFileError(shown, f"has more than {max_entries} entries (refused)")
                    if not name.isprintable() or any(0xD800 <= ord(c) <= 0xDFFF for c in name):
                        raise BundleFileError(
                            shown, f"holds an entry whose name is not printable UTF-8 ({show(name, 40)}; refused)"
                        )
                    names.append(name)
        except OSError as e:
            raise BundleFileError(shown, f"cannot list ({_ERRNO_NAMES.get(e.errno, e.errno)})") from None
        finally:
            os.close(fd)
        return sorted(names)

    def exists(self, relpath: str) -> bool:
        """Whether an entry named ``relpath`` exists, of any type, without following symlinks (so a symlink
        where an optional file may be reports True, and reading it then fails). A missing directory
        component gives False; a component that is a symlink or not a directory raises BundleFileError."""
        parts = _components(relpath)
        try:
            for parent in self._walk(parts[:-1], relpath):
                return self._lstat(parent, parts[-1], relpath, relpath) is not None
        except FileNotFoundError:
            return False
        raise AssertionError("unreachable")

    def is_dir(self, relpath: str) -> bool:
        """Whether ``relpath`` is a real directory (not a symlink to one); False if missing."""
        parts = _components(relpath)
        try:
            for parent in self._walk(parts[:-1], relpath):
                st = self._lstat(parent, parts[-1], relpath, relpath)
                return st is not None and stat.S_ISDIR(st.st_mode)
        except FileNotFoundError:
            return False
        raise AssertionError("unreachable")
