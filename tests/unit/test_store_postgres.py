"""What only the PostgreSQL store has: a versioned schema, leases, and outliving the database."""

from __future__ import annotations

import time

import pytest

from mellea.serve.responses import StoredResponse, StoreError, StoreUnavailable, open_store

# Without the driver these skip; test_response_store's PostgreSQL cases say why (and fail
# under CI=true), through the pg_server fixture.
psycopg = pytest.importorskip("psycopg")
store_postgres = pytest.importorskip("mellea.serve.responses.store_postgres")
ORPHAN_ERROR = store_postgres.ORPHAN_ERROR
SCHEMA_VERSION = store_postgres.SCHEMA_VERSION
PostgresStore = store_postgres.PostgresStore

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


def test_a_response_whose_server_died_fails_when_its_lease_runs_out(pg_url):
    dying = PostgresStore(pg_url, lease=0.6)
    alive = PostgresStore(pg_url, lease=0.6)
    dying.create(running("orphan"))
    alive.create(running("kept"))
    time.sleep(1.0)  # both renewed by their threads meanwhile
    assert alive.status("orphan") == "in_progress"
    dying._closed.set()  # stops renewing, as a killed process would
    deadline = time.monotonic() + 5
    while alive.status("orphan") == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.1)
    orphan = alive.get("orphan").response
    assert orphan["status"] == "failed" and orphan["error"] == ORPHAN_ERROR
    assert alive.status("kept") == "in_progress", "a live server's response keeps its lease"
    assert alive.finish({"id": "kept", "status": "completed"})["status"] == "completed"
    dying.close()
    alive.close()


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
