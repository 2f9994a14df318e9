#!/bin/bash
# Run every v3 reproduction with the v3 code; each script's output goes to out/<script>.log (and the terminal).
# Setup, from the repository's top: git worktree add --detach ../wt-v3 339d301, then a venv with
# `pip install -c .ci/constraints.txt torch==2.13.0 && pip install -e '../wt-v3[serve,dev]'` activated;
# DPRAG_V3_WORKTREE names the worktree (absolute path).
set -u
cd "$(dirname "$0")"
: "${DPRAG_V3_WORKTREE:?set DPRAG_V3_WORKTREE to the v3 worktree (commit 339d301)}"
export DPRAG_VERIFY_WORKERS=1
mkdir -p out
(cd "$DPRAG_V3_WORKTREE" && echo "v3 worktree: $(git rev-parse --short HEAD) $(git log -1 --format=%s)")
for s in f*.py; do
  echo "=== $s"
  python "$s" 2>&1 | tee "out/${s%.py}.log"
done
