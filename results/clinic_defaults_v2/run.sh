#!/bin/sh
# issue 25, session 16: the answer-level cells of the three fixed seeds after answer-keys-v2 and MuRAG-Ada's
# 24 answer tokens (both chosen on the seed-1 tuning corpus: results/normalizer_check). One run at a time, two torch
# threads, from a snapshot of commit a101f81's working tree (run.json's argv names /tmp/p16/runs). Non-Private-RAG
# and Non-RAG did not change (no code they run changed): their cells are results/clinic_defaults/seedS's.
for S in 11 12 13; do
  DPRAG_TORCH_THREADS=2 OMP_NUM_THREADS=2 dprag experiment privacy-utility --dataset clinic --model smollm2 \
    --methods murag-ada-answer-vote --eps 10 --queries 100 --seed $S --json --no-progress \
    --out results/clinic_defaults_v2/seed$S
done
for S in 11 12 13; do
  DPRAG_TORCH_THREADS=2 OMP_NUM_THREADS=2 dprag experiment privacy-utility --dataset clinic --model smollm2 \
    --methods murag-answer-vote --eps 10 --queries 100 --seed $S --json --no-progress \
    --out results/clinic_defaults_v2/murag_seed$S
done
