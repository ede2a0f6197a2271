"""Start a real ``m serve`` subprocess on a free loopback port, for end-to-end tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = Path(__file__).resolve().parent / "programs"
EXAMPLES = ROOT / "docs" / "examples"


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """A running ``m serve``: its base URL, process, and captured log."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
        self.process = process
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.log_path = log_path

    @property
    def log(self) -> str:
        """Everything the server wrote to stdout and stderr so far."""
        return self.log_path.read_text(errors="replace")


@contextmanager
def serve(
    program: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 240.0,
    log_dir: Path | None = None,
) -> Iterator[Server]:
    """Run ``m serve PROGRAM`` until the block ends; waits for ``/health``."""
    port = free_port()
    log_dir = log_dir or Path(os.environ.get("TMPDIR", "/tmp"))
    log_path = log_dir / f"m-serve-{port}.log"
    command = [sys.executable, "-m", "cli.main", "serve", str(program), "--port", str(port), *args]
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    server = Server(process, port, log_path)
    try:
        _wait_ready(server, timeout)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"m serve exited with {server.process.returncode}:\n{server.log}")
        try:
            if httpx.get(f"{server.base_url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"m serve did not become healthy in {timeout} s:\n{server.log}")


def sse_events(lines: Iterator[str]) -> Iterator[str]:
    """The ``data:`` payloads of a raw SSE stream, in order (comments skipped)."""
    for line in lines:
        if line.startswith("data:"):
            yield line[5:].strip()
