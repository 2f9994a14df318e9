"""Hostile bundle files (audit/protocol/bundlefs.py; issue 9 item 8): symlinks anywhere on a path, FIFOs, devices,
sockets, directories in place of files, oversize files, missing files and path tricks are refused with a
BundleFileError naming the relative path and the rule, never blocking and never echoing content."""

from __future__ import annotations

import os
import signal
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from dprag.audit.protocol.bundlefs import BundleDir, BundleFileError, BundleRootError, show
from dprag.errors import DpragError

SECRET = b"TOP-SECRET-CONTENT-" * 50


@contextmanager
def deadline(seconds: int = 5):
    """Fail (instead of hanging the suite) if the body blocks, e.g. on a FIFO."""

    def boom(signum, frame):
        raise TimeoutError(f"blocked for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def bundle(tmp_path):
    root = tmp_path / "bundle"
    (root / "public").mkdir(parents=True)
    (root / "auditor" / "index").mkdir(parents=True)
    (root / "public" / "leaves.bin").write_bytes(b"\x00\x00\x00\x02{}")
    (root / "public" / "genesis.json").write_bytes(b"{}")
    (root / "auditor" / "index" / "t0.i16").write_bytes(b"\x01\x02")
    secret = tmp_path / "outside.txt"
    secret.write_bytes(SECRET)
    return root


def refused(d: BundleDir, rel: str, rule: str, cap: int = 1 << 20) -> BundleFileError:
    with deadline():
        with pytest.raises(BundleFileError) as e:
            d.read(rel, cap)
    msg = str(e.value)
    assert msg.startswith(f"{rel}: "), msg
    assert rule in msg, msg
    assert b"TOP-SECRET" not in msg.encode() and "\x00" not in msg
    assert isinstance(e.value, DpragError) and e.value.path == rel
    return e.value


def test_reads_regular_files(bundle):
    with BundleDir.open(bundle) as d:
        assert d.read("public/leaves.bin", 6) == b"\x00\x00\x00\x02{}"
        assert d.read("auditor/index/t0.i16", 2) == b"\x01\x02"
        assert d.listdir("public") == ["genesis.json", "leaves.bin"]
        assert d.listdir() == ["auditor", "public"]
        assert d.exists("public/genesis.json") and not d.exists("public/nope") and not d.exists("nope/x")
        assert d.is_dir("auditor/index") and not d.is_dir("public/leaves.bin")
        assert d.bytes_read == 8


def test_symlink_file_refused_even_to_a_bundle_file(bundle):
    (bundle / "public" / "checkpoints.txt").symlink_to(bundle.parent / "outside.txt")
    (bundle / "public" / "copy.bin").symlink_to("leaves.bin")
    with BundleDir.open(bundle) as d:
        refused(d, "public/checkpoints.txt", "is a symlink (refused")
        refused(d, "public/copy.bin", "is a symlink (refused")
        assert d.exists("public/checkpoints.txt")  # present, but unreadable: FAIL, not "absent"


def test_symlink_directory_component_refused(bundle, tmp_path):
    outside = tmp_path / "elsewhere"
    (outside / "index").mkdir(parents=True)
    (outside / "index" / "t0.i16").write_bytes(SECRET)
    (bundle / "auditor" / "docs").symlink_to(outside / "index")
    (bundle / "linked").symlink_to(bundle / "public")
    with BundleDir.open(bundle) as d:
        e = refused(d, "auditor/docs/t0.i16", "component auditor/docs is a symlink (refused)")
        assert e.path == "auditor/docs/t0.i16"
        refused(d, "linked/leaves.bin", "component linked is a symlink (refused)")
        with pytest.raises(BundleFileError, match="auditor/docs: is a symlink"):
            d.listdir("auditor/docs")
        with pytest.raises(BundleFileError, match="linked/leaves.bin: component linked is a symlink"):
            d.exists("linked/leaves.bin")


def test_link_to_dev_zero_refused_without_reading(bundle):
    (bundle / "public" / "leaves.bin").unlink()
    (bundle / "public" / "leaves.bin").symlink_to("/dev/zero")
    with BundleDir.open(bundle) as d:
        refused(d, "public/leaves.bin", "is a symlink (refused)", cap=1 << 40)
        assert d.bytes_read == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a device needs root")
def test_device_node_refused(bundle):
    os.mknod(bundle / "public" / "zero", 0o600 | 0o020000, os.makedev(1, 5))  # a /dev/zero character device
    with BundleDir.open(bundle) as d:
        refused(d, "public/zero", "is a character device (refused")


def test_fifo_refused_without_blocking(bundle):
    os.mkfifo(bundle / "public" / "checkpoints.txt")
    os.mkfifo(bundle / "auditor" / "index" / "pipe")
    with BundleDir.open(bundle) as d:
        refused(d, "public/checkpoints.txt", "is a FIFO (refused")
        with deadline():
            with pytest.raises(BundleFileError, match="auditor/index/pipe: is a directory|is a FIFO"):
                d.listdir("auditor/index/pipe")
            assert "pipe" in d.listdir("auditor/index")


def test_fifo_in_place_of_a_directory_component(bundle):
    os.mkfifo(bundle / "auditor" / "docs")
    with BundleDir.open(bundle) as d:
        refused(d, "auditor/docs/t0.json", "component auditor/docs is a FIFO (refused: must be a directory)")


def test_socket_refused():
    with tempfile.TemporaryDirectory(dir="/tmp") as t:  # AF_UNIX paths must be short
        root = Path(t)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(str(root / "sock"))
            with BundleDir.open(root) as d:
                refused(d, "sock", "is a socket (refused")
        finally:
            s.close()


def test_directory_in_place_of_file(bundle):
    (bundle / "public" / "provider.vkey").mkdir()
    with BundleDir.open(bundle) as d:
        refused(d, "public/provider.vkey", "is a directory (refused: must be a regular file)")


def test_file_in_place_of_directory_component(bundle):
    with BundleDir.open(bundle) as d:
        refused(
            d, "public/leaves.bin/x", "component public/leaves.bin is a regular file (refused: must be a directory)"
        )


def test_oversize_file(bundle):
    (bundle / "public" / "big.bin").write_bytes(SECRET)
    with BundleDir.open(bundle) as d:
        refused(d, "public/big.bin", f"is {len(SECRET)} bytes, larger than the cap of 100 bytes", cap=100)
        assert d.read("public/big.bin", len(SECRET)) == SECRET
        refused(d, "public/big.bin", "larger than the cap of 0 bytes", cap=0)


def test_file_growing_past_its_size_is_bounded(bundle, monkeypatch):
    # st_size can lie (a file appended to while read): the read loop itself stops at cap + 1 bytes
    (bundle / "public" / "big.bin").write_bytes(SECRET)
    real_fstat = os.fstat

    class Small:
        def __init__(self, st):
            self._st = st

        def __getattr__(self, k):
            return 0 if k == "st_size" else getattr(self._st, k)

    reads = []
    real_read = os.read
    monkeypatch.setattr(os, "fstat", lambda fd: Small(real_fstat(fd)))
    monkeypatch.setattr(os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
    with BundleDir.open(bundle) as d:
        refused(d, "public/big.bin", "holds more than the cap of 10 bytes", cap=10)
    assert sum(reads) <= 11


def test_budget_bounds_total_bytes(bundle):
    (bundle / "public" / "a").write_bytes(b"x" * 60)
    (bundle / "public" / "b").write_bytes(b"y" * 60)
    with BundleDir.open(bundle, budget=100) as d:
        assert d.read("public/a", 1000) == b"x" * 60
        refused(d, "public/b", "remaining read budget (100 bytes in all)", cap=1000)


def test_missing_file_and_directory(bundle):
    with BundleDir.open(bundle) as d:
        refused(d, "public/checkpoints.txt", "missing")
        refused(d, "nothere/leaves.bin", "missing")
        with pytest.raises(BundleFileError, match="auditor/docs: missing"):
            d.listdir("auditor/docs")


@pytest.mark.parametrize(
    "rel,rule",
    [
        ("../outside.txt", "'..' refused"),
        ("public/../../outside.txt", "'..' refused"),
        ("/etc/passwd", "absolute path refused"),
        ("public//leaves.bin", "empty or '.'"),
        ("./public/leaves.bin", "empty or '.'"),
        ("", "empty path"),
        ("public/leaves.bin\x00", "NUL"),
        ("a/" * 3000, "longer than"),
    ],
)
def test_path_tricks_refused(bundle, rel, rule):
    with BundleDir.open(bundle) as d:
        with pytest.raises(BundleFileError, match=rule) as e:
            d.read(rel, 100)
        assert len(str(e.value)) < 300
        with pytest.raises(BundleFileError, match=rule):
            d.exists(rel)


def test_root_errors_are_the_auditors(tmp_path, bundle):
    with pytest.raises(BundleRootError, match="does not exist"):
        BundleDir.open(tmp_path / "nope")
    with pytest.raises(BundleRootError, match="not a directory"):
        BundleDir.open(bundle / "public" / "leaves.bin")
    os.mkfifo(tmp_path / "fifo")
    with deadline():
        with pytest.raises(BundleRootError, match="not a directory"):
            BundleDir.open(tmp_path / "fifo")
    assert issubclass(BundleRootError, BundleFileError)


def test_hostile_names_in_listing_are_refused_and_escaped(bundle):
    name = os.fsencode("public") + b"/bad\xff\x1b[31mname"
    with open(os.path.join(os.fsencode(bundle), name), "wb") as f:
        f.write(SECRET)
    with BundleDir.open(bundle) as d:
        with pytest.raises(BundleFileError, match="not printable UTF-8") as e:
            d.listdir("public")
    assert "\x1b" not in str(e.value)
    assert show("a\x1bb") == "a\\x1bb" and show("x" * 500).endswith("...") and show("ok/path") == "ok/path"


def test_no_descriptor_leak(bundle):
    os.mkfifo(bundle / "public" / "fifo")
    (bundle / "public" / "ln").symlink_to("leaves.bin")
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    with BundleDir.open(bundle) as d:
        for _ in range(50):
            for rel in ("public/fifo", "public/ln", "public/missing", "auditor/index/t0.i16/x"):
                with pytest.raises(BundleFileError):
                    d.read(rel, 10)
            d.read("auditor/index/t0.i16", 10)
            d.listdir("auditor/index")
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) == fds


def test_bad_caps_are_programming_errors(bundle):
    with BundleDir.open(bundle) as d:
        for cap in (-1, 1.5, True, None):
            with pytest.raises(ValueError, match="cap"):
                d.read("public/leaves.bin", cap)
    with pytest.raises(ValueError, match="closed"):
        d.read("public/leaves.bin", 10)


def test_large_file_is_read_without_a_second_copy(bundle):
    import tracemalloc

    data = os.urandom(8 << 20)
    (bundle / "public" / "leaves.bin").write_bytes(data)
    with BundleDir.open(bundle) as d:
        tracemalloc.start()
        try:
            got = d.read("public/leaves.bin", 1 << 30)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert got == data
    assert peak < 1.25 * len(data), peak  # chunks + join would peak at 2x
