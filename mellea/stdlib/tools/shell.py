"""``bash_executor``: run one command (argv style, no shell syntax) in our sandbox.

A command is split with shell quoting rules and run directly, never through a
shell, so pipes, redirects, ``;``, ``&&``, substitutions and the like are refused.
A deny list refuses privilege changes (sudo, su, ...), destructive forms (``rm -r`` / ``rm -rf``,
``git push --force``, ``git reset --hard``, ``mkfs``, ``dd``, ...), interactive or
nested shells, and writes outside ``working_dir``, ``/tmp`` and ``allowed_paths``
(and always under /etc, /sys, /proc, /dev, /boot, /usr, /bin, /sbin, /lib).
What passes runs in the sandbox of :mod:`.sandbox`: a timeout, a memory cap, no
network, in ``working_dir`` (default: a fresh temporary directory, ours; upstream
runs in the current directory).
"""

from __future__ import annotations

import os
import shlex
from abc import ABC, abstractmethod
from pathlib import Path

from mellea.stdlib.tools.interpreter import ExecutionResult, _truncate
from mellea.stdlib.tools.sandbox import run_sandboxed

MAX_OUTPUT_SIZE = 64 * 1024
DEFAULT_TIMEOUT = 30

_SHELL_SYNTAX = ("|", ">", "<", ";", "&", "`", "$(", "${", "\n")
_PRIVILEGE = {"sudo", "su", "doas", "pkexec", "chroot", "nsenter", "unshare"}
_SHELLS = {"bash", "sh", "zsh", "dash", "fish", "ksh", "csh", "tcsh"}
_NEVER = {"mkfs", "dd", "shutdown", "reboot", "halt", "poweroff", "kill", "killall", "pkill"}
_WRITERS = {"touch", "mkdir", "rm", "rmdir", "mv", "cp", "tee", "chmod", "chown", "ln", "truncate"}
_SYSTEM_ROOTS = (
    "/etc",
    "/sys",
    "/proc",
    "/dev",
    "/boot",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/var",
    "/root",
)


def _refusal(argv: list[str], working_dir: str | None, allowed_paths: list[str]) -> str | None:
    """Why ``argv`` may not run, or ``None``."""
    if not argv:
        return "empty command"
    program = os.path.basename(argv[0])
    flags = {a for a in argv[1:] if a.startswith("-")}
    if program in _PRIVILEGE:
        return f"privilege escalation ({program}) is not allowed"
    if program in _SHELLS:
        return f"nested or interactive shells ({program}) are not allowed"
    if program in _NEVER or program.startswith("mkfs"):
        return f"{program} is not allowed"
    short = "".join(f[1:] for f in flags if not f.startswith("--"))
    recursive = "r" in short.lower() or "--recursive" in flags
    if program == "rm" and recursive:
        return "recursive delete (rm -r, rm -rf) is not allowed"
    if program == "git" and len(argv) > 1:
        sub = argv[1]
        if sub == "push" and ({"-f", "--force", "--force-with-lease"} & flags):
            return "git push --force is not allowed"
        if sub == "reset" and "--hard" in flags:
            return "git reset --hard is not allowed"
        if sub == "clean" and any("f" in f for f in flags):
            return "git clean -f is not allowed"
    if program in ("python", "python3") and ("-i" in flags or len(argv) == 1):
        return "interactive interpreters are not allowed"
    if program in _WRITERS:
        roots = [str(Path(p).resolve()) for p in [*(allowed_paths or []), "/tmp"]]
        base = Path(working_dir).resolve() if working_dir else None
        if base is not None:
            roots.append(str(base))
        for arg in argv[1:]:
            if arg.startswith("-"):
                continue
            path = Path(arg) if os.path.isabs(arg) else (base or Path.cwd()) / arg
            target = str(path.resolve())
            if any(target == r or target.startswith(r.rstrip("/") + "/") for r in _SYSTEM_ROOTS):
                return f"writing to system path {arg} is not allowed"
            inside = any(target == r or target.startswith(r.rstrip("/") + "/") for r in roots)
            if (base is not None or allowed_paths) and not inside:
                return f"writing to {arg} is outside the working directory and allowed paths"
    return None


