"""dprag.rag_adapters: a real embedder, exact / ANN indexes, LLM generators and datasets, implementing the
small protocols of ``accounting.protocols`` (Retriever, Generator, DecodingSession).

The only floor that imports torch / transformers / faiss / sentence-transformers -- and only lazily:
importing this package (or ``rag_adapters.metrics`` / ``rag_adapters.datasets``) does not import torch.
Names are resolved on first access (PEP 562 ``__getattr__``).
"""

from __future__ import annotations

if __name__ != "dprag.rag_adapters":  # one folder, one module: never loaded twice under two names
    raise ImportError(
        f"the folder rag_adapters/ is the package dprag.rag_adapters: import dprag.rag_adapters, not {__name__} "
        "(pip install -e . from the repository root)"
    )

import importlib

_EXPORTS = {
    # embedder / index / retriever
    "Embedder": "embedder",
    "MiniLMEmbedder": "embedder",
    "EmbeddingCache": "embedder",
    "Index": "index",
    "ExactIndex": "index",
    "FaissFlatIndex": "index",
    "FaissHNSWIndex": "index",
    "DenseRetriever": "retriever",
    "ScoreBins": "scoring",
    "PAPER_BINS": "scoring",
    "MINILM_BINS": "scoring",
    # generators
    "CausalLMGenerator": "generator",
    "BatchedSession": "generator",
    "load_smollm2": "generator",
    "convert_smollm2": "generator",
    "tiny_gpt2": "generator",
    "tiny_llama": "generator",
    "PromptFormat": "prompting",
    # datasets
    "QAItem": "datasets",
    "RagDataset": "datasets",
    "ClinicCorpus": "datasets",
    "generate_clinic_corpus": "datasets",
    "load_wiki_fanout": "datasets",
    "load_jsonl": "datasets",
    # metrics
    "match_accuracy": "metrics",
    "contains_answer": "metrics",
    "token_f1": "metrics",
    "rouge_l": "metrics",
    # errors
    "MissingDependencyError": "common",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'rag_adapters' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
