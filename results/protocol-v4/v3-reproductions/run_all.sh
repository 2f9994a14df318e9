#!/bin/bash
# Run every v3 reproduction with the v3 venv; each script's output goes to out/<script>.log (and the terminal).
set -u
cd "$(dirname "$0")"
. /work/venv-v3/bin/activate
export DPRAG_VERIFY_WORKERS=1
mkdir -p out
(cd /work/wt-v3 && echo "v3 worktree: $(git rev-parse --short HEAD) $(git log -1 --format=%s)")
for s in f*.py; do
  echo "=== $s"
  python "$s" 2>&1 | tee "out/${s%.py}.log"
done
