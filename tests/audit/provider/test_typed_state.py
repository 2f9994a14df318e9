"""The log's state is one typed object (``window.Window``): each tenant a ``Tenant`` (index, retriever, filter),
and the roles that read the state — admission, recovery, the bundle export, attestation — take that object, never
the service (issue: "The provider's state, typed")."""

from __future__ import annotations

import inspect

import numpy as np

from dprag.audit.provider import admission, attest, export, recovery
from dprag.audit.provider.service import ProviderService
from dprag.audit.provider.window import Tenant, Window
from dprag.audit.testing import window as fx


def test_the_roles_take_the_logs_state_not_the_service():
    """Every entry point of admission, recovery, export and attestation names ``Window`` as what it reads."""
    roles = [
        admission.check_request,
        admission.check_tokens,
        recovery.replayed_units,
        recovery.check_spend,
        export.export_bundle,
        attest.attest_window,
    ]
    for fn in roles:
        first = next(iter(inspect.signature(fn).parameters.values()))
        assert first.annotation == "Window", (fn.__qualname__, first.annotation)
    assert issubclass(ProviderService, Window)


def test_each_tenant_is_a_typed_record_that_grows_with_its_documents(tmp_path):
    """``tenants[t]`` is a ``Tenant``: its int16 index, a retriever over the same documents and a filter over them;
    a documents leaf grows all three together, and a reopened service loads the same shape."""
    svc = fx.open_service(tmp_path / "svc")
    try:
        for t, ten in svc.tenants.items():
            assert isinstance(ten, Tenant)
            assert ten.q.dtype == np.int16 and ten.q.shape[0] == len(ten.retriever) == ten.filter.n_docs, t
        n0 = len(svc.tenants["clinic"].retriever)
        svc.add_documents("clinic", {"new-1": "a fresh note on inhalers", "new-2": "a fresh note on rain"})
        ten = svc.tenants["clinic"]
        assert ten.q.shape[0] == len(ten.retriever) == ten.filter.n_docs == n0 + 2
        assert ten.filter is svc.epochs[-1].filters["clinic"]
        assert svc.spent_units("clinic").shape == (n0 + 2,)
    finally:
        svc.close()
    again = fx.reopen_service(tmp_path / "svc")
    try:
        assert again.tenants["clinic"].q.shape == ten.q.shape
        assert np.array_equal(again.tenants["clinic"].q, ten.q)
    finally:
        again.close()
