#!/bin/sh
# The demo's mechanism recalibrated on the library's current defaults (answer-keys-v2; 16 answer tokens for MuRAG,
# 24 for MuRAG-Ada, lab/experiments/defaults.py) on the PUBLIC calibration corpus only (the clinic generator with the
# seed dprag-demo/public-calibration; no tenant's data): the coverage grid (no LLM) and the release grid (SmolLM2),
# the latter scored by the exact expected share of correct releases (lab/release_law.py) over 3 passes of the demo's
# traffic (36 dev questions). Settings not given here are the command's defaults, recorded in the output's
# release_grid_settings (normalizer, answer_tokens, key_words, passes, epsilon_q) and corpus fields.
# Made at commit 73f6302 (lab/demo/answer_cache.py: progress on stderr, --cache), normal priority, one process on the
# 2 shared cores (load average 0.4 at the start, 4.1 at the end): 3040 distinct voter prompts at 129/min, wall 23 min
# 31 s, CPU 1338 s user + 24 s sys (GNU time -v). The cache (JSON lines, 456 KB) is not kept.
HF_HUB_OFFLINE=1 dprag experiment demo-calibration --only mechanism --passes 3 --cache calib_cache.jsonl \
  > results/demo_calibration/release_grid_v2.json 2> calib.err
