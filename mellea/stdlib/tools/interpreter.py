"""Running generated Python: execution environments per tier, and ``python_tool``.

``static`` parses and checks imports; ``local_unsafe`` runs a plain subprocess with
a timeout; ``local`` runs in our sandbox (:mod:`.sandbox`: time and memory limits,
no network, own directory); the docker tiers need the ``llm-sandbox`` package and a
Docker daemon, and say so when missing. Packages a tool asks for are installed into
a directory of its own (put on the child's PYTHONPATH), never into the running
environment.
"""

from __future__ import annotations

import ast
import mimetypes
import shutil
import subprocess
import sys
import tempfile
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mellea.stdlib.tools.execution_policy import (
    DOCKER_POLICY,
    LOCAL_POLICY,
    Artifact,
    CapabilityPolicy,
    ExecutionTier,
    check_tier,
)
from mellea.stdlib.tools.sandbox import SandboxRun, run_plain, run_sandboxed

DEFAULT_TIMEOUT = 30
LLM_SANDBOX_MISSING = (
    "the docker tiers need the 'llm-sandbox' package (`pip install llm-sandbox`) and a "
    "running Docker daemon; use tier='local' for our subprocess sandbox"
)


def _truncate(text: str | None, max_bytes: int | None) -> str | None:
    if text is None or max_bytes is None:
        return text
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode(errors="ignore") + f"\n[truncated to {max_bytes} bytes]"


@dataclass
class ExecutionResult:
    """The outcome of running (or checking) code.

    ``skipped`` means nothing ran (``skip_message`` says why, e.g. a refused import);
    otherwise ``success`` is an exit code of 0, and ``stdout`` / ``stderr`` (stripped)
    are set.
    """

    success: bool
    stdout: str | None
    stderr: str | None
    skipped: bool = False
    skip_message: str | None = None
    analysis_result: Any | None = None
    exit_code: int | None = None
    timed_out: bool = False
    artifacts: list[Artifact] = field(default_factory=list)
    execution_mode: str = "unknown"
    working_directory: str | None = None

    def to_validationresult_reason(self) -> str:
        """The skip message, else stdout on success, else stderr."""
        if self.skip_message:
            return self.skip_message
        return (self.stdout if self.success else self.stderr) or ""


def unauthorized_imports(code: str, allowed_imports: list[str]) -> list[str]:
    """The top-level modules ``code`` imports that are not in ``allowed_imports``."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    allowed = set(allowed_imports)
    found: list[str] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if top not in allowed and top not in found:
                found.append(top)
    return found


def _skipped(message: str, mode: str) -> ExecutionResult:
    return ExecutionResult(
        False, None, None, skipped=True, skip_message=message, execution_mode=mode
    )


class ExecutionEnvironment(ABC):
    """Where code runs: an import allowlist, a policy and a working directory."""

    def __init__(
        self,
        allowed_imports: list[str] | None = None,
        policy: CapabilityPolicy | None = None,
        working_directory: str | None = None,
    ) -> None:
        self.allowed_imports = allowed_imports
        self.policy = policy
        self.working_directory = working_directory

    @abstractmethod
    def execute(self, code: str, timeout: int | None = None) -> ExecutionResult:
        """Run (or check) ``code``; ``timeout`` overrides the policy's."""

    def _resolve_timeout(self, timeout: int | None, default: int = DEFAULT_TIMEOUT) -> int:
        if timeout is not None:
            return timeout
        return self.policy.timeout if self.policy is not None else default

    def _refused_imports(self, code: str, mode: str) -> ExecutionResult | None:
        if self.allowed_imports:
            bad = unauthorized_imports(code, self.allowed_imports)
            if bad:
                return _skipped(f"Unauthorized imports detected: {', '.join(bad)}", mode)
        return None

    def copy_in(self, host_path: Path, container_path: str) -> None:
        """Copy a file in (docker tiers only)."""
        raise NotImplementedError(f"{type(self).__name__} has no copy_in; use a docker tier")

    def copy_out(self, container_path: str, host_path: Path) -> None:
        """Copy a file out (docker tiers only)."""
        raise NotImplementedError(f"{type(self).__name__} has no copy_out; use a docker tier")


class StaticAnalysisEnvironment(ExecutionEnvironment):
    """Parses the code and checks its imports; never runs it."""

    def execute(self, code: str, timeout: int | None = None) -> ExecutionResult:
        """A skipped result: successful with the AST in ``analysis_result``, or the
        syntax error / refused imports."""
        del timeout
        try:
            tree = ast.parse(code)
        except SyntaxError as exc:
            result = _skipped("Parse failed.", "static")
            result.analysis_result = exc
            return result
        refused = self._refused_imports(code, "static")
        if refused is not None:
            return refused
        return ExecutionResult(
            True,
            None,
            None,
            skipped=True,
            skip_message="The code parses; static analysis does not run it "
            "(the AST is in analysis_result).",
            analysis_result=tree,
            execution_mode="static",
        )


