"""Three ``m serve`` replicas behind nginx (round robin) share one PostgreSQL store.

Everything here is real: a PostgreSQL cluster made by ``initdb``, nginx with the
configuration docs/deploying.md shows, three server processes. The tests run in file
order; the last ones kill a replica and restart the database.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass

import httpx
import pytest

from tests.conftest import missing_service
from tests.server import PROGRAMS, ROOT, Server, serve, sse_events
from tests.services import Nginx, Postgres, ServiceUnavailable, nginx

psycopg = pytest.importorskip("psycopg")  # else the pg_server fixture fails under CI=true

pytestmark = [pytest.mark.e2e, pytest.mark.services]

KEY_A, KEY_B = "sk-tenant-a", "sk-tenant-b"
LEASE = "1"  # seconds: a killed replica's response is failed soon after


@dataclass
class Fleet:
    """The replicas, the proxy in front of them, and their database."""

    replicas: list[Server]
    proxy: Nginx
    pg: Postgres
    url: str


@pytest.fixture(scope="module")
def fleet(pg_server: Postgres) -> Iterator[Fleet]:
    url = pg_server.create_database("replicas")
    args = ("--responses-db", url, "--responses-lease", LEASE, "--api-key", KEY_A)
    args += ("--api-key", KEY_B)
    with ExitStack() as stack:
        starting = [serve(PROGRAMS / "echo.py", *args) for _ in range(3)]
        with ThreadPoolExecutor(3) as pool:  # the replicas start side by side
            replicas = list(pool.map(lambda cm: cm.__enter__(), starting))
        for cm in starting:
            stack.push(cm.__exit__)
        try:
            proxy = stack.enter_context(nginx([r.port for r in replicas]))
        except ServiceUnavailable as exc:
            missing_service(str(exc))
        yield Fleet(replicas, proxy, pg_server, url)


def headers(key: str = KEY_A) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def create(base: str, body: dict, key: str = KEY_A) -> dict:
    reply = httpx.post(f"{base}/v1/responses", json=body, headers=headers(key), timeout=30)
    assert reply.status_code == 200, reply.text
    return reply.json()


def get(base: str, path: str, key: str = KEY_A) -> httpx.Response:
    return httpx.get(f"{base}/v1/responses/{path}", headers=headers(key), timeout=30)


def text_of(response: dict) -> str:
    return response["output"][0]["content"][0]["text"]


def served_responses(replica: Server) -> float:
    """How many ``POST /v1/responses`` the replica answered with 200 (its metrics)."""
    metrics = httpx.get(f"{replica.base_url}/metrics", headers=headers()).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("m_serve_requests_total")
        and 'route="/v1/responses"' in line
        and 'status="200"' in line
    )


def m_serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``m serve echo.py ARGS`` expected to stop at start."""
    command = [sys.executable, "-m", "cli.main", "serve", str(PROGRAMS / "echo.py"), *args]
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=60, env=environment
    )


def test_a_database_the_server_cannot_use_stops_it_at_start(pg_server: Postgres):
    newer = pg_server.create_database("newer_schema")
    with psycopg.connect(newer) as conn:
        conn.execute("CREATE TABLE mellea_schema_version (version integer NOT NULL)")
        conn.execute("INSERT INTO mellea_schema_version VALUES (99)")
    result = m_serve("--responses-db", newer)
    assert result.returncode == 1
    assert "schema version 99, newer than the 1 this m serve knows" in result.stderr
    assert "Traceback" not in result.stderr
    missing = m_serve(env={"DATABASE_URL": pg_server.database_url("nowhere")})
    assert missing.returncode == 1 and "cannot open the responses database" in missing.stderr
    wrong = m_serve("--responses-db", "mysql://db/responses")
    assert wrong.returncode != 0 and "mysql:// databases are not supported" in wrong.stderr


