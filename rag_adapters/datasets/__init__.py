"""Datasets for DP-RAG experiments: the synthetic clinic corpus, wiki-fanout, and a user's JSONL corpus."""

from .base import QAItem, RagDataset
from .clinic import Canary, ClinicCorpus, ClinicFact, generate_clinic_corpus
from .jsonl import load_jsonl
from .wiki_fanout import load_wiki_fanout

__all__ = [
    "QAItem",
    "RagDataset",
    "Canary",
    "ClinicCorpus",
    "ClinicFact",
    "generate_clinic_corpus",
    "load_jsonl",
    "load_wiki_fanout",
]
