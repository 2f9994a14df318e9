#!/bin/sh
# issue 25: the answer normalisation and MuRAG-Ada's answer tokens, chosen on the seed-1 tuning corpus
# (spec/answer-keys.md §2). Two runs of 100 seed-1 questions (defaults of that time: answer-keys-v1), then the
# offline re-keying of their stored voter answers. run/ = 24 tokens, run_t16/ = 16 tokens (only run.json,
# predictions.jsonl and the cell files are kept).
DPRAG_TORCH_THREADS=2 OMP_NUM_THREADS=2 dprag experiment privacy-utility --dataset clinic --model smollm2 \
  --methods murag-ada-answer-vote --eps 10 --queries 100 --dev-queries 0 --corpus-seed 1 --tuning-corpus-seed test \
  --seed 1 --normalizer answer-keys-v1 --answer-tokens 16 --json --no-progress --out results/normalizer_check/run_t16
DPRAG_TORCH_THREADS=2 OMP_NUM_THREADS=2 dprag experiment privacy-utility --dataset clinic --model smollm2 \
  --methods murag-ada-answer-vote --eps 10 --queries 100 --dev-queries 0 --corpus-seed 1 --tuning-corpus-seed test \
  --seed 1 --normalizer answer-keys-v1 --answer-tokens 24 --json --no-progress --out results/normalizer_check/run
dprag experiment normalizer-check results/normalizer_check/run --out results/normalizer_check/seed1.json
dprag experiment normalizer-check results/normalizer_check/run_t16 --out results/normalizer_check/seed1_t16.json
dprag experiment normalizer-check results/normalizer_check/run --prefix-tokens 16 --out results/normalizer_check/seed1_prefix16.json  # 16 vs 24 tokens on the same retrieval