class UnsafeEnvironment(ExecutionEnvironment):
    """Runs the code in a child Python process.

    ``tier="local_unsafe"``: a plain subprocess with a timeout. ``tier="local"``: our
    sandbox (memory cap, no network unless the policy allows it). Either way it runs
    in ``working_directory`` (default: a fresh temporary directory); files a
    successful run leaves there are its artifacts (when a directory was given).
    """

    def __init__(
        self,
        allowed_imports: list[str] | None = None,
        policy: CapabilityPolicy | None = None,
        working_directory: str | None = None,
        installed_packages: set[str] | None = None,
        failed_packages: set[str] | None = None,
        tier: str | None = None,
    ) -> None:
        super().__init__(allowed_imports, policy, working_directory)
        self._installed_packages = installed_packages if installed_packages is not None else set()
        self._failed_packages = failed_packages if failed_packages is not None else set()
        self._tier = tier or ("local" if policy is not None else "local_unsafe")
        self._site: str | None = None  # where this environment's packages go
        self.agg = True  # MPLBACKEND=Agg: plots go to files, never to a display

    def execute(self, code: str, timeout: int | None = None) -> ExecutionResult:
        """Run ``code``; a refused import or a failed package install skips it."""
        refused = self._refused_imports(code, self._tier)
        if refused is not None:
            return refused
        packages = self.policy.packages if self.policy is not None else []
        pending = [
            p
            for p in packages
            if p not in self._installed_packages and p not in self._failed_packages
        ]
        if pending:
            if self._install(pending):
                self._installed_packages.update(pending)
            else:
                self._failed_packages.update(pending)
                return _skipped(f"Package installation failed: {', '.join(pending)}", self._tier)
        return self._run(code, self._resolve_timeout(timeout))

    def _install(self, packages: list[str]) -> bool:
        for spec in packages:
            if not spec.strip() or spec.lstrip().startswith("-"):
                raise ValueError(f"not a package specifier: {spec!r}")
        if self._site is None:
            self._site = tempfile.mkdtemp(prefix="mellea-site-")
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--target", self._site, *packages],
            capture_output=True,
            timeout=600,
            check=False,
        )
        return done.returncode == 0

    def _run(self, code: str, timeout: int) -> ExecutionResult:
        own_dir = self.working_directory is None
        cwd = self.working_directory or tempfile.mkdtemp(prefix="mellea-python-")
        script = Path(tempfile.mkdtemp(prefix="mellea-code-")) / "main.py"
        script.write_text(code)
        env = {"MPLBACKEND": "Agg"} if self.agg else {}
        if self._site is not None:
            env["PYTHONPATH"] = self._site
        argv = [sys.executable, str(script)]
        try:
            if self._tier == "local":
                policy = self.policy or LOCAL_POLICY
                run: SandboxRun = run_sandboxed(
                    argv,
                    cwd=cwd,
                    timeout=timeout,
                    memory_mb=policy.memory_mb,
                    network=policy.network_access,
                    env=env,
                )
            else:
                run = run_plain(argv, cwd=cwd, timeout=timeout, env=env)
        finally:
            shutil.rmtree(script.parent, ignore_errors=True)
            if own_dir:
                shutil.rmtree(cwd, ignore_errors=True)
        if run.refused is not None:
            return _skipped(f"Not run: {run.refused}", self._tier)
        policy = self.policy
        stderr = run.stderr.strip()
        if run.timed_out:
            stderr = (stderr + f"\nExecution timed out after {timeout} seconds.").strip()
        result = ExecutionResult(
            success=run.returncode == 0 and not run.timed_out,
            stdout=_truncate(run.stdout.strip(), policy.stdout_max_bytes if policy else None),
            stderr=_truncate(stderr, policy.stderr_max_bytes if policy else None),
            exit_code=run.returncode,
            timed_out=run.timed_out,
            execution_mode=self._tier,
            working_directory=None if own_dir else cwd,
        )
        if result.success and not own_dir:
            result.artifacts = scan_artifacts(Path(cwd))
        return result


class LLMSandboxEnvironment(ExecutionEnvironment):
    """Runs code in a Docker container through the ``llm-sandbox`` package."""

    def __init__(
        self,
        allowed_imports: list[str] | None = None,
        policy: CapabilityPolicy | None = None,
        working_directory: str | None = None,
        tier: str = "docker",
        **kwargs: Any,
    ) -> None:
        super().__init__(allowed_imports, policy, working_directory)
        self._tier = tier
        self._options = kwargs

    def execute(self, code: str, timeout: int | None = None) -> ExecutionResult:
        """Run ``code`` in a fresh container (skipped, naming the package, without it)."""
        refused = self._refused_imports(code, self._tier)
        if refused is not None:
            return refused
        try:
            from llm_sandbox import SandboxSession  # type: ignore[import-not-found]
        except ImportError:
            return _skipped(LLM_SANDBOX_MISSING, self._tier)
        seconds = self._resolve_timeout(timeout)
        try:
            with SandboxSession(lang="python", **self._options) as session:
                packages = self.policy.packages if self.policy is not None else None
                out = session.run(code, libraries=packages or None, timeout=seconds)
        except Exception as exc:  # a missing daemon or image: the caller sees why
            return _skipped(f"Docker sandbox failed: {exc}", self._tier)
        code_ = getattr(out, "exit_code", 1)
        return ExecutionResult(
            success=code_ == 0,
            stdout=(getattr(out, "stdout", "") or "").strip(),
            stderr=(getattr(out, "stderr", "") or "").strip(),
            exit_code=code_,
            execution_mode=self._tier,
        )


