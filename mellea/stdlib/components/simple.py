"""A component made of named text blocks."""

from __future__ import annotations

import json
from typing import Any

from mellea.core.base import CBlock, Component, Span
from mellea.core.thunk import ModelOutputThunk


class SimpleComponent(Component[str]):
    """Named blocks (``SimpleComponent(task="...", text="...")``) shown as a JSON object."""

    def __init__(self, **kwargs: Any) -> None:
        blocks: dict[str, Any] = {}
        for key, value in kwargs.items():
            if isinstance(value, str):
                value = CBlock(value)
            if not isinstance(value, CBlock | ModelOutputThunk | Component):
                raise TypeError(f"SimpleComponent {key!r} must be text, a block or a component")
            blocks[key] = value
        self._kwargs = blocks

    def parts(self) -> list[Span]:
        """The named blocks."""
        return list(self._kwargs.values())

    def format_for_llm(self) -> str:
        """The blocks as a JSON object of their texts."""
        from mellea.core.base import span_text

        return json.dumps({k: span_text(v) for k, v in self._kwargs.items()})

    def _parse(self, computed: ModelOutputThunk) -> str:
        return computed.value or ""
