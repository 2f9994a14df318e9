#!/bin/sh
# from the repository root, on an otherwise idle machine
# shared: replicas, PostgreSQL and the clients share both cores; --pin: servers on CPU 0, the load generator on CPU 1
python benchmarks/bench_serve.py --accounts 32 --per-account 16 --replicas 1,2 --out results/serve/toy.json
python benchmarks/bench_serve.py --accounts 32 --per-account 16 --replicas 1 --pin --out results/serve/toy-pinned.json
# --threads N on both arms (results/serve/threads.json combines N = 40, 8, 4, 2)
for n in 40 8 4 2; do python benchmarks/bench_serve.py --accounts 32 --per-account 16 --replicas 1 --threads $n --out /tmp/threads-$n.json; done
# the request path serially, A/B against an earlier commit's install (see the script's docstring)
python benchmarks/bench_request_path.py --before /tmp/beforevenv/bin/python --engines sqlite,postgresql --rounds 6 --per-round 96 --out results/serve/request_path.json
HF_HUB_OFFLINE=1 python benchmarks/bench_serve_real.py --requests 20 --accounts 4 --out results/serve/real.json
# group commit A/B (results/serve/group_commit/): "before" is a clone of 088df08 installed editable in its own venv
# (python -m venv --system-site-packages /tmp/bv; /tmp/bv/bin/pip install --no-deps -e /tmp/before), run from that
# clone; "after" this tree; alternated, then one pinned run each
for r in 1 2; do
  python benchmarks/bench_serve.py --per-account 16 --out results/serve/group_commit/after$r.json
  (cd /tmp/before && /tmp/bv/bin/python benchmarks/bench_serve.py --per-account 16 --out "$OLDPWD/results/serve/group_commit/before$r.json")
done
python benchmarks/bench_serve.py --per-account 16 --replicas 1 --pin --out results/serve/group_commit/afterpin.json
(cd /tmp/before && /tmp/bv/bin/python benchmarks/bench_serve.py --per-account 16 --replicas 1 --pin --out "$OLDPWD/results/serve/group_commit/beforepin.json")
# at 5fe0dee (the RAG cost cached): one replica, shared and pinned
python benchmarks/bench_serve.py --per-account 16 --replicas 1 --out results/serve/group_commit/head.json
python benchmarks/bench_serve.py --per-account 16 --replicas 1 --pin --out results/serve/group_commit/headpin.json
