"""Stored responses under load: SQLite file against PostgreSQL, 1 and 3 replicas behind nginx.

Each client loops over ``POST /v1/responses`` (stored, not streamed, the echo program
with no delay) then ``GET /v1/responses/{id}`` of what it created, through nginx (also
in front of a single replica, so every configuration pays the same proxy). Reported:
create+retrieve pairs per second and the p50/p99 latency of each call. PostgreSQL runs
on loopback from a fresh ``initdb`` with ``fsync`` on (commits wait for the disk), the
SQLite file in WAL mode in a temporary directory; every configuration starts empty.

    python benchmarks/bench_store.py                 # 16 clients, 10 s per configuration
    python benchmarks/bench_store.py --seconds 5 --replicas 1 3 --stores postgresql

Needs Debian's ``postgresql`` and ``nginx`` (``sh .ci/install-services.sh``). Results go
to ``benchmarks/results/store.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_engine import cpu_busy_fraction, wait_for_quiet  # noqa: E402
from tests.server import PROGRAMS, serve  # noqa: E402
from tests.services import Postgres, nginx, postgres  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
WARM_UP_SECONDS = 2.0


async def client_loop(
    client: httpx.AsyncClient, stop_at: float, record_from: float, out: dict[str, list[float]]
) -> None:
    """Create then retrieve, again and again; latencies after ``record_from`` are kept."""
    n = 0
    while (now := time.perf_counter()) < stop_at:
        n += 1
        reply = await client.post("/v1/responses", json={"input": f"hello store {n}"})
        created = time.perf_counter()
        reply.raise_for_status()
        stored = await client.get(f"/v1/responses/{reply.json()['id']}")
        done = time.perf_counter()
        stored.raise_for_status()
        if now >= record_from:
            out["create"].append(created - now)
            out["retrieve"].append(done - created)
            out["finished"].append(done)


async def load(base_url: str, clients: int, seconds: float) -> dict[str, float]:
    """``clients`` loops for ``seconds`` after a warm-up: pairs/s and latency percentiles."""
    out: dict[str, list[float]] = {"create": [], "retrieve": [], "finished": []}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60) as client:
        start = time.perf_counter()
        record_from = start + WARM_UP_SECONDS
        stop_at = record_from + seconds
        await asyncio.gather(
            *(client_loop(client, stop_at, record_from, out) for _ in range(clients))
        )
    pairs = sum(1 for t in out["finished"] if t <= stop_at)
    return {
        "pairs_per_s": pairs / seconds,
        **{f"{kind}_p50_ms": 1000 * percentile(out[kind], 50) for kind in ("create", "retrieve")},
        **{f"{kind}_p99_ms": 1000 * percentile(out[kind], 99) for kind in ("create", "retrieve")},
    }


def percentile(values: list[float], q: float) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def run_configuration(
    store: str, replicas: int, pg: Postgres | None, clients: int, seconds: float, n: int
) -> dict[str, float]:
    """Start ``replicas`` servers on a fresh store behind nginx and load them."""
    with ExitStack() as stack:
        if store == "postgresql":
            assert pg is not None
            location = pg.create_database(f"bench_{n}")
        else:
            directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-store-"))
            location = str(Path(directory) / "responses.db")
        args = ("--responses-db", location, "--log-level", "warning")
        starting = [
            serve(PROGRAMS / "echo.py", *args, env={"ECHO_DELAY": "0"}) for _ in range(replicas)
        ]
        with ThreadPoolExecutor(replicas) as pool:
            servers = list(pool.map(lambda cm: cm.__enter__(), starting))
        for cm in starting:
            stack.push(cm.__exit__)
        proxy = stack.enter_context(nginx([s.port for s in servers]))
        busy = wait_for_quiet(limit_s=20)
        result = asyncio.run(load(proxy.base_url, clients, seconds))
        return {**result, "cpu_busy_before": busy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--stores", nargs="+", default=["sqlite", "postgresql"])
    options = parser.parse_args()
    rows = []
    with ExitStack() as stack:
        pg = stack.enter_context(postgres(durable=True)) if "postgresql" in options.stores else None
        n = 0
        for store in options.stores:
            for replicas in options.replicas:
                n += 1
                result = run_configuration(store, replicas, pg, options.clients, options.seconds, n)
                rows.append({"store": store, "replicas": replicas, **result})
                print(
                    f"{store:10} x{replicas}: {result['pairs_per_s']:7.1f} pairs/s  "
                    f"create p50 {result['create_p50_ms']:6.1f} p99 {result['create_p99_ms']:6.1f} ms  "
                    f"retrieve p50 {result['retrieve_p50_ms']:6.1f} p99 {result['retrieve_p99_ms']:6.1f} ms  "
                    f"(cpu busy before {result['cpu_busy_before']:.2f})",
                    flush=True,
                )
    for store in options.stores:
        rates = {r["replicas"]: r["pairs_per_s"] for r in rows if r["store"] == store}
        if 1 in rates and len(rates) > 1:
            top = max(rates)
            print(f"{store}: {top} replicas / 1 replica = {rates[top] / rates[1]:.2f}x")
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {"machine": platform.node(), "cpus": _cpus(), "clients": options.clients}
    (RESULTS / "store.json").write_text(json.dumps({**meta, "rows": rows}, indent=2))


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    cpu_busy_fraction()  # the first reading primes the counters
    main()
