#!/bin/sh
# issue 25: the privacy-utility defaults on three question seeds fixed by the issue (never tuned on).
# Seed 11 ran alone; seeds 12 and 13 ran at the same time (one torch thread each, 2 cores), from a clone of
# commit eac115e at /tmp/runtree (so run.json records that --out).
for S in 11 12 13; do
  DPRAG_TORCH_THREADS=1 OMP_NUM_THREADS=1 dprag experiment privacy-utility --dataset clinic --model smollm2 \
    --methods murag-answer-vote,murag-ada-answer-vote,non-private-rag,non-rag --eps 10 --queries 100 --seed $S \
    --json --no-progress --out results/clinic_defaults/seed$S
done
