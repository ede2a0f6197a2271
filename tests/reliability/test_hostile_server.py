"""Hostile clients against a real server on a loopback port: none of them may hurt another.

One server (the echo program, two API keys, two concurrency slots and two queue places)
takes slow uploads, clients that leave, cancels at capacity, reads across keys and
forged Host headers, while a watcher polls ``/health`` the whole time. The module's
last test checks the figures: no 5xx, nine in ten ``/health`` probes under 100 ms and
none stalled for a second, and the server's memory flat across a burst.
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server import PROGRAMS, Server, serve
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e

KEY_A, KEY_B = "sk-tenant-a", "sk-tenant-b"
BODY_TIMEOUT = 2.0
MAX_BODY = 1024 * 1024
# /health latencies are judged by what the hostile server adds over an idle twin
# probed right after it (the control): a busy machine slows both alike, so its load
# cancels out, and what is left is the server's own stall.
HEALTH_BUDGET = 0.1  # seconds over the control, for nine probes in ten
# No probe may lag the control by this much: the stalls this suite guards against (a
# client's body parsed or tokenized on the event loop) held every other client for
# seconds.
STALL_BUDGET = 1.0
CHAT = "/v1/chat/completions"


class Figures:
    """What the suite saw: statuses of every request it sent, and /health latencies."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.health: list[float] = []
        self.control: list[float] = []  # the idle twin's latency, probed right after each
        self.cases = 0
        self.rss_before = self.rss_after = 0  # bytes, around the second burst

    def record(self, response: httpx.Response) -> httpx.Response:
        self.statuses.append(response.status_code)
        return response


FIGURES = Figures()
# The /health watcher runs in a process of its own, so that the suite's own work (its
# bursts hold this process's GIL) never shows up as the server's latency. While the
# pause file exists (a test runs a server of its own, whose CPU load on a small
# machine is not this server's latency) it sends no probes, and says so with the paused file.
WATCHER = """
import http.client, os, sys, time
port, control, out, pause = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
paused = pause + ".ack"
conns = [http.client.HTTPConnection("127.0.0.1", p, timeout=5) for p in (port, control)]

def probe(conn):
    started = time.perf_counter()
    conn.request("GET", "/health")
    response = conn.getresponse()
    response.read()
    return time.perf_counter() - started, response.status

with open(out, "a", buffering=1) as figures:
    while True:
        if os.path.exists(pause):
            for conn in conns:  # the server drops idle keep-alive connections meanwhile
                conn.close()
            open(paused, "w").close()
            time.sleep(0.05)
            continue
        (latency, status), (control_latency, _) = probe(conns[0]), probe(conns[1])
        figures.write(f"{latency} {status} {control_latency}\\n")
        time.sleep(0.05)
"""
WATCH_DIR = Path(tempfile.mkdtemp(prefix="health-watch-"))
HEALTH_LOG = WATCH_DIR / "latencies"
PAUSE = WATCH_DIR / "pause"
PAUSED = WATCH_DIR / "pause.ack"  # the watcher's answer: no probe in flight


@pytest.fixture
def own_server() -> Iterator[None]:
    PAUSED.unlink(missing_ok=True)
    PAUSE.touch()
    wait_for(PAUSED.exists, "the /health watcher to finish its probe and pause")
    try:
        yield
    finally:
        PAUSE.unlink(missing_ok=True)


def read_health() -> None:
    """Take the watcher's probes into FIGURES: latencies (the server's and the control's),
    and their statuses."""
    FIGURES.health.clear()
    FIGURES.control.clear()
    for line in HEALTH_LOG.read_text().splitlines():
        latency, status, control = line.split()
        FIGURES.health.append(float(latency))
        FIGURES.control.append(float(control))
        FIGURES.statuses.append(int(status))


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def chat(text: str, **extra: object) -> dict:
    return {"messages": [{"role": "user", "content": text}], **extra}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with (
        serve(
            PROGRAMS / "echo.py",
            "--api-key",
            KEY_A,
            "--api-key",
            KEY_B,
            "--max-concurrent-requests",
            "2",
            "--max-queued-requests",
            "2",
            "--body-timeout",
            str(BODY_TIMEOUT),
            "--max-request-bytes",
            str(MAX_BODY),
            env={"ECHO_DELAY": "0.05"},
        ) as running,
        serve(PROGRAMS / "echo.py") as control,
    ):
        watcher = subprocess.Popen(
            [
                sys.executable,
                "-c",
                WATCHER,
                str(running.port),
                str(control.port),
                str(HEALTH_LOG),
                str(PAUSE),
            ]
        )
        try:
            yield running
        finally:
            watcher.terminate()
            watcher.wait(timeout=5)


