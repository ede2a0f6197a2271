"""One stream on one GGUF: llama-server, this checkout's ``m serve`` and optionally another
checkout's, each request in turn so that all of them see the same machine.

```sh
python benchmarks/one_stream_ab.py                       # the 1.7B-shaped Q4_K_M file
python benchmarks/one_stream_ab.py --base /tmp/old-checkout --isa avx2 --rounds 8
```

A 32-token request takes about 2 s, so on a shared machine one request per server (as
``bench_large.py --streams 1`` measures) swings with the neighbours; here the servers
run side by side, idle while another answers, and each gets ``--rounds`` requests
(the order reversed every round). ``--base`` is another checkout (e.g. ``git archive``
of an older commit, with its built kernels in ``mellea/engine/_cpu_ext`` and a
``.venv``), to compare before and after. Per server: the first request's rate (what
``bench_large.py`` reports), the median rate, TTFT and time per decoded token.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import httpx
from bench_peers import PEERS, chat_body, free_port, llama_server_binary, wait_healthy

ROOT = Path(__file__).resolve().parent.parent
FILE = PEERS / "large" / "smollm2-1.7b-shape-24l-Q4_K_M.gguf"
AVX2_ENV = {"MELLEA_CPU_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
LOGS = PEERS / "logs"


def start(name: str, command: list[str], cwd: Path, env: dict[str, str]) -> tuple:
    """A server process on a free port, its log in ``benchmarks/peers/logs``."""
    port = free_port()
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"ab-{name}.log"
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*command, "--port", str(port)],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**base, **env},
        )
    return process, f"http://127.0.0.1:{port}", log


def stream(url: str, i: int, tokens: int) -> tuple[float, float]:
    """(TTFT, total seconds) of one streamed greedy chat request."""
    started, first = time.perf_counter(), None
    body = chat_body(i, tokens, {})
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as reply:
        for line in reply.iter_lines():
            if not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            choices = json.loads(line[5:]).get("choices") or []
            if first is None and choices and (choices[0].get("delta") or {}).get("content"):
                first = time.perf_counter() - started
    total = time.perf_counter() - started
    return (first if first is not None else total), total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", type=Path, default=FILE)
    parser.add_argument("--base", type=Path, help="another checkout to serve beside this one")
    parser.add_argument("--isa", choices=("native", "avx2"), default="native")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    ours_env = AVX2_ENV if args.isa == "avx2" else {}
    llama = str(llama_server_binary(False, args.isa))
    llama_args = ["-m", str(args.gguf), "--host", "127.0.0.1", "-t", "2", "-tb", "2"]
    llama_args += ["--parallel", "32", "-c", "16384", "--cont-batching", "--no-webui"]
    roots = {"ours": ROOT, **({"ours-base": args.base.resolve()} if args.base else {})}
    servers: dict[str, tuple] = {}
    try:  # the servers started so far stop, also when a later one cannot start
        servers["llama"] = start("llama", [llama, *llama_args], PEERS, {})
        for name, root in roots.items():
            serve = [str(root / ".venv/bin/python"), "-m", "cli.main", "serve"]
            serve += ["docs/examples/hello.py", "--no-playground", "--model", str(args.gguf)]
            servers[name] = start(name, serve, root, {"PYTHONPATH": str(root), **ours_env})
        for process, url, log in servers.values():
            wait_healthy(process, url, log, 600)
        for _, url, _ in servers.values():
            stream(url, 10_000, 4)  # a warm-up, as bench_peers.py does
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in servers}
        names = list(servers)
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                results[name].append(stream(servers[name][1], 1000 + r, args.tokens))
        print(f"{args.gguf.name}, {args.isa}, {args.rounds} rounds, load {os.getloadavg()}")
        rates = {n: [args.tokens / t for _, t in rows] for n, rows in results.items()}
        for name, rows in results.items():
            per_token = statistics.median((t - f) / (args.tokens - 1) for f, t in rows)
            print(
                f"{name:10s} first {rates[name][0]:6.2f} tok/s, median "
                f"{statistics.median(rates[name]):6.2f} tok/s, TTFT median "
                f"{statistics.median(f for f, _ in rows) * 1e3:5.0f} ms, per decoded token "
                f"{per_token * 1e3:5.1f} ms"
            )
        llama_rate = statistics.median(rates["llama"])
        for name in roots:
            print(
                f"{name} / llama (median tok/s): {statistics.median(rates[name]) / llama_rate:.3f}"
            )
    finally:
        for process, _, _ in servers.values():
            process.terminate()
        for process, _, _ in servers.values():
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


if __name__ == "__main__":
    main()
