"""Dependencies point one way: cli -> mellea/serve -> mellea library -> backends -> core -> engine.

Every import in the source counts, those inside functions included (a lazy import is
still a dependency). ``mellea/__init__.py`` is the package's facade and may name any layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Top to bottom; a module may import its own layer and the layers below it.
LAYERS = [
    ("cli", ["cli"]),
    ("wire", ["mellea.serve"]),
    ("library", ["mellea.stdlib", "mellea.formatters"]),
    ("backends", ["mellea.backends"]),
    ("core", ["mellea.core", "mellea.plugins"]),
    ("engine", ["mellea.engine"]),
]

# Upward imports kept on purpose, each loaded on first use only.
ALLOWED = {
    # upstream exports SamplingStrategy from mellea.core; ours lives in the library layer
    ("mellea/core/__init__.py", "mellea.stdlib.sampling"),
    # upstream-style backends take a ChatContext of Messages, which live in the library
    ("mellea/core/backend.py", "mellea.stdlib.backend_bridge"),
}


def layer_of(module: str) -> int | None:
    """The index in ``LAYERS`` of the layer ``module`` belongs to (``None``: not ours)."""
    for index, (_, packages) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in packages):
            return index
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every absolute import in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, node.module)]
    return found


def sources() -> list[Path]:
    files = sorted((ROOT / "mellea").rglob("*.py")) + sorted((ROOT / "cli").rglob("*.py"))
    return [f for f in files if f != ROOT / "mellea" / "__init__.py"]


def upward_imports() -> list[str]:
    problems = []
    for path in sources():
        own = layer_of(module_name(path))
        if own is None:
            continue
        for line, module in imports_of(path):
            target = layer_of(module)
            allowed = (str(path.relative_to(ROOT)), module) in ALLOWED
            if target is not None and target < own and not allowed:
                where = f"{path.relative_to(ROOT)}:{line}"
                problems.append(
                    f"{where} ({LAYERS[own][0]}) imports {module} ({LAYERS[target][0]})"
                )
    return problems


def test_no_layer_imports_a_layer_above_it() -> None:
    assert upward_imports() == []


def test_the_engine_imports_nothing_else_of_mellea() -> None:
    outside = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / "mellea" / "engine").rglob("*.py"))
        for line, module in imports_of(path)
        if (module == "mellea" or module.startswith("mellea.")) and layer_of(module) != 5
    ]
    assert outside == []


@pytest.mark.parametrize(
    ("module", "layer"),
    [("cli.serve.app", 0), ("mellea.serve.frames", 1), ("mellea.core.parsers", 4), ("os", None)],
)
def test_layer_of(module: str, layer: int | None) -> None:
    assert layer_of(module) == layer


def test_an_upward_import_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan can fail: a core module importing the wire layer is reported."""
    fake = tmp_path / "mellea" / "core" / "bad.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("def f():\n    from mellea.serve.frames import DONE\n")
    (tmp_path / "cli").mkdir()
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert upward_imports() == ["mellea/core/bad.py:2 (core) imports mellea.serve.frames (wire)"]


# The web framework and the server belong to ``cli/serve``: the wire layer yields frames.
WEB_FRAMEWORKS = ("starlette", "fastapi", "sse_starlette", "uvicorn")


def framework_imports(root: Path) -> list[str]:
    """Every import of a web framework under ``root/mellea`` (its ``file:line module``)."""
    return [
        f"{path.relative_to(root)}:{line} imports {module}"
        for path in sorted((root / "mellea").rglob("*.py"))
        for line, module in imports_of(path)
        if module.split(".")[0] in WEB_FRAMEWORKS
    ]


def test_the_wire_layer_knows_no_web_framework() -> None:
    assert framework_imports(ROOT) == []


def test_a_framework_import_in_the_wire_layer_is_found(tmp_path: Path) -> None:
    fake = tmp_path / "mellea" / "serve" / "bad.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("def f():\n    from starlette.responses import Response\n")
    assert framework_imports(tmp_path) == ["mellea/serve/bad.py:2 imports starlette.responses"]


def test_no_two_serving_modules_share_a_name() -> None:
    """``cli/serve`` and ``mellea/serve`` name their modules for what they hold, each its own."""

    def names(folder: Path) -> set[str]:
        return {p.stem for p in folder.rglob("*.py") if p.stem != "__init__"} | {
            p.name for p in folder.rglob("*") if p.is_dir() and (p / "__init__.py").exists()
        }

    shared = names(ROOT / "cli" / "serve") & names(ROOT / "mellea" / "serve")
    assert shared == set()