def make_execution_environment(
    tier: ExecutionTier = "static",
    *,
    allowed_imports: list[str] | None = None,
    policy: CapabilityPolicy | None = None,
    working_directory: str | None = None,
    installed_packages: set[str] | None = None,
    failed_packages: set[str] | None = None,
) -> ExecutionEnvironment:
    """The environment for ``tier``: ``local`` and ``docker`` get their default policy
    when none is given; the unsafe tiers use a policy only when one is passed."""
    check_tier(tier)
    if tier == "static":
        return StaticAnalysisEnvironment(allowed_imports, policy, working_directory)
    if tier in ("local", "local_unsafe"):
        if tier == "local" and policy is None:
            policy = LOCAL_POLICY
        return UnsafeEnvironment(
            allowed_imports,
            policy,
            working_directory,
            installed_packages,
            failed_packages,
            tier=tier,
        )
    if tier == "docker" and policy is None:
        policy = DOCKER_POLICY
    return LLMSandboxEnvironment(allowed_imports, policy, working_directory, tier=tier)


def scan_artifacts(directory: Path) -> list[Artifact]:
    """The regular files under ``directory`` as artifacts (type guessed from the name)."""
    found = []
    for path in sorted(directory.rglob("*")):
        if path.is_file() and not path.is_symlink():
            kind = mimetypes.guess_type(path.name)[0]
            found.append(Artifact(path.resolve(), path.stat().st_size, kind))
    return found


def python_tool(
    tier: ExecutionTier | None = None,
    packages: list[str] | None = None,
    artifact_dir: Path | None = None,
    policy: CapabilityPolicy | None = None,
    allowed_imports: list[str] | None = None,
    name: str = "python",
    suppress_agg: bool = False,
) -> Any:
    """A tool (``MelleaTool`` named ``name``) that runs the model's Python code and
    returns an :class:`ExecutionResult`.

    ``tier=None`` means ``local_unsafe`` and warns, as upstream. ``packages`` are
    installed once for the tool (into its own directory). Files the code writes in
    ``artifact_dir`` (default: a directory per call, kept while it holds artifacts)
    come back as ``result.artifacts`` after a successful run. Matplotlib draws to files
    (``MPLBACKEND=Agg``) unless ``suppress_agg``.
    """
    from mellea.backends.tools import MelleaTool

    if tier is None:
        warnings.warn(
            "python_tool() without tier= runs model-written code unsandboxed "
            "(local_unsafe); pass tier='local' for the sandbox or tier='local_unsafe' "
            "to say this is intended",
            UserWarning,
            stacklevel=2,
        )
        tier = "local_unsafe"
    check_tier(tier)
    if packages:
        base = policy or (LOCAL_POLICY if tier != "docker" else DOCKER_POLICY)
        policy = replace(base, packages=list(packages))
    env = make_execution_environment(tier, allowed_imports=allowed_imports, policy=policy)
    if isinstance(env, UnsafeEnvironment):
        env.agg = not suppress_agg

    def run_python(code: str) -> ExecutionResult:
        """Run Python code and return its output.

        Args:
            code: The Python program to run.
        """
        if not isinstance(env, UnsafeEnvironment):
            return env.execute(code)
        own = artifact_dir is None
        directory = tempfile.mkdtemp(prefix="mellea-artifacts-") if own else str(artifact_dir)
        env.working_directory = directory  # one tool, one call at a time (as upstream)
        result = env.execute(code)
        if own and not result.artifacts:
            shutil.rmtree(directory, ignore_errors=True)
        return result

    return MelleaTool.from_callable(run_python, name)


def code_interpreter(code: str) -> ExecutionResult:
    """Run Python code in our sandbox (the ``local`` tier) and return its output.

    Args:
        code: The Python program to run.
    """
    return make_execution_environment("local").execute(code)


def local_code_interpreter(code: str) -> ExecutionResult:
    """Run Python code in a plain subprocess (``local_unsafe``) and return its output.

    Args:
        code: The Python program to run.
    """
    return make_execution_environment("local_unsafe").execute(code)


__all__ = [
    "ExecutionEnvironment",
    "ExecutionResult",
    "LLMSandboxEnvironment",
    "StaticAnalysisEnvironment",
    "UnsafeEnvironment",
    "code_interpreter",
    "local_code_interpreter",
    "make_execution_environment",
    "python_tool",
]
