"""Markdown shape requirements: the answer is a list, or a table (our own small
parser of the two block forms; upstream uses mistletoe)."""

from __future__ import annotations

import re

from mellea.core.base import Context
from mellea.core.requirement import Requirement, ValidationResult

_ITEM = re.compile(r"^(?:[-*+]|\d+[.)])\s+(.*)$")
_RULE_CELL = re.compile(r"^\s*:?-+:?\s*$")


def _text(ctx: Context) -> str | None:
    output = ctx.last_output()
    return output.value if output is not None else None


def as_markdown_list(ctx: Context) -> list[str] | None:
    """The items of the last output when it is one Markdown list (bulleted or numbered,
    items may continue on indented lines), else ``None``."""
    text = _text(ctx)
    if text is None or not text.strip():
        return None
    items: list[str] = []
    for line in text.strip().splitlines():
        if not line.strip():
            continue
        match = _ITEM.match(line)
        if match is not None and not line[0].isspace():
            items.append(match.group(1).strip())
        elif items and line[0].isspace():
            items[-1] = f"{items[-1]}\n{line.strip()}"
        else:
            return None
    return items or None


def _md_list(ctx: Context) -> ValidationResult:
    return ValidationResult(as_markdown_list(ctx) is not None)


def _cells(line: str) -> list[str] | None:
    line = line.strip()
    if "|" not in line:
        return None
    return [c.strip() for c in line.strip("|").split("|")]


def _md_table(ctx: Context) -> ValidationResult:
    """The whole output is one pipe table: a header, a ``---`` rule, then rows."""
    text = _text(ctx)
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    if len(lines) < 2:
        return ValidationResult(False)
    header, rule = _cells(lines[0]), _cells(lines[1])
    if header is None or rule is None or len(rule) != len(header):
        return ValidationResult(False)
    if not all(_RULE_CELL.match(c) for c in rule):
        return ValidationResult(False)
    return ValidationResult(all(_cells(line) is not None for line in lines[2:]))


is_markdown_list = Requirement(
    description="The response should be formatted as a Markdown list.",
    validation_fn=_md_list,
)
is_markdown_table = Requirement(
    description="The output should be formatted as a Markdown table.",
    validation_fn=_md_table,
)

__all__ = ["as_markdown_list", "is_markdown_list", "is_markdown_table"]
