"""Privacy attacks against the DP-RAG pipelines (spec/experiments-mia.md).

``metrics`` (AUC with DeLong CI, TPR at a fixed FPR), ``s2mia`` (003 §IV-C), ``interrogation`` (001 §4.2),
``canary`` (secret exposure and citations per channel). The experiment drivers are
``rag_adapters.experiments.mia`` and ``rag_adapters.experiments.coalition_probe``.
"""
