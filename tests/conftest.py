"""Session-wide services the tests start on demand: a real PostgreSQL on loopback."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.services import Postgres, ServiceUnavailable, postgres


def missing_service(reason: str) -> None:
    """Skip a test whose service cannot start here, but fail it in CI (``CI=true``):
    CI installs the services, so a skip there would hide a broken set-up."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI is set, so this fails instead of skipping)")
    pytest.skip(reason)


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
