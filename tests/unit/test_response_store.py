"""The responses store's contract, held by both backends: SQLite (a file) and PostgreSQL.

Each test opens its stores through ``open_stores``; two stores opened on the same
database stand for two server processes (workers, or replicas on other machines).
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from mellea.serve.responses import ResponseStore, Store, StoredResponse, open_store
from mellea.serve.responses.store import ORPHAN_ERROR

OpenStore = Callable[..., Store]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.services)])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def location(backend: str, request: pytest.FixtureRequest, tmp_path) -> str:
    if backend == "sqlite":
        return str(tmp_path / "responses.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def open_stores(location: str) -> Iterator[OpenStore]:
    """Opens stores on one database (closed after the test); takes the bounds."""
    opened: list[Store] = []

    def opener(**bounds) -> Store:
        store = open_store(location, **bounds)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()


def record(rid: str, created: float, text: str = "", status: str = "completed") -> StoredResponse:
    message = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return StoredResponse(
        {"id": rid, "status": status, "created_at": created, "output": []}, [message]
    )


def test_store_evicts_the_oldest_finished_responses_beyond_max_bytes(open_stores):
    store = open_stores(max_count=None, max_bytes=5_000)
    now = time.time()
    store.create(record("running", now - 50, "r" * 2_000, status="in_progress"))
    for i in range(4):
        store.create(record(f"r{i}", now - 40 + i, "x" * 1_000))
    kept = [store.get(f"r{i}") is not None for i in range(4)]
    assert kept == [False, False, True, True]  # 2 KB running + 2 x ~1.2 KB fit in 5 KB
    assert store.status("running") == "in_progress", "a running response is never evicted"
    store.finish({"id": "running", "status": "completed", "created_at": now - 50, "output": []})
    store.create(record("big", now, "y" * 3_000))
    assert store.get("running") is None and store.get("r2") is None
    assert store.get("big") is not None


def test_store_evicts_the_oldest_finished_responses_beyond_max_count(open_stores):
    store = open_stores(max_count=3)
    now = time.time()
    store.create(record("running", now - 50, status="in_progress"))
    for i in range(5):
        store.create(record(f"r{i}", now - 40 + i))
    assert [store.get(f"r{i}") is not None for i in range(5)] == [False, False, True, True, True]
    assert store.status("running") == "in_progress", "a running response is never evicted"


def test_store_forgets_expired_responses(open_stores):
    store = open_stores(max_age=3600)
    now = time.time()
    store.create(record("old", now - 7200))
    store.create(record("old-but-running", now - 7200, status="in_progress"))
    store.create(record("new", now - 60))
    assert store.get("old") is None and store.status("old") is None
    assert not store.delete("old")
    assert store.get("new") is not None and store.status("old-but-running") == "in_progress"
    assert open_stores(max_age=None).get("old") is None, "evicted, not only hidden"


def test_conversation_keeps_only_what_a_program_reads():
    output = [
        {"type": "reasoning", "id": "rs_1", "content": [{"type": "reasoning_text", "text": "hm"}]},
        {
            "type": "message",
            "id": "msg_2",
            "status": "completed",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "hi", "annotations": [], "logprobs": [{"t": 1}]}
            ],
        },
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"},
    ]
    stored = StoredResponse({"id": "r", "status": "completed", "output": output})
    assert stored.conversation() == [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "hi"}],
        },
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    ]


def raw_rows(location: str) -> str:
    """Every stored row, as text, read past the store."""
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location) as conn:
            return repr(conn.execute("SELECT * FROM mellea_responses").fetchall())
    return repr(sqlite3.connect(location).execute("SELECT * FROM responses").fetchall())


def test_a_response_is_visible_to_its_owner_only(open_stores, location):
    from cli.serve.auth import tenant_id

    store, other_process = open_stores(), open_stores()
    key = b"sk-very-secret"
    owner = tenant_id(hashlib.sha256(key).digest())
    store.create(record("mine", time.time(), status="in_progress"), owner)
    for seen_from in (store, other_process):
        assert seen_from.get("mine", "someone-else") is None
        assert seen_from.status("mine", "") is None
        assert seen_from.cancel("mine", "someone-else") is None
        assert not seen_from.delete("mine", "someone-else")
        assert seen_from.items(["msg_in"], "someone-else") == {}
    assert other_process.get("mine", owner) is not None
    assert other_process.cancel("mine", owner)[0] == "in_progress"
    stored = raw_rows(location)
    assert "mine" in stored
    assert key.decode() not in stored and hashlib.sha256(key).hexdigest() not in stored
    assert other_process.delete("mine", owner) and store.get("mine") is None


def test_store_is_shared_between_processes_and_cancel_wins(open_stores):
    one, two = open_stores(), open_stores()  # as two server processes would
    response = {"id": "resp_1", "status": "in_progress", "output": []}
    one.create(StoredResponse(response, [{"id": "msg_1"}], []))
    assert two.get("resp_1").input == [{"id": "msg_1"}]
    assert two.status("resp_1") == "in_progress", "in progress is visible everywhere"
    assert two.cancel("resp_1") == ("in_progress", {**response, "status": "cancelled"})
    assert one.status("resp_1") == "cancelled"
    finished = one.finish({**response, "status": "completed", "output": [{"id": "msg_2"}]})
    assert finished["status"] == "cancelled" and finished["output"] == [{"id": "msg_2"}]
    assert two.get("resp_1").response["output"] == [{"id": "msg_2"}]
    assert two.cancel("resp_1")[0] == "cancelled"
    assert two.delete("resp_1") and one.get("resp_1") is None and not one.delete("resp_1")
    assert one.finish(response) is None, "a deleted response is not written back"


def test_a_response_whose_server_died_fails_when_its_lease_runs_out(open_stores):
    dying, alive = open_stores(lease=0.6), open_stores(lease=0.6)  # two servers
    dying.create(record("orphan", time.time(), status="in_progress"))
    alive.create(record("kept", time.time(), status="in_progress"))
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


def test_a_file_from_before_leases_gets_them_and_its_orphans_fail(tmp_path):
    path = tmp_path / "responses.db"
    old = sqlite3.connect(path)
    old.execute(
        "CREATE TABLE responses (id TEXT PRIMARY KEY, status TEXT NOT NULL, record TEXT NOT "
        "NULL, created REAL NOT NULL DEFAULT 0, size INTEGER NOT NULL DEFAULT 0, "
        "owner TEXT NOT NULL DEFAULT '')"
    )
    stuck = '{"response": {"id": "stuck", "status": "in_progress"}, "input": [], "history": []}'
    old.execute(
        "INSERT INTO responses (id, status, record) VALUES ('stuck', 'in_progress', ?)", (stuck,)
    )
    old.commit()
    old.close()
    store = ResponseStore(str(path), max_age=None, lease=0.3)
    try:
        store.create(record("new", time.time(), status="in_progress"))
        deadline = time.monotonic() + 5
        while store.status("stuck") == "in_progress" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.get("stuck").response["error"] == ORPHAN_ERROR
        assert store.status("new") == "in_progress", "renewed by this process"
    finally:
        store.close()


def test_items_are_found_by_id_in_inputs_and_outputs(open_stores):
    store = open_stores()
    said = {"id": "msg_in", "type": "message", "role": "user", "content": "héllo \u2603"}
    answer = {"id": "msg_out", "type": "message", "role": "assistant", "content": []}
    store.create(StoredResponse({"id": "r1", "status": "completed", "output": [answer]}, [said]))
    found = open_stores().items(["msg_out", "msg_in", "msg_in", "nope"])
    assert found == {"msg_in": said, "msg_out": answer}
    assert store.items([]) == {}


def test_store_works_across_threads(open_stores):
    store = open_stores()
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for i in range(25):
                store.create(StoredResponse({"id": f"r{n}-{i}", "status": "in_progress"}))
                store.finish({"id": f"r{n}-{i}", "status": "completed"})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and store.get("r3-24").status == "completed"


def test_without_a_location_the_store_is_sqlite_in_memory():
    store = open_store(None)
    assert isinstance(store, ResponseStore) and not store.shared
    store.check()  # never down
