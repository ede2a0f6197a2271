"""What only the PostgreSQL store has: a versioned schema and outliving the database."""

from __future__ import annotations

import threading
import time

import pytest

from mellea.serve.responses import StoredResponse, StoreError, StoreUnavailable, open_store
from tests.inprocess import app_for, client_for, openai_client
from tests.server import PROGRAMS

# Without the driver these skip; test_response_store's PostgreSQL cases say why (and fail
# under CI=true), through the pg_server fixture.
pytest.importorskip("psycopg")
pytest.importorskip("psycopg_pool")

import psycopg

from mellea.serve.responses.store_postgres import SCHEMA_VERSION, PostgresStore

pytestmark = pytest.mark.services


def running(rid: str) -> StoredResponse:
    return StoredResponse({"id": rid, "status": "in_progress", "created_at": time.time()})


def test_the_schema_is_created_once_and_versioned(pg_url):
    first, second = open_store(pg_url), open_store(pg_url)
    with psycopg.connect(pg_url) as conn:
        versions = conn.execute("SELECT version FROM mellea_schema_version").fetchall()
    assert versions == [(SCHEMA_VERSION,)], "a second server finds the schema made"
    first.close()
    second.close()


def test_a_newer_schema_is_a_start_error(pg_url):
    open_store(pg_url).close()
    with psycopg.connect(pg_url) as conn:
        conn.execute("INSERT INTO mellea_schema_version VALUES (%s)", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}, newer"):
        open_store(pg_url)


def test_an_unreachable_database_is_a_start_error(pg_server):
    url = pg_server.database_url("no_such_database")
    with pytest.raises(StoreError, match="cannot open the responses database no_such_database@"):
        open_store(url)


def test_the_store_outlives_a_database_restart(pg_server, pg_url):
    store = open_store(pg_url)
    store.create(StoredResponse({"id": "before", "status": "completed"}))
    pg_server.stop()
    try:
        with pytest.raises(StoreUnavailable) as raised:
            store.get("before")
        assert raised.value.status_code == 503 and "try again" in raised.value.message
        with pytest.raises(StoreUnavailable):
            store.check()  # known down: fails at once, without waiting on the database
    finally:
        pg_server.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            store.check()
            break
        except StoreUnavailable:
            time.sleep(0.1)
    assert store.get("before").status == "completed", "recovered without a new store"
    store.create(StoredResponse({"id": "after", "status": "completed"}))
    fresh = open_store(pg_url)
    assert fresh.get("after") is not None
    fresh.close()
    store.close()


def _store_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("responses-")]


def _connections(url: str) -> int:
    with psycopg.connect(url) as conn:
        query = (
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = 'm serve'"
        )
        return conn.execute(query).fetchone()[0]


def _connections_left(url: str) -> int:
    """The store's connections still open once the backends of closed ones have exited."""
    deadline = time.monotonic() + 5
    while (count := _connections(url)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return count


def test_closing_ends_the_threads_and_connections(pg_server, pg_url):
    before = set(_store_threads())  # any other test's store still open
    store = PostgresStore(pg_url, lease=0.6)
    store.create(running("open"))
    assert _connections(pg_url) >= 1
    pg_server.stop()
    try:
        with pytest.raises(StoreUnavailable):
            store.get("open")  # starts the probe, which waits for the database
        started = set(_store_threads()) - before
        assert {t.name for t in started} >= {"responses-leases", "responses-probe"}
        store.close()
        assert not any(t.is_alive() for t in started), "no store thread outlives close()"
        assert store._pool.closed
    finally:
        pg_server.start()


async def test_the_server_closes_its_store_when_it_stops(pg_url):
    before = set(_store_threads())
    app = app_for(PROGRAMS / "echo.py", responses_db=pg_url)
    async with app.router.lifespan_context(app), client_for(app) as client:
        reply = await openai_client(client).responses.create(model="m", input="kept")
        assert _connections(pg_url) >= 1
    assert reply.output_text == "kept"
    assert app.state.responses_store._pool.closed
    assert set(_store_threads()) <= before
    assert _connections_left(pg_url) == 0
