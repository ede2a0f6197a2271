"""Every name upstream mellea's examples import resolves at its path in our package.

The corpus is data: tests/compat/upstream_examples/examples.json, written by
collect.py there from a fetched copy of upstream (the examples are not copied). One
test per imported (module, name). Names we do not provide yet are listed below with
the reason; such a test is an expected failure, and a listed name that resolves
fails, so the list shrinks with each addition and cannot go stale.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

CORPUS = Path(__file__).parent / "upstream_examples" / "examples.json"

# "module:name" (name empty for `import module`) -> why we do not provide it yet.
EXPECTED_MISSING: dict[str, str] = {}


def _corpus() -> dict:
    return json.loads(CORPUS.read_text())


def _imported_names() -> dict[str, list[str]]:
    """``module:name`` -> the example paths that import it."""
    names: dict[str, list[str]] = {}
    for example in _corpus()["examples"]:
        for item in example["imports"]:
            key = f"{item['module']}:{item['name'] or ''}"
            names.setdefault(key, []).append(example["path"])
    return dict(sorted(names.items()))


IMPORTED = _imported_names()


def resolve(key: str) -> str | None:
    """None when ``from module import name`` (or ``import module``) works, else why not."""
    module_name, _, name = key.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        return f"import {module_name} fails: {exc}"
    if not name or name == "*" or hasattr(module, name):
        return None
    try:  # `from package import submodule`
        importlib.import_module(f"{module_name}.{name}")
    except ImportError:
        return f"{module_name} has no name {name!r}"
    return None


@pytest.mark.parametrize("key", list(IMPORTED))
def test_upstream_example_name_resolves(key: str) -> None:
    """The name imports at upstream's path (or is listed, with a reason, as missing)."""
    problem = resolve(key)
    if key in EXPECTED_MISSING:
        assert problem is not None, f"{key} now resolves: remove it from EXPECTED_MISSING"
        pytest.xfail(f"{EXPECTED_MISSING[key]}: {problem}")
    examples = ", ".join(IMPORTED[key])
    assert problem is None, f"{problem} (imported by {examples})"


def test_expected_missing_names_are_in_the_corpus() -> None:
    """Every listed name is one the corpus imports (no leftovers after a re-collect)."""
    assert sorted(set(EXPECTED_MISSING) - set(IMPORTED)) == []


def test_corpus_is_whole() -> None:
    """The data covers upstream's corpus: programs, their imports, the service rule."""
    corpus = _corpus()
    programs = [e for e in corpus["examples"] if e["is_program"]]
    assert len(programs) >= 140
    assert len(corpus["commit"]) == 40
    for example in programs:
        assert example["path"].startswith("docs/examples/")
        assert example["needs_service"] == bool(example["service_reasons"])
    assert any(e["needs_service"] for e in programs)
    assert any(not e["needs_service"] for e in programs)