def test_a_conversation_spread_over_the_replicas_reads_back_whole(fleet: Fleet):
    before = [served_responses(r) for r in fleet.replicas]
    turns, previous = [], None
    for i in range(5):  # through nginx: round robin puts the turns on every replica
        body = {"input": f"turn {i} says hello", "previous_response_id": previous}
        turns.append(create(fleet.proxy.base_url, body))
        previous = turns[-1]["id"]
    after = [served_responses(r) for r in fleet.replicas]
    assert all(b > a for a, b in zip(before, after, strict=True)), (before, after)
    # The program of a sixth turn, on any replica, gets every message of the five.
    args = json.loads(
        text_of(create(fleet.proxy.base_url, {"input": "!args", "previous_response_id": previous}))
    )
    assert args["roles"] == ["user", "assistant"] * 5 + ["user"]
    unstored = create(fleet.replicas[0].base_url, {"input": "forget me", "store": False})
    replayed = httpx.get(
        f"{fleet.replicas[2].base_url}/v1/responses/{turns[0]['id']}",
        params={"stream": "true"},
        headers=headers(),
    )
    events = [json.loads(e) for e in sse_events(replayed.iter_lines())]
    assert events[-1]["type"] == "response.completed" and events[-1]["response"] == turns[0]
    for replica in fleet.replicas:
        assert get(replica.base_url, unstored["id"]).status_code == 404
        for i, turn in enumerate(turns):
            stored = get(replica.base_url, turn["id"]).json()
            assert stored == turn
            assert text_of(stored) == f"turn {i} says hello"
            items = get(replica.base_url, f"{turn['id']}/input_items").json()["data"]
            assert items[0]["content"][0]["text"] == f"turn {i} says hello"


def test_get_delete_and_cancel_work_from_any_replica(fleet: Fleet):
    one, two, three = (r.base_url for r in fleet.replicas)
    long_input = " ".join(["word"] * 3000)  # ~30 s of echo unless cancelled
    body = {"input": long_input, "stream": True}
    with httpx.stream(
        "POST", f"{one}/v1/responses", json=body, headers=headers(), timeout=30
    ) as stream:
        events = (json.loads(e) for e in sse_events(stream.iter_lines()))
        response_id = next(events)["response"]["id"]
        assert get(two, response_id).json()["status"] == "in_progress"
        cancelled = httpx.post(f"{two}/v1/responses/{response_id}/cancel", headers=headers())
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        rest = list(events)
    assert rest[-1]["type"] == "error" and rest[-1]["code"] == "response_cancelled"
    stored = get(three, response_id).json()
    assert stored["status"] == "cancelled" and text_of(stored).startswith("word word")
    words = len(text_of(stored).split())
    assert words < 1000, f"the replica running it stopped early, not after {words} words"
    refused = httpx.post(f"{three}/v1/responses/{response_id}/cancel", headers=headers())
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "response_id"
    deleted = httpx.delete(f"{three}/v1/responses/{response_id}", headers=headers())
    assert deleted.json() == {"id": response_id, "object": "response", "deleted": True}
    for base in (one, two, three):
        assert get(base, response_id).status_code == 404


def test_each_key_sees_its_own_responses_on_every_replica(fleet: Fleet):
    mine = create(fleet.replicas[0].base_url, {"input": "for a only"}, KEY_A)
    for replica in fleet.replicas:
        base = replica.base_url
        for path in (mine["id"], f"{mine['id']}/input_items"):
            assert get(base, path, KEY_B).status_code == 404
            assert get(base, path, KEY_A).status_code == 200
        cancel = httpx.post(f"{base}/v1/responses/{mine['id']}/cancel", headers=headers(KEY_B))
        assert cancel.status_code == 404
        assert (
            httpx.delete(f"{base}/v1/responses/{mine['id']}", headers=headers(KEY_B)).status_code
            == 404
        )
        chained = httpx.post(
            f"{base}/v1/responses",
            json={"input": "go on", "previous_response_id": mine["id"]},
            headers=headers(KEY_B),
        )
        assert chained.status_code == 400
        assert chained.json()["error"]["code"] == "previous_response_not_found"
    with psycopg.connect(fleet.url) as conn:
        rows = repr(conn.execute("SELECT * FROM mellea_responses").fetchall())
    for key in (KEY_A, KEY_B):  # the store names tenants without their keys
        assert key not in rows and hashlib.sha256(key.encode()).hexdigest() not in rows


