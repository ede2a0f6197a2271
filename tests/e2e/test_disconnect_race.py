"""A client that gives up on a non-streamed reply stops its generation, every time.

The race: the client leaves while the engine's tokens stream in. A cancel that arrived
in the same moment as a token used to be dropped (``asyncio.wait_for`` on Python 3.11
returned the token instead), and the reply read on to its end for nobody. Each round
here cuts two concurrent requests (so one waits in the admission queue) at a different
moment, on chat, completions and Responses (``store: false``), and then waits, with a
deadline, for the engine to hold no request.
"""

from __future__ import annotations

import asyncio
import re
import time

import httpx
import pytest

from tests.engine.conftest import make_tiny_llama
from tests.server import PROGRAMS, serve

pytestmark = pytest.mark.e2e

KEY = "A"
ROUNDS = 8  # per endpoint
LONG = 3000  # tokens: far longer than any cut, so a generation nobody stopped shows
IDLE_WITHIN = 4.0  # seconds for the engine to drop a request after its client left


def gauge(metrics: str, name: str) -> float:
    """Sum of every sample of ``name`` in a Prometheus text page."""
    pattern = re.compile(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", re.MULTILINE)
    return sum(float(v) for v in pattern.findall(metrics))


def request(endpoint: str) -> tuple[str, dict]:
    """(path, body) of a long non-streamed request to ``endpoint``."""
    if endpoint == "responses":
        body = {"input": "Tell me a story.", "store": False, "max_output_tokens": LONG}
        return "/v1/responses", body
    common = {"n": 4, "max_tokens": LONG, "ignore_eos": True}
    if endpoint == "chat":
        messages = [{"role": "user", "content": "Tell me a story."}]
        return "/v1/chat/completions", {"messages": messages, **common}
    return "/v1/completions", {"prompt": "Once upon a time", **common}


async def cut_short(base: str, endpoint: str, after: float) -> None:
    """Send the request and give up on it after ``after`` seconds (the connection closes)."""
    path, body = request(endpoint)
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(timeout=after, headers=headers) as client:
        try:
            reply = await client.post(base + path, json={"model": "m", **body})
        except httpx.TimeoutException:
            return
    raise AssertionError(f"the reply came before the client left: {reply.status_code}")


async def busy_requests(client: httpx.AsyncClient, base: str) -> float:
    """Requests inside the engine, running or waiting, per ``/metrics``."""
    return gauge((await client.get(base + "/metrics")).text, "m_serve_engine_requests")


async def engine_empties(client: httpx.AsyncClient, base: str, within: float) -> float:
    """Wait until the engine holds no request or ``within`` seconds pass; what it holds."""
    deadline = time.monotonic() + within
    while (busy := await busy_requests(client, base)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return busy


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    model = make_tiny_llama(tmp_path_factory.mktemp("long-llama"), max_positions=4096)
    flags = ["--api-key", KEY, "--api-key", "B", "--max-concurrent-requests", "2"]
    flags += ["--max-queued-requests", "2", "--request-timeout", "60"]
    with serve(PROGRAMS / "local_model.py", *flags, env={"LOCAL_MODEL": str(model)}) as running:
        yield running


@pytest.mark.parametrize("endpoint", ["chat", "completions", "responses"])
def test_a_client_that_leaves_stops_its_generation_every_time(server, endpoint: str):
    base = server.base_url

    async def rounds() -> list[tuple[int, float]]:
        left_running = []
        headers = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(timeout=30, headers=headers) as client:
            for i in range(ROUNDS):
                # From before the first token (queued, prefill) to well into the decode.
                after = 0.1 + 0.9 * i / (ROUNDS - 1)
                await asyncio.gather(
                    cut_short(base, endpoint, after), cut_short(base, endpoint, after)
                )
                busy = await engine_empties(client, base, IDLE_WITHIN)
                if busy:
                    left_running.append((i, busy))
                    await engine_empties(client, base, 120)  # the next round starts clean
        return left_running

    assert asyncio.run(rounds()) == [], "requests kept generating after their client left"
