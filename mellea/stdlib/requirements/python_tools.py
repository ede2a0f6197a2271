"""Requirements on generated Python code: present, parses, short output, allowed imports."""

from __future__ import annotations

import ast
from dataclasses import replace

from mellea.core.base import Context
from mellea.core.requirement import Requirement, ValidationResult
from mellea.stdlib.requirements.python_reqs import PythonExecutionReq, _has_python_code_listing
from mellea.stdlib.tools.execution_policy import LOCAL_POLICY, CapabilityPolicy, ExecutionTier
from mellea.stdlib.tools.interpreter import make_execution_environment


def _code(ctx: Context, purpose: str) -> tuple[str | None, ValidationResult | None]:
    found = _has_python_code_listing(ctx)
    if not found.as_bool() or not found.reason:
        return None, ValidationResult(
            False, reason=f"Could not extract code for {purpose}: {found.reason}"
        )
    return found.reason, None


class PythonCodeExtraction(Requirement):
    """The answer holds a Python code block."""

    def __init__(self) -> None:
        super().__init__(
            description="Code blocks are present and extractable.",
            validation_fn=_has_python_code_listing,
            check_only=True,
        )


class PythonSyntaxValid(Requirement):
    """The answer's code parses (``ast.parse``; nothing runs)."""

    def __init__(self) -> None:
        super().__init__(
            description="Python code is syntactically valid.",
            validation_fn=self._validate_syntax,
            check_only=True,
        )

    def _validate_syntax(self, ctx: Context) -> ValidationResult:
        code, failed = _code(ctx, "syntax validation")
        if failed is not None:
            return failed
        try:
            ast.parse(code or "")
        except SyntaxError as exc:
            return ValidationResult(False, reason=f"Syntax error at line {exc.lineno}: {exc.msg}")
        return ValidationResult(True, reason="Syntax is valid.")


class OutputSizeLimit(Requirement):
    """Running the code prints at most ``limit_chars`` characters (the ``static`` tier
    runs nothing and passes, as upstream)."""

    def __init__(
        self,
        limit_chars: int = 10_000,
        execution_tier: ExecutionTier = "static",
        policy: CapabilityPolicy | None = None,
        allowed_imports: list[str] | None = None,
    ) -> None:
        if limit_chars <= 0:
            raise ValueError(f"limit_chars must be positive, got {limit_chars}")
        self.limit_chars = limit_chars
        self.execution_tier = execution_tier
        self.policy = policy
        self.allowed_imports = allowed_imports
        super().__init__(
            description=f"Output does not exceed {limit_chars} characters.",
            validation_fn=self._validate_output_size,
            check_only=True,
        )

    def _validate_output_size(self, ctx: Context) -> ValidationResult:
        if self.execution_tier == "static":
            return ValidationResult(
                True, reason="Output size not checked (the static tier runs nothing)."
            )
        code, failed = _code(ctx, "output size validation")
        if failed is not None:
            return failed
        env = make_execution_environment(
            self.execution_tier, policy=self.policy, allowed_imports=self.allowed_imports
        )
        result = env.execute(code or "")
        if not result.success:
            return ValidationResult(
                False, reason=f"Code execution failed: {result.to_validationresult_reason()}"
            )
        size = len(result.stdout or "")
        if size > self.limit_chars:
            return ValidationResult(
                False, reason=f"Output size ({size} chars) exceeds limit ({self.limit_chars})."
            )
        return ValidationResult(
            True, reason=f"Output size ({size} chars) within limit ({self.limit_chars})."
        )


class ImportRestrictions(Requirement):
    """The code imports only ``allowed_imports`` (``None``: anything; ``[]``: nothing).
    A static check of import statements, not a security boundary."""

    def __init__(self, allowed_imports: list[str] | None = None) -> None:
        self.allowed_imports = allowed_imports
        names = "all" if allowed_imports is None else (", ".join(allowed_imports) or "none")
        super().__init__(
            description=f"Only imports from [{names}] are used.",
            validation_fn=self._validate_imports,
            check_only=True,
        )

    def _validate_imports(self, ctx: Context) -> ValidationResult:
        code, failed = _code(ctx, "import validation")
        if failed is not None:
            return failed
        if self.allowed_imports is None:
            return ValidationResult(True, reason="No import restrictions configured.")
        try:
            tree = ast.parse(code or "")
        except SyntaxError as exc:
            return ValidationResult(
                False, reason=f"Could not parse code for import analysis: {exc.msg}"
            )
        bad: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module] if node.module else [a.name for a in node.names]
            else:
                continue
            bad.update(
                m.split(".")[0] for m in modules if m.split(".")[0] not in self.allowed_imports
            )
        if bad:
            return ValidationResult(
                False, reason=f"Forbidden imports detected: {', '.join(sorted(bad))}"
            )
        return ValidationResult(True, reason="All imports are whitelisted.")


class NoImportRestrictions(Requirement):
    """Always passes: says that imports are not restricted."""

    def __init__(self) -> None:
        super().__init__(
            description="No import restrictions (all imports allowed).",
            validation_fn=lambda ctx: ValidationResult(
                True, reason="No import restrictions configured."
            ),
            check_only=True,
        )


def python_code_generation_requirements(
    allowed_imports: list[str] | None = None,
    output_limit_chars: int = 10_000,
    timeout_seconds: int = 5,
    use_sandbox: bool = False,
) -> list[Requirement]:
    """The four checks for generated code: extraction, syntax, execution (``static``
    tier; with ``use_sandbox`` the ``local`` tier, our sandbox, where upstream uses
    Docker), and the import rule."""
    if timeout_seconds <= 0:
        raise ValueError(f"timeout_seconds must be positive, got {timeout_seconds}")
    if output_limit_chars <= 0:
        raise ValueError(f"output_limit_chars must be positive, got {output_limit_chars}")
    tier: ExecutionTier = "local" if use_sandbox else "static"  # ours: our sandbox, not Docker
    policy = replace(LOCAL_POLICY, timeout=timeout_seconds) if use_sandbox else None
    reqs: list[Requirement] = [
        PythonCodeExtraction(),
        PythonSyntaxValid(),
        PythonExecutionReq(
            execution_tier=tier,
            policy=policy,
            allowed_imports=allowed_imports,
            max_output_chars=output_limit_chars,
        ),
    ]
    reqs.append(
        ImportRestrictions(allowed_imports)
        if allowed_imports is not None
        else NoImportRestrictions()
    )
    return reqs


__all__ = [
    "ImportRestrictions",
    "NoImportRestrictions",
    "OutputSizeLimit",
    "PythonCodeExtraction",
    "PythonSyntaxValid",
    "python_code_generation_requirements",
]