class BashEnvironment(ABC):
    """Runs one argv-style command (upstream's base class)."""

    def __init__(
        self,
        working_dir: str | None = None,
        allowed_paths: list[str] | None = None,
        timeout: int = DEFAULT_TIMEOUT,
        max_output_size: int = MAX_OUTPUT_SIZE,
    ) -> None:
        self.working_dir = working_dir
        self.allowed_paths = list(allowed_paths or [])
        self.timeout = timeout
        self.max_output_size = max_output_size

    def check(self, command: str) -> tuple[list[str] | None, str | None]:
        """The argv to run, or why the command is refused."""
        if any(token in command for token in _SHELL_SYNTAX):
            return None, "shell operators (pipes, redirects, ;, &&, substitutions) are not allowed"
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            return None, f"cannot parse the command: {exc}"
        why = _refusal(argv, self.working_dir, self.allowed_paths)
        return (None, why) if why else (argv, None)

    @abstractmethod
    def execute(self, command: str) -> ExecutionResult:
        """Run (or check) ``command``."""


class StaticBashEnvironment(BashEnvironment):
    """Checks a command against the rules without running it."""

    def execute(self, command: str) -> ExecutionResult:
        """A skipped result: successful when the command would be allowed."""
        argv, why = self.check(command)
        if why is not None:
            return ExecutionResult(
                False, None, None, skipped=True, skip_message=why, execution_mode="static"
            )
        return ExecutionResult(
            True,
            None,
            None,
            skipped=True,
            skip_message="The command is allowed; not run.",
            analysis_result=argv,
            execution_mode="static",
        )


class SandboxedBashEnvironment(BashEnvironment):
    """Runs an allowed command in the sandbox (ours)."""

    def execute(self, command: str) -> ExecutionResult:
        """Run ``command``; refused commands come back skipped with the reason."""
        argv, why = self.check(command)
        if why is not None:
            return ExecutionResult(
                False, None, None, skipped=True, skip_message=why, execution_mode="local"
            )
        assert argv is not None
        run = run_sandboxed(argv, cwd=self.working_dir, timeout=self.timeout)
        if run.refused is not None:
            return ExecutionResult(
                False, None, None, skipped=True, skip_message=run.refused, execution_mode="local"
            )
        stderr = run.stderr.strip()
        if run.timed_out:
            stderr = (stderr + f"\nCommand timed out after {self.timeout} seconds.").strip()
        return ExecutionResult(
            success=run.returncode == 0 and not run.timed_out,
            stdout=_truncate(run.stdout.strip(), self.max_output_size),
            stderr=_truncate(stderr, self.max_output_size),
            exit_code=run.returncode,
            timed_out=run.timed_out,
            execution_mode="local",
            working_directory=self.working_dir,
        )


def bash_executor(
    command: str,
    working_dir: str | None = None,
    allowed_paths: list[str] | None = None,
    timeout: int = DEFAULT_TIMEOUT,
) -> ExecutionResult:
    """Run one shell command (no pipes, redirects or shell operators) and return its output.

    Args:
        command: The command and its arguments, e.g. "ls -la".
        working_dir: The directory to run in; writes are limited to it, /tmp and allowed_paths.
        allowed_paths: More directories the command may write to.
        timeout: Seconds before the command is stopped.
    """
    env = SandboxedBashEnvironment(working_dir, allowed_paths, timeout)
    try:
        return env.execute(command)
    except FileNotFoundError as exc:  # pragma: no cover - Popen of a missing program
        return ExecutionResult(False, "", str(exc), exit_code=127, execution_mode="local")


__all__ = ["BashEnvironment", "StaticBashEnvironment", "bash_executor"]
