"""The real default model under abuse: a disconnect storm and 64 concurrent streams.

Both run `m serve docs/examples/hello.py` on the local engine and read its state
from `/metrics` (KV-cache blocks, requests inside the engine).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import statistics
import time
from pathlib import Path

import httpx
import pytest

from tests.server import EXAMPLES, serve

pytestmark = [pytest.mark.e2e, pytest.mark.model]

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
CHAT = "/v1/chat/completions"
PROMPTS = [
    "Tell me about the moon.",
    "Write a haiku about rain.",
    "List three fruits.",
    "Explain what a compiler does.",
    "Describe a cat in two sentences.",
]


def gauge(metrics: str, name: str) -> float:
    """Sum of every sample of ``name`` in a Prometheus text page."""
    pattern = re.compile(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", re.MULTILINE)
    return sum(float(v) for v in pattern.findall(metrics))


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def body(i: int, max_tokens: int) -> dict:
    return {
        "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
        "stream": True,
        "max_tokens": max_tokens,
        "temperature": 0.8,
        "seed": i,
    }


async def engine_idle(client: httpx.AsyncClient, base: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        metrics = (await client.get(base + "/metrics")).text
        busy = gauge(metrics, "m_serve_engine_requests") + gauge(
            metrics, "m_serve_kv_cache_blocks_used"
        )
        if busy == 0 or time.monotonic() > deadline:
            return metrics
        await asyncio.sleep(0.2)


def test_disconnect_storm_frees_every_block():
    rng = random.Random(1234)
    cuts = [rng.randint(0, 12) for _ in range(200)]
    with serve(EXAMPLES / "hello.py") as server:

        async def one(client: httpx.AsyncClient, i: int, cut: int) -> None:
            async with client.stream("POST", server.base_url + CHAT, json=body(i, 48)) as r:
                seen = 0
                async for line in r.aiter_lines():
                    if line.startswith("data:"):
                        seen += 1
                    if seen > cut:
                        break  # leaving the block drops the connection mid-stream

        async def storm() -> tuple[str, str, int, int]:
            limits = httpx.Limits(max_connections=16, max_keepalive_connections=0)
            async with httpx.AsyncClient(timeout=120, limits=limits) as client:
                await client.post(server.base_url + CHAT, json={**body(0, 8), "stream": False})
                before = await engine_idle(client, server.base_url)
                baseline = rss_bytes(server.process.pid)
                gate = asyncio.Semaphore(16)

                async def limited(i: int, cut: int) -> None:
                    async with gate:
                        await one(client, i, cut)

                await asyncio.gather(*(limited(i, c) for i, c in enumerate(cuts)))
                after = await engine_idle(client, server.base_url)
                peak = rss_bytes(server.process.pid)
                reply = await client.post(
                    server.base_url + CHAT, json={**body(1, 8), "stream": False}
                )
                assert reply.status_code == 200
                assert reply.json()["choices"][0]["message"]["content"]
                return before, after, baseline, peak

        before, after, baseline, final = asyncio.run(storm())
    total = gauge(after, "m_serve_kv_cache_blocks_used") + gauge(
        after, "m_serve_kv_cache_blocks_free"
    )
    assert gauge(after, "m_serve_kv_cache_blocks_used") == 0, "KV blocks leaked"
    assert gauge(after, "m_serve_engine_requests") == 0, "engine requests still alive"
    assert total == gauge(before, "m_serve_kv_cache_blocks_used") + gauge(
        before, "m_serve_kv_cache_blocks_free"
    )
    # The KV cache is allocated up front, so memory should stay flat; allow 15 % for
    # allocator noise.
    assert final <= baseline * 1.15, f"RSS grew from {baseline} to {final} bytes"
    _record(
        "disconnect_storm",
        {
            "requests": len(cuts),
            "kv_blocks_leaked": gauge(after, "m_serve_kv_cache_blocks_used"),
            "rss_baseline_mb": round(baseline / 2**20, 1),
            "rss_after_mb": round(final / 2**20, 1),
        },
    )


def test_64_concurrent_streams():
    clients, duration = 64, 20.0
    with serve(EXAMPLES / "hello.py") as server:

        async def client_loop(client: httpx.AsyncClient, k: int) -> list[tuple[float, bool]]:
            results = []
            stop_at = time.monotonic() + duration
            i = k
            while time.monotonic() < stop_at:
                started = time.monotonic()
                ttft = None
                payloads = []
                async with client.stream("POST", server.base_url + CHAT, json=body(i, 16)) as r:
                    assert r.status_code == 200
                    async for line in r.aiter_lines():
                        if not line.startswith("data:"):
                            continue
                        payload = line[5:].strip()
                        payloads.append(payload)
                        if ttft is None and payload != "[DONE]":
                            frame = json.loads(payload)
                            if frame["choices"] and frame["choices"][0]["delta"].get("content"):
                                ttft = time.monotonic() - started
                ok = payloads[-1:] == ["[DONE]"] and not any('"error"' in p for p in payloads)
                results.append((ttft if ttft is not None else time.monotonic() - started, ok))
                i += clients
            return results

        async def load():
            limits = httpx.Limits(max_connections=clients)
            async with httpx.AsyncClient(timeout=300, limits=limits) as client:
                return await asyncio.gather(*(client_loop(client, k) for k in range(clients)))

        started = time.monotonic()
        per_client = asyncio.run(load())
        elapsed = time.monotonic() - started
    results = [r for rs in per_client for r in rs]
    errors = sum(1 for _, ok in results if not ok)
    ttfts = sorted(t for t, _ in results)
    p99 = ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))]
    summary = {
        "clients": clients,
        "requests": len(results),
        "errors": errors,
        "seconds": round(elapsed, 1),
        "ttft_median_s": round(statistics.median(ttfts), 2),
        "ttft_p99_s": round(p99, 2),
    }
    _record("load_64_streams", summary)
    print(summary)
    assert errors == 0
    assert len(results) >= clients


def _record(name: str, data: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
