"""Drive an ``m serve`` app in-process: ``create_app`` over ``httpx.ASGITransport``.

No socket, no subprocess: the wire layer's cases run in milliseconds. What needs a real
socket (a client that disconnects, timeouts on the wire, signals) stays in ``tests/e2e``.
The base URL is ``http://localhost``, a name the Host allow-list serves.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
from fastapi import FastAPI

from cli.serve.app import create_app
from cli.serve.program import Program
from cli.serve.settings import ServeSettings

BASE_URL = "http://localhost"


def app_for(program: Path, **settings: Any) -> FastAPI:
    """The app serving ``program`` with these ``ServeSettings`` fields."""
    return create_app(Program.load(program), ServeSettings(program=str(program), **settings))


@asynccontextmanager
async def client_for(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client whose requests go straight to ``app``."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL, timeout=30) as client:
        yield client


def openai_client(client: httpx.AsyncClient) -> openai.AsyncOpenAI:
    """The ``openai`` client over ``client`` (so over the in-process app)."""
    return openai.AsyncOpenAI(
        base_url=f"{BASE_URL}/v1", api_key="unused", max_retries=0, http_client=client
    )


def sse_payloads(body: str) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order (comments and ``event:`` lines skipped)."""
    return [line[5:].strip() for line in body.splitlines() if line.startswith("data:")]


def sse_named(body: str) -> list[tuple[str, dict[str, Any]]]:
    """``(event name, data)`` for each frame of a named-event SSE body (the Responses API)."""
    frames = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        lines = block.splitlines()
        names = [line[6:].strip() for line in lines if line.startswith("event:")]
        data = [line[5:].strip() for line in lines if line.startswith("data:")]
        if names and data:
            frames.append((names[0], json.loads("\n".join(data))))
    return frames


async def stream_frames(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> list[dict]:
    """POST a streamed request; its JSON frames (``[DONE]`` checked last and dropped)."""
    response = await client.post(path, json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    payloads = sse_payloads(response.text)
    assert payloads[-1] == "[DONE]"
    return [json.loads(p) for p in payloads[:-1]]
