"""Operational features over the wire: auth, limits, timeouts, readiness, metrics, ids, CORS."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.server import PROGRAMS, Server, serve, sse_events
from tests.waiting import until, until_awaited, wait_for

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"


def user(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def access_records(server: Server) -> list[dict]:
    """The server's access-log records so far, in order."""
    return [
        json.loads(line.split("mellea.access [", 1)[1].split("] ", 1)[1])
        for line in server.log.splitlines()
        if "mellea.access [" in line
    ]


def test_api_keys(tmp_path: Path):
    key_file = tmp_path / "keys"
    key_file.write_text("file-key-2\n\n")
    with serve(
        PROGRAMS / "echo.py",
        "--api-key-file",
        str(key_file),
        env={"M_SERVE_API_KEY": "sk-secret-1"},
    ) as server:
        url = server.base_url + CHAT
        missing = httpx.post(url, json=user("hi"), timeout=10)
        assert missing.status_code == 401
        assert missing.json()["error"]["type"] == "authentication_error"
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = httpx.post(url, json=user("hi"), headers={"authorization": "Bearer sk-secret-2"})
        assert wrong.status_code == 401
        for key in ("sk-secret-1", "file-key-2"):
            ok = httpx.post(url, json=user("hi"), headers={"authorization": f"Bearer {key}"})
            assert ok.status_code == 200, ok.text
        assert httpx.get(server.base_url + "/health").status_code == 200
        assert httpx.get(server.base_url + "/ready").status_code == 200
        assert httpx.get(server.base_url + "/v1/models").status_code == 401
        assert httpx.get(server.base_url + "/metrics").status_code == 401
        wait_for(
            lambda: any(r["route"] == "/metrics" for r in access_records(server)),
            "the last request's access-log line",
        )
        assert "sk-secret-1" not in server.log and "file-key-2" not in server.log


def test_request_ids_access_log_and_metrics():
    with serve(PROGRAMS / "echo.py") as server:
        url = server.base_url + CHAT
        echoed = httpx.post(url, json=user("a b"), headers={"x-request-id": "my-id-42"})
        assert echoed.headers["x-request-id"] == "my-id-42"
        generated = httpx.post(url, json=user("a b c"))
        assert generated.headers["x-request-id"].startswith("req_")
        error = httpx.post(url, json={"messages": []})
        assert error.headers["x-request-id"].startswith("req_")
        body = {**user("x y z"), "stream": True}
        with httpx.stream("POST", url, json=body, timeout=10) as response:
            list(response.iter_lines())
        wait_for(
            lambda: sum(r["route"] == CHAT for r in access_records(server)) >= 4,
            "the four chat requests' access-log lines",
        )
        lines = access_records(server)
        mine = [entry for entry in lines if entry["request_id"] == "my-id-42"]
        assert mine and mine[0]["status"] == 200 and mine[0]["completion_tokens"] == 2
        assert mine[0]["route"] == CHAT and "duration_ms" in mine[0]
        assert "a b" not in json.dumps(lines)  # no prompt text without --log-prompts
        assert any(entry["status"] == 400 for entry in lines)
        metrics = httpx.get(server.base_url + "/metrics").text
        assert 'm_serve_requests_total{route="/v1/chat/completions",status="200"} 3.0' in metrics
        assert 'm_serve_requests_total{route="/v1/chat/completions",status="400"} 1.0' in metrics
        assert "m_serve_time_to_first_token_seconds_count 1.0" in metrics
        assert "m_serve_completion_tokens_total 8.0" in metrics  # 2 + 3 + 3
        assert "m_serve_requests_in_flight 0.0" in metrics


def test_overload_mix_of_200_and_429():
    with serve(
        PROGRAMS / "faulty.py",
        "--max-concurrent-requests",
        "2",
        "--max-queued-requests",
        "2",
        env={"SLOW_SECONDS": "1.5"},
    ) as server:

        async def one(client: httpx.AsyncClient) -> tuple[int, float, str | None]:
            started = time.monotonic()
            response = await client.post(server.base_url + CHAT, json=user("slow"), timeout=30)
            return (
                response.status_code,
                time.monotonic() - started,
                response.headers.get("retry-after"),
            )

        async def burst():
            limits = httpx.Limits(max_connections=40)
            async with httpx.AsyncClient(limits=limits) as client:
                return await asyncio.gather(*(one(client) for _ in range(20)))

        results = asyncio.run(burst())
    statuses = sorted(status for status, _, _ in results)
    assert statuses == [200] * 4 + [429] * 16
    rejected = [r for r in results if r[0] == 429]
    served = [r for r in results if r[0] == 200]
    # Refused at once: each 429 came back before any served request (1.5 s of program
    # each) was done, whatever the machine's load.
    assert max(elapsed for _, elapsed, _ in rejected) < min(elapsed for _, elapsed, _ in served)
    assert all(retry == "1" for _, _, retry in rejected)