def test_a_replica_killed_mid_stream_loses_nothing_stored(fleet: Fleet):
    done = [create(fleet.proxy.base_url, {"input": f"kept {i}"}) for i in range(6)]
    victim = fleet.replicas[2]
    body = {"input": " ".join(["word"] * 3000), "stream": True}
    # The stream is cut, never ended by the server.
    with (
        pytest.raises(httpx.HTTPError),
        httpx.stream(
            "POST", f"{victim.base_url}/v1/responses", json=body, headers=headers(), timeout=30
        ) as stream,
    ):
        events = (json.loads(e) for e in sse_events(stream.iter_lines()))
        orphan = next(events)["response"]["id"]
        for _ in range(5):
            next(events)
        os.kill(victim.process.pid, signal.SIGKILL)
        victim.process.wait()
        for event in events:
            assert event["type"] not in ("response.completed", "response.failed")
    survivor = fleet.replicas[0].base_url
    for response in done:
        assert get(fleet.proxy.base_url, response["id"]).json() == response  # nginx skips the dead
    deadline = time.monotonic() + 15
    while get(survivor, orphan).json()["status"] == "in_progress":
        assert time.monotonic() < deadline, "the orphan's lease never ran out"
        time.sleep(0.2)
    failed = get(survivor, orphan).json()
    assert failed["status"] == "failed"
    with psycopg.connect(fleet.url) as conn:  # no row half-written: each agrees with itself
        rows = conn.execute(
            "SELECT status, record->'response'->>'status', record->'response'->>'id', id "
            "FROM mellea_responses"
        ).fetchall()
    assert rows and all(a == b and c == d for a, b, c, d in rows)
    assert (
        failed["error"]["message"]
        == "the server generating this response stopped before it finished"
    )


def test_a_database_restart_is_a_503_and_the_replicas_recover(fleet: Fleet):
    base = fleet.replicas[0].base_url
    stop = threading.Event()
    chats: list[int] = []

    def chat_load() -> None:  # generation that needs no store goes on all along
        with httpx.Client(headers=headers(), timeout=30) as client:
            while not stop.is_set():
                body = {"model": "m", "messages": [{"role": "user", "content": "still here"}]}
                chats.append(client.post(f"{base}/v1/chat/completions", json=body).status_code)

    load = threading.Thread(target=chat_load)
    load.start()
    try:
        fleet.pg.stop()
        try:
            statuses = {
                httpx.post(
                    f"{base}/v1/responses", json={"input": "x"}, headers=headers()
                ).status_code
                for _ in range(3)
            }
            refused = httpx.post(f"{base}/v1/responses", json={"input": "x"}, headers=headers())
            streamed = httpx.post(
                f"{base}/v1/responses", json={"input": "x", "stream": True}, headers=headers()
            )
            unstored = httpx.post(
                f"{base}/v1/responses", json={"input": "x", "store": False}, headers=headers()
            )
            lookup = get(base, "resp_whatever")
        finally:
            fleet.pg.start()
        assert statuses == {503} and refused.status_code == 503
        error = refused.json()["error"]
        assert error["code"] == "store_unavailable" and "try again" in error["message"]
        assert lookup.status_code == 503
        assert streamed.status_code == 503, "refused before the stream starts, not inside it"
        assert unstored.status_code == 200 and text_of(unstored.json()) == "x"
        deadline = time.monotonic() + 15
        for replica in fleet.replicas[:2]:  # no restart: each finds the database by itself
            while True:
                reply = httpx.post(
                    f"{replica.base_url}/v1/responses", json={"input": "back"}, headers=headers()
                )
                if reply.status_code == 200:
                    break
                assert reply.status_code == 503 and time.monotonic() < deadline
                time.sleep(0.2)
            assert get(fleet.proxy.base_url, reply.json()["id"]).json() == reply.json()
    finally:
        stop.set()
        load.join()
    assert chats and set(chats) == {200}, "chat completions never needed the database"
