#!/bin/sh
# from the repository root, on an otherwise idle machine
python benchmarks/bench_timing.py --model toy --serves 1000 --release-seconds 0.05 --out results/timing/toy.json
HF_HUB_OFFLINE=1 python benchmarks/bench_timing.py --model smollm2 --serves 1000 --out results/timing/smollm2.json