@pytest.fixture(autouse=True)
def _count_case() -> None:
    FIGURES.cases += 1


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, headers=auth(KEY_A), timeout=30) as client:
        yield client


def _slow_upload(server: Server, chunked: bool) -> socket.socket:
    """A socket that sends a POST's headers and one byte of its body, then stalls."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    framing = (
        "Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n"
        if chunked
        else ("Content-Length: 1000\r\n\r\n{")
    )
    sock.sendall(
        (
            f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            f"Authorization: Bearer {KEY_A}\r\nContent-Type: application/json\r\n{framing}"
        ).encode()
    )
    return sock


def _answered(sock: socket.socket) -> bool:
    """Whether the server has written anything to ``sock`` yet (read nothing of it)."""
    sock.setblocking(False)
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return False
    finally:
        sock.setblocking(True)


def _status_line(sock: socket.socket, timeout: float) -> tuple[int, bytes]:
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        data += sock.recv(4096)
    except TimeoutError:
        pass
    head = data.split(b"\r\n", 1)[0].split()
    return (int(head[1]) if len(head) > 1 else 0), data


def test_slow_uploads_do_not_take_slots(server: Server, http: httpx.Client):
    """Four stalled uploads (as many as slots plus queue) leave room for everyone else."""
    stalled = [_slow_upload(server, chunked=i % 2 == 1) for i in range(4)]
    try:
        time.sleep(0.3)
        for _ in range(3):
            response = FIGURES.record(http.post(CHAT, json=chat("still served")))
            assert response.status_code == 200, response.text
        # Served while the uploads still stall: none has had its 408 yet (had these
        # waited for the uploads' slots, the 408s would have come first).
        assert not any(_answered(sock) for sock in stalled)
        for sock in stalled:
            status, data = _status_line(sock, BODY_TIMEOUT + 3)
            FIGURES.statuses.append(status)
            assert status == 408, data
            error = json.loads(data.split(b"\r\n\r\n", 1)[1])["error"]
            assert error["type"] == "timeout_error" and error["code"] == "request_timeout"
    finally:
        for sock in stalled:
            sock.close()


LONG_SECONDS = 20.0  # how long the server takes to echo LONG
LONG = " ".join(f"w{i}" for i in range(400))  # 20 s of echo at 50 ms a word


def _gauge(http: httpx.Client, name: str) -> float:
    metrics = http.get("/metrics").text
    line = next(x for x in metrics.splitlines() if x.startswith(f"{name} "))
    return float(line.split()[1])


def _in_flight(http: httpx.Client) -> float:
    return _gauge(http, "m_serve_requests_in_flight")


def _queued(http: httpx.Client) -> float:
    return _gauge(http, "m_serve_queue_depth")


def _wait_idle(http: httpx.Client, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while _in_flight(http) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _in_flight(http) == 0


def test_leaving_a_non_streamed_response_frees_its_slot(server: Server, http: httpx.Client):
    """Two clients ask for long non-streamed responses and leave; the slots come back."""
    for _ in range(2):
        with pytest.raises(httpx.ReadTimeout):
            http.post("/v1/responses", json={"input": LONG}, timeout=0.5)
    # Judged against the abandoned work's own length: the slots come back in a small
    # part of the 20 s it would take, whatever the machine's load.
    _wait_idle(http, timeout=LONG_SECONDS / 4)
    response = FIGURES.record(http.post("/v1/responses", json={"input": "next please"}))
    assert response.status_code == 200, response.text
    assert response.json()["output"][0]["content"][0]["text"] == "next please"
    _wait_idle(http)


class OpenStream:
    """A streamed response, left open after its ``response.created`` event."""

    def __init__(self, server: Server, body: dict, key: str = KEY_A) -> None:
        self.client = httpx.Client(base_url=server.base_url, headers=auth(key), timeout=30)
        request = self.client.build_request("POST", "/v1/responses", json=body)
        self.response = self.client.send(request, stream=True)
        assert self.response.status_code == 200
        self.lines = self.response.iter_lines()  # kept: dropping it closes the connection
        for line in self.lines:
            if line.startswith("data:"):
                event = json.loads(line[5:])
                assert event["type"] == "response.created"
                self.id = event["response"]["id"]
                return
        raise AssertionError("no response.created event")

    def close(self) -> None:
        self.response.close()
        self.client.close()


def test_cancel_and_read_at_capacity(server: Server, http: httpx.Client):
    """With every slot taken and the queue full, stored responses can still be read and
    cancelled, while another generation gets 429."""
    streams = [OpenStream(server, {"input": LONG, "stream": True}) for _ in range(2)]
    queued: list[httpx.Response] = []

    def wait_in_queue() -> None:
        with httpx.Client(base_url=server.base_url, headers=auth(KEY_A), timeout=30) as c:
            queued.append(FIGURES.record(c.post(CHAT, json=chat("queued"))))

    waiters = [threading.Thread(target=wait_in_queue) for _ in range(2)]
    try:
        for waiter in waiters:
            waiter.start()
        wait_for(lambda: _queued(http) == 2, "both waiters in the queue")
        refused = FIGURES.record(http.post(CHAT, json=chat("one too many")))
        assert refused.status_code == 429
        for stream in streams:
            response_id = stream.id
            read = FIGURES.record(http.get(f"/v1/responses/{response_id}"))
            assert read.status_code == 200 and read.json()["status"] == "in_progress"
            cancelled = FIGURES.record(http.post(f"/v1/responses/{response_id}/cancel"))
            assert cancelled.status_code == 200, cancelled.text
            assert cancelled.json()["status"] == "cancelled"
            # The run stopped when told to (the server logs one that did not, after
            # waiting for it), not when its echo ran out.
            assert "did not stop within" not in server.log
        for waiter in waiters:
            waiter.join(timeout=10)
        assert [r.status_code for r in queued] == [200, 200]
    finally:
        for stream in streams:
            stream.close()
    _wait_idle(http)


def test_a_client_that_stops_reading_loses_its_slot(own_server: None):
    """A stream whose client reads nothing fills its buffers; then the write deadline
    drops it, and the only slot serves the next client."""
    with serve(
        PROGRAMS / "echo.py",
        "--max-concurrent-requests",
        "1",
        "--body-timeout",
        "1",
        env={"ECHO_DELAY": "0"},
    ) as quick:
        words = " ".join(["word"] * 300_000)  # some 40 MB of SSE frames
        body = json.dumps(chat(words, stream=True)).encode()
        sock = socket.create_connection(("127.0.0.1", quick.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        head = f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        sock.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                response = httpx.post(quick.base_url + CHAT, json=chat("next"), timeout=10)
                if response.status_code != 429:
                    break
                time.sleep(0.2)
            assert response.status_code == 200, response.text
            assert "reply is abandoned" in quick.log
        finally:
            sock.close()


def test_clients_leaving_the_queue_give_their_places_up(server: Server, http: httpx.Client):
    streams = [OpenStream(server, {"input": LONG, "stream": True}) for _ in range(2)]
    try:
        for _ in range(2):  # the two queue places, taken by clients that give up
            with pytest.raises(httpx.ReadTimeout):
                http.post(CHAT, json=chat("waiting"), timeout=0.3)
        wait_for(lambda: _queued(http) == 0, "the clients that gave up to leave the queue")
        later: list[httpx.Response] = []
        thread = threading.Thread(
            target=lambda: later.append(FIGURES.record(http.post(CHAT, json=chat("later"))))
        )
        thread.start()
        wait_for(lambda: _queued(http) == 1, "the later request in the queue")
        assert not later, "answered while every slot is taken?"
        FIGURES.record(http.post(f"/v1/responses/{streams[0].id}/cancel"))
        thread.join(timeout=10)
        assert [r.status_code for r in later] == [200]
    finally:
        for stream in streams:
            stream.close()
    _wait_idle(http)


def test_stored_responses_belong_to_their_key(server: Server, http: httpx.Client):
    """Key B cannot read, list, continue, cancel or delete key A's responses."""
    own = FIGURES.record(http.post("/v1/responses", json={"input": "mine alone"}))
    assert own.status_code == 200
    rid = own.json()["id"]
    running = OpenStream(server, {"input": LONG, "stream": True})
    try:
        with httpx.Client(base_url=server.base_url, headers=auth(KEY_B), timeout=30) as other:
            for method, path in [
                ("GET", f"/v1/responses/{rid}"),
                ("GET", f"/v1/responses/{rid}?stream=true"),
                ("GET", f"/v1/responses/{rid}/input_items"),
                ("DELETE", f"/v1/responses/{rid}"),
                ("POST", f"/v1/responses/{running.id}/cancel"),
                ("DELETE", f"/v1/responses/{running.id}"),
            ]:
                response = FIGURES.record(other.request(method, path))
                assert response.status_code == 404, (method, path, response.text)
                assert response.json()["error"]["param"] == "response_id"
            chained = FIGURES.record(
                other.post("/v1/responses", json={"input": "go on", "previous_response_id": rid})
            )
            assert chained.status_code == 400
            assert chained.json()["error"]["code"] == "previous_response_not_found"
        assert FIGURES.record(http.get(f"/v1/responses/{rid}")).status_code == 200
        assert FIGURES.record(http.get(f"/v1/responses/{running.id}")).status_code == 200
        cancelled = FIGURES.record(http.post(f"/v1/responses/{running.id}/cancel"))
        assert cancelled.json()["status"] == "cancelled"
        assert FIGURES.record(http.delete(f"/v1/responses/{rid}")).status_code == 200
    finally:
        running.close()
    _wait_idle(http)


