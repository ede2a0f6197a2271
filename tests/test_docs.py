"""The Python in README.md and docs/*.md: every block compiles; self-contained ones run."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
# Blocks that need nothing but the package and the bundled model: run them.
RUNNABLE = {"library.md", "engine.md"}


def blocks() -> list[tuple[str, int, str]]:
    found = []
    for path in DOCS:
        for i, match in enumerate(BLOCK.finditer(path.read_text())):
            found.append((path.name, i, match.group(1)))
    return found


@pytest.mark.parametrize(("doc", "index", "code"), blocks(), ids=lambda v: str(v)[:20])
def test_block_compiles(doc, index, code):
    compile(code, f"{doc}[{index}]", "exec")


@pytest.mark.model
@pytest.mark.parametrize(
    ("doc", "index", "code"),
    [b for b in blocks() if b[0] in RUNNABLE],
    ids=lambda v: str(v)[:20],
)
def test_block_runs(doc, index, code):
    namespace: dict = {}
    exec(compile(code, f"{doc}[{index}]", "exec"), namespace)
    if "main" in namespace and asyncio.iscoroutinefunction(namespace["main"]):
        asyncio.run(namespace["main"]())


def test_benchmarks_summary_matches_its_data():
    """benchmarks/README.md's tables are what benchmarks/summary.json renders to."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import summary
    finally:
        sys.path.pop(0)
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    data = json.loads(summary.DATA.read_text())
    assert summary.splice(readme, summary.render(data)) == readme
