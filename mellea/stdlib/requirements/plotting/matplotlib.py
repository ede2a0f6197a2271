"""Requirements for generated matplotlib code: a headless backend, the plot saved to
the expected file, and matplotlib and numpy importable."""

from __future__ import annotations

import ast
import importlib.util

from mellea.core.base import Context
from mellea.core.requirement import Requirement, ValidationResult
from mellea.stdlib.requirements.python_reqs import _has_python_code_listing
from mellea.stdlib.requirements.python_tools import python_code_generation_requirements

HEADLESS_BACKENDS = {"Agg", "Cairo", "pdf", "svg", "pgf", "ps", "template"}


def _extract_code(ctx: Context) -> str | None:
    found = _has_python_code_listing(ctx)
    return found.reason if found.as_bool() else None


def _calls(code: str) -> list[ast.Call]:
    try:
        return [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)]
    except SyntaxError:
        return []


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _use_calls(code: str) -> list[ast.Call]:
    """``matplotlib.use(...)`` calls (also as ``mpl.use``)."""
    return [
        c
        for c in _calls(code)
        if isinstance(c.func, ast.Attribute)
        and c.func.attr == "use"
        and isinstance(c.func.value, ast.Name)
        and c.func.value.id in ("matplotlib", "mpl")
    ]


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


class MatplotlibHeadlessBackend(Requirement):
    """The code calls ``matplotlib.use()`` with a headless backend (``Agg`` ...)."""

    def __init__(self) -> None:
        super().__init__(
            description="Matplotlib is configured with a headless backend (Agg, Cairo, pdf, svg, pgf, etc.).",
            validation_fn=self._validate_headless_backend,
            check_only=True,
        )

    def _validate_headless_backend(self, ctx: Context) -> ValidationResult:
        code = _extract_code(ctx)
        if code is None:
            return ValidationResult(
                False, reason="Could not extract code for matplotlib backend validation."
            )
        calls = _use_calls(code)
        if not calls:
            return ValidationResult(
                False,
                reason="No matplotlib.use() call found; add matplotlib.use('Agg') before importing pyplot.",
            )
        backend = _literal(
            calls[0].args[0]
            if calls[0].args
            else next((k.value for k in calls[0].keywords if k.arg == "backend"), None)
        )
        if backend is None:
            return ValidationResult(
                False,
                reason="matplotlib.use() is given a non-literal backend; use a literal such as 'Agg'.",
            )
        known = {b.lower(): b for b in HEADLESS_BACKENDS}
        if backend.lower() in known:
            return ValidationResult(
                True, reason=f"Headless backend configured: {known[backend.lower()]}"
            )
        return ValidationResult(
            False,
            reason=f"Backend '{backend}' is not headless; use one of {', '.join(sorted(HEADLESS_BACKENDS))}",
        )


class PlotFileSaved(Requirement):
    """The code saves the plot with ``savefig(output_path)``."""

    def __init__(self, output_path: str) -> None:
        self.output_path = output_path
        super().__init__(
            description=f"Plot is explicitly saved to file using savefig('{output_path}').",
            validation_fn=self._validate_plot_saved,
            check_only=True,
        )

    def _validate_plot_saved(self, ctx: Context) -> ValidationResult:
        code = _extract_code(ctx)
        if code is None:
            return ValidationResult(
                False, reason="Could not extract code for plot file validation."
            )
        for call in _calls(code):
            if _name(call.func) != "savefig":
                continue
            args = [*call.args[:1], *(k.value for k in call.keywords if k.arg == "fname")]
            if any(_literal(a) == self.output_path for a in args):
                return ValidationResult(True, reason=f"Plot saved to {self.output_path}")
        return ValidationResult(
            False,
            reason=f"No savefig() call found with path '{self.output_path}'; add plt.savefig('{self.output_path}').",
        )


class PlotDependenciesAvailable(Requirement):
    """matplotlib and numpy can be imported here."""

    def __init__(self) -> None:
        super().__init__(
            description="matplotlib and numpy are importable.",
            validation_fn=self._validate_dependencies,
            check_only=True,
        )

    def _validate_dependencies(self, ctx: Context) -> ValidationResult:
        del ctx
        for module in ("matplotlib", "numpy"):
            if importlib.util.find_spec(module) is None:
                return ValidationResult(
                    False,
                    reason=f"Missing dependency: {module}. Install with: pip install {module}",
                )
        return ValidationResult(True, reason="All dependencies available (matplotlib, numpy).")


def python_plotting_requirements(
    output_path: str,
    allowed_imports: list[str] | None = None,
    output_limit_chars: int = 10_000,
    timeout_seconds: int = 5,
    use_sandbox: bool = False,
) -> list[Requirement]:
    """The code-generation checks plus the three plotting ones (seven in all)."""
    if not output_path.strip():
        raise ValueError("output_path cannot be empty or whitespace-only")
    reqs = python_code_generation_requirements(
        allowed_imports=allowed_imports,
        output_limit_chars=output_limit_chars,
        timeout_seconds=timeout_seconds,
        use_sandbox=use_sandbox,
    )
    return [
        *reqs,
        MatplotlibHeadlessBackend(),
        PlotFileSaved(output_path),
        PlotDependenciesAvailable(),
    ]


__all__ = [
    "HEADLESS_BACKENDS",
    "MatplotlibHeadlessBackend",
    "PlotDependenciesAvailable",
    "PlotFileSaved",
    "python_plotting_requirements",
]