def test_a_bad_cache_salt_gets_a_400(server: Server, http: httpx.Client):
    for salt in ("", 5, "s" * 257):
        response = FIGURES.record(http.post(CHAT, json=chat("hi", cache_salt=salt)))
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == "cache_salt"
    assert FIGURES.record(http.post(CHAT, json=chat("hi", cache_salt="mine"))).status_code == 200


@pytest.mark.model
@pytest.mark.parametrize("program", ["docs/examples/hello.py", "tests/programs/sync_local.py"])
def test_prefix_cache_is_partitioned_per_key(own_server: None, program: str):
    """A key's repeated prompt hits the prefix cache; the same prompt from another key,
    or with another ``cache_salt``, does not (async and sync programs alike)."""
    root = Path(__file__).resolve().parents[2]
    prompt = "Repeat after me: " + " ".join(f"item {i}," for i in range(60))
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 1}

    def cached(http: httpx.Client, key: str, **extra: object) -> int:
        response = http.post(CHAT, json={**body, **extra}, headers=auth(key))
        assert response.status_code == 200, response.text
        return response.json()["usage"]["prompt_tokens_details"]["cached_tokens"]

    with (
        serve(root / program, "--api-key", KEY_A, "--api-key", KEY_B) as model_server,
        httpx.Client(base_url=model_server.base_url, timeout=120) as http,
    ):
        assert cached(http, KEY_A) == 0
        assert cached(http, KEY_A) > 0
        assert cached(http, KEY_B) == 0
        assert cached(http, KEY_B) > 0
        assert cached(http, KEY_A, cache_salt="project-x") == 0
        assert cached(http, KEY_A, cache_salt="project-x") > 0


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("rebound.attacker.example", 400),
        ("rebound.attacker.example:8000", 400),
        ("localhost.attacker.example", 400),
        ("localhost:8000", 200),
        ("app.localhost", 200),
        ("127.0.0.1", 200),
        ("[::1]:8000", 200),
        ("10.1.2.3:80", 200),
    ],
)
def test_only_known_hosts_are_answered(http: httpx.Client, host: str, status: int):
    """A web page cannot reach the server through a name rebound to 127.0.0.1."""
    for method, path, body in [("GET", "/health", None), ("POST", CHAT, chat("hi"))]:
        response = FIGURES.record(http.request(method, path, json=body, headers={"host": host}))
        assert response.status_code == status, (host, path, response.text)
        if status == 400:
            error = response.json()["error"]
            assert error["code"] == "host_not_allowed" and "--allowed-host" in error["message"]


