"""The session, the functional API, requirements and adapter functions import one way.

``functional`` and the adapter-function helpers sit on ``session``; ``session`` sits on
requirements, ``Instruction`` and the ``Intrinsic`` runner, none of which imports it.
Every import in these modules is at the top of the file, so the graph is what a reader
sees: an import moved into a function to hide a cycle fails here, and so does a cycle,
and so does a module that cannot be imported first in a fresh interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STDLIB = ROOT / "mellea" / "stdlib"

# The modules this file holds to its rules: the session and what it stands on or is
# stood on by (the functional API, requirements, Instruction, adapter functions).
SCANNED_FILES = [
    "session.py",
    "functional.py",
    "mobject_calls.py",
    "start_backend.py",
    "token_limit.py",
    "components/instruction.py",
    "components/genstub.py",
    *sorted(str(p.relative_to(STDLIB)) for p in (STDLIB / "requirements").rglob("*.py")),
    *sorted(str(p.relative_to(STDLIB)) for p in (STDLIB / "components/intrinsic").rglob("*.py")),
]

# Imports that may stay inside a function: ``(file, module)``, each for a heavy or
# optional dependency that should load only when used. None so far.
ALLOWED_NESTED: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement names (a ``from pkg import sub`` names ``pkg.sub`` too)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level or not node.module:
        return []
    return [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]


def nested_imports(root: Path, files: list[str]) -> list[str]:
    """``file:line module`` for each import not at the top level of its module."""
    found = []
    for name in files:
        path = root / name
        tree = ast.parse(path.read_text(), str(path))
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in top:
                modules = imported(node)[:1]
                if modules and (name, modules[0]) not in ALLOWED_NESTED:
                    found.append(f"{name}:{node.lineno} {modules[0]}")
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    """Each module under ``package`` -> the modules under it that it imports, wherever
    in the file the import stands (a lazy import is still a dependency)."""
    paths = {module_name(p): p for p in sorted(package.rglob("*.py"))}
    graph = {}
    for name, path in paths.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets.update(m for m in imported(node) if m in paths and m != name)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_every_import_is_at_the_top_of_its_file() -> None:
    assert nested_imports(STDLIB, SCANNED_FILES) == []


def test_no_cycle_runs_through_these_modules() -> None:
    scanned = {module_name(STDLIB / name) for name in SCANNED_FILES}
    assert [c for c in cycles(import_graph(STDLIB)) if scanned & set(c)] == []


def test_a_nested_import_is_found(tmp_path: Path) -> None:
    (tmp_path / "lazy.py").write_text(
        "import json\n\ndef f():\n    from mellea.stdlib import session\n"
        "\nclass C:\n    import os\n"
    )
    assert nested_imports(tmp_path, ["lazy.py"]) == [
        "lazy.py:4 mellea.stdlib",
        "lazy.py:7 os",
    ]


def test_a_cycle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


FIRST_IMPORTS = sorted(
    {module_name(STDLIB / name) for name in SCANNED_FILES}
    | {"mellea", "mellea.stdlib.components", "mellea.stdlib.components.chat"}
)


@pytest.mark.parametrize("module", FIRST_IMPORTS)
def test_each_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
