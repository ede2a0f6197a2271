"""Session-wide services the tests start on demand (a real PostgreSQL on loopback), and
the check that every skip of a run is one tests/skip_policy.py allows."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.services import Postgres, ServiceUnavailable, postgres
from tests.skip_policy import SERVICE_PREFIX, SkipChecker, in_ci


def missing_service(reason: str) -> None:
    """Skip a test whose service cannot start here, but fail it in CI (``CI=true``):
    CI installs the services, so a skip there would hide a broken set-up."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set, so this fails instead of skipping)")
    pytest.skip(SERVICE_PREFIX + reason)


def pytest_configure(config: pytest.Config) -> None:
    """Every skip of the run goes through tests/skip_policy.py's check."""
    config.pluginmanager.register(SkipChecker(ci=in_ci()), "skip-checker")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Postgres]:
    """One PostgreSQL server for the whole session (each test takes its own database)."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        missing_service("psycopg 3 with its pool is not installed: pip install -e '.[dev]'")
    try:
        with postgres() as server:
            yield server
    except ServiceUnavailable as exc:
        missing_service(str(exc))


_databases = iter(range(1, 10**6))


@pytest.fixture
def pg_url(pg_server: Postgres) -> str:
    """The URL of a fresh, empty database on the session's PostgreSQL."""
    return pg_server.create_database(f"test_{os.getpid()}_{next(_databases)}")