def test_allowed_host_flag(own_server: None):
    with serve(PROGRAMS / "echo.py", "--allowed-host", "*.corp.example") as other:
        for host, status in [("api.corp.example", 200), ("localhost", 400), ("x.example", 400)]:
            response = httpx.get(other.base_url + "/v1/models", headers={"host": host})
            assert response.status_code == status, (host, response.text)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def _burst(server: Server, rounds: int) -> list[int]:
    """Each round: ordinary requests and hostile ones, eight clients at a time."""
    statuses: list[int] = []
    gate = asyncio.Semaphore(8)
    big = "x " * (MAX_BODY // 2 + 10)

    async def one(client: httpx.AsyncClient, i: int) -> None:
        async with gate:
            kind = i % 10
            try:
                if kind == 0:
                    response = await client.post(CHAT, json=chat(f"hello {i}"))
                elif kind == 1:  # a stream left after its first chunk
                    request = client.build_request("POST", CHAT, json=chat(LONG, stream=True))
                    response = await client.send(request, stream=True)
                    async for _ in response.aiter_lines():
                        break
                    await response.aclose()
                elif kind == 2:
                    body = {"prompt": ["a b", "c d"], "n": 2}
                    response = await client.post("/v1/completions", json=body)
                elif kind == 3:
                    response = await client.post("/v1/responses", json={"input": "y" * 40_000})
                elif kind == 4:
                    response = await client.post(CHAT, content=b'{"messages": [', headers=JSON)
                elif kind == 5:
                    response = await client.post(CHAT, json=chat(big))
                elif kind == 6:
                    response = await client.post(
                        CHAT, json=chat("x"), headers={"host": "evil.test"}
                    )
                elif kind == 7:
                    response = await client.post(f"/v1/responses/resp_{i}/cancel")
                elif kind == 8:  # leaves a non-streamed request
                    response = await client.post(CHAT, json=chat(LONG), timeout=0.3)
                else:
                    response = await client.post(CHAT, json=chat("hi", cache_salt=f"s{i % 3}"))
                statuses.append(response.status_code)
            except httpx.TimeoutException:
                assert kind == 8  # the leaving client
            except httpx.TransportError as exc:
                raise AssertionError(f"request kind {kind}: {exc!r}") from exc

    async with httpx.AsyncClient(
        base_url=server.base_url, headers=auth(KEY_A), timeout=60
    ) as client:
        await asyncio.gather(*(one(client, i) for i in range(rounds * 10)))
    return statuses


JSON = {"content-type": "application/json"}


def test_memory_is_flat_across_a_burst(server: Server, http: httpx.Client):
    """After a warm-up burst, a second one of the same size leaves the server's memory
    where it was; every request gets its answer (no 5xx)."""
    FIGURES.statuses += asyncio.run(_burst(server, 10))
    _wait_idle(http, timeout=15)
    FIGURES.rss_before = rss_bytes(server.process.pid)
    FIGURES.statuses += asyncio.run(_burst(server, 10))
    _wait_idle(http, timeout=15)
    FIGURES.rss_after = rss_bytes(server.process.pid)
    growth = FIGURES.rss_after - FIGURES.rss_before
    assert growth < 16 * 2**20, f"the server grew by {growth / 2**20:.1f} MiB"
    assert {400, 404, 413, 200} <= set(FIGURES.statuses)


def test_figures(server: Server):
    """Last: no request of the whole suite got a 5xx, and /health stayed quick."""
    probes = len(HEALTH_LOG.read_text().splitlines())
    wait_for(lambda: len(HEALTH_LOG.read_text().splitlines()) > probes, "one more probe")
    read_health()
    fives = [s for s in FIGURES.statuses if s >= 500]
    # What the server added over the idle control probed right after it.
    excess = [max(0.0, a - b) for a, b in zip(FIGURES.health, FIGURES.control, strict=True)]
    worst = max(excess)
    p90 = statistics.quantiles(excess, n=10)[-1]
    control_p90 = statistics.quantiles(FIGURES.control, n=10)[-1]
    print(
        f"\nhostile-server figures: {FIGURES.cases} cases, {len(FIGURES.statuses)} requests, "
        f"{len(fives)} 5xx, /health over the control: p90 {p90 * 1000:.1f} ms, worst "
        f"{worst * 1000:.1f} ms over {len(excess)} probes (the control's p90 "
        f"{control_p90 * 1000:.1f} ms), RSS {FIGURES.rss_before / 2**20:.1f} MiB before and "
        f"{FIGURES.rss_after / 2**20:.1f} MiB after the burst"
    )
    assert not fives
    assert len(excess) > 10
    assert p90 < HEALTH_BUDGET, f"/health p90 lagged the control by {p90 * 1000:.0f} ms"
    assert worst < STALL_BUDGET, f"/health lagged the control by {worst * 1000:.0f} ms"
