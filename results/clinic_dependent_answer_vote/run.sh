#!/bin/sh
# Issue 13, dependent chains: MuRAG-Ada vs MuRAG with answer-level voting, settings of results/clinic_answer_vote
# (tau = 45, t = 6, key words 3, 16 tokens, m = 20: chosen there on the disjoint clinic corpus of seed 1), no
# further tuning; eps_total = 10, M = 1. MuRAG-Ada's bins are the experiments' fixed EXPERIMENT_BINS (30..80 step 1).
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
exec python -c "
import dprag.accounting.rag.answer_vote, dprag.rag_adapters.answer_keys, dprag.accounting.mechanisms.string_selection  # noqa
import dprag.rag_adapters.experiments.methods, dprag.rag_adapters.experiments.runner  # noqa
from dprag.rag_adapters.experiments.cli import experiment
experiment(['privacy-utility', '--dataset', 'clinic', '--model', 'smollm2', '--split', 'dependent',
            '--methods', 'murag-ada-answer-vote,murag-answer-vote', '--eps', '10', '--queries', '20',
            '--dev-queries', '0', '--m', '20', '--docs-per-voter', '1', '--M', '1', '--max-tokens', '16',
            '--taus', '45', '--vote-thresholds', '6', '--key-words', '3', '--threads', '1', '--seed', '0',
            '--out', 'results/clinic_dependent_answer_vote', '--no-progress'])
"
