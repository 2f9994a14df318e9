#!/bin/sh
# The demo's mechanism recalibrated on the library's current defaults (answer-keys-v2; 16 answer tokens for MuRAG,
# 24 for MuRAG-Ada, lab/experiments/defaults.py) on the PUBLIC calibration corpus only (the clinic generator with the
# seed dprag-demo/public-calibration; no tenant's data): the coverage grid (no LLM) and the release grid (SmolLM2),
# the latter scored by the exact expected share of correct releases (lab/release_law.py) over 3 passes of the demo's
# traffic (36 dev questions). Run from the repository root at commit ab51ad9+ (lab/demo/coverage.py's release_grid with
# normalizer and per-algorithm tokens), nice 10, two torch threads, on the 2 shared cores.
nice -n 10 dprag experiment demo-calibration --only mechanism --passes 3 > results/demo_calibration/release_grid_v2.json
