#!/bin/sh
# from the repository root
python benchmarks/bench_timing.py --model toy --serves 1000 --release-seconds 0.05 --out results/timing/toy.json
# SmolLM2 on one core (the other was running another job when smollm2.json was measured)
taskset -c 0 env DPRAG_TORCH_THREADS=1 OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 \
  python benchmarks/bench_timing.py --model smollm2 --serves 1000 --arms constant-work --out results/timing/smollm2.json
# SmolLM2 with constant-time release at 2.2 s (above the ~1.3 s median serve), one core (the other was in use)
taskset -c 0 env DPRAG_TORCH_THREADS=1 OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 \
  python benchmarks/bench_timing.py --model smollm2 --serves 1000 --arms "" --release-seconds 2.2 \
  --out results/timing/smollm2_release.json
