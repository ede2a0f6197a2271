"""CONTRIBUTING.md's statements that code can check, checked: which module reads which
environment variable, the upward imports tests/unit/test_layers.py allows, and what each
folder under tests/ holds (as test_contributing_walk.py checks the walk)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.unit import test_layers

ROOT = Path(__file__).resolve().parents[2]
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
ENV_HEADING = "### What reads the environment"
NUMBERS = {"no": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5}


def section(text: str, heading: str) -> str:
    """The text under ``heading``, up to the next heading."""
    start = text.index(heading) + len(heading)
    end = text.find("\n#", start)
    return text[start : end if end != -1 else None]


# --- The environment -------------------------------------------------------------------


def _is_environ(node: ast.expr, aliases: set[str]) -> bool:
    """``os.environ`` itself, or a local name bound to it (``env = os.environ``)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id in aliases


def _read_argument(node: ast.AST, aliases: set[str]) -> ast.expr | None:
    """The variable-name expression of an environment read, if ``node`` is one:
    ``os.environ.get(X)``, ``os.getenv(X)``, ``os.environ[X]`` or ``X in os.environ``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        func = node.func
        if func.attr == "get" and _is_environ(func.value, aliases):
            return node.args[0]
        if func.attr == "getenv" and isinstance(func.value, ast.Name) and func.value.id == "os":
            return node.args[0]
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.ctx, ast.Load)
        and _is_environ(node.value, aliases)
    ):
        return node.slice
    if (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], ast.In)
        and _is_environ(node.comparators[0], aliases)
    ):
        return node.left
    return None


def _constants(tree: ast.Module) -> dict[str, str]:
    """The module's top-level string constants (``ISA_ENV = "MELLEA_CPU_ISA"``)."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    return found


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def environment_reads(root: Path) -> set[tuple[str, str]]:
    """Every (variable, module) pair of an environment read in the package at ``root``.

    A variable's name is a string, a module-level constant holding one, or, for a helper
    that reads the variable its caller names (``env_true(name)``), the string each call
    passes; the read counts in the caller's module. Anything else is reported as
    ``?<source>`` so that the table cannot miss it."""
    trees = {
        str(path.relative_to(root.parent)): ast.parse(path.read_text())
        for path in sorted(root.rglob("*.py"))
    }
    reads: set[tuple[str, str]] = set()
    helpers: set[str] = set()  # functions that read the variable named by their first argument
    for module, tree in trees.items():
        constants = _constants(tree)
        aliases = {
            target.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and _is_environ(node.value, set())
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        by_parameter = set()  # the reads that take their variable from a helper's caller
        for function in _functions(tree):
            for node in ast.walk(function):
                argument = _read_argument(node, aliases)
                if (
                    function.args.args
                    and isinstance(argument, ast.Name)
                    and argument.id == function.args.args[0].arg
                ):
                    helpers.add(function.name)
                    by_parameter.add(id(node))
        for node in ast.walk(tree):
            argument = _read_argument(node, aliases)
            if argument is None or id(node) in by_parameter:
                continue
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                reads.add((argument.value, module))
            elif isinstance(argument, ast.Name) and argument.id in constants:
                reads.add((constants[argument.id], module))
            else:
                reads.add((f"?{ast.unparse(argument)}", module))
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
                name = node.args[0]
                if node.func.id in helpers and isinstance(name, ast.Constant):
                    reads.add((str(name.value), module))
    return reads


ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]*)` \| ([^|]+) \|", re.MULTILINE)


def documented_reads(text: str) -> set[tuple[str, str]]:
    """The (variable, module) pairs of CONTRIBUTING's table: one row per variable, its
    reading modules in the second column."""
    pairs = set()
    for variable, modules in ROW.findall(section(text, ENV_HEADING)):
        pairs.update((variable, module) for module in re.findall(r"`([\w/]+\.py)`", modules))
    return pairs


def test_every_environment_read_below_the_cli_is_in_contributings_table() -> None:
    code = environment_reads(ROOT / "mellea")
    table = documented_reads(CONTRIBUTING.read_text())
    assert not {v for v, _ in code if v.startswith("?")}, "a read whose variable is not named"
    assert code - table == set(), "read by the code, missing from CONTRIBUTING's table"
    assert table - code == set(), "in CONTRIBUTING's table, read by no such module"


def test_the_scan_finds_each_form_of_read(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text(
        "import os\n"
        'NAME = "B_VAR"\n'
        'x = os.environ.get("A_VAR")\n'
        "y = os.getenv(NAME)\n"
        'z = "C_VAR" in os.environ\n'
        "def f(key):\n    env = os.environ\n    return env[key]\n"
        'w = os.environ[f"D_{x}"]\n'
    )
    (package / "b.py").write_text('from pkg.a import f\nf("E_VAR")\n')
    assert environment_reads(package) == {
        ("A_VAR", "pkg/a.py"),
        ("B_VAR", "pkg/a.py"),
        ("C_VAR", "pkg/a.py"),
        ("?f'D_{x}'", "pkg/a.py"),
        ("E_VAR", "pkg/b.py"),
    }


def test_the_table_is_read_by_variable_and_module() -> None:
    text = (
        f"{ENV_HEADING}\n\n| variable | read by | for |\n| --- | --- | --- |\n"
        "| `A_VAR` | `pkg/a.py`, `pkg/b.py` | this |\n## Next\n| `B_VAR` | `pkg/c.py` | x |\n"
    )
    assert documented_reads(text) == {("A_VAR", "pkg/a.py"), ("A_VAR", "pkg/b.py")}


# --- Upward imports --------------------------------------------------------------------

UPWARD = re.compile(r"the (\w+) upward imports?\s+`tests/unit/test_layers.py` allows")
PAIR = re.compile(r"`([\w/]+\.py)` -> `([\w.]+)`")


def documented_upward_imports(text: str) -> tuple[int, set[tuple[str, str]]]:
    """How many upward imports CONTRIBUTING says test_layers allows, and which it names."""
    match = UPWARD.search(text)
    assert match, "CONTRIBUTING no longer says which upward imports test_layers allows"
    start = text.rfind("\n- ", 0, match.start()) + 1  # the bullet it is in
    ends = [i for i in (text.find("\n- ", match.end()), text.find("\n\n", match.end())) if i != -1]
    paragraph = text[start : min(ends, default=len(text))]
    return NUMBERS[match.group(1)], set(PAIR.findall(paragraph))


def upward_import_problems(text: str, allowed: set[tuple[str, str]]) -> list[str]:
    """Where CONTRIBUTING's count or list of upward imports differs from ``allowed``."""
    count, named = documented_upward_imports(text)
    problems = []
    if count != len(allowed):
        problems.append(f"CONTRIBUTING counts {count}, test_layers allows {len(allowed)}")
    if named != allowed:
        problems.append(f"CONTRIBUTING names {sorted(named)}, test_layers {sorted(allowed)}")
    return problems


def test_contributing_names_the_upward_imports_test_layers_allows() -> None:
    assert upward_import_problems(CONTRIBUTING.read_text(), test_layers.ALLOWED) == []


def test_a_wrong_count_or_list_of_upward_imports_is_caught() -> None:
    text = "- x (`a/b.py` -> `c.d`): the one upward import `tests/unit/test_layers.py` allows.\n"
    assert upward_import_problems(text, {("a/b.py", "c.d")}) == []
    assert len(upward_import_problems(text, {("a/b.py", "c.d"), ("e/f.py", "g.h")})) == 2


# --- Test folders ----------------------------------------------------------------------


def row_for_tests(text: str) -> str:
    """The layout table's row for ``tests/``."""
    [row] = [line for line in text.splitlines() if line.startswith("| `tests/` |")]
    return row


def undescribed_folders(row: str, root: Path) -> list[str]:
    """The folders under ``root`` (``tests/``) that ``row`` does not name as ``name/``."""
    folders = sorted(
        p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
    )
    return [f for f in folders if f"`{f}/`" not in row]


def test_every_folder_under_tests_is_described() -> None:
    row = row_for_tests(CONTRIBUTING.read_text())
    assert undescribed_folders(row, ROOT / "tests") == []


def test_an_undescribed_folder_is_caught(tmp_path: Path) -> None:
    for name in ("unit", "e2e", "reliability", "__pycache__"):
        (tmp_path / name).mkdir()
    row = row_for_tests("| `tests/` | `unit/` (fast), `e2e/` (servers) |\n")
    assert undescribed_folders(row, tmp_path) == ["reliability"]
