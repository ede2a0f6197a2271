"""Upstream's old module paths (each one import from the real module, listed in the
docs), and one class per name."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _statements(path: Path) -> list[ast.stmt]:
    """The module's statements but its docstring and ``__all__``."""
    body = ast.parse(path.read_text()).body
    return [
        node
        for node in body
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        and not (isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__")
    ]


def reexport_modules() -> dict[str, list[str]]:
    """Module name -> the modules it imports from, for every module of ours (but
    packages) that does nothing but import."""
    found = {}
    for path in sorted((ROOT / "mellea").rglob("*.py")):
        if path.name == "__init__.py":
            continue
        body = _statements(path)
        if body and all(isinstance(node, ast.Import | ast.ImportFrom) for node in body):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name] = [node.module or "" for node in body if isinstance(node, ast.ImportFrom)]
    return found


def test_each_old_path_is_one_import_from_a_module_that_holds_code():
    shims = reexport_modules()
    assert "mellea.stdlib.genslot" in shims  # the detection finds them
    for name, sources in shims.items():
        assert len(sources) == 1, f"{name} imports from {sources}: make it one import"
        assert sources[0] not in shims, f"{name} re-exports {sources[0]}, itself a re-export"


def test_each_old_path_is_listed_in_the_library_docs():
    docs = (ROOT / "docs" / "library.md").read_text()
    for name in reexport_modules():
        assert f"| `{name}` |" in docs, f"{name} is not in docs/library.md's table of paths"


def test_the_genslot_paths_give_genstubs_objects():
    genstub = importlib.import_module("mellea.stdlib.components.genstub")
    for path in ("mellea.stdlib.genslot", "mellea.stdlib.components.genslot"):
        module = importlib.import_module(path)
        assert module.generative is genstub.generative
        assert module.GenerativeSlot is genstub.GenerativeStub
        assert module.SyncGenerativeSlot is genstub.SyncGenerativeStub
        assert module.AsyncGenerativeSlot is genstub.AsyncGenerativeStub
        assert module.PreconditionException is genstub.PreconditionException


def test_no_two_classes_of_ours_share_a_name():
    """One name, one class (the engine's token-delta builder and the Responses output
    builder were both ``OutputBuilder``)."""
    where: dict[str, list[str]] = {}
    for path in sorted((ROOT / "mellea").rglob("*.py")) + sorted((ROOT / "cli").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}
