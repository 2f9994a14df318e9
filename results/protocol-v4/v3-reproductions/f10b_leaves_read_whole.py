"""Finding 10b (v3): a single named bundle file is read whole (unless --max-read is given).

A toy bundle whose public/leaves.bin is its genesis leaf followed by N bytes of zeros (a sparse file: no disk),
verified by the v3 CLI under /usr/bin/time -v (DPRAG_VERIFY_WORKERS=1: one process). Sizes: 0 (the honest
bundle), 256 MiB, 1 GiB; then 1 GiB again with --max-read 64M."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from _common import DPRAG, workdir

from dprag.audit.testing import window as fx

d = workdir("f10b")
w = fx.build_window(d / "w", rounds=1)
genesis_len = int.from_bytes((w.bundle / "public" / "leaves.bin").read_bytes()[:4], "big")


def bundle_with_zeros(n: int):
    b = d / f"bundle-{n >> 20}MiB"
    shutil.copytree(w.bundle, b)
    if n:
        with open(b / "public" / "leaves.bin", "r+b") as f:  # the genesis leaf, then n bytes of zeros (sparse)
            f.truncate(4 + genesis_len)
            f.truncate(4 + genesis_len + n)
    return b


def measure(b, *extra):
    env = {**os.environ, "DPRAG_VERIFY_WORKERS": "1"}
    p = subprocess.run(["/usr/bin/time", "-v", DPRAG, "audit", "verify", str(b), *extra], capture_output=True,
                       text=True, env=env)
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", p.stderr).group(1)
    err = [x for x in p.stderr.splitlines() if not x.startswith("\t") and "Command" not in x]
    size = os.path.getsize(b / "public" / "leaves.bin")
    print(f"leaves.bin {size:>11,d} bytes {' '.join(extra):16s} exit {p.returncode}  peak RSS {rss_kb / 1024:7.1f} MiB"
          f"  wall {wall}")
    print("   ", (p.stdout.splitlines() or ["(no stdout)"])[0][:150])
    for x in err:
        print("    [stderr]", x[:200])
    return rss_kb


print(f"python {sys.version.split()[0]}; dprag at {DPRAG}")
base = measure(bundle_with_zeros(0))
for n in (256 << 20, 1 << 30):
    measure(bundle_with_zeros(n))
measure(d / "bundle-1024MiB", "--max-read", "64M")
