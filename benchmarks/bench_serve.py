"""Throughput through `m serve`: the batching engine against one generate() per request.

Starts `m serve` twice in one run: `docs/examples/hello.py` on the engine, and
`benchmarks/naive_hello.py`, the same program on the naive baseline, and streams greedy 64-token replies
(`ignore_eos`) over HTTP at several concurrency levels. Writes
`benchmarks/results/serve.json` and, with the engine benchmark's results from
`benchmarks/results/engine.json` (run `bench_engine.py` first), the plot
`docs/throughput.png`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_engine import TOPICS, wait_for_quiet  # noqa: E402
from tests.server import EXAMPLES, serve  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PLOT = ROOT / "docs" / "throughput.png"


async def stream_one(
    client: httpx.AsyncClient, url: str, i: int, max_tokens: int
) -> tuple[float, int]:
    """One streamed request: (time to first content, completion tokens)."""
    body = {
        "messages": [
            {"role": "system", "content": f"Session {i}. You are a helpful assistant."},
            {"role": "user", "content": f"Explain {TOPICS[i % len(TOPICS)]} in detail."},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    started, first, tokens = time.perf_counter(), None, 0
    async with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            frame = json.loads(line[5:])
            if first is None and frame["choices"] and frame["choices"][0]["delta"].get("content"):
                first = time.perf_counter() - started
            if frame.get("usage"):
                tokens = frame["usage"]["completion_tokens"]
    return first or time.perf_counter() - started, tokens


async def level(
    base_url: str, concurrency: int, per_client: int, max_tokens: int, offset: int
) -> dict:
    """``concurrency`` clients, each streaming ``per_client`` requests one after another."""
    url = base_url + "/v1/chat/completions"
    ttfts: list[float] = []
    total = 0

    async def client_loop(client: httpx.AsyncClient, k: int) -> None:
        nonlocal total
        for j in range(per_client):
            ttft, tokens = await stream_one(client, url, offset + k * per_client + j, max_tokens)
            ttfts.append(ttft)
            total += tokens

    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        await stream_one(client, url, 10_000 + offset, 4)  # warm-up
        started = time.perf_counter()
        await asyncio.gather(*(client_loop(client, k) for k in range(concurrency)))
        wall = time.perf_counter() - started
    return {
        "concurrency": concurrency,
        "requests": concurrency * per_client,
        "completion_tokens": total,
        "tokens_per_s": round(total / wall, 2),
        "ttft_median_s": round(statistics.median(ttfts), 3),
    }


NAIVE_PROGRAM = ROOT / "benchmarks" / "naive_hello.py"


def run_system(
    name: str, program: Path, levels: list[int], per_client: int, max_tokens: int
) -> list[dict]:
    """Serve ``program`` and measure every level."""
    results = []
    # float32 like the naive baseline and bench_engine.py: the comparison is of
    # serving, not of weight formats (those: bench_dtypes.py).
    with serve(program, "--no-playground", "--dtype", "float32") as server:
        for i, conc in enumerate(levels):
            wait_for_quiet()
            row = asyncio.run(level(server.base_url, conc, per_client, max_tokens, 1000 * i))
            row["system"] = name
            print(f"  {name}@{conc}: {row['tokens_per_s']} tok/s, TTFT {row['ttft_median_s']} s")
            results.append(row)
    return results


def plot(
    serve_rows: list[dict], engine_doc: dict | None, path: Path, machine: str, max_tokens: int
) -> None:
    """Tokens/s against concurrency for every system measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, dict[int, float]] = {}
    for row in serve_rows:
        series.setdefault(f"m serve + {row['system']}", {})[row["concurrency"]] = row[
            "tokens_per_s"
        ]
    if engine_doc:
        for row in engine_doc.get("runs", []):
            label = {"engine": "engine (direct)", "naive": "naive generate() (direct)"}.get(
                row["name"]
            )
            if label:
                series.setdefault(label, {})[row["concurrency"]] = row["tokens_per_s"]
        for row in engine_doc.get("bare", []):
            key = f"bare batched loop ({row['name']})"
            series.setdefault(key, {})[row["batch"]] = row["tokens_per_s"]
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, points in sorted(series.items()):
        xs = sorted(points)
        style = "--" if label.startswith("bare") else "-"
        ax.plot(xs, [points[x] for x in xs], style, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent streams (bare loop: batch size)")
    ax.set_ylabel("output tokens / s (aggregate)")
    ax.set_title(f"SmolLM2-135M-Instruct, fp32, greedy {max_tokens} tokens per request\n{machine}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> None:
    """Measure both systems through m serve, save the numbers and the plot."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="16 tokens, fewer levels")
    parser.add_argument("--plot-only", action="store_true", help="redraw from saved results")
    args = parser.parse_args()
    max_tokens = 16 if args.quick else 64
    machine = f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}"
    out = RESULTS / "serve.json"
    if args.plot_only:
        saved = json.loads(out.read_text())
        rows, max_tokens = saved["rows"], saved["max_tokens"]
    else:
        rows = run_system(
            "engine", EXAMPLES / "hello.py", [1, 8] if args.quick else [1, 8, 32], 2, max_tokens
        )
        rows += run_system("naive", NAIVE_PROGRAM, [1, 8], 1 if args.quick else 2, max_tokens)
        by = {(r["system"], r["concurrency"]): r for r in rows}
        ratio = by["engine", 8]["tokens_per_s"] / by["naive", 8]["tokens_per_s"]
        print(f"m serve, engine@8 / naive@8: {ratio:.2f}x")
        RESULTS.mkdir(parents=True, exist_ok=True)
        out.write_text(
            json.dumps(
                {
                    "machine": machine,
                    "max_tokens": max_tokens,
                    "rows": rows,
                    "engine8_over_naive8": round(ratio, 2),
                },
                indent=2,
            )
        )
    engine_json = RESULTS / "engine.json"
    engine_doc = json.loads(engine_json.read_text()) if engine_json.exists() else None
    plot(rows, engine_doc, PLOT, machine, max_tokens)


if __name__ == "__main__":
    main()
