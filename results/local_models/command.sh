#!/bin/sh
# issue 25 item 4: local generators side by side
DPRAG_TORCH_THREADS=1 OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 nice -n 15 python benchmarks/bench_local_models.py --queries 30 --seed 0 --out results/local_models