def test_request_timeout(tmp_path: Path):
    with serve(
        PROGRAMS / "faulty.py", "--request-timeout", "1", env={"SLOW_SECONDS": "5"}
    ) as server:
        started = time.monotonic()
        response = httpx.post(server.base_url + CHAT, json=user("slow"), timeout=30)
        assert response.status_code == 504
        assert response.json()["error"]["code"] == "timeout"
        assert time.monotonic() - started < 5  # before the program's 5 s were over
        marker = tmp_path / "closed"
        body = {**user(f"endless:{marker}"), "stream": True}
        with httpx.stream("POST", server.base_url + CHAT, json=body, timeout=30) as streamed:
            payloads = list(sse_events(streamed.iter_lines()))
        assert payloads[-1] == "[DONE]"
        assert json.loads(payloads[-2])["error"]["code"] == "timeout"
        deadline = time.monotonic() + 5
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists()
        assert httpx.post(server.base_url + CHAT, json=user("fine")).status_code == 200


def test_sigterm_lets_active_streams_finish():
    words = " ".join(f"w{i}" for i in range(30))
    with serve(PROGRAMS / "echo.py", "--shutdown-grace", "20", env={"ECHO_DELAY": "0.1"}) as server:
        begun: list[httpx.Response] = []  # the streams that have sent their first event

        async def stream_one(client: httpx.AsyncClient) -> str:
            body = {**user(words), "stream": True}
            async with client.stream("POST", server.base_url + CHAT, json=body) as response:
                assert response.status_code == 200
                payloads = []
                async for payload in _aevents(response):
                    if not payloads:
                        begun.append(response)
                    payloads.append(payload)
            assert payloads[-1] == "[DONE]"
            return "".join(
                json.loads(p)["choices"][0]["delta"].get("content") or ""
                for p in payloads[:-1]
                if json.loads(p)["choices"]
            )

        async def draining() -> bool:
            try:
                async with httpx.AsyncClient(timeout=5) as probe:
                    return (await probe.get(server.base_url + "/ready")).status_code == 503
            except httpx.HTTPError:
                return True  # no longer accepting connections

        async def scenario():
            async with httpx.AsyncClient(timeout=60) as client:
                streams = [asyncio.create_task(stream_one(client)) for _ in range(10)]
                await until(lambda: len(begun) == 10, "every stream's first event")
                assert (await client.get(server.base_url + "/ready")).status_code == 200
                server.process.send_signal(signal.SIGTERM)
                await until_awaited(draining, "the server to start draining")
                with pytest.raises(httpx.HTTPError):
                    async with httpx.AsyncClient(timeout=5) as fresh:
                        response = await fresh.post(server.base_url + CHAT, json=user("late"))
                        response.raise_for_status()
                return await asyncio.gather(*streams)

        texts = asyncio.run(scenario())
        assert texts == [words] * 10
        assert server.process.wait(timeout=30) == 0


async def _aevents(response: httpx.Response):
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            yield line[5:].strip()


def test_cors_only_when_asked():
    preflight = {
        "origin": "http://app.example",
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization,content-type",
    }
    with serve(
        PROGRAMS / "echo.py", "--cors-origin", "http://app.example", "--api-key", "k"
    ) as server:
        response = httpx.options(server.base_url + CHAT, headers=preflight)
        assert response.status_code == 200
        assert response.headers["access-control-allow-origin"] == "http://app.example"
        denied = httpx.post(
            server.base_url + CHAT, json=user("x"), headers={"origin": "http://app.example"}
        )
        assert denied.status_code == 401
        assert denied.headers["access-control-allow-origin"] == "http://app.example"
    with serve(PROGRAMS / "echo.py") as server:
        response = httpx.post(
            server.base_url + CHAT, json=user("x"), headers={"origin": "http://app.example"}
        )
        assert "access-control-allow-origin" not in response.headers


def test_wrong_key_timing_does_not_depend_on_its_prefix():
    """Loose statistical check: keys sharing a long prefix with the real one are not slower."""
    secret = "sk-" + "a" * 61
    with serve(PROGRAMS / "echo.py", "--api-key", secret) as server:
        url = server.base_url + "/v1/models"
        candidates = {"shares_prefix": "sk-" + "a" * 60 + "b", "differs_at_once": "x" * 64}
        timings: dict[str, list[float]] = {name: [] for name in candidates}
        with httpx.Client() as http:
            for _ in range(5):  # warm up the connection
                http.get(url, headers={"authorization": "Bearer warmup"})
            for _ in range(300):
                for name, key in candidates.items():
                    started = time.perf_counter()
                    response = http.get(url, headers={"authorization": f"Bearer {key}"})
                    timings[name].append(time.perf_counter() - started)
                    assert response.status_code == 401
    medians = {name: sorted(values)[len(values) // 2] for name, values in timings.items()}
    ratio = medians["shares_prefix"] / medians["differs_at_once"]
    assert 0.8 < ratio < 1.25, medians
