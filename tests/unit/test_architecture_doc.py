"""docs/architecture.md names files and functions; every one must exist, so the map
cannot drift from the code (as tests/unit/test_contributing_walk.py keeps the walk)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.test_contributing_walk import NAMED, resolve

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
# A file the page names: with its folder (`mellea/engine/core.py`) or, in the diagrams,
# relative to mellea/engine/ (`loader.py`, `formats/head.py`).
FILE = re.compile(r"(?<![\w./*-])((?:[\w-]+/)*[\w-]+\.(?:py|cpp|h|md))\b")
FOLDER = re.compile(r"`((?:mellea|cli|tests|benchmarks|docs)(?:/[\w-]+)*/)`")
ENGINE = ROOT / "mellea" / "engine"
NOT_FILES = {"llama.cpp", "my_program.py"}  # a project's name; the user's program


def named_files(text: str) -> set[str]:
    """Every file name the page mentions."""
    return set(FILE.findall(text)) - NOT_FILES


def exists(name: str) -> bool:
    """Whether ``name`` is a file of the repository, or of mellea/engine/ when it is
    written without a top-level folder (the diagrams' short names)."""
    return (ROOT / name).is_file() or (ENGINE / name).is_file() or (ROOT / "docs" / name).is_file()


def test_every_file_the_page_names_exists() -> None:
    text = DOC.read_text()
    missing = sorted(name for name in named_files(text) if not exists(name))
    assert missing == [], f"docs/architecture.md names files that do not exist: {missing}"
    folders = FOLDER.findall(text)
    assert folders, "the page names no folder"
    assert [f for f in folders if not (ROOT / f).is_dir()] == []


def test_every_file_and_function_pair_resolves() -> None:
    pairs = NAMED.findall(DOC.read_text())
    assert len(pairs) >= 10
    for path, qualname in pairs:
        resolve(path, qualname)  # raises if the file or the name is gone


def test_a_stale_name_is_caught() -> None:
    assert not exists("mellea/engine/quant.py")
    assert named_files("the diagram: quant.py  convert") == {"quant.py"}


def test_the_contributors_docs_point_inside_the_repository() -> None:
    """CONTRIBUTING.md and docs/ refer to no design file outside the repository."""
    pages = [ROOT / "CONTRIBUTING.md", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    outside = [p.name for p in pages if re.search(r"`\.\./[^`]*`|\]\(\.\./\.\./", p.read_text())]
    assert outside == []
    assert "docs/architecture.md" in (ROOT / "CONTRIBUTING.md").read_text()
