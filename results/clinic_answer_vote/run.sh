#!/bin/sh
# Issue 13 headline: one run, 100 clinic test questions, eps_total = 10, M = 1, tuned on the disjoint clinic
# corpus of seed 1 (issue 10 item 4). Started with nohup; partial results in cells_partial.jsonl /
# questions_partial.jsonl as the run goes.
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
exec python -c "
import dprag.accounting.rag.answer_vote, dprag.rag_adapters.answer_keys, dprag.accounting.mechanisms.string_selection  # noqa: load before any edit
import dprag.rag_adapters.experiments.methods, dprag.rag_adapters.experiments.runner, dprag.rag_adapters.experiments.report  # noqa
from dprag.rag_adapters.experiments.cli import experiment
experiment(['privacy-utility', '--dataset', 'clinic', '--model', 'smollm2',
            '--methods', 'non-rag,non-private-rag,murag-answer-vote,murag', '--eps', '10', '--queries', '100',
            '--dev-queries', '4', '--tuning-corpus-seed', '1', '--m', '20', '--docs-per-voter', '1', '--M', '1',
            '--max-tokens', '16', '--taus', '45,50', '--private-tokens', '4', '--vote-thresholds', '6',
            '--key-words', '3', '--threads', '1', '--seed', '0', '--out', 'results/clinic_answer_vote',
            '--no-progress'])
"
