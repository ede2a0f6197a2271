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
        busy = wait_for_quiet(limit_s=5)
        result = asyncio.run(load(proxy.base_url, clients, seconds))
        return {**result, "cpu_busy_before": busy}


def store_only(location: str, threads: int, seconds: float) -> float:
    """The store alone, no HTTP: create (in progress), finish and get per second from
    ``threads`` threads, what a server's requests ask of it."""
    from mellea.serve.responses import StoredResponse, open_store

    store = open_store(location)
    stop_at = time.perf_counter() + seconds
    counts = [0] * threads

    def work(t: int) -> None:
        while time.perf_counter() < stop_at:
            rid = f"resp_{t}_{counts[t]}"
            response = {"id": rid, "status": "in_progress", "created_at": time.time()}
            store.create(StoredResponse(response, [{"id": f"msg_{rid}", "text": "hello"}]))
            store.finish({**response, "status": "completed", "output": [{"text": "hello"}]})
            assert store.get(rid) is not None
            counts[t] += 1

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))
    store.close()
    return sum(counts) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--stores", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument(
        "--rounds", type=int, default=2, help="runs of every configuration, interleaved; best kept"
    )
    options = parser.parse_args()
    rows: dict[tuple[str, int], dict[str, float]] = {}
    alone: dict[str, float] = {}
    with ExitStack() as stack:
        pg = stack.enter_context(postgres(durable=True)) if "postgresql" in options.stores else None
        n = 0
        for _ in range(options.rounds):
            for store in options.stores:
                for replicas in options.replicas:
                    n += 1
                    result = run_configuration(
                        store, replicas, pg, options.clients, options.seconds, n
                    )
                    print(f"{store:10} x{replicas}: {_line(result)}", flush=True)
                    best = rows.get((store, replicas))
                    if best is None or result["pairs_per_s"] > best["pairs_per_s"]:
                        rows[(store, replicas)] = result
        for store in options.stores:
            n += 1
            with tempfile.TemporaryDirectory(prefix="bench-store-") as directory:
                location = (
                    pg.create_database(f"bench_{n}")
                    if store == "postgresql" and pg is not None
                    else str(Path(directory) / "responses.db")
                )
                alone[store] = store_only(location, options.clients, options.seconds / 2)
    print("\nbest of the rounds:")
    for (store, replicas), result in rows.items():
        print(f"{store:10} x{replicas}: {_line(result)}")
    for store in options.stores:
        rates = {r: v["pairs_per_s"] for (s, r), v in rows.items() if s == store}
        if 1 in rates and len(rates) > 1:
            top = max(rates)
            print(f"{store}: {top} replicas / 1 replica = {rates[top] / rates[1]:.2f}x")
        print(f"{store}: the store alone, {options.clients} threads: {alone[store]:.0f} pairs/s")
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {"machine": platform.node(), "cpus": _cpus(), "clients": options.clients}
    table = [{"store": s, "replicas": r, **v} for (s, r), v in rows.items()]
    (RESULTS / "store.json").write_text(
        json.dumps({**meta, "rows": table, "store_alone_pairs_per_s": alone}, indent=2)
    )


def _line(result: dict[str, float]) -> str:
    return (
        f"{result['pairs_per_s']:7.1f} pairs/s  create p50 {result['create_p50_ms']:6.1f} "
        f"p99 {result['create_p99_ms']:6.1f} ms  retrieve p50 {result['retrieve_p50_ms']:6.1f} "
        f"p99 {result['retrieve_p99_ms']:6.1f} ms  (cpu busy before {result['cpu_busy_before']:.2f})"
    )


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    cpu_busy_fraction()  # the first reading primes the counters
    main()
