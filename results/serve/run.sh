#!/bin/sh
# from the repository root, on an otherwise idle machine (both cores: replicas, PostgreSQL and the clients share them)
python benchmarks/bench_serve.py --accounts 32 --per-account 8 --replicas 1,2 --out results/serve/toy.json
HF_HUB_OFFLINE=1 python benchmarks/bench_serve_real.py --requests 20 --accounts 4 --out results/serve/real.json
