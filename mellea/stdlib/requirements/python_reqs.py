"""Requirements that find the Python code in a model's answer and run it."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from typing import Any

from mellea.core.base import Context
from mellea.core.requirement import Requirement, ValidationResult
from mellea.stdlib.tools.execution_policy import (
    DOCKER_POLICY,
    LOCAL_POLICY,
    CapabilityPolicy,
    ExecutionTier,
)
from mellea.stdlib.tools.interpreter import ExecutionEnvironment, make_execution_environment

log = logging.getLogger("mellea")

_FENCED_PYTHON = re.compile(r"```?python\s*\n(.*?)\n```?", re.DOTALL)
_FENCED = re.compile(r"```?\s*\n(.*?)\n```?", re.DOTALL)
_PYTHON_HINTS = ("def ", "class ", "import ", "print(", "if __name__")
_CODE_FIELDS = ("code", "script", "source", "command", "query", "program")


def _score_code_block(code: str) -> int:
    """How likely a block is the answer's main program: longer (up to 10 lines),
    with a def/class (+5) and control flow (+3); fewer than two real lines, -5."""
    lines = code.split("\n")
    score = min(len(lines), 10)
    if "def " in code or "class " in code:
        score += 5
    if any(k in code for k in ("if ", "for ", "while ", "try:", "with ")):
        score += 3
    real = [
        line
        for line in lines
        if line.strip() and not line.strip().startswith(("#", "import ", "from "))
    ]
    if len(real) < 2:
        score -= 5
    return score


def _extract_code_from_tool_call(tool_call: Any) -> str | None:
    """The code a tool call carries: the first string argument named like code."""
    args = getattr(tool_call, "args", None) or {}
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return args or None
    for name in _CODE_FIELDS:
        value = args.get(name)
        if isinstance(value, str) and value.strip():
            return value
    strings = [v for v in args.values() if isinstance(v, str) and "\n" in v]
    return strings[0] if strings else None


def _has_python_code_listing(ctx: Context) -> ValidationResult:
    """The best Python block of the last output (its ``reason`` is the code).

    Fenced ``python`` blocks score highest, then plain fenced blocks that look like
    Python; with no code in the text, a tool call's code argument is used.
    """
    output = ctx.last_output()
    if output is None:
        return ValidationResult(False, reason="No output found in context")
    blocks: list[tuple[str, int]] = []
    text = output.value or ""
    for block in _FENCED_PYTHON.findall(text):
        blocks.append((block.strip(), _score_code_block(block.strip()) + 10))
    for block in _FENCED.findall(text):
        block = block.strip()
        if block and any(h in block for h in _PYTHON_HINTS):
            blocks.append((block, _score_code_block(block)))
    if not blocks:
        for call in output.tool_calls or []:
            code = _extract_code_from_tool_call(call)
            if code:
                blocks.append((code, _score_code_block(code) + 5))
    if not blocks:
        return ValidationResult(False, reason="No Python code blocks found")
    return ValidationResult(True, reason=max(blocks, key=lambda b: b[1])[0])


def _python_executes_without_error(
    ctx: Context, environment: ExecutionEnvironment, max_output_chars: int | None = None
) -> ValidationResult:
    """Run the answer's code in ``environment``; fails on an error or too much output."""
    found = _has_python_code_listing(ctx)
    if not found.as_bool():
        return ValidationResult(False, reason=f"Could not extract Python code: {found.reason}")
    result = environment.execute(found.reason or "")
    if not result.success:
        return ValidationResult(False, reason=result.to_validationresult_reason())
    size = len(result.stdout or "")
    if max_output_chars is not None and size > max_output_chars:
        return ValidationResult(
            False, reason=f"Output size ({size} chars) exceeds limit ({max_output_chars})."
        )
    return ValidationResult(True, reason=result.to_validationresult_reason())


def _tier_label(tier: str, policy: CapabilityPolicy | None) -> str:
    if tier == "static":
        return "validation only"
    default = DOCKER_POLICY if tier.startswith("docker") else LOCAL_POLICY
    seconds = policy.timeout if policy is not None else default.timeout
    where = "sandbox" if tier.startswith("docker") else "local"
    rules = "with policy" if tier in ("local", "docker") else "no policy"
    return f"{where} execution, {rules} (timeout: {seconds}s)"


class PythonExecutionReq(Requirement):
    """The answer's Python code runs without an error (checked, not shown to the model).

    ``execution_tier`` as in :mod:`mellea.stdlib.tools` (default ``static``: parse and
    check imports only); ``max_output_chars`` also fails output longer than that. The
    deprecated ``timeout`` / ``allow_unsafe_execution`` / ``use_sandbox`` arguments are
    accepted as upstream maps them.
    """

    def __init__(
        self,
        execution_tier: ExecutionTier = "static",
        *,
        policy: CapabilityPolicy | None = None,
        allowed_imports: list[str] | None = None,
        max_output_chars: int | None = None,
        timeout: int | None = None,
        allow_unsafe_execution: bool = False,
        use_sandbox: bool = False,
    ) -> None:
        if isinstance(execution_tier, int):  # upstream's old first argument
            timeout, execution_tier = execution_tier, "static"
        if allow_unsafe_execution and execution_tier == "static":
            execution_tier = "local" if timeout is not None else "local_unsafe"
        if use_sandbox and execution_tier in ("static", "local_unsafe"):
            execution_tier = "local"  # ours: the sandbox is ours, not Docker
        if timeout is not None and execution_tier in ("local", "docker"):
            base = policy or (DOCKER_POLICY if execution_tier == "docker" else LOCAL_POLICY)
            policy = dataclasses.replace(base, timeout=timeout)
        if max_output_chars is not None and max_output_chars <= 0:
            raise ValueError(f"max_output_chars must be positive, got {max_output_chars}")
        self._tier = execution_tier
        self._policy = policy
        self._allowed_imports = allowed_imports
        self._max_output_chars = max_output_chars
        environment = make_execution_environment(
            execution_tier, policy=policy, allowed_imports=allowed_imports
        )
        if execution_tier == "local_unsafe":
            log.warning("PythonExecutionReq runs model-written code without a sandbox")
        note = ""
        if max_output_chars is not None and execution_tier != "static":
            note = f" Output limit: {max_output_chars} chars."
        super().__init__(
            description="The Python code should execute without errors "
            f"({_tier_label(execution_tier, policy)}).{note}",
            validation_fn=lambda ctx: _python_executes_without_error(
                ctx, environment, max_output_chars=self._max_output_chars
            ),
            check_only=True,
        )


__all__ = ["PythonExecutionReq"]
