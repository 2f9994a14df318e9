"""dprag — privacy accounting and audit engine for retrieval-augmented generation over private corpora.

Five floors, each a subpackage, imports only downward (spec/architecture.md):

- ``dprag.accounting``   privacy math: events, RDP curves, composition, noise, mechanisms, the per-document
  Rényi filter and its stores, collusion bounds, the DP-RAG algorithms, ``testing`` helpers;
- ``dprag.zk``           field, R1CS, gadgets, circuits, Groth16, proof formats (knows nothing of RAG);
- ``dprag.audit``        the audit protocol: ledger, receipts, commitments, committed-seed noise, provider
  service, coalition estimator, verifier, CLI;
- ``dprag.rag_adapters`` embedders, indexes, generators, datasets (imports torch lazily);
- ``dprag.lab``          the applications: demo, experiments, attacks, leakage harness, calibration.

``dprag.errors`` holds the error hierarchy every floor raises.

The names below are the ones a new user reaches for first; each is loaded on first access, so
``import dprag`` stays cheap and never imports a model library.
"""

from __future__ import annotations

import importlib

__version__ = "0.3.0"

_EXPORTS = {
    # errors (one hierarchy: every library error is a DpragError)
    "DpragError": "dprag.errors",
    "InvalidParameterError": "dprag.errors",
    "BudgetExhaustedError": "dprag.errors",
    "UnsupportedEventError": "dprag.errors",
    "UnknownDocumentError": "dprag.errors",
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
    "Policy": "dprag.audit.protocol.policy",
    "ProviderService": "dprag.audit.provider.service",
    "verify": "dprag.audit.verify",
    "Verdict": "dprag.audit.verify.verdict",
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
