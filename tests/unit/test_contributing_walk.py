"""CONTRIBUTING.md walks one streamed chat request in at most ten steps, each naming a file
and a function in it: every one of them must exist, so the walk cannot go stale."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEADING = "### A streamed chat request, from the route to the frame and back"
STEP = re.compile(r"^(\d+)\. ", re.MULTILINE)
NAMED = re.compile(r"`([\w/]+\.py)`\s+`([\w.]+)`")


def walk_section(text: str) -> str:
    """The walk's section of CONTRIBUTING.md, up to the next heading."""
    start = text.index(HEADING) + len(HEADING)
    end = text.find("\n#", start)
    return text[start : end if end != -1 else None]


def named_functions(section: str) -> list[tuple[str, str]]:
    """Every ``file`` ``function`` pair the section names, in order."""
    return NAMED.findall(section)


def resolve(path: str, qualname: str) -> object:
    """The object ``qualname`` in the module at ``path`` (raises if either is missing)."""
    assert (ROOT / path).is_file(), f"{path} does not exist"
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    target: object = module
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def test_the_walk_has_at_most_ten_numbered_steps() -> None:
    section = walk_section((ROOT / "CONTRIBUTING.md").read_text())
    numbers = [int(n) for n in STEP.findall(section)]
    assert numbers == list(range(1, len(numbers) + 1)) and 5 <= len(numbers) <= 10


def test_every_step_names_a_file_and_function_that_exist() -> None:
    section = walk_section((ROOT / "CONTRIBUTING.md").read_text())
    steps = STEP.split(section)[2::2]  # each step's text
    for text in steps:
        assert NAMED.search(text), f"a step names no file and function: {text}"
    named = named_functions(section)
    assert len(named) >= len(steps)
    for path, qualname in named:
        assert callable(resolve(path, qualname)), f"{path} {qualname} is not a function"


def test_a_missing_name_is_caught() -> None:
    section = "1. `mellea/serve/frames.py` `no_such_function`: gone."
    [(path, qualname)] = named_functions(section)
    try:
        resolve(path, qualname)
    except AttributeError:
        return
    raise AssertionError("a name that does not exist was resolved")
