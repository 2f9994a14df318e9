#!/bin/bash
# The re-signing campaign of spec/protocol.md §8 item 12 at commit 394a03f: ten seeds of 10^4 cases, one process
# each (run from an installed-layout copy of that commit, so later edits to the checkout could not reach it).
for s in $(seq 200 209); do
  /usr/bin/time -v python -m dprag.audit.testing.forge --cases 10000 --seed "$s" --workdir "w$s" > "seed$s.json"
done
