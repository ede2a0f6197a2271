"""Run a command in a sandboxed child process (ours; the ``local`` tier's engine).

What it guarantees, on Linux:

- a wall-clock ``timeout``: the whole process group is killed when it runs out
  (and RLIMIT_CPU stops a process that spins past it);
- a memory cap: RLIMIT_AS of ``memory_mb`` on the child's address space;
- a file-size cap (RLIMIT_FSIZE) and no core dumps;
- no network, when ``network=False``: the child runs in fresh user and network
  namespaces (``unshare -rn``), which hold only a loopback device that is down. If
  those namespaces cannot be made here, the run is refused rather than run with
  network (``network_isolation_available()`` says which);
- its own working directory (a fresh temporary one unless given), and an
  environment holding only PATH, HOME (that directory), LANG and what ``env`` adds.

It does not hide the rest of the file system: the child can read what the user can.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass

DEFAULT_MEMORY_MB = 1024
DEFAULT_FILE_MB = 256


@dataclass
class SandboxRun:
    """What a sandboxed command did."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    refused: str | None = None  # why it was not run at all


@functools.cache
def network_isolation_available() -> bool:
    """Whether a child can be put in its own network namespace here."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        done = subprocess.run(
            [unshare, "-rn", "true"], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _limits(memory_mb: int | None, cpu_seconds: int, file_mb: int) -> None:
    """Set in the child before it runs the command."""
    import resource

    if memory_mb is not None:
        size = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb * 2**20, file_mb * 2**20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_sandboxed(
    argv: list[str],
    *,
    cwd: str | None = None,
    timeout: float = 30,
    memory_mb: int | None = DEFAULT_MEMORY_MB,
    network: bool = False,
    env: dict[str, str] | None = None,
    file_mb: int = DEFAULT_FILE_MB,
) -> SandboxRun:
    """Run ``argv`` under the limits above; ``cwd=None`` runs it in a temporary
    directory that is removed afterwards."""
    if not network and not network_isolation_available():
        return SandboxRun(
            None, "", "", refused="network isolation (unshare -rn) is not available here"
        )
    scratch = None
    if cwd is None:
        scratch = tempfile.mkdtemp(prefix="mellea-sandbox-")
        cwd = scratch
    child_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": cwd,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    child_env.update(env or {})
    command = list(argv) if network else ["unshare", "-rn", *argv]
    try:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=functools.partial(_limits, memory_mb, int(timeout) + 1, file_mb),
        )
        return _wait(proc, timeout)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def run_plain(
    argv: list[str],
    *,
    cwd: str | None = None,
    timeout: float = 30,
    env: dict[str, str] | None = None,
) -> SandboxRun:
    """Run ``argv`` with only a timeout (the unsafe tiers): the caller's environment,
    network and file system."""
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return SandboxRun(127, "", str(exc))
    return _wait(proc, timeout)


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> SandboxRun:
    """Collect ``proc``'s output; past ``timeout`` its whole process group is killed."""
    try:
        out, err = proc.communicate(timeout=timeout)
        return SandboxRun(proc.returncode, _text(out), _text(err))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return SandboxRun(proc.returncode, _text(out), _text(err), timed_out=True)


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")
