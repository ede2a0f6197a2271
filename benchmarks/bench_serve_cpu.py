"""Server CPU per chat request, no model and no sockets: the app driven by raw ASGI
messages, for one or more source trees side by side.

    python benchmarks/bench_serve_cpu.py . /tmp/serve-before --rounds 6

Each tree serves ``benchmarks/programs_peers/fixed_text.py`` (a fixed reply), in a
process of its own with that tree first on ``PYTHONPATH``; rounds alternate the trees.
A round times 5 runs of 200 streamed and 200 whole chat completions (``process_time``,
after 50 of each to warm up). Prints the median ms of CPU per request for each tree and
mode, and each tree's ratio to the first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MODES = ("stream", "whole")


def _body(stream: bool) -> bytes:
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return json.dumps({**request, "max_tokens": 64}).encode()


async def _one(app: Any, data: bytes) -> None:
    """One request through the app, its reply read and dropped."""
    sent: list[dict[str, Any]] = []
    given = False
    done = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": data, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    path = b"/v1/chat/completions"
    headers = [(b"host", b"localhost"), (b"content-type", b"application/json")]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path.decode(),
        "raw_path": path,
        "query_string": b"",
        "root_path": "",
        "headers": [*headers, (b"content-length", str(len(data)).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    done.set()
    if sent[0].get("status") != 200:
        raise RuntimeError(f"the server answered {sent[:2]}")


async def _measure(tree: Path, requests: int, runs: int) -> dict[str, list[float]]:
    from tests.inprocess import app_for  # the tree's own, from its PYTHONPATH

    app = app_for(tree / "benchmarks/programs_peers/fixed_text.py")
    bodies = {mode: _body(mode == "stream") for mode in MODES}
    out: dict[str, list[float]] = {mode: [] for mode in MODES}
    async with app.router.lifespan_context(app):
        for data in bodies.values():
            for _ in range(50):
                await _one(app, data)
        for _ in range(runs):
            for mode, data in bodies.items():
                started = time.process_time()
                for _ in range(requests):
                    await _one(app, data)
                out[mode].append(1000 * (time.process_time() - started) / requests)
    return out


def _round(tree: Path) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, __file__, "--child", str(tree)]
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    """Measure each tree, alternating, and print the medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", type=Path, help="source trees (the first: baseline)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.trees]
    if args.child:
        sys.path.insert(0, str(trees[0]))
        print(json.dumps(asyncio.run(_measure(trees[0], 200, 5))))
        return
    runs: dict[Path, dict[str, list[float]]] = {tree: {m: [] for m in MODES} for tree in trees}
    for index in range(args.rounds):
        for tree in trees if index % 2 == 0 else trees[::-1]:
            for mode, values in _round(tree).items():
                runs[tree][mode] += values
    for mode in MODES:
        base = statistics.median(runs[trees[0]][mode])
        for tree in trees:
            median = statistics.median(runs[tree][mode])
            print(f"{mode:6} {tree}: median {median:.4f} ms CPU/request, {median / base:.3f}x")


if __name__ == "__main__":
    main()
