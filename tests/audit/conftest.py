"""Fixtures shared by the audit floor's store tests."""

from __future__ import annotations

import pytest

#: the store engines every store test runs on (PostgreSQL: a server of the session, so the integration tier)
ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)]


@pytest.fixture(params=ENGINES)
def store_url(request):
    """None for SQLite (the directory's file), else a URL of the session's PostgreSQL server."""
    if request.param == "sqlite":
        return None
    return request.getfixturevalue("pg_url")
