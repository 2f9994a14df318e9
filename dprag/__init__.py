"""dprag — privacy accounting and audit engine for retrieval-augmented generation over private corpora.

Four floors, each a subpackage, imports only downward:

- ``dprag.accounting``   privacy math: events, RDP curves, composition, noise, mechanisms, the per-document
  Rényi filter and its stores, collusion bounds, the DP-RAG algorithms, ``testing`` helpers;
- ``dprag.zk``           field, R1CS, gadgets, circuits, Groth16, proof formats (knows nothing of RAG);
- ``dprag.audit``        the audit protocol: ledger, receipts, commitments, committed-seed noise, provider
  service, coalition estimator, verifier, CLI;
- ``dprag.rag_adapters`` embedders, indexes, generators, datasets (the only floor that imports torch).

The names below are the ones a new user reaches for first; each is loaded on first access, so
``import dprag`` stays cheap and never imports a model library.
"""

from __future__ import annotations

import importlib

__version__ = "0.2.0"

_EXPORTS = {
    # errors (one hierarchy: every library error is a DpragError)
    "DpragError": "dprag.accounting.errors",
    "InvalidParameterError": "dprag.accounting.errors",
    "BudgetExhaustedError": "dprag.accounting.errors",
    "UnsupportedEventError": "dprag.accounting.errors",
    "UnknownDocumentError": "dprag.accounting.errors",
    # privacy events and accountants
    "PrivacyEvent": "dprag.accounting.events",
    "GaussianEvent": "dprag.accounting.events",
    "DiscreteGaussianEvent": "dprag.accounting.events",
    "LaplaceEvent": "dprag.accounting.events",
    "PureDpEvent": "dprag.accounting.events",
    "RdpAccountant": "dprag.accounting.composition",
    "PureDpAccountant": "dprag.accounting.composition",
    "PldAccountant": "dprag.accounting.composition",
    "RandomSource": "dprag.accounting.noise.source",
    # the audit protocol
    "Policy": "dprag.audit.policy",
    "ProviderService": "dprag.audit.service",
    "verify": "dprag.audit.verifier",
    "Verdict": "dprag.audit.verifier",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dprag' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
